"""Named exceptions for every error a user can cause.

Each subclasses both ``StreamkError`` (catch-all for streamk) and the builtin
that best describes it, so ``except ValueError`` keeps working too.

Each class also carries ``exit_code``, the status the command line exits with when
the error reaches it (the README's "Limits and errors" lists them): 2 usage or a bad
argument, 3 a bad input file, 4 the index's state, 5 a damaged index, 6 a full disk,
7 a cluster or network failure. (1 is an internal error, a bug; 130 / 143 an
interrupt / termination; 141 a closed output pipe.)

And ``http_status``, the status the HTTP server (``streamk serve``) answers it with:
400 a bad request, 403 a read-only index, 404 an unknown id, 409 the index's state,
413 an image over a limit, 422 an image that cannot be described, 500 a damaged index,
502 a cluster failure, 503 a retrain in progress or a served index replaced under the
server, 507 a full disk.
"""


class StreamkError(Exception):
    """Base class of all streamk errors."""

    exit_code = 2
    http_status = 400


class EmptyDescriptorSetError(StreamkError, ValueError):
    """A descriptor set has no descriptors (e.g. an image with no features)."""

    exit_code = 3
    http_status = 422


class NonFiniteError(StreamkError, ValueError):
    """An input array holds NaN or infinite values."""

    exit_code = 3
    http_status = 400


class DimensionError(StreamkError, ValueError):
    """An input array has the wrong shape or dimensionality."""

    exit_code = 2
    http_status = 400


class NotFittedError(StreamkError, RuntimeError):
    """A learned component was used before ``fit``."""

    exit_code = 2
    http_status = 400


class ConfigError(StreamkError, ValueError):
    """An invalid parameter or configuration value."""

    exit_code = 2
    http_status = 400


class EncoderFileError(StreamkError, ValueError):
    """A saved encoder file is missing, corrupt or of an unknown format."""

    exit_code = 3
    http_status = 422


class EncoderMismatchError(StreamkError, ValueError):
    """Data encoded with one encoder is used with another."""

    exit_code = 4
    http_status = 409


class UnknownDatasetError(StreamkError, ValueError):
    """A dataset name that streamk does not know."""

    exit_code = 2
    http_status = 400


class GroundTruthError(StreamkError, ValueError):
    """A ground-truth file is missing, malformed or inconsistent with the image list."""

    exit_code = 3
    http_status = 422


class UnsafePickleError(StreamkError, ValueError):
    """A pickle asks for a global outside the small allowed set (refused, not executed)."""

    exit_code = 3
    http_status = 422


class DownloadError(StreamkError, OSError):
    """A dataset file could not be fetched."""

    exit_code = 7
    http_status = 502


class ChecksumError(DownloadError):
    """A downloaded file has the wrong size or SHA-256; it was deleted, nothing extracted."""

    exit_code = 7
    http_status = 502


class UnsafeArchiveError(StreamkError, ValueError):
    """An archive member would be written outside the destination (absolute path, '..', link)."""

    exit_code = 3
    http_status = 422


class RankingError(StreamkError, ValueError):
    """A ranking is malformed: wrong number of queries, index out of range, repeated image."""

    exit_code = 2
    http_status = 400


class ImageReadError(StreamkError, ValueError):
    """An image file is missing, unreadable, empty, truncated, not an image, or a directory.

    ``path`` and ``reason`` are kept as attributes.
    """

    exit_code = 3
    http_status = 422

    def __init__(self, path, reason):
        self.path = str(path)
        self.reason = str(reason)
        super().__init__(f"cannot read image {printable(self.path)}: {self.reason}")

    def __reduce__(self):  # keep (path, reason) across process boundaries
        return (type(self), (self.path, self.reason))


class DescriptorFileError(StreamkError, ValueError):
    """A descriptor file (.siftgeo, .fvecs, .bvecs, .ivecs, .npy) is malformed or unreadable,
    or an array cannot be stored in the requested format."""

    exit_code = 3
    http_status = 422


class ExtractorUnavailableError(StreamkError, ImportError):
    """A feature extractor's library (pyhesaff, OpenCV, Pillow) is not installed or is broken."""

    exit_code = 2
    http_status = 400


class DatasetImageError(StreamkError, ValueError):
    """Images of an evaluation dataset are missing or unreadable."""

    exit_code = 3
    http_status = 422


class OutputFileError(StreamkError, OSError):
    """A file streamk was asked to write (an encoder, a vocabulary, a descriptor file), or a
    folder it was asked to make (an index, a backup), cannot be written at that path: no such
    folder, a directory (or a file) there, no permission, a read-only file system. Nothing was
    written (an existing file there is unchanged); give a path in a folder you can write to.
    ``path`` is kept."""

    exit_code = 2
    http_status = 400

    def __init__(self, message, path=None):
        super().__init__(message)
        self.path = None if path is None else str(path)

    def __reduce__(self):
        return (type(self), (self.args[0] if self.args else "", self.path))


# --------------------------------------------------------------- streaming index (store.py, index.py)
class NotAnIndexError(StreamkError, ValueError):
    """A path that is not a streamk index (no such directory, no LMDB data, or no streamk metadata)."""

    exit_code = 4
    http_status = 500


class IndexFormatError(StreamkError, ValueError):
    """A streamk index written in a format version this streamk does not read."""

    exit_code = 4
    http_status = 409


class IndexExistsError(StreamkError, FileExistsError):
    """Creating an index where a non-empty directory (or a file) already is."""

    exit_code = 4
    http_status = 409


class InvalidIdError(StreamkError, ValueError):
    """An image id that is not a str of 1..200 characters without '/', '\\\\' or control
    characters (or is '.' / '..', or over LMDB's 511-byte key limit in UTF-8)."""

    exit_code = 2
    http_status = 400


class DuplicateError(StreamkError, ValueError):
    """The same content (image bytes, descriptor set or vector) is already indexed under
    another id; nothing was written. ``id`` and ``existing_id`` are kept as attributes."""

    exit_code = 4
    http_status = 409

    def __init__(self, id, existing_id, verb="add"):
        self.id = id
        self.existing_id = existing_id
        self.verb = verb
        super().__init__(f"cannot {verb} {id!r}: the same content is already indexed as {existing_id!r}")

    def __reduce__(self):
        return (type(self), (self.id, self.existing_id, self.verb))


class IdExistsError(StreamkError, ValueError):
    """An id already in the index holds other content (use ``update`` to replace it)."""

    exit_code = 4
    http_status = 409


class UnknownIdError(StreamkError, LookupError):
    """An id that is not in the index (remove, update, lookup)."""

    exit_code = 4
    http_status = 404


class ReadOnlyIndexError(StreamkError, PermissionError):
    """A write to an index opened with readonly=True, or an index whose folder cannot be
    written (a read-only file system, no permission): the message says what still works."""

    exit_code = 4
    http_status = 403


class IndexClosedError(StreamkError, RuntimeError):
    """A use of an index object after its ``close()`` (or its ``with`` block): open it again."""

    exit_code = 4
    http_status = 409


class TooFewImagesError(StreamkError, ValueError):
    """Training (e.g. product quantisation, 256 centroids) needs more indexed images."""

    exit_code = 4
    http_status = 409


class ZeroVectorError(StreamkError, ValueError):
    """A vector of zero norm cannot be L2-normalised and indexed."""

    exit_code = 3
    http_status = 400


class TrainingInProgressError(StreamkError, RuntimeError):
    """Another process is (re)training the index's codec right now."""

    exit_code = 4
    http_status = 503


class IndexReplacedError(StreamkError, RuntimeError):
    """The index a program keeps open (``streamk serve``) is no longer the one at its path:
    moved away, deleted, or replaced (a backup moved into its place) while it ran. Nothing
    more is read from or written to the old files; restart the program to open the index
    that is there now."""

    exit_code = 4
    http_status = 503


class IndexChangedError(StreamkError, RuntimeError):
    """The index took or lost images during a pass over all of it that must see one state
    (``streamk index export``): nothing was written; run it again when no one writes to the
    index, or on a backup of it (``streamk index backup``: one consistent copy)."""

    exit_code = 4
    http_status = 409



# --------------------------------------------------------------- second stage (streamk.verification)
class GeometryRecordError(StreamkError, ValueError):
    """A local-geometry record (one image's visual words, signatures and keypoint frames) is
    truncated, damaged (checksum), of an unknown format version or internally inconsistent."""

    exit_code = 5
    http_status = 500


class VocabularyFileError(StreamkError, ValueError):
    """Saved visual-word vocabulary bytes are missing, corrupt or of an unknown format."""

    exit_code = 3
    http_status = 422


# --------------------------------------------------------------- index storage: damage, disk full
class IndexCorruptError(StreamkError, ValueError):
    """An index whose files are damaged: a truncated ``data.mdb`` (a partial copy), a page or
    block whose checksum does not match, a damaged B-tree. The message names the index and
    what is damaged (``path``, ``rows`` and ``what``, the damage alone, are kept as attributes)
    and what to do: run ``streamk index verify --repair`` where it rebuilds that damage, else
    restore a copy (``streamk index backup`` makes them)."""

    exit_code = 5
    http_status = 500

    def __init__(self, message, path=None, rows=None, what=None):
        self.path = None if path is None else str(path)
        self.rows = rows
        self.what = what
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.args[0] if self.args else "", self.path, self.rows, self.what))


class DiskFullError(StreamkError, OSError):
    """A write that found no room: no space left on the disk (ENOSPC), the file size limit,
    or the index's map size at its limit. Nothing of that write was stored; free space (or
    raise the limit) and run it again. ``path`` and ``needed`` (bytes, an estimate) are kept."""

    exit_code = 6
    http_status = 507

    def __init__(self, message, path=None, needed=None):
        super().__init__(message)
        self.errno = 28  # ENOSPC (str() stays the message: no strerror / filename set)
        self.path = None if path is None else str(path)
        self.needed = needed

    def __reduce__(self):
        return (type(self), (self.args[0] if self.args else "", self.path, self.needed))


# --------------------------------------------------------------- limits, interruptions, stale codec (issue 17)
class ImageTooLargeError(ImageReadError):
    """An image file over one of the limits of :mod:`streamk.features.images` (file size,
    decoded pixels): refused before it is read or decoded. ``limit`` names the limit
    (``"max_file_size"`` or ``"max_pixels"``); the message says how to raise it."""

    exit_code = 3
    http_status = 413

    def __init__(self, path, reason, limit=None):
        self.limit = limit
        super().__init__(path, reason)

    def __reduce__(self):
        return (type(self), (self.path, self.reason, self.limit))

# --------------------------------------------------------------- metadata, filters (streamk.index.metadata)
class MetadataError(StreamkError, ValueError):
    """An image's metadata is not a JSON object of at most 64 KB (string keys; strings,
    numbers, booleans, null, lists and objects as values; no NaN), a value of an indexed
    field cannot be indexed, or a metadata file (JSON lines) is malformed."""

    exit_code = 3
    http_status = 400


class FilterError(ConfigError):
    """A search filter (``where=``) that does not follow the filter grammar, or names a
    field that is not indexed."""

    exit_code = 2
    http_status = 400


class Terminated(BaseException):
    """SIGTERM, raised in the main thread by the handler :func:`streamk.cli` installs for
    commands that stop cleanly on it (``streamk ingest``): like KeyboardInterrupt for
    SIGINT, a BaseException, so that no ``except Exception`` swallows it."""

    exit_code = 143  # 128 + SIGTERM


class IngestInterruptedError(StreamkError, RuntimeError):
    """A one-shot ingestion stopped by SIGINT or SIGTERM: what was encoded is committed
    (``stats``), ``left`` files were not ingested (``left_exact`` False: at least that
    many, the walk was not finished); the same command resumes. ``exit_code`` is 130
    (SIGINT) or 143 (SIGTERM)."""

    def __init__(self, message, stats=None, left=None, left_exact=True, exit_code=130):
        super().__init__(message)
        self.stats = stats
        self.left = left
        self.left_exact = left_exact
        self.exit_code = exit_code

    def __reduce__(self):
        return (type(self), (self.args[0] if self.args else "", None, self.left, self.left_exact, self.exit_code))


class FewRNImagesWarning(UserWarning):
    """RN (the PCA rotation of image vectors) learned on fewer image vectors than the
    components it rotates onto: a PCA of N vectors determines at most N - 1 of them (the
    rest is an arbitrary orthonormal completion), and a rotation learned on few images
    hurts retrieval (:meth:`streamk.Encoder.fit_rn_vectors` says the number)."""


class IgnoredSearchParameterWarning(UserWarning):
    """A search parameter given that the search cannot use: ``nprobe`` (IVF lists visited)
    or ``rerank`` (PQ candidates re-scored) on an exact search, as every search of an index
    without a trained codec is (``streamk index train`` makes one)."""


class DamagedRecordWarning(UserWarning):
    """A search met stored local-geometry records that fail their checks (damage): those
    images stayed unverified, at their first-stage rank (``why`` "damaged"), and the search
    went on. One warning per search names them and says what to do (``streamk index verify
    --repair`` drops them, or restore a copy)."""


class StaleCodecWarning(UserWarning):
    """A PQ / IVF-PQ search with a codec trained on far fewer images than were added since
    (more than :data:`streamk.index.retraining.STALE_CODEC_RATIO` times as many): images it
    never saw may be missed; ``streamk index train`` retrains it (searches go on).
    ``staleness``: the figures (:meth:`StreamingIndex.codec_staleness`)."""

    staleness = None


# --------------------------------------------------------------- cluster (streamk.parallel)
class ClusterError(StreamkError, ConnectionError):
    """A Dask scheduler address that is malformed (unknown protocol, no port) or that
    does not answer in time (refused, unknown host, no reply within the connect timeout,
    ``STREAMK_DASK_TIMEOUT`` seconds, default 10). ``address`` is kept as an attribute."""

    exit_code = 7
    http_status = 502

    def __init__(self, message, address=None):
        super().__init__(message)
        self.address = address

    def __reduce__(self):
        return (type(self), (self.args[0] if self.args else "", self.address))


class WorkerCrashedError(StreamkError, RuntimeError):
    """A worker process died on an item twice (a crash in a native library, an OOM kill):
    the item was not used (streamk.parallel's ``CRASHED``)."""

    exit_code = 3
    http_status = 422


def printable(text):
    """``text`` (e.g. a file name) safe on one line of a report: control characters
    escaped as ``repr`` escapes them (``\\n``, ``\\t``, ``\\x1b``) and the bytes of a name
    that is not valid UTF-8 (``os.fsdecode``'s lone surrogates) as ``\\xNN``."""
    text = str(text)
    if text.isprintable():
        return text
    out = []
    for c in text:
        o = ord(c)
        if 0xDC80 <= o <= 0xDCFF:  # surrogateescape: one undecodable byte of the name
            out.append(f"\\x{o - 0xDC00:02x}")
        elif c.isprintable() or c == " ":
            out.append(c)
        else:
            out.append(repr(c)[1:-1])
    return "".join(out)


def error_code(name):
    """'ImageReadError' -> 'image_read': the stable code of an error class (its name in
    snake case, without "Error"), as the HTTP server answers it and ``streamk search
    --server`` reads it back."""
    base = name[:-5] if name.endswith("Error") else name
    out = []
    for i, c in enumerate(base):
        if c.isupper() and i and (not base[i - 1].isupper() or (i + 1 < len(base) and base[i + 1].islower())):
            out.append("_")
        out.append(c.lower())
    return "".join(out)


def describe(exc):
    """One line saying what went wrong: ``"ErrorType: reason"`` (an ImageReadError's
    reason without its path, which the caller reports beside it)."""
    reason = exc.reason if isinstance(exc, ImageReadError) else (str(exc) or repr(exc))
    return f"{type(exc).__name__}: {' '.join(reason.split())}"

"""Bulk, resumable ingestion of image files into a :class:`~streamk.index.StreamingIndex`.

    with StreamingIndex.open("my.index") as idx, Ingester(idx, workers=None) as ing:
        stats = ing.ingest(["photos/", "extra.jpg"])     # or Ingester(idx, dask="tcp://host:8786")
        print(stats.summary())

What it does, per pass over the given files and folders, as a stream (files are
sent to the workers as they are found, a bounded number at a time):

1. **Walk.** Folders are walked recursively (sorted, symlinked folders not
   followed); a file is an image candidate when its extension is one of
   :data:`IMAGE_EXTENSIONS` (case-insensitive). A *directory* whose name looks
   like an image (``photos.jpg/``), found in a folder or given explicitly, is
   reported as a bad file ("is a directory") and not descended into. A file given explicitly is always a
   candidate, whatever its extension.
2. **Ids.** A file found under a folder ROOT gets the id ``relpath(file, ROOT)``
   with the path separator replaced by ``"__"`` (``ROOT/a/b.jpg`` -> ``a__b.jpg``);
   a file given explicitly gets its base name (``x/y/c.png`` -> ``c.png``).
   A name that is not valid UTF-8, or holds control characters (a newline), keeps
   them as ``%XX`` of their bytes (``caf\xe9.jpg`` -> ``caf%E9.jpg``): every file
   can be ingested, and its id is plain text in keys, reports and JSON.
   An id over the store's length (200 characters, 511 bytes: a deep folder, a long
   file name) is shortened to a digest of the whole id and its end:
   ``<16 hex digits of its sha256>~<the last characters>`` (:func:`id_for`), so that
   every file has an id and two long paths that end alike do not share one.
   Ids are checked with the store's rules (:func:`streamk.index.store.validate_id`:
   1..200 characters, no control characters, ...); a file whose id is invalid is
   reported and skipped. Two files mapping to the same id (``a/b.jpg`` and
   ``a__b.jpg``) cannot both be stored: the second is reported (IdExistsError).
3. **Known ids and known bytes (resumable).** The ids of each group of found files
   are looked up in one short read transaction. A file whose id is new is hashed
   here and its content looked up too (:meth:`~streamk.index.Index.content_holders`):
   bytes stored under another id (a copy of a stored file) are reported as such
   (counted in ``same_content``) without being described; so are the bytes of a new file
   sent earlier in the same pass (a photo copied under two names): the copy is held until
   that file is written, then reported with its id (when that file is not stored -- a bad
   image -- the copy is described after the walk, as any file). A file whose id is already
   stored is only *hashed* by its worker (no extraction): same content (the stored sha256) is
   counted as *skipped existing*, other content is reported as failed
   (IdExistsError) -- nothing already stored is ever touched, except by a watch: a
   file it found in the index and saw change since (size, mtime), or a file whose image was
   added from it (the record's source) and whose size or mtime are not the stored metadata's
   (changed while no watch ran; their metadata read in one go per group), is described
   again and, when its bytes differ, replaces its image's content (``updated``). This is what
   makes a resumed run cheap; it keeps no state outside the index and sees a
   file whose content changed under its old name.
4. **Read, hash, extract, encode** in a worker (the local crash-isolating
   process pool of :mod:`streamk.parallel`, or a Dask cluster):
   the worker reads the file once, hashes those bytes, takes the features from
   the feature cache when one is given (or extracts and stores them), and
   encodes (with temb k=64 encoding costs ~10x the extraction). The sha256
   stored is that of the very bytes the features came from. An image that
   kills its worker is retried alone in a fresh process and reported as
   WorkerCrashedError only if it kills that one too.
5. **Write** in this single process, ``batch_size`` images per LMDB write
   transaction (or sooner, every ``commit_interval`` seconds), through the same
   checks as :meth:`StreamingIndex.add`: each image is either fully stored or
   not at all; content already stored under another id (a copy of a file, or
   the same content twice in this run) is not added: each such file is reported
   with the id that holds its bytes, and counted apart (``same_content``). A
   crash loses at most the uncommitted batch -- the next run skips everything
   committed.

Each bad file (unreadable, empty, truncated, corrupt, not an image, a directory,
no local features, invalid id, over a size limit, ...) is reported with its reason
and skipped.

Interruptions: SIGINT (Ctrl-C) or SIGTERM (``streamk ingest`` raises
:class:`~streamk.errors.Terminated` for it) during a one-shot :func:`run_ingest`
commits what was already encoded and raises
:class:`~streamk.errors.IngestInterruptedError`, which says what was added and how
many files were not ingested (the rest of the walk is counted for at most
:data:`COUNT_LEFT_SECONDS`); the same command resumes. In watch mode either signal
ends the watch cleanly, after committing what was encoded (:attr:`Ingester.stopped_left`:
the files of a poll it cut short that were not ingested). A signal takes effect
between images (:class:`_SafePoints`): at once while waiting on worker processes,
after the image in hand when encoding runs in this process (``workers=1``).


Metadata. Each image added gets its file's metadata (path, folder, name, size, mtime,
EXIF date: :func:`streamk.features.file_metadata`, computed by the worker from the bytes
it read) and the fields a metadata file gives it (``--metadata FILE.jsonl``: one JSON
object per line, ``{"id": ..., fields...}`` or ``{"path": ..., fields...}``; the file's
fields win). An image already stored with the same content gets the file's fields merged
into its metadata.

Near-duplicates (``on_duplicate``). "keep" (default): nothing is looked up. "skip" / "report":
before each batch is written, each new image's nearest stored image (and the images before
it in the batch) is looked up (:func:`streamk.index.nearest_of_vectors`); at or above the
threshold it is a near-duplicate: "skip" leaves it out (counted as a near-duplicate),
"report" adds it and reports the pair. Either way ``stats.near_duplicates`` lists
(path, id, existing id, score).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any


from ..errors import (ConfigError, DiskFullError, DuplicateError, IngestInterruptedError, MetadataError, StreamkError,
                      Terminated, TooFewImagesError, TrainingInProgressError, describe, printable)
from ..features import FeatureCache
from ..index import (DEFAULT_DUPLICATE_THRESHOLD, DUPLICATE_POLICIES, MAX_METADATA_BYTES, encode_metadata,
                     image_content_key, nearest_of_vectors)
from ..parallel import make_executor
from ..index import MAX_ID_CHARS, MAX_KEY_BYTES, ImageRecord, normal_form, validate_id
from .tasks import ingest_task, results, task_context

if TYPE_CHECKING:
    PathLike = str | os.PathLike[str]

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".gif", ".tif", ".tiff",
                              ".webp", ".ppm", ".pgm", ".pbm", ".pnm",
                              ".heic", ".heif", ".avif"})  # phones' photos (pillow-heif); AVIF (Pillow)
MAX_BATCH_SIZE = 4096  # images per write transaction, at most (each is held in memory until written)
LOOKUP_CHUNK = 64  # found files whose ids are looked up in one read transaction
COUNT_LEFT_SECONDS = 2.0  # after an interruption, time spent counting the files the walk had not reached


def is_image_name(name):
    return os.path.splitext(str(name))[1].lower() in IMAGE_EXTENSIONS


def id_for(path, root=None):
    """The image id of ``path`` found under folder ``root`` (None: given explicitly);
    undecodable bytes and control characters as ``%XX`` (see the module doc), in Unicode's
    composed form (NFC: a name macOS wrote decomposed is the id typed)."""
    path = os.fsdecode(path)
    if root is None:
        return _fitted_id(normal_form(_text_id(os.path.basename(os.path.normpath(path)))))
    rel = os.path.relpath(path, os.fsdecode(root))
    return _fitted_id(normal_form(_text_id(rel.replace(os.sep, "__").replace("/", "__"))))


def _fitted_id(image_id):
    """``image_id`` when the store takes its length, else ``<digest>~<its end>``: 16 hex
    digits of the sha256 of the whole id, then as many of its last characters as fit (the
    file name is at the end)."""
    if len(image_id) <= MAX_ID_CHARS and len(image_id.encode("utf-8")) <= MAX_KEY_BYTES:
        return image_id
    head = hashlib.sha256(image_id.encode("utf-8")).hexdigest()[:16] + "~"
    tail = image_id[-(MAX_ID_CHARS - len(head)):]
    while len(tail.encode("utf-8")) > MAX_KEY_BYTES - len(head):  # wide characters: fewer of them
        tail = tail[1:]
    return head + tail


def _text_id(name):
    """``name`` with each byte that is not valid UTF-8 (a lone surrogate from
    os.fsdecode) and each control character written as ``%XX`` of its bytes."""
    if name.isprintable():
        return name
    out = []
    for c in name:  # per file name, not per descriptor
        o = ord(c)
        if 0xDC80 <= o <= 0xDCFF:
            out.append(f"%{o - 0xDC00:02X}")
        elif c.isprintable() or c == " ":
            out.append(c)
        else:
            out.append("".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass")))
    return "".join(out)


def as_roots(roots):
    """A list of the files and folders ``roots`` names: one path (a str, bytes or
    os.PathLike: one root, not its characters) or an iterable of them."""
    return [roots] if isinstance(roots, (str, bytes, os.PathLike)) else list(roots)


def iter_scan(roots):
    """Yield ``(path, id, None)`` for each image candidate and ``(path, None, reason)`` for
    each bad entry, in a stable order, as the folders are walked (lazily)."""
    for root in as_roots(roots):
        root = str(root)
        if os.path.isdir(root) and is_image_name(os.path.normpath(root)):
            yield root, None, "ImageReadError: is a directory"
        elif os.path.isdir(root):
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                keep = []
                for d in dirnames:
                    full = os.path.join(dirpath, d)
                    if is_image_name(d):
                        yield full, None, "ImageReadError: is a directory"
                    elif not os.path.islink(full):
                        keep.append(d)
                dirnames[:] = keep
                for name in sorted(filenames):
                    if is_image_name(name):
                        full = os.path.join(dirpath, name)
                        yield full, id_for(full, root), None
        elif os.path.lexists(root):
            yield root, id_for(root), None
        else:
            yield root, None, "ImageReadError: no such file or directory"


def scan(roots):
    """([(path, id)], [(path, reason)]): image candidates and bad entries, in a stable order."""
    found, bad = [], []
    for path, image_id, reason in iter_scan(roots):
        (bad.append((path, reason)) if reason is not None else found.append((path, image_id)))
    return found, bad


@dataclass
class IngestStats:
    added: int = 0
    existing: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # path -> "ErrorType: reason"
    added_ids: list[str] = field(default_factory=list)
    seconds: float = 0.0
    processed: int = 0  # files looked at (for the rate)
    near_duplicates: list[tuple[str, str, str, float]] = field(default_factory=list)  # (path, id, existing id, score)
    skipped_near_duplicates: int = 0
    same_content: int = 0  # files not added: their bytes are already indexed under another id (each reported)
    updated: int = 0  # watch: files overwritten while watched, their image's content replaced
    stopped_by: str | None = None  # watch: "SIGINT" or "SIGTERM" when a signal ended it (a clean stop)

    @property
    def n_failed(self) -> int:
        return len(self.failed)

    def summary(self, updates: bool = False) -> str:
        """One line of counts; ``updates``: say the updated count even when it is 0 (a watch)."""
        rate = self.processed / self.seconds if self.seconds > 0 else 0.0
        near = (f", {self.skipped_near_duplicates} near-duplicates skipped" if self.skipped_near_duplicates
                else f", {len(self.near_duplicates)} near-duplicates" if self.near_duplicates else "")
        same = f" and {self.same_content} with the bytes of another id" if self.same_content else ""
        updated = f", updated {self.updated}" if updates or self.updated else ""
        return (f"added {self.added}{updated}, skipped {self.existing} existing{same}{near}, failed {self.n_failed} "
                f"({self.seconds:.1f} s, {rate:.2f} images/s)")


class _signals_deferred:
    """SIGINT and SIGTERM held back (blocked) in the main thread while inside, delivered
    on the way out: an interruption lands before or after a commit and its accounting,
    never between them. Elsewhere (another thread, no pthread_sigmask): nothing."""

    def __enter__(self):
        import signal
        import threading

        self._blocked = False
        if hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread():
            self._old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            self._blocked = True
        return self

    def __exit__(self, *exc):
        import signal

        if self._blocked:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old)


class _SafePoints:
    """While inside (main thread only): the Python handlers of SIGINT and SIGTERM (Python's
    KeyboardInterrupt, the CLI's Terminated, a notebook's) run only where an exception
    leaves nothing half-done. A signal is noted, and its handler is called at the next
    :meth:`check` -- or at once while :meth:`interruptible` (waiting on worker processes).

    Why: an exception raised by a handler at an arbitrary bytecode lands inside an
    encoding in this process (Numba then turns it into a SystemError, reported as a
    failed image) or between a commit and its accounting (a wrong count said)."""

    def __init__(self):
        self._old = {}
        self._pending = None
        self._interruptible = False

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handler = signal.getsignal(sig)
                if callable(handler):  # SIG_DFL / SIG_IGN: nothing of Python's runs, nothing to defer
                    self._old[sig] = handler
                    signal.signal(sig, self._noted)
        return self

    def __exit__(self, *exc):
        import signal

        old, self._old = self._old, {}
        for sig, handler in old.items():
            signal.signal(sig, handler)
        signum, self._pending = self._pending, None
        if exc[0] is None and signum is not None:
            old[signum](signum, None)  # a signal noted after the last safe point is not lost

    def _noted(self, signum, frame):
        if self._interruptible:
            self._old[signum](signum, frame)
        elif self._pending is None:
            self._pending = signum

    def check(self):
        """A safe point: the handler of a signal noted since runs here (and may raise)."""
        signum, self._pending = self._pending, None
        if signum is not None:
            self._old[signum](signum, None)

    @contextmanager
    def interruptible(self, on=True):
        """A context in which a signal's handler runs at once (``on``) or is deferred (not ``on``)."""
        before, self._interruptible = self._interruptible, on
        if on:
            self.check()
        try:
            yield
        finally:
            self._interruptible = before


MAX_METADATA_LINE = 2 * MAX_METADATA_BYTES  # bytes of one line of a metadata file


def read_metadata_file(path):
    """{id or absolute path: fields} of a metadata file (JSON lines: ``{"id": ...}`` or
    ``{"path": ...}`` and the fields), or MetadataError naming the line. A path key is
    made absolute (relative to the current folder)."""
    out = {}
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise MetadataError(f"cannot read metadata file {path}: {exc.strerror or exc}") from exc
    with f:
        for n, line in enumerate(f, 1):
            if len(line) > MAX_METADATA_LINE:
                raise MetadataError(f"{path}:{n}: a line of {len(line):,} bytes; at most {MAX_METADATA_LINE:,}")
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise MetadataError(f"{path}:{n}: not a JSON object ({exc})") from exc
            if not isinstance(rec, dict) or ("id" in rec) == ("path" in rec):
                raise MetadataError(f'{path}:{n}: each line is a JSON object with "id" or "path" (one of them) '
                                    f'and the fields, e.g. {{"id": "a.jpg", "album": "paris"}}')
            key = rec.pop("id") if "id" in rec else os.path.abspath(str(rec.pop("path")))
            if not isinstance(key, str):
                raise MetadataError(f'{path}:{n}: "id" must be a string, got {key!r}')
            key = key if os.path.isabs(key) else normal_form(key)  # an id as ingestion makes it (NFC)
            try:
                encode_metadata(rec)
            except MetadataError as exc:
                raise MetadataError(f"{path}:{n}: {exc}") from None
            out.setdefault(key, {}).update(rec)
    return out


def _stat_sig(path):
    try:
        st = os.stat(path)
        return (st.st_size, st.st_mtime_ns)
    except OSError:
        return None


class Ingester:
    """Adds image files to an open, writable index; see the module doc.

    workers: local extraction processes (None: all cores; 1: in this process).
    dask: run on a Dask cluster instead: a scheduler address (``tcp://host:8786``),
    ``"local:N"`` (a LocalCluster of N processes started here) or a
    ``distributed.Client``. executor: a :mod:`streamk.parallel` executor to use
    (kept open; overrides workers and dask). cache_dir: a feature cache folder
    (:class:`~streamk.features.FeatureCache`) read and filled by the workers
    (None: no cache). batch_size: images per write transaction. max_inflight:
    files sent to the workers and not yet back (None: twice the workers).
    report: callable(path, reason) for each bad or skipped file (default: print to stderr).
    note: callable(path, text) for each file added with a remark (``on_duplicate="report"``:
    the stored image it is a near-duplicate of; default: print to stderr).
    max_file_size, max_pixels: the image limits of the files read (None: the defaults of
    :mod:`streamk.features.images`); a file over one is reported as ImageTooLargeError.
    progress: tqdm bar on stderr (None: only when stderr is a terminal).
    metadata: {id or absolute path: fields} given to the images (:func:`read_metadata_file`).
    on_duplicate: "keep", "skip" or "report" near-duplicates of stored images (module doc),
    at ``duplicate_threshold``.
    Close it (or use ``with``) to stop a Dask cluster it started.
    """

    def __init__(self, index: Any, workers: int | None = None, batch_size: int = 64, commit_interval: float = 2.0,
                 report: Callable[[str, str], object] | None = None, progress: bool | None = None,
                 dask: Any = None, executor: Any = None, cache_dir: PathLike | None = None,
                 max_inflight: int | None = None, max_file_size: int | None = None, max_pixels: int | None = None,
                 metadata: Mapping[str, Mapping[str, Any]] | None = None, on_duplicate: str = "keep",
                 duplicate_threshold: float = DEFAULT_DUPLICATE_THRESHOLD,
                 note: Callable[[str, str], object] | None = None) -> None:
        if int(batch_size) < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if int(batch_size) > MAX_BATCH_SIZE:
            raise ConfigError(f"batch_size = {int(batch_size):,} is over streamk's limit of {MAX_BATCH_SIZE:,} images "
                              f"per write transaction (held in memory until written)")
        if workers is not None and int(workers) < 1:
            raise ConfigError(f"workers must be >= 1, got {workers}")
        if max_inflight is not None and int(max_inflight) < 1:
            raise ConfigError(f"max_inflight must be >= 1, got {max_inflight}")
        if on_duplicate not in DUPLICATE_POLICIES:
            raise ConfigError(f"on_duplicate must be one of {DUPLICATE_POLICIES}, got {on_duplicate!r}")
        self.on_duplicate = on_duplicate
        self.duplicate_threshold = float(duplicate_threshold)
        self.metadata = metadata or {}
        self._metadata_found: set[str] = set()  # its keys (ids, absolute paths) that named a file found
        self.index = index
        self.workers = workers
        self.batch_size = int(batch_size)
        self.commit_interval = float(commit_interval)
        self.max_inflight = None if max_inflight is None else int(max_inflight)
        self.report = report or (lambda path, reason: print(f"streamk: skipped {printable(path)}: {reason}",
                                                            file=sys.stderr, flush=True))
        self.note = note or (lambda path, text: print(f"streamk: {printable(path)}: {text}", file=sys.stderr,
                                                      flush=True))
        self.progress = progress
        self.cache = None if cache_dir is None else FeatureCache(cache_dir)
        self.stats = IngestStats()  # every pass of this Ingester
        self.pass_stats = IngestStats()  # the last (or current) pass alone: a watch's poll
        self._seen: dict[str, Any] = {}  # path -> stat signature when last handled (for --watch)
        self._held: set[str] = set()  # paths whose bytes the index holds under their id, as this Ingester found
        self._updates: list[tuple[str, Any]] = []  # (path, EncodedImage) replacing the content of a watched file
        self._firsts: dict[str, tuple[str, str]] = {}  # this pass: sha256 -> (path, id) of the new file sent
        self._copies: dict[str, tuple[str, list[Any]]] = {}  # that path -> (sha256, the tasks of its copies held)
        self._released: list[Any] = []  # tasks of copies of a file that was not stored: to describe after all
        self._walk = None  # this pass's walk (iter_scan), to count what is left after an interruption
        self._pass_found = 0  # entries of this pass's walk handed on (not skipped as already seen)
        self.stopped_left: tuple[int, bool] | None = None  # watch ended mid-poll: that poll's (not ingested, exact?)
        self._batch: list[tuple[str, Any]] = []  # (path, EncodedImage)
        self._last_commit = time.monotonic()
        self._bar: Any = None
        self._safe = _SafePoints()  # replaced per pass (ingest)
        self._encoder_bytes = None
        self._extractor = index.extractor()  # pins the default extractor's params at the first write
        self._extractor.set_limits(max_file_size=max_file_size, max_pixels=max_pixels)
        self._own_executor = executor is None
        self.executor = executor if executor is not None else (
            make_executor(dask=dask) if dask is not None else None)  # local: made per pass

    @property
    def stopped_by(self) -> str | None:
        """Watch: "SIGINT" or "SIGTERM" when a signal ended it (``stats.stopped_by``), else None."""
        return self.stats.stopped_by

    def _vocabulary(self):
        """The index's vocabulary of local geometry (None: it keeps none); once per Ingester."""
        if not hasattr(self, "_voc"):
            self._voc = self.index.vocabulary
        return self._voc

    def close(self) -> None:
        """Stops the executor this Ingester started (a LocalCluster, a Dask client)."""
        if self._own_executor and self.executor is not None:
            self.executor.close()
            self.executor = None

    def __enter__(self) -> Ingester:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reporting
    def _say(self, path, reason):
        """One line about ``path`` through ``report``, below the progress bar."""
        if self._bar is not None:
            self._bar.clear()
        self.report(str(path), reason)

    def _counts(self):
        """The running totals and this pass's own: each outcome is counted in both."""
        return self.stats, self.pass_stats

    def _fail(self, path, reason):
        for st in self._counts():
            st.failed[str(path)] = reason
            st.processed += 1
        self._seen[str(path)] = _stat_sig(path)
        self._held.discard(str(path))
        self._say(path, reason)
        self._tick()
        self._settle_copies(path, None)

    def _ok(self, path, status, image_id=None):
        """``status``: "added", "updated" (a watched file's new bytes replaced its image's), "exists"
        (this id, these bytes) or "same content" (these bytes under another id: not added)."""
        for st in self._counts():
            st.failed.pop(str(path), None)
            st.processed += 1
            if status == "added":
                st.added += 1
                st.added_ids.append(image_id)
            elif status == "updated":
                st.updated += 1
            elif status == "same content":
                st.same_content += 1
            else:
                st.existing += 1
        self._seen[str(path)] = _stat_sig(path)
        if status == "same content":
            self._held.discard(str(path))
        else:
            self._held.add(str(path))
        self._tick()

    def _tick(self):
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(added=self.stats.added, existing=self.stats.existing,
                                  failed=self.stats.n_failed, refresh=False)

    # ------------------------------------------------------------------ writing
    def _near_duplicates(self, batch):
        """(the batch without the near-duplicates to skip, {position in it: (existing id, score,
        why)} of those kept to report once written): each skipped one reported and counted."""
        import numpy as np

        classed = S = None  # with local geometry: a near-duplicate is a copy (or exact), never a same-scene photo
        if self._vocabulary() is not None and all(enc.geometry is not None for _, enc in batch):
            from ..index import copies_of_new
            classed = copies_of_new(self.index, [(path, enc.key.decode(), enc.vector, enc.geometry,
                                                  enc.record.get("sha256")) for path, enc in batch],
                                    max_file_size=self._extractor.max_file_size)
            found = [None if c is None else (c.b, c.score) for c in classed]
        else:
            V = np.stack([enc.vector for _, enc in batch])
            found = nearest_of_vectors(self.index, V, self.duplicate_threshold)
            S = V @ V.T  # within the batch: an image and an earlier one of the same batch (the vector rule only)
        kept, pending = [], {}
        for i, ((path, enc), near) in enumerate(zip(batch, found)):
            earlier = [] if S is None else [
                j for j in kept if S[i, j] >= self.duplicate_threshold and (near is None or S[i, j] > near[1])]
            if earlier:
                j = max(earlier, key=lambda j: S[i, j])
                near = (batch[j][1].key.decode(), float(S[i, j]))
            if near is None:
                kept.append(i)
                continue
            c = classed[i] if classed is not None else None
            why = (f"similarity {near[1]:.3f}" if c is None else f"{c.kind}: similarity {c.score:.3f}, {c.inliers} "
                   f"inliers, covered {100 * c.covered:.0f} %, pixels agree {c.agreement or 0:.2f}")
            if self.on_duplicate == "report":  # said once it is written: it may yet be refused (the same bytes)
                pending[len(kept)] = (near[0], near[1], why)
                kept.append(i)
                continue
            for st in self._counts():
                st.near_duplicates.append((str(path), enc.key.decode(), near[0], round(near[1], 4)))
                st.skipped_near_duplicates += 1
                st.processed += 1
            self._seen[str(path)] = _stat_sig(path)
            self._tick()
            self._say(path, f"near-duplicate of {near[0]!r} ({why}); not added")
            self._settle_copies(path, None)
        return [batch[i] for i in kept], pending

    def _flush(self):
        batch, self._batch = self._batch, []
        updates, self._updates = self._updates, []
        self._last_commit = time.monotonic()
        if updates:
            with _signals_deferred():
                # Index.update's semantics: the stored metadata kept, updated with the file's
                for (path, enc), out in zip(updates, self.index.write_encoded([enc for _, enc in updates],
                                                                              replace=True)):
                    self._written(path, enc, "updated" if out == "added" else out)
        pending = {}
        if batch and self.on_duplicate != "keep":
            batch, pending = self._near_duplicates(batch)
        if not batch:
            return
        with _signals_deferred():  # a commit and its account are one step: the count said is the count stored
            outcomes = self.index.write_encoded([enc for _, enc in batch])
            for pos, ((path, enc), out) in enumerate(zip(batch, outcomes)):
                if out == "added" and pos in pending:
                    existing, score, why = pending[pos]
                    for st in self._counts():
                        st.near_duplicates.append((str(path), enc.key.decode(), existing, round(score, 4)))
                    if self._bar is not None:
                        self._bar.clear()
                    self.note(str(path), f"added; a near-duplicate of {existing!r} ({why})")
                self._written(path, enc, out)

    def _written(self, path, enc, out):
        """Count (and say) the outcome of writing one image: a status or the named error."""
        if not isinstance(out, Exception):
            self._ok(path, out, enc.key.decode())
            self._settle_copies(path, enc.key.decode(), enc.record.get("sha256"))
        elif isinstance(out, DuplicateError):  # same content under another id: said, not added
            self._say(path, f"the same bytes are already indexed as {out.existing_id!r}; not added as {out.id!r}")
            self._ok(path, "same content")
            self._settle_copies(path, out.existing_id, enc.record.get("sha256"))
        else:
            self._fail(path, describe(out))

    def _settle_copies(self, path, holder, held_sha=None):
        """Once the outcome of new file ``path`` is known: the files of this pass held back as
        copies of it (its bytes under other ids, found after it) are reported as the same bytes
        as ``holder``, the id that now holds them (``held_sha``: the sha256 of those bytes), and
        not added (as a copy of a stored file is); ``holder`` None (``path`` was not stored: a bad
        image, a near-duplicate skipped, ...) or other bytes (``path`` rewritten meanwhile): they
        are described after all, as any new file (:meth:`ingest` sends them after the walk)."""
        sha, copies = self._copies.pop(str(path), (None, []))
        if sha is None:
            return
        if held_sha != sha:
            holder = None
        del self._firsts[sha]  # a copy found from now on is looked up in the index (committed) or sent
        for task in copies:
            if holder is None:
                self._released.append(task)
                continue
            self._say(task[0], f"the same bytes are already indexed as {holder!r}; not added as {task[1]!r}")
            self._ok(task[0], "same content")

    # ------------------------------------------------------------------ one pass
    def ingest(self, roots: Iterable[PathLike], only_new: bool = False, take_changes: bool = False) -> IngestStats:
        """One pass over ``roots``; returns the cumulative :class:`IngestStats` (this pass's
        own: :attr:`pass_stats`).

        only_new: skip files already handled in an earlier pass of this Ingester
        whose size and mtime are unchanged (used by watch mode); a file whose bytes this
        Ingester found in the index, overwritten since, has its image's content replaced
        (as :meth:`~streamk.index.StreamingIndex.update`: its metadata kept, updated with the file's).
        take_changes (a watch, every pass): so too a file whose image was added from it (the stored
        source) and whose size or mtime are not the stored metadata's: it changed while no watch ran.
        Without it (a one-shot run) such a file is reported (IdExistsError) and its image left as it is.
        """
        from tqdm.auto import tqdm

        t0 = time.monotonic()
        self.pass_stats = IngestStats()
        self._pass_found, self._walk = 0, None
        self._firsts, self._copies, self._released = {}, {}, []
        self._bar = tqdm(total=0, unit="img", desc="ingest", file=sys.stderr,
                         disable=True if self.progress is False else (None if self.progress is None
                                                                      else False),
                         dynamic_ncols=True)
        executor = self.executor
        if executor is None:  # the local pool lives for one pass (its processes end with it)
            executor = make_executor(self.workers)
        if executor.name != "in-process" and self._encoder_bytes is None:
            self._encoder_bytes = self.index.encoder.to_bytes()  # once: watch mode passes reuse it
        context = task_context(self.index.encoder if executor.name == "in-process" else self._encoder_bytes,
                               self._extractor, None if self.cache is None else self.cache.directory, executor,
                               vocabulary=self._vocabulary())
        running = executor.map_unordered(ingest_task, self._tasks(roots, only_new, take_changes), context,
                                         self.max_inflight)
        # a signal stops the pass between images: at once while waiting on other processes; after the image
        # in hand when the encoding runs here (workers=1)
        self._safe = safe = _SafePoints()
        waiting_is_ours = executor.name == "in-process"
        try:
            with safe:
                while True:
                    handed = results(running)
                    while True:
                        with safe.interruptible(not waiting_is_ours):
                            r = next(handed, None)
                        if r is None:
                            break
                        self._handle(r[1])
                        safe.check()
                    self._flush()
                    if not self._released:
                        break
                    # copies of files that were not stored (rare: a bad file copied): described as any file
                    running.close()
                    tasks, self._released = self._released, []
                    running = executor.map_unordered(ingest_task, tasks, context, self.max_inflight)
        finally:
            running.close()  # stops the tasks in flight when interrupted
            if executor is not self.executor:
                executor.close()
            self._bar.close()
            self._bar = None
            for st in self._counts():
                st.seconds += time.monotonic() - t0
        return self.stats

    def _tasks(self, roots, only_new, take_changes=False):
        """Yield the tasks ``(path, id, stored sha256 or None, absolute path)`` of the files found, as the
        walk finds them; bad entries and invalid ids are reported on the way."""
        entries = self._walk = iter_scan(roots)
        while True:
            with self._safe.interruptible(False):  # what is found is counted whole
                tasks, pulled = self._next_tasks(entries, only_new, take_changes)
            if not pulled:
                return
            yield from tasks

    def _next_tasks(self, entries, only_new, take_changes=False):
        """(the tasks of the next LOOKUP_CHUNK entries of the walk, how many entries were pulled)."""
        chunk, pulled = [], 0
        for path, image_id, reason in islice(entries, LOOKUP_CHUNK):
            pulled += 1
            if only_new and (self._seen.get(path, False) == _stat_sig(path) if reason is None
                             else path in self._seen):
                continue
            self._pass_found += 1
            if self.metadata:
                self._metadata_found.update(k for k in (image_id, os.path.abspath(path)) if k in self.metadata)
            if self._bar is not None:
                self._bar.total += 1
            if reason is not None:
                self._fail(path, reason)
                continue
            try:
                validate_id(image_id)
            except StreamkError as exc:
                self._fail(path, describe(exc))
                continue
            chunk.append((path, image_id))
        if not chunk:  # none pulled, or all bad, invalid or already seen
            return [], pulled
        # one short read per chunk (per shard), never held across tasks
        ids = [i for _, i in chunk]
        records = [None if raw is None else ImageRecord.from_json(raw, self.index.path, i)
                   for i, raw in zip(ids, self.index.records(ids))]
        known = [None if rec is None else _stored_file_sha(rec) for rec in records]
        # the worker reads the absolute path: a Dask worker's working folder is not ours; a file held and seen
        # again in a watch changed (size or mtime): its worker describes it if its bytes differ
        changed = [bool(only_new and sha and path in self._held) for (path, _), sha in zip(chunk, known)]
        if take_changes:
            changed = [c or a for c, a in zip(changed, self._changed_while_away(chunk, records))]
        tasks = [(path, image_id, sha, os.path.abspath(path), c)
                 for (path, image_id), sha, c in zip(chunk, known, changed)]
        return self._less_stored_bytes(tasks), pulled

    def _changed_while_away(self, chunk, records):
        """[whether each file of ``chunk`` changed since its image was added from it]: its image's
        record names this very file (its source, no box) and the image's stored metadata is not the
        file's size and mtime now (an edit made while no watch ran; the stored metadata of a
        chunk read in one go). Its worker then describes it if its bytes differ."""
        out = [False] * len(chunk)
        mine = [p for p, ((path, _), rec) in enumerate(zip(chunk, records))
                if rec is not None and _stored_file_sha(rec) and rec.source == os.path.abspath(path)]
        metas = self.index.metadata_many([chunk[p][1] for p in mine]) if mine else []
        for p, meta in zip(mine, metas):
            try:
                st = os.stat(chunk[p][0])
            except OSError:  # gone: its worker says so
                continue
            out[p] = meta is not None and (meta.get("size"), meta.get("mtime")) != (st.st_size, st.st_mtime)
        return out

    def _less_stored_bytes(self, tasks):
        """``tasks`` less those of the files of a new id whose exact bytes the index holds under
        another id (a copy of a stored file): each such file is hashed here (one read, which
        its worker would make next; page-cached), the chunk's content keys looked up in one
        short read, and it is reported as the write would report it (the same bytes as that
        id; not added) without being described: its features are not extracted again."""
        new = [p for p, task in enumerate(tasks) if task[2] is None]
        shas = {p: _file_sha256(tasks[p][3], self._extractor.max_file_size) for p in new}
        asked = [p for p in new if shas[p] is not None]  # (one that cannot be read here: its worker says why)
        holders = self.index.content_holders([image_content_key(shas[p]) for p in asked]) if asked else []
        stored = {p: holder for p, holder in zip(asked, holders) if holder is not None}
        for p, holder in stored.items():
            path, image_id = tasks[p][0], tasks[p][1]
            self._say(path, f"the same bytes are already indexed as {holder!r}; not added as {image_id!r}")
            self._ok(path, "same content")
        held = set()
        for p in asked:  # a copy of a file sent in this pass and not written yet: held until that one's outcome
            if p in stored:
                continue
            first = self._firsts.get(shas[p])
            if first is None:
                self._firsts[shas[p]] = tasks[p][:2]
                self._copies[tasks[p][0]] = (shas[p], [])
            elif first[0] != tasks[p][0] and first[1] != tasks[p][1]:  # (a path given twice, an id twice: as before)
                self._copies[first[0]][1].append(tasks[p])
                held.add(p)
        return [task for p, task in enumerate(tasks) if p not in stored and p not in held]

    def unmatched_metadata(self) -> list[str]:
        """The keys of the metadata given (ids, absolute paths) that named no file found so far,
        in the file's order: a typo, or a path relative to another folder, is silently unused."""
        return [k for k in self.metadata if k not in self._metadata_found]

    def _handle(self, r):
        path = r["path"]
        if r["error"] is not None:
            self._fail(path, str(r["error"]))
            return
        given = self.metadata.get(r["id"]) or self.metadata.get(os.path.abspath(path))
        if r.get("stored_sha256") is not None and r.get("description") is not None:  # a watched file changed
            try:
                enc = r["description"].encoded(r["id"], path, metadata=dict(r.get("metadata") or {}, **(given or {})))
            except StreamkError as exc:
                self._fail(path, describe(exc))
                return
            self._updates.append((path, enc))
            self._flush_if_due()
            return
        if r.get("stored_sha256") is not None:  # the id was stored: only hashed
            if r["sha256"] == r["stored_sha256"]:
                # a file only touched: its size and mtime stored, so that no later watch reads it again for them
                refresh = dict(r.get("file_stat") or {}, **(given or {}))
                if refresh:
                    try:
                        self.index.set_metadata(r["id"], refresh, merge=True)
                    except StreamkError as exc:
                        self._fail(path, describe(exc))
                        return
                self._ok(path, "exists")
            else:
                self._fail(path, f"IdExistsError: id {r['id']!r} already holds other content")
            return
        try:
            meta = dict(r.get("metadata") or {}, **(given or {}))
            enc = r["description"].encoded(r["id"], path, metadata=meta or None)
        except StreamkError as exc:
            self._fail(path, describe(exc))
            return
        self._batch.append((path, enc))
        self._flush_if_due()

    def _flush_if_due(self):
        if (len(self._batch) + len(self._updates) >= self.batch_size
                or time.monotonic() - self._last_commit >= self.commit_interval):
            self._flush()

    def not_ingested(self, seconds: float = COUNT_LEFT_SECONDS) -> tuple[int, bool]:
        """(files of the current pass not handled, exact?): those found and not yet
        handled, plus the rest of the walk counted for at most ``seconds`` (not exact
        when the walk was not finished by then)."""
        left = max(0, self._pass_found - self.pass_stats.processed)
        if self._walk is None:
            return left, True
        deadline = time.monotonic() + seconds
        for _ in self._walk:
            left += 1
            if time.monotonic() > deadline:
                return left, False
        return left, True

    # ------------------------------------------------------------------ watch
    def watch(self, roots: Iterable[PathLike], interval: float = 5.0, max_polls: int | None = None,
              on_poll: Callable[[int, IngestStats], object] | None = None) -> IngestStats:
        """Ingest, then poll ``roots`` every ``interval`` seconds for new or changed files
        (a file changed since this watch found it in the index, or since its image was added
        from it when no watch ran, gets its image's content replaced; a file deleted stays in
        the index).

        Stops after ``max_polls`` passes (None: until KeyboardInterrupt or
        :class:`~streamk.errors.Terminated`, which end it cleanly after committing what
        was already encoded; :attr:`stopped_by` then names the signal and, when it came
        during a pass, :attr:`stopped_left` says how many files of that pass were not
        ingested). on_poll(n, stats) is called after each pass with the running totals;
        :attr:`pass_stats` holds that pass's own counts.
        """
        n = 0
        polling = False
        try:
            while True:
                polling = True
                self.ingest(roots, only_new=n > 0, take_changes=True)
                polling = False
                n += 1
                if on_poll is not None:
                    on_poll(n, self.stats)
                if max_polls is not None and n >= max_polls:
                    break
                time.sleep(interval)
        except (KeyboardInterrupt, Terminated) as exc:
            self.stats.stopped_by = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
            self._flush()
            if polling:
                self.stopped_left = self.not_ingested()
        return self.stats


def _file_sha256(path, max_bytes=None):
    """The sha256 (hex) of a file's bytes, or None when it cannot be read or is over
    ``max_bytes`` (left to its worker, which reports why)."""
    try:
        with open(path, "rb") as f:
            if max_bytes is not None and os.fstat(f.fileno()).st_size > max_bytes:
                return None
            digest = hashlib.sha256()
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _stored_file_sha(rec):
    """The sha256 of the file an image record (an ImageRecord) was added from with no box; ""
    when the record is of other content (a vector, descriptors, a box): never a file's digest."""
    if rec.kind == "image_path" and rec.box is None and rec.sha256:
        return rec.sha256
    return ""


def run_ingest(path, images, watch=False, interval=5.0, max_polls=None, workers=None, dask=None, batch_size=64,
               cache_dir=None, progress=None, log=print, max_file_size=None, max_pixels=None, metadata=None,
               on_duplicate="keep", duplicate_threshold=DEFAULT_DUPLICATE_THRESHOLD, retrain_at=None):
    """``streamk ingest`` as a library call: one pass over ``images`` (files and folders)
    into the index at ``path`` (or, ``watch``, a pass every ``interval`` seconds), on the
    local pool or a Dask cluster (``dask``: an address or "local:N"; for a sharded index
    the same cluster owns the shards). ``max_file_size``, ``max_pixels``: the image limits
    (None: :data:`~streamk.features.MAX_FILE_SIZE`, :data:`~streamk.features.MAX_PIXELS`);
    a file over one is reported (ImageTooLargeError) and skipped. Returns the IngestStats.
    A one-shot run stopped by KeyboardInterrupt or :class:`~streamk.errors.Terminated`
    commits what was encoded and raises :class:`~streamk.errors.IngestInterruptedError`
    (what was added, how many files were not); a watch ends cleanly on either. ``metadata``: a metadata file
    (JSON lines, :func:`read_metadata_file`); ``on_duplicate``: "keep", "skip" or "report"
    near-duplicates. retrain_at: a ratio; after the pass (each poll of a watch), the codec is
    retrained (:func:`retrain_if_stale`) when the images added since it was trained exceed
    ``retrain_at`` times the images it was trained on (None: never, the default)."""
    from ..index import ShardedIndex, is_sharded, open_index

    if dask is not None and workers is not None:
        raise ConfigError("--workers is for the local pool, --dask for a cluster: give one of them")
    if retrain_at is not None and not (isinstance(retrain_at, (int, float)) and retrain_at > 0):
        raise ConfigError(f"retrain_at must be a ratio > 0, got {retrain_at!r}")
    images = as_roots(images)
    missing = [os.fsdecode(root) for root in images if not os.path.lexists(root)]
    if missing:  # a typo or a disk not mounted: said of the run before it starts, not as one bad file among many
        more = f" (and {len(missing) - 1} more of the paths given)" if len(missing) > 1 else ""
        raise ConfigError(f"{missing[0]} does not exist{more}: check the path (a folder on a disk not mounted?); "
                          f"nothing was ingested")
    given = read_metadata_file(metadata) if metadata is not None else None
    executor = make_executor(dask=dask) if dask is not None else None
    try:
        if executor is not None and is_sharded(path):  # one Dask client for the tasks and the shards' owners
            index = ShardedIndex.open(path, dask=executor.client)
        else:
            index = open_index(path)
        with index, Ingester(index, workers=workers, batch_size=batch_size, cache_dir=cache_dir, executor=executor,
                             progress=progress, max_file_size=max_file_size, max_pixels=max_pixels, metadata=given,
                             on_duplicate=on_duplicate, duplicate_threshold=duplicate_threshold) as ing:
            if watch:
                def on_poll(n, stats):
                    if n == 1:
                        log(f"watching {len(images)} path(s) every {interval:g} s (Ctrl-C to stop)")
                    if ing.pass_stats.processed:  # a poll that found nothing says nothing
                        log(f"poll {n}, this poll: {ing.pass_stats.summary(updates=True)}")
                    retrain_if_stale(index, retrain_at, log)
                try:
                    stats = ing.watch(images, interval=interval, max_polls=max_polls, on_poll=on_poll)
                except DiskFullError as exc:
                    raise _disk_full(ing, exc) from exc
                if ing.stopped_by is not None:
                    log(_stopped_line(ing))
                return stats
            try:
                stats = ing.ingest(images)
            except (KeyboardInterrupt, Terminated) as exc:
                ing._flush()  # what was encoded is committed (a second signal here: nothing half-written)
                raise _interrupted(ing, exc) from None
            except DiskFullError as exc:
                raise _disk_full(ing, exc) from exc
            _warn_unmatched(metadata, ing.unmatched_metadata())
            retrain_if_stale(index, retrain_at, log)
            return stats
    finally:
        if executor is not None:
            executor.close()


UNMATCHED_SHOWN = 3  # ids or paths named in the warning on metadata lines that matched no file


def _warn_unmatched(metadata_file, keys):
    """A warning (not an error: the images are ingested) on the metadata file's lines whose
    id or path matched no file of the pass, with the first few of them."""
    if not keys:
        return
    import warnings

    shown = ", ".join(repr(printable(k)) for k in keys[:UNMATCHED_SHOWN]) + (", ..." if keys[UNMATCHED_SHOWN:] else "")
    what = "id or path" if len(keys) == 1 else "ids or paths"
    warnings.warn(f"{len(keys):,} {what} of {printable(metadata_file)} matched no "
                  f"file of this pass (their fields were not used): {shown}; an \"id\" is the image's id (the path "
                  f"under the folder given), a \"path\" is taken from the current folder", UserWarning, stacklevel=3)


def retrain_if_stale(index, ratio, log=print):
    """Retrain ``index``'s codec (same nlist, M, nprobe; default sample) when the images
    added since it was trained exceed ``ratio`` times the images it was trained on; a
    codec trained before streamk recorded that, or none at all, is left alone. Returns
    True when it retrained."""
    if ratio is None:
        return False
    st = index.codec_staleness()
    if st is None or st["trained_on"] is None or st["added_since"] <= ratio * st["trained_on"]:
        return False
    params = index.codec_params()
    log(f"retraining the codec: {st['added_since']:,} images added since it was trained on "
        f"{st['trained_on']:,} (more than {ratio:g} times as many; --retrain-at)")
    t0 = time.monotonic()
    try:
        index.train(nlist=params["nlist"], M=params["M"], nprobe=params["nprobe"])
    except (TooFewImagesError, TrainingInProgressError) as exc:  # removals since, or another trainer at work
        log(f"not retrained: {describe(exc)}")
        return False
    log(f"retrained the codec on {len(index):,} images in {time.monotonic() - t0:.1f} s")
    return True


def _stopped_line(ing):
    """What a watch stopped by a signal says: the signal, and the files of the poll it cut
    short that were not ingested (the next run takes them)."""
    if ing.stopped_left is None or ing.stopped_left[0] == 0:
        return f"stopped by {ing.stopped_by}"
    left, exact = ing.stopped_left
    st = ing.pass_stats
    return (f"stopped by {ing.stopped_by} during a poll: that poll added {st.added}, updated {st.updated}, "
            f"failed {st.n_failed}; {'' if exact else 'at least '}{left} not ingested; run the same command "
            f"again to take them")


def _interrupted(ing, exc):
    name, code = ("SIGTERM", Terminated.exit_code) if isinstance(exc, Terminated) else ("SIGINT", 130)
    left, exact = ing.not_ingested()
    st = ing.stats
    same = f" and {st.same_content} with the bytes of another id" if st.same_content else ""
    return IngestInterruptedError(
        f"interrupted by {name}: added {st.added}, skipped {st.existing} existing{same}, failed {st.n_failed}; "
        f"{'' if exact else 'at least '}{left} not ingested; run the same command again to resume",
        stats=st, left=left, left_exact=exact, exit_code=code)


def _disk_full(ing, exc):
    """The DiskFullError of a write during a run, with what the run had stored before it: the
    images reported added are durable, and the same command resumes after them."""
    st = ing.stats
    return DiskFullError(f"{exc}; this run added {st.added:,} image(s) before it (stored: the same command resumes "
                         f"after them)", exc.path, exc.needed)


def collect_images(roots):
    """([image paths], [(path, reason)]) under ``roots`` (for training an encoder)."""
    found, bad = scan(roots)
    return [p for p, _ in found], bad


__all__ = ["COUNT_LEFT_SECONDS", "IMAGE_EXTENSIONS", "MAX_BATCH_SIZE", "Ingester", "IngestStats", "as_roots",
           "collect_images", "read_metadata_file",
           "retrain_if_stale", "run_ingest", "id_for", "image_content_key", "is_image_name", "iter_scan", "scan"]

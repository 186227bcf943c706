"""LMDB storage of a streaming index: one LMDB environment per index directory.

Every image gets a *row*: an integer given once, in increasing order, never
reused (an update gives the new content a new row). Whatever a reader scans or
loads is keyed by row, so it is read in key order without a lookup per image;
string ids are looked up only for the results shown.

Named sub-databases (keys and values are bytes; ``row`` keys are 8-byte big-endian):

``meta``        ``format`` (JSON: format tag + version), ``encoder`` (Encoder.to_bytes()),
                ``encoder_fingerprint``, ``dim`` and ``input_dim`` (of the encoder's vectors and
                descriptors), ``vector_dtype`` (float16 | float32), ``extractor``
                (JSON extractor params or null), ``codec`` (IVFPQ.to_bytes(), once
                trained), ``codec_epoch`` (the epoch of the codes in use; 0: none),
                ``next_epoch``, ``training`` (JSON, while a training runs), ``seq``
                (change counter), ``next_row``, ``block_rows``, ``vector_block_rows``,
                ``store_extras`` (1: keep the
                display extras), ``created`` (unix time).
``images``      id -> JSON: kind, source, sha256, box, n_descriptors, image_size, added, seq, row,
                content_key (hex), followed by its CRC32C (format 4); read only as an
                :class:`ImageRecord` (:meth:`Store.image`), which checks it.
``extras``      id -> .npz bytes (keypoints, weights) for display, sealed (format 4); optional.
``vectors``     block of ``vector_block_rows`` rows -> their vectors in the index's dtype
                (:mod:`streamk.index.vector_store`; read for re-ranking and exact search).
``row_ids``     row -> id (the ids of the k results).
``hashes``      32-byte content key -> id (de-duplication).
``codes``       epoch (4 bytes) + row -> list (uint32 LE) + M code bytes: the rows of the
                block still being filled.
``code_blocks`` epoch + block -> BLOCK_ROWS list numbers (uint32 LE) then BLOCK_ROWS x M
                code bytes: a full block of rows, sealed once (a reader loads N rows in
                N / BLOCK_ROWS reads). Rows that have no code (removed before the codes
                were computed) have list NO_LIST.
``code_runs``   epoch + first block -> the codes of RUN_BLOCKS sealed blocks again, in list order,
                with a directory and a CRC32C per list (:mod:`streamk.index.blocks`): what a reader
                reads of the lists it probes only. Derived from ``code_blocks``, written with the
                seal of a group's last block; absent in an index of an older streamk (read from
                its blocks, or added by ``streamk index upgrade``).
``dead``        block -> bitmap (BLOCK_ROWS bits, little-endian bit order) of removed rows.
``log``         8-byte seq -> op + row: b"+" (added), b"-" (removed), b"*" (new codes: reload).
``claims``      (a shard of a sharded index) content key -> id, for the content keys routed to
                this shard, whichever shard holds the image: de-duplication across shards.
``geometry``    row -> the image's local-geometry record (visual words, signatures, keypoint
                frames: :mod:`streamk.verification.records`), for spatial verification;
                written with the image, in the same transaction.
``thumbnails``  id -> a small JPEG of the image (at most 256 px a side, a few KB), written with
                the image when its writer made one (the HTTP server does, for uploads).
``metadata``    row -> the image's metadata, a JSON object of at most 64 KB (written and removed
                with the image; :mod:`streamk.index.metadata`).
``postings``    (dupsort, dupfixed) indexed field + encoded value -> the rows holding it (8-byte
                big-endian, sorted): what a search filter reads, in proportion to what it selects.
``columns``     indexed field + type tag + first record -> a chunk of that field's sorted
                (value prefix, row) records: what a range filter reads
                (:mod:`streamk.index.range_columns`).

``thumbnails``, ``metadata``, ``extras`` and any sub-database of blobs listed in SEALED_SUBDBS store
each value followed by its CRC32C (:meth:`Store.put_blob` / :meth:`Store.get_blob`).

What carries no checksum of its own, and how damage to it is found (``streamk index verify``):
``row_ids`` and ``hashes`` (ids and content keys: checked against the image records, which are
sealed); ``dead`` (checked against the records' rows: a live record on a removed row, or
a count that differs); ``postings`` and ``columns`` (checked against the sealed metadata);
not checked: ``claims`` (a damaged claim lets one duplicate in across shards, or refuses one),
``log`` (a damaged entry makes a reader apply the wrong change until its next full load) and the
small ``meta`` counters (a damaged one is refused where it is parsed, or goes unnoticed).

Checksums (format 3; format 4 adds the image records and extras): every vector block (and each of
its rows), sealed code block and row code carries its CRC32C, the encoder, codec and vocabulary
blobs theirs under
``meta/crc32c:<name>``; each is checked when read, and damage is an
:class:`~streamk.errors.IndexCorruptError` naming the index and the rows
(:mod:`streamk.index.integrity`; ``streamk index verify`` checks everything). Opening
checks ``data.mdb`` against LMDB's header first (a truncated file is refused, never
mapped). An index of format 1, 2 or 3 is upgraded in place by ``streamk index upgrade``.

Every change increments ``meta/seq`` and appends to ``log`` in the same
transaction, so a reader that knows the seq it last saw applies only what
changed. The log keeps the last LOG_KEEP entries: a reader further behind
loads everything again.

Ownership. This module is the one that knows the sub-databases and the layout of an image's
record: every other module reaches a sub-database through its accessor (``store.images_db``,
... ``store.columns_db``), reads records as :class:`ImageRecord` and removes an image with
:meth:`Store.delete_image`; what one image owns is listed once (IMAGE_BY_ID, IMAGE_BY_ROW,
IMAGE_DERIVED). The stored form of vector blocks, code blocks and metadata values is in
:mod:`~streamk.index.vector_store`, :mod:`~streamk.index.blocks` and
:mod:`~streamk.index.metadata`, their keys in :mod:`~streamk.index.keys`.

Write transactions go through :meth:`Store.write`, which grows the map when it
is full (abort, ``set_mapsize`` x2, rerun the whole function): users never see
``lmdb.MapFullError``; past ``max_map_size``, or when the disk has no room for the
commit, it is a :class:`~streamk.errors.DiskFullError` and nothing is written. Readers adopt a
map grown by another process
(``MapResizedError`` -> ``set_mapsize(0)``). Reader slots left by killed
processes are reclaimed at open (``reader_check``).

One :class:`Store` per process and index; a Store is not thread-safe. Ids are
LMDB keys, never file names: nothing is written outside the index directory.
"""

import contextlib
import ctypes
import itertools
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import lmdb
import numpy as np

from .integrity import (CORRUPTION, CRC_BYTES, check_lmdb_file, check_room, checksum_ok, corrupt, describe_rows,
                        disk_full, get_checked_meta, open_error, put_checked_meta, seal, unseal)

from ..errors import (DiskFullError, GeometryRecordError, IndexClosedError, IndexCorruptError, IndexExistsError,
                      IndexFormatError, NotAnIndexError, ReadOnlyIndexError, StreamkError, UnknownIdError)
from ..verification import unpack as unpack_geometry
from .blocks import mark_removed
from .lmdb_pages import big_values, free_db_root, map_base, will_need
from .keys import (MAX_ID_CHARS, MAX_KEY_BYTES, epoch_key, epoch_key_split, id_key, lookup_keys,  # noqa: F401
                   normal_form, normal_id, row_from_key, row_key, rows_from_keys, rows_of_epoch_keys, seq_from_key,
                   seq_key, validate_id)
from .metadata import delete_metadata
from .vector_store import VectorStore

FORMAT = "streamk-index"
FORMAT_VERSION = 4  # 4: CRC32C on image records and extras too; 3: on vector and code blocks, row codes, blobs
SUBDBS = ("meta", "images", "extras", "vectors", "row_ids", "hashes", "codes", "code_blocks", "dead",
          "log", "claims")
# Sub-databases added after format 2 was released: an index written before them lacks them;
# a writer creates them at open, a read-only reader sees them as empty.
OPTIONAL_SUBDBS = ("geometry", "thumbnails", "metadata", "postings", "columns", "code_runs")
SUBDB_FLAGS = {"postings": {"dupsort": True, "dupfixed": True}}  # (streamk.index.metadata)
# LMDB's errors that, in an environment holding streamk's meta, say its B-trees are damaged
OPEN_DAMAGE = CORRUPTION + (lmdb.NotFoundError, lmdb.BadTxnError, lmdb.BadDbiError, lmdb.IncompatibleError)
MAX_SUBDB_SCAN = 4096  # keys of the main B-tree read when looking for streamk's sub-databases by name
DAMAGED_RECORD = "the local-geometry record of"  # how the damage of stored records is named (duplicates tells it)
VECTOR_DTYPES = ("float16", "float32")
DEFAULT_MAP_SIZE = 64 << 20  # grows by doubling when full
CREATE_ROOM = 1 << 20  # free bytes a new index needs on its disk, beyond its metadata
CHECKED_META = (b"encoder", b"codec", b"vocabulary")  # metadata blobs stored with their CRC32C
SEALED_SUBDBS = ("thumbnails", "metadata", "extras")  # sub-databases of blobs, each value followed by its CRC32C
BLOCK_ROWS = 4096  # default rows per sealed block of codes and per bitmap of removed rows
LOG_KEEP = 1 << 16  # log entries kept; a reader further behind reloads everything
LOG_TRIM_EVERY = 1024  # trim the log when seq crosses a multiple of this

# What one image owns, written once: whatever removes an image (Store.delete_image) or checks
# that nothing of a removed image is left reads these lists. A new sub-database of per-image
# values goes in one of the first two; the last names what is derived from the record.
IMAGE_BY_ID = ("images", "extras", "thumbnails")  # keyed by the image's id
IMAGE_BY_ROW = ("row_ids", "geometry", "metadata")  # keyed by the image's row
IMAGE_DERIVED = {"vectors": "its row of a vector block (zeroed; the block goes with its last row)",
                 "hashes": "its content key (when it still names this image)",
                 "postings": "its indexed metadata values (with the metadata)",
                 "columns": "the range-column records of those values",
                 "dead": "its row, marked removed", "log": "one removal entry"}
# Not removed with an image: its PQ code (``codes`` / ``code_blocks``, keyed by epoch and row) stays
# where it is, hidden by the row's mark in ``dead``, until a training writes the codes of a new epoch.


@dataclass(frozen=True)
class ImageRecord:
    """The JSON record of one stored image (sub-database ``images``), decoded and checked
    once (:meth:`decode`). ``fields`` is the whole JSON object as stored (what
    :meth:`StreamingIndex.info` answers); the named attributes are its parts that the
    index itself reads. ``content_key`` is bytes (stored as hex), None in records written
    before content keys were kept."""

    image_id: str
    row: int
    kind: str | None = None
    source: str | None = None
    sha256: str | None = None
    box: list | None = None
    n_descriptors: int | None = None
    image_size: list | None = None
    added: float | None = None
    seq: int | None = None
    content_key: bytes | None = None
    fields: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def decode(cls, raw, path, image_id):
        """The ImageRecord of the stored bytes ``raw`` of ``image_id`` (str or its key bytes),
        or an IndexCorruptError naming the index at ``path`` and the id: a checksum that does not
        match (format 4: the JSON is followed by its CRC32C), unreadable JSON, not an object, no
        integer ``row``, or a content key that is not 32 bytes of hex."""
        if isinstance(image_id, (bytes, memoryview)):
            image_id = bytes(image_id).decode("utf-8", "replace")
        if not checksum_ok(raw):
            raise corrupt(path, f"the record of id {image_id!r} is unreadable (checksum mismatch)")
        return cls.from_json(raw[:-CRC_BYTES], path, image_id)

    @classmethod
    def from_json(cls, raw, path, image_id):
        """The ImageRecord of a record's JSON bytes whose checksum was checked (what
        :meth:`Store.raw_image` and ``Index.records`` give), or decode's errors."""
        if isinstance(image_id, (bytes, memoryview)):
            image_id = bytes(image_id).decode("utf-8", "replace")
        try:
            fields = json.loads(bytes(raw))
            row = fields["row"]
            if isinstance(row, bool) or int(row) != row or int(row) < 0:
                raise ValueError(f"row {row!r}")
            ck = fields.get("content_key")
            content_key = None if ck is None else bytes.fromhex(ck)
            if content_key is not None and len(content_key) != 32:
                raise ValueError(f"content key of {len(content_key)} bytes")
            return cls(image_id, int(row), fields.get("kind"), fields.get("source"), fields.get("sha256"),
                       fields.get("box"), fields.get("n_descriptors"), fields.get("image_size"),
                       fields.get("added"), fields.get("seq"), content_key, fields)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise corrupt(path, f"the record of id {image_id!r} is unreadable ({type(exc).__name__})") from exc

    def get(self, name, default=None):
        """A field of the stored JSON (those without an attribute too), or ``default``."""
        return self.fields.get(name, default)

    def to_dict(self):
        """The stored JSON object (a copy)."""
        return dict(self.fields)


def removed_rows(txn, store, n_rows):
    """uint8 array (at least n_rows long): 1 for the rows marked removed in the ``dead``
    bitmaps (N / block_rows reads)."""
    B = store.block_rows
    dead = np.zeros(max(int(n_rows), 0), np.uint8)
    with txn.cursor(db=store.dead_db) as cur:
        for k, bits in cur:
            lo = row_from_key(k) * B
            if lo + B > dead.shape[0]:
                dead = np.concatenate([dead, np.zeros(lo + B - dead.shape[0], np.uint8)])
            dead[lo:lo + B] = np.unpackbits(np.frombuffer(bits, np.uint8), bitorder="little")
    return dead


def _is_index_dir(path):
    return (path / "data.mdb").is_file()


def file_identity(path):
    """(st_dev, st_ino) of the file or folder at ``path`` (links followed): the same for as
    long as that file lives, whatever is written to it; another once it is moved away or
    deleted and something else put at ``path``."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def replaced_files(opened):
    """The paths of ``opened`` ({path: (st_dev, st_ino)}, an index's
    :meth:`~streamk.index.Index.opened_files`) that hold another file now, or nothing: the
    index there was moved away, deleted or replaced (a backup moved into its place) since
    it was opened. One ``stat`` per path: never a read of the index, whatever its size."""
    out = []
    for path, identity in opened.items():
        try:
            now = file_identity(path)
        except (FileNotFoundError, NotADirectoryError):
            now = None
        except OSError:  # unreadable now (a permission, a failing disk): not known to be another file
            continue
        if now != tuple(identity):
            out.append(path)
    return out


def blob_entry(name, key):
    """A blob of sub-database ``name`` (SEALED_SUBDBS) named for a person: the metadata of a
    row, the others by the image id they are keyed by, as text."""
    if name == "metadata" and len(key) == 8:
        return f"the {name} entry of row {row_from_key(key)}"
    return f"the {name} entry of id {bytes(key).decode('utf-8', 'replace')!r}"


def not_an_index(path):
    """The NotAnIndexError for ``path``, where no index is (no data.mdb): what is there instead."""
    path = Path(path)
    if not path.exists():
        return NotAnIndexError(f"{path} does not exist: give the folder of an index (`streamk index create` "
                               f"makes one)")
    if not path.is_dir():
        return NotAnIndexError(f"{path} is a file, not an index's folder: give the folder of an index")
    return NotAnIndexError(f"{path} is not a streamk index (no LMDB data there: no data.mdb)")


class _Reading:
    """A read transaction as a context manager that names damage: LMDB's corruption errors
    raised inside it leave as IndexCorruptError."""

    __slots__ = ("txn", "path")

    def __init__(self, txn, path):
        self.txn = txn
        self.path = path

    def __enter__(self):
        return self.txn

    def __exit__(self, kind, exc, tb):
        self.txn.abort()
        if exc is not None and isinstance(exc, CORRUPTION):
            raise corrupt(self.path, f"LMDB: {exc}") from exc
        return False


class _SharedEnvs:
    """One LMDB environment per index file per process, shared by every Store open on it
    and closed with the last (LMDB refuses a second environment on the same file in one
    process). Keyed by data.mdb's device and inode, so a folder deleted and made anew is
    a new index."""

    def __init__(self):
        self._lock = threading.Lock()
        self._envs = {}  # (st_dev, st_ino) -> [env, readonly, users]

    @staticmethod
    def key(path):
        return file_identity(Path(path) / "data.mdb")

    def acquire(self, path, readonly, make):
        """(env, key): the environment open on ``path`` in this process, or ``make()``'s."""
        with self._lock:
            try:
                key = self.key(path)
            except OSError:
                key = None
            entry = self._envs.get(key) if key is not None else None
            if entry is not None:
                if entry[1] and not readonly:
                    raise ReadOnlyIndexError(f"{path} is open read-only elsewhere in this process: close it "
                                             f"before opening it for writing (or open it for writing first)")
                entry[2] += 1
                return entry[0], key
            env = make()
            key = self.key(path)
            self._envs[key] = [env, readonly, 1]
            return env, key

    def release(self, key):
        with self._lock:
            entry = self._envs.get(key)
            if entry is None:
                return
            entry[2] -= 1
            if entry[2] <= 0:
                del self._envs[key]
                entry[0].close()


_SHARED = _SharedEnvs()


def _opening_dbs(env):
    """The transaction to open sub-databases in: on a writable environment, a write one begun
    here. py-lmdb's own (open_db without a transaction) waits for the write lock holding the
    GIL: forever, when another thread of this process holds that lock and needs the GIL to
    finish (a server's writer while a backup opens the index). A read-only environment has no
    write lock to wait for: py-lmdb's own read transaction (a handle opened in one of ours
    would close with it)."""
    if env.flags()["readonly"]:
        return contextlib.nullcontext()
    return env.begin(write=True)


def unnumbered_image_fields(raw, path, image_id):
    """The JSON object of an image record of format 1 (before rows: ``streamk index upgrade``
    gives it one), or an IndexCorruptError naming the id."""
    try:
        fields = json.loads(bytes(raw))
        if not isinstance(fields, dict):
            raise TypeError(f"a JSON {type(fields).__name__}")
        return fields
    except (ValueError, TypeError) as exc:
        if isinstance(image_id, bytes):
            image_id = image_id.decode("utf-8", "replace")
        raise corrupt(path, f"the record of id {image_id!r} is unreadable ({type(exc).__name__})") from exc


def _subdb(name, what):
    """The accessor of sub-database ``name`` (an LMDB handle for ``txn.get(key, db=...)``)."""
    def handle(self):
        return self._dbs[name]
    handle.__doc__ = f"The ``{name}`` sub-database: {what}" + (
        " (None in an index of an older streamk opened read-only)" if name in OPTIONAL_SUBDBS else "")
    return property(handle)


class Store:
    """The LMDB environment of one index directory and its sub-databases: the one module that
    knows the sub-databases and the layout of an image's record.

    Use :meth:`create` or :meth:`open`. Each sub-database has one accessor (``store.images_db``,
    ``store.row_ids_db``, ...: see the module doc for what each holds); an image's record is
    read with :meth:`image` (an :class:`ImageRecord`), written with :meth:`put_image` and
    removed, with everything the image owns, by :meth:`delete_image`.
    """

    meta_db = _subdb("meta", "index metadata (format, encoder, codec, counters)")
    images_db = _subdb("images", "id -> the image's JSON record (read it with Store.image)")
    extras_db = _subdb("extras", "id -> .npz display extras")
    vectors_db = _subdb("vectors", "block -> vectors of its rows (streamk.index.vector_store)")
    row_ids_db = _subdb("row_ids", "row -> id")
    hashes_db = _subdb("hashes", "content key -> id")
    codes_db = _subdb("codes", "(epoch, row) -> the row's code (the block being filled)")
    code_blocks_db = _subdb("code_blocks", "(epoch, block) -> a sealed block of codes")
    code_runs_db = _subdb("code_runs", "(epoch, first block) -> the codes of RUN_BLOCKS sealed blocks in list order")
    dead_db = _subdb("dead", "block -> bitmap of removed rows")
    log_db = _subdb("log", "seq -> op + row")
    claims_db = _subdb("claims", "content key -> id (a shard's de-duplication claims)")
    geometry_db = _subdb("geometry", "row -> local-geometry record")
    thumbnails_db = _subdb("thumbnails", "id -> sealed JPEG thumbnail")
    metadata_db = _subdb("metadata", "row -> sealed JSON metadata")
    postings_db = _subdb("postings", "field + value -> rows (dupsort)")
    columns_db = _subdb("columns", "field + tag + first record -> a chunk of a range column")

    def __init__(self, path, env, readonly, create=False, max_map_size=None, env_key=None, create_optional=None):
        self.path = Path(path)
        self._lmdb_env = env
        self._env_key = env_key  # its entry in the environments shared in this process
        data_file = str(self.path / "data.mdb")  # the files opened: see opened_files
        self._opened = {str(self.path): file_identity(self.path),
                        data_file: env_key if env_key is not None else file_identity(data_file)}
        self.readonly = readonly
        self.max_map_size = None if max_map_size is None else int(max_map_size)
        self.block_rows = BLOCK_ROWS  # rows per block of codes (meta ``block_rows``)
        self._vector_store = None  # made on first use (Store.vector_store)
        self._map = (None, None, None)  # (map size, address of byte 0 of data.mdb at that size, page size)
        self._in_map = (None, None)  # (what it was found for, {key: (address, size)}): values_in_map
        with _opening_dbs(env) as txn:
            if create:
                self._dbs = {name: env.open_db(name.encode(), txn=txn, create=True, **SUBDB_FLAGS.get(name, {}))
                             for name in SUBDBS + OPTIONAL_SUBDBS}
            else:  # never create anything in an existing database (it may not be ours); create_optional:
                # whether the OPTIONAL_SUBDBS are made when absent (default: when writing; the upgrade decides)
                self._dbs = {name: env.open_db(name.encode(), txn=txn, create=False) for name in SUBDBS}
                make = not readonly if create_optional is None else create_optional
                for name in OPTIONAL_SUBDBS:
                    try:
                        self._dbs[name] = env.open_db(name.encode(), txn=txn, create=make,
                                                      **SUBDB_FLAGS.get(name, {}))
                    except lmdb.NotFoundError:  # read-only, written by an older streamk: nothing stored
                        self._dbs[name] = None

    @property
    def dbs(self):
        """Deprecated (streamk 0.3; removed after it): {name: handle}; use the accessors
        (``store.images_db``, ...) or :meth:`subdbs`."""
        import warnings
        warnings.warn("Store.dbs is deprecated and will be removed after streamk 0.3: use the sub-database "
                      "accessors (store.images_db, ...) or store.subdbs()", DeprecationWarning, stacklevel=2)
        return self.subdbs()

    def subdbs(self):
        """{name: handle} of every sub-database (None: absent from an older index opened
        read-only): for walks over all of them (dumps, sizes, tests that damage bytes)."""
        return dict(self._dbs)

    def subdb(self, name):
        """The handle of sub-database ``name`` when the name comes as data (a blob
        sub-database of SEALED_SUBDBS, a walk over several); KeyError for an unknown name."""
        return self._dbs[name]

    # ------------------------------------------------------------ open / create
    @staticmethod
    def _env(path, readonly, map_size):
        return lmdb.open(str(path), map_size=map_size, subdir=True, max_dbs=len(SUBDBS) + len(OPTIONAL_SUBDBS) + 4,
                         readonly=readonly, create=False, lock=True, readahead=False,
                         max_readers=126)

    def will_need(self, txn, name, wanted=None):
        """Start reading, all at once, the pages of the values of sub-database ``name`` kept on
        overflow pages (``wanted(key) -> bool``: some of them) as the read transaction ``txn``
        sees them: for values about to be read whole (the codec, sealed blocks), which py-lmdb
        would read page by page, each page waited for (:mod:`~streamk.index.lmdb_pages`).
        Advice only: nothing is read from it."""
        found = self._big_values(txn, name, wanted)
        if found:
            will_need(found.values())

    def values_in_map(self, txn, name, prefix):
        """{key: read-only view of the map} of the values of sub-database ``name`` kept on
        overflow pages whose keys begin with ``prefix``, as the read transaction ``txn`` sees
        them, found by walking its B-tree in the map (:func:`~streamk.index.lmdb_pages.
        big_values`); None where the map cannot be walked (no /proc, not Linux). Unlike
        py-lmdb's values, whose every page it reads first, only the pages touched are read:
        for a value read in part (a run of codes: its header and the probed lists). Valid
        while ``txn`` is; what is read from them must be checked (they carry CRCs).

        The places found are kept while the sub-database's record (its root page and
        counts: any change to its tree changes it) and the map stay the same."""
        record = txn.get(name.encode())
        key = (name, prefix, None if record is None else bytes(record), self.env.info()["map_size"])
        if self._in_map[0] != key:
            found = self._big_values(txn, name, lambda k: k[:len(prefix)] == prefix)
            self._in_map = (key, found)
        found = self._in_map[1]
        if found is None:
            return None
        return {k: memoryview((ctypes.c_char * n).from_address(at)).cast("B").toreadonly()
                for k, (at, n) in found.items()}

    def _big_values(self, txn, name, wanted):
        """lmdb_pages.big_values of sub-database ``name`` as ``txn`` sees it (None: no map to walk)."""
        record = txn.get(name.encode())  # the sub-database's record in LMDB's main database
        if record is None or len(record) != 48:
            return None
        size = self.env.info()["map_size"]
        if self._map[0] != size:  # a map grown since (by any Store of this process) is mapped anew
            self._map = (size, map_base(self.path / "data.mdb"), self.env.stat()["psize"])
        _, base, psize = self._map
        try:
            file_bytes = os.stat(self.path / "data.mdb").st_size
        except OSError:
            return None
        if base is None:
            return None
        # nothing past the map (a file grown since the map was made) nor past the file is read
        return big_values(base, min(file_bytes, size), psize, free_db_root(bytes(record)), wanted)

    def reader_check(self):
        """Free the reader slots of processes that died holding one (a SIGKILLed reader
        keeps its slot, and with it old pages from reuse, until this runs)."""
        return self.env.reader_check()

    @classmethod
    def create(cls, path, meta, map_size=DEFAULT_MAP_SIZE, max_map_size=None):
        """A new store at ``path`` (a new or empty directory) with ``meta`` (name -> bytes).

        max_map_size: the map never grows past it (a write that needs more is a
        DiskFullError); None: no limit but the disk's. On a disk without room for
        it nothing is left behind (DiskFullError)."""
        path = Path(path)
        if path.exists():
            if not path.is_dir():
                raise IndexExistsError(f"{path} exists and is not a directory")
            if any(path.iterdir()):
                raise IndexExistsError(f"{path} is not empty: refusing to create an index there")
        record = {b"format": json.dumps({"format": FORMAT, "version": FORMAT_VERSION}).encode(),
                  b"seq": seq_key(0)}
        record.update({k.encode() if isinstance(k, str) else k: v for k, v in meta.items()})
        needed = CREATE_ROOM + 2 * sum(len(k) + len(v) for k, v in record.items())
        existing = next(p for p in (path, *path.parents) if p.exists())
        check_room(existing, needed)  # LMDB maps its lock file: a full disk there would be a SIGBUS
        made = [p for p in (path, *path.parents) if not p.exists()]
        path.mkdir(parents=True, exist_ok=True)
        env = None
        try:
            env, key = _SHARED.acquire(path, False, lambda: cls._env(path, False, int(map_size)))
            store = cls(path, env, False, create=True, max_map_size=max_map_size, env_key=key)

            def put_meta(txn):
                for k, v in record.items():
                    store.put_meta(txn, k, v)
            store.write(put_meta)
        except BaseException as exc:
            if env is not None:
                _SHARED.release(key)
            for name in ("data.mdb", "lock.mdb"):  # nothing half-made is left
                (path / name).unlink(missing_ok=True)
            for p in made:
                p.rmdir()
            if isinstance(exc, (lmdb.Error, OSError)) and not isinstance(exc, DiskFullError):
                full = disk_full(existing, exc, needed)
                if full is not None:
                    raise full from exc
            raise
        store.block_rows = store.get_int(b"block_rows", default=BLOCK_ROWS)
        return store

    @classmethod
    def open(cls, path, readonly=False, max_map_size=None):
        path = Path(path)
        if not path.is_dir() or not _is_index_dir(path):
            raise not_an_index(path)
        check_lmdb_file(path)  # before mapping it: a truncated file would be a SIGBUS
        try:  # the environment this process has open on it already, if any (one per file)
            env, key = _SHARED.acquire(path, readonly, lambda: cls._env(path, readonly, 0))  # 0: the file's size
        except (lmdb.Error, OSError) as exc:
            if isinstance(exc, StreamkError):  # (ReadOnlyIndexError: open read-only elsewhere in this process)
                raise
            raise open_error(path, exc, readonly) from exc
        try:
            cls._check_format(path, env)  # before the sub-databases: an older format has others
            store = cls(path, env, readonly, max_map_size=max_map_size, env_key=key)
            store.reader_check()
            store.block_rows = store.get_int(b"block_rows", default=BLOCK_ROWS)
        except (NotAnIndexError, IndexFormatError, IndexCorruptError):
            _SHARED.release(key)
            raise
        except CORRUPTION as exc:  # (verify --repair opens it the same way: nothing it can rebuild)
            _SHARED.release(key)
            raise corrupt(path, f"LMDB: {exc}", repairable=False) from exc
        except OPEN_DAMAGE as exc:  # it has streamk's meta: a sub-database lost or unreadable is damage
            _SHARED.release(key)
            raise corrupt(path, f"its sub-databases cannot be opened (LMDB: {exc})", repairable=False) from exc
        except lmdb.Error as exc:
            _SHARED.release(key)
            raise NotAnIndexError(f"{path} is not a streamk index ({exc})") from exc
        except ValueError as exc:
            _SHARED.release(key)
            raise NotAnIndexError(f"{path}: unreadable index metadata ({exc})") from exc
        return store

    @staticmethod
    def _has_subdbs(env, txn):
        """Whether the environment holds one of streamk's sub-databases other than meta: found
        by name, or listed in its main B-tree (a damaged leaf may list a name that a lookup
        misses); a main B-tree that LMDB cannot walk counts (damage, not another database)."""
        names = [name.encode() for name in SUBDBS[1:] + OPTIONAL_SUBDBS]
        try:
            for name in names:
                try:
                    env.open_db(name, txn=txn, create=False)
                    return True
                except lmdb.NotFoundError:
                    continue
            with env.begin() if txn is None else contextlib.nullcontext(txn) as reading:
                return any(key in names for key, _ in itertools.islice(reading.cursor(), MAX_SUBDB_SCAN))
        except OPEN_DAMAGE:
            return True

    @staticmethod
    def _check_format(path, env):
        with _opening_dbs(env) as txn:
            try:
                meta = env.open_db(b"meta", txn=txn, create=False)
            except lmdb.NotFoundError:
                if Store._has_subdbs(env, txn):  # streamk's other sub-databases: damage, not another database
                    raise corrupt(path, "its sub-database meta cannot be found", repairable=False) from None
                raise NotAnIndexError(f"{path} is an LMDB database but not a streamk index") from None
        with env.begin() as txn:
            raw = txn.get(b"format", db=meta)
        try:
            info = json.loads(bytes(raw)) if raw is not None else None
        except ValueError as exc:
            raise NotAnIndexError(f"{path}: unreadable index metadata ({exc})") from exc
        if not isinstance(info, dict) or info.get("format") != FORMAT:
            raise NotAnIndexError(f"{path} is an LMDB database but not a streamk index")
        if info.get("version") in (1, 2, 3):
            made_by = {1: "streamk 0.1", 2: "streamk 0.2 before checksums",
                       3: "streamk 0.2, before checksums on image records"}[info["version"]]
            raise IndexFormatError(f"{path}: index format version {info['version']} ({made_by}); upgrade it in "
                                   f"place with `streamk index upgrade {path}`")
        if info.get("version") != FORMAT_VERSION:
            raise IndexFormatError(f"{path}: index format version {info.get('version')!r}; this "
                                   f"streamk reads version {FORMAT_VERSION}")

    @property
    def env(self):
        """The LMDB environment; IndexClosedError once this store is closed (LMDB said
        "Attempt to operate on closed/deleted/dropped object")."""
        if self._lmdb_env is None:
            raise IndexClosedError(f"{self.path} was closed: open it again (StreamingIndex.open) to use it")
        return self._lmdb_env

    def opened_files(self):
        """{path: (st_dev, st_ino)} of the index's folder and of the LMDB data file its
        environment maps, as they were when this store opened them (:func:`replaced_files`
        tells whether the paths still hold them)."""
        return dict(self._opened)

    def close(self):
        """Close this store (the environment with the last store of this process on it)."""
        self._in_map = (None, None)
        key, self._env_key = self._env_key, None
        self._lmdb_env = None
        if key is not None:
            _SHARED.release(key)

    # ------------------------------------------------------------ transactions
    def read(self, buffers=False):
        """A read transaction (use as a context manager: ``with store.read() as txn``); adopts
        a map grown elsewhere; LMDB's corruption errors inside it become an
        :class:`~streamk.errors.IndexCorruptError` naming the index.

        buffers=True: values are zero-copy views of the map, valid until the
        transaction ends (for reading many vectors or code blocks)."""
        try:
            try:
                txn = self.env.begin(buffers=buffers)
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)
                txn = self.env.begin(buffers=buffers)
        except CORRUPTION as exc:
            raise corrupt(self.path, f"LMDB: {exc}") from exc
        return _Reading(txn, self.path)

    def write(self, fn):
        """Run ``fn(txn)`` in one write transaction and commit; return its result.

        On a full map: abort, double the map size and rerun ``fn`` from scratch
        (so ``fn`` must not keep effects outside ``txn`` across calls); past
        ``max_map_size``: :class:`~streamk.errors.DiskFullError`. Any other
        exception aborts the transaction and propagates: nothing is written. A
        commit that finds no room on the disk (ENOSPC; LMDB says EIO for a short
        write) is a DiskFullError with the space it needed; LMDB's corruption
        errors are an :class:`~streamk.errors.IndexCorruptError`.
        """
        if self.readonly:
            raise ReadOnlyIndexError(f"{self.path} was opened read-only")
        while True:
            try:
                txn = self.env.begin(write=True)
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)
                continue
            except CORRUPTION as exc:
                raise corrupt(self.path, f"LMDB: {exc}") from exc
            pages = None
            try:
                result = fn(txn)
                pages = self._pages(txn)
                txn.commit()
                return result
            except lmdb.MapFullError:
                self._abort(txn)
                self.grow()
            except CORRUPTION as exc:
                self._abort(txn)
                raise corrupt(self.path, f"LMDB: {exc}") from exc
            except (lmdb.Error, OSError) as exc:
                self._abort(txn)
                full = None if isinstance(exc, StreamkError) else disk_full(self.path, exc, self._needed(pages))
                if full is not None:
                    raise full from exc
                raise
            except BaseException:
                self._abort(txn)
                raise

    def _pages(self, txn):
        """Pages of every sub-database as ``txn`` sees them (what a failed commit needed)."""
        n = 0
        for db in self._dbs.values():
            if db is not None:
                st = txn.stat(db)
                n += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        return n

    def _needed(self, pages):
        """Bytes a failed commit needed beyond what is stored now (at least one page)."""
        psize = 4096
        try:
            with self.env.begin() as txn:
                psize = txn.stat(self.meta_db)["psize"]
                grown = 0 if pages is None else pages - self._pages(txn)
        except lmdb.Error:
            grown = 0
        return max(1, grown + 2) * psize

    @staticmethod
    def _abort(txn):
        try:
            txn.abort()
        except lmdb.Error:  # already finished (a failed commit)
            pass

    def grow(self):
        size = self.env.info()["map_size"]
        new = max(2 * size, 1 << 20)
        if self.max_map_size is not None and new > self.max_map_size:
            if size >= self.max_map_size:
                raise DiskFullError(
                    f"{self.path}: the index's map is at its limit ({self.max_map_size:,} bytes, max_map_size) "
                    f"and this write needs more: nothing of it was stored; raise the limit or free space in the "
                    f"index (remove images) and run it again", path=self.path, needed=new - size)
            new = self.max_map_size
        self.env.set_mapsize(new)

    @property
    def map_size(self):
        return self.env.info()["map_size"]

    # ------------------------------------------------------------ helpers
    def get_meta(self, key, txn=None):
        """A metadata value (None when absent); the blobs of CHECKED_META are checked against
        their CRC32C (IndexCorruptError)."""
        key = key.encode() if isinstance(key, str) else key
        if txn is None:
            with self.read() as t:
                value = self.get_meta(key, t)
                return None if value is None else bytes(value)
        if key in CHECKED_META:
            return get_checked_meta(txn, self.meta_db, key, self.path)
        return txn.get(key, db=self.meta_db)

    def put_meta(self, txn, key, value):
        """Store a metadata value (with its CRC32C when it is one of CHECKED_META)."""
        key = key.encode() if isinstance(key, str) else key
        if key in CHECKED_META:
            put_checked_meta(txn, self.meta_db, key, value)
        else:
            txn.put(key, value, db=self.meta_db)

    # a sub-database of blobs (thumbnails, and any added later: list it in SEALED_SUBDBS)
    # stores each value followed by its CRC32C, put and read through these two
    def put_blob(self, txn, name, key, value):
        """Store blob ``value`` under ``key`` in sub-database ``name``, sealed with its CRC32C."""
        txn.put(key, seal(value), db=self._dbs[name])

    def get_blob(self, txn, name, key):
        """The blob under ``key`` in sub-database ``name`` (bytes; None when absent), checked
        against its CRC32C (IndexCorruptError)."""
        db = self._dbs.get(name)
        raw = None if db is None else txn.get(key, db=db)
        return None if raw is None else self.unseal_blob(name, key, raw)

    def unseal_blob(self, name, key, raw):
        """The blob (bytes) of a value read from sub-database ``name`` of SEALED_SUBDBS,
        checked against its CRC32C (IndexCorruptError naming the entry)."""
        return bytes(unseal(raw, self.path, blob_entry(name, key)))

    def seq(self, txn=None):
        raw = self.get_meta(b"seq", txn)
        return seq_from_key(raw) if raw is not None else 0

    def get_int(self, key, txn=None, default=0):
        raw = self.get_meta(key, txn)
        return int(bytes(raw)) if raw is not None else default

    def put_int(self, txn, key, value):
        txn.put(key.encode() if isinstance(key, str) else key, str(int(value)).encode(), db=self.meta_db)

    def bump(self, txn, op, row):
        """Log one change (op b"+", b"-" or b"*" of row ``row``), increment the change
        counter; every LOG_TRIM_EVERY changes, drop log entries older than LOG_KEEP."""
        seq = self.seq(txn) + 1
        txn.put(seq_key(seq), op + row_key(row), db=self.log_db)
        txn.put(b"seq", seq_key(seq), db=self.meta_db)
        if seq % LOG_TRIM_EVERY == 0 and seq > LOG_KEEP:
            self._trim_log(txn, seq - LOG_KEEP)
        return seq

    def _trim_log(self, txn, below):
        with txn.cursor(db=self.log_db) as cur:
            positioned = cur.first()
            while positioned and seq_from_key(cur.key()) < below:
                cur.delete()  # moves to the next entry (unpositioned after the last)
                positioned = bool(cur.key())

    def changes_since(self, txn, seq):
        """[(seq, op, row)] logged after ``seq``, or None when the log no longer reaches
        back that far (it was trimmed: the caller must load everything again)."""
        out = []
        log = self.log_db
        with txn.cursor(db=log) as cur:
            if not cur.set_range(seq_key(seq + 1)):
                return out
            if seq_from_key(cur.key()) != seq + 1:
                return None  # trimmed: the entries right after seq are gone
            for k, v in cur:
                out.append((seq_from_key(k), bytes(v[:1]), row_from_key(v[1:9])))
        return out

    def dump(self):
        """{sub-db name: {key: value}} of everything stored (for tests and debugging)."""
        out = {}
        with self.read() as txn:
            for name, db in self._dbs.items():
                if db is None:
                    continue
                with txn.cursor(db=db) as cur:
                    out[name] = {bytes(k): bytes(v) for k, v in cur}
        return out

    def count(self, name="images"):
        with self.read() as txn:
            return txn.stat(self._dbs[name])["entries"]

    # ------------------------------------------------------------ images: records, ids, removal
    def image_key(self, txn, image_id):
        """The key under which ``image_id`` (an id a user gave: str) is stored, or None: the
        id as given, else its other Unicode normal form (:func:`~streamk.index.keys.lookup_keys`:
        new ids are stored NFC, an index written before holds them as their files named them).
        The one lookup of a user's id; key bytes are exact."""
        if isinstance(image_id, bytes):
            return image_id if txn.get(image_id, db=self.images_db) is not None else None
        for key in lookup_keys(image_id):
            if txn.get(key, db=self.images_db) is not None:
                return key
        return None

    def require_key(self, txn, image_id):
        """:meth:`image_key`, or :meth:`unknown_id`'s error."""
        key = self.image_key(txn, image_id)
        if key is None:
            raise self.unknown_id(txn, image_id)
        return key

    def image(self, txn, image_id):
        """The :class:`ImageRecord` of ``image_id`` (str, found in either normal form:
        :meth:`image_key`; or its key bytes, exact) as ``txn`` sees it, or None when no image
        has that id; an unreadable record is an IndexCorruptError."""
        key = self.image_key(txn, image_id)
        raw = None if key is None else txn.get(key, db=self.images_db)
        return None if raw is None else ImageRecord.decode(raw, self.path, key)

    def images(self, txn, image_ids):
        """:meth:`image` of each id (None for an absent one)."""
        return [self.image(txn, i) for i in image_ids]

    def raw_image(self, txn, image_id):
        """The JSON bytes of ``image_id``'s record, checked against its CRC32C but not parsed
        (None when absent; IndexCorruptError naming the id when the checksum fails): what
        ``Index.records`` gives and :meth:`ImageRecord.from_json` reads."""
        key = self.image_key(txn, image_id)
        raw = None if key is None else txn.get(key, db=self.images_db)
        if raw is None:
            return None
        if not checksum_ok(raw):
            raise corrupt(self.path, f"the record of id {image_id!r} is unreadable (checksum mismatch)")
        return bytes(raw[:-CRC_BYTES])

    def has_image(self, txn, image_id):
        """Whether an image has id ``image_id`` (str, in either normal form, or key bytes)."""
        return self.image_key(txn, image_id) is not None

    def require_image(self, txn, image_id):
        """The :class:`ImageRecord` of ``image_id``, or :meth:`unknown_id`'s error."""
        record = self.image(txn, image_id)
        if record is None:
            raise self.unknown_id(txn, image_id)
        return record

    def unknown_id(self, txn, image_id):
        """The error for an id not found: UnknownIdError, unless the B-tree of records around
        it is damaged (then IndexCorruptError): its neighbours in key order must be valid ids
        in order with readable records (a few cursor steps, O(log N)). The one way the index
        tells an unknown id from a damaged one. ``image_id``: str or its key bytes."""
        if isinstance(image_id, bytes):
            image_id = image_id.decode("utf-8", "replace")
        key = id_key(image_id)
        seen = []
        with txn.cursor(db=self.images_db) as cur:
            if cur.set_range(key):
                seen.append((bytes(cur.key()), bytes(cur.value())))
                if cur.next():
                    seen.append((bytes(cur.key()), bytes(cur.value())))
                cur.set_range(key)
                if cur.prev():
                    seen.insert(0, (bytes(cur.key()), bytes(cur.value())))
            elif cur.last():
                seen.append((bytes(cur.key()), bytes(cur.value())))
        try:
            for k, v in seen:
                ImageRecord.decode(v, self.path, validate_id(k.decode("utf-8")))
            ok = all(a[0] < b[0] for a, b in zip(seen, seen[1:])) and key not in (k for k, _ in seen)
        except (StreamkError, ValueError):
            ok = False
        if not ok:
            return corrupt(self.path, f"the records around id {image_id!r} are unreadable (a damaged B-tree "
                           "page of 'images'): it may be stored but cannot be read")
        return UnknownIdError(f"no image {image_id!r} in the index")

    def put_image(self, txn, image_id, fields):
        """Store the JSON record ``fields`` (a dict with its ``row``) of ``image_id`` (str or key bytes)."""
        key = image_id if isinstance(image_id, bytes) else id_key(image_id)
        txn.put(key, seal(json.dumps(fields).encode()), db=self.images_db)  # format 4: with its CRC32C

    def vector_store(self, txn=None):
        """The :class:`~streamk.index.vector_store.VectorStore` of this index (made once)."""
        if self._vector_store is None:
            dim = self.get_int(b"dim", txn)
            dtype = np.dtype(bytes(self.get_meta(b"vector_dtype", txn)).decode())
            self._vector_store = VectorStore(self, dim, dtype, txn)
        return self._vector_store

    def delete_image(self, txn, record, salvage=False):
        """Remove everything ``record`` (an :class:`ImageRecord`) owns (IMAGE_BY_ID,
        IMAGE_BY_ROW, IMAGE_DERIVED), mark its row removed and log it.

        salvage: the image's data is damaged (``streamk index verify --repair``): its vector
        block and metadata are not read (the repair rewrites the one and drops the postings
        of the other itself)."""
        self.delete_id(txn, record.image_id.encode("utf-8"), record.content_key)  # read from the store: its key
        self.delete_row(txn, record.row, salvage)

    def delete_id(self, txn, key, content_key=None):
        """The part of :meth:`delete_image` keyed by id (IMAGE_BY_ID, and ``content_key`` in
        ``hashes`` when it names this id): for an id whose record is unreadable (a repair)."""
        if content_key is not None and txn.get(content_key, db=self.hashes_db) == key:
            txn.delete(content_key, db=self.hashes_db)
        for name in IMAGE_BY_ID:
            if self._dbs[name] is not None:
                txn.delete(key, db=self._dbs[name])

    def delete_row(self, txn, row, salvage=False):
        """The part of :meth:`delete_image` keyed by row (IMAGE_BY_ROW, the vector, the
        metadata's postings, the removal mark and log entry): for a row whose record is
        unreadable, removed by a repair."""
        if not salvage:
            self.vector_store(txn).clear(txn, row)
            delete_metadata(txn, self, row)
        rk = row_key(row)
        for name in IMAGE_BY_ROW:
            if self._dbs[name] is not None:
                txn.delete(rk, db=self._dbs[name])
        mark_removed(txn, self, row)
        self.bump(txn, b"-", row)

    # ------------------------------------------------------------ local geometry
    def geometry_records(self, txn, rows):
        """The stored local-geometry record of each row (bytes, or a buffer with
        ``read(buffers=True)``), None for a row without one (one bulk read)."""
        db = self.geometry_db
        if db is None or not len(rows):
            return [None] * len(rows)
        keys = [row_key(int(r)) for r in rows]
        with txn.cursor(db=db) as cur:
            found = dict((bytes(k), v) for k, v in cur.getmulti(keys))
        return [found.get(k) for k in keys]

    @staticmethod
    def failing_geometry(records):
        """The positions of those of ``records`` (as :meth:`geometry_records` read them; None:
        no record) that fail their checks: each unpacked alone, for when a batch of them failed."""
        bad = []
        for i, rec in enumerate(records):
            try:
                if rec is not None:
                    unpack_geometry(rec)
            except GeometryRecordError:
                bad.append(i)
        return bad

    def damaged_geometry(self, rows, records):
        """The IndexCorruptError naming, by image id and row, those of ``rows`` whose geometry
        record (``records``, as :meth:`geometry_records` read them) fails its checks."""
        bad = [int(rows[i]) for i in self.failing_geometry(records)] or [int(r) for r in rows]
        return corrupt(self.path, f"{DAMAGED_RECORD} {self.images_of_rows(bad)} fails its checks "
                       "(checksum or layout)", rows=bad)

    def images_of_rows(self, rows):
        """``rows`` named for a person: "image 'a' (row 3)", "images 'a', 'b' (rows 3, 5)" (a row
        whose id cannot be read named by its row alone). Reads row_ids: for messages about damage."""
        try:
            with self.read() as txn:
                ids = [txn.get(row_key(r), db=self.row_ids_db) for r in rows[:8]]
        except StreamkError:
            ids = [None] * len(rows[:8])
        named = [repr(bytes(i).decode("utf-8", "replace")) for i in ids if i is not None]
        if not named:
            return describe_rows(rows)
        more = f" and {len(rows) - len(named)} more" if len(rows) > len(named) else ""
        return f"image{'s' if len(rows) > 1 else ''} {', '.join(named)}{more} ({describe_rows(rows)})"

    # ------------------------------------------------------------ test-facing: stored bytes as they are
    # For tests that damage or inspect what is stored, byte for byte: no checksum is checked or
    # written, no change is logged. Nothing in streamk calls these.
    def stored_value(self, name, key):
        """The bytes under ``key`` in sub-database ``name`` as stored (None when absent)."""
        with self.read() as txn:
            raw = txn.get(key, db=self._dbs[name])
            return None if raw is None else bytes(raw)

    def stored_items(self, name):
        """[(key, value)] of sub-database ``name`` as stored, in key order."""
        with self.read() as txn, txn.cursor(db=self._dbs[name]) as cur:
            return [(bytes(k), bytes(v)) for k, v in cur]

    def overwrite_value(self, name, key, change):
        """Replace the value under ``key`` in sub-database ``name`` by ``change(old bytes or
        None)`` (bytes; None deletes it), in one write transaction, bypassing every check."""
        def run(txn):
            raw = txn.get(key, db=self._dbs[name])
            new = change(None if raw is None else bytes(raw))
            if new is None:
                txn.delete(key, db=self._dbs[name])
            else:
                txn.put(key, new, db=self._dbs[name])
        self.write(run)

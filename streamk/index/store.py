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
``images``      id -> JSON: kind, source, sha256, box, n_descriptors, added, seq, row.
``extras``      id -> .npz bytes (keypoints, weights) for display; optional.
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

``thumbnails``, ``metadata`` and any sub-database of blobs listed in SEALED_SUBDBS store each value
followed by its CRC32C (:meth:`Store.put_blob` / :meth:`Store.get_blob`).

Checksums (format 3): every vector block (and each of its rows), sealed code block and
row code carries its CRC32C, the encoder, codec and vocabulary blobs theirs under
``meta/crc32c:<name>``; each is checked when read, and damage is an
:class:`~streamk.errors.IndexCorruptError` naming the index and the rows
(:mod:`streamk.index.integrity`; ``streamk index verify`` checks everything). Opening
checks ``data.mdb`` against LMDB's header first (a truncated file is refused, never
mapped). An index of format 1 or 2 is upgraded in place by ``streamk index upgrade``.

Every change increments ``meta/seq`` and appends to ``log`` in the same
transaction, so a reader that knows the seq it last saw applies only what
changed. The log keeps the last LOG_KEEP entries: a reader further behind
loads everything again.

Write transactions go through :meth:`Store.write`, which grows the map when it
is full (abort, ``set_mapsize`` x2, rerun the whole function): users never see
``lmdb.MapFullError``; past ``max_map_size``, or when the disk has no room for the
commit, it is a :class:`~streamk.errors.DiskFullError` and nothing is written. Readers adopt a map grown by another process
(``MapResizedError`` -> ``set_mapsize(0)``). Reader slots left by killed
processes are reclaimed at open (``reader_check``).

One :class:`Store` per process and index; a Store is not thread-safe. Ids are
LMDB keys, never file names: nothing is written outside the index directory.
"""

import json
import os
import struct
import threading
import unicodedata
from pathlib import Path

import lmdb
import numpy as np

from .integrity import (CORRUPTION, check_lmdb_file, check_room, corrupt, disk_full, get_checked_meta,
                        put_checked_meta, seal, unseal)

from ..errors import (DiskFullError, IndexExistsError, StreamkError, IndexFormatError, InvalidIdError, NotAnIndexError,
                     ReadOnlyIndexError)

FORMAT = "streamk-index"
FORMAT_VERSION = 3  # 3: CRC32C on vector and code blocks, row codes, blobs (2: none)
SUBDBS = ("meta", "images", "extras", "vectors", "row_ids", "hashes", "codes", "code_blocks", "dead",
          "log", "claims")
# Sub-databases added after format 2 was released: an index written before them lacks them;
# a writer creates them at open, a read-only reader sees them as empty.
OPTIONAL_SUBDBS = ("geometry", "thumbnails", "metadata", "postings", "columns")
SUBDB_FLAGS = {"postings": {"dupsort": True, "dupfixed": True}}  # (streamk.index.metadata)
VECTOR_DTYPES = ("float16", "float32")
DEFAULT_MAP_SIZE = 64 << 20  # grows by doubling when full
CREATE_ROOM = 1 << 20  # free bytes a new index needs on its disk, beyond its metadata
CHECKED_META = (b"encoder", b"codec", b"vocabulary")  # metadata blobs stored with their CRC32C
SEALED_SUBDBS = ("thumbnails", "metadata")  # sub-databases of blobs, each value followed by its CRC32C
MAX_ID_CHARS = 200
MAX_KEY_BYTES = 511  # LMDB's default maximum key size
BLOCK_ROWS = 4096  # default rows per sealed block of codes and per bitmap of removed rows
LOG_KEEP = 1 << 16  # log entries kept; a reader further behind reloads everything
LOG_TRIM_EVERY = 1024  # trim the log when seq crosses a multiple of this


def validate_id(image_id):
    """Return ``image_id`` if it is a valid image id, else raise :class:`InvalidIdError`."""
    if not isinstance(image_id, str):
        raise InvalidIdError(f"an image id must be a str, got {type(image_id).__name__}")
    if not 1 <= len(image_id) <= MAX_ID_CHARS:
        raise InvalidIdError(f"an image id must have 1..{MAX_ID_CHARS} characters, got {len(image_id)}")
    if image_id in (".", ".."):
        raise InvalidIdError(f"{image_id!r} is not a valid image id")
    if "/" in image_id or "\\" in image_id:
        raise InvalidIdError(f"an image id may not contain '/' or '\\': {image_id!r}")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in image_id):
        raise InvalidIdError(f"an image id may not contain control characters: {image_id!r}")
    try:
        key = image_id.encode("utf-8")
    except UnicodeEncodeError as exc:  # pragma: no cover - surrogates caught above
        raise InvalidIdError(f"an image id must be valid text: {image_id!r}") from exc
    if len(key) > MAX_KEY_BYTES:
        raise InvalidIdError(f"an image id may take at most {MAX_KEY_BYTES} bytes in UTF-8, "
                             f"got {len(key)}")
    return image_id


def id_key(image_id):
    return validate_id(image_id).encode("utf-8")


_U64 = struct.Struct(">Q")
_EPOCH_ROW = struct.Struct(">IQ")


def seq_key(seq):
    return _U64.pack(seq)


def seq_from_key(key):
    return _U64.unpack(bytes(key))[0]


row_key = seq_key  # rows, blocks and seqs are all 8-byte big-endian keys (sorted by number)
row_from_key = seq_from_key


def epoch_key(epoch, n):
    """Key of row (or block) ``n`` of the codes of ``epoch``: sorted by epoch, then by n."""
    return _EPOCH_ROW.pack(epoch, n)


def epoch_key_split(key):
    return _EPOCH_ROW.unpack(bytes(key))


_EPOCH_ROW_DTYPE = np.dtype([("epoch", ">u4"), ("row", ">u8")])


def rows_of_epoch_keys(keys):
    """int64 rows of a list of (epoch, row) keys."""
    return np.frombuffer(b"".join(keys), dtype=_EPOCH_ROW_DTYPE)["row"].astype(np.int64)


def removed_rows(txn, store, n_rows):
    """uint8 array (at least n_rows long): 1 for the rows marked removed in the ``dead``
    bitmaps (N / block_rows reads)."""
    B = store.block_rows
    dead = np.zeros(max(int(n_rows), 0), np.uint8)
    with txn.cursor(db=store.dbs["dead"]) as cur:
        for k, bits in cur:
            lo = row_from_key(k) * B
            if lo + B > dead.shape[0]:
                dead = np.concatenate([dead, np.zeros(lo + B - dead.shape[0], np.uint8)])
            dead[lo:lo + B] = np.unpackbits(np.frombuffer(bits, np.uint8), bitorder="little")
    return dead


def rows_from_keys(keys):
    """int64 rows of a list of 8-byte big-endian keys, without a Python step per key's bytes."""
    return np.frombuffer(b"".join(keys), dtype=">u8").astype(np.int64)


def _is_index_dir(path):
    return (path / "data.mdb").is_file()


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
        st = os.stat(Path(path) / "data.mdb")
        return st.st_dev, st.st_ino

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


class Store:
    """The LMDB environment of one index directory and its sub-databases.

    Use :meth:`create` or :meth:`open`; ``store.dbs[name]`` are the handles.
    """

    def __init__(self, path, env, readonly, create=False, max_map_size=None, env_key=None):
        self.path = Path(path)
        self.env = env
        self._env_key = env_key  # its entry in the environments shared in this process
        self.readonly = readonly
        self.max_map_size = None if max_map_size is None else int(max_map_size)
        self.block_rows = BLOCK_ROWS  # rows per block of codes (meta ``block_rows``)
        if create:
            self.dbs = {name: env.open_db(name.encode(), create=True, **SUBDB_FLAGS.get(name, {}))
                        for name in SUBDBS + OPTIONAL_SUBDBS}
        else:  # never create anything in an existing database (it may not be ours)
            self.dbs = {name: env.open_db(name.encode(), create=False) for name in SUBDBS}
            for name in OPTIONAL_SUBDBS:
                try:
                    self.dbs[name] = env.open_db(name.encode(), create=not readonly, **SUBDB_FLAGS.get(name, {}))
                except lmdb.NotFoundError:  # read-only, written by an older streamk: nothing stored
                    self.dbs[name] = None

    # ------------------------------------------------------------ open / create
    @staticmethod
    def _env(path, readonly, map_size):
        return lmdb.open(str(path), map_size=map_size, subdir=True, max_dbs=len(SUBDBS) + len(OPTIONAL_SUBDBS) + 4,
                         readonly=readonly, create=False, lock=True, readahead=False,
                         max_readers=126)

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
            raise NotAnIndexError(f"{path} is not a streamk index (no LMDB data there)")
        check_lmdb_file(path)  # before mapping it: a truncated file would be a SIGBUS
        try:  # the environment this process has open on it already, if any (one per file)
            env, key = _SHARED.acquire(path, readonly, lambda: cls._env(path, readonly, 0))  # 0: the file's size
        except lmdb.Error as exc:
            raise NotAnIndexError(f"{path}: cannot open as an LMDB index ({exc})") from exc
        try:
            cls._check_format(path, env)  # before the sub-databases: an older format has others
            store = cls(path, env, readonly, max_map_size=max_map_size, env_key=key)
            store.reader_check()
            store.block_rows = store.get_int(b"block_rows", default=BLOCK_ROWS)
        except (NotAnIndexError, IndexFormatError):
            _SHARED.release(key)
            raise
        except CORRUPTION as exc:
            _SHARED.release(key)
            raise corrupt(path, f"LMDB: {exc}") from exc
        except (lmdb.NotFoundError, lmdb.Error) as exc:
            _SHARED.release(key)
            raise NotAnIndexError(f"{path} is not a streamk index ({exc})") from exc
        except ValueError as exc:
            _SHARED.release(key)
            raise NotAnIndexError(f"{path}: unreadable index metadata ({exc})") from exc
        return store

    @staticmethod
    def _check_format(path, env):
        try:
            meta = env.open_db(b"meta", create=False)
        except lmdb.NotFoundError:
            raise NotAnIndexError(f"{path} is an LMDB database but not a streamk index") from None
        with env.begin() as txn:
            raw = txn.get(b"format", db=meta)
        try:
            info = json.loads(bytes(raw)) if raw is not None else None
        except ValueError as exc:
            raise NotAnIndexError(f"{path}: unreadable index metadata ({exc})") from exc
        if not isinstance(info, dict) or info.get("format") != FORMAT:
            raise NotAnIndexError(f"{path} is an LMDB database but not a streamk index")
        if info.get("version") in (1, 2):
            made_by = {1: "streamk 0.1", 2: "streamk 0.2 before checksums"}[info["version"]]
            raise IndexFormatError(f"{path}: index format version {info['version']} ({made_by}); upgrade it in "
                                   f"place with `streamk index upgrade {path}`")
        if info.get("version") != FORMAT_VERSION:
            raise IndexFormatError(f"{path}: index format version {info.get('version')!r}; this "
                                   f"streamk reads version {FORMAT_VERSION}")

    def close(self):
        """Close this store (the environment with the last store of this process on it)."""
        key, self._env_key = self._env_key, None
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
        for db in self.dbs.values():
            if db is not None:
                st = txn.stat(db)
                n += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        return n

    def _needed(self, pages):
        """Bytes a failed commit needed beyond what is stored now (at least one page)."""
        psize = 4096
        try:
            with self.env.begin() as txn:
                psize = txn.stat(self.dbs["meta"])["psize"]
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
            return get_checked_meta(txn, self.dbs["meta"], key, self.path)
        return txn.get(key, db=self.dbs["meta"])

    def put_meta(self, txn, key, value):
        """Store a metadata value (with its CRC32C when it is one of CHECKED_META)."""
        key = key.encode() if isinstance(key, str) else key
        if key in CHECKED_META:
            put_checked_meta(txn, self.dbs["meta"], key, value)
        else:
            txn.put(key, value, db=self.dbs["meta"])

    # a sub-database of blobs (thumbnails, and any added later: list it in SEALED_SUBDBS)
    # stores each value followed by its CRC32C, put and read through these two
    def put_blob(self, txn, name, key, value):
        """Store blob ``value`` under ``key`` in sub-database ``name``, sealed with its CRC32C."""
        txn.put(key, seal(value), db=self.dbs[name])

    def get_blob(self, txn, name, key):
        """The blob under ``key`` in sub-database ``name`` (bytes; None when absent), checked
        against its CRC32C (IndexCorruptError)."""
        db = self.dbs.get(name)
        raw = None if db is None else txn.get(key, db=db)
        return None if raw is None else self.unseal_blob(name, key, raw)

    def unseal_blob(self, name, key, raw):
        """The blob (bytes) of a value read from sub-database ``name`` of SEALED_SUBDBS,
        checked against its CRC32C (IndexCorruptError naming the entry)."""
        what = f"the {name} entry of row {row_from_key(key)}" if len(key) == 8 and name == "metadata" \
            else f"the {name} entry {bytes(key)[:60]!r}"
        return bytes(unseal(raw, self.path, what))

    def seq(self, txn=None):
        raw = self.get_meta(b"seq", txn)
        return seq_from_key(raw) if raw is not None else 0

    def get_int(self, key, txn=None, default=0):
        raw = self.get_meta(key, txn)
        return int(bytes(raw)) if raw is not None else default

    def put_int(self, txn, key, value):
        txn.put(key.encode() if isinstance(key, str) else key, str(int(value)).encode(), db=self.dbs["meta"])

    def bump(self, txn, op, row):
        """Log one change (op b"+", b"-" or b"*" of row ``row``), increment the change
        counter; every LOG_TRIM_EVERY changes, drop log entries older than LOG_KEEP."""
        seq = self.seq(txn) + 1
        txn.put(seq_key(seq), op + row_key(row), db=self.dbs["log"])
        txn.put(b"seq", seq_key(seq), db=self.dbs["meta"])
        if seq % LOG_TRIM_EVERY == 0 and seq > LOG_KEEP:
            self._trim_log(txn, seq - LOG_KEEP)
        return seq

    def _trim_log(self, txn, below):
        with txn.cursor(db=self.dbs["log"]) as cur:
            positioned = cur.first()
            while positioned and seq_from_key(cur.key()) < below:
                cur.delete()  # moves to the next entry (unpositioned after the last)
                positioned = bool(cur.key())

    def changes_since(self, txn, seq):
        """[(seq, op, row)] logged after ``seq``, or None when the log no longer reaches
        back that far (it was trimmed: the caller must load everything again)."""
        out = []
        log = self.dbs["log"]
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
            for name, db in self.dbs.items():
                if db is None:
                    continue
                with txn.cursor(db=db) as cur:
                    out[name] = {bytes(k): bytes(v) for k, v in cur}
        return out

    def count(self, name="images"):
        with self.read() as txn:
            return txn.stat(self.dbs[name])["entries"]

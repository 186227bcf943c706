"""LMDB storage of a streaming index: one LMDB environment per index directory.

Named sub-databases (keys and values are bytes):

``meta``     ``format`` (JSON: format tag + version), ``encoder`` (Encoder.to_bytes()),
             ``encoder_fingerprint``, ``vector_dtype`` (float16 | float32), ``extractor``
             (JSON extractor params or null), ``pq`` (ProductQuantizer.to_bytes(), once
             trained), ``pq_epoch`` (bumped at each training), ``seq`` (change counter),
             ``created`` (unix time).
``images``   id -> JSON: kind, source, sha256, box, n_descriptors, added, seq.
``extras``   id -> .npz bytes (keypoints, weights) for display; optional.
``vectors``  id -> vector bytes in the index's dtype.
``codes``    id -> M bytes (PQ codes), once PQ is trained.
``hashes``   32-byte content key -> id (de-duplication).
``log``      8-byte big-endian seq -> b"+" id (added or replaced) | b"-" id (removed).

Every change increments ``meta/seq`` and appends to ``log`` in the same
transaction, so a reader that knows the seq it last saw loads only what changed.

Write transactions go through :meth:`Store.write`, which grows the map when it
is full (abort, ``set_mapsize`` x2, rerun the whole function): users never see
``lmdb.MapFullError``. Readers adopt a map grown by another process
(``MapResizedError`` -> ``set_mapsize(0)``).

One :class:`Store` per process and index; a Store is not thread-safe. Ids are
LMDB keys, never file names: nothing is written outside the index directory.
"""

import json
import struct
import unicodedata
from pathlib import Path

import lmdb

from .errors import (IndexExistsError, IndexFormatError, InvalidIdError, NotAnIndexError,
                     ReadOnlyIndexError)

FORMAT = "streamk-index"
FORMAT_VERSION = 1
SUBDBS = ("meta", "images", "extras", "vectors", "codes", "hashes", "log")
VECTOR_DTYPES = ("float16", "float32")
DEFAULT_MAP_SIZE = 64 << 20  # grows by doubling when full
MAX_ID_CHARS = 200
MAX_KEY_BYTES = 511  # LMDB's default maximum key size


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


def seq_key(seq):
    return struct.pack(">Q", seq)


def seq_from_key(key):
    return struct.unpack(">Q", bytes(key))[0]


def _is_index_dir(path):
    return (path / "data.mdb").is_file()


class Store:
    """The LMDB environment of one index directory and its sub-databases.

    Use :meth:`create` or :meth:`open`; ``store.dbs[name]`` are the handles.
    """

    def __init__(self, path, env, readonly, create=False):
        self.path = Path(path)
        self.env = env
        self.readonly = readonly
        if create:
            self.dbs = {name: env.open_db(name.encode(), create=True) for name in SUBDBS}
        else:  # never create anything in an existing database (it may not be ours)
            self.dbs = {name: env.open_db(name.encode(), create=False) for name in SUBDBS}

    # ------------------------------------------------------------ open / create
    @staticmethod
    def _env(path, readonly, map_size):
        return lmdb.open(str(path), map_size=map_size, subdir=True, max_dbs=len(SUBDBS) + 2,
                         readonly=readonly, create=False, lock=True, readahead=False,
                         max_readers=126)

    @classmethod
    def create(cls, path, meta, map_size=DEFAULT_MAP_SIZE):
        """A new store at ``path`` (a new or empty directory) with ``meta`` (name -> bytes)."""
        path = Path(path)
        if path.exists():
            if not path.is_dir():
                raise IndexExistsError(f"{path} exists and is not a directory")
            if any(path.iterdir()):
                raise IndexExistsError(f"{path} is not empty: refusing to create an index there")
        path.mkdir(parents=True, exist_ok=True)
        env = cls._env(path, False, int(map_size))
        store = cls(path, env, False, create=True)
        record = {b"format": json.dumps({"format": FORMAT, "version": FORMAT_VERSION}).encode(),
                  b"seq": seq_key(0)}
        record.update({k.encode() if isinstance(k, str) else k: v for k, v in meta.items()})

        def put_meta(txn):
            for k, v in record.items():
                txn.put(k, v, db=store.dbs["meta"])
        store.write(put_meta)
        return store

    @classmethod
    def open(cls, path, readonly=False):
        path = Path(path)
        if not path.is_dir() or not _is_index_dir(path):
            raise NotAnIndexError(f"{path} is not a streamk index (no LMDB data there)")
        try:
            env = cls._env(path, readonly, 0)  # 0: the size recorded in the file
        except lmdb.Error as exc:
            raise NotAnIndexError(f"{path}: cannot open as an LMDB index ({exc})") from exc
        try:
            store = cls(path, env, readonly)
        except (lmdb.NotFoundError, lmdb.Error) as exc:
            env.close()
            raise NotAnIndexError(f"{path} is not a streamk index ({exc})") from exc
        try:
            raw = store.get_meta(b"format")
            info = json.loads(bytes(raw)) if raw is not None else None
            if not isinstance(info, dict) or info.get("format") != FORMAT:
                raise NotAnIndexError(f"{path} is an LMDB database but not a streamk index")
            if info.get("version") != FORMAT_VERSION:
                raise IndexFormatError(f"{path}: index format version {info.get('version')!r}; this "
                                       f"streamk reads version {FORMAT_VERSION}")
        except (NotAnIndexError, IndexFormatError):
            env.close()
            raise
        except ValueError as exc:
            env.close()
            raise NotAnIndexError(f"{path}: unreadable index metadata ({exc})") from exc
        return store

    def close(self):
        self.env.close()

    # ------------------------------------------------------------ transactions
    def read(self):
        """A read transaction (use as a context manager); adopts a map grown elsewhere."""
        try:
            return self.env.begin(buffers=False)
        except lmdb.MapResizedError:
            self.env.set_mapsize(0)
            return self.env.begin(buffers=False)

    def write(self, fn):
        """Run ``fn(txn)`` in one write transaction and commit; return its result.

        On a full map: abort, double the map size and rerun ``fn`` from scratch
        (so ``fn`` must not keep effects outside ``txn`` across calls). Any other
        exception aborts the transaction and propagates: nothing is written.
        """
        if self.readonly:
            raise ReadOnlyIndexError(f"{self.path} was opened read-only")
        while True:
            try:
                txn = self.env.begin(write=True)
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)
                continue
            try:
                result = fn(txn)
                txn.commit()
                return result
            except lmdb.MapFullError:
                self._abort(txn)
                self.grow()
            except BaseException:
                self._abort(txn)
                raise

    @staticmethod
    def _abort(txn):
        try:
            txn.abort()
        except lmdb.Error:  # already finished (a failed commit)
            pass

    def grow(self):
        size = self.env.info()["map_size"]
        self.env.set_mapsize(max(2 * size, 1 << 20))

    @property
    def map_size(self):
        return self.env.info()["map_size"]

    # ------------------------------------------------------------ helpers
    def get_meta(self, key, txn=None):
        key = key.encode() if isinstance(key, str) else key
        if txn is not None:
            return txn.get(key, db=self.dbs["meta"])
        with self.read() as t:
            return t.get(key, db=self.dbs["meta"])

    def seq(self, txn=None):
        raw = self.get_meta(b"seq", txn)
        return seq_from_key(raw) if raw is not None else 0

    def bump(self, txn, op, key):
        """Log one change (op b"+" or b"-" for id ``key``) and increment the change counter."""
        seq = self.seq(txn) + 1
        txn.put(seq_key(seq), op + key, db=self.dbs["log"])
        txn.put(b"seq", seq_key(seq), db=self.dbs["meta"])
        return seq

    def changes_since(self, txn, seq):
        """[(seq, op, id)] logged after ``seq``."""
        out = []
        with txn.cursor(db=self.dbs["log"]) as cur:
            if not cur.set_range(seq_key(seq + 1)):
                return out
            for k, v in cur:
                out.append((seq_from_key(k), v[:1], v[1:].decode("utf-8")))
        return out

    def dump(self):
        """{sub-db name: {key: value}} of everything stored (for tests and debugging)."""
        out = {}
        with self.read() as txn:
            for name, db in self.dbs.items():
                with txn.cursor(db=db) as cur:
                    out[name] = {bytes(k): bytes(v) for k, v in cur}
        return out

    def count(self, name="images"):
        with self.read() as txn:
            return txn.stat(self.dbs[name])["entries"]

"""A streaming image index: add images while searching, from one or several processes.

    idx = StreamingIndex.create("my.index", encoder, vector_dtype="float16")
    idx.add("img1", image_path="photos/1.jpg")       # durable and searchable on return
    idx.add("img2", descriptors=sift)                 # (n, 128) raw SIFT
    idx.add("img3", vector=v)                         # an image vector (encoder.dim)
    idx.search("query.jpg", k=10, box=(x1, y1, x2, y2))  # [(id, score)], best first
    idx.train_pq(M=16)                                # then search(..., mode="pq")

Storage is LMDB (:mod:`streamk.store`). Encoding happens before the write
transaction; each add writes everything about one image in one transaction, so
an image is either fully there or not at all, and every bad input raises a
named error with the stored data unchanged.

De-duplication. Each image has a content key: sha256 of the image file's bytes
(plus the box, if one is given), of the descriptor set (float32, with its
shape), or of the L2-normalised float32 vector, each tagged with its kind.
Adding content already present under the *same* id returns that id and writes
nothing; under *another* id raises :class:`~streamk.errors.DuplicateError`
(``existing_id`` says which) -- the index never holds the same content twice.
Adding an id that already holds other content raises
:class:`~streamk.errors.IdExistsError`; use :meth:`StreamingIndex.update`.

Readers (in this or another process) keep ids, vectors and PQ codes in memory;
each search reads the store's change counter and loads only the images added,
replaced or removed since the last search (the ``log`` sub-database).
"""

import hashlib
import io
import json
import os
import time
from typing import NamedTuple

import numpy as np

from . import features as feat
from .checks import as_descriptor_set
from .encoder import Encoder
from .errors import (ConfigError, DimensionError, DuplicateError, EmptyDescriptorSetError,
                     EncoderFileError, EncoderMismatchError, IdExistsError, IndexFormatError,
                     NonFiniteError, NotFittedError, StreamkError, TooFewImagesError, UnknownIdError,
                     ZeroVectorError)
from .pq import N_CENTROIDS, ProductQuantizer
from .store import DEFAULT_MAP_SIZE, VECTOR_DTYPES, Store, id_key

MODES = ("exact", "pq")


class AddResult(NamedTuple):
    """One item of :meth:`StreamingIndex.add_many`: status is "added", "exists" (same id,
    same content: nothing written) or "error" (``error`` holds the exception)."""
    id: object
    status: str
    error: Exception | None = None


class EncodedImage(NamedTuple):
    """One image ready to be written: everything computed, nothing stored yet."""

    key: bytes  # validated id as bytes
    vector: np.ndarray  # (D,) float32 unit norm
    content: bytes  # 32-byte content key
    record: dict  # JSON metadata of the image
    extras: bytes | None  # .npz bytes (keypoints, weights) or None


def npz_bytes(**arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def image_content_key(sha256_hex, box=None):
    """Content key of an image file: its bytes' sha256 and the box (de-duplication)."""
    return hashlib.sha256(b"image\0" + bytes.fromhex(sha256_hex) + json.dumps(box).encode()).digest()


def encoded_image_file(image_id, path, sha256_hex, vector, keypoints, weights, image_size, box=None):
    """The record ``add(image_path=...)`` writes for an image file whose bytes have this
    sha256, encoded to ``vector`` (ingestion workers build the same record)."""
    record = {"kind": "image_path", "source": os.path.abspath(os.fspath(path)), "box": box,
              "n_descriptors": int(len(keypoints)), "sha256": sha256_hex, "image_size": list(image_size)}
    extras = npz_bytes(keypoints=keypoints, weights=np.asarray(weights, np.float32))
    return EncodedImage(id_key(image_id), StreamingIndex.unit_vector(vector),
                        image_content_key(sha256_hex, box), record, extras)


def _normalise_box(box):
    if box is None:
        return None
    try:
        b = np.asarray(box, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"box must be 4 numbers (x1, y1, x2, y2), got {box!r}") from exc
    if b.shape != (4,):
        raise ConfigError(f"box must be 4 numbers (x1, y1, x2, y2), got {box!r}")
    return [float(v) for v in b]


class StreamingIndex:
    """Image vectors (and PQ codes) in an LMDB directory; see the module doc.

    Not thread-safe: use one StreamingIndex per thread, or a lock. Several
    processes may open the same index (LMDB serialises the writers).
    """

    # ------------------------------------------------------------ create / open
    def __init__(self, store):
        self._store = store
        blob = store.get_meta(b"encoder")
        try:
            self.encoder = Encoder.from_bytes(bytes(blob))
        except (TypeError, EncoderFileError) as exc:
            store.close()
            raise IndexFormatError(f"{store.path}: the stored encoder is unreadable ({exc})") from exc
        self.vector_dtype = np.dtype(bytes(store.get_meta(b"vector_dtype")).decode())
        self.fingerprint = bytes(store.get_meta(b"encoder_fingerprint")).decode()
        self._extractor = None
        self._extractor_params = None
        self._extractor_stored = None
        self._pq = None
        self._pq_epoch = -1
        # in-memory copy for search, refreshed incrementally from the change log
        self._seq = -1
        self._ids = []
        self._rows = {}
        self._vectors = np.zeros((0, self.encoder.dim), np.float32)
        self._codes = None

    @classmethod
    def create(cls, path, encoder, vector_dtype="float16", extractor=None, map_size=DEFAULT_MAP_SIZE):
        """A new, empty index at ``path`` (a new or empty directory).

        encoder: a fitted :class:`~streamk.encoder.Encoder`, stored in the index.
        vector_dtype: "float16" (half the space, ~1e-3 error) or "float32".
        extractor: the :class:`~streamk.features.Extractor` for image files (its
        params are stored); None: the default extractor, chosen and stored at the
        first image added.
        """
        if not isinstance(encoder, Encoder):
            raise ConfigError(f"encoder must be a streamk Encoder, got {type(encoder).__name__}")
        if not encoder.fitted:
            raise NotFittedError("the index's encoder must be fitted")
        try:
            vector_dtype = np.dtype(vector_dtype).name
        except TypeError:
            vector_dtype = repr(vector_dtype)
        if vector_dtype not in VECTOR_DTYPES:
            raise ConfigError(f"vector_dtype must be one of {VECTOR_DTYPES}, got {vector_dtype!r}")
        params = None if extractor is None else json.loads(json.dumps(extractor.params()))
        meta = {"encoder": encoder.to_bytes(), "encoder_fingerprint": encoder.fingerprint.encode(),
                "vector_dtype": vector_dtype.encode(), "extractor": json.dumps(params).encode(),
                "pq_epoch": b"0", "created": repr(time.time()).encode()}
        idx = cls(Store.create(path, meta, map_size=map_size))
        if extractor is not None:
            idx._extractor, idx._extractor_params, idx._extractor_stored = extractor, params, params
        return idx

    @classmethod
    def open(cls, path, readonly=False):
        """Open an existing index; raises NotAnIndexError / IndexFormatError."""
        return cls(Store.open(path, readonly=readonly))

    def close(self):
        self._store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def path(self):
        return self._store.path

    @property
    def store(self):
        return self._store

    @property
    def readonly(self):
        return self._store.readonly

    def __len__(self):
        return self._store.count("images")

    def __contains__(self, image_id):
        try:
            key = id_key(image_id)
        except StreamkError:
            return False
        with self._store.read() as txn:
            return txn.get(key, db=self._store.dbs["images"]) is not None

    def ids(self):
        with self._store.read() as txn, txn.cursor(db=self._store.dbs["images"]) as cur:
            return [bytes(k).decode() for k in cur.iternext(keys=True, values=False)]

    def _stored(self, name, image_id):
        """The raw value of an image in sub-database ``name``; UnknownIdError if absent."""
        with self._store.read() as txn:
            raw = txn.get(id_key(image_id), db=self._store.dbs[name])
        if raw is None:
            raise UnknownIdError(f"no image {image_id!r} in the index")
        return raw

    def info(self, image_id):
        """The stored JSON record of an image (source, sha256, n_descriptors, added, ...)."""
        return json.loads(self._stored("images", image_id))

    def extras(self, image_id):
        """{"keypoints": (n, 6), "weights": (n,)} stored for display (may be empty)."""
        key = id_key(image_id)
        with self._store.read() as txn:
            raw = txn.get(key, db=self._store.dbs["extras"])
            known = txn.get(key, db=self._store.dbs["images"]) is not None
        if not known:
            raise UnknownIdError(f"no image {image_id!r} in the index")
        if raw is None:
            return {}
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}

    def vector(self, image_id):
        """The stored vector of an image as float32."""
        return np.frombuffer(self._stored("vectors", image_id), self.vector_dtype).astype(np.float32)

    def check_encoder(self, encoder):
        """Raise EncoderMismatchError unless ``encoder`` encodes as the index's encoder."""
        if encoder.fingerprint != self.fingerprint:
            raise EncoderMismatchError(
                f"encoder fingerprint {encoder.fingerprint[:12]}... differs from the index's "
                f"{self.fingerprint[:12]}...: vectors would not be comparable")

    # ------------------------------------------------------------ encoding (no transaction)
    def extractor(self):
        """The extractor for image files (from the stored params, or the default)."""
        raw = self._store.get_meta(b"extractor")
        params = json.loads(raw) if raw is not None else None
        if self._extractor is not None and (params is None or params == self._extractor_stored):
            return self._extractor
        ex = feat.default_extractor() if params is None else feat.extractor_from_params(params)
        # params to pin at the first image (when none are stored); the stored ones otherwise
        self._extractor, self._extractor_params = ex, ex.params()
        self._extractor_stored = params
        return ex

    def _features(self, image_path, box):
        data = feat._read_file_bytes(image_path)
        f = self.extractor().extract_array(feat._decode_gray(data, image_path))
        if box is not None:
            f = feat.crop_to_box(f, box)
        return data, f

    def _vector_of(self, vector):
        if isinstance(vector, (str, bytes, os.PathLike)):
            raise ConfigError("vector= takes an array; pass image files as image_path=")
        try:
            v = np.asarray(vector, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DimensionError(f"vector: not a numeric array ({exc})") from exc
        if v.ndim != 1 or v.shape[0] != self.encoder.dim:
            raise DimensionError(f"vector: expected shape ({self.encoder.dim},), got {v.shape}")
        if not np.isfinite(v).all():
            raise NonFiniteError("vector contains NaN or infinite values")
        n = np.linalg.norm(v)
        if not n > 0:
            raise ZeroVectorError("vector has zero norm")
        return (v / n).astype(np.float32)

    @staticmethod
    def unit_vector(v):
        """The encoder's output as a unit float32 vector, or a named error."""
        v = np.asarray(v, np.float32)
        n = float(np.linalg.norm(v))
        if not np.isfinite(v).all():
            raise NonFiniteError("the encoded vector is not finite")
        if not n > 0:
            raise ZeroVectorError("the encoder gave a zero vector (no usable descriptors)")
        return (v / n).astype(np.float32)

    @staticmethod
    def _one_source(image_path, descriptors, vector):
        given = [name for name, v in (("image_path", image_path), ("descriptors", descriptors),
                                      ("vector", vector)) if v is not None]
        if len(given) != 1:
            raise ConfigError(f"give exactly one of image_path, descriptors, vector (got {given or 'none'})")
        return given[0]

    def _encode_item(self, image_id, image_path=None, descriptors=None, vector=None, box=None):
        key = id_key(image_id)
        kind = self._one_source(image_path, descriptors, vector)
        box = _normalise_box(box)
        if box is not None and kind != "image_path":
            raise ConfigError("box applies to image_path only")
        h = hashlib.sha256()
        record = {"kind": kind, "source": None, "box": box, "n_descriptors": None}
        extras = None
        if kind == "image_path":
            data, f = self._features(image_path, box)
            if len(f) == 0:
                raise EmptyDescriptorSetError(f"{image_path}: no local features"
                                              + (" inside the box" if box is not None else ""))
            v, alpha = self.encoder.encode(f.descriptors, return_weights=True)
            return encoded_image_file(image_id, image_path, hashlib.sha256(data).hexdigest(), v,
                                      f.keypoints, alpha, f.image_size, box)
        elif kind == "descriptors":
            X = as_descriptor_set(descriptors, dim=self.encoder.input_dim)
            v, alpha = self.encoder.encode(X, return_weights=True)
            v = self.unit_vector(v)
            sha = hashlib.sha256(X.tobytes()).hexdigest()
            h.update(b"descriptors\0" + str(X.shape).encode() + bytes.fromhex(sha))
            record.update(sha256=sha, n_descriptors=int(X.shape[0]))
            extras = npz_bytes(weights=np.asarray(alpha, np.float32))
        else:
            v = self._vector_of(vector)
            sha = hashlib.sha256(v.tobytes()).hexdigest()
            h.update(b"vector\0" + bytes.fromhex(sha))
            record.update(sha256=sha)
        return EncodedImage(key, v, h.digest(), record, extras)

    # ------------------------------------------------------------ writing (one transaction)
    def _current_pq(self, txn):
        """The PQ trained in the store (loaded again if another process retrained it)."""
        epoch = int(self._store.get_meta(b"pq_epoch", txn) or b"0")
        if epoch != self._pq_epoch:
            blob = self._store.get_meta(b"pq", txn)
            self._pq = ProductQuantizer.from_bytes(bytes(blob)) if blob is not None else None
            self._pq_epoch = epoch
        return self._pq

    def product_quantizer(self):
        """The trained :class:`~streamk.pq.ProductQuantizer`, or None before train_pq()."""
        with self._store.read() as txn:
            return self._current_pq(txn)

    def _put(self, txn, enc, replace=False):
        """Write one encoded image; returns "added" or "exists". Checks run before any write."""
        s = self._store
        db = s.dbs
        old_raw = txn.get(enc.key, db=db["images"])
        owner = txn.get(enc.content, db=db["hashes"])
        image_id = enc.key.decode()
        if owner is not None and bytes(owner) != enc.key:
            raise DuplicateError(image_id, bytes(owner).decode())
        if old_raw is not None and not replace:
            if owner is not None:  # same id, same content
                return "exists"
            raise IdExistsError(f"id {image_id!r} already holds other content; use update() to replace it")
        if replace and old_raw is None:
            raise UnknownIdError(f"no image {image_id!r} in the index (use add())")
        if old_raw is not None:  # replace: drop the old content key
            self._delete(txn, enc.key, json.loads(old_raw), log=False)
        if enc.record["kind"] == "image_path":
            raw = s.get_meta(b"extractor", txn)
            if raw is None or json.loads(raw) is None:  # first image: pin the default extractor
                txn.put(b"extractor", json.dumps(self._extractor_params).encode(), db=db["meta"])
        seq = s.bump(txn, b"+", enc.key)
        record = dict(enc.record, added=time.time(), seq=seq,
                      content_key=enc.content.hex())
        txn.put(enc.key, json.dumps(record).encode(), db=db["images"])
        txn.put(enc.key, enc.vector.astype(self.vector_dtype).tobytes(), db=db["vectors"])
        txn.put(enc.content, enc.key, db=db["hashes"])
        if enc.extras is not None:
            txn.put(enc.key, enc.extras, db=db["extras"])
        pq = self._current_pq(txn)
        if pq is not None:
            txn.put(enc.key, pq.encode(enc.vector[None, :])[0].tobytes(), db=db["codes"])
        return "added"

    def _delete(self, txn, key, record, log=True):
        db = self._store.dbs
        ck = record.get("content_key")
        if ck is not None:
            ck = bytes.fromhex(ck)
            if txn.get(ck, db=db["hashes"]) == key:
                txn.delete(ck, db=db["hashes"])
        for name in ("images", "vectors", "codes", "extras"):
            txn.delete(key, db=db[name])
        if log:
            self._store.bump(txn, b"-", key)

    def add(self, image_id, image_path=None, descriptors=None, vector=None, box=None):
        """Add one image from exactly one source; returns its id once durable and searchable.

        image_path: an image file (features extracted with the index's extractor;
        ``box`` = (x1, y1, x2, y2) keeps the features inside it).
        descriptors: (n, d) raw SIFT-like descriptors (encoded with the index's encoder).
        vector: an image vector of the encoder's dimension (L2-normalised here).
        Same content under the same id: nothing written, returns the id.
        Raises DuplicateError (content under another id), IdExistsError (id holds other
        content), InvalidIdError, DimensionError, NonFiniteError, EmptyDescriptorSetError,
        ImageReadError, ZeroVectorError, ConfigError; the store is then unchanged.
        """
        enc = self._encode_item(image_id, image_path, descriptors, vector, box)
        self._store.write(lambda txn: self._put(txn, enc))
        return image_id

    def write_encoded(self, encoded, replace=False):
        """Write already-encoded images (``EncodedImage``) in ONE transaction.

        Returns, per image, "added", "exists" or the named error that kept it
        out (each image is checked before anything of it is written).
        """
        def run(txn):
            out = []
            for enc in encoded:
                try:
                    out.append(self._put(txn, enc, replace))
                except StreamkError as exc:
                    out.append(exc)
            return out
        return self._store.write(run)

    def update(self, image_id, image_path=None, descriptors=None, vector=None, box=None):
        """Replace the content of an existing image (UnknownIdError if absent)."""
        enc = self._encode_item(image_id, image_path, descriptors, vector, box)

        def run(txn):
            owner = txn.get(enc.content, db=self._store.dbs["hashes"])
            if owner is not None and bytes(owner) == enc.key:
                return "exists"  # same content: nothing to change
            return self._put(txn, enc, replace=True)
        self._store.write(run)
        return image_id

    def remove(self, image_id):
        """Remove an image (UnknownIdError if absent)."""
        key = id_key(image_id)

        def run(txn):
            raw = txn.get(key, db=self._store.dbs["images"])
            if raw is None:
                raise UnknownIdError(f"no image {image_id!r} in the index")
            self._delete(txn, key, json.loads(raw))
        self._store.write(run)

    def add_many(self, items, batch_size=64):
        """Add many images; commits every ``batch_size`` items (encoding outside the
        transaction). ``items``: dicts with "id" and one of "image_path", "descriptors",
        "vector" (and optionally "box"), or (id, source-dict) pairs. Returns one
        :class:`AddResult` per item, in order; a bad item does not stop the others.
        """
        if int(batch_size) < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        results = []
        batch = []  # (position, image_id, EncodedImage)

        def flush():
            if not batch:
                return
            outcomes = self.write_encoded([enc for _, _, enc in batch])
            for (pos, image_id, _), out in zip(batch, outcomes):
                results[pos] = AddResult(image_id, "error", out) if isinstance(out, Exception) \
                    else AddResult(image_id, out)
            batch.clear()

        for item in items:
            pos = len(results)
            image_id = None
            try:
                if isinstance(item, dict):
                    kw = dict(item)
                    image_id = kw.pop("id")
                else:
                    image_id, kw = item
                    kw = dict(kw)
                unknown = set(kw) - {"image_path", "descriptors", "vector", "box"}
                if unknown:
                    raise ConfigError(f"unknown item field(s) {sorted(unknown)}")
                enc = self._encode_item(image_id, **kw)
            except (StreamkError, KeyError, TypeError, ValueError) as exc:
                if not isinstance(exc, StreamkError):
                    exc = ConfigError(f"bad item {pos}: {exc!r}")
                results.append(AddResult(image_id, "error", exc))
                continue
            results.append(None)
            batch.append((pos, image_id, enc))
            if len(batch) >= batch_size:
                flush()
        flush()
        return results

    # ------------------------------------------------------------ PQ
    def train_pq(self, M=16, seed=0, chunk=65536):
        """Train product quantisation on the stored vectors (needs >= 256 images) and
        swap in the codebooks and the codes of every image; returns the quantiser.

        Re-training works the same way, without downtime: the codebooks are learned
        and the codes computed from a snapshot of the vectors outside any write
        transaction, so ingestion goes on meanwhile and readers keep searching with
        the previous codes.  One short write transaction then swaps everything in,
        encoding on the spot only the images added or replaced since the snapshot.
        Run it from another thread or process (its own ``StreamingIndex.open``) to
        keep ingesting, e.g. ``streamk index train-pq DIR``.
        """
        M = int(M)
        if M < 1:
            raise ConfigError(f"M must be >= 1, got {M}")
        if self.encoder.dim % M:
            raise ConfigError(f"vector dimension {self.encoder.dim} is not a multiple of M={M}")
        s = self._store
        with s.read() as txn:  # the snapshot
            seq0 = s.seq(txn)
            keys, vecs = [], []
            with txn.cursor(db=s.dbs["vectors"]) as cur:
                for k, v in cur:
                    keys.append(bytes(k))
                    vecs.append(np.frombuffer(v, self.vector_dtype))
        if len(keys) < N_CENTROIDS:
            raise TooFewImagesError(f"PQ training needs at least {N_CENTROIDS} images, the index has {len(keys)}")
        V = np.stack(vecs).astype(np.float32)
        del vecs
        pq = ProductQuantizer(M=M, seed=seed).fit(V)
        codes = np.concatenate([pq.encode(V[i:i + chunk]) for i in range(0, len(V), chunk)])
        del V
        blob = pq.to_bytes()

        def swap(txn):
            db = s.dbs
            changed = {i.encode() for _, op, i in s.changes_since(txn, seq0) if op in (b"+", b"-")}
            for k, c in zip(keys, codes):
                if k not in changed:  # unchanged since the snapshot, so still present
                    txn.put(k, c.tobytes(), db=db["codes"])
            for k in changed:
                raw = txn.get(k, db=db["vectors"])
                if raw is not None:  # added or replaced meanwhile (a removed one has no code)
                    v = np.frombuffer(raw, self.vector_dtype).astype(np.float32)
                    txn.put(k, pq.encode(v[None, :])[0].tobytes(), db=db["codes"])
            epoch = int(s.get_meta(b"pq_epoch", txn) or b"0") + 1
            txn.put(b"pq", blob, db=db["meta"])
            txn.put(b"pq_epoch", str(epoch).encode(), db=db["meta"])
            s.bump(txn, b"*", b"")  # readers reload everything (new codes)
            return epoch
        s.write(swap)
        return pq

    # ------------------------------------------------------------ in-memory view
    def _full_load(self, txn):
        db = self._store.dbs
        ids, vecs = [], []
        with txn.cursor(db=db["vectors"]) as cur:
            for k, v in cur:
                ids.append(bytes(k).decode())
                vecs.append(np.frombuffer(v, self.vector_dtype))
        self._ids = ids
        self._rows = {i: r for r, i in enumerate(ids)}
        self._vectors = (np.stack(vecs).astype(np.float32) if vecs
                         else np.zeros((0, self.encoder.dim), np.float32))
        pq = self._current_pq(txn)
        self._codes = None
        if pq is not None:  # one cursor pass; both sub-databases are sorted by id
            with txn.cursor(db=db["codes"]) as cur:
                stored = {bytes(k).decode(): bytes(v) for k, v in cur if len(v) == pq.M}
            blob = b"".join(stored[i] if i in stored else self._code_of(txn, i.encode(), self._vectors[r], pq)
                            .tobytes() for r, i in enumerate(ids))
            self._codes = np.frombuffer(blob, np.uint8).reshape(len(ids), pq.M).copy()

    def _code_of(self, txn, key, v, pq):
        raw = txn.get(key, db=self._store.dbs["codes"])
        if raw is not None and len(raw) == pq.M:
            return np.frombuffer(raw, np.uint8)
        return pq.encode(v[None, :])[0]  # not stored (should not happen): compute

    def refresh(self):
        """Bring the in-memory ids/vectors/codes up to date with the store (cheap when
        nothing changed: one read of the change counter). Returns the number of changes."""
        s = self._store
        with s.read() as txn:
            seq = s.seq(txn)
            if seq == self._seq:
                return 0
            changes = s.changes_since(txn, self._seq) if self._seq >= 0 else None
            epoch = int(s.get_meta(b"pq_epoch", txn) or b"0")
            if changes is None or epoch != self._pq_epoch or any(op == b"*" for _, op, _ in changes):
                self._full_load(txn)
                self._seq = seq
                return len(changes) if changes is not None else len(self._ids)
            touched = list(dict.fromkeys(i for _, op, i in changes if op in (b"+", b"-")))
            drop = [self._rows[i] for i in touched if i in self._rows]
            if drop:
                keep = np.ones(len(self._ids), bool)
                keep[drop] = False
                self._ids = [i for i, k in zip(self._ids, keep) if k]
                self._vectors = self._vectors[keep]
                if self._codes is not None:
                    self._codes = self._codes[keep]
            new_ids, new_vecs, new_codes = [], [], []
            for i in touched:
                raw = txn.get(i.encode(), db=s.dbs["vectors"])
                if raw is None:
                    continue  # removed
                v = np.frombuffer(raw, self.vector_dtype).astype(np.float32)
                new_ids.append(i)
                new_vecs.append(v)
                if self._pq is not None:
                    new_codes.append(self._code_of(txn, i.encode(), v, self._pq))
            if new_ids:
                self._ids = self._ids + new_ids
                self._vectors = np.concatenate([self._vectors, np.stack(new_vecs)])
                if self._codes is not None:
                    self._codes = np.concatenate([self._codes, np.stack(new_codes)])
            if drop or new_ids:
                self._rows = {i: r for r, i in enumerate(self._ids)}
            self._seq = seq
            return len(changes)

    # ------------------------------------------------------------ search
    def query_vector(self, query, box=None):
        """The unit vector of a query: an image path, a descriptor set (n, d) or a vector."""
        if isinstance(query, (str, os.PathLike)):
            _, f = self._features(query, _normalise_box(box))
            if len(f) == 0:
                raise EmptyDescriptorSetError(f"{query}: no local features"
                                              + (" inside the box" if box is not None else ""))
            return self.unit_vector(self.encoder.encode(f.descriptors))
        if box is not None:
            raise ConfigError("box applies to image-path queries only")
        try:
            q = np.asarray(query)
        except (TypeError, ValueError) as exc:
            raise DimensionError(f"query: not an array ({exc})") from exc
        if q.ndim == 1:
            return self._vector_of(q)
        if q.ndim == 2:
            return self.unit_vector(self.encoder.encode(q))
        raise DimensionError(f"query: expected an image path, an (n, d) descriptor set or a "
                             f"({self.encoder.dim},) vector, got shape {q.shape}")

    def search(self, query, k=10, mode="exact", rerank=None, box=None):
        """[(id, score)] of the k best images, by decreasing inner product with the query.

        mode "exact": all stored vectors. mode "pq": ADC scores of the PQ codes, then
        the best ``rerank`` (default max(4k, 100)) re-scored with the stored vectors.
        """
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ConfigError(f"k must be an integer >= 1, got {k!r}")
        q = self.query_vector(query, box=box)
        self.refresh()
        n = len(self._ids)
        if n == 0:
            return []
        k = min(int(k), n)
        if mode == "exact":
            cand = None
            scores = self._vectors @ q
        else:
            if self._pq is None or self._codes is None:
                raise NotFittedError("PQ search needs train_pq() first")
            R = max(4 * k, 100) if rerank is None else int(rerank)
            if R < k:
                raise ConfigError(f"rerank ({R}) must be >= k ({k})")
            # the R best codes by ADC, kept in a heap inside the scan (no sort of n scores)
            cand = self._pq.search(q[None, :], self._codes, min(R, n))[1][0]
            scores = self._vectors[cand] @ q
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.lexsort((top, -scores[top]))]  # by score, ties by row
        rows = top if cand is None else cand[top]
        return [(self._ids[r], float(scores[t])) for r, t in zip(rows, top)]

"""A streaming image index: add images while searching, from one or several processes.

    idx = StreamingIndex.create("my.index", encoder, vector_dtype="float16")
    idx.add("img1", image_path="photos/1.jpg")       # durable and searchable on return
    idx.add("img2", descriptors=sift)                 # (n, 128) raw SIFT
    idx.add("img3", vector=v)                         # an image vector (encoder.dim)
    idx.search("query.jpg", k=10, box=(x1, y1, x2, y2))  # [(id, score)], best first
    scores, ids = idx.search(Q, k=10)                 # Q (nq, D) vectors: (nq, k) arrays
    idx.train(nlist=4096, M=64)                       # IVF-PQ; train_pq(M=16): flat PQ
    idx.remove(["img1", "img2"])

The index is one LMDB directory (:mod:`streamk.index.store`). This class ties its
three parts together:

- writing (:mod:`streamk.index.writer`): images encoded, de-duplicated and
  written, one transaction per image or batch;
- reading (:mod:`streamk.index.reader`): what a reader keeps in memory (codes
  and integer rows, never the float vectors), kept up to date from the change
  log, and search: exact, or PQ / IVF-ADC with re-ranking;
- training (:mod:`streamk.index.retraining`, :mod:`streamk.quantization.ivfpq`): the PQ or
  IVF-PQ codec, (re)trained while ingestion and searches go on.

Opening is cheap: the encoder is loaded when something needs encoding (an
image or descriptor query, an add), and the codes when the first search runs.
"""

from __future__ import annotations  # annotations are never evaluated at run time

import io
import json
import os
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..encoding import Encoder
from ..errors import (ConfigError, EncoderFileError, IgnoredSearchParameterWarning, IndexFormatError,
                      GeometryRecordError, InvalidIdError, NotFittedError, StaleCodecWarning,
                      VocabularyFileError)
from ..verification import Vocabulary, parse_header
from .duplicates import duplicate_groups, duplicates_of
from .items import unit_vector
from .metadata import (add_indexed_field, allowed_rows, check_field, field_values, indexed_fields,
                       metadata_of_rows, parse_filter)
from .queries import MAX_BATCH, QueryEncoder, StoredExtractor
from .reader import SearchView
from .retraining import Trainer, codec_staleness, stale_codec_note
from .base import Index
from .search_params import SearchParams
from .second_stage import Hit, second_stage, verified_first, verify_candidates, warn_damaged, with_vectors
from .store import BLOCK_ROWS, DEFAULT_MAP_SIZE, VECTOR_DTYPES, Store, id_key, row_from_key, row_key
from .vector_store import rows_per_block
from .writer import IndexWriter


def _warn_ignored(nprobe, rerank, no_codec):
    """nprobe / rerank given to an exact search: said, not silently dropped."""
    given = ", ".join(f"{n}={v}" for n, v in (("nprobe", nprobe), ("rerank", rerank)) if v is not None)
    why = ("this index has no trained codec, so every search is exact (streamk index train makes one)" if no_codec
           else "the search is exact (mode='exact')")
    warnings.warn(f"{given} has no effect: {why}", IgnoredSearchParameterWarning, stacklevel=4)


__all__ = ["StreamingIndex"]


def _vocabulary_meta(vocabulary):
    if not isinstance(vocabulary, Vocabulary) or not vocabulary.fitted:
        raise ConfigError("vocabulary must be a fitted streamk.verification.Vocabulary")
    return {"vocabulary": vocabulary.to_bytes(), "local_features": b"1"}


class StreamingIndex(Index):
    """Image vectors and their PQ / IVF-PQ codes in an LMDB directory; see the module doc.

    Not thread-safe: use one StreamingIndex per thread, or a lock. Several
    processes may open the same index (LMDB serialises the writers).
    """

    # ------------------------------------------------------------ create / open
    def __init__(self, store: Store) -> None:
        self._store = store
        try:
            self.vector_dtype = np.dtype(bytes(store.get_meta(b"vector_dtype")).decode())
            self.fingerprint = bytes(store.get_meta(b"encoder_fingerprint")).decode()
            self.dim = store.get_int(b"dim")
        except (TypeError, ValueError) as exc:
            store.close()
            raise IndexFormatError(f"{store.path}: unreadable index metadata ({exc})") from exc
        self._encoder: Encoder | None = None
        self._vocabulary: Vocabulary | None = None
        self._extractors = StoredExtractor(lambda: StoredExtractor.from_meta(store.get_meta(b"extractor")))
        self._writer: IndexWriter | None = None  # made by the first write (a read-only open builds none)
        self.view = SearchView(store, self.dim, self.vector_dtype)
        self.queries = QueryEncoder(lambda: self.encoder, self._extractors.get, self.dim, lambda: self.vocabulary)

    @property
    def writer(self) -> IndexWriter:
        """The :class:`IndexWriter` of this index, made on first use (never by searches)."""
        if self._writer is None:
            self._writer = IndexWriter(self._store, self.vector_dtype, self.dim, lambda: self.encoder,
                                       self._extractors, lambda: self.vocabulary)
        return self._writer

    @classmethod
    def create(cls, path: str | os.PathLike[str], encoder: Encoder, vector_dtype: str = "float16",
               extractor: Any = None, map_size: int = DEFAULT_MAP_SIZE, block_rows: int = BLOCK_ROWS,
               store_extras: bool = True, vocabulary: Vocabulary | None = None, max_map_size: int | None = None,
               indexed_fields: Iterable[str] = ()) -> StreamingIndex:
        """A new, empty index at ``path`` (a new or empty directory).

        encoder: a fitted :class:`~streamk.encoding.encoder.Encoder`, stored in the index.
        vector_dtype: "float16" (half the space, ~1e-3 error) or "float32".
        extractor: the :class:`~streamk.features.Extractor` for image files (its
        params are stored); None: the default extractor, chosen and stored at the
        first image added.
        block_rows: rows per sealed block of codes (a reader loads N codes in
        N / block_rows reads; a multiple of 8).
        store_extras: keep each image's keypoints and weights for display (the
        weights view, the notebooks): ~50 KB per photo of 2,000 features, 25x its
        vector; False for collections of millions.
        vocabulary: a fitted :class:`~streamk.verification.Vocabulary`: each image added
        from a file then keeps its local geometry (at most 24 KB: 1,500 features of 16
        bytes), and searches by image are spatially verified and expanded (the second
        stage); None: first stage only (:meth:`add_local_features` later).
        max_map_size: bytes the LMDB map may grow to (a write needing more is a
        :class:`~streamk.errors.DiskFullError`, nothing of it stored); None: the disk's room.
        indexed_fields: metadata fields that search filters may use (:meth:`index_field`
        adds one later).
        """
        if isinstance(indexed_fields, str):
            indexed_fields = [indexed_fields]
        indexed_fields = list(dict.fromkeys(check_field(f) for f in indexed_fields))
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
        if isinstance(block_rows, bool) or int(block_rows) < 8 or int(block_rows) % 8:
            raise ConfigError(f"block_rows must be a multiple of 8, >= 8, got {block_rows!r}")
        params = None if extractor is None else json.loads(json.dumps(extractor.params()))
        meta = {"encoder": encoder.to_bytes(), "encoder_fingerprint": encoder.fingerprint.encode(),
                "vector_dtype": vector_dtype.encode(), "extractor": json.dumps(params).encode(),
                "dim": str(encoder.dim).encode(), "input_dim": str(encoder.input_dim).encode(),
                "codec_epoch": b"0", "next_row": b"0",
                "block_rows": str(int(block_rows)).encode(),
                "vector_block_rows": str(rows_per_block(encoder.dim, vector_dtype)).encode(),
                "store_extras": b"1" if store_extras else b"0",
                "created": repr(time.time()).encode()}
        if vocabulary is not None:
            meta.update(_vocabulary_meta(vocabulary))
        if indexed_fields:
            meta["indexed_fields"] = json.dumps(indexed_fields).encode()
            meta["range_columns"] = meta["indexed_fields"]  # empty columns, kept from the first image on
        idx = cls(Store.create(path, meta, map_size=map_size, max_map_size=max_map_size))
        idx._encoder = encoder
        if extractor is not None:
            idx._extractors.use(extractor, params)
        return idx

    @classmethod
    def open(cls, path: str | os.PathLike[str], readonly: bool = False,
             max_map_size: int | None = None) -> StreamingIndex:
        """Open an existing index; raises NotAnIndexError / IndexFormatError /
        IndexCorruptError (a truncated or damaged file). max_map_size: as in :meth:`create`."""
        return cls(Store.open(path, readonly=readonly, max_map_size=max_map_size))

    def close(self) -> None:
        self._store.close()

    def opened_files(self) -> dict[str, tuple[int, int]]:
        return self._store.opened_files()

    @property
    def encoder(self) -> Encoder:
        """The index's Encoder (loaded from the store on first use)."""
        if self._encoder is None:
            blob = self._store.get_meta(b"encoder")
            try:
                self._encoder = Encoder.from_bytes(bytes(blob))
            except (TypeError, EncoderFileError) as exc:
                raise IndexFormatError(f"{self.path}: the stored encoder is unreadable ({exc})") from exc
        return self._encoder

    @property
    def vocabulary(self) -> Vocabulary | None:
        """The :class:`~streamk.verification.Vocabulary` of the local geometry, or None (the
        index has no second stage)."""
        if self._vocabulary is None and self._store.get_int(b"local_features"):
            blob = self._store.get_meta(b"vocabulary")
            try:
                self._vocabulary = Vocabulary.from_bytes(bytes(blob))
            except (TypeError, VocabularyFileError) as exc:
                raise IndexFormatError(f"{self.path}: the stored vocabulary is unreadable ({exc})") from exc
        return self._vocabulary

    @property
    def has_local_features(self) -> bool:
        """Whether images added from files keep their local geometry (the second stage)."""
        return bool(self._store.get_int(b"local_features"))

    def add_local_features(self, vocabulary: Vocabulary) -> Vocabulary | None:
        """Turn the second stage on: store ``vocabulary``; images added from now on keep
        their local geometry (``streamk index add-local-features`` adds the existing ones'
        records, :func:`streamk.pipeline.add_local_features`). Returns the vocabulary in use
        (the stored one if the index already has one)."""
        if not isinstance(vocabulary, Vocabulary) or not vocabulary.fitted:
            raise ConfigError("add_local_features takes a fitted streamk.verification.Vocabulary")
        meta = _vocabulary_meta(vocabulary)

        def run(txn):
            if self._store.get_int(b"local_features", txn):
                return False
            for name, value in meta.items():
                self._store.put_meta(txn, name, value)
            return True
        if not self._store.write(run):
            return self.vocabulary
        self._vocabulary = vocabulary
        return vocabulary

    def geometry(self, image_id: str) -> bytes | None:
        """The stored local-geometry record of an image (bytes), or None when it has none."""
        return self.geometries([image_id])[0]

    def geometries(self, image_ids: Sequence[str]) -> list[bytes | None]:
        """The stored local-geometry records of ``image_ids`` (bytes, or None), in one read
        transaction, each checked (its CRC: an IndexCorruptError naming the image)."""
        with self._store.read() as txn:
            rows = [self._store.require_image(txn, i).row for i in image_ids]
            recs = [None if r is None else bytes(r) for r in self._store.geometry_records(txn, rows)]
        try:
            for rec in recs:
                if rec is not None:
                    parse_header(rec)
        except GeometryRecordError as exc:  # damage, named here: a caller has no index or row to name
            raise self._store.damaged_geometry(rows, recs) from exc
        return recs

    def thumbnail(self, image_id: str) -> bytes | None:
        """The small JPEG stored with an image (bytes), or None when it has none (only images
        whose writer made one: the HTTP server's uploads)."""
        with self._store.read() as txn:
            return self._store.get_blob(txn, "thumbnails", self._store.require_key(txn, image_id))

    @property
    def path(self) -> Any:
        return self._store.path

    @property
    def store(self) -> Store:
        return self._store

    @property
    def readonly(self) -> bool:
        return self._store.readonly

    def __len__(self) -> int:
        return self._store.count("images")

    def __contains__(self, image_id: object) -> bool:
        if not isinstance(image_id, str):
            return False
        try:
            with self._store.read() as txn:
                return self._store.has_image(txn, image_id)  # (in either Unicode normal form)
        except InvalidIdError:
            return False

    def records(self, image_ids: Iterable[str]) -> list[Any]:
        """The stored JSON records (bytes, checked against their CRC32C) of ``image_ids``, None
        for an absent id: one short read transaction."""
        with self._store.read() as txn:
            return [self._store.raw_image(txn, i) for i in image_ids]

    def ids(self) -> list[str]:
        """Every image id (sorted): O(N), for listings, not for search."""
        with self._store.read() as txn, txn.cursor(db=self._store.images_db) as cur:
            return [bytes(k).decode() for k in cur.iternext(keys=True, values=False)]

    def vectors_page(self, after: Any = None, n: int = 256) -> tuple[list[str], NDArray[np.float32], Any]:
        """Up to ``n`` (<= MAX_BATCH) images stored after row ``after`` (None or -1: from the
        start), in row order: (ids, their vectors (m, D) float32, the last row given -- the
        next page's cursor -- or -1 when none). A pass over the whole index page by page, in
        bounded memory, ends at an empty page."""
        after_row = -1 if after is None else int(after)
        n = int(n)
        if not 1 <= n <= MAX_BATCH:
            raise ConfigError(f"n must be in 1..{MAX_BATCH}, got {n}")
        rows, ids = [], []
        with self._store.read(buffers=True) as txn:
            self.view.refresh(txn)
            with txn.cursor(db=self._store.row_ids_db) as cur:  # removed rows have no entry
                if cur.set_range(row_key(after_row + 1)):
                    for k, v in cur:
                        rows.append(row_from_key(k))
                        ids.append(bytes(v).decode())
                        if len(rows) >= n:
                            break
            V = self.view.vectors_of(txn, rows) if rows else np.zeros((0, self.dim), np.float32)
        return ids, np.asarray(V, np.float32), rows[-1] if rows else -1

    def change_count(self) -> int:
        """The change counter the index's log numbers its changes by (``meta/seq``)."""
        return int(self._store.seq())

    def content_holders(self, content_keys: Sequence[bytes]) -> list[str | None]:
        with self._store.read() as txn:
            held = [txn.get(bytes(k), db=self._store.hashes_db) for k in content_keys]
            return [None if h is None else bytes(h).decode() for h in held]

    def stored_id(self, image_id: str) -> str:
        with self._store.read() as txn:
            return self._store.require_key(txn, image_id).decode()

    def info(self, image_id: str) -> dict[str, Any]:
        """The stored JSON record of an image (source, sha256, n_descriptors, added, row, ...)."""
        with self._store.read() as txn:
            return self._store.require_image(txn, image_id).to_dict()

    def extras(self, image_id: str) -> dict[str, Any]:
        """{"keypoints": (n, 6), "weights": (n,)} stored for display (may be empty)."""
        with self._store.read() as txn:
            raw = self._store.get_blob(txn, "extras", self._store.require_key(txn, image_id))
        if raw is None:
            return {}
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}

    def vector(self, image_id: str) -> NDArray[np.float32]:
        """The stored vector of an image as float32."""
        with self._store.read() as txn:
            return self.view.vectors.get(txn, [self._store.require_image(txn, image_id).row])[0]

    def extractor(self) -> Any:
        """The extractor for image files (from the stored params, or the default)."""
        return self._extractors.get()

    unit_vector = staticmethod(unit_vector)

    # ------------------------------------------------------------ writing
    def add(self, image_id: str, image_path: str | os.PathLike[str] | None = None,
            descriptors: NDArray[Any] | None = None, vector: NDArray[Any] | None = None,
            box: Sequence[float] | None = None, metadata: Mapping[str, Any] | None = None) -> str:
        """Add one image from exactly one source; returns its id once durable and searchable.

        metadata: a JSON object (dict) stored with the image (:meth:`metadata`); an image
        file also gets its path, folder, name, size, mtime and EXIF date (the given
        fields win). Fields made searchable with :meth:`index_field` can filter searches.

        image_path: an image file (features extracted with the index's extractor;
        ``box`` = (x1, y1, x2, y2) keeps the features inside it).
        descriptors: (n, d) raw SIFT-like descriptors (encoded with the index's encoder).
        vector: an image vector of the encoder's dimension (L2-normalised here).
        Same content under the same id: nothing written, returns the id.
        Raises DuplicateError (content under another id), IdExistsError (id holds other
        content), InvalidIdError, DimensionError, NonFiniteError, EmptyDescriptorSetError,
        ImageReadError, ZeroVectorError, ConfigError, MetadataError; the store is then unchanged.
        """
        enc = self.writer.encode_item(image_id, image_path, descriptors, vector, box, metadata)
        out = self.writer.write_encoded([enc])[0]
        if isinstance(out, Exception):
            raise out
        return enc.key.decode()  # the id as stored: NFC (keys.normal_id)

    def add_many(self, items: Iterable[Mapping[str, Any]], batch_size: int | None = None) -> list[Any]:
        """Add many images, ``batch_size`` per transaction (None: 64); one AddResult per item
        (see :meth:`IndexWriter.add_many`)."""
        return self.writer.add_many(items, 64 if batch_size is None else batch_size)

    def write_encoded(self, encoded: Iterable[Any], replace: bool = False) -> Any:
        """Write already-encoded images (``EncodedImage``) in one transaction; per image
        "added", "exists" or the named error that kept it out."""
        return self.writer.write_encoded(encoded, replace)

    def update(self, image_id: str, image_path: str | os.PathLike[str] | None = None,
               descriptors: NDArray[Any] | None = None, vector: NDArray[Any] | None = None,
               box: Sequence[float] | None = None, metadata: Mapping[str, Any] | None = None) -> str:
        """Replace the content of an existing image (UnknownIdError if absent); its metadata
        is kept, updated with ``metadata`` (and an image file's own fields)."""
        enc = self.writer.encode_item(image_id, image_path, descriptors, vector, box, metadata)
        self.writer.update(enc)
        return enc.key.decode()

    def remove(self, image_ids: str | Iterable[str]) -> int:
        """Remove one image (an id) or many (a list of ids), all or none: UnknownIdError
        if any is absent, and then nothing is removed. Returns the number removed."""
        if isinstance(image_ids, (str, bytes)) or not hasattr(image_ids, "__iter__"):
            image_ids = [image_ids]  # type: ignore[list-item]
        return self.writer.remove(image_ids)

    # ------------------------------------------------------------ metadata
    def metadata(self, image_id: str) -> dict[str, Any]:
        """The metadata (a dict) of an image; {} when it has none."""
        with self._store.read() as txn:
            return metadata_of_rows(txn, self._store, [self._store.require_image(txn, image_id).row])[0]

    def metadata_many(self, image_ids: Iterable[str]) -> list[dict[str, Any] | None]:
        """The metadata of each id (None for an absent id), in one read transaction (e.g.
        for the k results of a search)."""
        with self._store.read() as txn:
            records = self._store.images(txn, image_ids)
            metas = iter(metadata_of_rows(txn, self._store, [r.row for r in records if r is not None]))
            return [None if r is None else next(metas) for r in records]

    def set_metadata(self, image_id: str, metadata: Mapping[str, Any], merge: bool = False) -> dict[str, Any]:
        """Replace an image's metadata with ``metadata`` (a dict of at most 64 KB as JSON),
        or with ``merge=True`` update it (the given fields replace theirs, the others stay);
        indexed fields follow. Returns the metadata now stored. MetadataError / UnknownIdError
        leave the index as it was."""
        return self.writer.set_metadata(image_id, metadata, merge)

    def _indexed_fields(self):
        with self._store.read() as txn:
            return indexed_fields(txn, self._store)

    def index_field(self, name: str) -> bool:
        """Make metadata field ``name`` usable in search filters: posting lists (value ->
        rows) are kept for it from now on, and built for the stored images now (one pass
        over their metadata, in one transaction). Returns False if it already was."""
        return self._store.write(lambda txn: add_indexed_field(txn, self._store, name))

    def field_values(self, name: str, limit: int = 10) -> tuple[list[Any], bool]:
        """(up to ``limit`` distinct values of an indexed field, in value order; whether it
        holds more), read from its posting lists' keys (one seek each)."""
        with self._store.read() as txn:
            return field_values(txn, self._store, check_field(name), limit)

    def allowed(self, where: Mapping[str, Any] | None) -> Any:
        """The RowFilter (rows and bitmap) a filter selects now: for checks and tests."""
        clauses = parse_filter(where)
        with self._store.read(buffers=True) as txn:
            self.view.refresh(txn)
            return self._row_filter(txn, clauses)

    def _row_filter(self, txn, clauses):
        if clauses is None:
            return None
        n_rows = max(self._store.get_int(b"next_row", txn), self.view.dead.shape[0])
        return allowed_rows(txn, self._store, clauses, n_rows)

    # ------------------------------------------------------------ near-duplicates
    def _vector_duplicates(self, image_id, threshold, max_results, neighbours, progress):
        """The vector rule of :meth:`Index.duplicates` from this index's own map: one read
        transaction, the vector blocks read in order (:mod:`streamk.index.duplicates`)."""
        if image_id is not None:
            return duplicates_of(self, image_id, threshold, max_results)
        return duplicate_groups(self, threshold, neighbours, progress=progress)

    # ------------------------------------------------------------ codec
    def train(self, nlist: int = 1, M: int = 16, seed: int = 0, train_size: int | None = None, codec: Any = None,
              nprobe: int | None = None, progress: Any = None) -> Any:
        """Train (or retrain) the codec and swap in every image's code; returns it.

        nlist=1: flat PQ (ADC over every code), for up to ~10^5 images; nlist > 1:
        IVF-ADC, a query visits ``nprobe`` of the nlist lists (e.g. nlist=4096 at
        10^6 images). M: bytes per image. The codec is fitted on ``train_size``
        stored vectors drawn at random (default max(65536, 32 nlist)), or ``codec``
        (a trained :class:`~streamk.quantization.ivfpq.IVFPQ`, e.g. shared by shards) is used as is.
        nprobe: lists a query visits by default (default nlist / 256, at least 1;
        ``search(..., nprobe=)`` overrides it per query).
        Ingestion and searches (in this or other processes) go on meanwhile; see
        :mod:`streamk.index.retraining`. Run it from another thread or process (its own
        ``StreamingIndex.open``) to keep ingesting, e.g. ``streamk index train DIR``.
        """
        return Trainer(self._store, self.dim, self.vector_dtype, progress=progress).run(
            nlist=nlist, M=M, seed=seed, train_size=train_size, codec=codec, nprobe=nprobe)

    def train_pq(self, M: int = 16, seed: int = 0, chunk: int | None = None) -> Any:
        """Flat PQ (nlist = 1) with M bytes per image; returns its ProductQuantizer."""
        return self.train(nlist=1, M=M, seed=seed).pq_

    def mean_vector(self) -> tuple[NDArray[np.float64], int, int]:
        """(sum (D,) float64, count, images) of a bounded sample of the stored vectors
        (:meth:`~streamk.index.reader.SearchView.mean_vector`): what the centred expansion
        takes the collection's mean from (a sharded index adds its shards')."""
        with self._store.read(buffers=True) as txn:
            self.view.refresh(txn)
            return self.view.mean_vector(txn)

    def sample_vectors(self, n: int, seed: int = 0) -> NDArray[Any]:
        """n stored vectors (float32, fewer if the index holds fewer) drawn at random:
        a training sample (e.g. gathered from the shards of a sharded index)."""
        trainer = Trainer(self._store, self.dim, self.vector_dtype)
        return trainer.sample(trainer._stored_rows()[1], n, seed)

    def codec(self) -> Any:
        """The :class:`~streamk.quantization.ivfpq.IVFPQ` codec in use, or None before training."""
        with self._store.read() as txn:
            return self.view.codec_in_use(txn)

    def product_quantizer(self) -> Any:
        """The ProductQuantizer of a flat-PQ codec (nlist = 1), or None."""
        codec = self.codec()
        return codec.pq_ if codec is not None and codec.nlist == 1 else None

    # ------------------------------------------------------------ search
    def refresh(self) -> Any:
        """Bring the in-memory view up to date with the store (cheap when nothing changed:
        one read of the change counter). Returns the number of changes applied."""
        with self._store.read(buffers=True) as txn:
            return self.view.refresh(txn)

    def _second_stage(self, q, qrec, params):
        """The second stage of one query (:mod:`streamk.index.second_stage`), in one read
        transaction: its first stage (top max(k, R)), verified, expanded, as [Hit]."""
        clauses = parse_filter(params.where)
        with self._store.read(buffers=True) as txn:
            scores, rows, allow, mode = self._view_search(txn, q[None, :], max(params.k, params.verify_count()),
                                                          clauses, params.mode, params.nprobe, params.rerank)
            damaged: list[int] = []
            results = second_stage(self.view, txn, q, rows[0], scores[0], qrec, params, mode, allow=allow,
                                   damaged=damaged)
            ids = self.view.ids_of(txn, np.array([[r for r, _, _ in results]], np.int64).reshape(1, -1))[0]
            damaged_ids = self.view.ids_of(txn, np.array(damaged, np.int64)) if damaged else []
        warn_damaged(self.path, damaged_ids)
        return [Hit(i, sc, **expl) for i, (_, sc, expl) in zip(ids, results) if i is not None]

    def first_stage(self, Q: NDArray[Any], k: int, mode: str | None = None, nprobe: int | None = None,
                    rerank: int | None = None, where: Any = None,
                    params: SearchParams | None = None) -> tuple[NDArray[np.float32], Any]:
        """(scores, ids) (nq, <= k) of the unit query rows Q (checked by the caller): the
        first stage alone, what a shard of a sharded index answers (k already checked
        against MAX_K by the caller, capped here at the number of images); ``where``: a
        metadata filter. ``params``: a :class:`~streamk.index.SearchParams` whose mode,
        nprobe, rerank and where are used instead (k stays the count asked for here: the
        expanded search of a sharded index asks for k + V)."""
        if params is not None:
            mode, nprobe, rerank, where = params.mode, params.nprobe, params.rerank, params.where
        clauses = parse_filter(where)
        with self._store.read(buffers=True) as txn:
            scores, rows, _, _ = self._view_search(txn, Q, k, clauses, mode, nprobe, rerank)
            return scores, self.view.ids_of(txn, rows)

    def verified_candidates(self, q: NDArray[Any], qrec: Any, params: SearchParams) -> list[Any]:
        """One query's first stage (top max(k, R) of the unit vector ``q``) and the
        verification of its first R results against the query's geometry record ``qrec``
        (k, R, box, pairs, mode, nprobe, rerank and where from ``params``, a
        :class:`~streamk.index.SearchParams`): what a shard of a sharded index answers,
        where its records live.

        Returns [Candidate] (:class:`~streamk.index.second_stage.Candidate`, ids as image
        ids) in first-stage order: the verified ones, the first ``params.expand_count()``
        of them by inliers with their vectors, and the first k of the others, the rest
        of what this shard could add to the k results.

        Deprecated (DeprecationWarning; removed after 0.3): a sharded index no longer asks its
        shards for this. It verifies the merged first stage's top R by id on the shards that
        hold them (``streamk.index.second_stage.verify_on_shard``), as one index verifies its
        own top R; ``search(..., verify=R)`` gives any index's verified results."""
        warnings.warn("StreamingIndex.verified_candidates is deprecated and will be removed after streamk 0.3: a "
                      "sharded index verifies the merged top R by id (streamk.index.second_stage.verify_on_shard); "
                      "use search(..., verify=R)", DeprecationWarning, stacklevel=2)
        q = self.queries.vectors(np.asarray(q, np.float32).reshape(1, -1))
        clauses = parse_filter(params.where)
        with self._store.read(buffers=True) as txn:
            scores, rows, _, _ = self._view_search(txn, q, max(params.k, params.verify_count()), clauses,
                                                   params.mode, params.nprobe, params.rerank)
            candidates = verify_candidates(self.view, txn, rows[0], scores[0], qrec, params)
            head, rest = verified_first(candidates)
            keep = with_vectors(self.view, txn, head, params.expand_count()) + rest[:params.k]
            position = {c.id: p for p, c in enumerate(candidates)}
            keep.sort(key=lambda c: position[c.id])  # the first-stage order
            ids = self.view.ids_of(txn, np.array([c.id for c in keep], np.int64))
        return [c._replace(id=i) for i, c in zip(ids, keep)]

    def _view_search(self, txn, Q, k, clauses, mode, nprobe, rerank):
        """The first stage in the read ``txn``: refresh the view, keep to the rows the
        parsed filter ``clauses`` allow, and search the top ``k`` of the unit query rows
        ``Q`` (``mode`` None: "pq" where the index has a codec, else "exact"; a stale codec
        warns). Returns (scores, rows, allow, mode): the row filter and the mode used, for
        a second stage that keeps to them."""
        self.view.refresh(txn)
        allow = self._row_filter(txn, clauses)
        if mode is None:
            mode = "pq" if self.view.lists is not None else "exact"
        if mode == "exact" and (nprobe is not None or rerank is not None):
            _warn_ignored(nprobe, rerank, self.view.lists is None)
        self._warn_if_stale(txn, mode)
        scores, rows = self.view.search(txn, Q, k, mode=mode, nprobe=nprobe, rerank=rerank, allow=allow)
        return scores, rows, allow, mode

    def codec_params(self) -> dict[str, Any] | None:
        """{"nlist", "M", "nprobe"} of the codec in use (what retraining it again takes), or None."""
        codec = self.codec()
        return None if codec is None else {"nlist": codec.nlist, "M": codec.M, "nprobe": codec.nprobe}

    def codec_staleness(self) -> dict[str, Any] | None:
        """How far the codec lags the index (:func:`~streamk.index.retraining.codec_staleness`):
        None before training, else the images it was trained on, the images added since,
        their ratio and whether that is past STALE_CODEC_RATIO."""
        with self._store.read() as txn:
            return codec_staleness(txn, self._store)

    def _warn_if_stale(self, txn, mode):
        """A StaleCodecWarning for the first PQ search that finds the codec stale after the
        index changed (or was opened): once per state of the index, not per search (the
        warning machinery cost ~5-10 us a search on a stale index; nothing when not stale:
        one tuple compare)."""
        if mode != "pq":
            return
        seen = (self.view.seq, self.view.epoch)  # refreshed in txn: the record changes only with seq
        if getattr(self, "_staleness_seen", None) == seen:
            return
        st = codec_staleness(txn, self._store)
        note = stale_codec_note(st, str(self._store.path))
        self._staleness_seen = seen
        if note is not None:
            w = StaleCodecWarning(note)
            w.staleness = dict(st)
            warnings.warn(w, stacklevel=3)

    # ------------------------------------------------------------ facts
    def stats(self) -> dict[str, Any]:
        """Counts and sizes: ``images``, ``next_row``, ``codec``, ``vector_dtype`` ("float16" or
        "float32", the stored vectors'), ``reader_memory`` (bytes a reader holds in memory) and
        ``map_size`` (bytes: the LMDB map's current size, what the file may grow to before the map
        is enlarged); with a codec, the images it was trained on and the images added since
        (``codec_trained_on``, ``added_since_training``; None for a codec trained before streamk
        recorded them). Sizes are numbers of bytes (the CLI shows them in KiB / MiB / GiB)."""
        codec = self.codec()
        out = {"images": len(self), "next_row": self._store.get_int(b"next_row"),
               "codec": None if codec is None else codec.describe(), "vector_dtype": str(self.vector_dtype),
               "reader_memory": self.view.memory_bytes(), "map_size": self._store.map_size}
        st = self.codec_staleness()
        if st is not None:
            out["codec_trained_on"] = st["trained_on"]
            out["added_since_training"] = st["added_since"]
        return out

"""The one interface of a streamk index, :class:`Index`: what every caller (Python, the
CLI, the widgets, the server) may use, whichever index it holds.

    Index
    ├── StreamingIndex   one LMDB environment, in this process
    └── ShardedIndex     S StreamingIndex shards, each opened by one owner (this process,
                         or a Dask actor where its disk is), searched by scatter / gather

As faiss's ``IndexShards`` *is an* ``Index`` and qdrant-client's local and remote clients
both implement ``QdrantBase``: a caller never needs to know which one it holds, and the
congruence suite (``tests/index/test_congruence.py``) checks that both give the same
answers on the same images.

Written once, here: the search (parameters checked once as a
:class:`~streamk.index.SearchParams`, the query prepared by
:meth:`~streamk.index.QueryEncoder.prepare`, then the first stage, or the second stage
whose ordering and expansion live in :mod:`streamk.index.second_stage`), near-duplicates
and their copy classes (:mod:`streamk.index.duplicates`, over ``vectors_page`` and
``search``: a sharded index's pairs span its shards), the query vectors, the encoder check
and the context manager. Each implementation provides the
rest with the same signatures.

Members only on :class:`~streamk.index.StreamingIndex` (one LMDB environment's own):
``create(..., map_size, block_rows, max_map_size)``, ``open(..., max_map_size)``,
``store``, ``view``, ``writer``, ``readonly``, ``refresh``, ``extras``, ``allowed``,
``add_local_features``, ``has_local_features``, ``train_pq``, ``sample_vectors``,
``product_quantizer``, ``vector_dtype``, ``unit_vector``, ``verified_candidates``
(deprecated: what a shard answered before 0.3). Only on
:class:`~streamk.index.ShardedIndex`: ``shards``, ``manifest``, ``create(..., shards,
dask, hosts)``, ``open(..., dask)``.
"""

from __future__ import annotations  # annotations are never evaluated at run time

import os
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

import numpy as np
from numpy.typing import NDArray

from ..errors import EncoderMismatchError
from .duplicates import (DEFAULT_DUPLICATE_THRESHOLD, DEFAULT_NEIGHBOURS, MAX_DUPLICATES, vector_duplicate_groups,
                         vector_duplicates_of, verified_duplicates)
from .search_params import DEFAULT_EXPANSION, SearchParams
from .second_stage import Hit, cosine_scores

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from ..encoding import Encoder
    from .queries import QueryEncoder

_I = TypeVar("_I", bound="Index")


class Index(ABC):
    """An image index: add, update and remove images, search them (first stage and
    second stage), their metadata and filters, near-duplicates, the PQ / IVF-PQ codec.
    See the module doc for who implements it and what is written once here.

    Attributes every index has: ``path``, ``dim`` (the vectors' dimension),
    ``fingerprint`` (its encoder's), ``queries`` (its
    :class:`~streamk.index.QueryEncoder`), ``encoder`` and ``vocabulary`` (None: no
    second stage)."""

    # set by every implementation (declared for the type checker only)
    fingerprint: str
    queries: QueryEncoder

    # ------------------------------------------------------------ life
    @abstractmethod
    def close(self) -> None:
        """Close the index (every shard); further calls fail."""

    @abstractmethod
    def opened_files(self) -> dict[str, tuple[int, int]]:
        """{path: (st_dev, st_ino)} of the files and folders this index opened, as they were
        then: its folder and LMDB data file; a sharded index's folder, manifest and the files
        of the shards this process opened. A program that keeps an index open (the server)
        passes them to :func:`~streamk.index.replaced_files` to notice that the index at its
        path is another one now (a backup moved into its place), which it would not read."""

    def __enter__(self: _I) -> _I:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ what it holds
    @abstractmethod
    def __len__(self) -> int:
        """The number of images."""

    @abstractmethod
    def __contains__(self, image_id: object) -> bool:
        """Whether ``image_id`` is stored (False for an invalid id)."""

    @abstractmethod
    def ids(self) -> list[str]:
        """Every image id, sorted: O(N), for listings, not for search."""

    @abstractmethod
    def records(self, image_ids: Iterable[str]) -> list[Any]:
        """The stored JSON records (bytes) of ``image_ids``, None for an absent id."""

    @abstractmethod
    def stored_id(self, image_id: str) -> str:
        """``image_id`` as this index stores it, found in either Unicode normal form: new ids
        are stored NFC (:func:`~streamk.index.keys.normal_id`), an index written before holds
        them as their files named them (``café`` typed finds ``cafe`` + U+0301 from macOS);
        UnknownIdError when absent. Every lookup of a user's id falls back the same way."""

    @abstractmethod
    def content_holders(self, content_keys: Sequence[bytes]) -> list[str | None]:
        """The id that holds each content key (:func:`~streamk.index.image_content_key` of an
        image file's sha256, ...), None where no image does: one short read (per shard).
        Ingestion asks it before describing a file, so that bytes stored under another id
        are not described again."""

    @abstractmethod
    def info(self, image_id: str) -> dict[str, Any]:
        """The stored record of an image (source, sha256, n_descriptors, row, ...), or UnknownIdError."""

    @abstractmethod
    def vector(self, image_id: str) -> NDArray[np.float32]:
        """The stored vector of an image (float32, unit norm)."""

    @abstractmethod
    def geometry(self, image_id: str) -> bytes | None:
        """The stored local-geometry record of an image (bytes), or None when it has none."""

    def geometries(self, image_ids: Sequence[str]) -> list[bytes | None]:
        """The stored local-geometry records of ``image_ids`` in their order (bytes, or None
        where an image has none): one :meth:`geometry` call each here; an implementation
        reads them in one go where it can (the copy classes read each image's candidates
        so)."""
        return [self.geometry(i) for i in image_ids]

    @abstractmethod
    def thumbnail(self, image_id: str) -> bytes | None:
        """The small JPEG stored with an image (bytes), or None when it has none."""

    @abstractmethod
    def vectors_page(self, after: Any = None, n: int = 256) -> tuple[list[str], NDArray[np.float32], Any]:
        """Up to ``n`` (<= MAX_BATCH) images after the cursor ``after`` (None or -1: from the
        start; else what the previous page returned): (ids, their vectors (m, D) float32,
        the cursor of the next page). A pass over the whole index in bounded memory ends
        at an empty page."""

    @abstractmethod
    def change_count(self) -> int:
        """How many changes (an image added, removed or its content replaced) the index has
        taken since it was made: it grows with each, never falls. Equal before and after a
        pass page by page (:meth:`vectors_page`), the pass saw one state of the index."""

    # ------------------------------------------------------------ writing
    @abstractmethod
    def add(self, image_id: str, image_path: str | os.PathLike[str] | None = None,
            descriptors: NDArray[Any] | None = None, vector: NDArray[Any] | None = None,
            box: Sequence[float] | None = None, metadata: Mapping[str, Any] | None = None) -> str:
        """Add one image from exactly one source (an image file inside ``box``, a
        descriptor set or a vector) with its ``metadata``; returns its id once durable and
        searchable. Same content under the same id: nothing written."""

    @abstractmethod
    def add_many(self, items: Iterable[Mapping[str, Any]], batch_size: int | None = None) -> list[Any]:
        """Add many ({"id", and one of "image_path", "descriptors", "vector"; "metadata"}),
        ``batch_size`` per transaction (None: the index's default); one AddResult per item."""

    @abstractmethod
    def write_encoded(self, encoded: Iterable[Any], replace: bool = False) -> Any:
        """Write already-encoded images (EncodedImage); per image "added", "exists" or the
        named error that kept it out."""

    @abstractmethod
    def update(self, image_id: str, image_path: str | os.PathLike[str] | None = None,
               descriptors: NDArray[Any] | None = None, vector: NDArray[Any] | None = None,
               box: Sequence[float] | None = None, metadata: Mapping[str, Any] | None = None) -> str:
        """Replace the content of an existing image (UnknownIdError if absent); its
        metadata is kept, updated with ``metadata``."""

    @abstractmethod
    def remove(self, image_ids: str | Iterable[str]) -> int:
        """Remove one id or many, all or none (UnknownIdError names an absent one);
        returns the number removed."""

    # ------------------------------------------------------------ metadata and filters
    @abstractmethod
    def metadata(self, image_id: str) -> dict[str, Any]:
        """The metadata (a dict) of an image; {} when it has none."""

    @abstractmethod
    def metadata_many(self, image_ids: Iterable[str]) -> list[dict[str, Any] | None]:
        """The metadata of each id (None for an absent id)."""

    @abstractmethod
    def set_metadata(self, image_id: str, metadata: Mapping[str, Any], merge: bool = False) -> dict[str, Any]:
        """Replace (or with ``merge``, update) an image's metadata; returns what is stored."""

    @property
    def indexed_fields(self) -> FieldNames:
        """The metadata fields search filters may use (:meth:`index_field`): call it,
        ``index.indexed_fields()`` -> a list (0.2's property form, without the call, works
        for one release with a DeprecationWarning)."""
        return FieldNames(self._indexed_fields())

    @abstractmethod
    def _indexed_fields(self):
        """The indexed fields, a list (what :attr:`indexed_fields` returns)."""

    @abstractmethod
    def index_field(self, name: str) -> bool:
        """Make metadata field ``name`` usable in search filters; False if it already was."""

    @abstractmethod
    def field_values(self, name: str, limit: int = 10) -> tuple[list[Any], bool]:
        """(up to ``limit`` (1..100) distinct values of the indexed field ``name``, in value
        order: booleans, numbers (as floats), strings; whether it holds more): what a filter
        on it can match. One seek per value; FilterError when the field is not indexed."""

    # ------------------------------------------------------------ codec and facts
    @abstractmethod
    def train(self, nlist: int = 1, M: int = 16, seed: int = 0, train_size: int | None = None, codec: Any = None,
              nprobe: int | None = None, progress: Any = None) -> Any:
        """Train (or retrain) the PQ / IVF-PQ codec, or install the trained ``codec``;
        returns it. Searches and ingestion go on meanwhile."""

    @abstractmethod
    def codec(self) -> Any:
        """The :class:`~streamk.quantization.IVFPQ` codec in use (a sharded index's shards
        share one), or None before training."""

    @abstractmethod
    def codec_params(self) -> dict[str, Any] | None:
        """{"nlist", "M", "nprobe"} of the codec in use, or None before training."""

    @abstractmethod
    def codec_staleness(self) -> dict[str, Any] | None:
        """How far the codec lags the index (trained_on, added_since, ratio, stale), or None."""

    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """Counts and sizes: images, codec, vector dtype, reader memory (``reader_memory``: bytes;
        every size key holds a number of bytes), and the codec's staleness."""

    # ------------------------------------------------------------ search
    # an image (a path, the file's bytes, a PIL image): [Hit]; an array (an (H, W, 3) image, a descriptor
    # set, a vector or a batch of vectors, the same type): [Hit] or (scores, ids)
    @overload
    def search(self, query: str | os.PathLike[str] | bytes | PILImage, k: int = 10, mode: str | None = None,
               rerank: int | None = None, box: Sequence[float] | None = None, nprobe: int | None = None,
               verify: int | None = None, expand: int | None = None, expansion: str = DEFAULT_EXPANSION,
               pairs: bool = False, features: Any = None, where: Mapping[str, Any] | None = None,
               record: bytes | None = None, params: SearchParams | None = None) -> list[Hit]: ...

    @overload
    def search(self, query: NDArray[Any], k: int = 10, mode: str | None = None,
               rerank: int | None = None, box: Sequence[float] | None = None, nprobe: int | None = None,
               verify: int | None = None, expand: int | None = None, expansion: str = DEFAULT_EXPANSION,
               pairs: bool = False, features: Any = None, where: Mapping[str, Any] | None = None,
               record: bytes | None = None,
               params: SearchParams | None = None) -> list[Hit] | tuple[NDArray[np.float32], NDArray[Any]]: ...

    def search(self, query: str | os.PathLike[str] | bytes | PILImage | NDArray[Any], k: int = 10,
               mode: str | None = None,
               rerank: int | None = None, box: Sequence[float] | None = None, nprobe: int | None = None,
               verify: int | None = None, expand: int | None = None, expansion: str = DEFAULT_EXPANSION,
               pairs: bool = False, features: Any = None, where: Mapping[str, Any] | None = None,
               record: bytes | None = None,
               params: SearchParams | None = None) -> list[Hit] | tuple[NDArray[np.float32], NDArray[Any]]:
        """The k best images by decreasing inner product with the query, then (second
        stage) spatially verified and expanded.

        One query (an image: its path, the file's bytes, a PIL image or an (H, W, 3 or 4)
        uint8 array; a descriptor set (n, d); or a vector (D,)): a list of
        :class:`~streamk.index.Hit`, best first: each is the pair ``(id, score)`` (it
        unpacks as one) with ``inliers``, ``verified``, ``region``, ``affine`` and, with
        ``pairs=True``, the inlier ``pairs``. A batch of vectors (nq, D) (a (1, D) array
        too): ``(scores, ids)``, arrays of shape (nq, k) -- float32 and object (str) --
        best first, as faiss returns them; slots past the number of images hold -inf
        and None (first stage only). A score is the cosine of the query and the image's
        vector, in [-1, 1]: an inner product that rounding (float16 vectors, PQ codes) took
        past it is clipped once ranked (:func:`~streamk.index.second_stage.cosine_score`).

        Bounded cost: k, rerank, verify, expand and a batch's size are checked against
        streamk's maxima (MAX_K = 10,000 results, MAX_RERANK = 10,000 candidates,
        MAX_VERIFY = MAX_EXPAND = 1,000, MAX_BATCH = 1,000 queries; ConfigError above)
        before anything is allocated; k and the candidate counts are then capped at the
        number of images in the index (a batch's arrays have min(k, images) columns).

        mode "exact": every stored vector. mode "pq": the codes (flat PQ, or the
        ``nprobe`` nearest IVF lists), then the best ``rerank`` (default max(4k, 100);
        0: none) re-scored with the stored vectors. Default: "pq" once a codec is
        trained, else "exact". Ties go to the image added first.

        Second stage (an index with local features, a query image or its ``features``):
        ``verify`` = R first-stage results verified by RANSAC on their local geometry
        (default 100; 0: off), verified ones first by inliers; ``expand`` = N verified
        results averaged into the query (``expansion`` "recursive-centred", the default: N more a
        round, each round's new results verified, the collection's mean vector subtracted;
        "recursive" without it; "aqe" once; "alpha" for alpha-QE),
        searched once more (default 50; 0: off). ``box`` maps the query's box into each
        verified result (``region``). ``features``: the query image's Features (already
        cropped to ``box``) when the query is given as its vector. ``record``: instead of
        features, the query's local-geometry record (bytes), e.g. a stored image's
        (:meth:`geometry`) to search with an indexed image: one word per feature, so fewer
        tentative matches than a query image's multiple assignment gives.

        where: a metadata filter (:mod:`streamk.index.metadata`), e.g. ``{"folder": "x"}``,
        ``{"year": {"gte": 2020}}``, ``{"tag": {"in": ["a", "b"]}}``, on indexed fields
        (:meth:`index_field`): only the images it selects are scanned (a row bitmap given
        to the exact / PQ / IVF scans), so k results come back whenever k images match.

        params: a :class:`~streamk.index.SearchParams` (k, mode, nprobe, rerank, verify,
        expand, expansion, box, where, pairs: checked once, where it was built) instead of
        those keyword arguments; ``query``, ``features`` and ``record`` are the query.
        """
        params = SearchParams.of(params, k=k, mode=mode, rerank=rerank, box=box, nprobe=nprobe, verify=verify,
                                 expand=expand, expansion=expansion, pairs=pairs, where=where)
        prepared = self.queries.prepare(query, params, features, record)
        if prepared.qrec is not None:
            return self._second_stage(prepared.Q[0], prepared.qrec, params)
        scores, ids = self.first_stage(prepared.Q, params.k, params=params)
        if prepared.batch:
            return cosine_scores(scores), ids  # clipped to [-1, 1] as a Hit's score is (ranked before)
        return [Hit(i, s) for i, s in zip(ids[0], scores[0]) if i is not None]

    @abstractmethod
    def first_stage(self, Q: NDArray[Any], k: int, mode: str | None = None, nprobe: int | None = None,
                    rerank: int | None = None, where: Any = None,
                    params: SearchParams | None = None) -> tuple[NDArray[np.float32], Any]:
        """(scores, ids) (nq, <= k) of the unit query rows Q: the first stage alone (k
        checked by the caller, capped at the number of images); ``params``: mode, nprobe,
        rerank and where from a SearchParams."""

    @abstractmethod
    def _second_stage(self, q, qrec, params):
        """[Hit]: the second stage of the unit query vector ``q`` with geometry record ``qrec``."""

    def query_vector(self, query: str | os.PathLike[str] | bytes | PILImage | NDArray[Any],
                     box: Sequence[float] | None = None) -> NDArray[np.float32]:
        """The unit vector of a query: an image (a path or one in memory, as :meth:`search`
        takes it), a descriptor set (n, d) or a vector."""
        return self.queries.vector(query, box)

    def query_vectors(self, Q: NDArray[Any]) -> NDArray[np.float32]:
        """(nq, D) unit float32 rows of a batch of query vectors, or a named error."""
        return self.queries.vectors(Q)

    def duplicates(self, image_id: str | None = None, threshold: float | None = None,
                   verify: bool = False, max_results: int = MAX_DUPLICATES, neighbours: int = DEFAULT_NEIGHBOURS,
                   progress: Any = None) -> list[Hit] | list[dict[str, Any]]:
        """Near-duplicates by vector similarity: of ``image_id`` ([Hit] best first, score >=
        ``threshold`` (None: DEFAULT_DUPLICATE_THRESHOLD), at most ``max_results``), or the
        groups of the whole index ([{"ids", "pairs": [[id_a, id_b, score, None], ...]}],
        each image's top ``neighbours`` searched; largest first). Such a group may hold other
        photos of the same scene.

        ``verify=True`` (deprecated, DeprecationWarning): the copy classes instead, as
        ``streamk duplicates`` and the server give them (:func:`streamk.index.copies_of`,
        :func:`streamk.index.copy_report`, on a single or a sharded index): its copy and
        exact pairs only, in the shapes above (inliers filled in); a threshold given keeps
        the pairs that score at least that. Call copies_of / copy_report for each pair's
        class, covered fraction and pixel agreement."""
        if verify:
            return verified_duplicates(self, image_id, threshold, max_results, neighbours, progress)
        threshold = DEFAULT_DUPLICATE_THRESHOLD if threshold is None else threshold
        return self._vector_duplicates(image_id, threshold, max_results, neighbours, progress)

    def _vector_duplicates(self, image_id, threshold, max_results, neighbours, progress):
        """The vector rule of :meth:`duplicates` through this interface (search, vectors_page);
        an implementation may answer it faster from its own storage."""
        if image_id is None:
            return vector_duplicate_groups(self, threshold, neighbours, progress=progress)
        return vector_duplicates_of(self, image_id, threshold, max_results)

    # ------------------------------------------------------------ encoding
    @abstractmethod
    def extractor(self) -> Any:
        """The extractor for image files (the index's stored parameters)."""

    def check_encoder(self, encoder: Encoder) -> None:
        """Raise EncoderMismatchError unless ``encoder`` encodes as the index's encoder."""
        if encoder.fingerprint != self.fingerprint:
            raise EncoderMismatchError(
                f"encoder fingerprint {encoder.fingerprint[:12]}... differs from the index's "
                f"{self.fingerprint[:12]}...: vectors would not be comparable")


class FieldNames(list):
    """What :meth:`Index.indexed_fields` returns: a list. Still usable without the call (the
    0.2 property) for one release, with a DeprecationWarning."""

    def __call__(self):
        return self[:]  # a plain list (no warning)

    def _old(self):
        warnings.warn("indexed_fields is a method since streamk 0.3: call it, index.indexed_fields()",
                      DeprecationWarning, stacklevel=3)

    def __iter__(self):
        self._old()
        return super().__iter__()

    def __len__(self):
        self._old()
        return super().__len__()

    def __contains__(self, item):
        self._old()
        return super().__contains__(item)

    def __eq__(self, other):
        self._old()
        return list.__eq__(self, other)

    __hash__ = None


__all__ = ["FieldNames", "Index"]

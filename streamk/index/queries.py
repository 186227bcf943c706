"""What a search is asked with, made into what it scans: the extractor of the index's
images (so that queries are described the same way), query images, descriptor
sets and vectors as unit query vectors, and the checks of a request's numbers.

Shared by :class:`~streamk.index.StreamingIndex` and
:class:`~streamk.index.ShardedIndex`; reading never goes through the writer.
"""

import json
import os
from typing import NamedTuple

import numpy as np

from ..errors import ConfigError, DimensionError, EmptyDescriptorSetError, NonFiniteError, ZeroVectorError
from ..features import (DESCRIPTOR_DIM, Features, crop_to_box, default_extractor, extractor_from_params,
                        features_of_bytes, image_features, in_memory_image_bytes, is_image_in_memory)
from .items import checked_vector, normalise_box, unit_vector
from .search_params import INDEX_LIMITS, MODES, SearchParams, check_count
from .second_stage import query_record

# The most a request may ask for (streamk's limits, :data:`~streamk.index.INDEX_LIMITS`;
# the reasons beside each in search_params.py), under their 0.2 names.
MAX_K = INDEX_LIMITS.k  # results per query
MAX_RERANK = INDEX_LIMITS.rerank  # PQ candidates re-scored with their stored vectors, per query (>= MAX_K)
MAX_VERIFY = INDEX_LIMITS.verify  # first-stage results spatially verified
MAX_EXPAND = INDEX_LIMITS.expand  # verified results averaged into an expanded query
MAX_BATCH = INDEX_LIMITS.batch  # query vectors in one batch (nq x k results: at most 10^7)


def check_k(k, maximum=MAX_K):
    """``k`` as an int in 1..MAX_K, or ConfigError (before any allocation sized by it).
    A k above the number of images is capped by the search, not refused."""
    return check_count("k", k, 1, maximum, " results per query (a search caps k at the number of images)")


def check_request(k, rerank=None, verify=None, expand=None):
    """The numbers of one search request checked against streamk's limits (ConfigError),
    as :class:`~streamk.index.SearchParams` checks them. Returns k as an int."""
    return SearchParams(k=k, rerank=rerank, verify=verify, expand=expand).k


class StoredExtractor:
    """The extractor for an index's image files: rebuilt from the parameters stored in
    its meta, or the default extractor, whose parameters the writer pins (stores)
    with the first image added. ``params()`` -> the stored parameters, or None."""

    def __init__(self, params):
        self._params = params  # callable: the stored parameters (a dict) or None
        self._extractor = None
        self._built_from = None
        self.to_pin = None  # the parameters to store with the first image, when none are

    def get(self):
        params = self._params()
        if self._extractor is not None and (params is None or params == self._built_from):
            return self._extractor
        ex = default_extractor() if params is None else extractor_from_params(params)
        self._extractor, self.to_pin, self._built_from = ex, ex.params(), params
        return ex

    def use(self, extractor, params):
        """Use ``extractor`` (whose parameters, ``params``, are stored or to be)."""
        self._extractor, self.to_pin, self._built_from = extractor, params, params

    @staticmethod
    def from_meta(raw):
        return json.loads(raw) if raw is not None else None


class PreparedQuery(NamedTuple):
    """A search's query made into what the stages scan: ``batch`` (a batch of vectors:
    (scores, ids) arrays come back), ``Q`` (nq, D) unit float32 rows, ``qrec`` (the
    query's geometry record when the second stage runs, else None) and ``R`` (first-stage
    results it verifies; 0: the first stage alone)."""

    batch: bool
    Q: np.ndarray
    qrec: bytes | None
    R: int


class QueryEncoder:
    """Queries -> unit float32 query vectors, encoded as the index encodes its images.

    encoder, extractor: callables returning the index's Encoder and Extractor (loaded
    on first use); dim: the vectors' dimension; vocabulary: a callable returning the
    index's visual words, or None (no second stage)."""

    def __init__(self, encoder, extractor, dim, vocabulary=lambda: None):
        self._encoder = encoder
        self._extractor = extractor
        self._vocabulary = vocabulary
        self.dim = int(dim)

    def prepare(self, query, params, features=None, record=None):
        """The :class:`PreparedQuery` of a search (written once for every index kind):
        ``query`` an image path (described, inside ``params.box``), a descriptor set, a
        vector or a batch of vectors; ``features`` the query image's Features (already
        cropped) when the query is its vector, or ``record`` its geometry record. The
        second stage runs for one query with features or a record, on an index with a
        vocabulary, when ``params`` verify some (R > 0) and the query has features."""
        box = params.box
        batch = self.is_batch(query)
        if batch and (box is not None or features is not None):
            raise ConfigError("box and features apply to one query image, not a batch of vectors")
        if features is not None and not isinstance(features, Features):
            raise ConfigError(f"features= is the query image's Features (as streamk.extract gives them), got "
                              f"{type(features).__name__}: give the image itself as the query instead")
        if record is not None and not isinstance(record, (bytes, bytearray, memoryview)):
            raise ConfigError(f"record= is a stored local-geometry record (bytes, index.geometry(id)), got "
                              f"{type(record).__name__}")
        if batch:
            Q = self.vectors(query)
        elif self.is_image(query):
            features = self.features(query, box)
            Q = unit_vector(self._encoder().encode(features.descriptors))[None, :]
        else:
            Q = self.vector(query, box=None if features is not None else box)[None, :]
        if record is not None and (batch or features is not None):
            raise ConfigError("record applies to one query vector, without features")
        vocabulary = None if batch or (features is None and record is None) else self._vocabulary()
        R = params.verify_count() if vocabulary is not None else 0
        if record is not None:
            qrec = record if R else None
        else:
            qrec = query_record(vocabulary, features) if R and len(features) else None
        return PreparedQuery(batch, Q, qrec, R if qrec is not None else 0)

    def is_image(self, query):
        """Whether ``query`` is a query image: a path, or one held in memory (the file's
        bytes, a PIL image, an (H, W, 3 or 4) uint8 array; :func:`~streamk.features.in_memory_image_bytes`)."""
        return isinstance(query, (str, os.PathLike)) or is_image_in_memory(query)

    def features(self, image, box=None):
        """The Features of a query image (a path or one in memory; inside ``box``), or
        EmptyDescriptorSetError."""
        box = normalise_box(box)
        ex = self._extractor()
        if isinstance(image, (str, os.PathLike)):
            name = image
            _, f = image_features(image, ex, box)
        else:
            name = "query image"
            data = in_memory_image_bytes(image, name, ex.max_file_size, ex.max_pixels)
            if data is None:
                raise DimensionError(f"query: {type(image).__name__} is not an image")
            f, _ = features_of_bytes(data, name, ex, None)
            f = crop_to_box(f, box) if box is not None else f
        if len(f) == 0:
            raise EmptyDescriptorSetError(f"{name}: no local features" + (" inside the box" if box is not None else ""))
        return f

    def vector(self, query, box=None):
        """The unit vector of a query: an image (a path or one in memory), a descriptor set
        (n, d) or a vector."""
        if self.is_image(query):
            return unit_vector(self._encoder().encode(self.features(query, box).descriptors))
        if box is not None:
            raise ConfigError("box applies to query images only")
        try:
            q = np.asarray(query)
        except (TypeError, ValueError) as exc:
            raise DimensionError(f"query: not an array ({exc})") from exc
        if q.ndim == 1:
            return checked_vector(q, self.dim, "query")
        if q.ndim == 2 and q.shape[1] == DESCRIPTOR_DIM:
            return unit_vector(self._encoder().encode(q))
        grey = (" (a grey image? pass it as a PIL image, Image.fromarray(a), or the file's bytes)"
                if q.ndim == 2 and q.dtype == np.uint8 else "")
        raise DimensionError(f"query: expected an image (a path, the file's bytes, a PIL image or an (H, W, 3) "
                             f"uint8 array), an (n, {DESCRIPTOR_DIM}) descriptor set or a ({self.dim},) vector, got "
                             f"shape {q.shape}{grey}")

    def vectors(self, Q):
        """(nq, D) unit float32 rows of a batch of query vectors, or a named error."""
        Q = np.asarray(Q)
        if Q.ndim == 2 and Q.shape[0] > MAX_BATCH:
            raise ConfigError(f"a batch of {Q.shape[0]:,} queries is over streamk's limit of {MAX_BATCH:,} per "
                              f"search: search it in parts")
        Q = Q.astype(np.float64)
        if Q.ndim != 2 or Q.shape[1] != self.dim or Q.shape[0] == 0:
            raise DimensionError(f"queries: expected a non-empty (nq, {self.dim}) array, got shape {Q.shape}")
        norms = np.sqrt(np.add.reduce(Q * Q, axis=1))  # np.linalg.norm(Q, axis=1), without its dispatch
        if not (norms.min() > 0 and norms.max() < np.inf):  # a NaN or an infinity in a row makes its norm so
            if not np.isfinite(Q).all():
                raise NonFiniteError("queries contain NaN or infinite values")
            if not (norms > 0).all():
                raise ZeroVectorError(f"query {int(np.argmin(norms))} has zero norm")
        np.divide(Q, norms[:, None], out=Q)  # Q is this call's own float64 copy
        return Q.astype(np.float32)

    def is_batch(self, query):
        """A 2-D array of the vectors' dimension is a batch of vectors (a (1, D) array
        too); any other 2-D array is one query's descriptor set."""
        return (isinstance(query, np.ndarray) and query.ndim == 2 and query.shape[1] == self.dim
                and query.dtype != object)


__all__ = ["MAX_BATCH", "MAX_EXPAND", "MAX_K", "MAX_RERANK", "MAX_VERIFY", "MODES", "PreparedQuery", "QueryEncoder",
           "StoredExtractor",
           "check_k", "check_request"]

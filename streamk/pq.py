"""Product quantisation (Jegou, Douze, Schmid, TPAMI 2011) of image vectors.

A D-dim vector is cut into M sub-vectors; each is replaced by the index (one
byte) of its nearest centroid among 256 learned by k-means in that sub-space.
Search uses asymmetric distances: the query stays exact, a (M, 256) table of
its inner products with every centroid is built once, and a code's score is M
table look-ups (``pq_kernels.adc_scores``).
"""

import io
import json

import numpy as np

from . import pq_kernels
from .checks import as_vectors
from .errors import ConfigError, NotFittedError

N_CENTROIDS = 256  # one byte per sub-quantiser


class ProductQuantizer:
    def __init__(self, M=16, seed=0, max_train=65536):
        if int(M) < 1:
            raise ConfigError(f"M must be >= 1, got {M}")
        self.M = int(M)
        self.seed = int(seed)
        self.max_train = int(max_train)
        self.codebooks_ = None  # (M, 256, D/M) float32

    @property
    def fitted(self):
        return self.codebooks_ is not None

    @property
    def dim(self):
        self._check_fitted()
        return self.M * self.codebooks_.shape[2]

    def _check_fitted(self):
        if not self.fitted:
            raise NotFittedError("ProductQuantizer is not trained: call fit() on enough vectors")

    def _split(self, V):
        V = as_vectors(V, dim=self.dim if self.fitted else None).astype(np.float32)
        return V.reshape(V.shape[0], self.M, -1)

    def fit(self, V):
        from sklearn.cluster import KMeans

        V = as_vectors(V, what="PQ training vectors")
        if V.shape[1] % self.M:
            raise ConfigError(f"vector dimension {V.shape[1]} is not a multiple of M={self.M}")
        if V.shape[0] < N_CENTROIDS:
            raise ConfigError(f"PQ training needs at least {N_CENTROIDS} vectors, got {V.shape[0]}")
        if V.shape[0] > self.max_train:
            V = V[np.random.default_rng(self.seed).choice(V.shape[0], self.max_train, replace=False)]
        sub = V.astype(np.float32).reshape(V.shape[0], self.M, -1)
        self.codebooks_ = np.stack([
            KMeans(N_CENTROIDS, n_init=1, max_iter=25, random_state=self.seed + m)
            .fit(sub[:, m]).cluster_centers_.astype(np.float32)
            for m in range(self.M)])
        return self

    def encode(self, V):
        """(N, M) uint8 codes."""
        self._check_fitted()
        sub = self._split(V)
        codes = np.empty(sub.shape[:2], dtype=np.uint8)
        for m in range(self.M):  # a loop over sub-quantisers; each step is one GEMM
            C = self.codebooks_[m]
            codes[:, m] = np.argmin((C * C).sum(axis=1)[None, :] - 2.0 * sub[:, m] @ C.T, axis=1)
        return codes

    def decode(self, codes):
        """Reconstructed vectors (N, D) float32."""
        self._check_fitted()
        codes = np.asarray(codes)
        return self.codebooks_[np.arange(self.M)[None, :], codes].reshape(codes.shape[0], -1)

    def tables(self, queries):
        """Inner-product look-up tables (Q, M, 256) float32."""
        self._check_fitted()
        sub = self._split(queries)
        return np.ascontiguousarray(np.einsum("qmd,mkd->qmk", sub, self.codebooks_, optimize=True))

    def scores(self, queries, codes):
        """Approximate inner products of each query with each code (Q, N)."""
        tables = self.tables(queries)
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        if tables.shape[0] == 1:
            return pq_kernels.adc_scores(codes, tables[0])[None, :]
        return pq_kernels.adc_scores_batch(codes, tables)

    # (de)serialisation: .npz bytes with a JSON header, no pickle
    def to_bytes(self):
        self._check_fitted()
        buf = io.BytesIO()
        meta = {"format": "streamk-pq", "version": 1, "M": self.M, "seed": self.seed, "max_train": self.max_train}
        np.savez(buf, __meta__=np.array(json.dumps(meta)), codebooks=self.codebooks_)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data):
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            meta = json.loads(str(npz["__meta__"]))
            pq = cls(meta["M"], meta["seed"], meta["max_train"])
            pq.codebooks_ = npz["codebooks"]
        return pq

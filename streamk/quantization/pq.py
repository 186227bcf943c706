"""Product quantisation (Jegou, Douze, Schmid, TPAMI 2011) of image vectors.

A D-dim vector is cut into M sub-vectors; each is replaced by the index (one
byte) of its nearest centroid among 256 learned by k-means in that sub-space.
Search uses asymmetric distances: the query stays exact, a (M, 256) table of
its inner products with every centroid is built once, and a code's score is M
table look-ups (``_pq_kernels.adc_scores``).
"""

import io
import json

import numpy as np

from . import _pq_kernels
from ._heap import merge_topk
from ..checks import as_vectors
from ..errors import ConfigError, DimensionError, NotFittedError

N_CENTROIDS = 256  # one byte per sub-quantiser
_controller = None


def blas_threads(n):
    """Context manager limiting the BLAS threads to n (threadpoolctl's controller is
    built once: building it scans the loaded libraries, ~10 ms)."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController
        _controller = ThreadpoolController()
    return _controller.limit(limits=n, user_api="blas")


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
        from threadpoolctl import threadpool_limits

        V = as_vectors(V, what="PQ training vectors")
        if V.shape[1] % self.M:
            raise ConfigError(f"vector dimension {V.shape[1]} is not a multiple of M={self.M}")
        if V.shape[0] < N_CENTROIDS:
            raise ConfigError(f"PQ training needs at least {N_CENTROIDS} vectors, got {V.shape[0]}")
        if V.shape[0] > self.max_train:
            V = V[np.random.default_rng(self.seed).choice(V.shape[0], self.max_train, replace=False)]
        sub = V.astype(np.float32).reshape(V.shape[0], self.M, -1)
        # One BLAS thread: k-means++ seeding makes 256 small GEMMs per sub-space, which a
        # multi-threaded BLAS runs 20x slower on a busy machine (the Lloyd iterations are
        # parallel over points with OpenMP anyway, one BLAS thread each).
        with threadpool_limits(1, user_api="blas"):
            self.codebooks_ = np.stack([
                KMeans(N_CENTROIDS, n_init=1, max_iter=25, random_state=self.seed + m)
                .fit(sub[:, m]).cluster_centers_.astype(np.float32)
                for m in range(self.M)])
        return self

    def encode(self, V, chunk=8192):
        """(N, M) uint8 codes: the nearest centroid of each sub-vector.

        Chunks of ``chunk`` rows: one GEMM per sub-quantiser and chunk, and no copy
        of the whole input (a 1M x 1024 float32 input is 4 GB).
        """
        self._check_fitted()
        if not isinstance(V, np.ndarray) or V.ndim != 2:
            V = as_vectors(V, dim=self.dim)
        elif V.shape[0] == 0 or V.shape[1] != self.dim:
            as_vectors(V[:1] if V.shape[0] else V, dim=self.dim)  # raises the named error
        d = self.codebooks_.shape[2]
        # nearest centroid = argmax of <x, c> - |c|^2 / 2 (the same order, ties included,
        # as argmin of |c|^2 - 2 <x, c>: scaling by 2 is exact in floating point)
        half_norms = 0.5 * np.einsum("mkd,mkd->mk", self.codebooks_, self.codebooks_)
        codes = np.empty((V.shape[0], self.M), dtype=np.uint8)
        # One BLAS thread: M small GEMMs (256 x D/M) per chunk, which two threads run
        # 10-35x slower than one on a busy machine (measured: 1,000 x M=64, 0.99 s vs 0.08 s)
        with blas_threads(1):
            self._encode_chunks(V, int(chunk), d, half_norms, codes)
        return codes

    def _encode_chunks(self, V, chunk, d, half_norms, codes):
        for lo in range(0, V.shape[0], chunk):
            X = V[lo:lo + chunk]
            if X.dtype != np.float32 or not X.flags.c_contiguous:
                X = np.ascontiguousarray(as_vectors(X) if X.dtype != np.float32 else X, dtype=np.float32)
            if not np.isfinite(X).all():
                as_vectors(X)  # raises NonFiniteError
            for m in range(self.M):  # each step is one GEMM
                G = X[:, m * d:(m + 1) * d] @ self.codebooks_[m].T
                G -= half_norms[m]
                codes[lo:lo + len(X), m] = np.argmax(G, axis=1)

    def decode(self, codes):
        """Reconstructed vectors (N, D) float32."""
        self._check_fitted()
        codes = np.asarray(codes)
        return self.codebooks_[np.arange(self.M)[None, :], codes].reshape(codes.shape[0], -1)

    def tables(self, queries):
        """Inner-product look-up tables (Q, M, 256) float32: entry (m, j) is
        sum_i q[m d + i] c_mj[i], summed in float32 in the order i = 0..d-1.

        One query at a time (``_pq_kernels.adc_tables``), so a query's table does not
        depend on the other queries of its batch: a GEMM over the batch sums in
        batch-dependent orders, and a one-ulp change reorders tied scores."""
        self._check_fitted()
        return self.tables_of_checked(np.ascontiguousarray(as_vectors(queries, dim=self.dim), dtype=np.float32))

    def tables_of_checked(self, Q):
        """tables() of finite float32 queries (nq, D) of the right dimension."""
        return _pq_kernels.adc_tables(self.codebooks_by_dim(), Q)

    def codebooks_by_dim(self):
        """The codebooks as (M, D/M, 256) float32, each sub-space's transposed (what the
        table kernels read), made once per set of codebooks."""
        cached = getattr(self, "_by_dim", None)
        if cached is None or cached[0] is not self.codebooks_:
            cached = (self.codebooks_, np.ascontiguousarray(self.codebooks_.transpose(0, 2, 1), dtype=np.float32))
            self._by_dim = cached
        return cached[1]

    def scores(self, queries, codes):
        """Approximate inner products of each query with each code (Q, N)."""
        tables = self.tables(queries)
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        if tables.shape[0] == 1:
            return _pq_kernels.adc_scores(codes, tables[0])[None, :]
        return _pq_kernels.adc_scores_batch(codes, tables)

    def search(self, queries, codes, k=10):
        """The k best codes of each query by ADC score: (scores (Q, k) float32, rows (Q, k) int64).

        Best first; equal scores by increasing row (the order of a stable sort of
        ``-scores(queries, codes)``, with the same float32 scores); k is clipped to N.
        The scan keeps the k best in a heap (no sort of N scores) and runs on the
        Numba threads (``numba.set_num_threads``), a batch of queries sharing each
        block of codes while it is in cache.
        """
        tables = self.tables(queries)
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        if codes.ndim != 2 or codes.shape[1] != self.M:
            raise DimensionError(f"codes: expected shape (N, {self.M}), got {codes.shape}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ConfigError(f"k must be an integer >= 1, got {k!r}")
        n = codes.shape[0]
        k = min(int(k), n)
        if k == 0:
            return np.zeros((tables.shape[0], 0), np.float32), np.zeros((tables.shape[0], 0), np.int64)
        import numba

        n_blocks = -(-n // _pq_kernels.BLOCK)
        n_chunks = max(1, min(numba.get_num_threads(), n_blocks))
        cand_s, cand_r = _pq_kernels.adc_topk_chunks(codes, tables, k, n_chunks)
        q = tables.shape[0]
        return merge_topk(cand_s.reshape(q, -1), cand_r.reshape(q, -1), k)

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

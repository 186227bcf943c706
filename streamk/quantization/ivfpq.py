"""IVF-ADC (Jegou, Douze, Schmid, TPAMI 2011): an inverted file of ``nlist`` lists
over product-quantised residuals, scored by inner product.

A vector x goes to the list of its nearest coarse centroid, l(x) = argmin_l
|x - c_l|^2 (spherical k-means on the training vectors, the centroids at one common
length: so also argmax_l <x, c_l>; :func:`spherical_kmeans`, :func:`common_length`),
and its residual x - c_l is
product-quantised (:class:`~streamk.quantization.pq.ProductQuantizer`, M bytes). Image vectors
are unit vectors ranked by inner product, and

    <q, c_l + r> = <q, c_l> + sum_m <q_m, r_m>,

so one (M, 256) table of <q_m, centroid> per query serves every list, plus one
number <q, c_l> per visited list (with the L2 distance of the paper the table
would depend on the list). A query visits the ``nprobe`` lists whose
centroids are nearest to it.

``nlist = 1`` (a single zero centroid) is plain PQ with flat ADC: exactly the
codes and scores of :class:`ProductQuantizer` on the vectors themselves, the
right choice below some 10^5 images.
"""

import io
import json
from typing import NamedTuple

import numba
import numpy as np

from ..checks import as_vectors
from ..errors import ConfigError, DimensionError, NotFittedError, TooFewImagesError
from . import _ivf_kernels
from .inverted_lists import PARALLEL_MIN
from .pq import N_CENTROIDS, ProductQuantizer

FORMAT = "streamk-ivfpq"
FORMAT_VERSION = 1
TRAIN_PER_LIST = 32  # training vectors per coarse centroid (at least)
# the 8-bit coarse step for at most this many queries at once (BLAS's GEMM beyond: bench/README.md section 7)
CHECKED_MAX_QUERIES = 8
CHECKED_MAX_SHARE = 8  # ... probing at most 1 / 8 of the lists (a filtered search probes all of them)
MIN_TRAIN_PER_LIST = 4
EMPTY_LIST_ROUNDS = 8  # at most, after the last k-means iteration (none is needed on most data)


class CoarseCopy(NamedTuple):
    """The 8-bit copy of an IVF codec's centroids and its error terms (``IVFPQ._coarse_8bit``)."""

    C8: np.ndarray  # (nlist, D) int8: c_l ~ scale C8_l
    scale: np.ndarray  # (D,) float32: a scale per dimension
    err: np.ndarray  # (nlist,) |c_l - scale C8_l|
    err_scaled: np.ndarray  # (nlist,) |(c_l - scale C8_l) / scale|
    norm8: np.ndarray  # (nlist,) |C8_l|
    gamma: float  # gamma_(D+1): the float32 sums' rounding
    half: np.ndarray  # (nlist,) float64 |c_l|^2 / 2
    blas: tuple  # (err, err_scaled, norm8, gamma) of BLAS's float32 GEMM in their place


def default_nprobe(nlist):
    """Lists visited by default: 1 of 256 (16 of 4,096), at least 1."""
    return max(1, -(-int(nlist) // 256))


def default_train_size(nlist):
    """Training vectors drawn by default: enough for the coarse k-means and for PQ."""
    return max(65536, TRAIN_PER_LIST * int(nlist))


def spherical_kmeans(V, nlist, n_iter, seed, chunk_bytes=32 << 20):
    """(nlist, D) float32 unit centroids of the rows of V (N, D) float32: spherical k-means
    (Dhillon and Modha, Machine Learning 2001), what faiss trains for an inner-product
    IVF index (``IndexIVF`` sets ``cp.spherical``).

    Lloyd's iterations on the sphere: each vector goes to the centroid of largest inner
    product; each centroid becomes the normalised sum of its vectors. Image vectors are
    unit vectors ranked by inner product; the plain (L2) k-means mean of unit vectors is
    shorter the more its cluster spreads, and argmin |x - c|^2 = argmax <x, c> - |c|^2/2
    then favours the short centroids of spread clusters, which grow by it (on
    bench/scale.py's 100k vectors, IVF1024: imbalance factor 3.75 against 2.70-2.84 over
    three seeds, faiss's 2.72-2.85; a query probing 4 / 16 / 64 lists scanned 1.3 / 1.4 /
    2.0 times more codes and found its nearest neighbour in them 0.79 / 0.95 / 0.997 of
    the time, against 0.83 / 0.94 / 0.98, as with faiss's lists). With unit
    centroids (or centroids of one common length: :func:`common_length`) that rule is
    the inner product itself, so encoding and probing are unchanged, and so are codecs
    trained before.

    Starts from ``nlist`` distinct training vectors drawn at random (``seed``; k-means++'s
    nlist sequential passes would cost more than all the iterations), stops after
    ``n_iter`` iterations or when no assignment changes. A list left empty takes the
    vector worst served by its centroid (lowest cosine), the worst first, so that every
    list starts the next iteration with a vector of its own (distinct vectors: copies of
    one image would leave all but one of their lists empty again)."""
    import scipy.sparse  # here: not on the path of a command that only searches

    n = V.shape[0]
    rng = np.random.default_rng(seed)
    norms = np.sqrt(np.einsum("nd,nd->n", V, V, dtype=np.float64))
    C = _unit_rows(V[rng.choice(n, nlist, replace=False)])
    step = max(1, chunk_bytes // (4 * nlist))  # rows whose similarities are held at once
    assign = None
    for _ in range(int(n_iter)):
        new, best = _nearest_by_inner_product(V, C, step)
        if assign is not None and np.array_equal(new, assign):
            break  # the centroids are those of this assignment already
        assign = new
        one_hot = scipy.sparse.csr_matrix((np.ones(n, np.float32), (assign, np.arange(n))), shape=(nlist, n))
        C = _unit_rows(np.asarray(one_hot @ V, dtype=np.float32))
        _fill_empty_lists(V, C, assign, best, norms)
    for _ in range(EMPTY_LIST_ROUNDS):  # the last centroids may have left a list empty: give it a vector
        assign, best = _nearest_by_inner_product(V, C, step)
        if not _fill_empty_lists(V, C, assign, best, norms):
            break
    return C


def common_length(V, U, chunk_bytes=32 << 20):
    """The unit centroids U (nlist, D) scaled to one common length rho, the one that
    minimises the residual energy sum_x |x - rho u(x)|^2 given the lists (u(x): the
    centroid of largest <x, u>): rho = mean_x <x, u(x)> (least squares). One length for
    all keeps argmin |x - c|^2 the inner-product rule of spherical k-means (even lists);
    the unit length left residuals of energy 1.105 on bench/scale.py's vectors against
    0.80 (plain k-means means: 0.78), and ADC recall at nprobe 16 / 64 0.900 / 0.935
    against 0.925 / 0.965. A rho that is not positive (no structure) keeps unit length."""
    _, best = _nearest_by_inner_product(V, U, max(1, chunk_bytes // (4 * U.shape[0])))
    rho = float(best.mean())
    return (U * np.float32(rho)).astype(np.float32) if rho > 0 else U


def _fill_empty_lists(V, C, assign, best, norms):
    """Centroids C of the lists ``assign`` leaves empty set (in place) to the distinct
    vectors worst served by their centroid (lowest cosine, ``best`` / ``norms``), the worst
    first; returns how many lists were empty. Never lowers the k-means objective (an
    empty list served no vector)."""
    empty = np.flatnonzero(np.bincount(assign, minlength=C.shape[0]) == 0)
    if len(empty):
        cosine = best / np.maximum(norms, np.finfo(np.float64).tiny)
        C[empty] = _unit_rows(_distinct_first(V, np.argsort(cosine, kind="stable"), len(empty)))
    return len(empty)


def _distinct_first(V, order, count):
    """The first ``count`` distinct rows of V taken in ``order`` (fewer if V has fewer): the
    vectors an empty list takes, never two equal ones (two equal centroids leave one list
    empty; an index may hold many copies of one image)."""
    m = count
    while True:
        _, first = np.unique(V[order[:m]], axis=0, return_index=True)
        if len(first) >= count or m >= len(order):
            return V[order[np.sort(first)[:count]]]
        m *= 4


def _unit_rows(A):
    """A (n, D) with each row scaled to unit norm (a zero row stays zero), float32."""
    A = np.asarray(A, np.float32)
    norms = np.sqrt(np.einsum("nd,nd->n", A, A, dtype=np.float64))
    return (A / np.maximum(norms, np.finfo(np.float32).tiny)[:, None]).astype(np.float32)


def _nearest_by_inner_product(V, C, step):
    """((N,) int64 argmax_l <x, c_l>, (N,) float64 that largest inner product) of the rows
    of V, ``step`` rows per GEMM."""
    assign = np.empty(V.shape[0], np.int64)
    best = np.empty(V.shape[0], np.float64)
    for lo in range(0, V.shape[0], step):
        G = V[lo:lo + step] @ C.T
        assign[lo:lo + step] = np.argmax(G, axis=1)
        best[lo:lo + step] = G[np.arange(G.shape[0]), assign[lo:lo + step]]
    return assign, best


class IVFPQ:
    """Coarse quantiser (nlist centroids) + product quantiser of the residuals.

    >>> codec = IVFPQ(nlist=1024, M=64).fit(V)
    >>> lists, codes = codec.encode(V)          # (N,) uint32, (N, M) uint8
    >>> probes, coarse = codec.probe(Q, nprobe=8)
    """

    def __init__(self, nlist=1, M=16, seed=0, nprobe=None, kmeans_iter=20):
        if isinstance(nlist, bool) or int(nlist) < 1:
            raise ConfigError(f"nlist must be an integer >= 1, got {nlist!r}")
        if isinstance(M, bool) or int(M) < 1:
            raise ConfigError(f"M must be an integer >= 1, got {M!r}")
        self.nlist = int(nlist)
        self.M = int(M)
        self.seed = int(seed)
        self.nprobe = default_nprobe(self.nlist) if nprobe is None else int(nprobe)
        if not 1 <= self.nprobe:
            raise ConfigError(f"nprobe must be >= 1, got {nprobe!r}")
        self.kmeans_iter = int(kmeans_iter)
        self.centroids_ = None  # (nlist, D) float32
        self.pq_ = None  # ProductQuantizer of the residuals

    # ------------------------------------------------------------ state
    @property
    def fitted(self):
        return self.centroids_ is not None and self.pq_ is not None and self.pq_.fitted

    def _check_fitted(self):
        if not self.fitted:
            raise NotFittedError("the IVF-PQ codec is not trained: call fit() on enough vectors")

    @property
    def dim(self):
        if self.centroids_ is None:
            raise NotFittedError("the IVF-PQ codec is not trained: call fit() on enough vectors")
        return self.centroids_.shape[1]

    @property
    def code_size(self):
        return self.M

    def min_train(self):
        """The fewest training vectors fit() accepts."""
        return max(N_CENTROIDS, MIN_TRAIN_PER_LIST * self.nlist if self.nlist > 1 else 0)

    def memory_bytes(self):
        """Bytes this codec holds: the centroids, the PQ codebooks, and the 8-bit copy of the
        centroids once a search built it (nlist x D bytes)."""
        n = self.centroids_.nbytes + self.pq_.codebooks_.nbytes if self.fitted else 0
        cache = getattr(self, "_coarse_8bit_cache", None)
        return n + (cache[1].C8.nbytes if cache is not None else 0)

    def describe(self):
        kind = "PQ (flat ADC)" if self.nlist == 1 else f"IVF{self.nlist} (nprobe {self.nprobe})"
        return f"{kind}, M={self.M} ({self.M} bytes per image)"

    # ------------------------------------------------------------ training
    def fit(self, V):
        """Learn the coarse centroids (spherical k-means, :func:`spherical_kmeans`, at one
        common length, :func:`common_length`) and the residual PQ from V (N, D)."""
        V = np.ascontiguousarray(as_vectors(V, what="IVF-PQ training vectors"), dtype=np.float32)
        n, d = V.shape
        if d % self.M:
            raise ConfigError(f"vector dimension {d} is not a multiple of M={self.M}")
        if n < self.min_train():
            raise TooFewImagesError(f"IVF{self.nlist}-PQ training needs at least {self.min_train()} "
                                    f"vectors, got {n}")
        if self.nlist == 1:
            centroids = np.zeros((1, d), np.float32)
        else:
            centroids = common_length(V, spherical_kmeans(V, self.nlist, self.kmeans_iter, self.seed))
        self.centroids_ = np.ascontiguousarray(centroids)
        self._half_norms_cache = None
        residuals = V - self.centroids_[self.assign(V)]
        self.pq_ = ProductQuantizer(M=self.M, seed=self.seed, max_train=max(n, 1)).fit(residuals)
        return self

    # ------------------------------------------------------------ encoding
    def _half_norms(self):
        if getattr(self, "_half_norms_cache", None) is None:
            c = self.centroids_.astype(np.float64)
            self._half_norms_cache = (0.5 * np.einsum("ld,ld->l", c, c)).astype(np.float32)
        return self._half_norms_cache

    def _as_float32(self, V, what):
        if isinstance(V, np.ndarray) and V.dtype == np.float32 and V.ndim == 2 and V.flags.c_contiguous:
            if V.shape[1] != self.dim:
                raise DimensionError(f"{what}: dimension {V.shape[1]}, expected {self.dim}")
            if not np.isfinite(V).all():
                as_vectors(V, what=what)  # raises NonFiniteError
            return V
        return np.ascontiguousarray(as_vectors(V, dim=self.dim, what=what), dtype=np.float32)

    def assign(self, V, chunk=16384):
        """(N,) uint32: the list of each vector, argmin_l |x - c_l|^2 = argmax_l <x, c_l> - |c_l|^2/2."""
        if self.centroids_ is None:
            raise NotFittedError("the IVF-PQ codec is not trained: call fit() on enough vectors")
        V = self._as_float32(V, "vectors")
        out = np.zeros(V.shape[0], np.uint32)
        if self.nlist == 1:
            return out
        half = self._half_norms()
        for lo in range(0, V.shape[0], chunk):
            G = V[lo:lo + chunk] @ self.centroids_.T
            G -= half
            out[lo:lo + chunk] = np.argmax(G, axis=1)
        return out

    def encode(self, V, chunk=16384):
        """(lists (N,) uint32, codes (N, M) uint8) of vectors V (N, D)."""
        self._check_fitted()
        V = self._as_float32(V, "vectors")
        lists = np.empty(V.shape[0], np.uint32)
        codes = np.empty((V.shape[0], self.M), np.uint8)
        for lo in range(0, V.shape[0], chunk):
            X = V[lo:lo + chunk]
            lists[lo:lo + chunk] = self.assign(X)
            R = X - self.centroids_[lists[lo:lo + chunk]] if self.nlist > 1 else X
            codes[lo:lo + chunk] = self.pq_.encode(R)
        return lists, codes

    def decode(self, lists, codes):
        """Reconstructed vectors c_l + PQ^-1(code), (N, D) float32."""
        self._check_fitted()
        return self.centroids_[np.asarray(lists, np.int64)] + self.pq_.decode(codes)

    # ------------------------------------------------------------ search
    def probe(self, Q, nprobe=None):
        """The lists each query visits: (probes (nq, P) int64, <q, c_l> (nq, P) float32),
        P = min(nprobe, nlist), nearest centroid first (ties by list number)."""
        self._check_fitted()
        return self._probe(self._as_float32(Q, "queries"), self._n_probe(nprobe))

    def _n_probe(self, nprobe):
        P = min(self.nprobe if nprobe is None else int(nprobe), self.nlist)
        if P < 1:
            raise ConfigError(f"nprobe must be >= 1, got {nprobe!r}")
        return P

    def _probe(self, Q, P, size=None):
        """probe() of checked float32 queries; with ``size`` (the lists' entries, (nlist,)
        int64), also the number of entries the probes hold (all queries).

        A few queries probing a few lists (an interactive search): inner products with an
        8-bit copy of the centroids (a quarter of the bytes: one query's coarse step reads
        every centroid, 16 MB at 4,096 x 1,024, and is memory-bound), then the lists that
        can be among the nearest summed exactly (:func:`_ivf_kernels.nearest_lists_checked`):
        the probes are those of the exact criteria. Batches of more than CHECKED_MAX_QUERIES
        take BLAS's float32 GEMM as the approximate products, then the same exact re-check: a
        query's probes do not depend on its batch. Long probe lists (a filtered search visits
        every list, in order): the GEMM's float32 criteria as they are (summing every list
        exactly would cost more than the scan)."""
        sizes = self._no_sizes if size is None else size
        if P * CHECKED_MAX_SHARE <= self.nlist:
            copy = self._coarse_8bit()
            err, err_scaled, norm8, gamma = copy.err, copy.err_scaled, copy.norm8, copy.gamma
            if Q.shape[0] <= CHECKED_MAX_QUERIES:
                Qs = Q * copy.scale
                A = np.empty((Q.shape[0], copy.C8.shape[0]), np.float32)
                _ivf_kernels.int8_inner_products(copy.C8, Qs, A)
            else:  # BLAS's float32 GEMM, within gamma_D |q| |c_l| (no 8-bit rounding: err 0)
                Qs, A = Q, Q @ self.centroids_.T
                err, err_scaled, norm8, gamma = copy.blas
            probes, coarse, entries = _ivf_kernels.nearest_lists_checked(A, Q, Qs, err, err_scaled, norm8, gamma,
                                                                          copy.half, self.centroids_, P, sizes)
        else:
            G = Q @ self.centroids_.T  # (nq, nlist) inner products: one GEMM by BLAS
            probes, coarse, entries = _ivf_kernels.nearest_lists(G, self._half_norms(), P, sizes)
        return (probes, coarse) if size is None else (probes, coarse, entries)

    def _coarse_8bit(self):
        """The :class:`CoarseCopy` of the current centroids, built once (the arguments of
        :func:`_ivf_kernels.nearest_lists_checked` after A, Q, Qs): c_l ~ s C8_l,
        s (D,) float32 a scale per dimension (its largest |c_lj| over 127 levels: the
        centroids' spread differs by dimension far more than by list), err_l = |c_l - s C8_l|,
        err_scaled_l = |(c_l - s C8_l) / s|, norm8_l = |C8_l| (float64, rounded up),
        gamma = gamma_(D+1) = (D + 1) u / (1 - (D + 1) u), u = 2^-24 (the float32 products
        and sums, and Q s), |c_l|^2 / 2 (float64), and the terms of BLAS's float32 GEMM in their
        place (err 0, |c_l|, gamma_D: Higham's bound for any order of the sums, FMA or not)."""
        cache = getattr(self, "_coarse_8bit_cache", None)
        if cache is None or cache[0] is not self.centroids_:
            C = self.centroids_.astype(np.float64)
            top = np.abs(C).max(axis=0)
            scale = np.where(top > 0, top / 127.0, 1.0).astype(np.float32)
            s64 = scale.astype(np.float64)
            C8 = np.clip(np.rint(C / s64), -127, 127).astype(np.int8)
            E = C - C8 * s64
            up = 1.0 + 1e-6
            d1 = C.shape[1] + 1
            u = 2.0 ** -24
            d = C.shape[1]
            zeros = np.zeros(C.shape[0])
            blas = (zeros, zeros, np.linalg.norm(C, axis=1) * up, d * u / (1.0 - d * u) * up)
            terms = CoarseCopy(np.ascontiguousarray(C8), scale, np.linalg.norm(E, axis=1) * up,
                               np.linalg.norm(E / s64, axis=1) * up, np.linalg.norm(C8.astype(np.float64), axis=1) * up,
                               d1 * u / (1.0 - d1 * u) * up, 0.5 * np.einsum("ld,ld->l", C, C), blas)
            cache = (self.centroids_, terms)
            self._coarse_8bit_cache = cache
        return cache[1]

    @property
    def _no_sizes(self):
        if getattr(self, "_zero_sizes", None) is None:
            self._zero_sizes = np.zeros(self.nlist, np.int64)
        return self._zero_sizes

    def tables(self, Q):
        """(nq, M, 256) float32 look-up tables of <q_m, residual centroid>."""
        self._check_fitted()
        return self.pq_.tables(self._as_float32(Q, "queries"))

    def search(self, lists, Q, k, nprobe=None, dead=None, allow=None):
        """(scores, rows) (nq, k) of the k best entries of ``lists`` (InvertedLists
        of this codec's codes) for queries Q, by ADC over the ``nprobe`` nearest lists.

        allow: a row bitmap (:func:`~streamk.quantization.inverted_lists.row_bitmap`) of the
        rows a filter allows: only those are scored, and a query visits more lists than
        ``nprobe``, nearest first, until k allowed entries were among them (all lists, if
        fewer than k are allowed): a filtered search returns k results whenever k match."""
        self._check_fitted()
        Q = self._as_float32(Q, "queries")
        P = self._n_probe(nprobe)
        if dead is None:
            dead = np.zeros(int(lists.rows.max(initial=-1)) + 1, np.uint8)
        if allow is not None:
            probes, coarse = self._probe(Q, self.nlist)  # every list, nearest first
            return lists.search(probes, coarse, self.pq_.tables_of_checked(Q), dead, k, allow=allow, min_probe=P)
        probes, coarse, entries = self._probe(Q, P, lists.size)
        deferred = getattr(lists, "deferred", None)
        if deferred is not None and deferred[probes].any():
            # probed lists not read yet (a reader's first searches) come in first, as
            # lists.search would bring them in: then the one-call kernel below applies
            lists.bring_in(probes, dead)
            entries = int(lists.size[probes].sum())
        if entries < PARALLEL_MIN or numba.get_num_threads() == 1:
            # what lists.search does on one thread, its tables built and its results sorted
            # in the same kernel (a query's table, probes and scan in two calls, not six)
            return _ivf_kernels.ivf_topk_sorted(lists.codes, lists.rows, lists.start, lists.size, dead, probes,
                                                coarse, self.pq_.codebooks_by_dim(), Q, k)
        return lists.search(probes, coarse, self.pq_.tables_of_checked(Q), dead, k)

    def lists_of(self, V):
        """In-memory InvertedLists of vectors V (N, D), rows 0..N-1."""
        from .inverted_lists import NO_LIST, InvertedLists

        lists, codes = self.encode(V)
        rows = np.arange(len(lists), dtype=np.int64)
        return InvertedLists.build(self.nlist, self.M, lambda: iter([(lists, codes, rows)]),
                                   np.zeros(len(lists), np.uint8), NO_LIST)

    # ------------------------------------------------------------ (de)serialisation
    def to_bytes(self):
        """.npz bytes with a JSON header: no pickle."""
        self._check_fitted()
        meta = {"format": FORMAT, "version": FORMAT_VERSION, "nlist": self.nlist, "M": self.M,
                "seed": self.seed, "nprobe": self.nprobe, "kmeans_iter": self.kmeans_iter}
        buf = io.BytesIO()
        np.savez(buf, __meta__=np.array(json.dumps(meta)), centroids=self.centroids_,
                 codebooks=self.pq_.codebooks_)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data):
        with np.load(io.BytesIO(bytes(data)), allow_pickle=False) as npz:
            meta = json.loads(str(npz["__meta__"]))
            if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
                raise ConfigError(f"not an IVF-PQ codec of version {FORMAT_VERSION}: {meta!r}")
            codec = cls(meta["nlist"], meta["M"], meta["seed"], meta["nprobe"], meta["kmeans_iter"])
            codec.centroids_ = np.ascontiguousarray(npz["centroids"], dtype=np.float32)
            codec.pq_ = ProductQuantizer(meta["M"], meta["seed"])
            codec.pq_.codebooks_ = np.ascontiguousarray(npz["codebooks"], dtype=np.float32)
        return codec

    @classmethod
    def from_pq(cls, pq):
        """The nlist = 1 codec of a trained ProductQuantizer (flat ADC)."""
        codec = cls(1, pq.M, pq.seed)
        codec.centroids_ = np.zeros((1, pq.dim), np.float32)
        codec.pq_ = pq
        return codec

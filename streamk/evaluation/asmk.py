"""ASMK and ASMK*: the multi-vector match kernel baseline (Tolias, Avrithis, Jégou,
"To aggregate or not to aggregate: selective match kernels for image search", ICCV 2013).

streamk's own pipeline keeps one vector per image; ASMK keeps one vector per
(image, visual word) and compares images through an inverted file. Both run on
the same descriptors (RootSIFT of the same features) so that a user can weigh
quality against memory and query time.

The kernel, as in the paper: with a codebook C and X_c the descriptors of X
assigned to word c,

    K(X, Y) = gamma(X) gamma(Y) sum_c w_c sigma_alpha(V^(X_c) . V^(Y_c))

- V(X_c) = sum_{x in X_c} (x - c), the aggregated residual, and V^ = V / ||V||
  (aggregation: a bursty group of similar descriptors counts once);
- sigma_alpha(u) = sign(u) |u|^alpha if u > tau, else 0 (selectivity); the
  paper's alpha = 3, tau = 0;
- ASMK* binarises: b(X_c) = sign(V(X_c)) componentwise, packed into bits, and
  u = 1 - 2 h(b_X, b_Y) / d (h the Hamming distance), as in the authors' code;
- w_c = idf_c^2 with idf_c = log(N / N_c), N_c the database images that have
  word c (idf on both sides, as BOW with tf-idf); gamma(X) = (sum_c w_c
  sigma(1))^(-1/2) = (sum_{c in X} w_c)^(-1/2) makes K(X, X) = 1. Query words
  that no database image has (N_c = 0) count with N_c = 1 in gamma: the ranking
  does not depend on gamma(query);
- multiple assignment (the paper's MA) on the query side only: each query
  descriptor goes to its m nearest words (m = 5 in the paper), the database
  keeps one word per descriptor.

Choices of streamk, not the paper's: descriptors are RootSIFT then rotated by a
PCA learned on the learning set (d x d, nothing dropped). The rotation leaves
ASMK's real-valued kernel unchanged (residuals, norms and inner products are
rotation invariant; tested) and puts ASMK*'s sign bits on decorrelated
components. The codebook is scikit-learn k-means (random initial centroids, as
faiss's, with which the authors' code trains) on a subsample of the learning
descriptors (``max_fit_descriptors``) with ``max_iter`` iterations: the paper's
65k words are for 5k-image collections (about 250 descriptors per word), and
:func:`scaled_vocabulary_size` keeps that ratio for smaller ones.

The maintained ``asmk`` package (PyPI 0.1.1, Jenicek & Tolias) was not used: it
is published as a source archive only, builds a Cython extension at install (a
compiler is needed; streamk installs from wheels) and saves its state with
pickle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import _asmk_kernels
from ..checks import as_descriptor_set
from ..encoding import rootsift, subsample_rows
from ..errors import ConfigError, DimensionError, NotFittedError

PAPER_WORDS = 65_536
# Oxford5k: 5,063 images of about 3,300 Hessian-affine features each, 65k words
PAPER_DESCRIPTORS_PER_WORD = 250


def scaled_vocabulary_size(n_descriptors, descriptors_per_word=PAPER_DESCRIPTORS_PER_WORD):
    """The power of two closest (in log scale) to n_descriptors / descriptors_per_word, at least 16."""
    if n_descriptors < 1:
        raise ConfigError("no learning descriptors")
    return int(max(16, 2 ** round(math.log2(max(1.0, n_descriptors / descriptors_per_word)))))


def _nearest_words(X, centroids, m):
    """(n, m) indices of the m nearest centroids of each row (squared L2 by BLAS), nearest first."""
    d2 = (centroids * centroids).sum(axis=1)[None, :] - 2.0 * (X @ centroids.T)
    if m == 1:
        return np.argmin(d2, axis=1)[:, None].astype(np.int64)
    part = np.argpartition(d2, m - 1, axis=1)[:, :m]
    order = np.argsort(np.take_along_axis(d2, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1).astype(np.int64)


@dataclass
class AggregatedSet:
    """One image as ASMK sees it: its distinct words and their L2-normalised aggregated residuals."""

    words: np.ndarray    # (u,) int64, increasing
    vectors: np.ndarray  # (u, d) float32, unit rows (a zero residual sum stays zero)

    def __len__(self):
        return len(self.words)


def aggregate_residuals(X, assignment, centroids):
    """AggregatedSet of descriptors X (n, d) with word ids ``assignment`` (n, m): each
    descriptor adds its residual to each of its m words; sums are L2-normalised."""
    n, m = assignment.shape
    words = assignment.ravel()
    rows = np.repeat(np.arange(n), m)
    order = np.argsort(words, kind="stable")
    words, rows = words[order], rows[order]
    unique, starts = np.unique(words, return_index=True)
    residuals = X[rows] - centroids[words]
    V = np.add.reduceat(residuals, starts, axis=0).astype(np.float32)
    norms = np.linalg.norm(V, axis=1, keepdims=True)
    np.divide(V, norms, out=V, where=norms > 0)
    return AggregatedSet(unique.astype(np.int64), np.ascontiguousarray(V))


def pack_signs(V):
    """(u, d) -> (u, ceil(d / 64)) uint64: bit t set where V[:, t] > 0; padding bits are 0."""
    bits = np.packbits(V > 0, axis=1, bitorder="little")
    pad = (-bits.shape[1]) % 8
    if pad:
        bits = np.pad(bits, ((0, 0), (0, pad)))
    return np.ascontiguousarray(bits).view(np.uint64)


class ASMKCodebook:
    """RootSIFT -> PCA rotation -> nearest visual words, learned on a learning set."""

    def __init__(self, n_words=None, seed=0, max_fit_descriptors=200_000, max_iter=20):
        if n_words is not None and int(n_words) < 2:
            raise ConfigError(f"n_words must be at least 2, got {n_words}")
        if int(max_iter) < 1:
            raise ConfigError(f"max_iter must be >= 1, got {max_iter}")
        self.n_words = None if n_words is None else int(n_words)
        self.seed = int(seed)
        self.max_fit_descriptors = max_fit_descriptors
        self.max_iter = int(max_iter)
        self.mean_ = self.rotation_ = self.centroids_ = None

    @property
    def dim(self):
        return None if self.centroids_ is None else self.centroids_.shape[1]

    def fit(self, descriptor_sets, verbose=False):
        """Learn the rotation and the words on a list of (n_i, d) SIFT arrays."""
        from sklearn.cluster import KMeans  # imported late: sklearn is slow to import

        sets = [rootsift(as_descriptor_set(S, what=f"learning set {i}")) for i, S in enumerate(descriptor_sets)]
        if not sets:
            raise ConfigError("ASMK needs at least one learning descriptor set")
        if len({S.shape[1] for S in sets}) != 1:
            raise DimensionError("learning descriptor sets of different dimensions")
        X = np.concatenate(sets)
        n_words = self.n_words or scaled_vocabulary_size(len(X))
        if len(X) < n_words:
            raise ConfigError(f"need at least {n_words} learning descriptors for {n_words} words, got {len(X)}")
        X = subsample_rows(X, self.max_fit_descriptors, self.seed).astype(np.float64)
        self.mean_ = X.mean(axis=0)
        _, eigvecs = np.linalg.eigh(np.cov(X - self.mean_, rowvar=False))
        self.rotation_ = np.ascontiguousarray(eigvecs[:, ::-1], dtype=np.float32)  # largest variance first
        Xr = ((X - self.mean_) @ self.rotation_).astype(np.float32)
        # random initial centroids and a few Lloyd iterations, as faiss's k-means does (the authors'
        # asmk package trains its codebook with faiss): k-means++ seeding of thousands of words is
        # sequential and costs more than the iterations
        km = KMeans(n_clusters=n_words, init="random", n_init=1, max_iter=self.max_iter, random_state=self.seed,
                    verbose=1 if verbose else 0)
        self.centroids_ = np.ascontiguousarray(km.fit(Xr).cluster_centers_, dtype=np.float32)
        self.n_words = n_words
        return self

    def _check_fitted(self):
        if self.centroids_ is None:
            raise NotFittedError("ASMKCodebook is not fitted: call fit() first")

    def transform(self, sift):
        """(n, d) SIFT -> rotated RootSIFT, float32."""
        self._check_fitted()
        X = rootsift(as_descriptor_set(sift, dim=self.dim, what="SIFT descriptors"))
        return ((X - self.mean_.astype(np.float32)) @ self.rotation_).astype(np.float32)

    def aggregate(self, sift, multiple_assignment=1):
        """AggregatedSet of one image's SIFT descriptors (each to its ``multiple_assignment`` nearest words)."""
        self._check_fitted()
        m = int(multiple_assignment)
        if not 1 <= m <= self.n_words:
            raise ConfigError(f"multiple_assignment must be in [1, {self.n_words}], got {multiple_assignment}")
        X = self.transform(sift)
        return aggregate_residuals(X, _nearest_words(X, self.centroids_, m), self.centroids_)


class ASMKIndex:
    """An inverted file of aggregated residuals (ASMK) or of their sign codes (ASMK*).

    Built once from the database's :class:`AggregatedSet` (one per image, in
    database order); :meth:`scores` gives K(query, image) for every image.
    """

    def __init__(self, codebook, database, binary=False, alpha=3.0, tau=0.0, idf=True):
        codebook._check_fitted()
        if not database:
            raise ConfigError("ASMKIndex needs at least one database image")
        if not (math.isfinite(alpha) and alpha > 0) or not math.isfinite(tau) or not -1.0 <= tau < 1.0:
            raise ConfigError(f"need alpha > 0 and -1 <= tau < 1, got alpha={alpha}, tau={tau}")
        self.codebook, self.binary, self.alpha, self.tau = codebook, bool(binary), float(alpha), float(tau)
        self.n_images = len(database)
        n_words = codebook.n_words
        words = np.concatenate([a.words for a in database])
        images = np.repeat(np.arange(self.n_images, dtype=np.int32), [len(a) for a in database])
        vectors = np.concatenate([a.vectors for a in database])
        order = np.argsort(words, kind="stable")
        words = words[order]
        self.entry_image = np.ascontiguousarray(images[order])
        counts = np.bincount(words, minlength=n_words)  # images per word: one entry per (image, word)
        self.offsets = np.zeros(n_words + 1, dtype=np.int64)
        np.cumsum(counts, out=self.offsets[1:])
        if self.binary:
            self.n_bits = vectors.shape[1]
            self.entries = pack_signs(vectors[order])
        else:
            self.entries = np.ascontiguousarray(vectors[order], dtype=np.float32)
        # w_c = idf_c^2; words absent from the database count as seen once (query normalisation only)
        self.word_weight = (np.log(self.n_images / np.maximum(counts, 1)) ** 2 if idf
                            else np.ones(n_words)).astype(np.float64)
        self.image_norm = 1.0 / np.sqrt(np.maximum(
            np.bincount(self.entry_image, weights=self.word_weight[words], minlength=self.n_images), 1e-300))

    @property
    def n_entries(self):
        return len(self.entry_image)

    @property
    def nbytes(self):
        """Memory of what search reads: entries, their image ids, word offsets, idf, image norms."""
        return sum(a.nbytes for a in (self.entries, self.entry_image, self.offsets, self.word_weight,
                                      self.image_norm))

    def _query(self, query):
        if self.binary:
            return pack_signs(query.vectors)
        return np.ascontiguousarray(query.vectors, dtype=np.float32)

    def scores(self, query):
        """K(query, image) for every database image (float64, shape (n_images,)); ``query`` is an AggregatedSet."""
        if not isinstance(query, AggregatedSet):
            raise ConfigError("scores() takes an AggregatedSet (ASMKCodebook.aggregate)")
        if query.vectors.shape[1] != self.codebook.dim:
            raise DimensionError(f"query residuals have dimension {query.vectors.shape[1]}, "
                                 f"expected {self.codebook.dim}")
        scores = np.zeros(self.n_images, dtype=np.float64)
        q = self._query(query)
        words = np.ascontiguousarray(query.words, dtype=np.int64)
        if self.binary:
            _asmk_kernels.asmk_binary_scores(words, q, float(self.n_bits), self.word_weight, self.offsets,
                                            self.entry_image, self.entries, self.image_norm, self.alpha,
                                            self.tau, scores)
        else:
            _asmk_kernels.asmk_scores(words, q, self.word_weight, self.offsets, self.entry_image, self.entries,
                                     self.image_norm, self.alpha, self.tau, scores)
        query_weight = self.word_weight[words].sum()
        return scores / math.sqrt(query_weight) if query_weight > 0 else scores

    def ranks(self, query):
        """Database indices by decreasing K(query, image)."""
        return np.argsort(-self.scores(query), kind="stable")

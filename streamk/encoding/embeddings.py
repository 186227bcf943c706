"""Per-descriptor embeddings phi: R^d -> R^D (section "Embedding functions").

Each embedding is fitted once on a learning set of descriptors (``fit``), then
maps a descriptor set X (n x d) to either a dense matrix Phi (n x D, rows are
embedded descriptors) or, for hard-assigned embeddings, a ``BlockEmbedding``
(assignment + one short vector per descriptor) so that the n x D matrix is
never formed.  ``embed`` returns whichever is natural; ``transform`` always
returns the dense matrix.
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from . import _kernels
from ..checks import as_descriptor_set
from ..errors import ConfigError, NotFittedError
from .fit_cost import EIGH_FLOPS_PER_N3, KMEANS_ITERATIONS, FitCost, FitProgress


def rootsift(sift):
    """RootSIFT (Arandjelovic & Zisserman 2012): L1-normalise, then square-root.

    Rows summing to zero stay zero.  Returns float32.
    """
    X = np.asarray(sift, dtype=np.float32)
    if X.ndim != 2:
        X = as_descriptor_set(X, what="SIFT descriptors")  # raises the right error
    l1 = np.abs(X).sum(axis=1, keepdims=True)
    l1[l1 == 0] = 1.0
    return (np.sign(X) * np.sqrt(np.abs(X) / l1)).astype(np.float32)


@dataclass
class BlockEmbedding:
    """A hard-assigned (block-sparse) embedded descriptor set.

    Descriptor i is non-zero only in block ``assignment[i]`` of the D-dim
    embedding, where it equals ``values[i]`` (block_dim entries); D = n_blocks
    * block_dim.  The Gram matrix is block-diagonal: only descriptors sharing
    a block interact.
    """

    assignment: np.ndarray  # (n,) int64
    values: np.ndarray  # (n, block_dim) float32
    n_blocks: int

    @property
    def n(self):
        return self.values.shape[0]

    @property
    def block_dim(self):
        return self.values.shape[1]

    @property
    def dim(self):
        return self.n_blocks * self.block_dim

    @cached_property
    def grouped(self):
        """(order, values sorted by block, offsets): block b = rows offsets[b]:offsets[b+1]."""
        order = np.argsort(self.assignment, kind="stable")
        counts = np.bincount(self.assignment, minlength=self.n_blocks)
        offsets = np.zeros(self.n_blocks + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return order, np.ascontiguousarray(self.values[order]), offsets

    def to_dense(self):
        """The n x D matrix Phi (for tests and small sets)."""
        Phi = np.zeros((self.n, self.n_blocks, self.block_dim), dtype=self.values.dtype)
        Phi[np.arange(self.n), self.assignment] = self.values
        return Phi.reshape(self.n, self.dim)


def subsample_rows(X, max_rows, seed):
    if max_rows is None or X.shape[0] <= max_rows:
        return X
    rng = np.random.default_rng(seed)
    return X[np.sort(rng.choice(X.shape[0], max_rows, replace=False))]


def _kmeans(X, k, seed):
    from sklearn.cluster import KMeans  # imported late: sklearn is slow to import

    if X.shape[0] < k:
        raise ConfigError(f"need at least k={k} learning descriptors, got {X.shape[0]}")
    km = KMeans(n_clusters=k, n_init=1, max_iter=100, random_state=seed)
    return km.fit(X).cluster_centers_.astype(np.float32)


def _nearest(X, C):
    """Index of the nearest centroid of each row (squared L2, via BLAS)."""
    d2 = (C * C).sum(axis=1)[None, :] - 2.0 * (X @ C.T)
    return np.argmin(d2, axis=1).astype(np.int64)


class Embedding:
    """Base class: the learned state, its checks and (de)serialisation."""

    name = None
    block_sparse = False
    # names of learned arrays, saved with the encoder; the first is (k, d)
    _arrays = ()

    def __init__(self, k, seed=0, max_fit_descriptors=200_000):
        if int(k) < 1:
            raise ConfigError(f"k must be a positive integer, got {k}")
        self.k = int(k)
        self.seed = int(seed)
        self.max_fit_descriptors = max_fit_descriptors
        self.d_ = None

    # learned state ------------------------------------------------------
    def params(self):
        return {"k": self.k, "seed": self.seed, "max_fit_descriptors": self.max_fit_descriptors}

    def state(self):
        """(JSON-able parameters, dict of learned arrays)."""
        self._check_fitted()
        return self.params(), {name: getattr(self, name) for name in self._arrays}

    @classmethod
    def from_state(cls, params, arrays):
        emb = cls(**params)
        for name in cls._arrays:
            setattr(emb, name, np.asarray(arrays[name]))
        emb.d_ = int(arrays[cls._arrays[0]].shape[1])
        return emb

    @property
    def fitted(self):
        return self.d_ is not None

    def _check_fitted(self):
        if not self.fitted:
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit() on a learning set first")

    def _check_input(self, X):
        self._check_fitted()
        return as_descriptor_set(X, dim=self.d_)

    def _fit_input(self, X):
        X = as_descriptor_set(X, what="learning set")
        return subsample_rows(X, self.max_fit_descriptors, self.seed)

    # cost ---------------------------------------------------------------
    def _fit_rows(self, n_descriptors):
        """Rows fit() learns on, of ``n_descriptors`` given (it subsamples)."""
        n = int(n_descriptors)
        return n if self.max_fit_descriptors is None else min(n, int(self.max_fit_descriptors))

    def stored_arrays(self, d=128):
        """[(name, number of entries, bytes per entry)] of the learned arrays, from the shapes."""
        return [("centroids_", self.k * d, 4)]

    def output_dim(self, d=128):
        """D for descriptors of dimension d, from the shapes (no fit needed)."""
        raise NotImplementedError

    def embed_flops(self, n, d=128):
        """Flops of embedding n descriptors (the RN learning images' share of a fit)."""
        return 2.0 * n * self.k * d

    def fit_cost(self, n_descriptors, d=128):
        """:class:`~streamk.encoding.fit_cost.FitCost` of ``fit`` on ``n_descriptors`` of
        dimension ``d``, from the shapes: k-means on the subsample (see that module)."""
        n = self._fit_rows(n_descriptors)
        return FitCost(what=f"{self.name} k={self.k} on {int(n_descriptors):,} descriptors (d={d})",
                       kmeans_flops=2.0 * n * self.k * d * KMEANS_ITERATIONS)

    def _progress(self, progress, verbose, n_descriptors, d):
        return progress if progress is not None else FitProgress(self.fit_cost(n_descriptors, d), verbose)

    # mapping ------------------------------------------------------------
    def embed(self, X):
        """Dense (n, D) float32 array, or a BlockEmbedding for hard assignment."""
        return self.transform(X)

    def transform(self, X):
        raise NotImplementedError

    @property
    def dim(self):
        raise NotImplementedError


class TriangulationEmbedding(Embedding):
    """Triangulation embedding (Jegou & Zisserman, CVPR 2014).

    r_j(x) = (x - c_j)/||x - c_j|| for the k anchors, concatenated (k d);
    centred by the learned mean; PCA-whitened with eigenvalues below the
    ``clamp_quantile`` quantile raised to it (the smallest ones are noise and
    would be blown up); the first d whitened components dropped, as in the
    authors' code, so D = (k - 1) d; each embedded descriptor L2-normalised.
    """

    name = "temb"
    _arrays = ("centroids_", "mean_", "projection_", "eigenvalues_")

    def __init__(self, k, seed=0, max_fit_descriptors=200_000, max_whiten_descriptors=100_000,
                 clamp_quantile=0.1):
        super().__init__(k, seed, max_fit_descriptors)
        if not 0.0 <= float(clamp_quantile) < 1.0:
            raise ConfigError(f"clamp_quantile must be in [0, 1), got {clamp_quantile}")
        self.max_whiten_descriptors = max_whiten_descriptors
        self.clamp_quantile = float(clamp_quantile)

    def params(self):
        return {**super().params(), "max_whiten_descriptors": self.max_whiten_descriptors,
                "clamp_quantile": self.clamp_quantile}

    @property
    def dim(self):
        self._check_fitted()
        return self.projection_.shape[1]

    def output_dim(self, d=128):
        return (self.k - 1) * d

    def stored_arrays(self, d=128):
        kd = self.k * d
        return [("centroids_", self.k * d, 4), ("mean_", kd, 4), ("eigenvalues_", kd, 4),
                ("projection_", kd * (kd - d), 4)]

    def embed_flops(self, n, d=128):
        return 2.0 * n * self.k * d * self.output_dim(d)  # R (n x kd) @ projection (kd x D)

    def fit_cost(self, n_descriptors, d=128):
        """k-means, then the whitening: ``2 n_w (k d)^2`` flops of covariance on the
        ``n_w`` rows it subsamples, and an eigendecomposition of order ``k d``."""
        n_w = self._fit_rows(n_descriptors)
        if self.max_whiten_descriptors is not None:
            n_w = min(n_w, int(self.max_whiten_descriptors))
        kd = self.k * d
        base = super().fit_cost(n_descriptors, d)
        return FitCost(what=f"T-emb k={self.k} on {int(n_descriptors):,} descriptors (d={d})",
                       kmeans_flops=base.kmeans_flops, covariance_flops=2.0 * n_w * kd * kd, eigh_order=kd)

    def fit(self, X, verbose=False, progress=None):
        """Learn the anchors and the whitening. ``progress``: a
        :class:`~streamk.encoding.fit_cost.FitProgress` to report to (None: one of this
        fit's own, shown when ``verbose`` or, with verbose None, when the fit is long)."""
        X = self._fit_input(X)
        d = X.shape[1]
        if self.k < 2:
            raise ConfigError("T-embedding needs k >= 2 (D = (k-1) d)")
        own = progress is None
        progress = self._progress(progress, verbose, X.shape[0], d)
        progress.stage("k-means")
        self.centroids_ = _kmeans(X, self.k, self.seed)
        progress.advance(super().fit_cost(X.shape[0], d).kmeans_flops)
        Xw = subsample_rows(X, self.max_whiten_descriptors, self.seed + 1)
        kd = self.k * d
        # Mean and covariance accumulated by chunks: R never exists whole.
        mean = np.zeros(kd)
        cov = np.zeros((kd, kd))
        chunk = max(1, 2_000_000 // kd)
        progress.stage(f"whitening covariance {kd:,} x {kd:,}")
        for s in range(0, Xw.shape[0], chunk):
            R = _kernels.triangulation_residuals(Xw[s:s + chunk], self.centroids_).astype(np.float64)
            mean += R.sum(axis=0)
            cov += R.T @ R
            progress.advance(2.0 * R.shape[0] * kd * kd)
        mean /= Xw.shape[0]
        cov = cov / Xw.shape[0] - np.outer(mean, mean)
        progress.stage(f"eigendecomposition {kd:,} x {kd:,}")
        eigval, eigvec = np.linalg.eigh(cov)
        progress.advance(EIGH_FLOPS_PER_N3 * float(kd) ** 3)
        eigval, eigvec = eigval[::-1], eigvec[:, ::-1]  # decreasing variance
        # With fewer learning descriptors than k d the tail is ~0: keep a relative
        # floor so that whitening never amplifies pure noise by more than 1e3.
        floor = max(np.quantile(eigval, self.clamp_quantile), eigval[0] * 1e-6, 1e-30)
        eigval = np.maximum(eigval, floor)
        keep = slice(d, kd)  # drop the first d whitened components
        self.mean_ = mean.astype(np.float32)
        self.eigenvalues_ = eigval.astype(np.float32)
        self.projection_ = np.ascontiguousarray(
            (eigvec[:, keep] / np.sqrt(eigval[keep])[None, :]).astype(np.float32))
        self.d_ = d
        if own:
            progress.finish()
        return self

    def whiten(self, X):
        """Centred, whitened, truncated embedding before the final L2 (n, D)."""
        X = self._check_input(X)
        R = _kernels.triangulation_residuals(X, self.centroids_)
        Phi = R @ self.projection_  # the n x kd x D projection dominates T-emb
        Phi -= self._projected_mean()
        return Phi

    def _projected_mean(self):
        """mean_ @ projection_ (D,), computed once for the learned arrays (1 ms a photo)."""
        cached = self.__dict__.get("_projected_mean_cache")
        if cached is None or cached[0] is not self.mean_ or cached[1] is not self.projection_:
            cached = self._projected_mean_cache = (self.mean_, self.projection_, self.mean_ @ self.projection_)
        return cached[2]

    def transform(self, X):
        Phi = self.whiten(X)
        _kernels.l2_normalize_rows(Phi)
        return Phi


class _HardAssigned(Embedding):
    """Embeddings with a hard assignment: block-sparse by construction."""

    block_sparse = True

    def embed(self, X):
        X = self._check_input(X)
        assignment = self._assign(X)
        return BlockEmbedding(assignment, self._block_values(X, assignment), self.k)

    def transform(self, X):
        return self.embed(X).to_dense()


class VLAD(_HardAssigned):
    """VLAD (Jegou et al. 2010): block j holds x - c_j for descriptors nearest c_j."""

    name = "vlad"
    _arrays = ("centroids_",)

    def fit(self, X, verbose=False, progress=None):
        X = self._fit_input(X)
        own = progress is None
        progress = self._progress(progress, verbose, X.shape[0], X.shape[1])
        progress.stage("k-means")
        self.centroids_ = _kmeans(X, self.k, self.seed)
        progress.advance(Embedding.fit_cost(self, X.shape[0], X.shape[1]).kmeans_flops)
        self.d_ = X.shape[1]
        if own:
            progress.finish()
        return self

    @property
    def dim(self):
        self._check_fitted()
        return self.k * self.d_

    def output_dim(self, d=128):
        return self.k * d

    def _assign(self, X):
        return _nearest(X, self.centroids_)

    def _block_values(self, X, assignment):
        return np.ascontiguousarray(X - self.centroids_[assignment], dtype=np.float32)


class BagOfWords(VLAD):
    """Bag of visual words: phi(x) is the indicator of the nearest centroid (D = k)."""

    name = "bow"

    @property
    def dim(self):
        self._check_fitted()
        return self.k

    def output_dim(self, d=128):
        return self.k

    def _block_values(self, X, assignment):
        return np.ones((X.shape[0], 1), dtype=np.float32)


class FisherVector(Embedding):
    """Fisher vector (Perronnin et al. 2010; Jegou et al. TPAMI 2012) of a
    diagonal-covariance GMM, built the way the paper's FV references build it.

    1. **PCA of the descriptors** (``pca_dim``, default 64, at most d; learned at fit time:
       centred by the learning mean, projected on the leading eigenvectors of
       the covariance, not whitened). Both references reduce SIFT to 64
       dimensions first: the diagonal-covariance assumption of the GMM fits
       decorrelated components, and the vector is half as long. ``pca_dim=None``
       keeps the raw descriptors.
    2. **Gradients normalised by the Fisher information** (its closed-form
       diagonal approximation). For Gaussian j (weight w, mean mu, std s) and
       posterior g = p(j | y) of the projected descriptor y:
           G_mu(y)    = g / sqrt(w)   * (y - mu) / s
           G_sigma(y) = g / sqrt(2 w) * ((y - mu)^2 / s^2 - 1)
       Block j is [G_mu, G_sigma] (2 p entries for p = pca_dim), D = 2 k p.
    3. **Per-embedding scaling** (``unit_scale``, default on): the normalised
       gradients have identity covariance under the model, so a descriptor's
       embedding has E ||phi||^2 ~ D (8,192 at k = 64); it is divided by
       sqrt(D) so that E ||phi||^2 ~ 1, like T-emb's unit rows. Aggregation is
       not changed by a common factor except through lambda: GMP solves
       (K + lambda I) alpha = 1, so lambda = 1 means "the size of one
       descriptor's self-similarity" only at this scale (unscaled, K's
       diagonal is ~D and K + I is nearly singular: CG did not converge).

    ``hard=True`` sets g to 1 for the most likely Gaussian and 0 elsewhere,
    which makes the embedding block-sparse. An encoder saved before the PCA
    and the scaling existed loads with both off (its numbers are unchanged).
    """

    name = "fv"
    # the first array's shape[1] is the input dimension d (see Embedding.from_state)
    _arrays = ("pca_mean_", "pca_components_", "means_", "sigmas_", "weights_")

    def __init__(self, k, hard=False, seed=0, max_fit_descriptors=200_000, reg_covar=1e-5, pca_dim=64,
                 unit_scale=True):
        super().__init__(k, seed, max_fit_descriptors)
        if pca_dim is not None and (isinstance(pca_dim, bool) or int(pca_dim) < 0):
            raise ConfigError(f"pca_dim must be None, 0 (no PCA) or a positive integer, got {pca_dim!r}")
        self.hard = bool(hard)
        self.reg_covar = float(reg_covar)
        self.pca_dim = int(pca_dim) if pca_dim else None
        self.unit_scale = bool(unit_scale)
        self.block_sparse = self.hard

    def params(self):
        return {**super().params(), "hard": self.hard, "reg_covar": self.reg_covar, "pca_dim": self.pca_dim,
                "unit_scale": self.unit_scale}

    @classmethod
    def from_state(cls, params, arrays):
        if "pca_dim" not in params:  # saved before the PCA and the scaling: both off
            params = {**params, "pca_dim": None, "unit_scale": False}
        if "pca_mean_" not in arrays:
            d = np.asarray(arrays["means_"]).shape[1]
            arrays = {**arrays, "pca_mean_": np.zeros((1, d)), "pca_components_": np.eye(d)}
        return super().from_state(params, arrays)

    def _p(self, d):
        return d if self.pca_dim is None else min(self.pca_dim, d)

    def stored_arrays(self, d=128):
        p = self._p(d)
        return [("pca_mean_", d, 8), ("pca_components_", p * d, 8), ("means_", self.k * p, 8),
                ("sigmas_", self.k * p, 8), ("weights_", self.k, 8)]

    def output_dim(self, d=128):
        return 2 * self.k * self._p(d)

    def embed_flops(self, n, d=128):
        return 8.0 * n * self.output_dim(d)  # posteriors and the two gradients per Gaussian

    def fit_cost(self, n_descriptors, d=128):
        """The EM of the GMM, counted like k-means iterations on the projected descriptors."""
        base = super().fit_cost(n_descriptors, self._p(d))
        return FitCost(what=f"FV k={self.k} on {int(n_descriptors):,} descriptors (d={d})",
                       kmeans_flops=3.0 * base.kmeans_flops)

    def fit(self, X, verbose=False, progress=None):
        from sklearn.mixture import GaussianMixture

        X = self._fit_input(X).astype(np.float64)
        own = progress is None
        progress = self._progress(progress, verbose, X.shape[0], X.shape[1])
        progress.stage("GMM")
        d = X.shape[1]
        if X.shape[0] < self.k:
            raise ConfigError(f"need at least k={self.k} learning descriptors, got {X.shape[0]}")
        if self.pca_dim is None:
            mean, components = np.zeros(d), np.eye(d)
        else:
            mean = X.mean(axis=0)
            Xc = X - mean
            eigval, eigvec = np.linalg.eigh(Xc.T @ Xc / X.shape[0])
            # (p, d), decreasing variance; p = min(pca_dim, d) (at d, a rotation)
            components = eigvec[:, ::-1][:, :min(self.pca_dim, d)].T
            # a deterministic sign per component: its largest entry positive
            flip = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
            components = components * flip[:, None]
        self.pca_mean_ = mean[None, :]
        self.pca_components_ = np.ascontiguousarray(components)
        gmm = GaussianMixture(self.k, covariance_type="diag", reg_covar=self.reg_covar,
                              max_iter=100, random_state=self.seed, verbose=2 if verbose else 0)
        gmm.fit(self._project(X))
        # weights_ as (1, k) so that every learned array is 2-D with a known layout
        self.weights_ = gmm.weights_.astype(np.float64)[None, :]
        self.means_ = gmm.means_.astype(np.float64)
        self.sigmas_ = np.sqrt(gmm.covariances_).astype(np.float64)
        self.d_ = d
        progress.advance(self.fit_cost(X.shape[0], d).kmeans_flops)
        if own:
            progress.finish()
        return self

    @property
    def dim(self):
        self._check_fitted()
        return 2 * self.k * self.means_.shape[1]

    @property
    def scale(self):
        """The factor applied to every embedded descriptor (1 / sqrt(D), or 1)."""
        return 1.0 / np.sqrt(self.dim) if self.unit_scale else 1.0

    def _project(self, X):
        """Descriptors in the GMM's space (n, p) float64: centred and projected."""
        return (np.asarray(X, dtype=np.float64) - self.pca_mean_) @ self.pca_components_.T

    def project(self, X):
        """The PCA-projected descriptors (n, p) that the GMM models."""
        return self._project(self._check_input(X))

    def _log_posteriors(self, Y):
        inv_var = 1.0 / self.sigmas_ ** 2
        # -1/2 sum_t (y_t - mu_t)^2 / s_t^2 expanded into three BLAS-friendly terms
        maha = (Y * Y) @ inv_var.T - 2.0 * Y @ (self.means_ * inv_var).T \
            + (self.means_ ** 2 * inv_var).sum(axis=1)[None, :]
        log_norm = -0.5 * (Y.shape[1] * np.log(2 * np.pi)) - np.log(self.sigmas_).sum(axis=1)
        logp = np.log(self.weights_[0])[None, :] + log_norm[None, :] - 0.5 * maha
        logp -= logp.max(axis=1, keepdims=True)
        return logp - np.log(np.exp(logp).sum(axis=1, keepdims=True))

    def log_posteriors(self, X):
        """log p(j | x) for every descriptor and Gaussian (n, k)."""
        return self._log_posteriors(self.project(X))

    @staticmethod
    def _fisher_block(Y, mu, sigma, w):
        """[G_mu, G_sigma] of each row of Y for a posterior of 1."""
        z = (Y - mu) / sigma
        return np.concatenate([z / np.sqrt(w), (z * z - 1.0) / np.sqrt(2.0 * w)], axis=-1)

    def embed(self, X):
        if not self.hard:
            return self.transform(X)
        Y = self.project(X)
        a = np.argmax(self._log_posteriors(Y), axis=1).astype(np.int64)
        values = self.scale * self._fisher_block(Y, self.means_[a], self.sigmas_[a], self.weights_[0, a][:, None])
        return BlockEmbedding(a, values.astype(np.float32), self.k)

    def transform(self, X):
        if self.hard:
            return self.embed(X).to_dense()
        Y = self.project(X)
        post = np.exp(self._log_posteriors(Y)) * self.scale
        Phi = np.empty((Y.shape[0], self.k, 2 * Y.shape[1]), dtype=np.float32)
        for j in range(self.k):  # a loop over Gaussians, vectorised over descriptors
            Phi[:, j] = post[:, j:j + 1] * self._fisher_block(
                Y, self.means_[j], self.sigmas_[j], self.weights_[0, j])
        return Phi.reshape(Y.shape[0], self.dim)


EMBEDDINGS = {cls.name: cls for cls in (TriangulationEmbedding, FisherVector, VLAD, BagOfWords)}


def embedding_spec(name, fv_pca=64):
    """'temb' | 'fv' | 'fv-hard' | 'vlad' | 'bow' -> (embedding, params); the FV's
    descriptors are PCA-reduced to ``fv_pca`` dimensions first (0: not reduced)."""
    if name in ("fv", "fv-hard"):
        return "fv", {"hard": name == "fv-hard", "pca_dim": fv_pca or None}
    return name, {}


def check_reduced_dim(name, k, fv_pca, dim):
    """A ConfigError when D' = ``dim`` (the components kept after RN; None: all) exceeds the
    dimension of the embedding ``name`` ('temb', 'fv', 'fv-hard', 'vlad', 'bow') with
    vocabulary size ``k``: said before minutes of extraction and learning, not after."""
    if dim is None:
        return
    embedding, params = embedding_spec(name, fv_pca)
    full = make_embedding(embedding, k, **params).output_dim()
    if int(dim) > full:
        raise ConfigError(f"D' = {dim} exceeds the dimension of {name} with k = {k} ({full}): choose D' <= {full}")


def make_embedding(name, k, **params):
    """Embedding by name: 'temb', 'fv', 'vlad' or 'bow'."""
    try:
        cls = EMBEDDINGS[name]
    except KeyError:
        raise ConfigError(f"unknown embedding {name!r}; choose one of {sorted(EMBEDDINGS)}") from None
    return cls(k, **params)

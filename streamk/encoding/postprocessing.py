"""Post-processing of image vectors (section "Implementation notes"):
power-law a <- sign(a)|a|^p and L2; RN = PCA rotation learned on image vectors
of the learning set, completed to an orthonormal basis, then power-law and L2;
dimensionality reduction keeps the first D' rotated components.
"""

import numpy as np

from . import _kernels
from ..checks import as_vectors
from ..errors import ConfigError, NotFittedError

DEFAULT_POWER = 0.5


def power_law(x, p=DEFAULT_POWER):
    """sign(a) |a|^p component-wise (p = 1: identity, p = 0: sign)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    if p == 1.0:
        return x.copy()
    return _kernels.power_law(x, float(p))


def l2_normalize(v):
    """Rows (or the vector) scaled to unit L2 norm; zero rows stay zero."""
    v = np.asarray(v, dtype=np.float64)
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.where(norm > 0, norm, 1.0)


class RotationNormalisation:
    """RN: centre, rotate onto the PCA basis of learning image vectors, keep D'.

    The first r = min(n_components, N - 1, D) eigenvectors U are completed to
    a full orthonormal basis [U, U_perp] (Householder QR of U, the stable form of
    Gram-Schmidt on the orthogonal complement).  The basis is kept as r
    Householder reflectors (D x r), never as a D x D matrix.
    ``transform`` returns the rotated components only; power-law and L2 are
    applied by ``postprocess``.
    """

    def __init__(self, n_components=1000, dim=None):
        if int(n_components) < 1:
            raise ConfigError(f"RN n_components must be >= 1, got {n_components}")
        if dim is not None and int(dim) < 1:
            raise ConfigError(f"dim must be >= 1, got {dim}")
        self.n_components = int(n_components)
        self.dim = None if dim is None else int(dim)
        self.mean_ = None

    # learned state
    def params(self):
        return {"n_components": self.n_components, "dim": self.dim}

    def state(self):
        self._check_fitted()
        return self.params(), {"mean_": self.mean_, "reflectors_": self.reflectors_,
                               "tau_": self.tau_, "signs_": self.signs_}

    @classmethod
    def from_state(cls, params, arrays):
        rn = cls(**params)
        for name in ("mean_", "reflectors_", "tau_", "signs_"):
            setattr(rn, name, np.asarray(arrays[name], dtype=np.float64))
        return rn

    def _check_fitted(self):
        if self.mean_ is None:
            raise NotFittedError("RN is not fitted: call fit() on learning-set image vectors")

    @property
    def input_dim(self):
        self._check_fitted()
        return self.mean_.shape[0]

    @property
    def output_dim(self):
        return self.dim if self.dim is not None else self.input_dim

    def fit(self, V):
        """V: (N, D) learning-set image vectors (L2-normalised)."""
        V = as_vectors(V, what="RN learning vectors")
        N, D = V.shape
        if N < 2:
            raise ConfigError("RN needs at least 2 learning images")
        if self.dim is not None and self.dim > D:
            raise ConfigError(f"dim={self.dim} exceeds the vector dimension {D}")
        self.mean_ = V.mean(axis=0)
        Vc = V - self.mean_
        r = min(self.n_components, N - 1, D)
        if N <= D:  # economy SVD: right singular vectors are the eigenvectors
            _, _, Wt = np.linalg.svd(Vc, full_matrices=False)
            U = Wt[:r].T
        else:
            _, eigvec = np.linalg.eigh(Vc.T @ Vc)
            U = eigvec[:, ::-1][:, :r]
        from scipy.linalg import qr  # here, not at import: a process that only searches never loads scipy

        (reflectors, tau), R = qr(U, mode="raw")
        # Q^T U = R is diagonal with entries +-1: fix the signs so Q[:, :r] = U
        self.reflectors_, self.tau_ = np.asfortranarray(reflectors), tau
        self.signs_ = np.sign(np.diag(R[:r, :r]))
        return self

    def rotate(self, V):
        """All D rotated components [U, U_perp]^T (v - mean), one row per vector."""
        from scipy.linalg import lapack

        self._check_fitted()
        C = np.asfortranarray((np.atleast_2d(V) - self.mean_).T)  # D x m
        lwork = 64 * max(1, C.shape[1])
        out, _, info = lapack.dormqr("L", "T", self.reflectors_, self.tau_, C, lwork)
        if info != 0:
            raise RuntimeError(f"LAPACK dormqr failed with info={info}")
        out = out.T.copy()
        out[:, :len(self.signs_)] *= self.signs_
        return out

    def basis(self):
        """The explicit D x D orthonormal basis (columns), for checks on small D."""
        self._check_fitted()
        return self.rotate(np.eye(self.input_dim) + self.mean_)  # rows are rotated e_i: that is Q S

    def transform(self, V):
        """Rotated components kept: the first D' (or all D)."""
        return self.rotate(V)[:, :self.output_dim]


def postprocess(xi, power=DEFAULT_POWER, rn=None):
    """Image vector(s) -> final representation.

    Without RN: power-law, L2.  With RN: L2, rotate (keep D'), power-law, L2.
    """
    V = np.atleast_2d(np.asarray(xi, dtype=np.float64))
    if rn is not None:
        V = rn.transform(l2_normalize(V))
    out = l2_normalize(power_law(V, power))
    return out if np.ndim(xi) == 2 else out[0]

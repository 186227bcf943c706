"""Weighted aggregation xi = Phi^T alpha (sections "Democratic aggregation" and
"Generalized max-pooling").

The weights depend only on the Gram matrix K = Phi Phi^T of the embedded
descriptors (rows of Phi):
- sum:        alpha = 1
- democratic: symmetric Sinkhorn on K+ = max(K, 0), alpha <- alpha / sigma^gamma
- gmp:        alpha = (K + lam I)^-1 1, by conjugate gradient

For a block-sparse (hard-assigned) embedding K is block-diagonal, so both
solvers run block by block on the small per-block Grams and the n x n matrix is
never formed.  GMP's blocks are solved directly (Cholesky) by default: the
same alpha to rounding, where CG needs hundreds of iterations on the
ill-conditioned blocks of Fisher vectors (norms ~ sqrt(2d) against lam = 1).
"""

import contextlib
import sys
import threading
import warnings

import numpy as np

from . import _kernels
from ..checks import as_gram
from .embeddings import BlockEmbedding
from ..errors import ConfigError, DimensionError, EmptyDescriptorSetError, NonFiniteError

METHODS = ("sum", "democratic", "gmp")
# Algorithm 1 with gamma = 0.5 reaches the BOW fixed point in one iteration and
# is what the authors' code used; the paper suggests < 0.5 for smoother
# convergence.  The evaluation on real images settles the default.
DEFAULT_GAMMA = 0.5
DEFAULT_N_ITER = 10
DEFAULT_LAMBDA = 1.0
DEFAULT_TOL = 1e-6
DEFAULT_MAX_ITER = 1000
# GMP solvers: "auto" = Cholesky for blocks of up to CHOLESKY_MAX_ROWS rows
# (m^3/3 flops and an m x m float64 work matrix), CG for the dense matrix and
# larger blocks; "cg" = conjugate gradient everywhere, as in the paper.
GMP_SOLVERS = ("auto", "cg")
CHOLESKY_MAX_ROWS = 1024


# The memory of aggregate's Gram, kept between calls (one buffer per process, grown to the
# largest Gram asked for, up to GRAM_BUFFER_MAX_BYTES: 4,096 descriptors in float32). A
# new n x n array is partly fresh pages each photo, whose faults cost 10-13 ms of system
# time a photo at n ~ 1,700 (bench/ingest.py, 2-core Xeon): 7 % of the encoding.
GRAM_BUFFER_MAX_BYTES = 64 << 20
_gram_buffer_lock = threading.Lock()
_gram_buffer = None


class ConvergenceWarning(UserWarning):
    """Conjugate gradient stopped at max_iter before reaching tol."""


def _gram_dtype(Phi):
    return np.dtype(np.float32) if Phi.dtype == np.float32 else np.dtype(np.float64)


@contextlib.contextmanager
def gram_memory(Phi):
    """Bytes for the Gram of Phi (n, D), to pass to :func:`gram_upper` and use inside the
    ``with`` block only: the process's kept buffer, or None (then the Gram gets its own)
    when it would exceed GRAM_BUFFER_MAX_BYTES or another thread holds it."""
    global _gram_buffer
    size = Phi.shape[0] ** 2 * _gram_dtype(Phi).itemsize
    if size > GRAM_BUFFER_MAX_BYTES or not _gram_buffer_lock.acquire(blocking=False):
        yield None
        return
    try:
        if _gram_buffer is None or _gram_buffer.size < size:
            _gram_buffer = None  # the smaller one freed first
            _gram_buffer = np.empty(size, dtype=np.uint8)
        yield _gram_buffer
    finally:
        _gram_buffer_lock.release()


def gram_upper(Phi, memory=None):
    """The upper triangle (j >= i) of K = Phi Phi^T, by one BLAS syrk (half the flops of a
    GEMM); the entries below the diagonal are not set. What the solvers read (n, n).
    ``memory``: bytes to hold it (a flat uint8 array, at least n * n * itemsize), or None."""
    blas = sys.modules.get("scipy.linalg._fblas")  # scipy.linalg.blas's own; a command loads it alone (cli.startup)
    if blas is None:
        from scipy.linalg import blas  # here, not at import: the package costs 0.14 s

    Phi = np.asarray(Phi)
    dtype = _gram_dtype(Phi)
    syrk = blas.ssyrk if dtype == np.float32 else blas.dsyrk
    n = Phi.shape[0]
    # BLAS fills the lower triangle of its column-major C, which the C-contiguous view
    # C.T holds as the upper; with beta = 0 it sets C itself (f2py's own C would be
    # zero-filled first). Phi.T is Fortran-contiguous, so BLAS reads Phi without a copy.
    if memory is None:
        C = np.empty((n, n), dtype=dtype, order="F")
    else:
        C = memory[:n * n * dtype.itemsize].view(dtype).reshape((n, n), order="F")
    return syrk(1.0, Phi.T, beta=0.0, c=C, trans=1, lower=1, overwrite_c=1).T


def gram(Phi):
    """K = Phi Phi^T (n, n), both triangles."""
    K = gram_upper(Phi)
    _kernels.mirror_upper(K)
    return K


def check_params(method, gamma, n_iter, lam, solver="auto"):
    if solver not in GMP_SOLVERS:
        raise ConfigError(f"unknown GMP solver {solver!r}; choose one of {GMP_SOLVERS}")
    if method not in METHODS:
        raise ConfigError(f"unknown aggregation {method!r}; choose one of {METHODS}")
    if not 0.0 < gamma <= 1.0:
        raise ConfigError(f"gamma must be in (0, 1], got {gamma}")
    if int(n_iter) < 1:
        raise ConfigError(f"n_iter must be >= 1, got {n_iter}")
    if not lam > 0.0:
        raise ConfigError(f"lambda must be > 0, got {lam}")


def democratic_weights(K, gamma=DEFAULT_GAMMA, n_iter=DEFAULT_N_ITER):
    """Democratic weights of Algorithm 1 on K+ = max(K, 0) (n,); K symmetric (its upper triangle is read)."""
    check_params("democratic", gamma, n_iter, 1.0)
    return _kernels.sinkhorn_dense(as_gram(K), float(gamma), int(n_iter))


def _warn_unconverged(iters, residual, tol, max_iter, stacklevel):
    # A constant message, so Python's default filter shows it once, not per image.
    if iters >= max_iter and residual > tol:
        warnings.warn(f"GMP conjugate gradient reached max_iter={max_iter} before tol={tol:g} "
                      "(K + lam I is ill-conditioned: embeddings with large norms, e.g. Fisher vectors, "
                      "want a larger lam); the weights are approximate", ConvergenceWarning, stacklevel=stacklevel)


def _gmp(K, lam, tol, max_iter, stacklevel):
    alpha, iters, residual = _kernels.cg_dense(K, float(lam), float(tol), int(max_iter))
    _warn_unconverged(iters, residual, tol, max_iter, stacklevel + 1)
    return alpha


def gmp_weights(K, lam=DEFAULT_LAMBDA, tol=DEFAULT_TOL, max_iter=DEFAULT_MAX_ITER):
    """GMP dual weights alpha = (K + lam I)^-1 1 by conjugate gradient (n,); K symmetric
    (its upper triangle is read)."""
    check_params("gmp", 0.5, 1, lam)
    return _gmp(as_gram(K), lam, tol, max_iter, stacklevel=3)  # the warning points at gmp_weights' caller


def dense_weights(K_upper, method, gamma=DEFAULT_GAMMA, n_iter=DEFAULT_N_ITER, lam=DEFAULT_LAMBDA,
                  tol=DEFAULT_TOL, max_iter=DEFAULT_MAX_ITER):
    """Democratic or GMP weights from the upper triangle of K, as :func:`gram_upper` gives it:
    nothing below the diagonal is read, nor checked for finiteness (the triangle is).
    The parameters are the caller's to check (:func:`check_params`)."""
    if not _kernels.all_finite(K_upper, True):
        raise NonFiniteError("Gram matrix contains NaN or infinite values")
    if method == "democratic":
        return _kernels.sinkhorn_dense(K_upper, float(gamma), int(n_iter))
    return _gmp(K_upper, lam, tol, max_iter, stacklevel=4)  # the warning points at aggregate_many's caller


def gmp_primal(Phi, lam=DEFAULT_LAMBDA):
    """GMP primal xi = (Phi^T Phi + lam I_D)^-1 Phi^T 1 (a D x D solve; a check
    for the dual on small D)."""
    Phi = np.asarray(Phi, dtype=np.float64)
    A = Phi.T @ Phi + lam * np.eye(Phi.shape[1])
    return np.linalg.solve(A, Phi.sum(axis=0))


def contributions(K, alpha):
    """Contribution of each descriptor to the self-similarity: alpha_i (K alpha)_i."""
    return alpha * (np.asarray(K, dtype=np.float64) @ alpha)


def _block_weights(grams, offsets, order, method, gamma, n_iter, lam, tol, max_iter, solver):
    grams, gram_offsets = grams
    if method == "democratic":
        alpha_sorted = _kernels.sinkhorn_blocks(grams, gram_offsets, offsets, float(gamma), int(n_iter))
    else:
        direct = CHOLESKY_MAX_ROWS if solver == "auto" else 0
        alpha_sorted, iters, residual = _kernels.gmp_blocks(
            grams, gram_offsets, offsets, float(lam), float(tol), int(max_iter), direct)
        _warn_unconverged(iters, residual, tol, max_iter, stacklevel=4)
    alpha = np.empty_like(alpha_sorted)
    alpha[order] = alpha_sorted
    return alpha


def aggregate(embedded, method="sum", gamma=DEFAULT_GAMMA, n_iter=DEFAULT_N_ITER, lam=DEFAULT_LAMBDA,
              tol=DEFAULT_TOL, max_iter=DEFAULT_MAX_ITER, solver="auto"):
    """Aggregate an embedded descriptor set into xi = Phi^T alpha.

    ``embedded`` is a dense (n, D) array or a BlockEmbedding.  Returns
    (xi as float64 (D,), alpha (n,)).
    """
    return aggregate_many(embedded, (method,), gamma, n_iter, lam, tol, max_iter, solver)[method]


def aggregate_many(embedded, methods=METHODS, gamma=DEFAULT_GAMMA, n_iter=DEFAULT_N_ITER, lam=DEFAULT_LAMBDA,
                   tol=DEFAULT_TOL, max_iter=DEFAULT_MAX_ITER, solver="auto"):
    """Several aggregations of one embedded set, sharing its Gram matrix.

    Returns {method: (xi, alpha)}.
    """
    for method in methods:
        check_params(method, gamma, n_iter, lam, solver)
    if isinstance(embedded, BlockEmbedding):
        if embedded.n == 0:
            raise EmptyDescriptorSetError("cannot aggregate an empty descriptor set")
        order, values, offsets = embedded.grouped
        grams = None
        out = {}
        for method in methods:
            if method == "sum":
                alpha = np.ones(embedded.n)
            else:
                if grams is None:
                    grams = _kernels.block_grams(values, offsets)
                    if not np.isfinite(grams[0]).all():
                        raise NonFiniteError("Gram matrix contains NaN or infinite values")
                alpha = _block_weights(grams, offsets, order, method, gamma, n_iter, lam, tol, max_iter, solver)
            xi = _kernels.weighted_block_sum(values, offsets, np.ascontiguousarray(alpha[order]))
            out[method] = (xi.reshape(-1), alpha)
        return out

    Phi = np.asarray(embedded)
    if Phi.ndim != 2:
        raise DimensionError(f"embedded descriptors must be (n, D), got shape {Phi.shape}")
    if Phi.shape[0] == 0:
        raise EmptyDescriptorSetError("cannot aggregate an empty descriptor set")
    Phi = np.ascontiguousarray(Phi)
    if all(method == "sum" for method in methods):
        _check_finite_embeddings(Phi)
    K = None
    out = {}
    with contextlib.ExitStack() as stack:  # the Gram lives in the kept buffer until the weights are out
        for method in methods:
            if method == "sum":
                alpha = np.ones(Phi.shape[0])
            else:
                if K is None:
                    memory = stack.enter_context(gram_memory(Phi))
                    K = gram_upper(Phi, memory)
                try:
                    alpha = dense_weights(K, method, gamma, n_iter, lam, tol, max_iter)
                except NonFiniteError:
                    # Phi is checked only now: a row with NaN or inf puts one on K's diagonal
                    # (a sum of squares), so the Gram's check covers it; say which it was.
                    _check_finite_embeddings(Phi)
                    raise
            xi = alpha.astype(Phi.dtype) @ Phi  # BLAS gemv
            out[method] = (xi.astype(np.float64), alpha)
    return out


def _check_finite_embeddings(Phi):
    finite = _kernels.all_finite(Phi, False) if Phi.dtype in (np.float32, np.float64) else np.isfinite(Phi).all()
    if not finite:
        raise NonFiniteError("embedded descriptors contain NaN or infinite values")

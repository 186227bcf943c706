"""Numba kernels: plain array code, no checks, no Python objects.

Callers (embeddings, aggregation, postprocessing) validate shapes, dtypes and
values before calling; kernels assume C-contiguous floating arrays.

Conventions: descriptors are rows.  A block-sparse embedding is stored with its
rows sorted by block: block ``b`` owns rows ``offsets[b]:offsets[b+1]``; the
Gram matrix of block ``b`` (m_b x m_b, row-major) lives in a flat array at
``gram_offsets[b]:gram_offsets[b+1]``.
"""

import types

import numpy as np
from numba import njit, prange

# Reassociation lets LLVM vectorise float reductions (dot products, row norms):
# 4-7x on the solvers' matrix-vector products.  No "nnan"/"ninf": callers check
# values, and kernels must not assume them away.
REDUCE = {"reassoc", "contract"}

# ---------------------------------------------------------------- embeddings


@njit(parallel=True, cache=True, fastmath=REDUCE)
def triangulation_residuals(X, C):
    """R[i, j*d:(j+1)*d] = (x_i - c_j) / ||x_i - c_j||  (zero if x_i == c_j)."""
    n, d = X.shape
    k = C.shape[0]
    R = np.empty((n, k * d), dtype=np.float32)
    for i in prange(n):
        for j in range(k):
            s = 0.0
            for t in range(d):
                v = X[i, t] - C[j, t]
                s += v * v
            inv = 1.0 / np.sqrt(s) if s > 0.0 else 0.0
            for t in range(d):
                R[i, j * d + t] = (X[i, t] - C[j, t]) * inv
    return R


@njit(parallel=True, cache=True, fastmath=REDUCE)
def l2_normalize_rows(A):
    """In place; rows of zero norm stay zero."""
    for i in prange(A.shape[0]):
        s = 0.0
        for t in range(A.shape[1]):
            s += A[i, t] * A[i, t]
        if s > 0.0:
            inv = 1.0 / np.sqrt(s)
            for t in range(A.shape[1]):
                A[i, t] *= inv


# ---------------------------------------------------------------- Gram matrices


@njit(parallel=True, cache=True)
def mirror_upper(K):
    """Copy the upper triangle onto the lower one (after a BLAS ``syrk``)."""
    n = K.shape[0]
    for i in prange(n):
        for j in range(i):
            K[i, j] = K[j, i]


@njit(cache=True)
def block_grams(V, offsets):
    """Gram matrix of each block of rows; returns (flat grams, gram offsets).

    Serial over blocks on purpose: BLAS calls inside a numba parallel region
    make OpenBLAS and OpenMP threads fight (100x slower on 2 cores); BLAS
    threads large blocks itself.
    """
    n_blocks = offsets.shape[0] - 1
    gram_offsets = np.zeros(n_blocks + 1, dtype=np.int64)
    for b in range(n_blocks):
        m = offsets[b + 1] - offsets[b]
        gram_offsets[b + 1] = gram_offsets[b] + m * m
    grams = np.empty(gram_offsets[n_blocks], dtype=V.dtype)
    for b in range(n_blocks):
        s, e = offsets[b], offsets[b + 1]
        m = e - s
        if m == 0:
            continue
        Vb = V[s:e]
        G = np.dot(Vb, Vb.T)  # BLAS
        g0 = gram_offsets[b]
        for i in range(m):
            for j in range(m):
                grams[g0 + i * m + j] = G[i, j]
    return grams, gram_offsets


# ---------------------------------------------------------------- solvers
# Matrix-vector products accumulate in float64 whatever the dtype of K.


def _matvec_rows(K, v, out, shift, clip):
    """out = K v + shift * v, with K's negative entries read as 0 if clip."""
    n = v.shape[0]
    for i in prange(n):  # a plain range in the serial compilation
        s = 0.0
        for j in range(n):
            kij = K[i, j]
            if clip:
                kij = max(kij, 0.0)  # branch-free, so the loop vectorises
            s += kij * v[j]
        out[i] = s + shift * v[i]


def _renamed(fn, suffix):
    """``fn`` under another name. Numba's cache files are named after the function's
    qualified name and line, not its compile options: the serial and the parallel
    compilation of one source must not share a name, or one would load the other."""
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + suffix, fn.__defaults__,
                              fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + suffix
    return twin


# One source, compiled twice: on the calling thread, and over the Numba thread pool.
_matvec = njit(cache=True, fastmath=REDUCE)(_matvec_rows)
_matvec_parallel = njit(parallel=True, cache=True, fastmath=REDUCE)(_renamed(_matvec_rows, "_parallel"))


@njit(cache=True)
def _sinkhorn(K, gamma, n_iter, alpha, parallel):
    """Symmetric Sinkhorn on K+ = max(K, 0), Algorithm 1 of the paper.

    sigma = diag(alpha) K+ diag(alpha) 1 ;  alpha <- alpha / sigma^gamma.
    A descriptor with sigma = 0 (a zero embedding) keeps its weight: it
    contributes nothing to the aggregate anyway.
    """
    n = alpha.shape[0]
    Ka = np.empty(n)
    for _ in range(n_iter):
        if parallel:
            _matvec_parallel(K, alpha, Ka, 0.0, True)
        else:
            _matvec(K, alpha, Ka, 0.0, True)
        for i in range(n):
            sigma = alpha[i] * Ka[i]
            if sigma > 0.0:
                alpha[i] = alpha[i] / sigma ** gamma


@njit(cache=True)
def _conjugate_gradient(K, lam, tol, max_iter, x, parallel):
    """Solve (K + lam I) x = 1 by conjugate gradient from x = 0.

    Stops when ||r|| <= tol * ||1||; returns (iterations, relative residual).
    """
    n = x.shape[0]
    x[:] = 0.0
    r = np.ones(n)
    p = r.copy()
    Ap = np.empty(n)
    rs = float(n)
    stop = tol * tol * float(n)
    it = 0
    while it < max_iter and rs > stop:
        if parallel:
            _matvec_parallel(K, p, Ap, lam, False)
        else:
            _matvec(K, p, Ap, lam, False)
        pAp = 0.0
        for i in range(n):
            pAp += p[i] * Ap[i]
        if pAp <= 0.0:  # K + lam I is SPD for lam > 0; guards rounding
            break
        a = rs / pAp
        rs_new = 0.0
        for i in range(n):
            x[i] += a * p[i]
            r[i] -= a * Ap[i]
            rs_new += r[i] * r[i]
        beta = rs_new / rs
        rs = rs_new
        for i in range(n):
            p[i] = r[i] + beta * p[i]
        it += 1
    return it, np.sqrt(rs / n)


# Below this size a parallel matvec costs more in thread wake-ups than it saves.
PARALLEL_MIN_ROWS = 1024  # measured crossover on 2 cores (bench/README.md)


@njit(cache=True)
def sinkhorn_dense(K, gamma, n_iter):
    alpha = np.ones(K.shape[0])
    _sinkhorn(K, gamma, n_iter, alpha, K.shape[0] >= PARALLEL_MIN_ROWS)
    return alpha


@njit(cache=True)
def cg_dense(K, lam, tol, max_iter):
    alpha = np.empty(K.shape[0])
    it, res = _conjugate_gradient(K, lam, tol, max_iter, alpha, K.shape[0] >= PARALLEL_MIN_ROWS)
    return alpha, it, res


@njit(parallel=True, cache=True)
def sinkhorn_blocks(grams, gram_offsets, offsets, gamma, n_iter):
    """Sinkhorn solved independently in each block (cost n^2/c)."""
    alpha = np.ones(offsets[-1])
    for b in prange(offsets.shape[0] - 1):
        s, e = offsets[b], offsets[b + 1]
        m = e - s
        if m == 0:
            continue
        Kb = grams[gram_offsets[b]:gram_offsets[b + 1]].reshape((m, m))
        _sinkhorn(Kb, gamma, n_iter, alpha[s:e], False)
    return alpha


@njit(cache=True, fastmath=REDUCE)
def _cholesky_solve_ones(Kb, lam, x):
    """x = (Kb + lam I)^-1 1 by Cholesky in a float64 work matrix; False if a
    pivot is not positive (rounding on a near-singular Kb: use CG instead).

    Left-looking by rows, so the inner products run over contiguous rows.
    """
    m = x.shape[0]
    L = np.empty((m, m))
    for i in range(m):
        for j in range(i + 1):
            s = Kb[i, j] + (lam if i == j else 0.0)
            for t in range(j):
                s -= L[i, t] * L[j, t]
            if i == j:
                if not s > 0.0:
                    return False
                L[i, i] = np.sqrt(s)
            else:
                L[i, j] = s / L[j, j]
    for i in range(m):  # L y = 1
        s = 1.0
        for t in range(i):
            s -= L[i, t] * x[t]
        x[i] = s / L[i, i]
    for i in range(m - 1, -1, -1):  # L^T x = y
        s = x[i]
        for t in range(i + 1, m):
            s -= L[t, i] * x[t]
        x[i] = s / L[i, i]
    return True


@njit(parallel=True, cache=True)
def gmp_blocks(grams, gram_offsets, offsets, lam, tol, max_iter, cholesky_max_rows):
    """(K_b + lam I) alpha_b = 1 in each block: a direct Cholesky solve for
    blocks of at most ``cholesky_max_rows`` rows (exact, and no iteration count
    that grows with the conditioning of K_b), conjugate gradient for larger ones
    or if Cholesky meets a non-positive pivot
    (``cholesky_max_rows = 0``: conjugate gradient everywhere, as the paper).

    Returns (alpha, max CG iterations, max CG residual); 0 and 0.0 when every
    block was solved directly.
    """
    n_blocks = offsets.shape[0] - 1
    alpha = np.empty(offsets[-1])
    iters = np.zeros(n_blocks, dtype=np.int64)
    resid = np.zeros(n_blocks)
    for b in prange(n_blocks):
        s, e = offsets[b], offsets[b + 1]
        m = e - s
        if m == 0:
            continue
        Kb = grams[gram_offsets[b]:gram_offsets[b + 1]].reshape((m, m))
        if m <= cholesky_max_rows and _cholesky_solve_ones(Kb, lam, alpha[s:e]):
            continue
        it, res = _conjugate_gradient(Kb, lam, tol, max_iter, alpha[s:e], False)
        iters[b] = it
        resid[b] = res
    return alpha, iters.max(), resid.max()


@njit(parallel=True, cache=True)
def weighted_block_sum(V, offsets, alpha):
    """xi[b] = sum over rows i of block b of alpha_i V_i  -> (n_blocks, block_dim)."""
    n_blocks = offsets.shape[0] - 1
    out = np.zeros((n_blocks, V.shape[1]))
    for b in prange(n_blocks):
        for i in range(offsets[b], offsets[b + 1]):
            a = alpha[i]
            for t in range(V.shape[1]):
                out[b, t] += a * V[i, t]
    return out


# ---------------------------------------------------------------- post-processing


@njit(parallel=True, cache=True)
def power_law(x, p):
    """sign(a) |a|^p, component-wise, on a 1-D or 2-D array (new array)."""
    flat = x.ravel()
    out = np.empty_like(flat)
    for i in prange(flat.shape[0]):
        a = flat[i]
        if a > 0.0:
            out[i] = a ** p
        elif a < 0.0:
            out[i] = -((-a) ** p)
        else:  # sign(0) = 0, also for p = 0 (binarisation)
            out[i] = 0.0
    return out.reshape(x.shape)

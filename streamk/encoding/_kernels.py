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
# The dense solvers read only the upper triangle of K (j >= i): the Gram is one BLAS
# syrk, never mirrored, and each mat-vec -- bound by memory, K being read once per
# iteration -- reads half the bytes. Products accumulate in float64 whatever K's dtype.

# Rows per block of the symmetric mat-vec. Fixed, not derived from the thread count:
# every sum is taken in the same order by one thread or many.
SYMV_BLOCK_ROWS = 128


@njit(cache=True)
def symv_blocks(n):
    """Blocks of SYMV_BLOCK_ROWS rows for an n x n mat-vec (the rows of its work array)."""
    return max(1, (n + SYMV_BLOCK_ROWS - 1) // SYMV_BLOCK_ROWS)


def _symv_upper_rows(K, v, out, shift, clip, partial):
    """out = K v + shift * v for a symmetric K of which only the upper triangle
    (j >= i) is read; K's negative entries read as 0 if clip.

    ``partial`` (symv_blocks(n) x n float64) is work space. Block b of rows adds into
    partial[b]: row i's products with v[i:] at i, and its entries right of the
    diagonal times v[i] at their columns (the lower triangle's share, read
    transposed). The blocks' vectors are then summed in block order.

    Rows go four at a time: right of their 4 x 4 diagonal tile, one pass reads the
    four rows and reads and writes partial[b] once per four entries of K (a third
    less time than row by row). Inlined here: as a called function it ran 10-15 %
    slower.
    """
    n = v.shape[0]
    n_blocks = partial.shape[0]
    for t in prange(n_blocks):  # a plain range in the serial compilation
        # long and short blocks alternate (block b reads n - b B columns), so that a static split is even
        b = t // 2 if t % 2 == 0 else n_blocks - 1 - t // 2
        p = partial[b]
        lo = b * SYMV_BLOCK_ROWS
        hi = min(lo + SYMV_BLOCK_ROWS, n)
        for j in range(lo, n):
            p[j] = 0.0
        i = lo
        while i + 4 <= hi:
            for a in range(4):  # the diagonal tile's upper triangle
                s = 0.0
                for c in range(a, 4):
                    k = K[i + a, i + c]
                    if clip:
                        k = max(k, 0.0)
                    s += k * v[i + c]
                    if c > a:
                        p[i + c] += k * v[i + a]
                p[i + a] += s
            v0, v1, v2, v3 = v[i], v[i + 1], v[i + 2], v[i + 3]
            s0 = s1 = s2 = s3 = 0.0
            # views from the tile's right edge, so that indices start at 0 (a loop
            # from i + 4 is not vectorised: the compiler cannot prove the index >= 0)
            r0, r1, r2, r3 = K[i, i + 4:], K[i + 1, i + 4:], K[i + 2, i + 4:], K[i + 3, i + 4:]
            v_right, p_right = v[i + 4:], p[i + 4:]
            for j in range(n - i - 4):
                k0, k1, k2, k3 = r0[j], r1[j], r2[j], r3[j]
                if clip:  # branch-free max, so the loop vectorises
                    k0, k1, k2, k3 = max(k0, 0.0), max(k1, 0.0), max(k2, 0.0), max(k3, 0.0)
                vj = v_right[j]
                s0 += k0 * vj
                s1 += k1 * vj
                s2 += k2 * vj
                s3 += k3 * vj
                p_right[j] += (k0 * v0 + k1 * v1) + (k2 * v2 + k3 * v3)
            p[i] += s0
            p[i + 1] += s1
            p[i + 2] += s2
            p[i + 3] += s3
            i += 4
        while i < hi:  # the last block's remaining rows, one by one
            k = K[i, i]
            if clip:
                k = max(k, 0.0)
            s = k * v[i]
            row, v_right, p_right = K[i, i + 1:], v[i + 1:], p[i + 1:]
            for j in range(n - i - 1):
                k = row[j]
                if clip:
                    k = max(k, 0.0)
                s += k * v_right[j]
                p_right[j] += k * v[i]
            p[i] += s
            i += 1
    for j in prange(n):
        s = 0.0
        for b in range(min(j // SYMV_BLOCK_ROWS + 1, n_blocks)):  # the blocks that start at or before j
            s += partial[b, j]
        out[j] = s + shift * v[j]


def _renamed(fn, suffix):
    """``fn`` under another name. Numba's cache files are named after the function's
    qualified name and line, not its compile options: the serial and the parallel
    compilation of one source must not share a name, or one would load the other."""
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + suffix, fn.__defaults__,
                              fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + suffix
    return twin


# One source, compiled twice: on the calling thread, and over the Numba thread pool.
# Both take the same sums in the same order (the blocks are fixed).
symv_upper = njit(cache=True, fastmath=REDUCE)(_symv_upper_rows)
symv_upper_parallel = njit(parallel=True, cache=True, fastmath=REDUCE)(_renamed(_symv_upper_rows, "_parallel"))


@njit(cache=True, fastmath=REDUCE)
def all_finite(A, upper):
    """True if every entry of the 2-D array A (only j >= i if upper) is finite.

    x - x is 0 for a finite x and NaN otherwise; REDUCE has no "nnan"/"ninf", so the
    compiler keeps it, and the sum of a row vectorises.
    """
    for i in range(A.shape[0]):
        row = A[i, i:] if upper else A[i]
        s = 0.0
        for j in range(row.shape[0]):
            s += row[j] - row[j]
        if s != 0.0:
            return False
    return True


@njit(cache=True)
def _sinkhorn(K, gamma, n_iter, alpha, parallel):
    """Symmetric Sinkhorn on K+ = max(K, 0), Algorithm 1 of the paper; reads K's upper triangle.

    sigma = diag(alpha) K+ diag(alpha) 1 ;  alpha <- alpha / sigma^gamma.
    A descriptor with sigma = 0 (a zero embedding) keeps its weight: it
    contributes nothing to the aggregate anyway.
    """
    n = alpha.shape[0]
    Ka = np.empty(n)
    partial = np.empty((symv_blocks(n), n))
    for _ in range(n_iter):
        if parallel:
            symv_upper_parallel(K, alpha, Ka, 0.0, True, partial)
        else:
            symv_upper(K, alpha, Ka, 0.0, True, partial)
        for i in range(n):
            sigma = alpha[i] * Ka[i]
            if sigma > 0.0:
                alpha[i] = alpha[i] / sigma ** gamma


@njit(cache=True)
def _conjugate_gradient(K, lam, tol, max_iter, x, parallel):
    """Solve (K + lam I) x = 1 by conjugate gradient from x = 0; reads K's upper triangle.

    Stops when ||r|| <= tol * ||1||; returns (iterations, relative residual).
    """
    n = x.shape[0]
    x[:] = 0.0
    r = np.ones(n)
    p = r.copy()
    Ap = np.empty(n)
    partial = np.empty((symv_blocks(n), n))
    rs = float(n)
    stop = tol * tol * float(n)
    it = 0
    while it < max_iter and rs > stop:
        if parallel:
            symv_upper_parallel(K, p, Ap, lam, False, partial)
        else:
            symv_upper(K, p, Ap, lam, False, partial)
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

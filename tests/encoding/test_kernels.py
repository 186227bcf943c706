"""The dense solvers' kernels: the symmetric mat-vec that reads one triangle of K, checked
against numpy's ``K @ x`` on the full matrix; the finiteness check; the Gram's triangle;
and the solvers on Grams large enough for the parallel mat-vec, against numpy's Sinkhorn
and scipy's conjugate gradient, whatever the thread count."""

import numba
import numpy as np
import pytest
from scipy.sparse.linalg import cg

from streamk.encoding import _kernels as kernels
from streamk.encoding.aggregation import aggregate, dense_weights, gram_upper
from streamk.errors import NonFiniteError

EPS64 = np.finfo(np.float64).eps
# around one block, across block boundaries, and above the parallel threshold
SIZES = [1, 2, 3, kernels.SYMV_BLOCK_ROWS - 1, kernels.SYMV_BLOCK_ROWS, kernels.SYMV_BLOCK_ROWS + 1, 300,
         kernels.PARALLEL_MIN_ROWS + 77]


def symmetric(rng, n, dtype):
    """A symmetric n x n matrix with entries of both signs, and the same with NaN below
    its diagonal (what a kernel that reads only the upper triangle must not notice)."""
    A = rng.standard_normal((n, n))
    K = ((A + A.T) / 2).astype(dtype)
    upper_only = K.copy()
    upper_only[np.tril_indices(n, -1)] = np.nan
    return K, upper_only


def matvec_bound(K, x):
    """|K x - computed| per row: the float64 sums (numpy's and the kernel's, each in its own
    order) of n products of a float32 or float64 entry by a float64 are each within
    n eps (|K| |x|) of the exact value (Higham, Accuracy and Stability, (3.5))."""
    n = K.shape[0]
    return 2 * n * EPS64 * (np.abs(K.astype(np.float64)) @ np.abs(x)) + np.finfo(np.float64).tiny


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("clip", [False, True])
def test_symmetric_matvec_reads_one_triangle_and_matches_numpy(n, dtype, clip):
    rng = np.random.default_rng(n)
    K, upper_only = symmetric(rng, n, dtype)
    x = rng.standard_normal(n)
    shift = 0.0 if clip else 0.75
    full = np.maximum(K, 0) if clip else K
    ref = full.astype(np.float64) @ x + shift * x  # numpy on the full symmetric matrix
    partial = np.empty((kernels.symv_blocks(n), n))
    for symv in (kernels.symv_upper, kernels.symv_upper_parallel):
        out = np.full(n, np.nan)
        symv(upper_only, x, out, shift, clip, partial)
        assert np.all(np.abs(out - ref) <= matvec_bound(full, x) + abs(shift) * EPS64 * np.abs(x)), symv


def test_symmetric_matvec_does_not_depend_on_the_thread_count():
    """The blocks and the order of every sum are fixed: one thread or several, the same bits."""
    n = kernels.PARALLEL_MIN_ROWS + 300
    rng = np.random.default_rng(5)
    _, upper_only = symmetric(rng, n, np.float32)
    x = rng.standard_normal(n)
    partial = np.empty((kernels.symv_blocks(n), n))
    outs = []
    threads = numba.get_num_threads()
    try:
        for t in sorted({1, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(t)
            out = np.empty(n)
            kernels.symv_upper_parallel(upper_only, x, out, 0.5, False, partial)
            outs.append(out)
    finally:
        numba.set_num_threads(threads)
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_finite_matches_numpy(dtype):
    rng = np.random.default_rng(3)
    for shape in ((1, 1), (5, 5), (40, 40), (7, 33)):
        A = rng.standard_normal(shape).astype(dtype)
        assert kernels.all_finite(A, False)
        for bad in (np.nan, np.inf, -np.inf):
            for i, j in ((0, 0), (shape[0] - 1, shape[1] - 1), (shape[0] // 2, shape[1] // 3)):
                B = A.copy()
                B[i, j] = bad
                assert not kernels.all_finite(B, False)
                if shape[0] == shape[1]:  # the upper triangle only: a bad entry below the diagonal is not read
                    assert kernels.all_finite(B, True) == (j < i)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gram_upper_is_the_upper_triangle_of_phi_phi_transpose(dtype):
    rng = np.random.default_rng(4)
    Phi = rng.standard_normal((57, 20)).astype(dtype)
    K = gram_upper(Phi)
    ref = Phi.astype(np.float64) @ Phi.astype(np.float64).T
    assert K.shape == (57, 57) and K.dtype == dtype and K.flags.c_contiguous
    upper = np.triu_indices(57)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(K[upper], ref[upper], rtol=tol, atol=tol * np.abs(ref).max())


def test_dense_weights_check_the_upper_triangle_only():
    K, upper_only = symmetric(np.random.default_rng(6), 30, np.float64)
    K = K @ K.T / 30  # positive semi-definite, with the NaN copy's triangle
    upper_only = np.where(np.isnan(upper_only), np.nan, K)
    for method in ("democratic", "gmp"):
        np.testing.assert_array_equal(dense_weights(upper_only, method), dense_weights(K, method))
        for bad in (np.nan, np.inf, -np.inf):
            Kb = upper_only.copy()
            Kb[3, 17] = bad
            with pytest.raises(NonFiniteError):
                dense_weights(Kb, method)


# ---------------------------------------------------------------- the solvers on large Grams


def unit_rows(rng, n, D, n_bursts=20):
    """n unit rows in D dims: bursts of near-duplicates (a spread spectrum, as real images)."""
    centres = rng.standard_normal((n_bursts, D))
    Phi = centres[rng.integers(0, n_bursts, n)] + 0.7 * rng.standard_normal((n, D))
    return (Phi / np.linalg.norm(Phi, axis=1, keepdims=True)).astype(np.float32)


def scipy_cg(K, lam, tol):
    A = K.astype(np.float64) + lam * np.eye(K.shape[0])
    alpha, info = cg(A, np.ones(K.shape[0]), rtol=tol, atol=0.0, maxiter=10_000)
    assert info == 0
    return alpha


def numpy_sinkhorn(K, gamma, n_iter):
    Kp = np.maximum(K.astype(np.float64), 0.0)
    alpha = np.ones(K.shape[0])
    for _ in range(n_iter):
        alpha = alpha / (alpha * (Kp @ alpha)) ** gamma
    return alpha


@pytest.mark.parametrize("threads", [1, 2])
def test_solvers_on_a_large_gram_match_numpy_and_scipy(threads):
    """n above PARALLEL_MIN_ROWS, so the solvers run the parallel mat-vec; both references
    read the same float32 Gram, both triangles.

    CG: both solvers stop once their recurrence's residual is <= tol ||1|| = tol sqrt(n);
    the true residual differs from it by at most ~ it n eps ||A|| ||x|| after ``it``
    iterations (the rounding of each mat-vec, accumulated). So each alpha is within
    (tol sqrt(n) + that) / lambda_min(A) of the exact solution, the two within twice that.
    Sinkhorn: a fixed number of iterations of a smooth map of K+ >= 0. The two mat-vecs
    differ by at most 2 n eps relative (matvec_bound; K+ and alpha >= 0), and an iteration
    alpha / (alpha K+ alpha)^gamma turns a relative error e in alpha into at most
    (1 + 2 gamma) e, plus gamma times the mat-vec's."""
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip(f"Numba has {numba.config.NUMBA_NUM_THREADS} thread(s)")
    rng = np.random.default_rng(7)
    n, D, lam, tol, gamma, n_iter = kernels.PARALLEL_MIN_ROWS + 200, 96, 1.0, 1e-6, 0.5, 10
    Phi = unit_rows(rng, n, D)
    saved = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        xi_gmp, alpha_gmp = aggregate(Phi, "gmp", lam=lam, tol=tol)
        _, alpha_dem = aggregate(Phi, "democratic", gamma=gamma, n_iter=n_iter)
        _, iters, _ = kernels.cg_dense(gram_upper(Phi), lam, tol, 10_000)
    finally:
        numba.set_num_threads(saved)
    K = gram_upper(Phi)
    K = np.triu(K) + np.triu(K, 1).T  # the float32 Gram the solvers read, both triangles
    eig = np.linalg.eigvalsh(K.astype(np.float64)) + lam
    ref = scipy_cg(K, lam, tol)
    gap = 2 * iters * n * EPS64 * eig[-1] * np.linalg.norm(ref)
    assert np.linalg.norm(alpha_gmp - ref) <= 2 * (tol * np.sqrt(n) + gap) / eig[0]
    ref = numpy_sinkhorn(K, gamma, n_iter)
    np.testing.assert_allclose(alpha_dem, ref, rtol=(1 + 2 * gamma) ** n_iter * 2 * n * EPS64)
    np.testing.assert_allclose(xi_gmp, Phi.T.astype(np.float64) @ alpha_gmp, rtol=1e-5,
                               atol=1e-5 * np.abs(xi_gmp).max())

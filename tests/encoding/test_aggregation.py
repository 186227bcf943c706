"""Aggregation: democratic (Algorithm 1) and GMP weights, checked against the
paper's properties and against plain-numpy references written here."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamk.encoding.aggregation import aggregate, aggregate_many, democratic_weights, gmp_primal, gmp_weights, gram
from streamk.encoding.embeddings import VLAD, BagOfWords, BlockEmbedding, FisherVector
from streamk.errors import (ConfigError, DimensionError, EmptyDescriptorSetError, NonFiniteError)

SETTINGS = settings(max_examples=15, deadline=None)


# ---------------------------------------------------------------- references


def sinkhorn_reference(K, gamma, n_iter):
    """Algorithm 1 on K+ = max(K, 0), in plain numpy."""
    Kp = np.maximum(np.asarray(K, dtype=np.float64), 0.0)
    alpha = np.ones(Kp.shape[0])
    for _ in range(n_iter):
        sigma = alpha * (Kp @ alpha)
        alpha = alpha / sigma ** gamma
    return alpha


def gmp_reference(K, lam):
    K = np.asarray(K, dtype=np.float64)
    return np.linalg.solve(K + lam * np.eye(K.shape[0]), np.ones(K.shape[0]))


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def random_orthogonal(rng, D):
    Q, R = np.linalg.qr(rng.standard_normal((D, D)))
    return Q * np.sign(np.diag(R))


def bow_blocks(counts):
    """A BOW BlockEmbedding with counts[j] descriptors on word j, in shuffled order."""
    counts = np.asarray(counts)
    assignment = np.repeat(np.arange(len(counts)), counts)
    assignment = np.random.default_rng(0).permutation(assignment).astype(np.int64)
    return BlockEmbedding(assignment, np.ones((len(assignment), 1), dtype=np.float32), len(counts))


def bursty_set(rng, D=24, n_burst=50, n_unique=10, noise=0.01):
    """50 near-duplicates of e_0 and 10 distinct unit vectors e_1..e_10."""
    burst = np.zeros((n_burst, D))
    burst[:, 0] = 1.0
    burst += noise * rng.standard_normal(burst.shape)
    unique = np.eye(D)[1:n_unique + 1]
    Phi = np.concatenate([burst, unique])
    return Phi / np.linalg.norm(Phi, axis=1, keepdims=True), n_burst


# ---------------------------------------------------------------- Gram


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gram_is_phi_phi_transpose(dtype):
    rng = np.random.default_rng(1)
    Phi = rng.standard_normal((13, 9)).astype(dtype)
    K = gram(Phi)
    ref = Phi.astype(np.float64) @ Phi.astype(np.float64).T
    assert K.shape == (13, 13)
    assert K.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(K, ref, rtol=tol, atol=tol * np.abs(ref).max())
    np.testing.assert_array_equal(K, K.T)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gram_of_non_contiguous_input(dtype):
    rng = np.random.default_rng(2)
    big = rng.standard_normal((10, 12)).astype(dtype)
    for Phi in (np.asfortranarray(big), big[:, ::3], big[::2]):
        ref = Phi.astype(np.float64) @ Phi.astype(np.float64).T
        np.testing.assert_allclose(gram(Phi), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def _gmp_within_tolerance(Phi, alpha, lam=1.0, tol=1e-6):
    """CG stops at ||r|| <= tol sqrt(n): alpha within that over lambda_min(K + lam I), with
    a margin for the float32 Gram's rounding (D eps per entry of unit rows)."""
    K = Phi.astype(np.float64) @ Phi.astype(np.float64).T
    ref = gmp_reference(K, lam)
    n, D = Phi.shape
    lam_min = np.linalg.eigvalsh(K)[0] + lam
    dK = 4 * D * np.finfo(np.float32).eps
    return np.linalg.norm(alpha - ref) <= (tol * np.sqrt(n) + n * dK * np.linalg.norm(ref)) / lam_min


def test_the_kept_gram_memory_serves_gram_after_gram_of_any_size():
    """aggregate keeps the Gram's memory between calls: a smaller Gram after a larger one, a
    larger one after, and one too big to keep, all give the weights of their own K."""
    import streamk.encoding.aggregation as agg

    rng = np.random.default_rng(30)
    sets = []
    for n in (60, 25, 90, 400):
        Phi = rng.standard_normal((n, 16)).astype(np.float32)
        sets.append(Phi / np.linalg.norm(Phi, axis=1, keepdims=True))
    big = 400 * 400 * 4
    assert agg.GRAM_BUFFER_MAX_BYTES >= big
    saved = agg.GRAM_BUFFER_MAX_BYTES
    try:
        agg.GRAM_BUFFER_MAX_BYTES = big - 1  # the last set's Gram gets its own memory
        for Phi in sets:
            _, alpha = aggregate(Phi, "gmp")
            assert _gmp_within_tolerance(Phi, alpha)
            _, alpha = aggregate(Phi, "democratic", gamma=0.5, n_iter=10)
            K = Phi.astype(np.float64) @ Phi.T.astype(np.float64)
            ref = sinkhorn_reference(K, 0.5, 10)
            # K's float32 rounding (D eps per entry), amplified at most (1 + 2 gamma) an iteration
            dK = 4 * Phi.shape[1] * np.finfo(np.float32).eps
            bound = 2.0 ** 10 * len(Phi) * dK * np.linalg.norm(ref) / (np.maximum(K, 0) @ ref).min()
            assert np.linalg.norm(alpha - ref) <= bound
    finally:
        agg.GRAM_BUFFER_MAX_BYTES = saved


def test_the_kept_gram_memory_is_used_by_one_thread_at_a_time():
    """Threads aggregating at once: one uses the kept memory, the others their own."""
    from concurrent.futures import ThreadPoolExecutor

    import streamk.encoding.aggregation as agg

    rng = np.random.default_rng(31)
    sets = [rng.standard_normal((n, 12)).astype(np.float32) for n in (80, 50, 120, 70, 95, 40)] * 3
    sets = [Phi / np.linalg.norm(Phi, axis=1, keepdims=True) for Phi in sets]
    with ThreadPoolExecutor(4) as pool:
        alphas = list(pool.map(lambda Phi: aggregate(Phi, "gmp")[1], sets))
    assert all(_gmp_within_tolerance(Phi, alpha) for Phi, alpha in zip(sets, alphas))
    with agg.gram_memory(sets[0]) as held:  # held here: aggregate gets its own
        assert held is not None
        with agg.gram_memory(sets[1]) as other:
            assert other is None
        assert _gmp_within_tolerance(sets[1], aggregate(sets[1], "gmp")[1])


# ---------------------------------------------------------------- BOW case (section "The BOW case")


def test_bow_democratic_gamma_half_is_hellinger_after_one_iteration():
    counts = np.array([1, 4, 0, 9, 2, 16, 3])
    xi, alpha = aggregate(bow_blocks(counts), "democratic", gamma=0.5, n_iter=1)
    np.testing.assert_allclose(xi, np.sqrt(counts), rtol=1e-6)
    # alpha(x) = 1 / sqrt(n_{i_x})
    emb = bow_blocks(counts)
    np.testing.assert_allclose(alpha, 1.0 / np.sqrt(counts[emb.assignment]), rtol=1e-6)
    # the same on the dense path
    xi_dense, _ = aggregate(emb.to_dense(), "democratic", gamma=0.5, n_iter=1)
    np.testing.assert_allclose(xi_dense, np.sqrt(counts), rtol=1e-6)


def test_bow_democratic_gamma_below_half_converges_to_hellinger():
    counts = np.array([1, 4, 0, 9, 2, 16, 3])
    emb = bow_blocks(counts)
    # one iteration with gamma = 0.3 is not there yet ...
    xi1, _ = aggregate(emb, "democratic", gamma=0.3, n_iter=1)
    assert not np.allclose(unit(xi1), unit(np.sqrt(counts)), atol=1e-3)
    # ... but the iteration contracts by (1 - 2 gamma) = 0.4 per step
    xi, _ = aggregate(emb, "democratic", gamma=0.3, n_iter=40)
    np.testing.assert_allclose(xi, np.sqrt(counts), rtol=1e-5)


def test_bow_democratic_from_fitted_bag_of_words():
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((5, 4)) * 10
    X_learn = np.concatenate([c + rng.standard_normal((40, 4)) for c in centres]).astype(np.float32)
    bow = BagOfWords(5, seed=0).fit(X_learn)
    X = np.concatenate([centres[j] + rng.standard_normal((m, 4)) for j, m in enumerate([7, 1, 0, 3, 12])])
    X = X.astype(np.float32)
    d2 = ((X[:, None, :].astype(np.float64) - bow.centroids_[None].astype(np.float64)) ** 2).sum(-1)
    counts = np.bincount(d2.argmin(axis=1), minlength=5)
    assert sorted(counts) == [0, 1, 3, 7, 12]
    xi, _ = aggregate(bow.embed(X), "democratic", gamma=0.5, n_iter=1)
    np.testing.assert_allclose(xi, np.sqrt(counts), rtol=1e-6)
    xi_sum, _ = aggregate(bow.embed(X), "sum")
    np.testing.assert_allclose(xi_sum, counts)


def test_bow_gmp_is_max_pooling():
    counts = np.array([1, 4, 0, 9, 2, 16, 0, 3])
    presence = (counts > 0).astype(float)
    for emb in (bow_blocks(counts), bow_blocks(counts).to_dense()):
        xi, _ = aggregate(emb, "gmp", lam=1e-6)
        np.testing.assert_allclose(unit(xi), unit(presence), atol=1e-5)
        # phi(x)^T xi is the same constant for every descriptor (eq. maxprop)
        Phi = emb.to_dense() if isinstance(emb, BlockEmbedding) else emb
        np.testing.assert_allclose(Phi @ xi, 1.0, rtol=1e-5)
    # ... whereas sum pooling keeps the counts
    xi_sum, _ = aggregate(bow_blocks(counts), "sum")
    np.testing.assert_allclose(xi_sum, counts)


def test_gmp_on_orthonormal_codebook_is_presence_not_counts():
    """Proposition of section "Relationship with max-pooling": Q orthonormal,
    phi(x) in {q_k}: xi_gmp = sum of the q_k present, whatever the proportions."""
    rng = np.random.default_rng(4)
    D, c = 20, 6
    Q = random_orthogonal(rng, D)[:, :c]  # D x c, Q^T Q = I
    counts = np.array([5, 1, 0, 12, 2, 0])
    Phi = np.repeat(Q.T, counts, axis=0)
    xi, _ = aggregate(Phi, "gmp", lam=1e-6)
    np.testing.assert_allclose(unit(xi), unit(Q @ (counts > 0)), atol=1e-5)


# ---------------------------------------------------------------- GMP primal / dual


def test_gmp_dual_equals_primal_and_direct_solve():
    rng = np.random.default_rng(5)
    Phi = rng.standard_normal((30, 12))
    Phi /= np.linalg.norm(Phi, axis=1, keepdims=True)
    for lam in (0.1, 1.0, 10.0):
        alpha = gmp_weights(Phi @ Phi.T, lam)
        xi_dual = Phi.T @ alpha
        xi_ref = np.linalg.solve(Phi.T @ Phi + lam * np.eye(12), Phi.sum(axis=0))
        np.testing.assert_allclose(xi_dual, xi_ref, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(gmp_primal(Phi, lam), xi_ref, rtol=1e-10)
        xi_agg, alpha_agg = aggregate(Phi, "gmp", lam=lam)
        np.testing.assert_allclose(xi_agg, xi_ref, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(alpha_agg, alpha, rtol=1e-8)


@SETTINGS
@given(n=st.integers(1, 25), D=st.integers(1, 16), lam=st.floats(0.05, 20.0), seed=st.integers(0, 2**31))
def test_gmp_dual_equals_primal_random(n, D, lam, seed):
    rng = np.random.default_rng(seed)
    Phi = rng.standard_normal((n, D))
    xi_dual = Phi.T @ gmp_weights(Phi @ Phi.T, lam)
    xi_ref = np.linalg.solve(Phi.T @ Phi + lam * np.eye(D), Phi.sum(axis=0))
    np.testing.assert_allclose(xi_dual, xi_ref, rtol=1e-4, atol=1e-5 * np.linalg.norm(xi_ref))
    np.testing.assert_allclose(gmp_primal(Phi, lam), xi_ref, rtol=1e-8, atol=1e-12)


def test_gmp_large_lambda_tends_to_sum_pooling():
    rng = np.random.default_rng(6)
    Phi, _ = bursty_set(rng)
    s = unit(Phi.sum(axis=0))
    errs = []
    for lam in (1.0, 1e2, 1e4, 1e6):
        xi, _ = aggregate(Phi, "gmp", lam=lam)
        errs.append(np.linalg.norm(unit(xi) - s))
    assert errs[0] > 0.1  # lambda = 1 is far from sum pooling on a bursty set
    assert errs[-1] < 1e-4
    assert all(a > b for a, b in zip(errs, errs[1:]))
    # xi ~ Phi 1 / lambda for lambda large
    xi, _ = aggregate(Phi, "gmp", lam=1e6)
    np.testing.assert_allclose(xi * 1e6, Phi.sum(axis=0), rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- weights vs references


def test_democratic_weights_match_plain_sinkhorn():
    rng = np.random.default_rng(7)
    Phi = rng.standard_normal((40, 10))  # K has many negative entries: K+ matters
    Phi /= np.linalg.norm(Phi, axis=1, keepdims=True)
    K = Phi @ Phi.T
    assert (K < 0).sum() > 100
    for gamma, n_iter in ((0.5, 1), (0.5, 10), (0.3, 10), (0.1, 3), (1.0, 5)):
        np.testing.assert_allclose(democratic_weights(K, gamma, n_iter), sinkhorn_reference(K, gamma, n_iter),
                                   rtol=1e-10)
    np.testing.assert_allclose(democratic_weights(K.astype(np.float32), 0.5, 10), sinkhorn_reference(K, 0.5, 10),
                               rtol=1e-4)


def test_democratic_ignores_negative_similarities():
    """Weights are computed on K+ = max(K, 0): K and K+ give the same weights."""
    rng = np.random.default_rng(8)
    Phi = rng.standard_normal((20, 6))
    K = Phi @ Phi.T
    np.testing.assert_allclose(democratic_weights(K, 0.5, 10), democratic_weights(np.maximum(K, 0), 0.5, 10),
                               rtol=1e-12)
    assert (democratic_weights(K, 0.5, 10) > 0).all()


def test_gmp_weights_match_direct_solve():
    rng = np.random.default_rng(9)
    Phi, _ = bursty_set(rng)
    K = Phi @ Phi.T
    for lam in (0.5, 1.0, 3.0):
        ref = gmp_reference(K, lam)
        alpha = gmp_weights(K, lam)
        assert np.linalg.norm(alpha - ref) <= 1e-5 * np.linalg.norm(ref)


@SETTINGS
@given(n=st.integers(1, 30), D=st.integers(1, 12), gamma=st.floats(0.05, 0.5), n_iter=st.integers(1, 12),
       lam=st.floats(0.1, 10.0), seed=st.integers(0, 2**31))
def test_weights_match_references_random(n, D, gamma, n_iter, lam, seed):
    rng = np.random.default_rng(seed)
    Phi = rng.standard_normal((n, D))
    Phi /= np.linalg.norm(Phi, axis=1, keepdims=True)
    K = Phi @ Phi.T
    np.testing.assert_allclose(democratic_weights(K, gamma, n_iter), sinkhorn_reference(K, gamma, n_iter),
                               rtol=1e-9)
    ref = gmp_reference(K, lam)
    assert np.linalg.norm(gmp_weights(K, lam) - ref) <= 1e-5 * np.linalg.norm(ref)


# ---------------------------------------------------------------- burstiness


def test_bursty_set_contributions_are_equalised():
    rng = np.random.default_rng(10)
    Phi, n_burst = bursty_set(rng)
    K = Phi @ Phi.T

    def spread(v):
        assert (v > 0).all()
        return v.max() / v.min()

    def cv(v):
        return v.std() / v.mean()

    # sum pooling: a bursty descriptor weighs ~ the size of its burst
    _, ones = aggregate(Phi, "sum")
    contrib_sum = ones * (K @ ones)
    assert contrib_sum[:n_burst].min() > 40 * contrib_sum[n_burst:].max()
    assert spread(contrib_sum) > 40

    # democratic: alpha_i (K alpha)_i is (nearly) the same for all descriptors
    _, alpha = aggregate(Phi, "democratic", gamma=0.5, n_iter=10)
    contrib_dem = alpha * (K @ alpha)
    assert spread(contrib_dem) < 1.05
    assert cv(contrib_dem) < 0.01 < 0.3 < cv(contrib_sum)
    assert alpha[:n_burst].max() < alpha[n_burst:].min() / 5  # bursty ones down-weighted

    # GMP: phi_i^T xi = (K alpha)_i is (nearly) the same for all descriptors,
    # where sum pooling gives phi_i^T xi = (K 1)_i, from 1 to ~50
    xi, alpha = aggregate(Phi, "gmp", lam=1e-3)
    match_gmp = Phi @ xi
    np.testing.assert_allclose(match_gmp, K @ alpha, rtol=1e-6)
    match_sum = Phi @ Phi.sum(axis=0)
    assert spread(match_sum) > 40
    # (n > D and the burst is noisy, so Phi^T xi = 1 is met in the least-squares sense only)
    assert spread(match_gmp) < 1.25
    assert cv(match_gmp) < 0.05 < 0.3 < cv(match_sum)
    # with the default lambda = 1 still far more even than sum pooling
    xi, _ = aggregate(Phi, "gmp", lam=1.0)
    assert cv(Phi @ xi) < 0.5 * cv(match_sum)
    assert spread(Phi @ xi) < 0.1 * spread(match_sum)


def test_weights_are_invariant_to_a_rotation_of_the_embeddings():
    """alpha depends on K = Phi Phi^T only, so rotating the embeddings leaves it unchanged and
    rotates xi. The tolerances come from the solvers, not from one machine's rounding:

    * GMP's conjugate gradient stops once ||r|| <= tol ||1|| = tol sqrt(n): each alpha is
      within tol sqrt(n) / lambda_min(K + lam I) of the exact solution, so the two within
      twice that (whichever iteration each stops at);
    * democratic runs a fixed number of Sinkhorn iterations, a smooth map of K: the two
      differ by the rounding of K (D eps per entry of unit rows, whatever BLAS kernel and
      thread count computed it), amplified at most (1 + gamma) per iteration and divided by
      the smallest row sum it normalises by.

    xi = Phi^T alpha then differs by at most ||Phi||_2 times alpha's difference, plus the
    rounding of the two products and of the rotation (a few D eps ||Phi||_2 ||alpha||)."""
    from streamk.encoding.aggregation import DEFAULT_N_ITER, DEFAULT_TOL

    eps = np.finfo(np.float64).eps
    rng = np.random.default_rng(11)
    Phi = rng.standard_normal((25, 15))
    Phi /= np.linalg.norm(Phi, axis=1, keepdims=True)
    n, D = Phi.shape
    Q = random_orthogonal(rng, D)
    PhiQ = Phi @ Q
    K = Phi @ Phi.T
    dK = 4 * D * eps  # rounding of an entry of K (unit rows), in either order of summation
    norm_phi = np.linalg.norm(Phi, 2)
    for method, kw in (("democratic", {"gamma": 0.5}), ("democratic", {"gamma": 0.2}), ("gmp", {"lam": 1.0}),
                       ("gmp", {"lam": 0.1})):
        xi, alpha = aggregate(Phi, method, **kw)
        xi_q, alpha_q = aggregate(PhiQ, method, **kw)
        if method == "gmp":
            lam_min = np.linalg.eigvalsh(K + kw["lam"] * np.eye(n))[0]
            d_alpha = 2 * DEFAULT_TOL * np.sqrt(n) / lam_min + n * dK * np.linalg.norm(alpha) / lam_min
        else:
            sigma_min = (np.maximum(K, 0) @ alpha).min()
            d_alpha = (1 + kw["gamma"]) ** DEFAULT_N_ITER * n * dK * np.linalg.norm(alpha) / sigma_min
        assert np.linalg.norm(alpha_q - alpha) <= d_alpha, (method, kw)
        d_xi = norm_phi * d_alpha + 4 * D * eps * norm_phi * np.linalg.norm(alpha)
        assert np.linalg.norm(xi_q - Q.T @ xi) <= d_xi, (method, kw)


def test_aggregate_many_shares_gram_and_matches_single():
    rng = np.random.default_rng(12)
    Phi = rng.standard_normal((10, 5))
    many = aggregate_many(Phi, ("sum", "democratic", "gmp"), gamma=0.4, n_iter=7, lam=2.0)
    np.testing.assert_allclose(many["sum"][0], Phi.sum(axis=0), rtol=1e-12)
    K = Phi @ Phi.T
    np.testing.assert_allclose(many["democratic"][1], sinkhorn_reference(K, 0.4, 7), rtol=1e-9)
    np.testing.assert_allclose(many["gmp"][1], gmp_reference(K, 2.0), rtol=1e-5)


# ---------------------------------------------------------------- block-sparse path


@pytest.fixture(scope="module")
def hard_embeddings():
    rng = np.random.default_rng(13)
    centres = rng.standard_normal((4, 6)) * 3
    X_learn = np.concatenate([c + rng.standard_normal((60, 6)) for c in centres]).astype(np.float32)
    return {"vlad": VLAD(4, seed=0).fit(X_learn), "fv": FisherVector(4, hard=True, seed=0).fit(X_learn),
            "centres": centres}


def _sample(rng, centres, n):
    j = rng.integers(len(centres), size=n)
    # a few exact duplicates make blocks with strong interference
    X = centres[j] + rng.standard_normal((n, centres.shape[1]))
    dup = rng.random(n) < 0.3
    X[dup] = X[0]
    return X.astype(np.float32)


def _block_equals_dense(emb, X, method, kw):
    blocks = emb.embed(X)
    assert isinstance(blocks, BlockEmbedding)
    dense = blocks.to_dense()
    xi_b, alpha_b = aggregate(blocks, method, **kw)
    xi_d, alpha_d = aggregate(dense, method, **kw)
    assert xi_b.shape == xi_d.shape == (emb.dim,)
    scale = np.linalg.norm(xi_d)
    rtol = 1e-4
    if method == "gmp":
        # the block path solves K_b + lam I directly; the dense path stops CG at a relative
        # residual of 1e-6, so its weights are within cond(K + lam I) x 1e-6 of the exact ones
        D = dense.astype(np.float64)
        ev = np.linalg.eigvalsh(D @ D.T + kw["lam"] * np.eye(len(D)))
        rtol = max(rtol, 10 * 1e-6 * ev[-1] / ev[0])
    np.testing.assert_allclose(alpha_b, alpha_d, rtol=rtol, atol=rtol / 10 * np.abs(alpha_d).max())
    np.testing.assert_allclose(xi_b, xi_d, rtol=rtol, atol=rtol / 10 * scale)
    # and both are the weighted sum Phi^T alpha of the dense embedding
    np.testing.assert_allclose(xi_b, dense.astype(np.float64).T @ alpha_b, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("name", ["vlad", "fv"])
@pytest.mark.parametrize("method,kw", [("democratic", {"gamma": 0.5, "n_iter": 10}),
                                       ("democratic", {"gamma": 0.25, "n_iter": 5}),
                                       ("gmp", {"lam": 1.0}), ("sum", {})])
def test_block_path_equals_dense_path(hard_embeddings, name, method, kw):
    rng = np.random.default_rng(14)
    _block_equals_dense(hard_embeddings[name], _sample(rng, hard_embeddings["centres"], 50), method, kw)


@SETTINGS
@given(n=st.integers(1, 40), seed=st.integers(0, 2**31), lam=st.floats(0.1, 10.0), gamma=st.floats(0.1, 0.5))
@example(n=31, seed=0, lam=0.125, gamma=0.5)  # ill-conditioned: CG's weights 5e-4 off the exact ones
def test_block_path_equals_dense_path_random(hard_embeddings, n, seed, lam, gamma):
    rng = np.random.default_rng(seed)
    X = _sample(rng, hard_embeddings["centres"], n)
    for name in ("vlad", "fv"):
        _block_equals_dense(hard_embeddings[name], X, "democratic", {"gamma": gamma, "n_iter": 10})
        _block_equals_dense(hard_embeddings[name], X, "gmp", {"lam": lam})


def test_block_gram_is_block_diagonal_reference():
    """Block weights equal weights of the full n x n Gram computed in numpy."""
    rng = np.random.default_rng(15)
    n, c, b = 30, 5, 3
    assignment = rng.integers(c, size=n).astype(np.int64)
    values = rng.standard_normal((n, b)).astype(np.float32)
    emb = BlockEmbedding(assignment, values, c)
    same = assignment[:, None] == assignment[None, :]
    K = np.where(same, values.astype(np.float64) @ values.astype(np.float64).T, 0.0)
    _, alpha = aggregate(emb, "democratic", gamma=0.5, n_iter=10)
    np.testing.assert_allclose(alpha, sinkhorn_reference(K, 0.5, 10), rtol=1e-5)
    _, alpha = aggregate(emb, "gmp", lam=1.0)
    np.testing.assert_allclose(alpha, gmp_reference(K, 1.0), rtol=1e-4)


def _ill_conditioned_blocks(rng, n=400, c=3, b=32, span=7):
    """Fisher-vector-like blocks: rank-deficient (n/c rows in b dims) with
    norms ~ 20, so K_b + I has a condition number ~ 1e4.  Small integer
    values: the float32 Gram is exact, so a direct solve can match numpy's."""
    assignment = rng.integers(c, size=n).astype(np.int64)
    values = rng.integers(-span, span + 1, size=(n, b)).astype(np.float32)
    values[rng.random(n) < 0.2] = values[0]  # bursts
    emb = BlockEmbedding(assignment, values, c)
    same = assignment[:, None] == assignment[None, :]
    V = values.astype(np.float64)
    return emb, np.where(same, V @ V.T, 0.0)


@pytest.mark.parametrize("solver", ["auto", "cg"])
def test_block_gmp_solvers_match_direct_solve_on_ill_conditioned_blocks(solver):
    emb, K = _ill_conditioned_blocks(np.random.default_rng(21))
    ref = gmp_reference(K, 1.0)
    if solver == "auto":  # Cholesky: exact to rounding
        _, alpha = aggregate(emb, "gmp", lam=1.0, solver=solver)
        np.testing.assert_allclose(alpha, ref, rtol=1e-8, atol=1e-10 * np.abs(ref).max())
    else:  # CG: many iterations, and a tolerance-sized error
        _, alpha = aggregate(emb, "gmp", lam=1.0, solver=solver, tol=1e-10, max_iter=20000)
        np.testing.assert_allclose(alpha, ref, rtol=1e-3, atol=1e-4 * np.abs(ref).max())


def test_block_gmp_uses_cg_above_the_cholesky_size(monkeypatch):
    import streamk.encoding.aggregation as agg
    emb, K = _ill_conditioned_blocks(np.random.default_rng(22), n=60, span=1)
    monkeypatch.setattr(agg, "CHOLESKY_MAX_ROWS", 10)  # every block (~20 rows) goes to CG
    _, alpha = aggregate(emb, "gmp", lam=1.0, tol=1e-12, max_iter=5000)
    np.testing.assert_allclose(alpha, gmp_reference(K, 1.0), rtol=1e-8)


def test_cholesky_kernel_reports_a_non_positive_pivot():
    from streamk.encoding import _kernels as kernels
    x = np.empty(3)
    assert kernels._cholesky_solve_ones(np.eye(3, dtype=np.float32), 1.0, x)
    np.testing.assert_allclose(x, 0.5)
    assert not kernels._cholesky_solve_ones(-2.0 * np.eye(3, dtype=np.float32), 1.0, x)


def test_unknown_gmp_solver_raises_config_error():
    with pytest.raises(ConfigError):
        aggregate(np.eye(3), "gmp", solver="lu")


# ---------------------------------------------------------------- errors


def test_weights_reject_non_finite_gram():
    K = np.eye(3)
    for bad in (np.nan, np.inf, -np.inf):
        Kb = K.copy()
        Kb[0, 1] = Kb[1, 0] = bad
        with pytest.raises(NonFiniteError):
            democratic_weights(Kb)
        with pytest.raises(NonFiniteError):
            gmp_weights(Kb)


def test_weights_reject_non_square_gram():
    for K in (np.ones((3, 4)), np.ones(3), np.ones((2, 2, 2))):
        with pytest.raises(DimensionError):
            democratic_weights(K)
        with pytest.raises(DimensionError):
            gmp_weights(K)


def test_aggregate_rejects_non_finite_embeddings():
    Phi = np.ones((4, 3))
    Phi[2, 1] = np.nan
    for method in ("democratic", "gmp"):
        with pytest.raises(NonFiniteError):
            aggregate(Phi, method)
    blocks = BlockEmbedding(np.array([0, 0, 1]), np.array([[1.0], [np.inf], [1.0]], dtype=np.float32), 2)
    for method in ("democratic", "gmp"):
        with pytest.raises(NonFiniteError):
            aggregate(blocks, method)


def test_aggregate_names_what_is_not_finite():
    """The dense path checks Phi through its Gram (a row with NaN or inf puts one on K's
    diagonal), and still says whether the embeddings or the Gram were at fault."""
    for bad in (np.nan, np.inf, -np.inf):
        for where in ((0, 0), (3, 2), (4, 1)):
            Phi = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
            Phi[where] = bad
            for methods in (("sum",), ("democratic",), ("gmp",), ("sum", "gmp")):
                with pytest.raises(NonFiniteError, match="embedded descriptors"):
                    aggregate_many(Phi, methods)
    huge = np.full((4, 3), 1e20, dtype=np.float32)  # finite, but its Gram overflows float32
    for method in ("democratic", "gmp"):
        with pytest.raises(NonFiniteError, match="Gram matrix"):
            aggregate(huge, method)


def test_aggregate_rejects_empty_and_bad_shapes():
    for method in ("sum", "democratic", "gmp"):
        with pytest.raises(EmptyDescriptorSetError):
            aggregate(np.zeros((0, 5)), method)
        with pytest.raises(EmptyDescriptorSetError):
            aggregate(BlockEmbedding(np.zeros(0, dtype=np.int64), np.zeros((0, 2), np.float32), 3), method)
        with pytest.raises(DimensionError):
            aggregate(np.ones(5), method)
    with pytest.raises(EmptyDescriptorSetError):
        democratic_weights(np.zeros((0, 0)))


@pytest.mark.parametrize("kw", [{"method": "max"}, {"method": "democratic", "gamma": 0.0},
                                {"method": "democratic", "gamma": 1.5}, {"method": "democratic", "gamma": np.nan},
                                {"method": "democratic", "n_iter": 0}, {"method": "gmp", "lam": 0.0},
                                {"method": "gmp", "lam": -1.0}, {"method": "gmp", "lam": np.nan}])
def test_bad_parameters_raise_config_error(kw):
    with pytest.raises(ConfigError):
        aggregate(np.eye(3), **kw)


def test_weight_functions_reject_bad_parameters():
    with pytest.raises(ConfigError):
        democratic_weights(np.eye(2), gamma=-0.1)
    with pytest.raises(ConfigError):
        democratic_weights(np.eye(2), n_iter=0)
    with pytest.raises(ConfigError):
        gmp_weights(np.eye(2), lam=0.0)

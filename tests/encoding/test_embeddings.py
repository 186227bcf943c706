"""Embeddings phi: RootSIFT, T-emb, FV, VLAD, BOW, against hand-computed numbers
and slow plain-numpy references of their formulas."""

import numpy as np
import pytest

from streamk.encoding.embeddings import (VLAD, BagOfWords, BlockEmbedding, FisherVector, TriangulationEmbedding,
                                make_embedding, rootsift)
from streamk.errors import ConfigError, DimensionError, EmptyDescriptorSetError, NonFiniteError, NotFittedError


def clustered(rng, n, d, n_centres=6, spread=2.0):
    C = rng.standard_normal((n_centres, d)) * spread
    scales = rng.uniform(0.3, 1.5, d)
    return (C[rng.integers(n_centres, size=n)] + rng.standard_normal((n, d)) * scales).astype(np.float32)


# ---------------------------------------------------------------- RootSIFT


def test_rootsift_by_hand():
    x = np.array([[1.0, 3.0, 0.0, 4.0]])  # L1 = 8
    np.testing.assert_allclose(rootsift(x), [[np.sqrt(1 / 8), np.sqrt(3 / 8), 0.0, np.sqrt(4 / 8)]], rtol=1e-6)
    x = np.array([[2.0, 2.0], [0.0, 9.0]])
    np.testing.assert_allclose(rootsift(x), [[np.sqrt(0.5), np.sqrt(0.5)], [0.0, 1.0]], rtol=1e-6)
    assert rootsift(x).dtype == np.float32


def test_rootsift_zero_row_stays_zero_and_rows_are_unit_norm():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 255, size=(10, 16))
    X[3] = 0.0
    R = rootsift(X)
    np.testing.assert_array_equal(R[3], 0.0)
    norms = np.linalg.norm(R, axis=1)
    np.testing.assert_allclose(np.delete(norms, 3), 1.0, rtol=1e-6)  # sum of x_i/|x|_1 = 1


def test_rootsift_is_the_hellinger_map():
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 255, size=(6, 32)) * (rng.random((6, 32)) < 0.7)
    R = rootsift(X).astype(np.float64)
    for i in range(6):
        for j in range(6):
            hellinger = np.sqrt(X[i] * X[j]).sum() / np.sqrt(X[i].sum() * X[j].sum())
            assert R[i] @ R[j] == pytest.approx(hellinger, rel=1e-5)


def test_rootsift_rejects_non_2d():
    with pytest.raises(DimensionError):
        rootsift(np.ones(4))


# ---------------------------------------------------------------- BlockEmbedding


def test_block_embedding_to_dense_by_hand():
    emb = BlockEmbedding(np.array([2, 0, 2]), np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32), 3)
    assert (emb.n, emb.block_dim, emb.dim) == (3, 2, 6)
    np.testing.assert_array_equal(emb.to_dense(), [[0, 0, 0, 0, 1, 2],
                                                   [3, 4, 0, 0, 0, 0],
                                                   [0, 0, 0, 0, 5, 6]])


# ---------------------------------------------------------------- T-emb


@pytest.fixture(scope="module")
def temb_setup():
    rng = np.random.default_rng(2)
    d, k = 8, 4
    X = clustered(rng, 3000, d)
    emb = TriangulationEmbedding(k, seed=0).fit(X)
    return emb, X, d, k


def triangulation_residuals_reference(X, C):
    X = np.asarray(X, dtype=np.float64)
    blocks = []
    for c in np.asarray(C, dtype=np.float64):
        diff = X - c
        norm = np.linalg.norm(diff, axis=1, keepdims=True)
        blocks.append(np.divide(diff, norm, out=np.zeros_like(diff), where=norm > 0))
    return np.concatenate(blocks, axis=1)


def test_temb_dimension(temb_setup):
    emb, X, d, k = temb_setup
    assert emb.dim == (k - 1) * d
    assert emb.transform(X[:5]).shape == (5, (k - 1) * d)
    assert emb.centroids_.shape == (k, d)


def test_temb_mean_and_dropped_components(temb_setup):
    """The learned mean is the mean residual; the first d (largest-variance)
    whitened components are dropped: the projection is orthogonal to the top-d
    eigenvectors of the residual covariance, computed here in numpy."""
    emb, X, d, k = temb_setup
    R = triangulation_residuals_reference(X, emb.centroids_)
    np.testing.assert_allclose(emb.mean_, R.mean(axis=0), atol=1e-6)
    cov = np.cov(R.T, bias=True)
    eigval, eigvec = np.linalg.eigh(cov)
    eigval, eigvec = eigval[::-1], eigvec[:, ::-1]
    assert eigval[d - 1] > 1.1 * eigval[d]  # a gap, so the top-d subspace is well defined
    P = emb.projection_.astype(np.float64)
    assert np.linalg.norm(eigvec[:, :d].T @ P) < 1e-4 * np.linalg.norm(P)


def test_temb_whitened_learning_set_has_identity_covariance(temb_setup):
    emb, X, d, k = temb_setup
    W = emb.whiten(X).astype(np.float64)
    assert W.shape == (X.shape[0], (k - 1) * d)
    np.testing.assert_allclose(W.mean(axis=0), 0.0, atol=1e-4)
    cov = np.cov(W.T, bias=True)
    D = cov.shape[0]
    lead = cov[:D // 2, :D // 2]  # the largest kept eigenvalues are never clamped
    np.testing.assert_allclose(lead, np.eye(D // 2), atol=2e-3)
    # clamping only lowers the variance of the last components, never raises it
    assert np.diag(cov).max() < 1 + 2e-3
    assert np.diag(cov).min() > 0.05
    np.testing.assert_allclose(cov - np.diag(np.diag(cov)), 0.0, atol=2e-3)
    # the whitened components stay decorrelated and ordered: variance non-increasing
    assert np.all(np.diff(np.diag(cov)) < 2e-3)


def test_temb_clamps_the_smallest_eigenvalues(temb_setup):
    """Eigenvalues below the clamp_quantile quantile are raised to it before
    whitening, so those components keep a variance eigval / floor < 1."""
    emb, X, d, k = temb_setup
    R = triangulation_residuals_reference(X, emb.centroids_)
    eigval = np.linalg.eigvalsh(np.cov(R.T, bias=True))[::-1]
    floor = np.quantile(eigval, emb.clamp_quantile)
    expected = eigval[d:] / np.maximum(eigval[d:], floor)
    assert expected[-1] < 0.8  # clamping matters on this learning set
    var = np.var(emb.whiten(X).astype(np.float64), axis=0)
    np.testing.assert_allclose(var, expected, atol=2e-3)
    # without clamping every kept component is whitened to unit variance
    plain = TriangulationEmbedding(k, seed=0, clamp_quantile=0.0).fit(X)
    np.testing.assert_allclose(np.var(plain.whiten(X).astype(np.float64), axis=0), 1.0, atol=2e-3)


def test_temb_transform_matches_numpy_reference(temb_setup):
    emb, X_learn, d, k = temb_setup
    rng = np.random.default_rng(3)
    X = clustered(rng, 50, d)
    X[7] = emb.centroids_[1]  # a descriptor on an anchor: its residual there is 0, not NaN
    R = triangulation_residuals_reference(X, emb.centroids_)
    Phi = (R - emb.mean_.astype(np.float64)) @ emb.projection_.astype(np.float64)
    Phi /= np.linalg.norm(Phi, axis=1, keepdims=True)
    out = emb.transform(X)
    assert out.dtype == np.float32
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, Phi, atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    # embed is the dense transform for T-emb
    np.testing.assert_array_equal(emb.embed(X), out)


def test_temb_whiten_after_a_refit_uses_the_new_arrays():
    """whiten keeps mean_ @ projection_ between calls: a refit (new arrays) must not reuse it."""
    rng = np.random.default_rng(5)
    emb = TriangulationEmbedding(3, seed=0).fit(clustered(rng, 800, 6))
    X = clustered(rng, 20, 6)
    emb.whiten(X)
    emb.fit(clustered(rng, 800, 6) + 0.5)
    R = triangulation_residuals_reference(X, emb.centroids_)
    Phi = (R - emb.mean_.astype(np.float64)) @ emb.projection_.astype(np.float64)
    np.testing.assert_allclose(emb.whiten(X), Phi, atol=2e-5 * np.abs(Phi).max())


def test_temb_needs_k_at_least_2():
    X = clustered(np.random.default_rng(4), 200, 4)
    with pytest.raises(ConfigError):
        TriangulationEmbedding(1).fit(X)
    with pytest.raises(ConfigError):
        TriangulationEmbedding(4, clamp_quantile=1.0)


# ---------------------------------------------------------------- Fisher vector


def fisher_reference(X, weights, means, sigmas, hard):
    """Loops over descriptors and Gaussians, straight from the formulas."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    k = len(weights)
    Phi = np.zeros((n, k * 2 * d))
    for i in range(n):
        x = X[i]
        logp = np.empty(k)
        for j in range(k):
            logp[j] = (np.log(weights[j]) - 0.5 * d * np.log(2 * np.pi) - np.log(sigmas[j]).sum()
                       - 0.5 * (((x - means[j]) / sigmas[j]) ** 2).sum())
        post = np.exp(logp - logp.max())
        post /= post.sum()
        if hard:
            post = (np.arange(k) == np.argmax(post)).astype(float)
        for j in range(k):
            g, w, mu, s = post[j], weights[j], means[j], sigmas[j]
            G_mu = g / np.sqrt(w) * (x - mu) / s
            G_sigma = g / np.sqrt(2 * w) * ((x - mu) ** 2 / s ** 2 - 1)
            Phi[i, j * 2 * d:(j + 1) * 2 * d] = np.concatenate([G_mu, G_sigma])
    return Phi


@pytest.fixture(scope="module")
def fv_learning():
    return clustered(np.random.default_rng(5), 600, 5, n_centres=3, spread=1.5)


def pca_reference(X, p):
    """Mean and the p leading principal axes (p, d) by SVD of the centred data."""
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0)
    _, _, Vt = np.linalg.svd(X - mean, full_matrices=False)
    return mean, Vt[:p]


@pytest.mark.parametrize("hard", [False, True])
@pytest.mark.parametrize("pca_dim", [None, 3, 5])
def test_fisher_vector_matches_reference(fv_learning, hard, pca_dim):
    """PCA (against an SVD), posteriors and Fisher-normalised gradients (against loops
    over descriptors and Gaussians), scaled by 1 / sqrt(D)."""
    k, d = 3, 5
    p = pca_dim or d
    fv = FisherVector(k, hard=hard, seed=0, pca_dim=pca_dim).fit(fv_learning)
    assert fv.dim == 2 * k * p
    if pca_dim is None:
        mean, axes = np.zeros(d), np.eye(d)
        np.testing.assert_array_equal(fv.pca_components_, axes)
    else:
        mean, axes = pca_reference(fv_learning, p)
        np.testing.assert_allclose(fv.pca_mean_[0], mean, rtol=1e-10, atol=1e-12)
        # the same axes up to their signs (an SVD and an eigendecomposition pick their own)
        np.testing.assert_allclose(np.abs((fv.pca_components_ * axes).sum(axis=1)), 1.0, atol=1e-8)
        axes = fv.pca_components_
    rng = np.random.default_rng(6)
    X = clustered(rng, 40, d, n_centres=3, spread=1.5)
    Y = (X.astype(np.float64) - mean) @ axes.T
    ref = fisher_reference(Y, fv.weights_[0], fv.means_, fv.sigmas_, hard) / np.sqrt(2 * k * p)
    out = fv.transform(X)
    assert out.shape == (40, 2 * k * p) and out.dtype == np.float32
    scale = np.abs(ref).max()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5 * scale)
    if hard:
        blocks = fv.embed(X)
        assert isinstance(blocks, BlockEmbedding)
        np.testing.assert_allclose(blocks.to_dense(), ref, rtol=1e-4, atol=1e-5 * scale)
        # exactly one non-zero block per descriptor
        nz = np.abs(ref.reshape(40, k, 2 * p)).sum(axis=2) > 0
        np.testing.assert_array_equal(nz.sum(axis=1), 1)
    else:
        assert isinstance(fv.embed(X), np.ndarray)
        assert fv.weights_[0].sum() == pytest.approx(1.0)
        # soft posteriors are spread over several Gaussians for some descriptors
        nz = np.abs(ref.reshape(40, k, 2 * p)).sum(axis=2) > 1e-6 * scale
        assert (nz.sum(axis=1) > 1).any()


@pytest.mark.parametrize("hard", [False, True])
def test_fisher_vector_unit_scale(fv_learning, hard):
    """Normalised by the Fisher information, a descriptor's embedding has E ||phi||^2 ~ D
    under the model; the scaling brings it to ~1 (T-emb's rows have norm 1)."""
    scaled = FisherVector(3, hard=hard, seed=0, pca_dim=4).fit(fv_learning)
    raw = FisherVector(3, hard=hard, seed=0, pca_dim=4, unit_scale=False).fit(fv_learning)
    sq = (scaled.transform(fv_learning).astype(np.float64) ** 2).sum(axis=1)
    assert 0.5 < sq.mean() < 2.0
    sq_raw = (raw.transform(fv_learning).astype(np.float64) ** 2).sum(axis=1)
    np.testing.assert_allclose(sq_raw, sq * raw.dim, rtol=1e-4)


def test_fisher_vector_saved_before_pca_loads_unchanged(fv_learning):
    """An FV saved by an earlier streamk (no PCA arrays, no pca_dim / unit_scale
    parameters) loads with both off and gives the same embedding."""
    old = FisherVector(3, seed=0, pca_dim=None, unit_scale=False).fit(fv_learning)
    params, arrays = old.state()
    params = {k: v for k, v in params.items() if k not in ("pca_dim", "unit_scale")}
    arrays = {k: v for k, v in arrays.items() if not k.startswith("pca_")}
    loaded = FisherVector.from_state(params, arrays)
    assert loaded.pca_dim is None and not loaded.unit_scale and loaded.d_ == 5
    np.testing.assert_array_equal(loaded.transform(fv_learning[:20]), old.transform(fv_learning[:20]))
    new = FisherVector(3, seed=0, pca_dim=4).fit(fv_learning)
    again = FisherVector.from_state(*new.state())
    np.testing.assert_array_equal(again.transform(fv_learning[:20]), new.transform(fv_learning[:20]))
    with pytest.raises(ConfigError):
        FisherVector(3, pca_dim=-1)


def test_fisher_posteriors_are_a_distribution(fv_learning):
    fv = FisherVector(3, seed=0).fit(fv_learning)
    post = np.exp(fv.log_posteriors(fv_learning[:100]))
    np.testing.assert_allclose(post.sum(axis=1), 1.0, rtol=1e-10)


def test_fisher_vector_is_centred_on_learning_set(fv_learning):
    """At the maximum-likelihood GMM the expected gradient is ~0: the mean FV of
    the learning set is small compared with a single descriptor's FV."""
    fv = FisherVector(3, seed=0).fit(fv_learning)
    Phi = fv.transform(fv_learning).astype(np.float64)
    assert np.linalg.norm(Phi.mean(axis=0)) < 0.05 * np.linalg.norm(Phi, axis=1).mean()


# ---------------------------------------------------------------- VLAD and BOW


@pytest.fixture(scope="module")
def vq_setup():
    rng = np.random.default_rng(7)
    X_learn = clustered(rng, 500, 6, n_centres=5, spread=3.0)
    return X_learn, clustered(rng, 60, 6, n_centres=5, spread=3.0)


def nearest_reference(X, C):
    out = np.empty(len(X), dtype=int)
    for i, x in enumerate(np.asarray(X, dtype=np.float64)):
        out[i] = np.argmin([np.sum((x - c) ** 2) for c in np.asarray(C, dtype=np.float64)])
    return out


def test_vlad_matches_reference(vq_setup):
    X_learn, X = vq_setup
    k, d = 5, 6
    vlad = VLAD(k, seed=0).fit(X_learn)
    assert vlad.dim == k * d
    C = vlad.centroids_.astype(np.float64)
    a = nearest_reference(X, C)
    ref = np.zeros((len(X), k * d))
    for i, x in enumerate(X.astype(np.float64)):
        ref[i, a[i] * d:(a[i] + 1) * d] = x - C[a[i]]
    np.testing.assert_allclose(vlad.transform(X), ref, atol=1e-5)
    blocks = vlad.embed(X)
    np.testing.assert_array_equal(blocks.assignment, a)
    np.testing.assert_allclose(blocks.to_dense(), ref, atol=1e-5)
    # sum-pooled VLAD: block j = sum of residuals of the descriptors assigned to c_j
    from streamk.encoding.aggregation import aggregate
    xi, _ = aggregate(blocks, "sum")
    expected = np.concatenate([(X[a == j].astype(np.float64) - C[j]).sum(axis=0) for j in range(k)])
    np.testing.assert_allclose(xi, expected, atol=1e-4)


def test_bow_matches_reference(vq_setup):
    X_learn, X = vq_setup
    k = 5
    bow = BagOfWords(k, seed=0).fit(X_learn)
    assert bow.dim == k
    a = nearest_reference(X, bow.centroids_)
    np.testing.assert_array_equal(bow.transform(X), np.eye(k)[a])
    blocks = bow.embed(X)
    np.testing.assert_array_equal(blocks.assignment, a)
    np.testing.assert_array_equal(blocks.values, 1.0)


def test_kmeans_centroids_are_cluster_means(vq_setup):
    """Lloyd's fixed point: each centroid is the mean of the learning descriptors assigned to it."""
    X_learn, _ = vq_setup
    vlad = VLAD(5, seed=0).fit(X_learn)
    a = nearest_reference(X_learn, vlad.centroids_)
    for j in range(5):
        np.testing.assert_allclose(vlad.centroids_[j], X_learn[a == j].astype(np.float64).mean(axis=0), atol=1e-3)


# ---------------------------------------------------------------- errors


ALL = [lambda: TriangulationEmbedding(3), lambda: FisherVector(3), lambda: FisherVector(3, hard=True),
       lambda: VLAD(3), lambda: BagOfWords(3)]


@pytest.mark.parametrize("make", ALL)
def test_unfitted_embedding_raises(make):
    emb = make()
    X = np.ones((4, 5), np.float32)
    with pytest.raises(NotFittedError):
        emb.transform(X)
    with pytest.raises(NotFittedError):
        emb.embed(X)
    with pytest.raises(NotFittedError):
        emb.dim
    with pytest.raises(NotFittedError):
        emb.state()


@pytest.fixture(scope="module")
def fitted_all():
    X = clustered(np.random.default_rng(8), 300, 5, n_centres=3)
    return [make().fit(X) for make in ALL]


def test_bad_descriptor_sets_raise_named_errors(fitted_all):
    for emb in fitted_all:
        good = np.ones((3, 5), np.float32)
        for method in (emb.transform, emb.embed):
            with pytest.raises(EmptyDescriptorSetError):
                method(np.zeros((0, 5), np.float32))
            with pytest.raises(DimensionError):
                method(np.ones((3, 6), np.float32))
            with pytest.raises(DimensionError):
                method(np.ones(5, np.float32))
            for bad in (np.nan, np.inf, -np.inf):
                X = good.copy()
                X[1, 2] = bad
                with pytest.raises(NonFiniteError):
                    method(X)


def test_bad_config_raises_config_error():
    for k in (0, -3):
        for cls in (TriangulationEmbedding, FisherVector, VLAD, BagOfWords):
            with pytest.raises(ConfigError):
                cls(k)
    with pytest.raises(ConfigError):
        make_embedding("sift", 4)
    few = np.ones((3, 5), np.float32)
    for cls in (TriangulationEmbedding, FisherVector, VLAD, BagOfWords):
        with pytest.raises(ConfigError):
            cls(8).fit(few)  # fewer learning descriptors than k
    with pytest.raises(EmptyDescriptorSetError):
        VLAD(2).fit(np.zeros((0, 5)))
    with pytest.raises(NonFiniteError):
        VLAD(2).fit(np.full((10, 5), np.nan))

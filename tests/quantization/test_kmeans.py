"""The coarse quantiser's spherical k-means (Dhillon and Modha 2001) checked against its
definition in plain float64 numpy: Lloyd's objective on the sphere never decreases,
a converged fit is its own fixed point (each centroid the normalised sum of the vectors
nearest to it), no list is left empty; the centroids' common length is the least-squares
one; the codec's lists are the brute-force nearest centroids, also for centroids an
older streamk trained (of unequal lengths)."""

import itertools

import numpy as np
import pytest

from streamk.quantization.ivfpq import IVFPQ, common_length, spherical_kmeans

EPS32 = np.finfo(np.float32).eps


def unit_clusters(rng, n, d, n_clusters, noise):
    """Unit vectors around n_clusters centres; each cluster's spread drawn at random (some
    tight, some broad: what makes plain k-means lists uneven)."""
    centres = rng.standard_normal((n_clusters, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    label = rng.integers(0, n_clusters, n)
    spread = noise * rng.uniform(0.2, 2.0, n_clusters)
    V = centres[label] + spread[label, None] * rng.standard_normal((n, d)) / np.sqrt(d)
    return (V / np.linalg.norm(V, axis=1, keepdims=True)).astype(np.float32)


def objective(V, C):
    """sum_x max_l <x, c_l> in float64: what spherical k-means maximises."""
    return float(np.max(V.astype(np.float64) @ C.astype(np.float64).T, axis=1).sum())


def nearest(V, C):
    """argmax_l <x, c_l> in float64, brute force."""
    return np.argmax(V.astype(np.float64) @ C.astype(np.float64).T, axis=1)


@pytest.fixture(scope="module")
def data():
    return unit_clusters(np.random.default_rng(5), 3000, 48, n_clusters=40, noise=1.0)


def test_centroids_are_unit_and_lists_never_empty(data):
    C = spherical_kmeans(data, 64, 20, seed=0)
    assert C.shape == (64, 48) and C.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(C.astype(np.float64), axis=1), 1.0, atol=8 * EPS32)
    assert (np.bincount(nearest(data, C), minlength=64) > 0).all()


def test_lists_never_empty_with_copies():
    """64 distinct vectors, each 10 times (copies of one image), 32 lists: initial centroids
    drawn twice from one vector leave lists empty; each is given a distinct vector."""
    rng = np.random.default_rng(2)
    V = np.repeat(unit_clusters(rng, 64, 16, n_clusters=8, noise=0.5), 10, axis=0)
    V = V[rng.permutation(len(V))]
    for seed in range(4):
        for n_iter in (1, 2, 10):
            C = spherical_kmeans(V, 32, n_iter, seed=seed)
            assert (np.bincount(nearest(V, C), minlength=32) > 0).all(), (seed, n_iter)


def test_objective_never_decreases(data):
    """Lloyd's iterations on the sphere (the i-th fit stops after i iterations; a fit is
    deterministic for its seed, so these are the iterates of one run)."""
    values = [objective(data, spherical_kmeans(data, 32, i, seed=1)) for i in range(1, 12)]
    tol = 16 * EPS32 * len(data)  # float32 GEMMs choose the nearest centroid
    assert all(b >= a - tol for a, b in itertools.pairwise(values)), values
    assert values[-1] > values[0]


def test_converged_fit_is_its_own_fixed_point(data):
    """Run to convergence, each centroid is the normalised sum of the vectors nearest to
    it (float64), so one more Lloyd step changes nothing."""
    C = spherical_kmeans(data, 16, 300, seed=3)
    assign = nearest(data, C)
    sums = np.zeros((16, data.shape[1]))
    np.add.at(sums, assign, data.astype(np.float64))
    expected = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    np.testing.assert_allclose(C, expected, atol=1e-5)


def test_common_length_is_the_least_squares_length(data):
    """One length rho for every centroid: rho = mean_x <x, u(x)> minimises sum_x |x - rho
    u(x)|^2 given the lists, and the lists stay those of the unit centroids."""
    U = spherical_kmeans(data, 24, 20, seed=0)
    C = common_length(data, U)
    U64, X = U.astype(np.float64), data.astype(np.float64)
    lists = nearest(data, U)
    rho = (X * U64[lists]).sum(1).mean()
    np.testing.assert_allclose(np.linalg.norm(C.astype(np.float64), axis=1), rho, rtol=8 * EPS32)

    def energy(r):
        return ((X - r * U64[lists]) ** 2).sum()
    assert energy(rho) <= min(energy(0.97 * rho), energy(1.03 * rho), energy(1.0))
    d2 = ((X[:, None, :] - C.astype(np.float64)[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(d2.argmin(1), lists)  # equal lengths: the nearest is the inner-product rule


def test_codec_centroids_share_one_length(data):
    codec = IVFPQ(nlist=32, M=8, seed=0).fit(data)
    norms = np.linalg.norm(codec.centroids_.astype(np.float64), axis=1)
    np.testing.assert_allclose(norms, norms.mean(), rtol=8 * EPS32)
    assert 0 < norms.mean() < 1  # unit vectors: a cluster's mean projection on its direction


def test_codec_lists_are_the_nearest_centroids(data):
    codec = IVFPQ(nlist=32, M=8, seed=0).fit(data)
    lists, _ = codec.encode(data)
    C = codec.centroids_.astype(np.float64)
    d2 = ((data.astype(np.float64)[:, None, :] - C[None]) ** 2).sum(-1)
    G = data.astype(np.float64) @ C.T
    ok = np.take_along_axis(d2, lists[:, None].astype(np.int64), axis=1)[:, 0] <= d2.min(1) + 8 * EPS32
    assert ok.all()  # brute-force argmin |x - c|^2 (up to float32 ties) ...
    assert (np.take_along_axis(G, lists[:, None].astype(np.int64), axis=1)[:, 0] >= G.max(1) - 8 * EPS32).all()
    # ... which is argmax <x, c> for centroids of one length


def test_codecs_trained_before_keep_their_lists(data):
    """An older codec's centroids were plain k-means means (not unit): it encodes as
    before, by argmin |x - c|^2."""
    codec = IVFPQ(nlist=16, M=8, seed=0).fit(data)
    old = IVFPQ.from_bytes(codec.to_bytes())
    old.centroids_ = (old.centroids_ * np.random.default_rng(0).uniform(0.3, 0.9, (16, 1))).astype(np.float32)
    lists, _ = old.encode(data)
    C = old.centroids_.astype(np.float64)
    d2 = ((data.astype(np.float64)[:, None, :] - C[None]) ** 2).sum(-1)
    chosen = np.take_along_axis(d2, lists[:, None].astype(np.int64), axis=1)[:, 0]
    assert (chosen <= d2.min(1) + 8 * EPS32).all()
    assert (lists != nearest(data, C)).any()  # not the inner-product rule: the norms count

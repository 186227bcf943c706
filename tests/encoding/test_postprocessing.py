"""Post-processing: power-law, L2, and RN (PCA rotation completed to an
orthonormal basis, then power-law and L2; reduction keeps the first D')."""

import numpy as np
import pytest

from streamk.errors import ConfigError, DimensionError, NonFiniteError, NotFittedError
from streamk.encoding.postprocessing import RotationNormalisation, l2_normalize, postprocess, power_law


# ---------------------------------------------------------------- power-law and L2


def test_power_law_by_hand():
    a = np.array([-4.0, 0.0, 9.0, 0.25, -0.01])
    np.testing.assert_allclose(power_law(a, 0.5), [-2.0, 0.0, 3.0, 0.5, -0.1], rtol=1e-12)
    np.testing.assert_allclose(power_law(a, 2.0), [-16.0, 0.0, 81.0, 0.0625, -1e-4], rtol=1e-12)
    np.testing.assert_allclose(power_law(a, 1.0), a, rtol=0)
    # 2-D, component-wise
    A = np.array([[8.0, -27.0], [0.0, 1.0]])
    np.testing.assert_allclose(power_law(A, 1 / 3), [[2.0, -3.0], [0.0, 1.0]], rtol=1e-12)


def test_power_law_zero_binarises_and_keeps_zero():
    a = np.array([-4.0, 0.0, 9.0, 0.25, -0.01, 0.0])
    np.testing.assert_array_equal(power_law(a, 0.0), [-1.0, 0.0, 1.0, 1.0, -1.0, 0.0])


def test_power_law_does_not_modify_its_input():
    a = np.array([4.0, -9.0])
    power_law(a, 0.5)
    np.testing.assert_array_equal(a, [4.0, -9.0])


def test_l2_normalize():
    np.testing.assert_allclose(l2_normalize(np.array([3.0, 4.0])), [0.6, 0.8])
    np.testing.assert_allclose(l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0], [0.0, -2.0]])),
                               [[0.6, 0.8], [0.0, 0.0], [0.0, -1.0]])


def test_postprocess_without_rn_by_hand():
    xi = np.array([4.0, -9.0, 0.0, 36.0])
    expected = np.array([2.0, -3.0, 0.0, 6.0]) / 7.0
    np.testing.assert_allclose(postprocess(xi, 0.5), expected, rtol=1e-12)
    np.testing.assert_allclose(postprocess(np.stack([xi, 2 * xi]), 0.5), [expected, expected], rtol=1e-12)


# ---------------------------------------------------------------- RN


def anisotropic_vectors(rng, N, D):
    """Gaussian vectors with distinct variances along a random basis (clear eigen-gaps)."""
    Q, _ = np.linalg.qr(rng.standard_normal((D, D)))
    scales = 2.0 ** -np.arange(D / 2, step=0.5)[:D]
    return 0.3 + (rng.standard_normal((N, D)) * scales) @ Q.T


def top_eigenvectors(V, r):
    Vc = V - V.mean(axis=0)
    eigval, eigvec = np.linalg.eigh(Vc.T @ Vc)
    return eigvec[:, ::-1][:, :r], eigval[::-1]


def projector(U):
    return U @ U.T


@pytest.mark.parametrize("N,D,n_components,r", [
    (200, 12, 5, 5),     # r = n_components (eigh path, N > D)
    (200, 12, 100, 12),  # r = D
    (8, 12, 100, 7),     # r = N - 1 (SVD path, N <= D)
    (10, 12, 4, 4),      # r = n_components on the SVD path
])
def test_rn_basis_is_orthonormal_and_starts_with_pca(N, D, n_components, r):
    rng = np.random.default_rng(N + D + n_components)
    V = anisotropic_vectors(rng, N, D)
    rn = RotationNormalisation(n_components).fit(V)
    assert rn.input_dim == rn.output_dim == D
    assert len(rn.signs_) == r
    B = rn.basis()
    assert B.shape == (D, D)
    np.testing.assert_allclose(B.T @ B, np.eye(D), atol=1e-10)
    U, eigval = top_eigenvectors(V, r)
    assert r == D or eigval[r - 1] > 1.05 * eigval[r]  # the top-r subspace is well defined
    np.testing.assert_allclose(projector(B[:, :r]), projector(U), atol=1e-8)
    # each of the first r columns is one PCA eigenvector (up to sign), in decreasing order
    assert (eigval[:r - 1] > 1.05 * eigval[1:r]).all()
    np.testing.assert_allclose(np.abs(np.sum(B[:, :r] * U, axis=0)), 1.0, atol=1e-6)
    # rotation of the centred learning vectors: first r components are the PCA
    # projections (up to sign), and when r = N - 1 nothing is left beyond them
    Vc = V - V.mean(axis=0)
    rot = rn.rotate(V)
    np.testing.assert_allclose(np.abs(rot[:, :r]), np.abs(Vc @ U), atol=1e-8)
    np.testing.assert_allclose(np.linalg.norm(rot, axis=1), np.linalg.norm(Vc, axis=1), rtol=1e-10)
    if r == N - 1:
        np.testing.assert_allclose(rot[:, r:], 0.0, atol=1e-10)


def test_rn_rotation_is_the_basis():
    rng = np.random.default_rng(20)
    V = anisotropic_vectors(rng, 50, 10)
    rn = RotationNormalisation(6).fit(V)
    B = rn.basis()
    W = anisotropic_vectors(rng, 7, 10)
    np.testing.assert_allclose(rn.transform(W), (W - V.mean(axis=0)) @ B, atol=1e-10)


def test_rn_reduction_keeps_first_components():
    rng = np.random.default_rng(21)
    V = anisotropic_vectors(rng, 60, 10)
    W = anisotropic_vectors(rng, 5, 10)
    U, _ = top_eigenvectors(V, 10)
    full = RotationNormalisation(6).fit(V)
    Wc = W - V.mean(axis=0)
    for dim in (1, 3, 6, 8, 10):
        rn = RotationNormalisation(6, dim=dim).fit(V)
        assert rn.output_dim == dim
        out = rn.transform(W)
        assert out.shape == (5, dim)
        np.testing.assert_allclose(out, full.rotate(W)[:, :dim], atol=1e-10)
        k = min(dim, 6)  # the PCA part, up to the sign of each eigenvector
        np.testing.assert_allclose(np.abs(out[:, :k]), np.abs(Wc @ U[:, :k]), atol=1e-8)


def test_postprocess_with_rn():
    """L2, rotate and keep D', power-law, L2 -- written out in numpy."""
    rng = np.random.default_rng(22)
    V = anisotropic_vectors(rng, 40, 9)
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    rn = RotationNormalisation(5, dim=4).fit(V)
    B = rn.basis()
    xi = 3.0 * anisotropic_vectors(rng, 3, 9)
    x = xi / np.linalg.norm(xi, axis=1, keepdims=True)
    y = ((x - V.mean(axis=0)) @ B)[:, :4]
    y = np.sign(y) * np.abs(y) ** 0.5
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    out = postprocess(xi, 0.5, rn)
    np.testing.assert_allclose(out, y, atol=1e-10)
    np.testing.assert_allclose(postprocess(xi[0], 0.5, rn), y[0], atol=1e-10)


def test_rn_state_round_trip():
    rng = np.random.default_rng(23)
    V = anisotropic_vectors(rng, 30, 8)
    rn = RotationNormalisation(4, dim=6).fit(V)
    params, arrays = rn.state()
    rn2 = RotationNormalisation.from_state(params, arrays)
    np.testing.assert_array_equal(rn2.transform(V), rn.transform(V))


def test_rn_errors():
    with pytest.raises(ConfigError):
        RotationNormalisation(0)
    with pytest.raises(ConfigError):
        RotationNormalisation(5, dim=0)
    with pytest.raises(NotFittedError):
        RotationNormalisation(5).transform(np.ones((2, 3)))
    with pytest.raises(NotFittedError):
        RotationNormalisation(5).basis()
    with pytest.raises(ConfigError):
        RotationNormalisation(5).fit(np.ones((1, 4)))  # needs 2 images
    with pytest.raises(ConfigError):
        RotationNormalisation(5, dim=5).fit(np.random.default_rng(0).standard_normal((10, 4)))  # D' > D
    with pytest.raises(NonFiniteError):
        RotationNormalisation(5).fit(np.array([[1.0, np.nan], [0.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(DimensionError):
        RotationNormalisation(5).fit(np.zeros((0, 4)))

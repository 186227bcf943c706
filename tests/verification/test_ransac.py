"""RANSAC: planted affine maps among outliers (cv2.estimateAffine2D as the reference),
and the inlier count of an exhaustive search equal to a brute-force count."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamk.verification import apply_affine, ransac_affine
from streamk.errors import ConfigError, DimensionError

cv2 = pytest.importorskip("cv2")


def random_frames(rng, n):
    return np.stack([rng.uniform(5, 30, n), rng.uniform(-10, 10, n), rng.uniform(5, 30, n)], axis=1)


def lq(B):
    """B = L R(theta), L lower triangular with a positive diagonal (det B > 0)."""
    Q, R = np.linalg.qr(B.T)
    D = np.diag(np.sign(np.diag(R)))
    L, Qt = R.T @ D, D @ Q.T
    return L, math.atan2(Qt[1, 0], Qt[0, 0])


def planted(rng, M, t, n_in, n_out, noise=0.5, frame_noise=0.02, keep_theta=True):
    """n_in correspondences consistent with p -> M p + t (their frames mapped by M too),
    then n_out outliers; rows shuffled."""
    n = n_in + n_out
    P1 = rng.uniform(0, 1000, (n, 2))
    F1 = random_frames(rng, n)
    P2 = P1 @ M.T + t + rng.normal(0, noise, (n, 2))
    F2 = np.empty_like(F1)
    T2 = np.zeros(n)
    for k in range(n):
        A1 = np.array([[F1[k, 0], 0], [F1[k, 1], F1[k, 2]]])
        L, theta = lq(M @ A1)
        L = L * (1 + rng.uniform(-frame_noise, frame_noise, (2, 2)))
        F2[k] = L[0, 0], L[1, 0], L[1, 1]
        T2[k] = theta if keep_theta else 0.0
    P2[n_in:] = rng.uniform(-200, 1200, (n_out, 2))
    F2[n_in:] = random_frames(rng, n_out)
    T2[n_in:] = rng.uniform(-np.pi, np.pi, n_out) if keep_theta else 0.0
    perm = rng.permutation(n)
    inl = np.zeros(n, bool)
    inl[:n_in] = True
    return P1[perm], P2[perm], F1[perm], F2[perm], T2[perm], inl[perm]


def grid_error(A, M, t):
    G = np.stack(np.meshgrid(np.linspace(0, 1000, 5), np.linspace(0, 1000, 5)), -1).reshape(-1, 2)
    return np.abs(apply_affine(A, G) - (G @ M.T + t)).max()


@pytest.mark.parametrize("seed", range(5))
def test_planted_gravity_affine_among_70_percent_outliers(seed):
    rng = np.random.default_rng(seed)
    M = np.array([[rng.uniform(0.5, 2), 0.0], [rng.uniform(-0.3, 0.3), rng.uniform(0.5, 2)]])  # upright: no rotation
    t = rng.uniform(-300, 300, 2)
    P1, P2, F1, F2, _, inl = planted(rng, M, t, 60, 140, keep_theta=False)
    r = ransac_affine(P1, P2, F1, F2, 5.0, 5.0)
    ref, mask = cv2.estimateAffine2D(P1, P2, method=cv2.RANSAC, ransacReprojThreshold=5.0, maxIters=5000,
                                     confidence=0.999, refineIters=10)
    truth = set(np.flatnonzero(inl))
    ours = set(r.inlier_positions.tolist())
    theirs = set(np.flatnonzero(mask.ravel()))
    assert len(ours & truth) >= 0.95 * len(truth) and len(ours - truth) <= 3
    assert abs(len(ours) - len(theirs)) <= 3
    assert grid_error(r.affine, M, t) < 2.0
    assert grid_error(r.affine, ref[:, :2], ref[:, 2]) < 2.0  # agrees with OpenCV's model
    assert r.inliers == len(r.inlier_positions)


@pytest.mark.parametrize("seed", range(3))
def test_planted_rotation_with_oriented_frames(seed):
    """Frames with orientations (rotation-invariant features): one correspondence gives the rotation."""
    rng = np.random.default_rng(100 + seed)
    a = rng.uniform(-np.pi, np.pi)
    M = rng.uniform(0.6, 1.6) * np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    t = rng.uniform(-300, 300, 2)
    P1, P2, F1, F2, T2, inl = planted(rng, M, t, 40, 160)
    r = ransac_affine(P1, P2, F1, F2, 5.0, 5.0, query_theta=np.zeros(len(P1)), candidate_theta=T2)
    assert set(np.flatnonzero(inl)) <= set(r.inlier_positions.tolist()) | set(np.flatnonzero(inl)[:2])
    assert grid_error(r.affine, M, t) < 2.0


def test_upright_frames_of_a_rotated_view_need_rotation_hypotheses():
    rng = np.random.default_rng(7)
    a = np.deg2rad(25.0)
    M = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    t = np.array([50.0, -20.0])
    P1, P2, F1, F2, _, inl = planted(rng, M, t, 40, 160, keep_theta=False)  # orientation lost (upright)
    r = ransac_affine(P1, P2, F1, F2, 5.0, 5.0, rotations=tuple(range(-30, 31, 10)))
    assert grid_error(r.affine, M, t) < 2.0
    assert len(set(r.inlier_positions.tolist()) & set(np.flatnonzero(inl))) >= 38


def brute_force_best(P1, P2, F1, F2, qid, did, tq, tc, max_scale=10.0, max_anisotropy=4.0):
    """Every single-correspondence hypothesis (upright frames) that is plausible (scale
    change and singular-value ratio; upright hypotheses keep the vertical), counted with
    the rule written plainly: symmetric transfer error, one-to-one greedy in row order."""
    best = 0
    for k in range(len(P1)):
        A1 = np.array([[F1[k, 0], 0], [F1[k, 1], F1[k, 2]]])
        A2 = np.array([[F2[k, 0], 0], [F2[k, 1], F2[k, 2]]])
        M = A2 @ np.linalg.inv(A1)
        s = math.sqrt(np.linalg.det(M))
        sv = np.linalg.svd(M, compute_uv=False)
        if not (1 / max_scale <= s <= max_scale) or sv[0] > max_anisotropy * sv[1]:
            continue
        t = P2[k] - M @ P1[k]
        Mi = np.linalg.inv(M)
        used_q, used_d, n = set(), set(), 0
        for j in range(len(P1)):
            if np.sum((M @ P1[j] + t - P2[j]) ** 2) > tc * tc:
                continue
            if np.sum((Mi @ (P2[j] - t) - P1[j]) ** 2) > tq * tq:
                continue
            if qid[j] in used_q or did[j] in used_d:
                continue
            used_q.add(qid[j])
            used_d.add(did[j])
            n += 1
        best = max(best, n)
    return best


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_in=st.integers(0, 12), n_out=st.integers(0, 12),
       n_ids=st.integers(3, 30))
def test_exhaustive_inlier_count_equals_brute_force(seed, n_in, n_out, n_ids):
    rng = np.random.default_rng(seed)
    M = np.array([[rng.uniform(0.5, 2), 0.0], [rng.uniform(-0.5, 0.5), rng.uniform(0.5, 2)]])
    P1, P2, F1, F2, _, _ = planted(rng, M, rng.uniform(-100, 100, 2), n_in, n_out, noise=3.0, frame_noise=0.1,
                                   keep_theta=False)
    T = len(P1)
    qid = rng.integers(0, n_ids, T)  # shared features: the one-to-one rule matters
    did = rng.integers(0, n_ids, T)
    r = ransac_affine(P1, P2, F1, F2, 6.0, 4.0, query_ids=qid, candidate_ids=did, lo_iterations=0,
                      confidence=1.0, max_hypotheses=max(T, 1))
    assert r.inliers == brute_force_best(P1, P2, F1, F2, qid, did, 6.0, 4.0)
    # local optimisation only ever adds inliers
    r_lo = ransac_affine(P1, P2, F1, F2, 6.0, 4.0, query_ids=qid, candidate_ids=did, confidence=1.0,
                         max_hypotheses=max(T, 1))
    assert r_lo.inliers >= r.inliers


def test_deterministic_and_no_global_rng():
    rng = np.random.default_rng(3)
    M = np.array([[1.2, 0.0], [0.1, 0.9]])
    P1, P2, F1, F2, _, _ = planted(rng, M, np.array([10.0, 5.0]), 30, 70, keep_theta=False)
    state = np.random.get_state()
    a = ransac_affine(P1, P2, F1, F2, 5.0, 5.0)
    b = ransac_affine(P1, P2, F1, F2, 5.0, 5.0)
    assert a.inliers == b.inliers and np.array_equal(a.affine, b.affine)
    assert np.array_equal(a.inlier_positions, b.inlier_positions)
    assert np.random.get_state()[1].tolist() == state[1].tolist()


def test_too_few_correspondences_and_bad_parameters():
    P = np.zeros((2, 2))
    F = np.ones((2, 3))
    r = ransac_affine(P, P + 1, F, F, 5.0, 5.0)
    assert r.inliers <= 2 and np.isnan(r.affine).all()
    with pytest.raises(ConfigError):
        ransac_affine(P, P, F, F, -1.0, 5.0)
    with pytest.raises(ConfigError):
        ransac_affine(P, P, F, F, 5.0, 5.0, confidence=0.0)
    with pytest.raises(DimensionError):
        ransac_affine(P, np.zeros((3, 2)), F, F, 5.0, 5.0)
    with pytest.raises(DimensionError):
        ransac_affine(P, P, F, -F, 5.0, 5.0)

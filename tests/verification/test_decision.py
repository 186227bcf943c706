"""Verification whose yes means yes: only plausible models count (synthetic transforms
accepted and refused), and the decision is a significance test (the number of false
alarms against scipy's binomial tail; refused for random matches, accepted for a true
transform)."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from streamk.verification import VerificationParams, make_query_record, make_record, ransac_affine, verify_geometry
from streamk.verification import _ransac_kernels as _k

W, H = 1024, 768
WHOLE = np.array([(-0.5, -0.5), (W - 0.5, -0.5), (W - 0.5, H - 0.5), (-0.5, H - 0.5)])
LIMITS = (10.0, 4.0, math.tan(math.radians(30.0)), 0.5)  # the defaults: scale, anisotropy, tilt, overlap


def model(M, t=(0.0, 0.0)):
    M = np.asarray(M, np.float64)
    return np.array([M[0, 0], M[0, 1], M[1, 0], M[1, 1], t[0], t[1]])


def plausible(m, region=WHOLE, size=(W, H)):
    scale, aniso, tilt, overlap = LIMITS
    return _k.plausible(m, scale, aniso, tilt, np.ascontiguousarray(region, np.float64), size[0], size[1], overlap,
                        np.empty((20, 2)))


def rotation(deg, s=1.0):
    a = math.radians(deg)
    return s * np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])


def about_centre(M, size=(W, H)):
    """The model M about the image centre (the region stays over the image)."""
    c = np.array([size[0] / 2, size[1] / 2])
    return model(M, c - np.asarray(M) @ c)


ISSUE_REGION = np.array([[-106, 847], [967, -266], [1346, -64], [272, 1048]], np.float64)


def map_onto(corners, region=WHOLE):
    """The affine map taking region's first three corners onto ``corners``' (a
    parallelogram's fourth follows)."""
    A = np.hstack([region[:3], np.ones((3, 1))])
    sol = np.linalg.solve(A, corners[:3])  # (3, 2): [M^T; t]
    return model(sol[:2].T, sol[2])


@pytest.mark.parametrize("name, M", [
    ("identity", np.eye(2)),
    ("similarity, half size, turned 10 degrees", rotation(10, 0.5)),
    ("similarity, twice the size, turned -20 degrees", rotation(-20, 2.0)),
    ("mild affine: a facade seen 50 degrees aside", np.array([[math.cos(math.radians(50)), 0.0], [0.1, 1.0]])),
    ("mild affine: shear 0.4", np.array([[1.0, 0.0], [0.4, 1.1]])),
])
def test_views_of_one_scene_are_plausible(name, M):
    assert plausible(about_centre(M)), name


@pytest.mark.parametrize("name, M", [
    ("mirror", np.array([[-1.0, 0.0], [0.0, 1.0]])),
    ("upside down mirror", np.array([[1.0, 0.0], [0.0, -1.0]])),
    ("extreme shear", np.array([[1.0, 3.0], [0.0, 1.0]])),
    ("extreme shear along the vertical", np.array([[1.0, 0.0], [3.0, 1.0]])),
    ("collapse onto a line", np.array([[1.0, 0.0], [0.0, 0.01]])),
    ("flat", np.array([[1.0, 1.0], [1.0, 1.0]])),
    ("scale change 20", 20 * np.eye(2)),
    ("turned 60 degrees (upright features)", rotation(60)),
    ("squeezed 5 times", np.array([[1.0, 0.0], [0.0, 0.2]])),
])
def test_implausible_maps_are_refused(name, M):
    assert not plausible(about_centre(M)), name


def test_the_region_of_the_issue_is_refused():
    """The accepted region of issue 24: a quadrilateral whose box edges turn by 46 and 62
    degrees (the whole 1024 x 768 query onto a 1024 x 768 result)."""
    m = map_onto(ISSUE_REGION)
    mapped = WHOLE @ m[:4].reshape(2, 2).T + m[4:]
    assert np.abs(mapped - ISSUE_REGION).max() < 2.0  # the same quadrilateral, up to the issue's rounding
    assert not plausible(m)
    assert not plausible(m, size=(H, W))


def test_a_crossed_quadrilateral_is_refused():
    """Corners in a crossed order (a bow tie) are not a view of the region, whatever the map."""
    crossed = WHOLE[[0, 1, 3, 2]]
    scratch = np.empty((20, 2))
    assert not _k.region_ok(model(np.eye(2)), crossed, W, H, 0.5, scratch)
    assert _k.region_ok(model(np.eye(2)), WHOLE, W, H, 0.5, scratch)


def test_the_mapped_region_falls_mostly_inside_the_result():
    box = np.array([(100.0, 100.0), (500.0, 100.0), (500.0, 400.0), (100.0, 400.0)])  # a query box
    assert plausible(model(np.eye(2), (300.0, 0.0)), box)  # shifted, inside
    assert plausible(model(np.eye(2), (700.0, 0.0)), box)  # 1/4 of it out
    assert not plausible(model(np.eye(2), (850.0, 0.0)), box)  # 5/8 out
    assert not plausible(model(np.eye(2), (-2000.0, 0.0)), box)  # off the image
    # the whole query zoomed in 3 times: most of the query is outside, but it covers the result
    assert plausible(about_centre(3.0 * np.eye(2)))
    # ... and shifted so that it covers a quarter of the result only
    assert not plausible(model(3.0 * np.eye(2), (W * 0.75, H * 0.75)))


def planted(rng, M, t, n_in, n_out, size=1000.0):
    P1 = rng.uniform(0, size, (n_in + n_out, 2))
    P2 = P1 @ M.T + t + rng.normal(0, 0.5, P1.shape)
    P2[n_in:] = rng.uniform(0, size, (n_out, 2))
    F = np.tile([10.0, 0.0, 10.0], (n_in + n_out, 1))
    F2 = np.tile([10.0, 0.0, 10.0], (n_in + n_out, 1))
    F2[:n_in] = [10.0 * abs(M[0, 0]), 10.0 * M[1, 0], 10.0 * abs(M[1, 1])]  # frames as far as they go
    return P1, P2, F, F2


def test_ransac_finds_a_mirror_image_nowhere():
    """Planted mirror: least squares fits it perfectly, but no plausible model explains it."""
    rng = np.random.default_rng(1)
    mirror = np.array([[-1.0, 0.0], [0.0, 1.0]])
    P1, P2, F1, F2 = planted(rng, mirror, np.array([1000.0, 0.0]), 60, 60)
    r = ransac_affine(P1, P2, F1, F2, 5.0, 5.0)
    assert r.inliers < 10
    assert not np.isfinite(r.affine).all() or np.linalg.det(r.affine[:, :2]) > 0
    same = np.eye(2)
    P1, P2, F1, F2 = planted(rng, same, np.array([30.0, -20.0]), 60, 60)
    assert ransac_affine(P1, P2, F1, F2, 5.0, 5.0).inliers >= 58


# ---------------------------------------------------------------- the significance test

@pytest.mark.parametrize("n, p", [(50, 1e-3), (300, 1.7e-3), (1200, 4e-3), (5000, 1e-4), (40, 0.2)])
def test_the_binomial_tail_equals_scipys(n, p):
    for k in range(int(n * p) + 1, min(n, int(n * p) + 60) + 1):
        ref = binom.logsf(k - 1, n, p) / math.log(10)
        assert _k.log10_binomial_tail(n, k, p) == pytest.approx(ref, rel=1e-9, abs=1e-9), k


def nfa_reference(k, n, p):
    """log10 [(n - 3) C(n, 3) P[Bin(n - 3, p) >= k - 3]], in plain Python and scipy."""
    return math.log10((n - 3) * math.comb(n, 3)) + math.log10(binom.sf(k - 4, n - 3, p))


@pytest.mark.parametrize("k, n", [(8, 40), (12, 60), (12, 800), (25, 800), (40, 300), (100, 1500)])
def test_the_number_of_false_alarms_equals_its_formula(k, n):
    p = math.pi * (0.02 * W) ** 2 / (W * H)
    assert _k.log10_nfa(k, n, p) == pytest.approx(nfa_reference(k, n, p), rel=1e-9, abs=1e-9)
    assert _k.log10_nfa(3, n, p) == math.inf  # three correspondences test nothing


def adaptive_nfa_reference(pairs, affine, n, thr_q, thr_d, area, floor):
    """ORSA's adaptive tolerance in numpy and scipy: the inliers' error ratios (the larger of
    transfer / thr_d and back-transfer / thr_q), sorted; the least NFA over j of j inliers
    within the j-th ratio times the tolerance (the ratio floored), a chance inlier's probability
    the smaller of the transfer disc and the back-transfer ellipse over the area."""
    P = np.asarray(pairs, np.float64)
    M, t = affine[:, :2], affine[:, 2]
    fwd = np.linalg.norm(P[:, :2] @ M.T + t - P[:, 2:], axis=1) / thr_d
    Mi = np.linalg.inv(M)
    bwd = np.linalg.norm((P[:, 2:] - t) @ Mi.T - P[:, :2], axis=1) / thr_q
    ratio = np.maximum(np.sort(np.maximum(fwd, bwd)), floor)
    p0 = math.pi * min(thr_d ** 2, thr_q ** 2 * np.linalg.det(M)) / area
    return min(nfa_reference(j, n, p0 * ratio[j - 1] ** 2) for j in range(4, len(P) + 1))


def test_the_adaptive_tolerance_equals_its_formula():
    """The least NFA over the inliers' own tolerances (ORSA), against the kernel, on inlier
    ratios of every order of magnitude; never above the NFA at the full tolerance."""
    rng = np.random.default_rng(3)
    p = math.pi * (0.02 * W) ** 2 / (W * H)
    for n, k in ((40, 8), (300, 25), (1500, 60)):
        ratios = np.sort(rng.uniform(0, 1, k) ** rng.uniform(1, 4)) ** 2
        got = _k.log10_nfa_adaptive(ratios, k, n, p, 1e-4)
        ref = min(nfa_reference(j, n, p * max(ratios[j - 1], 1e-4)) for j in range(4, k + 1))
        assert got == pytest.approx(ref, rel=1e-9, abs=1e-9)
        assert got <= nfa_reference(k, n, p) + 1e-9
    assert _k.log10_nfa_adaptive(np.zeros(3), 3, 50, p, 1e-4) == math.inf


@pytest.mark.parametrize("name, M, exact", [
    ("half size: the ellipse (a disc) inside the transfer disc", rotation(20, 0.5), True),
    ("twice the size: the transfer disc inside the ellipse", rotation(-10, 2.0), True),
    ("a facade seen aside, det 0.6", np.array([[0.6, 0.0], [0.2, 1.0]]), False),
    ("stretched one way, shrunk the other, det 1", np.array([[1.6, 0.1], [0.0, 0.625]]), False),
])
def test_a_chance_inlier_s_probability_bounds_a_uniform_point(name, M, exact):
    """The background model itself, drawn: a candidate point uniform in the image is an inlier
    of the model (transfer within thr_d, back-transfer within thr_q) at most as often as the
    kernel's probability, the smaller of pi thr_d^2 and pi thr_q^2 det M over the area; as often
    (within 4 sigma of 400,000 draws) when one region holds the other."""
    rng = np.random.default_rng(11)
    thr_q, thr_d = 20.0, 25.0
    p1 = np.array([500.0, 380.0])
    t = np.array([W / 2, H / 2]) - M @ p1  # p1 transferred to the image centre: both regions inside
    m = model(M, t)
    got = _k.chance_probability(math.pi * thr_d ** 2 / (W * H), m, thr_q ** 2, thr_d ** 2)
    assert got == pytest.approx(math.pi * min(thr_d ** 2, thr_q ** 2 * np.linalg.det(M)) / (W * H), rel=1e-12)
    X = rng.uniform(0, [W, H], (400_000, 2))
    fwd = np.sum((X - (M @ p1 + t)) ** 2, axis=1) <= thr_d ** 2
    bwd = np.sum(((X - t) @ np.linalg.inv(M).T - p1) ** 2, axis=1) <= thr_q ** 2
    freq = np.mean(fwd & bwd)
    sigma = math.sqrt(got / len(X))
    assert freq <= got + 4 * sigma
    if exact:
        assert abs(freq - got) <= 4 * sigma
    else:
        assert got < math.pi * thr_d ** 2 / (W * H) or np.linalg.det(M) * thr_q ** 2 >= thr_d ** 2


def collinear_reference(P, thr, off_line):
    """numpy: set aside the point farthest from the principal axis, off_line times (refitting),
    then compare the smaller covariance eigenvalue of the rest with thr^2 / 3."""
    P = np.asarray(P, np.float64)
    if len(P) - off_line < 3:
        return True
    for _ in range(off_line):
        V = np.linalg.eigh(np.cov(P.T, bias=True))[1]
        d = np.abs((P - P.mean(axis=0)) @ V[:, 0])  # distance to the line: along the minor axis
        P = np.delete(P, np.argmax(d), axis=0)
    return np.linalg.eigvalsh(np.cov(P.T, bias=True))[0] < thr * thr / 3


@pytest.mark.parametrize("across", [0.0, 0.3, 0.5, 0.7, 1.0, 3.0])
def test_collinear_inliers_against_numpy(across):
    """Points spread along a line and, uniformly, +-across x thr across it, two of them anywhere:
    the kernel against numpy's eigen-decomposition; with two set aside, still a line."""
    rng = np.random.default_rng(int(10 * across))
    thr = 20.0
    for _ in range(20):
        n = int(rng.integers(5, 60))
        t = rng.uniform(-400, 400, n)
        u = rng.uniform(-across * thr, across * thr, n)
        a = rng.uniform(0, math.pi)
        P = np.stack([500 + t * math.cos(a) - u * math.sin(a), 400 + t * math.sin(a) + u * math.cos(a)], axis=1)
        P[:2] = rng.uniform(0, 1000, (2, 2))
        idx = rng.permutation(n + 5)[:n]
        Q = np.zeros((n + 5, 2))
        Q[idx] = P
        for off_line in (0, 1, 2):
            got = _k.collinear(Q, idx, n, thr * thr, off_line)
            assert got == collinear_reference(P, thr, off_line)
        if across <= 0.5:  # |u| <= thr / 2: a mean square below thr^2 / 12
            assert got


def test_inliers_along_one_line_are_not_verified(random_vocabulary):
    """A lattice repeated along a line (a girder, a windmill's sail) matches another by a
    translation along it: many inliers, but they determine no affine map. The same matches
    spread over the image are verified."""
    rng = np.random.default_rng(11)
    for along_a_line in (True, False):
        q, c = scene(rng, random_vocabulary, 400, 40, t=(60.0, 30.0), row=300.0 if along_a_line else None)
        v, = verify_geometry(q, [c])
        assert v.inliers >= 30
        assert v.verified != along_a_line
        assert (v.log10_nfa == math.inf) == along_a_line
        assert v.why == ("one-line" if along_a_line else None)


def test_the_threshold_adapts_to_the_tentative_matches():
    """The module docstring's example: 12 inliers out of 60 are significant, out of 800 not."""
    p = math.pi * (0.02 * W) ** 2 / (W * H)
    eps = math.log10(VerificationParams().false_alarms_per_pair)
    assert nfa_reference(12, 60, p) <= eps < nfa_reference(12, 800, p)


def scene(rng, vocabulary, n, n_true, M=None, t=(0.0, 0.0), row=None):
    """A query of n features and a candidate with the same descriptors (every feature a
    tentative match of its copy): the first n_true copies where M puts them, the others
    anywhere in the candidate (chance matches: the background model). row: the first n_true
    query features on that row of pixels (+-4), not spread over the image."""
    desc = rng.integers(0, 120, (n, 128)).astype(np.uint8)
    kp = np.zeros((n, 6))
    kp[:, :2] = rng.uniform(0, [W, H], (n, 2))
    if row is not None:
        kp[:n_true, 1] = row + rng.uniform(-4, 4, n_true)
    kp[:, 2] = kp[:, 4] = rng.uniform(4, 12, n)
    kp2 = kp.copy()
    kp2[:, :2] = rng.uniform(0, [W, H], (n, 2))
    if n_true:
        M = np.eye(2) if M is None else M
        kp2[:n_true, :2] = kp[:n_true, :2] @ M.T + t + rng.normal(0, 1.0, (n_true, 2))
        kp2[:n_true, 2] *= M[0, 0]
        kp2[:n_true, 3] = kp[:n_true, 2] * M[1, 0]
        kp2[:n_true, 4] *= M[1, 1]
    return make_query_record(vocabulary, kp, desc, (W, H)), make_record(vocabulary, kp2, desc, (W, H))


def test_random_matches_are_never_verified(random_vocabulary):
    """60 pairs of unrelated 'images' with hundreds of chance matches each: none verified."""
    rng = np.random.default_rng(5)
    pairs = [scene(rng, random_vocabulary, 400, 0) for _ in range(60)]
    results = [verify_geometry(q, [c])[0] for q, c in pairs]
    assert min(v.tentative for v in results) >= 300
    assert not any(v.verified for v in results)
    assert all(v.log10_nfa > 0 for v in results)
    # each says why: a tested model's NFA above the bar, or no model to test
    assert all(v.why == ("chance" if math.isfinite(v.log10_nfa) else v.why) for v in results)
    assert {v.why for v in results} <= {"chance", "no-model", "one-line"} and "chance" in {v.why for v in results}


@pytest.mark.parametrize("seed", range(3))
def test_a_true_transform_with_enough_matches_is_verified(seed, random_vocabulary):
    rng = np.random.default_rng(seed)
    M = rotation(8, 0.8) @ np.array([[1.0, 0.0], [0.15, 1.0]])
    q, c = scene(rng, random_vocabulary, 400, 40, M, t=(150.0, 80.0))
    v, = verify_geometry(q, [c])
    assert v.verified and v.inliers >= 30 and v.why is None
    assert v.log10_nfa <= math.log10(VerificationParams().false_alarms_per_pair)
    with_pairs, = verify_geometry(q, [c], return_pairs=True)
    thr = 0.02 * W
    ref = adaptive_nfa_reference(with_pairs.pairs, with_pairs.affine, v.tentative, thr, thr, W * H, 1 / (4096 * 0.02))
    # the refit's own points count by their deleted residuals, never below the plain ones (that
    # formula against numpy's hat matrix and scipy: test_ransac.py); pairs as float32
    assert v.log10_nfa >= ref - 1e-6 * abs(ref)
    assert v.log10_nfa <= nfa_reference(v.inliers, v.tentative, math.pi * thr ** 2 / (W * H))
    q, c = scene(rng, random_vocabulary, 400, 6, M, t=(150.0, 80.0))
    few, = verify_geometry(q, [c])
    assert not few.verified and few.why in ("chance", "no-model")  # 6 true matches among 400: not enough


def test_a_candidate_not_verified_says_which_check_it_failed(random_vocabulary):
    """3 shared features: too few for a test (no model is searched); 6 chance ones: no map
    with more than 3 of them; the rule before 0.3 names its own bar."""
    from streamk.verification import WHY_NOT_VERIFIED

    rng = np.random.default_rng(12)
    q, c = scene(rng, random_vocabulary, 3, 3, t=(20.0, 10.0))
    v, = verify_geometry(q, [c])
    assert v.tentative == 3 and not v.verified and v.why == "few-matches" and v.inliers == 0
    q, c = scene(rng, random_vocabulary, 6, 0)
    v, = verify_geometry(q, [c])
    assert v.tentative == 6 and v.inliers <= 3 and v.why == "no-model"
    q, c = scene(rng, random_vocabulary, 400, 8, t=(20.0, 10.0))
    old, = verify_geometry(q, [c], params=VerificationParams.fixed_inliers())
    assert not old.verified and old.inliers < 12 and old.why == "few-inliers"
    assert set(WHY_NOT_VERIFIED) == {"few-matches", "no-model", "one-line", "one-likeness", "chance", "few-inliers",
                                     "damaged"}


def test_the_old_rule_stays_available_and_parameters_are_checked(random_vocabulary):
    from streamk.errors import ConfigError

    q, c = scene(np.random.default_rng(9), random_vocabulary, 200, 30)
    v_old, = verify_geometry(q, [c], params=VerificationParams.fixed_inliers())
    assert v_old.verified == (v_old.inliers >= 12)
    assert v_old.why == (None if v_old.verified else "few-inliers")
    for bad in ({"decision": "votes"}, {"false_alarms_per_pair": 0.0}, {"false_alarms_per_pair": 2.0},
                {"max_anisotropy": 0.5}, {"min_overlap": 1.5}, {"max_tilt": -1.0}):
        with pytest.raises(ConfigError):
            verify_geometry(q, [c], **bad)

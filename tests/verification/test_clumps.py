"""The clump check of the significance decision (``_ransac_kernels.clump_free``): a model
whose evidence is one clump of overlapping features (one local likeness) is refused, one
whose inliers are spread over the view is kept; the kernel against a brute force in numpy
and scipy."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from streamk.verification import VerificationParams, verify_geometry
from streamk.verification import _ransac_kernels as _k

from test_decision import H, W, collinear_reference, model, rotation, scene


def rest_nfa_reference(ratio, n, p, floor2, log10_count):
    """log10 of log10_count x (n - 3) tests times the binomial tail, the least over the
    tolerances the (sorted) ratios set, from the 4th on; +inf with under 4."""
    ratio = np.sort(np.maximum(ratio, floor2))
    if len(ratio) < 4 or n <= 3:
        return math.inf
    return min(log10_count + math.log10(n - 3) + math.log10(binom.sf(j - 4, n - 3, min(p * ratio[j - 1], 1.0)))
               for j in range(4, len(ratio) + 1))


def clump_free_reference(m, P1, P2, F1, thr_q, thr_d, p0, floor2, log10_count):
    """Every correspondence its own pair of features (one-to-one is then no constraint). For
    each inlier i, leave out the inliers whose query regions overlap its own at half their
    radii, and the tentative correspondences whose regions overlap one of those; the rest must
    not lie along one line in either image and must reach NFA <= 1."""
    M, t = np.array([[m[0], m[1]], [m[2], m[3]]]), m[4:]
    fwd = np.sum((P1 @ M.T + t - P2) ** 2, axis=1)
    bwd = np.sum(((P2 - t) @ np.linalg.inv(M).T - P1) ** 2, axis=1)
    ins = np.flatnonzero((fwd <= thr_d ** 2) & (bwd <= thr_q ** 2))
    if len(ins) <= 3:
        return False
    ratio = np.maximum(fwd / thr_d ** 2, bwd / thr_q ** 2)
    s = np.sqrt(F1[:, 0] * F1[:, 2])
    p = p0 * min(1.0, thr_q ** 2 * np.linalg.det(M) / thr_d ** 2)
    dist = np.linalg.norm(P1[:, None] - P1[None], axis=2)
    overlap = dist < (s[:, None] + s[None]) / 2
    off_line = int(len(P1) * p0)
    for i in ins:
        clump = ins[overlap[i, ins]]
        rest = np.setdiff1d(ins, clump)
        if collinear_reference(P1[rest], thr_q, off_line) or collinear_reference(P2[rest], thr_d, off_line):
            return False
        n = len(P1) - int(overlap[:, clump].any(axis=1).sum())
        if rest_nfa_reference(ratio[rest], n, p, floor2, log10_count) > 0:
            return False
    return True


def clumped(rng, n_spread, clumps, per_clump, n_chance, spread=0.6, row=None):
    """Correspondences of the map x -> 0.9 R(4) x + (40, 25): n_spread inliers anywhere (on the
    row of pixels ``row`` +-6 when given: a line, once the clumps are left out), and
    ``clumps`` clumps of per_clump inliers each within +-spread feature radii of one point
    (their regions overlapping), then n_chance chance ones anywhere."""
    M = rotation(4, 0.9)
    t = np.array([40.0, 25.0])
    P1 = rng.uniform([50, 50], [W - 50, H - 50], (n_spread, 2))
    if row is not None:
        P1[:, 1] = row + rng.uniform(-6, 6, n_spread)
    s = rng.uniform(4, 12, n_spread + clumps * per_clump + n_chance)
    for c in range(clumps):
        centre = rng.uniform([100, 100], [W - 100, H - 100])
        P1 = np.vstack([P1, centre + rng.uniform(-spread, spread, (per_clump, 2)) * 8.0])
    P2 = P1 @ M.T + t + rng.normal(0, 1.5, P1.shape)
    chance = rng.uniform([0, 0], [W, H], (n_chance, 2))
    P1 = np.vstack([P1, chance])
    P2 = np.vstack([P2, rng.uniform([0, 0], [W, H], (n_chance, 2))])
    F1 = np.stack([s, np.zeros_like(s), s], axis=1)
    return model(M, t), np.ascontiguousarray(P1), np.ascontiguousarray(P2), F1


@pytest.mark.parametrize("seed", range(8))
def test_clump_free_against_a_brute_force(seed):
    """Spread inliers (every third case along a row), clumps and chance matches in proportions
    that put the decision on either side (each side checked to occur, below): the kernel's
    decision, with its shortcuts (a window for the clumps, the line test from moments, the NFA
    with every tentative match first), equals the brute force's."""
    rng = np.random.default_rng(seed)
    thr_q = thr_d = 0.02 * W
    p0 = math.pi * thr_d ** 2 / (W * H)
    floor2 = (1 / (4096 * 0.02)) ** 2
    log10_count = math.log10(100 * 20 * 4)
    for case in range(12):
        n_spread = int(rng.integers(0, 14))
        m, P1, P2, F1 = clumped(rng, n_spread, int(rng.integers(0, 3)), int(rng.integers(3, 12)),
                                int(rng.integers(20, 300)), row=300.0 if case % 3 == 2 else None)
        T = len(P1)
        inv = np.empty(6)
        assert _k.invert(m, inv)
        ids = np.arange(T, dtype=np.int64)
        got, _ = _k.clump_free(m, inv, P1, P2, F1, ids, ids, thr_q ** 2, thr_d ** 2, p0, floor2, log10_count,
                               np.full(T, -1, np.int64), np.full(T, -1, np.int64), 0)
        want = clump_free_reference(m, P1, P2, F1, thr_q, thr_d, p0, floor2, log10_count)
        assert got == want, (seed, case, n_spread)


def test_the_brute_force_cases_fall_on_both_sides():
    outcomes = set()
    for seed in range(4):
        rng = np.random.default_rng(seed)
        for _ in range(12):
            n_spread = int(rng.integers(0, 14))
            m, P1, P2, F1 = clumped(rng, n_spread, int(rng.integers(0, 3)), int(rng.integers(3, 12)),
                                    int(rng.integers(20, 300)))
            outcomes.add(clump_free_reference(m, P1, P2, F1, 0.02 * W, 0.02 * W, math.pi * (0.02 * W) ** 2 / (W * H),
                                              (1 / (4096 * 0.02)) ** 2, math.log10(8000)))
    assert outcomes == {True, False}


def local_likeness(rng, vocabulary, n, per_clump, clumps=1, spread=0, row=None):
    """A query and a candidate of n features with the same descriptors: ``clumps`` groups of
    per_clump features within 10 px of one point each (regions of 16-24 px radius, overlapping
    at half their radii), moved together by one translation (one local likeness, as a dome's
    ornament matched at several scales and words), and ``spread`` more that the translation
    moves, anywhere (on that row of pixels, +-4, with ``row``); the other features anywhere
    (chance matches)."""
    from streamk.verification import make_query_record, make_record

    desc = rng.integers(0, 120, (n, 128)).astype(np.uint8)
    kp = np.zeros((n, 6))
    kp[:, :2] = rng.uniform(0, [W, H], (n, 2))
    kp[:, 2] = kp[:, 4] = rng.uniform(4, 12, n)
    kp2 = kp.copy()
    kp2[:, :2] = rng.uniform(0, [W, H], (n, 2))
    for c in range(clumps):
        rows = slice(c * per_clump, (c + 1) * per_clump)
        centre = rng.uniform([200, 200], [W - 200, H - 200])
        kp[rows, :2] = centre + rng.uniform(-7, 7, (per_clump, 2))
        kp[rows, 2] = kp[rows, 4] = rng.uniform(16, 24, per_clump)
        kp2[rows] = kp[rows]
    if row is not None:
        kp[clumps * per_clump:clumps * per_clump + spread, 1] = row + rng.uniform(-4, 4, spread)
    moved = slice(0, clumps * per_clump + spread)
    kp2[moved, :2] = kp[moved, :2] + (60.0, 30.0) + rng.normal(0, 0.5, (clumps * per_clump + spread, 2))
    return make_query_record(vocabulary, kp, desc, (W, H)), make_record(vocabulary, kp2, desc, (W, H))


def test_one_local_likeness_is_not_a_view(random_vocabulary):
    """One clump of 25 agreeing matches and 4 more among 300: significant under the uniform
    background (verified without the check), but all but 4 of it one piece of evidence: refused.
    Four such clumps far apart agree with one map: a view, verified with the check too. A true
    transform spread over the image stays verified."""
    rng = np.random.default_rng(4)
    eps = math.log10(VerificationParams().false_alarms_per_pair)
    q, c = local_likeness(rng, random_vocabulary, 300, 25, spread=4)
    without, = verify_geometry(q, [c], clump_check=False)
    assert without.verified and without.inliers >= 25 and without.log10_nfa <= eps
    checked, = verify_geometry(q, [c])
    assert not checked.verified and checked.log10_nfa == math.inf and checked.why == "one-likeness"
    assert checked.inliers == without.inliers  # the same model: only the decision differs
    q, c = local_likeness(rng, random_vocabulary, 300, 12, clumps=4)
    assert verify_geometry(q, [c])[0].verified
    q, c = scene(rng, random_vocabulary, 400, 40, rotation(8, 0.8), t=(150.0, 80.0))
    assert verify_geometry(q, [c])[0].verified


def test_the_check_is_a_field_of_the_parameters(random_vocabulary):
    from streamk.errors import ConfigError

    assert VerificationParams().clump_check is True
    q, c = scene(np.random.default_rng(2), random_vocabulary, 100, 10)
    with pytest.raises(ConfigError, match="clump_check"):
        verify_geometry(q, [c], clump_check="yes")


def test_a_line_and_one_clump_off_it_is_not_a_view(random_vocabulary):
    """The Eiffel tower's girders against the Moulin Rouge's sails, held out: 16 of 18 inliers
    along one row, 2 in one clump off it. The clump is what fixes the map across the row; left
    out, the rest fixes none: refused, where the test alone (no collinearity of all the inliers)
    verifies it."""
    rng = np.random.default_rng(8)
    q, c = local_likeness(rng, random_vocabulary, 300, 4, spread=20, row=300.0)
    without, = verify_geometry(q, [c], clump_check=False)
    assert without.verified and without.inliers >= 22
    checked, = verify_geometry(q, [c])
    assert not checked.verified and checked.log10_nfa == math.inf and checked.why == "one-likeness"

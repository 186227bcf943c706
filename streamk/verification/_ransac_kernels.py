"""Numba kernels of ransac.py and verify.py: array code only, no checks.

A model is 6 float64: (m00, m01, m10, m11, tx, ty), p' = M p + t, query -> candidate.

Inliers of a model, one-to-one and deterministic: walk the correspondences in their
given order; correspondence k (query feature qi, candidate feature dj) is an inlier
when its transfer error is within the candidate image's threshold, its back-transfer
error (M^-1) within the query image's threshold, and neither qi nor dj is already
used by an earlier inlier. Features are marked with a stamp (a counter that only
grows) instead of clearing a mask per hypothesis.
"""

import math

import numpy as np
from numba import njit

from ._matching_kernels import match_bound, match_into


@njit(cache=True)
def invert(model, inv):
    a, b, c, d, tx, ty = model[0], model[1], model[2], model[3], model[4], model[5]
    det = a * d - b * c
    if not (det > 0.0) or not math.isfinite(det):
        return False
    ia, ib, ic, id_ = d / det, -b / det, -c / det, a / det
    inv[0] = ia
    inv[1] = ib
    inv[2] = ic
    inv[3] = id_
    inv[4] = -(ia * tx + ib * ty)
    inv[5] = -(ic * tx + id_ * ty)
    return True


@njit(cache=True)
def count_inliers(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, stamp_q, stamp_d, s, idx):
    """Greedy one-to-one inlier count (see the module docstring); idx[:count] = their positions."""
    a, b, c, d, tx, ty = model[0], model[1], model[2], model[3], model[4], model[5]
    ia, ib, ic, id_, itx, ity = inv[0], inv[1], inv[2], inv[3], inv[4], inv[5]
    n = 0
    for k in range(P1.shape[0]):
        x1 = P1[k, 0]
        y1 = P1[k, 1]
        x2 = P2[k, 0]
        y2 = P2[k, 1]
        ex = a * x1 + b * y1 + tx - x2
        ey = c * x1 + d * y1 + ty - y2
        if ex * ex + ey * ey > thr_d2:
            continue
        ex = ia * x2 + ib * y2 + itx - x1
        ey = ic * x2 + id_ * y2 + ity - y1
        if ex * ex + ey * ey > thr_q2:
            continue
        if stamp_q[cq[k]] == s or stamp_d[cd[k]] == s:
            continue
        stamp_q[cq[k]] = s
        stamp_d[cd[k]] = s
        idx[n] = k
        n += 1
    return n


@njit(cache=True)
def frame_hypothesis(F1, T1, F2, T2, k, cos_r, sin_r, P1, P2, model):
    """The affine map of correspondence k's two frames, turned by an extra rotation r:
    M = A2 R(theta2 + r - theta1) A1^-1, t = p2 - M p1 (Philbin et al. 2007)."""
    a11, a21, a22 = F1[k, 0], F1[k, 1], F1[k, 2]
    b11, b21, b22 = F2[k, 0], F2[k, 1], F2[k, 2]
    ang = T2[k] - T1[k]
    cr = math.cos(ang) * cos_r - math.sin(ang) * sin_r
    sr = math.sin(ang) * cos_r + math.cos(ang) * sin_r
    # A1^-1 = [[1/a11, 0], [-a21/(a11 a22), 1/a22]]
    i00 = 1.0 / a11
    i10 = -a21 / (a11 * a22)
    i11 = 1.0 / a22
    # B = A2 R
    r00 = b11 * cr
    r01 = -b11 * sr
    r10 = b21 * cr + b22 * sr
    r11 = -b21 * sr + b22 * cr
    m00 = r00 * i00 + r01 * i10
    m01 = r01 * i11
    m10 = r10 * i00 + r11 * i10
    m11 = r11 * i11
    model[0] = m00
    model[1] = m01
    model[2] = m10
    model[3] = m11
    model[4] = P2[k, 0] - (m00 * P1[k, 0] + m01 * P1[k, 1])
    model[5] = P2[k, 1] - (m10 * P1[k, 0] + m11 * P1[k, 1])


@njit(cache=True)
def _shoelace(P, n):
    a = 0.0
    for i in range(n):
        j = (i + 1) % n
        a += P[i, 0] * P[j, 1] - P[j, 0] * P[i, 1]
    return 0.5 * a


@njit(cache=True)
def _clip_half_plane(P, n, axis, bound, keep_below, out):
    """Sutherland-Hodgman: the polygon P[:n] cut to coordinate ``axis`` <= bound
    (keep_below) or >= bound; writes out, returns its vertex count."""
    m = 0
    for i in range(n):
        a = P[i]
        b = P[(i + 1) % n]
        ina = (a[axis] <= bound) if keep_below else (a[axis] >= bound)
        inb = (b[axis] <= bound) if keep_below else (b[axis] >= bound)
        if ina:
            out[m, 0] = a[0]
            out[m, 1] = a[1]
            m += 1
        if ina != inb:
            t = (bound - a[axis]) / (b[axis] - a[axis])
            out[m, 0] = a[0] + t * (b[0] - a[0])
            out[m, 1] = a[1] + t * (b[1] - a[1])
            m += 1
    return m


@njit(cache=True)
def region_ok(model, region, w, h, min_overlap, scratch):
    """The query region mapped by the model: a convex quadrilateral in the same turning
    order as the region (not crossed, not folded, not flat), and its overlap with the
    candidate image [-0.5, w - 0.5] x [-0.5, h - 0.5] at least ``min_overlap`` of the
    smaller of the two (the mapped region mostly inside the image, or the image mostly
    inside the mapped region when the query shows more than the candidate). scratch: a
    (20, 2) float64 array (no allocation per hypothesis)."""
    Q = scratch[0:4]
    for i in range(4):
        Q[i, 0] = model[0] * region[i, 0] + model[1] * region[i, 1] + model[4]
        Q[i, 1] = model[2] * region[i, 0] + model[3] * region[i, 1] + model[5]
    sign = 1.0 if _shoelace(region, 4) >= 0.0 else -1.0
    for i in range(4):
        a = Q[(i + 1) % 4, 0] - Q[i, 0]
        b = Q[(i + 1) % 4, 1] - Q[i, 1]
        c = Q[(i + 2) % 4, 0] - Q[(i + 1) % 4, 0]
        d = Q[(i + 2) % 4, 1] - Q[(i + 1) % 4, 1]
        if not (sign * (a * d - b * c) > 0.0):  # a turn the wrong way (or none): crossed or flat
            return False
    area = sign * _shoelace(Q, 4)
    if not (area > 0.0) or not math.isfinite(area):
        return False
    if min_overlap <= 0.0:
        return True
    A = scratch[4:12]
    B = scratch[12:20]
    n = _clip_half_plane(Q, 4, 0, -0.5, False, A)
    n = _clip_half_plane(A, n, 0, w - 0.5, True, B)
    n = _clip_half_plane(B, n, 1, -0.5, False, A)
    n = _clip_half_plane(A, n, 1, h - 0.5, True, B)
    inside = abs(_shoelace(B, n)) if n >= 3 else 0.0
    return inside >= min_overlap * min(area, float(w) * float(h))


@njit(cache=True)
def map_ok(model, max_scale, max_aniso, max_tilt_tan):
    """The linear part of a model can map a view of the scene onto another (ransac.py's
    docstring): orientation kept (det > 0), scale change within max_scale, singular values
    within a ratio of max_aniso, the vertical turned by at most atan(max_tilt_tan)."""
    a, b, c, d = model[0], model[1], model[2], model[3]
    det = a * d - b * c
    if not (det > 0.0) or not math.isfinite(det):
        return False
    s = math.sqrt(det)
    if not (s <= max_scale and s * max_scale >= 1.0):
        return False
    f2 = a * a + b * b + c * c + d * d
    s1 = 0.5 * (f2 + math.sqrt(max(f2 * f2 - 4.0 * det * det, 0.0)))  # largest singular value, squared
    if s1 > max_aniso * det:  # s1 / s2 = s1^2 / det
        return False
    if max_tilt_tan < np.inf and not (abs(b) <= max_tilt_tan * d):  # M (0, 1) = (b, d): still pointing down
        return False
    return True


@njit(cache=True)
def plausible(model, max_scale, max_aniso, max_tilt_tan, region, w, h, min_overlap, scratch):
    """:func:`map_ok` and, when ``region`` has its 4 corners, :func:`region_ok`. (The search
    checks the region only of a model about to become the best: same answer, and the
    clipping runs a few times per pair instead of once per hypothesis.)"""
    if not map_ok(model, max_scale, max_aniso, max_tilt_tan):
        return False
    if region.shape[0] == 4:
        return region_ok(model, region, w, h, min_overlap, scratch)
    return True


@njit(cache=True)
def fit_affine(P1, P2, idx, n, model):
    """Least-squares affine map of the correspondences idx[:n] (centred normal equations);
    False when they are (nearly) collinear."""
    if n < 3:
        return False
    m1x = 0.0
    m1y = 0.0
    m2x = 0.0
    m2y = 0.0
    for r in range(n):
        k = idx[r]
        m1x += P1[k, 0]
        m1y += P1[k, 1]
        m2x += P2[k, 0]
        m2y += P2[k, 1]
    m1x /= n
    m1y /= n
    m2x /= n
    m2y /= n
    sxx = 0.0
    sxy = 0.0
    syy = 0.0
    uxx = 0.0
    uxy = 0.0
    uyx = 0.0
    uyy = 0.0
    for r in range(n):
        k = idx[r]
        dx = P1[k, 0] - m1x
        dy = P1[k, 1] - m1y
        ex = P2[k, 0] - m2x
        ey = P2[k, 1] - m2y
        sxx += dx * dx
        sxy += dx * dy
        syy += dy * dy
        uxx += ex * dx
        uxy += ex * dy
        uyx += ey * dx
        uyy += ey * dy
    det = sxx * syy - sxy * sxy
    tr = sxx + syy
    if not (det > 1e-9 * tr * tr) or tr <= 0.0:
        return False
    # M = U S^-1, S^-1 = [[syy, -sxy], [-sxy, sxx]] / det
    model[0] = (uxx * syy - uxy * sxy) / det
    model[1] = (-uxx * sxy + uxy * sxx) / det
    model[2] = (uyx * syy - uyy * sxy) / det
    model[3] = (-uyx * sxy + uyy * sxx) / det
    model[4] = m2x - (model[0] * m1x + model[1] * m1y)
    model[5] = m2y - (model[2] * m1x + model[3] * m1y)
    return True


@njit(cache=True)
def _clear_model(model):
    for r in range(6):
        model[r] = np.nan


@njit(cache=True)
def _usable(model, inv, limits):
    """A plausible map (scale, anisotropy, tilt: limits[:3]) with its inverse written to inv."""
    return map_ok(model, limits[0], limits[1], limits[2]) and invert(model, inv)


@njit(cache=True)
def _within_region(model, region, img_w, img_h, min_overlap, scratch):
    """region_ok, or True when there is no region (not 4 corners) to check."""
    return region.shape[0] != 4 or region_ok(model, region, img_w, img_h, min_overlap, scratch)


@njit(cache=True)
def _hypothesis_inliers(F1, T1, F2, T2, k, cos_r, sin_r, P1, P2, cq, cd, thr_q2, thr_d2, limits, stamp_q, stamp_d, s,
                        idx, model, inv):
    """Correspondence k's hypothesis turned by r (model) and its inliers (idx[:n]).
    Returns (n, or -1 when the map is implausible or singular; next stamp)."""
    frame_hypothesis(F1, T1, F2, T2, k, cos_r, sin_r, P1, P2, model)
    if not _usable(model, inv, limits):
        return -1, s
    s += 1
    return count_inliers(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, stamp_q, stamp_d, s, idx), s


@njit(cache=True)
def _confident(most, T, tried, confidence):
    """True when ``tried`` hypotheses reach ``confidence`` for the inlier ratio most / T (the
    stopping rule; confidence 1: never)."""
    if not (most > 0 and confidence < 1.0):
        return False
    eps = most / T
    if eps >= 1.0:
        return True
    return tried >= math.log(1.0 - confidence) / math.log(1.0 - eps)


@njit(cache=True)
def ransac_pair(P1, P2, F1, T1, F2, T2, cq, cd, ch, thr_q2, thr_d2, rot_cos, rot_sin, max_hypotheses,
                lo_iterations, limits, region, img_w, img_h, confidence, stamp_q, stamp_d, stamp0, best_model):
    """Best model of one pair of images: hypotheses from single correspondences (in order of
    Hamming distance, then correspondence order), each turned by every extra rotation;
    local optimisation (iterated least squares on the inliers) whenever a hypothesis beats
    the best so far; stops when ``confidence`` is reached for the best inlier ratio. Only
    :func:`plausible` models count (limits: max_scale, max_aniso, max_tilt_tan, min_overlap; the
    region is checked only of a model about to become the best).
    Returns (inliers, next stamp). best_model is filled (NaN when no model has 3 inliers)."""
    T = P1.shape[0]
    s = stamp0
    _clear_model(best_model)
    if T == 0:
        return 0, s
    order = np.argsort(ch, kind="mergesort")
    idx = np.empty(T, np.int64)
    idx2 = np.empty(T, np.int64)
    cur = np.empty(T, np.int64)
    model = np.empty(6, np.float64)
    inv = np.empty(6, np.float64)
    best = 0
    overlap = limits[3]
    scratch = np.empty((20, 2))
    for h in range(min(T, max_hypotheses)):
        for r in range(rot_cos.shape[0]):
            n, s = _hypothesis_inliers(F1, T1, F2, T2, order[h], rot_cos[r], rot_sin[r], P1, P2, cq, cd, thr_q2, thr_d2,
                                       limits, stamp_q, stamp_d, s, idx, model, inv)
            if n <= best or not _within_region(model, region, img_w, img_h, overlap, scratch):
                continue
            best = n
            best_model[:] = model
            # local optimisation: least squares on the inliers, iterated while it gains
            ncur = n
            cur[:n] = idx[:n]
            for it in range(lo_iterations):
                if not fit_affine(P1, P2, cur, ncur, model):
                    break
                if not _usable(model, inv, limits):
                    break
                s += 1
                n2 = count_inliers(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, stamp_q, stamp_d, s, idx2)
                if n2 <= best or not _within_region(model, region, img_w, img_h, overlap, scratch):
                    break
                best = n2
                best_model[:] = model
                ncur = n2
                cur[:n2] = idx2[:n2]
        if _confident(best, T, h + 1, confidence):
            break
    if best >= 3 and lo_iterations > 0:
        # polish: refit on the inliers within a half, then a quarter of the thresholds (the
        # loose threshold admits correspondences a few pixels off, which bias a least-squares
        # fit); a polished model replaces the best one when it keeps at least 95 % of its
        # inliers, and its own count is reported
        model[:] = best_model
        for f in (0.25, 0.0625):  # squared: thresholds / 2, / 4
            if not invert(model, inv):
                break
            s += 1
            nt = count_inliers(model, inv, P1, P2, cq, cd, thr_q2 * f, thr_d2 * f, stamp_q, stamp_d, s, idx)
            if not fit_affine(P1, P2, idx, nt, model):
                break
            if not _usable(model, inv, limits):
                break
            s += 1
            n2 = count_inliers(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, stamp_q, stamp_d, s, idx2)
            if n2 < best - best // 20:  # keeps (nearly) all: within 5 %
                break
            if not _within_region(model, region, img_w, img_h, overlap, scratch):
                break
            best = n2
            best_model[:] = model
    if best < 3:  # one or two correspondences do not determine an affine map: no model
        _clear_model(best_model)
    return best, s


@njit(cache=True)
def log10_binomial_tail(n, k, p):
    """log10 P[X >= k] for X ~ Binomial(n, p): the first term by log-gamma, the next ones by
    the ratio of consecutive terms, summed (in units of the first) until they stop counting."""
    if k <= 0:
        return 0.0
    if k > n or p <= 0.0:
        return -np.inf
    if p >= 1.0 or k <= n * p:  # the tail is then at least 1/2 (a binomial's median is >= floor(n p))
        return 0.0
    lp = math.log(p)
    lq = math.log1p(-p)
    first = math.lgamma(n + 1.0) - math.lgamma(k + 1.0) - math.lgamma(n - k + 1.0) + k * lp + (n - k) * lq
    total = 1.0
    term = 1.0
    odds = p / (1.0 - p)
    for j in range(k, n):
        term *= (n - j) / (j + 1.0) * odds
        total += term
        if term < 1e-17 * total and (n - j - 1.0) / (j + 2.0) * odds < 1.0:  # and decreasing from here on
            break
    return (first + math.log(total)) / math.log(10.0)


MINIMAL_SAMPLE = 3  # correspondences that determine an affine map

# verify_batch's outcome per candidate: what its log10 NFA is (spatial.WHY_NOT_VERIFIED says it to a user)
TESTED = 0  # a model's inliers were tested: log_nfa is their NFA
FEW_MATCHES = 1  # fewer tentative correspondences than a test needs
NO_MODEL = 2  # no plausible map with more than 3 inliers
ONE_LINE = 3  # the inliers lie along one line: no affine map is tested
ONE_LIKENESS = 4  # the test passed on one clump of inliers only (clump_free refused)


@njit(cache=True)
def log10_nfa(k, n, p):
    """log10 of the number of false alarms of k one-to-one inliers among n tentative
    correspondences, each a chance inlier with probability p (spatial.py's docstring):
    (n - 3) C(n, 3) tests (ORSA's count for a model of 3 correspondences), times
    P[Binomial(n - 3, p) >= k - 3]. +inf when k <= 3 (no affine map is tested by fewer
    than 4 correspondences)."""
    m = MINIMAL_SAMPLE
    if k <= m or n <= m:
        return np.inf
    return log10_tests(n) + log10_binomial_tail(n - m, k - m, p)


@njit(cache=True)
def log10_tests(n):
    """log10 of ORSA's count of tests for n > 3 tentative correspondences: (n - 3) C(n, 3)."""
    m = MINIMAL_SAMPLE
    return (math.log(n - m) + math.lgamma(n + 1.0) - math.lgamma(m + 1.0) - math.lgamma(n - m + 1.0)) / math.log(10.0)


@njit(cache=True)
def residual_ratios(model, inv, P1, P2, idx, n, thr_q2, thr_d2, out):
    """out[:n] = the squared error ratios of the correspondences idx[:n], sorted: max(transfer
    error^2 / thr_d2, back-transfer error^2 / thr_q2) (the inlier rule's two tests, as one
    tolerance scaled by sqrt(ratio))."""
    _unsorted_ratios(model, inv, P1, P2, idx, n, thr_q2, thr_d2, out)
    out[:n].sort()


@njit(cache=True)
def _unsorted_ratios(model, inv, P1, P2, idx, n, thr_q2, thr_d2, out):
    """:func:`residual_ratios` in the order of idx[:n]."""
    a, b, c, d, tx, ty = model[0], model[1], model[2], model[3], model[4], model[5]
    ia, ib, ic, id_, itx, ity = inv[0], inv[1], inv[2], inv[3], inv[4], inv[5]
    for r in range(n):
        k = idx[r]
        ex = a * P1[k, 0] + b * P1[k, 1] + tx - P2[k, 0]
        ey = c * P1[k, 0] + d * P1[k, 1] + ty - P2[k, 1]
        fx = ia * P2[k, 0] + ib * P2[k, 1] + itx - P1[k, 0]
        fy = ic * P2[k, 0] + id_ * P2[k, 1] + ity - P1[k, 1]
        out[r] = max((ex * ex + ey * ey) / thr_d2, (fx * fx + fy * fy) / thr_q2)


@njit(cache=True)
def _line_fit(P, idx, n, keep):
    """(mean x, mean y, unit direction x, y, mean squared distance to the line) of the points
    P[idx[r]] with keep[r]: the covariance's principal axis and smaller eigenvalue."""
    m = 0
    mx = 0.0
    my = 0.0
    for r in range(n):
        if keep[r]:
            mx += P[idx[r], 0]
            my += P[idx[r], 1]
            m += 1
    mx /= m
    my /= m
    sxx = 0.0
    sxy = 0.0
    syy = 0.0
    for r in range(n):
        if keep[r]:
            dx = P[idx[r], 0] - mx
            dy = P[idx[r], 1] - my
            sxx += dx * dx
            sxy += dx * dy
            syy += dy * dy
    sxx /= m
    sxy /= m
    syy /= m
    half = math.sqrt(0.25 * (sxx - syy) ** 2 + sxy * sxy)
    larger = 0.5 * (sxx + syy) + half
    if sxy != 0.0:  # the eigenvector of the larger eigenvalue
        ux = larger - syy
        uy = sxy
        norm = math.sqrt(ux * ux + uy * uy)
        ux /= norm
        uy /= norm
    elif sxx >= syy:
        ux, uy = 1.0, 0.0
    else:
        ux, uy = 0.0, 1.0
    return mx, my, ux, uy, 0.5 * (sxx + syy) - half


@njit(cache=True)
def collinear(P, idx, n, thr2, off_line):
    """The points P[idx[:n]] lie along one line within the tolerance, but for at most
    ``off_line`` of them: once the (up to) off_line points farthest from the line are set aside
    (one at a time, the line refitted), the others' mean squared distance to their best-fitting
    line (the covariance's smaller eigenvalue) is below thr2 / 3, the mean square of a uniform
    spread over +-thr. Such inliers determine no affine map: points along a line fix the map
    along it and its shift only; a lattice repeated along a girder matches one along a
    windmill's sail with a translation. off_line: the chance inliers expected anywhere (n p)."""
    if n - off_line < 3:
        return True
    keep = np.ones(n, np.bool_)
    for _ in range(off_line):
        mx, my, ux, uy, _ = _line_fit(P, idx, n, keep)
        far = -1
        worst = -1.0
        for r in range(n):
            if keep[r]:
                d = abs(-(P[idx[r], 0] - mx) * uy + (P[idx[r], 1] - my) * ux)
                if d > worst:
                    worst = d
                    far = r
        keep[far] = False
    return _line_fit(P, idx, n, keep)[4] < thr2 / 3.0


@njit(cache=True)
def log10_nfa_adaptive(ratios, k, n, p, floor2):
    """ORSA's adaptive tolerance (Moisan, Moulon, Monasse 2012): the least log10 NFA over the
    tolerances the inliers themselves set. With ratios[:k] the inliers' sorted squared error
    ratios (:func:`residual_ratios`), the j nearest inliers lie within the tolerance scaled by
    sqrt(ratios[j - 1]), where a chance correspondence agrees with probability p ratios[j - 1]:
    min over j of :func:`log10_nfa` (j, n, p max(ratios[j - 1], floor2)). The (n - 3) factor of
    the count of tests is this choice of j. floor2: the smallest squared ratio that means
    anything (the positions' quantisation). +inf when k <= 3."""
    return adaptive_nfa_tolerance(ratios, k, n, p, floor2)[0]


@njit(cache=True)
def adaptive_nfa_tolerance(ratios, k, n, p, floor2):
    """(:func:`log10_nfa_adaptive`, the squared tolerance ratio its least NFA was reached at;
    1 when none is finite)."""
    best = np.inf
    tol2 = 1.0
    if n <= MINIMAL_SAMPLE:
        return best, tol2
    tests = log10_tests(n)  # the same for every j
    for j in range(MINIMAL_SAMPLE + 1, k + 1):
        r2 = max(ratios[j - 1], floor2)
        v = tests + log10_binomial_tail(n - MINIMAL_SAMPLE, j - MINIMAL_SAMPLE, min(p * r2, 1.0))
        if v < best:
            best = v
            tol2 = r2
    return best, tol2


@njit(cache=True)
def deleted_ratios(P1, idx, n, fit, n_fit, in_fit, out):
    """out[:n] (the squared error ratios of the correspondences idx[:n]) divided by (1 - h)^2
    for those of the least-squares fit ``fit[:n_fit]``, h their leverage in that fit
    (1 / n_fit + d^T S^-1 d, d the query point less the fit's mean, S the fit's centred
    scatter): the ratio of each one's *deleted* residual, its residual against the map fitted
    to the others (the PRESS residual). A least-squares map pulls toward the points it is fitted
    to, 3 correspondences' worth (6 parameters): 7 points fitted by 6 parameters agree within a
    pixel whatever they are. +inf when h = 1 (the 3 points a map passes through test
    nothing, as in ORSA's count). in_fit: (T,) bool scratch, all False, left so."""
    if n_fit == 0:
        return
    mx = 0.0
    my = 0.0
    for r in range(n_fit):
        mx += P1[fit[r], 0]
        my += P1[fit[r], 1]
        in_fit[fit[r]] = True
    mx /= n_fit
    my /= n_fit
    sxx = 0.0
    sxy = 0.0
    syy = 0.0
    for r in range(n_fit):
        dx = P1[fit[r], 0] - mx
        dy = P1[fit[r], 1] - my
        sxx += dx * dx
        sxy += dx * dy
        syy += dy * dy
    det = sxx * syy - sxy * sxy
    for r in range(n):
        k = idx[r]
        if not in_fit[k]:
            continue
        dx = P1[k, 0] - mx
        dy = P1[k, 1] - my
        h = 1.0 / n_fit + ((syy * dx * dx - 2.0 * sxy * dx * dy + sxx * dy * dy) / det if det > 0.0 else 1.0)
        out[r] = out[r] / ((1.0 - h) * (1.0 - h)) if h < 1.0 - 1e-9 else np.inf
    for r in range(n_fit):
        in_fit[fit[r]] = False


@njit(cache=True)
def chance_probability(p, model, thr_q2, thr_d2):
    """The probability under H0 that a correspondence agrees with the model at the tolerance r
    (spatial.py's docstring): p = pi r_d^2 / (w h), the candidate point in the transfer disc,
    times min(1, r_q^2 det M / r_d^2), the back-transfer ellipse M B(r_q) when it is the smaller
    of the two regions the point must lie in (an inlier lies in both)."""
    det = model[0] * model[3] - model[1] * model[2]
    return p * min(1.0, thr_q2 * det / thr_d2)


@njit(cache=True)
def score_model(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, p, floor2, stamp_q, stamp_d, s, idx, ratios, fit, n_fit,
                in_fit):
    """(log10 NFA of the model's one-to-one inliers at the tolerance r with ORSA's adaptive
    tolerance, those inliers' count, the squared tolerance ratio chosen, next stamp): the
    decision's statistic (spatial.py), a chance inlier's probability :func:`chance_probability`,
    the residuals of the model's own least-squares fit ``fit[:n_fit]`` (none: n_fit 0) deleted
    ones (:func:`deleted_ratios`). idx, ratios: (T,)."""
    s += 1
    k = count_inliers(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, stamp_q, stamp_d, s, idx)
    if k <= MINIMAL_SAMPLE:
        return np.inf, k, 1.0, s
    _unsorted_ratios(model, inv, P1, P2, idx, k, thr_q2, thr_d2, ratios)
    deleted_ratios(P1, idx, k, fit, n_fit, in_fit, ratios)
    ratios[:k].sort()
    nfa, tol2 = adaptive_nfa_tolerance(ratios, k, P1.shape[0], chance_probability(p, model, thr_q2, thr_d2), floor2)
    return nfa, k, tol2, s


@njit(cache=True)
def refit(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, f2, stamp_q, stamp_d, s, idx, out):
    """One step of iterated least squares: ``out`` = the least-squares affine map of the
    model's one-to-one inliers within sqrt(f2) times the tolerances. (fitted, the inliers it
    was fitted to, next stamp); idx[:n] = their positions."""
    s += 1
    n = count_inliers(model, inv, P1, P2, cq, cd, thr_q2 * f2, thr_d2 * f2, stamp_q, stamp_d, s, idx)
    return fit_affine(P1, P2, idx, n, out), n, s


LO_STEPS = 4  # refits per round, the tolerance shrinking from r to the chosen one (Lebeda et al. 2012)
INNER_RANSAC = 10  # the inner RANSAC's samples per local optimisation (Lebeda et al. 2012: 10)
INNER_SAMPLE = 12  # the inner RANSAC's sample: at most this many, and half, of the best model's inliers


@njit(cache=True)
def _lo_round(start, P1, P2, cq, cd, thr_q2, thr_d2, limits, region, img_w, img_h, p, floor2, stamp_q, stamp_d,
              s, work, best_model, best, best_fit):
    """One round of :func:`local_optimisation` from ``start`` (overwritten): LO_STEPS refits,
    the tolerance shrinking geometrically from r to sqrt(best[2]) r. best: (log10 NFA, inliers
    at r, chosen squared tolerance ratio, size of its fit) of best_model, best_fit[:best[3]] its
    fit; all updated when a refit improves on them. work: (idx, ratios, fit, in_fit, scratch).
    Returns (improved, next stamp)."""
    idx, ratios, fit, in_fit, scratch = work
    inv = np.empty(6, np.float64)
    nxt = np.empty(6, np.float64)
    end = best[2]
    improved = False
    for i in range(LO_STEPS):
        f2 = end ** (i / (LO_STEPS - 1.0))
        if not invert(start, inv):
            break
        ok, n, s = refit(start, inv, P1, P2, cq, cd, thr_q2, thr_d2, f2, stamp_q, stamp_d, s, fit, nxt)
        if not ok or not _usable(nxt, inv, limits):
            break
        nfa, k, t2, s = score_model(nxt, inv, P1, P2, cq, cd, thr_q2, thr_d2, p, floor2, stamp_q, stamp_d, s, idx,
                                    ratios, fit, n, in_fit)
        start[:] = nxt
        if k >= best[1] and nfa < best[0] and _within_region(nxt, region, img_w, img_h, limits[3], scratch):
            best_model[:] = nxt
            best[0] = nfa
            best[1] = k
            best[2] = t2
            best[3] = n
            best_fit[:n] = fit[:n]
            improved = True
    return improved, s


@njit(cache=True)
def local_optimisation(seed, P1, P2, cq, cd, thr_q2, thr_d2, rounds, inner, limits, region, img_w, img_h, p,
                       floor2, stamp_q, stamp_d, s, best_model, best, best_fit):
    """LO-RANSAC's local optimisation of a seed model (Chum, Matas, Kittler 2003), as Lebeda,
    Matas and Chum fixed it ("Fixing the locally optimized RANSAC", BMVC 2012), scored by the
    decision's statistic (:func:`score_model`). A round is LO_STEPS least-squares refits
    (:func:`refit`), each of the previous step's model, on its one-to-one inliers within a
    tolerance that shrinks geometrically from r to the one the best model's NFA chose
    (iterated least squares). A refit that is plausible, keeps at least the best model's
    inliers at r and lowers its NFA (with the residuals of the points it was fitted to
    deleted ones) replaces it: neither the count nor the NFA ever gets worse. Rounds go on
    while one improves (at most ``rounds``); then ``inner`` rounds start from the
    least-squares fit of a sample of the best model's inliers (the inner RANSAC: min(
    INNER_SAMPLE, half) of them, drawn by a fixed-seed generator: deterministic). Every model
    is fitted to inliers of the seed's lineage: LO draws no hypothesis from outside them.
    best_model, best (4,), best_fit (T,): the result, as :func:`_lo_round` keeps it (the seed,
    fitted to nothing, when nothing improved; the seed must be invertible). Returns the next
    stamp."""
    T = P1.shape[0]
    work = (np.empty(T, np.int64), np.empty(T, np.float64), np.empty(T, np.int64), np.zeros(T, np.bool_),
            np.empty((20, 2)))
    idx = work[0]
    inv = np.empty(6, np.float64)
    start = np.empty(6, np.float64)
    best_model[:] = seed
    invert(seed, inv)
    nfa, k, tol2, s = score_model(seed, inv, P1, P2, cq, cd, thr_q2, thr_d2, p, floor2, stamp_q, stamp_d, s, idx,
                                  work[1], work[2], 0, work[3])
    best[0] = nfa
    best[1] = k
    best[2] = tol2
    best[3] = 0
    for _ in range(rounds):
        start[:] = best_model
        improved, s = _lo_round(start, P1, P2, cq, cd, thr_q2, thr_d2, limits, region, img_w, img_h, p, floor2,
                                stamp_q, stamp_d, s, work, best_model, best, best_fit)
        if not improved:
            break
    m = min(INNER_SAMPLE, int(best[1]) // 2)
    if inner > 0 and m > MINIMAL_SAMPLE and invert(best_model, inv):
        s += 1
        k = count_inliers(best_model, inv, P1, P2, cq, cd, thr_q2, thr_d2, stamp_q, stamp_d, s, idx)
        pool = idx[:k].copy()
        state = 12345
        for _ in range(inner):
            for i in range(m):  # a partial Fisher-Yates shuffle: pool[:m] a sample without replacement
                state = (1103515245 * state + 12345) % 2147483648
                j = i + state % (k - i)
                pool[i], pool[j] = pool[j], pool[i]
            if not fit_affine(P1, P2, pool, m, start):
                continue
            _, s = _lo_round(start, P1, P2, cq, cd, thr_q2, thr_d2, limits, region, img_w, img_h, p, floor2,
                             stamp_q, stamp_d, s, work, best_model, best, best_fit)
    return s


@njit(cache=True)
def _rest_log10_nfa(ratios, out, k, n, p, floor2, log10_count, level):
    """log10 NFA of the inliers with out[r] False (ratios[:k] sorted, their squared error
    ratios) among n tentative correspondences, the tests ``log10_count`` x (n - 3): the least
    over the tolerances the kept inliers set, as :func:`adaptive_nfa_tolerance`; stops at the
    first tolerance at or under ``level`` (all the caller needs to know)."""
    if n <= MINIMAL_SAMPLE:
        return np.inf
    tests = log10_count + math.log10(n - MINIMAL_SAMPLE)
    best = np.inf
    j = 0
    for r in range(k):
        if out[r]:
            continue
        j += 1
        if j <= MINIMAL_SAMPLE:
            continue
        v = tests + log10_binomial_tail(n - MINIMAL_SAMPLE, j - MINIMAL_SAMPLE, min(p * max(ratios[r], floor2), 1.0))
        if v < best:
            best = v
            if best <= level:
                break
    return best


@njit(cache=True)
def _moments(P, idx, n, out):
    """out += (count, sum x, sum y, sum xx, sum xy, sum yy) of the points P[idx[:n]]."""
    for r in range(n):
        x = P[idx[r], 0]
        y = P[idx[r], 1]
        out[0] += 1.0
        out[1] += x
        out[2] += y
        out[3] += x * x
        out[4] += x * y
        out[5] += y * y


@njit(cache=True)
def _smaller_scatter(mom):
    """The smaller eigenvalue of the scatter matrix (sum of (x - mean)(x - mean)^T) of points
    with the moments ``mom`` (:func:`_moments`); 0 for fewer than 2."""
    m = mom[0]
    if m < 2.0:
        return 0.0
    sxx = mom[3] - mom[1] * mom[1] / m
    sxy = mom[4] - mom[1] * mom[2] / m
    syy = mom[5] - mom[2] * mom[2] / m
    return 0.5 * (sxx + syy) - math.sqrt(0.25 * (sxx - syy) ** 2 + sxy * sxy)


@njit(cache=True)
def _diameter2(P, idx, n):
    """An upper bound on the squared diameter of the points P[idx[:n]]: (2 x the largest
    distance to their mean)^2."""
    mx = 0.0
    my = 0.0
    for r in range(n):
        mx += P[idx[r], 0]
        my += P[idx[r], 1]
    mx /= n
    my /= n
    far = 0.0
    for r in range(n):
        far = max(far, (P[idx[r], 0] - mx) ** 2 + (P[idx[r], 1] - my) ** 2)
    return 4.0 * far


@njit(cache=True)
def _surely_not_collinear(P, clump, c, total, diam2, off_line, thr2, mom):
    """Whether the inliers less the clump's c points (clump[:c]) are certainly not :func:`collinear`
    (within thr2, off_line set aside), from their moments alone: ``total`` the moments of all.
    Setting aside q points lowers the scatter's smaller eigenvalue by at most 2 q diam^2 (the
    scatter of the q, and the shift of the mean: each at most q diam^2), so a rest whose bound
    stays above (its count - q) thr2 / 3 passes the exact test; False: the exact test decides.
    mom: (6,) scratch."""
    mom[:] = 0.0
    _moments(P, clump, c, mom)
    for e in range(6):
        mom[e] = total[e] - mom[e]
    kept = mom[0] - off_line
    if kept < 3.0:
        return False
    return _smaller_scatter(mom) - 2.0 * off_line * diam2 >= kept * thr2 / 3.0


@njit(cache=True)
def _overlap(P, radius, a, b):
    """Whether the regions of correspondences a and b overlap at half their radii in P."""
    dx = P[a, 0] - P[b, 0]
    dy = P[a, 1] - P[b, 1]
    reach = radius[a] + radius[b]
    return dx * dx + dy * dy < reach * reach


@njit(cache=True)
def clump_free(model, inv, P1, P2, F1, cq, cd, thr_q2, thr_d2, p, floor2, log10_count, stamp_q, stamp_d, s):
    """(whether the model's evidence survives leaving out any one clump of its inliers, next
    stamp). A clump: the inliers whose query regions overlap one inlier's at half their radii
    (|x_i - x_j| < (s_i + s_j) / 2, s = sqrt(a11 a22) the frame's mean radius): the matches of
    one local likeness (a dome's ornament matched at several scales and words, a lattice's
    node) agree with any map near them together, as one piece of evidence (bench/README.md
    section 8). For every inlier i, the inliers outside its clump, among the tentative
    correspondences outside it (none whose query region overlaps a clump member's), must not
    lie along one line in either image (:func:`collinear`, as the whole model's inliers) and
    must be 1-meaningful (Desolneux, Moisan, Morel 2000: NFA <= 1) against the model, with the
    tests the search's own maps (``log10_count``: hypotheses x refits) x the n - 3 tolerances.
    A veto only: it can refuse a model the significance test accepted, never accept one.

    Cost: a clump is found among the inliers sorted by x (a window of the largest reach), the
    rest's NFA stops at its first tolerance at or under 1, and the rest's line test is settled
    from moments when it can be (:func:`_surely_not_collinear`): about k x (clump size) for k
    inliers spread over a view, not k^2."""
    T = P1.shape[0]
    idx = np.empty(T, np.int64)
    s += 1
    k = count_inliers(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, stamp_q, stamp_d, s, idx)
    if k <= MINIMAL_SAMPLE:
        return False, s
    ratios = np.empty(k, np.float64)
    _unsorted_ratios(model, inv, P1, P2, idx, k, thr_q2, thr_d2, ratios)
    order = np.argsort(ratios, kind="mergesort")
    members = idx[:k][order]
    ratios = ratios[order]
    radius = np.empty(T, np.float64)
    for t in range(T):
        radius[t] = 0.5 * math.sqrt(F1[t, 0] * F1[t, 2])
    widest = 0.0
    xs = np.empty(k, np.float64)
    for r in range(k):
        widest = max(widest, radius[members[r]])
        xs[r] = P1[members[r], 0]
    by_x = np.argsort(xs, kind="mergesort")
    xs_sorted = xs[by_x]
    pm = chance_probability(p, model, thr_q2, thr_d2)
    off_line = int(T * p)  # as the whole model's collinearity check (verify_batch)
    total1 = np.zeros(6)
    total2 = np.zeros(6)
    _moments(P1, members, k, total1)
    _moments(P2, members, k, total2)
    diam1 = _diameter2(P1, members, k)
    diam2 = _diameter2(P2, members, k)
    out = np.zeros(k, np.bool_)
    clump = np.empty(k, np.int64)  # the clump's correspondences
    clump_at = np.empty(k, np.int64)  # and their places in ratio order
    rest = np.empty(k, np.int64)
    mom = np.empty(6)
    for i in range(k):
        a = members[i]
        c = 0
        lo = np.searchsorted(xs_sorted, P1[a, 0] - radius[a] - widest)
        hi = np.searchsorted(xs_sorted, P1[a, 0] + radius[a] + widest, side="right")
        for w in range(lo, hi):
            r = by_x[w]
            b = members[r]
            if _overlap(P1, radius, a, b):
                out[r] = True
                clump[c] = b
                clump_at[c] = r
                c += 1
        ok = True
        if not (_surely_not_collinear(P1, clump, c, total1, diam1, off_line, thr_q2, mom)
                and _surely_not_collinear(P2, clump, c, total2, diam2, off_line, thr_d2, mom)):
            m = 0
            for r in range(k):
                if not out[r]:
                    rest[m] = members[r]
                    m += 1
            # the rest fixes no map: the clump was what made it one
            ok = not (collinear(P1, rest, m, thr_q2, off_line) or collinear(P2, rest, m, thr_d2, off_line))
        # fewer tentative correspondences can only lower the NFA: count them only when needed
        if ok and _rest_log10_nfa(ratios, out, k, T, pm, floor2, log10_count, 0.0) > 0.0:
            n = 0
            for t in range(T):
                inside = False
                for e in range(c):
                    if _overlap(P1, radius, t, clump[e]):
                        inside = True
                        break
                if not inside:
                    n += 1
            ok = _rest_log10_nfa(ratios, out, k, n, pm, floor2, log10_count, 0.0) <= 0.0
        for e in range(c):
            out[clump_at[e]] = False
        if not ok:
            return False, s
    return True, s


@njit(cache=True)
def ransac_pair_nfa(P1, P2, F1, T1, F2, T2, cq, cd, ch, thr_q2, thr_d2, rot_cos, rot_sin, max_hypotheses,
                    lo_iterations, inner, limits, region, img_w, img_h, confidence, p, floor2, stamp_q, stamp_d, stamp0,
                    best_model):
    """:func:`ransac_pair`'s search (the same hypotheses, order, plausibility and stopping
    rule), with the local optimisation of :func:`local_optimisation` run from every hypothesis
    that beats the most inliers seen so far, and the model kept by the decision's statistic:
    the least log10 NFA (ORSA keeps its least-NFA model too); the most inliers while no
    model has a finite NFA. Returns (the kept model's inliers at r, its log10 NFA, the squared
    tolerance ratio that NFA chose, next stamp); best_model is filled (NaN when no model has 3
    inliers)."""
    T = P1.shape[0]
    s = stamp0
    _clear_model(best_model)
    if T == 0:
        return 0, np.inf, 1.0, s
    order = np.argsort(ch, kind="mergesort")
    idx = np.empty(T, np.int64)
    model = np.empty(6, np.float64)
    lo_model = np.empty(6, np.float64)
    lo = np.empty(4, np.float64)
    lo_fit = np.empty(T, np.int64)
    tol2 = 1.0
    inv = np.empty(6, np.float64)
    scratch = np.empty((20, 2))
    best = 0  # the kept model's inliers
    best_nfa = np.inf
    most = 0  # the most inliers of any hypothesis or refit: the stopping rule's ratio
    for h in range(min(T, max_hypotheses)):
        for r in range(rot_cos.shape[0]):
            n, s = _hypothesis_inliers(F1, T1, F2, T2, order[h], rot_cos[r], rot_sin[r], P1, P2, cq, cd, thr_q2, thr_d2,
                                       limits, stamp_q, stamp_d, s, idx, model, inv)
            if n <= most or not _within_region(model, region, img_w, img_h, limits[3], scratch):
                continue
            most = n
            s = local_optimisation(model, P1, P2, cq, cd, thr_q2, thr_d2, lo_iterations, inner, limits, region, img_w,
                                   img_h, p, floor2, stamp_q, stamp_d, s, lo_model, lo, lo_fit)
            n2 = int(lo[1])
            most = max(most, n2)
            if lo[0] < best_nfa or (best_nfa == np.inf and n2 > best):
                best_nfa = lo[0]
                tol2 = lo[2]
                best = n2
                best_model[:] = lo_model
        if _confident(most, T, h + 1, confidence):
            break
    if best < 3:  # one or two correspondences do not determine an affine map: no model
        _clear_model(best_model)
    return best, best_nfa, tol2, s


@njit(cache=True)
def verify_batch(qw, qs, qxy, qfr, qth, qid, cw, cs, cxy, cfr, cth, offsets, thr_q2, thr_d2s, ht, cap, min_tentative,
                 rot_cos, rot_sin, max_hypotheses, lo_iterations, limits, tilt_tans, region, sizes, confidence,
                 floor2, by_nfa, clump_level, inliers, models, tentative, log_nfa, outcome):
    """Match and verify the query against each candidate c (features offsets[c]:offsets[c+1]
    of the concatenated candidate arrays, image sizes[c] = (w, h)). Fills inliers[c],
    models[c] (6), tentative[c] and log_nfa[c] (:func:`score_model`'s NFA of the kept model with
    by_nfa, else :func:`log10_nfa_adaptive` of its inliers; +inf when they, or those within the
    tolerance it chose, are :func:`collinear` in either image). limits: max_scale, max_aniso, (unused),
    min_overlap; tilt_tans[c] the candidate's max_tilt_tan. by_nfa: the search keeps the model of
    least NFA (:func:`ransac_pair_nfa`), else the one of most inliers (:func:`ransac_pair`).
    clump_level: with by_nfa, a model whose log10 NFA is at or under it must also pass
    :func:`clump_free` (else its log_nfa stays +inf, as a degenerate one's); -inf: no check.
    outcome[c]: why log_nfa[c] is what it is (TESTED, FEW_MATCHES, NO_MODEL, ONE_LINE,
    ONE_LIKENESS above)."""
    C = offsets.shape[0] - 1
    nq = qw.shape[0]
    nfq = 1
    for i in range(nq):
        nfq = max(nfq, qid[i] + 1)
    stamp_q = np.full(nfq, -1, np.int64)
    max_nd = 0
    for c in range(C):
        max_nd = max(max_nd, offsets[c + 1] - offsets[c])
    stamp_d = np.full(max(max_nd, 1), -1, np.int64)
    s = 0
    lim = limits.copy()
    for c in range(C):
        o0 = offsets[c]
        o1 = offsets[c + 1]
        for r in range(6):
            models[c, r] = np.nan
        inliers[c] = 0
        log_nfa[c] = np.inf
        outcome[c] = FEW_MATCHES
        dw = cw[o0:o1]
        bound, block = match_bound(qw, dw, cap)
        out_q = np.empty(bound, np.int64)
        out_d = np.empty(bound, np.int64)
        out_h = np.empty(bound, np.int64)
        scratch = np.empty(max(block, 1), np.int64)
        T = match_into(qw, qs, dw, cs[o0:o1], ht, cap, out_q, out_d, out_h, scratch)
        tentative[c] = T
        if T < min_tentative or T == 0:
            continue
        P1 = np.empty((T, 2), np.float64)
        P2 = np.empty((T, 2), np.float64)
        F1 = np.empty((T, 3), np.float64)
        F2 = np.empty((T, 3), np.float64)
        T1 = np.empty(T, np.float64)
        T2 = np.empty(T, np.float64)
        for k in range(T):
            i = out_q[k]
            j = o0 + out_d[k]
            P1[k, 0] = qxy[i, 0]
            P1[k, 1] = qxy[i, 1]
            P2[k, 0] = cxy[j, 0]
            P2[k, 1] = cxy[j, 1]
            for e in range(3):
                F1[k, e] = qfr[i, e]
                F2[k, e] = cfr[j, e]
            T1[k] = qth[i]
            T2[k] = cth[j]
        gq = np.empty(T, np.int64)
        for k in range(T):
            gq[k] = qid[out_q[k]]
        lim[2] = tilt_tans[c]
        area = float(sizes[c, 0]) * float(sizes[c, 1])
        p = min(math.pi * thr_d2s[c] / area, 1.0)  # a chance inlier: in the tolerance disc
        nfa, tol2 = np.inf, 1.0
        if by_nfa:
            n, nfa, tol2, s = ransac_pair_nfa(P1, P2, F1, T1, F2, T2, gq, out_d[:T], out_h[:T], thr_q2, thr_d2s[c],
                                              rot_cos, rot_sin, max_hypotheses, lo_iterations, INNER_RANSAC, lim,
                                              region, sizes[c, 0], sizes[c, 1], confidence, p, floor2, stamp_q,
                                              stamp_d, s, models[c])
        else:
            n, s = ransac_pair(P1, P2, F1, T1, F2, T2, gq, out_d[:T], out_h[:T], thr_q2, thr_d2s[c], rot_cos, rot_sin,
                               max_hypotheses, lo_iterations, lim, region, sizes[c, 0], sizes[c, 1], confidence,
                               stamp_q, stamp_d, s, models[c])
        inliers[c] = n
        outcome[c] = NO_MODEL
        if n <= MINIMAL_SAMPLE:
            continue
        outcome[c] = ONE_LINE
        inv = np.empty(6, np.float64)
        invert(models[c], inv)
        idx = np.empty(T, np.int64)
        s += 1
        k = count_inliers(models[c], inv, P1, P2, gq, out_d[:T], thr_q2, thr_d2s[c], stamp_q, stamp_d, s, idx)
        off_line = int(T * p)
        if collinear(P1, idx, k, thr_q2, off_line) or collinear(P2, idx, k, thr_d2s[c], off_line):
            continue  # degenerate: no affine map is tested (log_nfa stays +inf)
        if not by_nfa:  # the search kept the most inliers: their NFA, the residuals as they are
            ratios = np.empty(k, np.float64)
            residual_ratios(models[c], inv, P1, P2, idx, k, thr_q2, thr_d2s[c], ratios)
            nfa, tol2 = adaptive_nfa_tolerance(ratios, k, T, chance_probability(p, models[c], thr_q2, thr_d2s[c]),
                                               floor2)
        # the inliers that make the NFA (within the tolerance it chose) must not lie along one
        # line either: a precise model of a lattice along a girder keeps a chance inlier or two
        # off the line at r, never within a few pixels
        s += 1
        k = count_inliers(models[c], inv, P1, P2, gq, out_d[:T], thr_q2 * tol2, thr_d2s[c] * tol2, stamp_q, stamp_d,
                          s, idx)
        off_line = int(T * p * tol2)
        if collinear(P1, idx, k, thr_q2, off_line) or collinear(P2, idx, k, thr_d2s[c], off_line):
            continue
        if by_nfa and nfa <= clump_level:
            maps = min(T, max_hypotheses) * rot_cos.shape[0] * (lo_iterations + INNER_RANSAC) * LO_STEPS
            ok, s = clump_free(models[c], inv, P1, P2, F1, gq, out_d[:T], thr_q2, thr_d2s[c], p, floor2,
                               math.log10(maps), stamp_q, stamp_d, s)
            if not ok:
                outcome[c] = ONE_LIKENESS
                continue  # one local likeness, not a view: no map is tested (log_nfa stays +inf)
        outcome[c] = TESTED
        log_nfa[c] = nfa


@njit(cache=True)
def inlier_positions(model, P1, P2, cq, cd, thr_q2, thr_d2, nq, nd):
    """Positions (in correspondence order) of the inliers of a model: the same rule as the search."""
    inv = np.empty(6, np.float64)
    idx = np.empty(P1.shape[0], np.int64)
    if not invert(model, inv):
        return idx[:0]
    stamp_q = np.full(nq, -1, np.int64)
    stamp_d = np.full(nd, -1, np.int64)
    n = count_inliers(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, stamp_q, stamp_d, 0, idx)
    return idx[:n]

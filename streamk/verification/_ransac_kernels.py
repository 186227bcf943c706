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
def scale_ok(model, max_scale):
    det = model[0] * model[3] - model[1] * model[2]
    if not (det > 0.0):
        return False
    s = math.sqrt(det)
    return s <= max_scale and s * max_scale >= 1.0


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
def ransac_pair(P1, P2, F1, T1, F2, T2, cq, cd, ch, thr_q2, thr_d2, rot_cos, rot_sin, max_hypotheses,
                lo_iterations, max_scale, confidence, stamp_q, stamp_d, stamp0, best_model):
    """Best model of one pair of images: hypotheses from single correspondences (in order of
    Hamming distance, then correspondence order), each turned by every extra rotation;
    local optimisation (iterated least squares on the inliers) whenever a hypothesis beats
    the best so far; stops when ``confidence`` is reached for the best inlier ratio.
    Returns (inliers, next stamp). best_model is filled (NaN when no model has 3 inliers)."""
    T = P1.shape[0]
    s = stamp0
    for r in range(6):
        best_model[r] = np.nan
    if T == 0:
        return 0, s
    order = np.argsort(ch, kind="mergesort")
    idx = np.empty(T, np.int64)
    idx2 = np.empty(T, np.int64)
    cur = np.empty(T, np.int64)
    model = np.empty(6, np.float64)
    inv = np.empty(6, np.float64)
    best = 0
    n_hyp = min(T, max_hypotheses)
    log_fail = math.log(1.0 - confidence) if confidence < 1.0 else -np.inf  # 1: never stop early
    for h in range(n_hyp):
        k = order[h]
        for r in range(rot_cos.shape[0]):
            frame_hypothesis(F1, T1, F2, T2, k, rot_cos[r], rot_sin[r], P1, P2, model)
            if not scale_ok(model, max_scale) or not invert(model, inv):
                continue
            s += 1
            n = count_inliers(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, stamp_q, stamp_d, s, idx)
            if n <= best:
                continue
            best = n
            best_model[:] = model
            # local optimisation: least squares on the inliers, iterated while it gains
            ncur = n
            cur[:n] = idx[:n]
            for it in range(lo_iterations):
                if not fit_affine(P1, P2, cur, ncur, model):
                    break
                if not scale_ok(model, max_scale) or not invert(model, inv):
                    break
                s += 1
                n2 = count_inliers(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, stamp_q, stamp_d, s, idx2)
                if n2 <= best:
                    break
                best = n2
                best_model[:] = model
                ncur = n2
                cur[:n2] = idx2[:n2]
        if best > 0 and confidence < 1.0:
            eps = best / T
            if eps >= 1.0:
                break
            need = log_fail / math.log(1.0 - eps)
            if h + 1 >= need:
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
            if not scale_ok(model, max_scale) or not invert(model, inv):
                break
            s += 1
            n2 = count_inliers(model, inv, P1, P2, cq, cd, thr_q2, thr_d2, stamp_q, stamp_d, s, idx2)
            if n2 < best - best // 20:  # keeps (nearly) all: within 5 %
                break
            best = n2
            best_model[:] = model
    if best < 3:  # one or two correspondences do not determine an affine map: no model
        for r in range(6):
            best_model[r] = np.nan
    return best, s


@njit(cache=True)
def verify_batch(qw, qs, qxy, qfr, qth, qid, cw, cs, cxy, cfr, cth, offsets, thr_q2, thr_d2s, ht, cap, min_tentative,
                 rot_cos, rot_sin, max_hypotheses, lo_iterations, max_scale, confidence, inliers, models, tentative):
    """Match and verify the query against each candidate c (features offsets[c]:offsets[c+1]
    of the concatenated candidate arrays). Fills inliers[c], models[c] (6), tentative[c]."""
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
    for c in range(C):
        o0 = offsets[c]
        o1 = offsets[c + 1]
        for r in range(6):
            models[c, r] = np.nan
        inliers[c] = 0
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
        n, s = ransac_pair(P1, P2, F1, T1, F2, T2, gq, out_d[:T], out_h[:T], thr_q2, thr_d2s[c],
                           rot_cos, rot_sin, max_hypotheses, lo_iterations, max_scale, confidence,
                           stamp_q, stamp_d, s, models[c])
        inliers[c] = n


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

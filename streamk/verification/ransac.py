"""RANSAC with affine hypotheses from single correspondences (Philbin, Chum, Isard,
Sivic, Zisserman, "Object retrieval with large vocabularies and fast spatial
matching", CVPR 2007), with local optimisation (Chum, Matas, Kittler, DAGM 2003).

A Hessian-affine feature carries an affine frame A (the unit circle onto its
ellipse) and, upright (the gravity assumption of the Oxford/Paris literature,
pyhesaff's default), no orientation. One correspondence (p1, A1) <-> (p2, A2) then
gives a whole hypothesis: M = A2 R A1^-1, t = p2 - M p1, with R the rotation between
the two frames (identity for upright features, R(theta2 - theta1) when the extractor
gives orientations). So every correspondence is a hypothesis: no random sampling,
the search is deterministic (no RNG anywhere), and it costs O(H x T) for H hypotheses
and T correspondences.

- Hypotheses are tried in order of Hamming distance (the most reliable matches first,
  ties by correspondence order), at most ``max_hypotheses``, and the search stops once
  the usual RANSAC bound is met for the best inlier ratio eps: k >= log(1 - confidence)
  / log(1 - eps) (Fischler & Bolles 1981).
- Rotated views with upright features: ``rotations`` (degrees) turns every hypothesis
  by each extra angle (e.g. -30..30 in steps of 10). Upright SIFT descriptors only
  match up to roughly 20-30 degrees anyway; for collections with arbitrary rotations,
  extract rotation-invariant features (pyhesaff ``rotation_invariance=True``): their
  theta is stored (one byte) and used by the hypothesis.
- Inliers: symmetric transfer error, each side within its own image's threshold, and
  one-to-one (a feature takes part in one inlier at most; greedy in correspondence order).
- Local optimisation: whenever a hypothesis beats the best so far, fit a least-squares
  affine map (6 dof) to its inliers and recount, iterated while the count grows (at most
  ``lo_iterations`` times). Single-frame hypotheses are noisy (the ellipse shapes are
  estimates); this step is what makes them precise. A final polish refits on the inliers
  within 1/2, then 1/4 of the thresholds (kept when it retains >= 95 % of the inliers):
  the loose counting threshold admits correspondences a few pixels off, which would bias
  the map (a 2x-downscaled view: box 1.8 px off without it, 0.4 px with it).
- Degenerate hypotheses (a scale change beyond ``max_scale_change`` or a reflection)
  are skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import _ransac_kernels as _k
from ..errors import ConfigError, DimensionError, NonFiniteError

DEFAULT_ERROR_THRESHOLD = 0.02  # of the image's longer side: 20 px at 1,024 px
DEFAULT_MAX_HYPOTHESES = 100
DEFAULT_LO_ITERATIONS = 10
DEFAULT_MAX_SCALE_CHANGE = 10.0
DEFAULT_CONFIDENCE = 0.99
DEFAULT_ROTATIONS = (0.0,)

__all__ = ["RansacResult", "ransac_affine", "model_to_affine", "apply_affine"]


@dataclass(frozen=True)
class RansacResult:
    """inliers: the count; affine: (2, 3) [M | t] query -> candidate (NaN when under 3 inliers);
    inlier_positions: the inlier correspondences' positions in the input order."""

    inliers: int
    affine: np.ndarray
    inlier_positions: np.ndarray


def model_to_affine(model):
    m = np.asarray(model, np.float64)
    return np.array([[m[0], m[1], m[4]], [m[2], m[3], m[5]]])


def apply_affine(affine, points):
    """Points (n, 2) mapped by a (2, 3) affine matrix."""
    A = np.asarray(affine, np.float64)
    P = np.asarray(points, np.float64).reshape(-1, 2)
    return P @ A[:, :2].T + A[:, 2]


def check_ransac_params(max_hypotheses, lo_iterations, max_scale_change, confidence, rotations):
    """Validated (max_hypotheses, lo_iterations, max_scale, confidence, rotation cos, sin)."""
    for name, v, lo in (("max_hypotheses", max_hypotheses, 1), ("lo_iterations", lo_iterations, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}")
    try:
        max_scale = float(max_scale_change)
        conf = float(confidence)
        rot = np.deg2rad(np.asarray(rotations, dtype=np.float64).reshape(-1))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad RANSAC parameter ({exc})") from exc
    if not (math.isfinite(max_scale) and max_scale >= 1.0):
        raise ConfigError(f"max_scale_change must be a finite number >= 1, got {max_scale_change!r}")
    if not (0.0 < conf <= 1.0):
        raise ConfigError(f"confidence must lie in (0, 1], got {confidence!r}")
    if rot.size == 0 or rot.size > 360 or not np.isfinite(rot).all():
        raise ConfigError(f"rotations must be 1 to 360 finite angles in degrees, got {rotations!r}")
    return int(max_hypotheses), int(lo_iterations), max_scale, conf, np.cos(rot), np.sin(rot)


def check_threshold(value, what):
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what} must be a number, got {value!r}") from exc
    if not (math.isfinite(v) and v > 0):
        raise ConfigError(f"{what} must be positive and finite, got {value!r}")
    return v


def _array(a, shape, what, dtype=np.float64):
    try:
        a = np.asarray(a, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise DimensionError(f"{what}: not a numeric array ({exc})") from exc
    if a.shape != shape:
        raise DimensionError(f"{what}: expected shape {shape}, got {a.shape}")
    if dtype == np.float64 and not np.isfinite(a).all():
        raise NonFiniteError(f"{what} contains NaN or infinite values")
    return np.ascontiguousarray(a)


def ransac_affine(query_xy, candidate_xy, query_frames, candidate_frames, threshold_query, threshold_candidate,
                  query_theta=None, candidate_theta=None, query_ids=None, candidate_ids=None, order=None,
                  rotations=DEFAULT_ROTATIONS, max_hypotheses=DEFAULT_MAX_HYPOTHESES,
                  lo_iterations=DEFAULT_LO_ITERATIONS, max_scale_change=DEFAULT_MAX_SCALE_CHANGE,
                  confidence=DEFAULT_CONFIDENCE):
    """Best affine map of T correspondences, one per row of each array.

    query_xy, candidate_xy: (T, 2) positions; query_frames, candidate_frames: (T, 3)
    (a11, a21, a22); thetas: (T,) or None (upright); thresholds in pixels of each image;
    query_ids / candidate_ids: the feature of each side (one-to-one counting; default:
    every row its own feature); order: (T,) integer priority of the rows as hypotheses
    (lower first, e.g. the Hamming distance; default: row order).
    """
    P1 = _array(query_xy, np.shape(query_xy), "query_xy")
    T = P1.shape[0] if P1.ndim == 2 else -1
    if P1.ndim != 2 or P1.shape[1] != 2:
        raise DimensionError(f"query_xy: expected (T, 2), got {P1.shape}")
    P2 = _array(candidate_xy, (T, 2), "candidate_xy")
    F1 = _array(query_frames, (T, 3), "query_frames")
    F2 = _array(candidate_frames, (T, 3), "candidate_frames")
    if T and ((F1[:, 0] <= 0).any() or (F1[:, 2] <= 0).any() or (F2[:, 0] <= 0).any() or (F2[:, 2] <= 0).any()):
        raise DimensionError("frames need a11 > 0 and a22 > 0")
    T1 = np.zeros(T) if query_theta is None else _array(query_theta, (T,), "query_theta")
    T2 = np.zeros(T) if candidate_theta is None else _array(candidate_theta, (T,), "candidate_theta")
    ids = []
    for v, what in ((query_ids, "query_ids"), (candidate_ids, "candidate_ids")):
        v = np.arange(T, dtype=np.int64) if v is None else _array(v, (T,), what, np.int64)
        if T and v.min() < 0:
            raise DimensionError(f"{what} must be non-negative")
        ids.append(v)
    key = np.zeros(T, np.int64) if order is None else _array(order, (T,), "order", np.int64)
    tq = check_threshold(threshold_query, "threshold_query")
    tc = check_threshold(threshold_candidate, "threshold_candidate")
    max_h, lo, max_scale, conf, rc, rs = check_ransac_params(max_hypotheses, lo_iterations, max_scale_change,
                                                             confidence, rotations)
    nq = int(ids[0].max()) + 1 if T else 1
    nd = int(ids[1].max()) + 1 if T else 1
    model = np.empty(6, np.float64)
    n, _ = _k.ransac_pair(P1, P2, F1, T1, F2, T2, ids[0], ids[1], key, tq * tq, tc * tc, rc, rs, max_h, lo,
                          max_scale, conf, np.full(nq, -1, np.int64), np.full(nd, -1, np.int64), 0, model)
    pos = _k.inlier_positions(model, P1, P2, ids[0], ids[1], tq * tq, tc * tc, nq, nd) if n >= 3 \
        else np.zeros(0, np.int64)
    return RansacResult(int(n), model_to_affine(model), pos)

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
  the map (a 2x-downscaled view: box 1.8 px off without it, 0.4 px with it). This is
  ``ransac_affine``'s search, and the second stage's under the fixed rule of before 0.3.
- The second stage's significance test (spatial.py) searches the same hypotheses but keeps
  the model of least NFA, and optimises locally as Lebeda, Matas and Chum fixed LO-RANSAC
  ("Fixing the locally optimized RANSAC", BMVC 2012; ``_ransac_kernels.local_optimisation``):
  rounds of iterated least squares on the one-to-one inliers within a tolerance that shrinks
  from the counting threshold r to the one the NFA chose, then an inner RANSAC of 10
  least-squares fits of samples of the inliers (a fixed-seed generator: deterministic), each
  followed by a round; a refit replaces the best model only when it keeps its inliers at r
  and lowers its NFA.
- Only plausible models count, hypotheses and refits alike (``_ransac_kernels.plausible``):
  a model that no view of the same scene gives is skipped, and the search goes on for
  the best plausible one (refusing it only afterwards would leave true pairs whose best
  model strays with nothing). From the problem's geometry, not from any query:

  - orientation kept (det M > 0): a photo is never a mirror image of another view;
  - scale change sqrt(det M) within ``max_scale_change`` (10) either way;
  - anisotropy, the ratio of M's singular values (the "transition tilt" between the two
    views, 1 / cos of the viewing angle between them for a plane), at most
    ``max_anisotropy`` (4). Hessian-affine features stop matching near a transition tilt
    of 2.5 (Morel & Yu, "ASIFT", SIAM J. Imaging Sciences 2009, section 5), so a map that
    squeezes one direction 4 times more than the other is not what the matches can
    support: it is shear or collapse fitted to chance matches;
  - the vertical stays near vertical: with upright features (no orientations stored) the
    image's down direction M (0, 1) turns by at most ``max_tilt`` degrees. Upright SIFT
    descriptors stop matching beyond about 20-30 degrees of rotation (the gravity
    assumption of Philbin et al. 2007, which makes every single-correspondence hypothesis
    keep the vertical exactly), so the default is 30 degrees plus the largest extra
    hypothesis rotation; none when the features carry orientations;
  - with a ``region`` (the query box, or the whole query image) and the candidate's size:
    the mapped region a convex quadrilateral turning as the region does (not crossed,
    folded or flat), whose overlap with the candidate image covers at least
    ``min_overlap`` (one half: "mostly") of the smaller of the two.
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
DEFAULT_MAX_ANISOTROPY = 4.0  # singular-value ratio; Hessian-affine matches up to ~2.5 (see above)
DEFAULT_MAX_TILT = 30.0  # degrees the vertical may turn, beyond the extra rotations (upright SIFT)
DEFAULT_MIN_OVERLAP = 0.5  # of the smaller of the mapped region and the candidate image
NO_REGION = np.zeros((0, 2))
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


def check_plausibility_params(max_anisotropy, max_tilt, min_overlap):
    """Validated (max_anisotropy, max_tilt, min_overlap); max_tilt None stays None (the default rule)."""
    try:
        aniso = float(max_anisotropy)
        tilt = None if max_tilt is None else float(max_tilt)
        overlap = float(min_overlap)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad plausibility parameter ({exc})") from exc
    if not aniso >= 1.0:
        raise ConfigError(f"max_anisotropy must be >= 1 (inf: no bound), got {max_anisotropy!r}")
    if tilt is not None and not tilt > 0.0:
        raise ConfigError(f"max_tilt must be a positive angle in degrees (>= 90: no bound), got {max_tilt!r}")
    if not 0.0 <= overlap <= 1.0:
        raise ConfigError(f"min_overlap must lie in [0, 1] (0: no bound), got {min_overlap!r}")
    return aniso, tilt, overlap


def max_tilt_tan(max_tilt, rotations_rad, oriented):
    """tan of the largest turn of the vertical a model may make (inf: no bound): none with
    oriented features, else max_tilt (default: DEFAULT_MAX_TILT + the largest extra rotation)."""
    if oriented:
        return np.inf
    tilt = DEFAULT_MAX_TILT + float(np.rad2deg(np.abs(rotations_rad).max())) if max_tilt is None else max_tilt
    return np.inf if tilt >= 90.0 else math.tan(math.radians(tilt))


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
                  confidence=DEFAULT_CONFIDENCE, max_anisotropy=DEFAULT_MAX_ANISOTROPY, max_tilt=None,
                  region=None, candidate_size=None, min_overlap=DEFAULT_MIN_OVERLAP):
    """Best plausible affine map of T correspondences, one per row of each array.

    query_xy, candidate_xy: (T, 2) positions; query_frames, candidate_frames: (T, 3)
    (a11, a21, a22); thetas: (T,) or None (upright); thresholds in pixels of each image;
    query_ids / candidate_ids: the feature of each side (one-to-one counting; default:
    every row its own feature); order: (T,) integer priority of the rows as hypotheses
    (lower first, e.g. the Hamming distance; default: row order); max_anisotropy, max_tilt
    (degrees; None: 30 + the largest rotation, no bound with thetas), and with ``region``
    ((4, 2) corners in query pixels) and ``candidate_size`` ((w, h)) min_overlap: the
    plausibility rules of the module docstring.
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
    aniso, tilt, overlap = check_plausibility_params(max_anisotropy, max_tilt, min_overlap)
    oriented = bool(np.any(T1 != 0) or np.any(T2 != 0))
    limits = np.array([max_scale, aniso, max_tilt_tan(tilt, np.arctan2(rs, rc), oriented), overlap])
    poly, (w, h) = NO_REGION, (1, 1)
    if region is not None:
        poly = _array(region, (4, 2), "region")
        if candidate_size is None:
            raise ConfigError("a region needs the candidate_size (w, h) it must fall in")
        w, h = (int(v) for v in candidate_size)
    nq = int(ids[0].max()) + 1 if T else 1
    nd = int(ids[1].max()) + 1 if T else 1
    model = np.empty(6, np.float64)
    n, _ = _k.ransac_pair(P1, P2, F1, T1, F2, T2, ids[0], ids[1], key, tq * tq, tc * tc, rc, rs, max_h, lo,
                          limits, poly, w, h, conf, np.full(nq, -1, np.int64), np.full(nd, -1, np.int64), 0,
                          model)
    pos = _k.inlier_positions(model, P1, P2, ids[0], ids[1], tq * tq, tc * tc, nq, nd) if n >= 3 \
        else np.zeros(0, np.int64)
    return RansacResult(int(n), model_to_affine(model), pos)

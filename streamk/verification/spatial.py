"""The second stage's entry point: verify the first stage's top R candidates against
the query, and re-rank them.

    query record + R candidate records (bytes from the index, or GeometryRecord)
      -> per candidate, in one Numba call for all of them:
         tentative correspondences (matching.py rule) -> RANSAC over plausible models
         (ransac.py rule; the query region must map mostly into the candidate)
      -> per candidate: inliers, affine map query -> candidate, the matched region
         (the query box, or the whole query image, mapped into the candidate),
         the number of false alarms of its inliers, the inlier pairs on request
      -> verified: the inliers are significant (NFA <= false_alarms_per_pair)
    rerank: verified candidates first, by inliers (ties keep the first stage's order), the
    others after them in the first stage's order.

The decision: a contrario (Moisan & Stival, "A probabilistic criterion to detect rigid
point matches between two images and estimate the fundamental matrix", IJCV 2004, ORSA;
Desolneux, Moisan, Morel 2000). The background model H0 is a pair of unrelated images:
each of the n tentative correspondences lands its candidate point anywhere in the
candidate image, uniformly. It agrees with a given model x -> M x + t within a tolerance
e = rho r_d in the candidate and rho r_q in the query when its candidate point lies both in
the disc of radius rho r_d around the transferred query point and in the image of the query's
disc of radius rho r_q, an ellipse of area pi rho^2 r_q^2 det M (the back-transfer check): with
probability at most the smaller area over the image's,

    p(e) = pi rho^2 min(r_d^2, r_q^2 det M) / (w h)

(``_ransac_kernels.chance_probability``; exact when one region holds the other, as for a
similarity). A model whose j nearest one-to-one inliers agree within e has a number of false
alarms

    NFA(j, e) = (n - 3) C(n, 3) x P[Binomial(n - 3, p(e)) >= j - 3]

ORSA's count of tests for a model that 3 correspondences determine (Moisan & Stival's
eq. for the fundamental matrix with 7; Moisan, Moulon, Monasse, "Automatic homographic
registration of a pair of images, with a contrario elimination of outliers", IPOL 2012):
every affine map through 3 of the n correspondences, times the n - 3 values j may take,
times the chance that j - 3 of the others agree. The n - 3 factor pays for choosing the
tolerance, so the tolerance is chosen as ORSA does (adaptive): the inliers at the search's
tolerance r = error_threshold x the longer side, sorted by their error ratio (the larger of
transfer error / the candidate's r and back-transfer error / the query's r), each sets a
tolerance e_j = ratio_j x r, and the reported NFA is the least over j (``_ransac_kernels.
log10_nfa_adaptive``; a ratio is floored at one step of the records' positions). A true
match found by local optimisation agrees within a few pixels, far inside r; chance inliers
spread over the whole disc. The tests are the maps through 3 correspondences, not the ~100
single-correspondence seeds RANSAC tries (local optimisation below). Both factors are
needed in practice, because the uniform background misses what real photos do (features cluster on textured parts, and
repeat along facades, domes and lattices): on paris6k-subset's 30,490 ordered pairs of
photos of different landmarks, at NFA <= 1e-4 with the fixed tolerance r, counting the
seeds as the tests (n (n - 1)) verified 31 pairs, C(n, 3) alone one (a Louvre pavilion's
dome and the Invalides' dome, 9 inliers of 65), the count above none.

Local optimisation (ransac.py) refits the map by least squares, and a least-squares map pulls
toward the points it is fitted to: 6 parameters fitted to 7 chance correspondences leave them
all within a pixel or two. The NFA of a refit therefore takes, for each inlier it was fitted
to, its *deleted* residual, the residual against the map fitted to the others (r / (1 - h), h
its leverage: ``_ransac_kernels.deleted_ratios``); the leverages sum to 3, the 3
correspondences a map passes through. Why the count of tests stays valid: it is a union
bound over the maps the search can report, each scored on correspondences it was not fitted
to. The hypotheses are single correspondences (at most 100 per rotation), and local
optimisation draws no new one from outside the inliers of a model already found: each refit
is fitted to a subset of those inliers, and its deleted residuals score every point against
a map that did not see it. The maps tried per pair (a hundred hypotheses, and a few dozen
refits for each of the few that beat the best so far) stay far fewer than the C(n, 3) maps
the count pays for once n passes a few dozen; on 300 pairs of uniform chance correspondences
(the background model itself, 60-600 each) the least log10 NFA was 7.4 with local
optimisation, 4.9 without it. Without deleted residuals, local optimisation verified a
pair of different landmarks on paris6k-subset (7 inliers of 60, log10 NFA -4.7); with them,
the nearest is at -1.5.

The ellipse in p(e) matters when the candidate shows the scene smaller than the query does
(det M < r_d^2 / r_q^2): a map that shrinks by 2 in each direction sends the query's disc onto
a quarter of the area. Before LO and deleted residuals it let a pair of different landmarks
through on the CI floor's coarse vocabulary (tests/verification/test_false_verification.py:
an edge of the Eiffel tower against La Defense, 27 inliers of 1,472, det M 0.63); with them,
that floor's nearest pair of different landmarks is at log10 NFA -3.6 with the ellipse (-3.3
with the disc alone). On bench/false_verification.py (2026-11-26) the true pairs verified
went from 38.4 % to 39.9 % of 7,340 on the 250 photos and from 37.8 % to 39.2 % of 1,120 on
the 50, with no pair of different places verified in either; the nearest one on the 250
photos, the same pair, moved from log10 NFA -1.5 to -3.3 (paris_invalides_000459 against
paris_louvre_000232: 11 inliers of 166, the candidate showing the scene smaller).

Measured on the same benchmark the same day and not used (true pairs verified on 250 / 50
photos, pairs of different places verified; before: 38.4 / 37.8 %, 0 / 0):

- inliers whose frames also agree with the map's scale change (within a factor sqrt 2, an
  overlap error of 50 %), a chance one agreeing at the largest share of the pair's own
  tentative matches within such a window (about 0.4), the choice charged log10 2: 38.3 /
  37.1 %, 0 / 0. The true inliers of the pairs left unverified agree in scale 64 % of the
  time (92 % in verified pairs): the lost inliers cost more than the rarer chance saves;
- single-correspondence maps as the tests (each fixed by one correspondence's frames:
  hypotheses x (n - 1) tests, a binomial over the n - 1 others): 43.0 / 40.7 %, but 8 / 1
  false. Two textured patches that look alike agree with any map near them (louvre_000239
  against defense_000198: 7 inliers within 80 px of the seed, log10 NFA -6.7): features are
  not independent near each other. Setting aside the correspondences inside the seed's
  measurement region: 41.7 / 40.5 %, 2 / 0; also every inlier whose region overlaps a
  nearer one's: 38.2 / 37.2 %, 0 / 0;
- Hamming threshold 22: 34.9 / 33.3 %; query words 2: 35.5 / 33.7 %; 4: 39.7 / 38.8 %, 0 /
  1; 5: 41.1 / 40.1 %, 0 / 0, but 1.45x the CPU per pair and the CI floor's nearest pair of
  different landmarks at log10 NFA -8.2 (with the ellipse; measured again with the clump check,
  2026-11-26: 41.1 % of the 250 photos' true pairs and 0 false, 39.5 % of the 96 draws' and 5
  false, the CI floor 2 false, the Eiffel tower's lattice against a La Defense facade's, 31 of
  2,057 at -8.2: more words per query feature let two lattices meet); 8 pairs per word: 37.7 / 36.7 %;
  the search's own maps as the tests (8,000 x (n - 3) where fewer than ORSA's count) with the clump
  check (2026-11-26): 39.5 / 38.4 %, 1 / 2 false;
  no early stop: 38.4 / 37.8 %; 400 hypotheses, no early stop: 39.0 / 38.0 %, 1 / 0.

Degenerate inliers test nothing: when the inliers at the tolerance r lie along one line
within r in either image (all but the n p(r) chance inliers expected anywhere;
``_ransac_kernels.collinear``), they fix
the map along the line only, and the NFA is +inf; so it is when the inliers within the
tolerance the NFA chose lie along one line (a precise map of a lattice keeps one or two chance
inliers off the line at r, none within a few pixels). A lattice repeated along a line matches
any other by a translation along it: the 3 pairs of different landmarks the adaptive
tolerance alone verified were the Eiffel tower's girders against the Moulin Rouge's sails,
9-19 inliers within 5 px, spread 0.17-0.37 r across their line (true pairs: 0.58 r and
more, at the 1st percentile).

One local likeness is one piece of evidence (``clump_check``, on by default since
2026-11-26): features near each other are not independent, and a repeated element (a dome's
ornament, a lattice's node) matched at several scales and words gives a clump of inliers that
agree with any map near them together. On 96 random 50-photo collections, 5 pairs of
different places passed the test above that way (the Invalides' dome against the Louvre's
Pavillon de l'Horloge: 6 of 9 inliers within 30 px of each other, their regions
overlapping; the Eiffel tower's girders against the Moulin Rouge: 7 of 10 within 25 px), and
held-out queries found more (a row of girders and one clump off it: the clump alone fixed the
map across the row). So a model that passes must also pass ``_ransac_kernels.clump_free``, a
composite null (unrelated images that share one local likeness): for every inlier i, its
clump (the inliers whose query regions overlap i's at half their radii, |x_i - x_j| < (s_i +
s_j) / 2, s the frame's mean radius) and the tentative correspondences overlapping the clump
are left out, and the rest must still fix a map (not along one line in either image, the
check above) and be meaningful in Desolneux, Moisan and Morel's own sense, NFA <= 1, against
the model, the tests being the maps the search can report (hypotheses x rotations x (LO
rounds + inner RANSAC) x LO_STEPS, 8,000 at the defaults) x the n - 3 tolerances. A veto: it
refuses a model the test accepted, never accepts one, so the false-alarm bound above still
holds. A refused model's log10_nfa is +inf, as a degenerate one's. The level 1 is the
a-contrario literature's, not fitted; half radii, the regions' cores overlapping. Measured
(bench/README.md section 8): no pair of different places verified in 126,640 (96 draws; 5
without it) nor in 30,490 (250 photos); held-out queries against the 50 photos, 4 in 241,584
(19 without it); the cost, 2.1-2.5 points of the true pairs verified (39.9 -> 37.4 % on the
250 photos, 38.3 -> 36.2 % on the draws): a true pair whose evidence is one clump has, by that
evidence, matched one detail. ``clump_check=False`` gives the test alone.

Under H0, NFA <= epsilon happens for at most epsilon pairs on average, so epsilon is the
false-alarm rate itself: ``false_alarms_per_pair`` = 1e-4, the target of at most one false
verification per 10,000 pairs of photos of different places. The threshold adapts to the
pair: 12 inliers out of 60 tentative correspondences verify, 12 out of 800 (a coarse
vocabulary, a bursty scene) do not when they agree only within r (log10 NFA 5.9), but do
within r / 4 (-4.5). ``bench/false_verification.py`` measures the rate and
the share of true pairs verified on real photos (bench/README.md).

The rule before 0.3 (verified when inliers >= min_inliers = 12, no plausibility checks)
stays available for comparisons: ``VerificationParams.fixed_inliers()``.

Cost: decoding the R records (numpy), then per candidate a merge of two sorted word
lists plus RANSAC over its correspondences (bounded by max_hypotheses x T); the
candidates with fewer than min_inliers correspondences skip RANSAC. No Python loop
runs over features or correspondences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from . import _ransac_kernels as _k
from ..checks import clip_box
from ..errors import ConfigError, EncoderMismatchError, GeometryRecordError
from .matching import DEFAULT_HAMMING_THRESHOLD, DEFAULT_MAX_PAIRS_PER_WORD, check_match_params, match_arrays
from .ransac import (DEFAULT_CONFIDENCE, DEFAULT_ERROR_THRESHOLD, DEFAULT_LO_ITERATIONS, DEFAULT_MAX_ANISOTROPY,
                     DEFAULT_MAX_HYPOTHESES, DEFAULT_MAX_SCALE_CHANGE, DEFAULT_MIN_OVERLAP, DEFAULT_ROTATIONS,
                     NO_REGION, apply_affine, check_plausibility_params, check_ransac_params, check_threshold,
                     max_tilt_tan, model_to_affine)
from .records import POS_LEVELS, GeometryRecord, unpack, unpack_many

DEFAULT_MIN_INLIERS = 12  # the fixed rule before 0.3 (decision="inliers")
DEFAULT_FALSE_ALARMS_PER_PAIR = 1e-4  # epsilon: <= 1 false verification per 10,000 pairs (module docstring)
DECISIONS = ("significance", "inliers")
DEFAULT_R = 100

# why a checked candidate is not verified: a stable code (JSON's "why") and what it means to a user
WHY_NOT_VERIFIED = {
    "few-matches": "too few tentative matches for a model",
    "no-model": "no plausible affine map with more than 3 inliers",
    "one-line": "the inliers lie along one line: they fix no affine map",
    "one-likeness": "one local likeness: without one clump of overlapping features the rest could be chance",
    "chance": "the inliers could be chance: their number of false alarms is above the bar",
    "few-inliers": "fewer inliers than min_inliers (the rule before 0.3)",
    "damaged": "its stored local-geometry record is damaged (`streamk index verify` finds it): not checked",
}
NFA_MEANING = ("log10 NFA: how often unrelated photos would show inliers this many and this precise by chance, "
               "per pair, as a power of ten; verified at log10 of the bar and below (false_alarms_per_pair: -4 by "
               "default, 1 in 10,000 pairs), the lower the surer")


def log10_nfa_text(log10_nfa):
    """A result's log10 NFA as a table shows it ("-52.7"), "" when no model was tested."""
    if log10_nfa is None or not math.isfinite(log10_nfa):
        return ""
    return f"{log10_nfa:.1f}"


_WHY_OF_OUTCOME = {_k.FEW_MATCHES: "few-matches", _k.NO_MODEL: "no-model", _k.ONE_LINE: "one-line",
                   _k.ONE_LIKENESS: "one-likeness"}

__all__ = ["DEFAULT_FALSE_ALARMS_PER_PAIR", "DEFAULT_MIN_INLIERS", "DEFAULT_R", "NFA_MEANING", "Reranked",
           "Verification", "VerificationParams", "WHY_NOT_VERIFIED", "log10_nfa_text", "rerank", "verify_geometry"]


@dataclass(frozen=True)
class VerificationParams:
    """Every parameter of the second stage (defaults from the literature: each field's comment, and the module
    docstrings of matching.py, ransac.py and this one)."""

    hamming_threshold: int = DEFAULT_HAMMING_THRESHOLD  # bits of 64 (Jégou et al. 2008)
    max_pairs_per_word: int = DEFAULT_MAX_PAIRS_PER_WORD  # burstiness cap per shared word
    error_threshold: float = DEFAULT_ERROR_THRESHOLD  # fraction of each image's longer side
    min_inliers: int = DEFAULT_MIN_INLIERS  # decision "inliers": verified when inliers >= this
    max_hypotheses: int = DEFAULT_MAX_HYPOTHESES
    lo_iterations: int = DEFAULT_LO_ITERATIONS
    rotations: tuple = DEFAULT_ROTATIONS  # extra hypothesis rotations, degrees (gravity: 0 only)
    max_scale_change: float = DEFAULT_MAX_SCALE_CHANGE
    confidence: float = DEFAULT_CONFIDENCE
    decision: str = "significance"  # or "inliers": the fixed rule before 0.3
    false_alarms_per_pair: float = DEFAULT_FALSE_ALARMS_PER_PAIR  # epsilon: verified when NFA <= it
    max_anisotropy: float = DEFAULT_MAX_ANISOTROPY  # plausibility (ransac.py): inf, 0 and 90 switch them off
    min_overlap: float = DEFAULT_MIN_OVERLAP
    max_tilt: float | None = None  # degrees; None: 30 + the largest extra rotation, none with orientations
    clump_check: bool = True  # significance: a model must survive leaving out any one clump (docstring)

    @classmethod
    def fixed_inliers(cls, **fields_):
        """The rule before 0.3, for comparisons: verified when inliers >= min_inliers (12),
        models checked for their scale change only."""
        return cls(**{"decision": "inliers", "max_anisotropy": math.inf, "min_overlap": 0.0, "max_tilt": 90.0,
                      **fields_})

    def checked(self):
        """(validated values ready for the kernels) or ConfigError."""
        check_match_params(self.hamming_threshold, self.max_pairs_per_word)
        err = check_threshold(self.error_threshold, "error_threshold")
        if err >= 1.0:
            raise ConfigError(f"error_threshold is a fraction of the image side (< 1), got {err}")
        mi = self.min_inliers
        if isinstance(mi, bool) or not isinstance(mi, (int, np.integer)) or mi < 3:
            raise ConfigError(f"min_inliers must be an integer >= 3 (an affine map needs 3), got {mi!r}")
        if self.decision not in DECISIONS:
            raise ConfigError(f"decision must be one of {DECISIONS}, got {self.decision!r}")
        eps = self.false_alarms_per_pair
        if isinstance(eps, bool) or not isinstance(eps, (int, float, np.number)) or not 0.0 < eps < 1.0:
            raise ConfigError(f"false_alarms_per_pair must be a number in (0, 1), got {eps!r}")
        if not isinstance(self.clump_check, (bool, np.bool_)):
            raise ConfigError(f"clump_check must be True or False, got {self.clump_check!r}")
        check_plausibility_params(self.max_anisotropy, self.max_tilt, self.min_overlap)
        return err, check_ransac_params(self.max_hypotheses, self.lo_iterations, self.max_scale_change,
                                        self.confidence, self.rotations)


@dataclass(frozen=True, eq=False)
class Verification:
    """Why a candidate is where it is.

    inliers: one-to-one inlier correspondences of the best plausible affine map;
    tentative: the correspondences RANSAC saw; verified: the decision (NFA <= the false-
    alarm rate, or inliers >= min_inliers under the old rule); affine: (2, 3) query ->
    candidate [M | t] (NaN when no model has 3 inliers); region: (4, 2) polygon in the
    candidate, the query box (or the whole query image) mapped by the affine map (None
    without a model); pairs: on request, (inliers, 4) float32 rows x_q, y_q, x_c, y_c;
    log10_nfa: log10 of the number of false alarms of the inliers, the least over the
    tolerances they set, the points a refit was fitted to counted by their deleted residuals
    (module docstring; +inf without a model, with inliers along one line, or with
    evidence that one clump of them carries: the clump check); why: None when verified,
    else a key of :data:`WHY_NOT_VERIFIED` (the first check the candidate failed).
    """

    inliers: int
    tentative: int
    verified: bool
    affine: np.ndarray
    region: np.ndarray | None
    pairs: np.ndarray | None = None
    log10_nfa: float = math.inf
    why: str | None = None


class Reranked(tuple):
    """(ranking, n_verified): the re-ranked ids, verified first."""

    __slots__ = ()

    def __new__(cls, ranking, n_verified):
        return super().__new__(cls, (ranking, n_verified))

    ranking = property(lambda self: self[0])
    n_verified = property(lambda self: self[1])


def _as_record(r, what):
    if isinstance(r, GeometryRecord):
        return r
    if isinstance(r, (bytes, bytearray, memoryview)):
        return unpack(r)
    raise GeometryRecordError(f"{what}: expected geometry record bytes or a GeometryRecord, got {type(r).__name__}")


def _box_polygon(query_box, image_size):
    if query_box is None:
        w, h = image_size
        x1, y1, x2, y2 = -0.5, -0.5, w - 0.5, h - 0.5
    else:
        # streamk's one box rule, clipped to the query image: the region is what the image shows
        x1, y1, x2, y2 = clip_box(query_box, image_size, "query_box")
    return np.array([(x1, y1), (x2, y1), (x2, y2), (x1, y2)], np.float64)


def verify_geometry(query, candidates, query_box=None, return_pairs=False, params=None, **overrides):
    """Spatially verify each candidate against the query.

    query: the query's record (GeometryRecord from make_record, or bytes); candidates:
    a sequence of records (bytes as stored, or GeometryRecord); query_box: (x1, y1, x2,
    y2) in query pixels for the matched region (default: the whole query image);
    params: VerificationParams, or its fields as keyword overrides.
    Returns one :class:`Verification` per candidate, in the given order.
    Raises GeometryRecordError (damaged record), EncoderMismatchError (records of
    another vocabulary), ConfigError (parameters).
    """
    params = params or VerificationParams()
    if not isinstance(params, VerificationParams):
        raise ConfigError(f"params must be a VerificationParams, got {type(params).__name__}")
    if overrides:
        known = {f.name for f in fields(VerificationParams)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown verification parameter(s) {unknown}; known: {sorted(known)}")
        params = replace(params, **overrides)
    err, (max_h, lo, max_scale, conf, rc, rs) = params.checked()
    q = _as_record(query, "query")
    region_src = _box_polygon(query_box, q.image_size)
    if isinstance(candidates, (bytes, bytearray, memoryview, GeometryRecord)):
        raise ConfigError("candidates must be a sequence of records (got a single record)")
    candidates = list(candidates)
    C = len(candidates)
    cand = _candidate_arrays(candidates)
    offsets, words, sigs, xy, frames, theta, sizes, vocs = cand
    bad = np.flatnonzero(vocs != q.vocabulary)
    if len(bad):
        raise EncoderMismatchError(f"candidate {bad[0]} was encoded with vocabulary {int(vocs[bad[0]]):#010x}, "
                                   f"the query with {q.vocabulary:#010x}")
    inliers = np.zeros(C, np.int64)
    models = np.full((C, 6), np.nan)
    tentative = np.zeros(C, np.int64)
    log_nfa = np.full(C, np.inf)
    outcome = np.full(C, _k.FEW_MATCHES, np.int64)
    level = math.log10(params.false_alarms_per_pair)  # verified: log10 NFA <= it
    thr_q = err * max(q.image_size)
    thr_d = err * sizes.max(axis=1).astype(np.float64) if C else np.zeros(0)
    if C:
        limits, tilt_tans, region = _plausibility(params, max_scale, rc, rs, q, theta, offsets, region_src)
        min_tentative = params.min_inliers if params.decision == "inliers" else 4  # NFA: k > 3
        clump_level = level if params.clump_check else -math.inf
        _k.verify_batch(q.words.astype(np.int64), q.signatures, q.xy, q.frames, q.theta, q.ids, words, sigs,
                        xy, frames, theta, offsets, thr_q * thr_q, thr_d * thr_d, int(params.hamming_threshold),
                        int(params.max_pairs_per_word), int(min_tentative), rc, rs, max_h, lo, limits, tilt_tans,
                        region, sizes.astype(np.float64), conf, _quantisation_floor(err),
                        params.decision == "significance", clump_level, inliers, models, tentative, log_nfa, outcome)
    if params.decision == "inliers":
        verified = inliers >= params.min_inliers
        tested_why = "few-inliers"
    else:
        verified = log_nfa <= level
        tested_why = "chance"
    out = []
    for c in range(C):
        has_model = bool(np.isfinite(models[c]).all())
        affine = model_to_affine(models[c])
        region = apply_affine(affine, region_src) if has_model else None
        pairs = None
        if return_pairs:
            pairs = _pairs(q, cand, c, models[c], params, thr_q, thr_d[c]) if has_model \
                else np.zeros((0, 4), np.float32)
        yes = bool(verified[c] and has_model)
        why = None if yes else _WHY_OF_OUTCOME.get(int(outcome[c]), tested_why)
        if why == "one-line" and params.decision == "inliers":  # the old rule counts such inliers too
            why = tested_why
        out.append(Verification(int(inliers[c]), int(tentative[c]), yes, affine, region, pairs, float(log_nfa[c]),
                                why))
    return out


def _quantisation_floor(err):
    """The smallest squared tolerance ratio of the adaptive NFA: a tolerance of one step of the
    records' positions (POS_LEVELS per side), as a fraction of the threshold err x the side."""
    return (1.0 / (POS_LEVELS * err)) ** 2


def _plausibility(params, max_scale, rc, rs, q, theta, offsets, region_src):
    """The kernel's limits (max_scale, max_anisotropy, -, min_overlap), each candidate's
    tan of the largest turn of the vertical (no bound where either side has orientations),
    and the query region (none when min_overlap is 0)."""
    limits = np.array([max_scale, float(params.max_anisotropy), 0.0, float(params.min_overlap)])
    with_theta = np.concatenate([[0], np.cumsum(theta != 0)])
    oriented = (with_theta[offsets[1:]] - with_theta[offsets[:-1]] > 0) | q.has_theta
    tilt_tans = np.where(oriented, np.inf, max_tilt_tan(params.max_tilt, np.arctan2(rs, rc), False))
    region = region_src if params.min_overlap > 0 else NO_REGION
    return limits, tilt_tans, np.ascontiguousarray(region, np.float64)


def _candidate_arrays(candidates):
    """Concatenated arrays of the candidates (records.unpack_many's tuple)."""
    if all(isinstance(c, (bytes, bytearray, memoryview)) for c in candidates):
        return unpack_many(candidates)
    recs = [_as_record(c, f"candidate {i}") for i, c in enumerate(candidates)]
    for i, r in enumerate(recs):
        if r.feature_ids is not None:
            raise ConfigError(f"candidate {i} is a multiple-assignment (query) record")
    offsets = np.zeros(len(recs) + 1, np.int64)
    np.cumsum([len(r) for r in recs], out=offsets[1:])

    def cat(name, dtype, shape):
        parts = [np.asarray(getattr(r, name), dtype).reshape(shape) for r in recs]
        return np.ascontiguousarray(np.concatenate(parts) if parts else np.zeros(shape[:0] + (0,) + shape[1:], dtype))

    return (offsets, cat("words", np.int64, (-1,)), cat("signatures", np.uint64, (-1,)),
            cat("xy", np.float32, (-1, 2)), cat("frames", np.float32, (-1, 3)), cat("theta", np.float32, (-1,)),
            np.array([r.image_size for r in recs], np.int64).reshape(-1, 2),
            np.array([r.vocabulary for r in recs], np.int64))


def _pairs(q, cand, c, model, params, thr_q, thr_d):
    """The inlier pairs of a model: the search's own rule, recomputed for one candidate."""
    offsets, words, sigs, xy = cand[:4]
    o0, o1 = offsets[c], offsets[c + 1]
    cq, cd, ch = match_arrays(q.words.astype(np.int64), q.signatures, words[o0:o1], sigs[o0:o1],
                              int(params.hamming_threshold), int(params.max_pairs_per_word))
    P1 = q.xy[cq].astype(np.float64)
    P2 = xy[o0:o1][cd].astype(np.float64)
    pos = _k.inlier_positions(model, P1, P2, q.ids[cq], cd, thr_q * thr_q, thr_d * thr_d, max(q.n_features, 1),
                              max(int(o1 - o0), 1))
    return np.concatenate([P1[pos], P2[pos]], axis=1).astype(np.float32)


def rerank(ranking, inliers, min_inliers=DEFAULT_MIN_INLIERS):
    """Verified candidates first by inliers (ties keep the first-stage order), then the
    others in the first-stage order. ``ranking``: the candidates' ids in first-stage
    order; ``inliers``: their inlier counts (verified: >= min_inliers), or their
    Verification objects (verified: their own decision).
    Returns :class:`Reranked` (ranking, n_verified)."""
    ranking = np.asarray(ranking)
    if ranking.ndim != 1 or ranking.dtype.kind not in "iu":
        raise ConfigError(f"ranking must be a 1-D integer array, got {ranking.shape} {ranking.dtype}")
    counts = np.array([v.inliers if isinstance(v, Verification) else v for v in inliers], dtype=np.int64) \
        if not isinstance(inliers, np.ndarray) else np.asarray(inliers)
    if counts.shape != ranking.shape or counts.dtype.kind not in "iu":
        raise ConfigError(f"inliers must be {len(ranking)} integers, got {counts.shape} {counts.dtype}")
    if isinstance(min_inliers, bool) or not isinstance(min_inliers, (int, np.integer)) or min_inliers < 1:
        raise ConfigError(f"min_inliers must be a positive integer, got {min_inliers!r}")
    decided = None if isinstance(inliers, np.ndarray) else [v.verified for v in inliers if isinstance(v, Verification)]
    ok = np.array(decided, bool) if decided and len(decided) == len(counts) else counts >= min_inliers
    ver = np.flatnonzero(ok)
    ver = ver[np.argsort(-counts[ver], kind="stable")]
    order = np.concatenate([ver, np.flatnonzero(~ok)])
    return Reranked(ranking[order].astype(np.int64), int(len(ver)))

"""Copies told apart from other photos of the same scene: exact | copy | same scene.

A pair of images that the second stage verified is one of three things, and a user acts
differently on each (keep one of a copy, never delete one of two photos of a place):

- *exact*: the same bytes (sha256);
- *copy*: the same capture, edited: re-encoded, resized, cropped, bordered or letterboxed,
  captioned or watermarked, its tone or colour changed, turned by quarter turns;
- *same scene*: any other verified pair, burst shots of one scene seconds apart included
  (their geometry agrees; their pixels do not: people moved, the camera moved a little).

A pair is a copy when both hold (:func:`classify_pair`):

1. Geometry: one *similarity* (4 dof: scale, rotation, translation; no shear, no
   perspective) maps one image onto the other and carries dense one-to-one inliers over
   most of the smaller image. Every edit above is a similarity of the capture (a quarter
   turn is a rotation; the caller turns the query, since upright features do not match
   across a quarter turn). The affine map of the second stage's inliers is refitted as a
   least-squares similarity (closed form, Umeyama 1991 in complex numbers; a few rounds
   within ``tolerance``, 1 % of the longer side, to leave the outliers out), then its
   inliers are recounted *precisely*: within MAX_ERROR_PX = 1.5 pixels of the coarser
   image as its extractor saw it. A copy's points land where the similarity puts them, up
   to the keypoints' own localisation error (measured on edited Paris photos: 90 % within
   0.2-1.4 px at 1,024 px, re-encoded, resized, cropped, bordered or toned alike);
   another capture's land there only where the scene is one plane seen from one place
   (photos of one landmark from a few steps apart: 90 % within 3-9 px).
   *Covered*: on an 8 x 8 grid over each image, the share of the cells holding any of its
   features that hold a precise inlier; the larger of the two images' shares (the smaller
   image, or the one whose features survived the edit better). A copy keeps its whole
   frame inside the other image (a crop is the smaller image and lies entirely in the
   original; a border adds cells without features, which do not count), so its feature
   cells would all hold inliers if matching were perfect; edits lose a few (an overlaid
   caption band or watermark covers a fifth of a frame at most, a heavy re-encoding
   loses sparse cells). ``min_covered`` = 0.75, "most of the smaller image": a quarter
   of the cells may be lost; two captures whose common plane covers under three quarters
   of the smaller one are not copies. Two edits at once can lose more
   (``bench/copy_detection.py --combined``: 6 of 140 copies at 0.69-0.71, a band or a crop
   and a downscale or a heavy re-encoding), but the bar cannot follow them down: at 0.6,
   photos of a person posing before the Grande Arche from one spot (covered 0.61-0.73,
   pixels agreeing 0.90-0.97 over the covered cells, where the arch is) became copies, 3
   false pairs in bench/copy_detection.py's first draw. Nor can sparse cells be left out of
   the count (cells of 1-3 features, which heavy edits empty: 6 of 260 copies under 0.75
   counted with them, 2 without): that lifted a tone-edited copy of one of those photos
   against the other from 0.73 to 0.81, a false copy.
   *Contained*: the share of the smaller image's features (in the common frame) that the
   similarity maps inside the other image. A copy's content lies inside its source's frame
   or holds it whole (a crop, a border, a resize: 1, up to features at the very edge), so
   MIN_CONTAINED = 0.95; two captures panned or stepped aside show parts of the scene the
   other does not, whatever survived of their features (of 154 verified pairs of different
   photos of one landmark with a similarity, drawn at random, 40 under 0.95; 280 edited
   copies under one or two edits: all 1.0). A pan of one capture (two windows of it, each
   showing a tenth the other lacks) is a pair neither of which can replace the other.
   Detail: a copy never shows more than its source. When one image is the smaller part of
   the common frame (a crop, area ratio < SAME_FRAME = 0.9) and holds more than
   MAX_DETAIL_RATIO = 1.25 times the other's pixels per unit of it, it is a zoomed capture
   from the same place, not a crop (copies upscaled by more than 1.25 are not supported), or
   two copies of a larger original, one cropped at full size and one reduced: neither can
   replace the other, as two different crops of one photo (each is a copy of the original).
   Between MIN_BAND_SCALE = 1.1 and 1.25 a zoomed capture and an upscaled crop are told apart
   by what the finer view holds beyond the coarser one's resolution (3., after the pixels).
2. Pixels: the two images, warped by that similarity onto a common grid (the smaller
   image's frame, ``compare_side`` = 128 px on its longer side, from what the index
   stores: its thumbnails, or the source files), agree over the covered region (the cells
   that hold precise inliers: an overlay holds none, and is left out). Each image is
   normalised locally (its Gaussian local mean removed, divided by its local contrast),
   which cancels tone, gamma, brightness and colour changes (any locally monotone, nearly
   affine change of the intensity) and keeps the fine structure. *Agreement* is the
   normalised cross-correlation of the two. For a copy, what differs is the edit's noise
   (resampling, JPEG blocks): the locally normalised images share most of their variance.
   For a re-capture, whatever moved by a pixel at 128 px (a person, a car, a branch,
   parallax between depths when the camera moved) decorrelates.
   ``min_agreement`` = 0.5: the correlation of two signals with a common part s and
   independent parts n is s^2 / (s^2 + n^2), so 0.5 asks that the common part carry at
   least as much power as the differences (0 dB); unrelated pixels on ~10^4 samples
   correlate by 0.01 (1 / sqrt(n)), so any pair above 0.5 is far beyond chance, and the
   threshold separates "the same pixels, edited" from "another capture" rather than
   from noise. ``bench/copy_detection.py`` measures both classes.
3. Detail beyond the coarser view's limit (:func:`new_detail`), for a crop whose finer view
   shows the common region at s = 1.1-1.25 times the other's pixels. A copy never holds detail
   its source lacks: an upscaled crop's spectrum stops at its source's Nyquist limit, 1 / (2 s)
   cycles per finer pixel; between that and its own limit (1/2) it holds only what the
   interpolation mirrors back from just below (and its JPEG noise). A closer capture holds the
   scene's own finer detail there, which a natural image's 1/f spectrum (power 1 / |f|^2,
   equal power per octave) puts at a predictable level. Measured at full size over the covered
   region, on Hann-windowed 64-px tiles (Welch), each band between square frequency contours
   turned as the similarity turns, 5 % apart from the limit (BAND_GUARD), the Nyquist row and
   column left out:
   *unexplained*: the finer view's power beyond the limit that the coarser one, sampled onto the
   finer grid by the similarity (bilinear: it mirrors the same content an upscaling mirrors), does
   not predict, i.e. its power minus |cross-spectrum|^2 / the prediction's power, the spectra
   smoothed over 3 x 3 frequency bins (the coherence; a misalignment of half a pixel keeps it);
   *relative to a natural continuation*: divided by the finer view's power in the octave below
   the limit, and by the ratio a 1/f image gives on the same bins (:func:`band_ratio`: 1 for a
   1/f image), then by the coarser view's own such ratio at the same fractions of its own
   limit (how fast this scene, camera and JPEG lose power near a limit).
   A closer capture scores what a second camera like the first would hold, ~0.5-1 (the
   Invalides dome shot twice from one spot, 000252 / 000255, 1.15x: 0.53); an upscaled crop
   scores its interpolation's mismatch and its JPEG noise (000255 warped into 000252's frame,
   bicubic or bilinear: 0.10-0.14 saved at quality 90, 0.24-0.29 at quality 30). 54 crops of 6
   Paris photos upscaled 1.12, 1.2, 1.25x by Lanczos, bicubic, bilinear (quality 90): 47 stay
   copies, 1 bilinear at 1.12x scores 0.38 (same scene), and the 6 at 1.25x of two photos
   measure 1.3x (MAX_DETAIL_RATIO refuses them, as before). ``bench/copy_detection.py``'s
   upscale kind measures the recall.
   MIN_NEW_DETAIL = 0.35: above it, more than a third of the detail a natural image would hold
   beyond the limit is there and unexplained: a zoomed capture, same scene. Not measured, so not
   applied (the pair keeps rules 1 and 2): scale under MIN_BAND_SCALE (the band is under a tenth
   of the spectrum and inside the interpolation's transition); pixels that are not at full size
   (a stored thumbnail, 256 px, has no band above either image's limit; a file larger than
   PIXELS_SIDE = 1024 px is decoded smaller): such a zoomed capture stays a copy.

*exact*: the same sha256 (:func:`classify_pair` compares the two digests; :func:`same_pixels`
tells whether two images' bytes decode to equal pixels, for callers that want that too).

Mirrored copies: a mirror image reverses orientation (the second stage's plausibility
refuses det < 0, and RootSIFT of a mirrored patch is another descriptor), so the caller
matches the mirrored query instead, as it turns the query for quarter turns
(``streamk.index.copies_of(..., mirrored=True)``). Not supported: copies with a perspective
change (a photo of a screen or a print); rotations by other angles than quarter turns
beyond what upright features survive (about 20 degrees); crops under about a third of
the original (too few features). ``bench/copy_detection.py`` measures the supported edits.

Cost: per pair one least-squares fit and a grid count (numpy, no Python loop over
matches), and for the pairs whose geometry passes, two 128-px resamplings and a few
Gaussian filters (scipy.ndimage), a few milliseconds at 1,024 px; the band test, for crops
at 1.1-1.25x only, one bilinear resampling and some 200 FFTs of 64 x 64 tiles, some 50 ms.
Decoding a thumbnail (256 px JPEG) takes a few milliseconds; a source file (up to 1,024 px,
8-bit grey) some 10-20 ms.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, fields, replace

import numpy as np

from ..errors import ConfigError, ImageReadError

KINDS = ("exact", "copy", "same scene")  # verified pairs, most alike first; "different": not verified
DEFAULT_TOLERANCE = 0.01  # similarity inliers: within 1 % of the longer side (module doc)
DEFAULT_MIN_COVERED = 0.75  # "most of the smaller image" (module doc)
MIN_CONTAINED = 0.95  # the smaller image's features mapped inside the other's frame: a copy's lie inside (module doc)
DEFAULT_MIN_AGREEMENT = 0.5  # common part >= differences, 0 dB (module doc)
DEFAULT_COMPARE_SIDE = 128  # pixels, the longer side of the common grid
GRID = 8  # cells a side for the covered fraction
PIXELS_SIDE = 1024  # the longer side source files are decoded at: the extractor's, full size for the band test
BAND_PATCH = 64  # pixels a side of the tiles the band spectra are averaged over (Welch)
BAND_GUARD = 1.05  # frequencies within 5 % of the coarser image's limit belong to neither band (interpolation)
COHERENCE_BINS = 3  # frequency bins a side the cross-spectrum is smoothed over (a 0.5 px misalignment keeps it)
MIN_BAND_SCALE = 1.1  # finer / coarser pixels below which the band beyond the coarser's limit is too thin to measure
MIN_NEW_DETAIL = 0.35  # new detail beyond the coarser image's limit, of its own: a re-capture (module doc)
LOCAL_MEAN_SIGMA = 1.0  # compare-grid pixels: the band kept is the fine structure
LOCAL_CONTRAST_SIGMA = 3.0
MIN_PIXELS = 64  # common grid pixels below which agreement is not computed
MAX_ERROR_PX = 1.5  # similarity inliers: within 1.5 px of the coarser image's extraction grid (module doc)
MAX_DETAIL_RATIO = 1.25  # the part of a photo more detailed than its supposed source by more: a re-capture
SAME_FRAME = 0.9  # area ratio above which both images show the same frame (a resize, not a crop)
NO_PIXELS = "geometry of a copy, but no pixels to compare"  # the reason of a pair kept as same scene for want of pixels

__all__ = [
    "DEFAULT_COMPARE_SIDE",
    "DEFAULT_MIN_AGREEMENT",
    "DEFAULT_MIN_COVERED",
    "DEFAULT_TOLERANCE",
    "KINDS",
    "NO_PIXELS",
    "CopyParams",
    "PairClass",
    "band_ratio",
    "classify_pair",
    "covered_cells",
    "contained_fraction",
    "covered_fraction",
    "decode_for_copies",
    "detail_ratio",
    "fit_similarity",
    "new_detail",
    "pixel_agreement",
    "precise_inliers",
    "rotate_record_frame",
    "same_pixels",
    "similarity_inliers",
]


@dataclass(frozen=True)
class CopyParams:
    """The copy rule's parameters (module doc for each figure)."""

    tolerance: float = DEFAULT_TOLERANCE
    min_covered: float = DEFAULT_MIN_COVERED
    min_agreement: float = DEFAULT_MIN_AGREEMENT
    compare_side: int = DEFAULT_COMPARE_SIDE

    def checked(self):
        for name in ("tolerance", "min_covered", "min_agreement"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not 0.0 < float(v) < 1.0:
                raise ConfigError(f"{name} must be a number in (0, 1), got {v!r}")
        s = self.compare_side
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 16 <= s <= 1024:
            raise ConfigError(f"compare_side must be an integer in [16, 1024] (pixels), got {s!r}")
        return self

    @classmethod
    def of(cls, params=None, **overrides):
        params = params or cls()
        if not isinstance(params, cls):
            raise ConfigError(f"params must be a CopyParams, got {type(params).__name__}")
        unknown = sorted(set(overrides) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"unknown copy parameter(s) {unknown}; known: {[f.name for f in fields(cls)]}")
        return replace(params, **overrides).checked() if overrides else params.checked()


@dataclass(frozen=True, eq=False)
class PairClass:
    """What a verified pair is, and why.

    kind: "exact", "copy", "same scene" (verified, not a copy) or "different" (not
    verified); inliers: the similarity's inliers (the second stage's affine inliers when
    no similarity holds); covered: the covered fraction (module doc; 0 without a
    similarity); agreement: the pixels' correlation (None when not computed: no pixels, or
    the geometry already refused); similarity: (2, 3) map a -> b (NaN without one); reason:
    one line for a user.
    """

    kind: str
    inliers: int
    covered: float
    agreement: float | None
    similarity: np.ndarray
    reason: str

    def to_dict(self):
        return {"class": self.kind, "inliers": int(self.inliers), "covered": round(float(self.covered), 4),
                "agreement": None if self.agreement is None else round(float(self.agreement), 4),
                "reason": self.reason}


# ------------------------------------------------------------------ geometry
def fit_similarity(P1, P2):
    """(2, 3) least-squares similarity [sR | t] taking P1 (n, 2) onto P2 (n, 2) (orientation
    kept: no reflection); NaN with fewer than 2 distinct points. Closed form in complex
    numbers: a = sum(conj(z1 - m1) (z2 - m2)) / sum(|z1 - m1|^2), t = m2 - a m1."""
    P1 = np.asarray(P1, np.float64).reshape(-1, 2)
    P2 = np.asarray(P2, np.float64).reshape(-1, 2)
    if len(P1) < 2:
        return np.full((2, 3), np.nan)
    z1 = P1[:, 0] + 1j * P1[:, 1]
    z2 = P2[:, 0] + 1j * P2[:, 1]
    m1, m2 = z1.sum() / len(z1), z2.sum() / len(z2)
    d1, d2 = z1 - m1, z2 - m2
    den = (np.abs(d1) ** 2).sum()
    if not den > 1e-9:
        return np.full((2, 3), np.nan)
    a = (np.conj(d1) * d2).sum() / den
    t = m2 - a * m1
    return np.array([[a.real, -a.imag, t.real], [a.imag, a.real, t.imag]])


def _transfer(S, P):
    return P @ S[:, :2].T + S[:, 2]


def similarity_inliers(P1, P2, tol1, tol2, rounds=4):
    """(similarity (2, 3), inlier mask) of the correspondences P1 <-> P2: the least-squares
    similarity of all, then refitted on those within the tolerances (tol2 in image 2's
    pixels forward, tol1 in image 1's pixels backward), ``rounds`` times or until stable."""
    P1 = np.asarray(P1, np.float64).reshape(-1, 2)
    P2 = np.asarray(P2, np.float64).reshape(-1, 2)
    keep = np.ones(len(P1), bool)
    S = np.full((2, 3), np.nan)
    for _ in range(rounds):
        S_new = fit_similarity(P1[keep], P2[keep])
        if not np.isfinite(S_new).all():
            break
        S = S_new
        inv = _inverse(S)
        ok = (np.hypot(*(_transfer(S, P1) - P2).T) <= tol2) & (np.hypot(*(_transfer(inv, P2) - P1).T) <= tol1)
        if (ok == keep).all():
            break
        keep = ok
        if keep.sum() < 2:
            break
    if not np.isfinite(S).all():
        return S, np.zeros(len(P1), bool)
    return S, keep


def _inverse(S):
    M = S[:, :2]
    Mi = np.linalg.inv(M)
    return np.concatenate([Mi, -(Mi @ S[:, 2])[:, None]], axis=1)


def _cells(P, size):
    w, h = size
    cx = np.clip((np.asarray(P[:, 0]) + 0.5) * GRID // w, 0, GRID - 1).astype(np.int64)
    cy = np.clip((np.asarray(P[:, 1]) + 0.5) * GRID // h, 0, GRID - 1).astype(np.int64)
    return cy * GRID + cx


def covered_cells(size, inliers_xy):
    """(GRID, GRID) bool: the cells of an image of ``size`` holding an inlier."""
    P = np.asarray(inliers_xy, np.float64).reshape(-1, 2)
    return (np.bincount(_cells(P, size), minlength=GRID * GRID) > 0).reshape(GRID, GRID)


def covered_fraction(features_xy, size, inliers_xy):
    """The share of the GRID x GRID cells of an image of ``size`` (w, h) holding any of
    its features (``features_xy`` (n, 2)) that hold an inlier (``inliers_xy`` (k, 2))."""
    have, hit = covered_cells(size, features_xy), covered_cells(size, inliers_xy)
    n = int(have.sum())
    return float((hit & have).sum() / n) if n else 0.0


def contained_fraction(features_xy, similarity, size_other):
    """The share of an image's features (``features_xy`` (n, 2)) that ``similarity`` (2, 3) maps
    inside an image of ``size_other`` (w, h); 0 without features."""
    P = np.asarray(features_xy, np.float64).reshape(-1, 2)
    if not len(P):
        return 0.0
    m = _transfer(similarity, P)
    w, h = size_other
    return float(((m[:, 0] >= 0) & (m[:, 0] <= w) & (m[:, 1] >= 0) & (m[:, 1] <= h)).mean())


def rotate_record_frame(points, size, turns):
    """Points (n, 2) of an image of ``size`` (w, h) in the frame of that image turned by
    ``turns`` quarter turns counter-clockwise (as ``np.rot90(pixels, turns)``)."""
    P = np.asarray(points, np.float64).reshape(-1, 2)
    w, h = size
    x, y = P[:, 0], P[:, 1]
    t = int(turns) % 4
    if t == 0:
        return P.copy()
    if t == 1:
        return np.stack([y, (w - 1) - x], axis=1)
    if t == 2:
        return np.stack([(w - 1) - x, (h - 1) - y], axis=1)
    return np.stack([(h - 1) - y, x], axis=1)


# ------------------------------------------------------------------ pixels
def decode_for_copies(data, name="image", side=PIXELS_SIDE, orient=False):
    """An image's bytes as an 8-bit grey (h, w) array of at most ``side`` pixels a side (a
    JPEG larger than that decoded in draft mode: fast); or ImageReadError. At the default
    side an image the extractor saw whole is decoded at full size (the band test needs it).
    ``orient``: turned upright for its EXIF orientation, as the features see it (the
    index's extractor's ``orients``)."""
    from ..features import eight_bit, exif_orientation, orient_image, pil_image

    Image = pil_image(data)
    try:
        with Image.open(io.BytesIO(data)) as img:
            orientation = exif_orientation(img) if orient else 1
            img.draft("L", (side, side))
            img = orient_image(eight_bit(img, "L"), orientation)
            img.thumbnail((side, side), Image.BILINEAR, reducing_gap=None)
            return np.asarray(img, np.uint8)
    except Exception as exc:  # Pillow raises OSError, ValueError, SyntaxError, ...
        raise ImageReadError(name, f"cannot decode for the copy check ({str(exc) or type(exc).__name__})") from exc


def same_pixels(data_a, data_b):
    """Whether two images' bytes decode to the same pixels (same size, same values: at their
    full depth when both have one mode, else as 8-bit RGB)."""
    from ..features import eight_bit, pil_image

    Image = pil_image(data_a)
    pil_image(data_b)  # (either may be a HEIC photo)
    try:
        with Image.open(io.BytesIO(data_a)) as a, Image.open(io.BytesIO(data_b)) as b:
            if a.size != b.size:
                return False
            if a.mode == b.mode and (a.mode.startswith("I") or a.mode == "F"):
                # deep greys at their depth: two that differ may agree once brought to 8 bits
                return bool(np.array_equal(np.asarray(a), np.asarray(b)))
            return bool(np.array_equal(np.asarray(eight_bit(a, "RGB")), np.asarray(eight_bit(b, "RGB"))))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):  # what Pillow raises: not the same
        return False


def _sample(gray, full_size, X, Y, step):
    """gray (a smaller copy of an image of ``full_size``) at full-size points X, Y
    (bilinear), low-passed to the grid's ``step`` (full-size pixels between grid points);
    (values, inside mask)."""
    from scipy import ndimage

    gh, gw = gray.shape
    W, H = full_size
    fx, fy = gw / W, gh / H
    u = (X + 0.5) * fx - 0.5
    v = (Y + 0.5) * fy - 0.5
    sigma = 0.5 * step * min(fx, fy)  # grid spacing in this array's pixels, halved: anti-aliasing
    g = ndimage.gaussian_filter(gray, sigma) if sigma > 0.5 else gray
    inside = (u >= 0) & (u <= gw - 1) & (v >= 0) & (v <= gh - 1)
    vals = ndimage.map_coordinates(g, [v.ravel(), u.ravel()], order=1, mode="nearest").reshape(X.shape)
    return vals, inside


def _local_normalise(img, mask):
    """(img - local mean) / local contrast, Gaussian windows restricted to ``mask``."""
    from scipy import ndimage

    m = mask.astype(np.float64)
    x = img.astype(np.float64) * m
    wsum = np.maximum(ndimage.gaussian_filter(m, LOCAL_MEAN_SIGMA), 1e-6)
    d = (img - ndimage.gaussian_filter(x, LOCAL_MEAN_SIGMA) / wsum) * m
    csum = np.maximum(ndimage.gaussian_filter(m, LOCAL_CONTRAST_SIGMA), 1e-6)
    contrast = np.sqrt(ndimage.gaussian_filter(d * d, LOCAL_CONTRAST_SIGMA) / csum)
    return d / (contrast + 2.0)  # + 2 grey levels: flat regions (sky, borders) stay near 0, not noise blown up


def pixel_agreement(gray_a, size_a, gray_b, size_b, similarity, side=DEFAULT_COMPARE_SIDE, cells=None):
    """The normalised correlation of two images' locally normalised pixels on a common grid
    (module doc): the grid covers image a (``side`` px on its longer side), image b sampled
    where ``similarity`` (2, 3), a's full-size pixels -> b's, maps it. gray_a, gray_b: grey
    arrays of the images at any size (thumbnails), size_a, size_b: their full sizes (w, h),
    the frames of the similarity; cells: (GRID, GRID) bool, the cells of image a compared (the
    covered region; None: all). None when they share under MIN_PIXELS grid points."""
    from scipy import ndimage

    S = np.asarray(similarity, np.float64)
    W, H = size_a
    k = side / max(W, H)
    gw, gh = max(round(W * k), 1), max(round(H * k), 1)
    xs = (np.arange(gw) + 0.5) * (W / gw) - 0.5
    ys = (np.arange(gh) + 0.5) * (H / gh) - 0.5
    X, Y = np.meshgrid(xs, ys)
    step_a = W / gw
    scale = math.sqrt(abs(np.linalg.det(S[:, :2])))
    Xb = S[0, 0] * X + S[0, 1] * Y + S[0, 2]
    Yb = S[1, 0] * X + S[1, 1] * Y + S[1, 2]
    A, in_a = _sample(np.asarray(gray_a, np.float32), size_a, X, Y, step_a)
    B, in_b = _sample(np.asarray(gray_b, np.float32), size_b, Xb, Yb, step_a * scale)
    mask = ndimage.binary_erosion(in_a & in_b, iterations=2)
    if mask.sum() < MIN_PIXELS:
        return None
    if cells is not None:  # only the grid points in the given cells of image a
        iy, ix = np.meshgrid(np.arange(gh) * GRID // gh, np.arange(gw) * GRID // gw, indexing="ij")
        mask &= np.asarray(cells, bool).reshape(-1)[iy * GRID + ix]
        if mask.sum() < MIN_PIXELS:
            return None
    na, nb = _local_normalise(A, mask), _local_normalise(B, mask)
    a, b = na[mask], nb[mask]
    a, b = a - a.mean(), b - b.mean()
    den = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    return float((a * b).sum() / den) if den > 0 else 0.0


# ------------------------------------------------------------------ detail beyond the coarser image's limit
def _tiles(img, mask, patch=BAND_PATCH):
    """The non-overlapping (patch, patch) tiles of ``img`` lying wholly in ``mask``, their mean removed."""
    H, W = img.shape
    ny, nx = H // patch, W // patch

    def cut(a):
        return a[: ny * patch, : nx * patch].reshape(ny, patch, nx, patch).swapaxes(1, 2).reshape(-1, patch, patch)
    t = cut(np.asarray(img, np.float64))[cut(np.asarray(mask, bool)).reshape(-1, patch * patch).all(axis=1)]
    return t - t.mean(axis=(1, 2), keepdims=True)


def _bands(scale, theta, patch=BAND_PATCH):
    """(beyond, below, 1/f^2 power) on the (patch, patch) FFT grid of the finer image: beyond the
    coarser image's limit (its Nyquist square, turned by ``theta`` and shrunk by ``scale``, in
    cycles per finer pixel 1 / (2 scale)) up to the finer's own, and the octave below that limit;
    BAND_GUARD apart; the finer image's Nyquist row and column left out (aliasing, JPEG blocks)."""
    f = np.fft.fftfreq(patch)
    fx, fy = np.meshgrid(f, f)
    m = np.maximum(np.abs(np.cos(theta) * fx + np.sin(theta) * fy), np.abs(np.cos(theta) * fy - np.sin(theta) * fx))
    limit = 0.5 / scale
    interior = (np.abs(fx) < 0.5) & (np.abs(fy) < 0.5)
    return (interior & (m > limit * BAND_GUARD), interior & (m > limit / 2) & (m <= limit / BAND_GUARD),
            1.0 / np.maximum(fx * fx + fy * fy, 1e-12))


def _window(patch=BAND_PATCH):
    return np.outer(np.hanning(patch), np.hanning(patch))


def band_ratio(gray, scale, theta=0.0, mask=None):
    """The power of ``gray`` beyond 1 / (2 scale) cycles per pixel (up to its own limit) over the
    power in the octave below, divided by the same ratio for a 1/f image (power 1 / |f|^2):
    1 when the spectrum goes on as a natural image's does, 0 when nothing is there (module doc).
    Hann-windowed tiles of BAND_PATCH pixels wholly inside ``mask`` (None: all), averaged; None
    when no tile fits."""
    g = np.asarray(gray)
    tiles = _tiles(g, np.ones(g.shape, bool) if mask is None else mask)
    if not len(tiles):
        return None
    power = (np.abs(np.fft.fft2(tiles * _window())) ** 2).mean(axis=0)
    beyond, below, ref = _bands(scale, theta)
    den = power[below].sum() * ref[beyond].sum()
    return float(power[beyond].sum() * ref[below].sum() / den) if den > 0 else None


def _smooth(a, k=COHERENCE_BINS):
    from scipy import ndimage

    return ndimage.uniform_filter(a, (1, k, k), mode="wrap")


def new_detail(gray_fine, size_fine, gray_coarse, size_coarse, similarity, cells=None):
    """How much detail the finer image holds beyond the coarser one's limit that the coarser cannot
    explain, relative to the coarser's own spectrum just below its limit (module doc): ~0 for an
    upscaled copy, ~0.5-1 for another capture at a closer zoom. ``similarity``: (2, 3) fine -> coarse
    full-size pixels; cells: (GRID, GRID) bool, the fine image's cells compared. None when it cannot
    be measured: pixels not at full size (thumbnails), the scale under MIN_BAND_SCALE, no tile."""
    from scipy import ndimage

    S = np.asarray(similarity, np.float64)
    fine, coarse = np.asarray(gray_fine), np.asarray(gray_coarse)
    if fine.shape[::-1] != tuple(size_fine) or coarse.shape[::-1] != tuple(size_coarse):
        return None  # a thumbnail has no band above the coarser image's limit to look at
    scale = 1.0 / math.sqrt(abs(np.linalg.det(S[:, :2])))  # fine pixels per coarse pixel
    if not scale >= MIN_BAND_SCALE:
        return None
    theta = math.atan2(S[1, 0], S[0, 0])
    H, W = fine.shape
    Y, X = np.mgrid[0:H, 0:W].astype(np.float64)
    Xc, Yc = S[0, 0] * X + S[0, 1] * Y + S[0, 2], S[1, 0] * X + S[1, 1] * Y + S[1, 2]
    mask = (Xc >= 1) & (Xc <= coarse.shape[1] - 2) & (Yc >= 1) & (Yc <= coarse.shape[0] - 2)
    if cells is not None:
        mask &= np.asarray(cells, bool)[(Y * GRID // H).astype(np.int64), (X * GRID // W).astype(np.int64)]
    predicted = ndimage.map_coordinates(coarse.astype(np.float64), [Yc, Xc], order=1, mode="nearest")
    a, b = _tiles(fine, mask), _tiles(predicted, mask)
    inv = _inverse(S)
    Yk, Xk = np.mgrid[0:coarse.shape[0], 0:coarse.shape[1]].astype(np.float64)
    Xf, Yf = inv[0, 0] * Xk + inv[0, 1] * Yk + inv[0, 2], inv[1, 0] * Xk + inv[1, 1] * Yk + inv[1, 2]
    own = band_ratio(coarse, scale, 0.0, (Xf >= 0) & (Xf <= W - 1) & (Yf >= 0) & (Yf <= H - 1))
    if not len(a) or not own:
        return None
    Fa, Fb = np.fft.fft2(a * _window()), np.fft.fft2(b * _window())
    cross = Fa * np.conj(Fb)
    explained = (_smooth(cross.real) ** 2 + _smooth(cross.imag) ** 2) / np.maximum(_smooth(np.abs(Fb) ** 2), 1e-12)
    unexplained = np.maximum(_smooth(np.abs(Fa) ** 2) - explained, 0.0).mean(axis=0)
    beyond, below, ref = _bands(scale, theta)
    power_below = (np.abs(Fa) ** 2).mean(axis=0)[below].sum()
    if not power_below > 0:
        return None
    return float(unexplained[beyond].sum() * ref[below].sum() / (power_below * ref[beyond].sum()) / own)


# ------------------------------------------------------------------ the decision
def _extraction_unit(size, extraction_side):
    """Original pixels per pixel the extractor saw: it reduces the longer side to
    ``extraction_side`` (None: the default extractor's DEFAULT_MAX_SIDE; an index passes its own)."""
    from ..features import DEFAULT_MAX_SIDE

    side = DEFAULT_MAX_SIDE if extraction_side is None else extraction_side
    return max(size) / min(max(size), side)


def precise_inliers(P1, P2, S, size_1, size_2, max_error=MAX_ERROR_PX, extraction_side=None):
    """Mask of the correspondences the similarity S (1 -> 2) carries within ``max_error``
    pixels of the coarser image as its extractor saw it (module doc): min(forward error in
    2's extraction pixels, backward error in 1's) <= max_error (for a similarity the two
    differ by its scale, so the smaller is the coarser image's). extraction_side: the longer
    side the extractor reduced images to (its ``max_side``; None: the default extractor's)."""
    P1 = np.asarray(P1, np.float64).reshape(-1, 2)
    P2 = np.asarray(P2, np.float64).reshape(-1, 2)
    fwd = np.hypot(*(_transfer(S, P1) - P2).T) / _extraction_unit(size_2, extraction_side)
    back = np.hypot(*(_transfer(_inverse(S), P2) - P1).T) / _extraction_unit(size_1, extraction_side)
    return np.minimum(fwd, back) <= max_error


def detail_ratio(S, size_a, size_b):
    """(area ratio, detail ratio) of a similarity a -> b: the smaller image's area in the common
    frame over the larger's, and the smaller image's pixels per unit of the common frame over
    the larger's (> 1: the smaller image resolves more than the larger one there)."""
    s = math.sqrt(abs(np.linalg.det(S[:, :2])))  # b pixels per a pixel
    area_a = float(np.prod(size_a)) * s * s
    area_b = float(np.prod(size_b))
    density = s  # b pixels per a pixel: what each file holds (a copy's border or resize changes its size)
    if area_a <= area_b:
        return area_a / area_b, 1.0 / density
    return area_b / area_a, density


def classify_pair(rec_a, rec_b, pairs, verified, gray_a=None, gray_b=None, sha_a=None, sha_b=None,
                  params=None, extraction_side=None):
    """The class of a pair (module doc): :class:`PairClass`.

    rec_a, rec_b: the two images' GeometryRecords (features and sizes, in the frames the
    pixels are given in); pairs: (n, 4) the second stage's inlier pairs x_a, y_a, x_b, y_b
    (``verify_geometry(..., return_pairs=True)``); verified: its decision; gray_a, gray_b:
    grey pixels of the two images at any size (None: no pixel check, so no copy), or
    zero-argument callables giving them, called only when the geometry leaves the pixels to
    decide; sha_a, sha_b: their sha256 (equal: exact); extraction_side: the longer side the
    features were extracted at (the extractor's ``max_side``; None: the default extractor's),
    the unit of the precise inliers' tolerance."""
    params = CopyParams.of(params)
    nan = np.full((2, 3), np.nan)
    if sha_a and sha_b and sha_a == sha_b:
        return PairClass("exact", len(pairs), 1.0, 1.0, np.array([[1.0, 0, 0], [0, 1.0, 0]]), "the same bytes")
    if not verified:
        return PairClass("different", len(pairs), 0.0, None, nan, "not verified by the second stage")
    pairs = np.asarray(pairs, np.float64).reshape(-1, 4)
    tol_a = params.tolerance * max(rec_a.image_size)
    tol_b = params.tolerance * max(rec_b.image_size)
    S, inl = similarity_inliers(pairs[:, :2], pairs[:, 2:], tol_a, tol_b)
    if inl.sum() >= 3 and np.isfinite(S).all():
        inl = precise_inliers(pairs[:, :2], pairs[:, 2:], S, rec_a.image_size, rec_b.image_size,
                              extraction_side=extraction_side)
        S = fit_similarity(pairs[inl, :2], pairs[inl, 2:]) if inl.sum() >= 3 else S
    n = int(inl.sum())
    if n < 3 or not np.isfinite(S).all():
        return PairClass("same scene", n, 0.0, None, nan, "no similarity map (another viewpoint)")
    covered = max(covered_fraction(rec_a.xy, rec_a.image_size, pairs[inl, :2]),
                  covered_fraction(rec_b.xy, rec_b.image_size, pairs[inl, 2:]))  # reported whatever decides
    area_ratio, detail = detail_ratio(S, rec_a.image_size, rec_b.image_size)
    if area_ratio < SAME_FRAME and detail > MAX_DETAIL_RATIO:
        return PairClass("same scene", n, covered, None, S,
                         f"the smaller view shows {detail:.1f}x the detail of the other: a zoomed capture, or both "
                         f"made from a larger original (neither can replace the other)")
    # the smaller image in the common frame: the one whose frame a copy keeps inside the other's
    a_smaller = float(np.prod(rec_a.image_size)) * abs(np.linalg.det(S[:, :2])) <= float(np.prod(rec_b.image_size))
    contained = (contained_fraction(rec_a.xy, S, rec_b.image_size) if a_smaller else
                 contained_fraction(rec_b.xy, _inverse(S), rec_a.image_size))
    if contained < MIN_CONTAINED:
        return PairClass("same scene", n, covered, None, S,
                         f"{100 * (1 - contained):.0f} % of the smaller image lies outside the other (a copy: <= "
                         f"{100 * (1 - MIN_CONTAINED):.0f} %): another view of the scene")
    if covered < params.min_covered:
        return PairClass("same scene", n, covered, None, S,
                         f"one similarity covers {100 * covered:.0f} % of the image (a copy: >= "
                         f"{100 * params.min_covered:.0f} %)")
    gray_a = gray_a() if callable(gray_a) else gray_a
    gray_b = gray_b() if callable(gray_b) and gray_a is not None else gray_b  # b not read when a has no pixels
    if gray_a is None or gray_b is None:
        return PairClass("same scene", n, covered, None, S, NO_PIXELS)
    if a_smaller:  # the grid on the smaller image (in b's frame)
        agreement = pixel_agreement(gray_a, rec_a.image_size, gray_b, rec_b.image_size, S, params.compare_side,
                                    covered_cells(rec_a.image_size, pairs[inl, :2]))
    else:
        agreement = pixel_agreement(gray_b, rec_b.image_size, gray_a, rec_a.image_size, _inverse(S),
                                    params.compare_side, covered_cells(rec_b.image_size, pairs[inl, 2:]))
    if agreement is None or agreement < params.min_agreement:
        what = "no common pixels" if agreement is None else f"pixels agree {agreement:.2f}"
        return PairClass("same scene", n, covered, agreement, S,
                         f"{what} (a copy: >= {params.min_agreement:.2f}): another capture of the scene")
    if area_ratio < SAME_FRAME and detail >= MIN_BAND_SCALE:  # an upscaled crop, or a closer capture?
        fine = ((gray_a, rec_a.image_size, gray_b, rec_b.image_size, S, pairs[inl, :2]) if a_smaller else
                (gray_b, rec_b.image_size, gray_a, rec_a.image_size, _inverse(S), pairs[inl, 2:]))
        extra = new_detail(*fine[:5], covered_cells(fine[1], fine[5]))
        if extra is not None and extra >= MIN_NEW_DETAIL:
            return PairClass("same scene", n, covered, agreement, S,
                             f"the closer view holds detail beyond the other's resolution ({extra:.2f} of a "
                             f"natural image's, a copy: < {MIN_NEW_DETAIL:.2f}): a zoomed capture, not an upscaled "
                             f"crop")
    return PairClass("copy", n, covered, agreement, S,
                     f"one similarity covers {100 * covered:.0f} % and the pixels agree {agreement:.2f}")

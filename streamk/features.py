"""Local features: the first stage, image file -> keypoints + raw SIFT descriptors.

    file bytes --sha256--> cache lookup (hit: done)
      -> Pillow decode, grayscale, EXIF orientation ignored
      -> optional downscale so that the long side is at most ``max_side``
      -> detector: Hessian-affine + SIFT (pyhesaff, the paper's features; default)
                   or OpenCV's DoG SIFT
      -> keypoints mapped back to ORIGINAL pixel coordinates
      -> strongest first, optional cap ``max_features`` -> :class:`Features`

Descriptors are raw SIFT, uint8 (n, 128), for both extractors; RootSIFT is the
encoder's business (``EncoderConfig.rootsift``), not done here.

Keypoints are an ``(n, 6)`` float32 array, one row per feature, columns
:data:`KEYPOINT_COLUMNS` = ``x, y, a11, a21, a22, theta``:

* ``x, y``: the centre in pixels of the original image, the centre of the
  top-left pixel being (0, 0) (x to the right, y down).
* ``A = [[a11, 0], [a21, a22]]`` maps the unit circle onto the feature's
  ellipse: its points are ``(x, y) + A u`` with ``|u| = 1``. a11, a22 > 0.
  Hessian-affine: the ellipse is pyhesaff's measurement region (``mrSize``
  = 3*sqrt(3) times the affine-adapted scale), as pyhesaff reports it.
  OpenCV SIFT: isotropic, ``a11 = a22 = size / 2`` (OpenCV's ``KeyPoint.size``
  is the diameter of the keypoint's neighbourhood), ``a21 = 0``.
  ``sqrt(a11 * a22)`` is the feature's scale (:attr:`Features.scales`).
* ``theta``: orientation in radians. pyhesaff with its default
  ``rotation_invariance=False`` assumes upright images (the gravity vector, as
  in the Oxford/Paris retrieval literature) and reports 0; OpenCV reports the
  dominant gradient orientation (converted from degrees).

Order and cap ("strongest first"): OpenCV features are sorted by detector
response (descending). pyhesaff does not report its Hessian response, so its
features are sorted by scale ``sqrt(a11 * a22)`` (descending: large features
are the most repeatable); raise the ``threshold`` option to keep the features
with the strongest Hessian response instead. Ties are broken by position and
orientation, so the output is a deterministic function of the image and the
options, whatever order the detector (threaded in OpenCV) emits.

EXIF orientation is IGNORED: images are used as stored (raw pixel grid),
because the Oxford/Paris query boxes are given in raw pixel coordinates.

Grey levels: 8-bit images go through Pillow's ``convert("L")`` (ITU-R 601-2
luma for colour); 16-bit images are divided by 257; float images are taken as
0..1 when their maximum is at most 1, else as 0..255, and clipped.
"""

import hashlib
import io
import json
import math
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .descriptor_files import atomic_write
from .errors import (ConfigError, DescriptorFileError, DimensionError, ExtractorUnavailableError,
                     ImageReadError)

KEYPOINT_COLUMNS = ("x", "y", "a11", "a21", "a22", "theta")
DESCRIPTOR_DIM = 128
#: Version of this module's pipeline (decoding, resizing, coordinate convention); part of cache keys.
FEATURES_VERSION = 1
DEFAULT_EXTRACTOR = "hesaff"
_MIN_SIDE = 16  # smallest accepted max_side

__all__ = [
    "DEFAULT_EXTRACTOR", "DESCRIPTOR_DIM", "EXTRACTORS", "KEYPOINT_COLUMNS",
    "ExtractionResult", "Extractor", "FeatureCache", "Features", "HessianAffineSift", "OpenCVSift",
    "available_extractors", "crop_to_box", "default_extractor", "extract", "extract_many",
    "extractor_from_params", "iter_extract", "load_features", "load_gray", "make_extractor",
    "save_features",
]


# =========================================================================== result type
@dataclass(frozen=True, eq=False)
class Features:
    """Local features of one image.

    keypoints: (n, 6) float32, columns :data:`KEYPOINT_COLUMNS`, original pixel coordinates.
    descriptors: (n, 128) uint8, raw SIFT, row i describes keypoint i.
    image_size: (width, height) of the original image in pixels.
    """

    keypoints: np.ndarray
    descriptors: np.ndarray
    image_size: tuple

    def __post_init__(self):
        kp = np.ascontiguousarray(self.keypoints, dtype=np.float32)
        desc = np.asarray(self.descriptors)
        if kp.ndim != 2 or kp.shape[1] != len(KEYPOINT_COLUMNS):
            raise DimensionError(f"keypoints must have shape (n, {len(KEYPOINT_COLUMNS)}), got {kp.shape}")
        if desc.ndim != 2 or desc.shape[1] != DESCRIPTOR_DIM:
            raise DimensionError(f"descriptors must have shape (n, {DESCRIPTOR_DIM}), got {desc.shape}")
        if desc.dtype != np.uint8:
            raise DimensionError(f"descriptors must be uint8 raw SIFT, got dtype {desc.dtype}")
        if len(kp) != len(desc):
            raise DimensionError(f"{len(kp)} keypoints but {len(desc)} descriptors")
        try:
            w, h = (int(v) for v in self.image_size)
        except (TypeError, ValueError) as exc:
            raise DimensionError(f"image_size must be (width, height), got {self.image_size!r}") from exc
        if w <= 0 or h <= 0:
            raise DimensionError(f"image_size must be positive, got {(w, h)}")
        object.__setattr__(self, "keypoints", kp)
        object.__setattr__(self, "descriptors", np.ascontiguousarray(desc))
        object.__setattr__(self, "image_size", (w, h))

    @classmethod
    def empty(cls, image_size):
        return cls(np.zeros((0, len(KEYPOINT_COLUMNS)), np.float32),
                   np.zeros((0, DESCRIPTOR_DIM), np.uint8), image_size)

    def __len__(self):
        return len(self.keypoints)

    @property
    def positions(self):
        """(n, 2) centres x, y."""
        return self.keypoints[:, :2]

    @property
    def scales(self):
        """(n,) sqrt(a11 * a22): the square root of the ellipse area over pi."""
        return np.sqrt(np.abs(self.keypoints[:, 2] * self.keypoints[:, 4]))

    def subset(self, index):
        """Features at ``index`` (a boolean mask or integer indices), same image size."""
        index = np.asarray(index)
        return Features(self.keypoints[index], self.descriptors[index], self.image_size)

    def __repr__(self):
        return f"Features(n={len(self)}, image_size={self.image_size})"


def crop_to_box(features, box):
    """Keep the features whose centre lies inside ``box`` = (x1, y1, x2, y2), edges included.

    The box is in original-image pixel coordinates, as the Oxford/Paris
    ground-truth ``bbx`` (query protocol: the query is described by the
    features of the full image that fall inside its box).
    """
    try:
        x1, y1, x2, y2 = (float(v) for v in np.asarray(box, dtype=np.float64).reshape(-1))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"box must be 4 numbers (x1, y1, x2, y2), got {box!r}") from exc
    if not all(math.isfinite(v) for v in (x1, y1, x2, y2)):
        raise ConfigError(f"box must be finite, got {box!r}")
    if x2 < x1 or y2 < y1:
        raise ConfigError(f"box must have x1 <= x2 and y1 <= y2, got {(x1, y1, x2, y2)}")
    x, y = features.keypoints[:, 0], features.keypoints[:, 1]
    return features.subset((x >= x1) & (x <= x2) & (y >= y1) & (y <= y2))


def _features_to_npz_bytes(features, meta):
    buf = io.BytesIO()
    np.savez(buf, keypoints=features.keypoints, descriptors=features.descriptors,
             image_size=np.asarray(features.image_size, np.int64),
             meta=np.array(json.dumps(meta, sort_keys=True)))
    return buf.getvalue()


def _features_from_npz(source):
    """(Features, meta dict) from an .npz path or file object; ValueError-family on a bad file."""
    with np.load(source, allow_pickle=False) as npz:
        meta = json.loads(str(npz["meta"])) if "meta" in npz.files else {}
        f = Features(npz["keypoints"], npz["descriptors"], tuple(npz["image_size"].tolist()))
    if not np.isfinite(f.keypoints).all():
        raise ValueError("non-finite keypoints")
    return f, meta


def save_features(path, features, meta=None):
    """Save features as .npz (keypoints, descriptors, image_size, meta JSON); atomic, no pickle."""
    data = _features_to_npz_bytes(features, meta or {})
    atomic_write(path, lambda fh: fh.write(data))


def load_features(path):
    """Load features saved by :func:`save_features` (never unpickles); a bad file raises
    :class:`~streamk.errors.DescriptorFileError`."""
    try:
        return _features_from_npz(path)[0]
    except OSError as exc:
        raise DescriptorFileError(f"cannot read features file {path}: {exc}") from exc
    except Exception as exc:
        raise DescriptorFileError(f"{path}: not a streamk features file ({exc})") from exc


# =========================================================================== image reading
def _read_file_bytes(path):
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise ImageReadError(path, "is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise ImageReadError(path, "not a regular file")
        with open(path, "rb") as fh:
            data = fh.read()
    except ImageReadError:
        raise
    except FileNotFoundError as exc:
        raise ImageReadError(path, "no such file") from exc
    except IsADirectoryError as exc:
        raise ImageReadError(path, "is a directory") from exc
    except PermissionError as exc:
        raise ImageReadError(path, "permission denied") from exc
    except OSError as exc:
        raise ImageReadError(path, exc.strerror or str(exc)) from exc
    if not data:
        raise ImageReadError(path, "empty file (0 bytes)")
    return data


def _pil():
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ExtractorUnavailableError(
            "reading images needs Pillow: pip install 'streamk[features]'") from exc
    return Image


def _to_gray(img):
    mode = img.mode
    if mode == "L":
        return np.asarray(img, dtype=np.uint8)
    if mode.startswith("I;16"):
        a = np.asarray(img).astype(np.float64) / 257.0
    elif mode == "I":
        a = np.asarray(img).astype(np.float64)
        if a.size and a.max() > 255:
            a = a / 257.0
    elif mode == "F":
        a = np.asarray(img).astype(np.float64)
        a = np.nan_to_num(a, nan=0.0, posinf=255.0, neginf=0.0)
        if a.size and a.max() <= 1.0:
            a = a * 255.0
    else:
        try:
            gray = img.convert("L")
        except (ValueError, OSError):
            gray = img.convert("RGB").convert("L")
        return np.asarray(gray, dtype=np.uint8)
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def _decode_gray(data, path):
    """uint8 (height, width) grayscale array from the bytes of an image file."""
    Image = _pil()
    from PIL import UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()  # decode now: truncated or corrupt data fails here
            gray = _to_gray(img)
    except UnidentifiedImageError as exc:
        raise ImageReadError(path, "not a recognised image format") from exc
    except Image.DecompressionBombError as exc:  # Pillow's limit: over ~179 megapixels
        raise ImageReadError(path, f"image too large ({exc})") from exc
    except Exception as exc:  # Pillow's decoders raise OSError, ValueError, SyntaxError, ...
        reason = str(exc) or type(exc).__name__
        reason = f"truncated image ({reason})" if "truncated" in reason else f"corrupt image ({reason})"
        raise ImageReadError(path, reason) from exc
    if gray.ndim != 2 or gray.size == 0:
        raise ImageReadError(path, f"decoded to an unusable array of shape {gray.shape}")
    return np.ascontiguousarray(gray)


def load_gray(path):
    """Read an image file as a uint8 (height, width) grayscale array (no EXIF rotation).

    Raises :class:`~streamk.errors.ImageReadError` (with ``path`` and ``reason``)
    for a missing, empty, truncated, corrupt or non-image file and for a directory.
    """
    return _decode_gray(_read_file_bytes(path), path)


# =========================================================================== extractors
_IN_WORKER = False  # set in worker processes (streamk.workers): keep libraries single-threaded


def _check_positive_int(value, name, minimum=1):
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum} or None, got {value!r}")
    return int(value)


class Extractor:
    """Base class: image -> :class:`Features`. Subclasses implement ``_detect`` and ``versions``.

    max_side: downscale the image (never upscale) so that its long side is at
        most this many pixels before detection; keypoints are still reported in
        original pixel coordinates. None: detect at full resolution.
    max_features: keep at most this many features, strongest first (see the
        module doc for what "strongest" means per extractor). None: all.
    """

    name = "base"

    def __init__(self, max_side=None, max_features=None):
        self.max_side = _check_positive_int(max_side, "max_side", _MIN_SIDE)
        self.max_features = _check_positive_int(max_features, "max_features")

    # -- description --------------------------------------------------------
    def options(self):
        """The options as a JSON-able dict (with :attr:`name`, enough to rebuild the extractor)."""
        return {"max_side": self.max_side, "max_features": self.max_features}

    def versions(self):  # pragma: no cover - overridden
        return {}

    def params(self):
        """Everything that determines the output: name, options, library versions (JSON-able).

        Store this next to an index so that queries are described the same way;
        :func:`extractor_from_params` rebuilds the extractor.
        """
        return {"extractor": self.name, "options": self.options(), "versions": self.versions(),
                "features_version": FEATURES_VERSION}

    def __repr__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts})"

    # -- extraction ---------------------------------------------------------
    def _detect(self, gray):  # pragma: no cover - overridden
        """(keypoints (n, 6) float32, descriptors (n, 128) uint8, strength (n,)) on ``gray``."""
        raise NotImplementedError

    def extract_array(self, gray):
        """Features of a uint8 (height, width) grayscale image given as an array."""
        gray = np.asarray(gray)
        if gray.ndim != 2 or gray.shape[0] == 0 or gray.shape[1] == 0:
            raise DimensionError(f"expected a non-empty 2-D grayscale image, got shape {gray.shape}")
        if gray.dtype != np.uint8:
            raise DimensionError(f"expected a uint8 grayscale image, got dtype {gray.dtype}")
        H, W = gray.shape
        small = gray
        if self.max_side is not None and max(H, W) > self.max_side:
            s = self.max_side / max(H, W)
            w2, h2 = max(1, round(W * s)), max(1, round(H * s))
            Image = _pil()
            small = np.asarray(Image.fromarray(np.ascontiguousarray(gray)).resize(
                (w2, h2), Image.Resampling.BILINEAR), dtype=np.uint8)
        kp, desc, strength = self._detect(np.ascontiguousarray(small))
        kp = np.asarray(kp, dtype=np.float64).reshape(-1, len(KEYPOINT_COLUMNS))
        desc = np.asarray(desc).reshape(-1, DESCRIPTOR_DIM)
        strength = np.asarray(strength, dtype=np.float64).reshape(-1)
        if not (len(kp) == len(desc) == len(strength)):
            raise DimensionError(f"{self.name}: detector returned {len(kp)} keypoints, "
                                 f"{len(desc)} descriptors, {len(strength)} strengths")
        if small is not gray:  # back to original pixel coordinates (pixel centres at integers)
            h2, w2 = small.shape
            sx, sy = W / w2, H / h2
            kp = kp.copy()
            kp[:, 0] = (kp[:, 0] + 0.5) * sx - 0.5
            kp[:, 1] = (kp[:, 1] + 0.5) * sy - 0.5
            kp[:, 2] *= sx  # A <- diag(sx, sy) A keeps the lower-triangular form
            kp[:, 3] *= sy
            kp[:, 4] *= sy
        ok = np.isfinite(kp).all(axis=1) & np.isfinite(strength)
        kp, desc, strength = kp[ok], desc[ok], strength[ok]
        scale = np.sqrt(np.abs(kp[:, 2] * kp[:, 4]))
        # strongest first; ties by scale, position, orientation: a canonical order
        order = np.lexsort((kp[:, 5], kp[:, 1], kp[:, 0], -scale, -strength))
        if self.max_features is not None:
            order = order[: self.max_features]
        return Features(kp[order].astype(np.float32), np.asarray(desc[order], dtype=np.uint8), (W, H))

    def extract(self, path):
        """Features of an image file (no cache; see :func:`extract` for the cached version)."""
        return self.extract_array(load_gray(path))

    def __getstate__(self):  # library handles are rebuilt lazily in another process
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_lib")}


def _import_pyhesaff():
    try:
        import pyhesaff
    except Exception as exc:  # ImportError, or OSError from a broken shared library
        raise ExtractorUnavailableError(
            f"the Hessian-affine extractor needs the pyhesaff wheel ({type(exc).__name__}: {exc}); "
            "install it with pip install 'streamk[features]' (wheels: CPython 3.10-3.13, "
            "Linux x86_64), or use the OpenCV SIFT extractor: make_extractor('sift')") from exc
    return pyhesaff


class HessianAffineSift(Extractor):
    """Hessian-affine keypoints + SIFT descriptors (Perdoch's detector, via the pyhesaff wheel).

    These are the features of the paper (and of the Oxford/Paris retrieval
    literature). ``hesaff_params`` override pyhesaff's detector parameters
    (names as in ``pyhesaff.get_hesaff_default_params()``, e.g.
    ``threshold=16/3``, ``edgeEigenValueRatio=10``, ``rotation_invariance=False``);
    unknown names raise :class:`~streamk.errors.ConfigError`.
    """

    name = "hesaff"
    _FORBIDDEN = {"only_count"}

    def __init__(self, max_side=None, max_features=None, **hesaff_params):
        super().__init__(max_side, max_features)
        pyhesaff = _import_pyhesaff()
        types = {name: typ for typ, name, _ in pyhesaff.HESAFF_TYPED_PARAMS}
        params = {name: typ(default) for typ, name, default in pyhesaff.HESAFF_TYPED_PARAMS
                  if name not in self._FORBIDDEN}
        for key, value in hesaff_params.items():
            if key not in types or key in self._FORBIDDEN:
                raise ConfigError(f"unknown or unsupported pyhesaff parameter {key!r}; known: "
                                  f"{sorted(set(types) - self._FORBIDDEN)}")
            typ = types[key]
            if typ is bool:
                if not isinstance(value, (bool, np.bool_)):
                    raise ConfigError(f"pyhesaff parameter {key} must be a bool, got {value!r}")
                params[key] = bool(value)
            elif typ is int:
                if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                    raise ConfigError(f"pyhesaff parameter {key} must be an integer, got {value!r}")
                params[key] = int(value)
            else:
                try:
                    params[key] = float(value)
                except (TypeError, ValueError) as exc:
                    raise ConfigError(f"pyhesaff parameter {key} must be a number, got {value!r}") from exc
                if not math.isfinite(params[key]):
                    raise ConfigError(f"pyhesaff parameter {key} must be finite, got {value!r}")
        self.hesaff_params = dict(params)

    def options(self):
        return {**super().options(), **self.hesaff_params}

    def versions(self):
        pyhesaff = _import_pyhesaff()
        return {"pyhesaff": pyhesaff.__version__, "hesaff_cpp": int(pyhesaff.get_cpp_version()),
                "pillow": _pil().__version__}

    def _detect(self, gray):
        pyhesaff = _import_pyhesaff()
        kp, desc = pyhesaff.detect_feats_in_image(gray, **self.hesaff_params)
        kp = np.asarray(kp, dtype=np.float32).reshape(-1, 6)
        desc = np.asarray(desc, dtype=np.uint8).reshape(-1, DESCRIPTOR_DIM)
        return kp, desc, np.sqrt(np.abs(kp[:, 2].astype(np.float64) * kp[:, 4]))


def _import_cv2():
    try:
        import cv2
    except Exception as exc:
        raise ExtractorUnavailableError(
            f"the OpenCV SIFT extractor needs opencv-python-headless ({type(exc).__name__}: {exc}); "
            "install it with pip install 'streamk[features]'") from exc
    if not hasattr(cv2, "SIFT_create"):
        raise ExtractorUnavailableError(f"OpenCV {cv2.__version__} has no SIFT (needs OpenCV >= 4.4)")
    return cv2


class OpenCVSift(Extractor):
    """OpenCV's DoG keypoints + SIFT descriptors (the alternative to Hessian-affine).

    Options are OpenCV's ``SIFT_create`` parameters; the cap is applied by
    streamk (by response), not by OpenCV's ``nfeatures``.
    """

    name = "sift"

    def __init__(self, max_side=None, max_features=None, n_octave_layers=3,
                 contrast_threshold=0.04, edge_threshold=10.0, sigma=1.6):
        super().__init__(max_side, max_features)
        _import_cv2()
        self.n_octave_layers = _check_positive_int(n_octave_layers, "n_octave_layers")
        for name, value in (("contrast_threshold", contrast_threshold),
                            ("edge_threshold", edge_threshold), ("sigma", sigma)):
            try:
                value = float(value)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{name} must be a number, got {value!r}") from exc
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
            setattr(self, name, value)

    def options(self):
        return {**super().options(), "n_octave_layers": self.n_octave_layers,
                "contrast_threshold": self.contrast_threshold,
                "edge_threshold": self.edge_threshold, "sigma": self.sigma}

    def versions(self):
        return {"opencv": _import_cv2().__version__, "pillow": _pil().__version__}

    def _sift(self):
        if getattr(self, "_lib_sift", None) is None:
            cv2 = _import_cv2()
            if _IN_WORKER:
                cv2.setNumThreads(1)
            self._lib_sift = cv2.SIFT_create(
                nfeatures=0, nOctaveLayers=self.n_octave_layers,
                contrastThreshold=self.contrast_threshold, edgeThreshold=self.edge_threshold,
                sigma=self.sigma, descriptorType=cv2.CV_8U)
        return self._lib_sift

    def _detect(self, gray):
        keypoints, desc = self._sift().detectAndCompute(gray, None)
        n = len(keypoints)
        if n == 0 or desc is None:
            return np.zeros((0, 6), np.float32), np.zeros((0, DESCRIPTOR_DIM), np.uint8), np.zeros(0)
        kp = np.zeros((n, 6), np.float64)
        strength = np.empty(n, np.float64)
        for i, k in enumerate(keypoints):
            kp[i, 0], kp[i, 1] = k.pt
            r = k.size / 2.0
            kp[i, 2] = kp[i, 4] = r
            kp[i, 5] = math.radians(k.angle) if k.angle >= 0 else 0.0
            strength[i] = k.response
        return kp, np.asarray(desc, dtype=np.uint8), strength


EXTRACTORS = {"hesaff": HessianAffineSift, "sift": OpenCVSift}
_ALIASES = {"hessian-affine": "hesaff", "hesaff-sift": "hesaff", "pyhesaff": "hesaff",
            "opencv": "sift", "opencv-sift": "sift", "dog-sift": "sift"}


def available_extractors():
    """Names of the extractors whose libraries import on this machine."""
    out = []
    for name, probe in (("hesaff", _import_pyhesaff), ("sift", _import_cv2)):
        try:
            probe()
            out.append(name)
        except ExtractorUnavailableError:
            pass
    return out


def make_extractor(name=None, **options):
    """An extractor by name: ``"hesaff"`` (Hessian-affine + SIFT, pyhesaff) or ``"sift"`` (OpenCV).

    name None is the default: ``"hesaff"``; if pyhesaff cannot be imported here it
    falls back to ``"sift"`` with a warning (the features then differ from the
    paper's). Naming ``"hesaff"`` explicitly never falls back: it raises
    :class:`~streamk.errors.ExtractorUnavailableError`.
    """
    if name is None:
        try:
            return HessianAffineSift(**options)
        except ExtractorUnavailableError as exc:
            warnings.warn(f"{exc}. Falling back to OpenCV SIFT features, which are not the "
                          "paper's Hessian-affine features.", RuntimeWarning, stacklevel=2)
            hes_only = set(options) - {"max_side", "max_features"}
            if hes_only:
                raise ConfigError(f"options {sorted(hes_only)} are pyhesaff's and the fallback "
                                  "OpenCV extractor does not take them") from exc
            return OpenCVSift(**options)
    key = _ALIASES.get(str(name).lower(), str(name).lower())
    if key not in EXTRACTORS:
        raise ConfigError(f"unknown extractor {name!r}; choose one of {sorted(EXTRACTORS)}")
    try:
        return EXTRACTORS[key](**options)
    except TypeError as exc:  # an unknown keyword for OpenCVSift
        raise ConfigError(f"bad options for extractor {key!r}: {exc}") from exc


def default_extractor(**options):
    """``make_extractor(None, **options)``: Hessian-affine, or OpenCV SIFT with a warning."""
    return make_extractor(None, **options)


def extractor_from_params(params):
    """Rebuild an extractor from :meth:`Extractor.params` (e.g. stored beside an index).

    Library versions that differ from the stored ones give a warning: the
    features may differ slightly from those stored.
    """
    try:
        name, options = params["extractor"], dict(params["options"])
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"not extractor parameters: {params!r}") from exc
    ex = make_extractor(name, **options)
    stored = params.get("versions") or {}
    if stored and stored != ex.versions():
        warnings.warn(f"extractor library versions differ from the stored ones: stored {stored}, "
                      f"here {ex.versions()}", RuntimeWarning, stacklevel=2)
    return ex


# =========================================================================== cache
class FeatureCache:
    """Features on disk, keyed by the image's content (sha256 of the file bytes) and the
    extractor's :meth:`~Extractor.params` (name, options, library versions).

    Layout: ``<dir>/<params-digest[:16]>/params.json`` and
    ``<dir>/<params-digest[:16]>/<sha[:2]>/<sha>.npz``. Entries are written
    atomically (temporary file + ``os.replace``) as plain .npz (no pickle), so
    several processes may share one cache. A corrupt or mismatched entry is a
    miss and is overwritten. ``hits`` and ``misses`` count lookups in this process.
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the feature cache directory {self.directory}: {exc}") from exc
        self.hits = 0
        self.misses = 0

    @staticmethod
    def params_digest(extractor):
        """SHA-256 of the extractor's canonical JSON parameters (the cache's second key)."""
        blob = json.dumps(extractor.params(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def _key(self, content_sha256, extractor):
        """(params digest, params folder, entry path), recomputed on every call so that
        changing an extractor's attributes can never reuse stale entries."""
        if not (isinstance(content_sha256, str) and len(content_sha256) == 64
                and all(c in "0123456789abcdef" for c in content_sha256)):
            raise ConfigError(f"not a sha256 hex digest: {content_sha256!r}")
        digest = self.params_digest(extractor)
        folder = self.directory / digest[:16]
        return digest, folder, folder / content_sha256[:2] / f"{content_sha256}.npz"

    def entry_path(self, content_sha256, extractor):
        """Where the features of an image with this content hash are stored."""
        return self._key(content_sha256, extractor)[2]

    def get(self, content_sha256, extractor):
        """The cached features, or None (a miss)."""
        digest, _, path = self._key(content_sha256, extractor)
        try:
            features, meta = _features_from_npz(path)
            if meta.get("sha256") != content_sha256 or meta.get("params_digest") != digest:
                raise ValueError("entry for other content or parameters")
        except Exception:  # absent, corrupt or foreign entry: a miss (recomputed and overwritten)
            self.misses += 1
            return None
        self.hits += 1
        return features

    def put(self, content_sha256, extractor, features):
        """Store features (atomically); also writes the folder's params.json the first time."""
        digest, folder, path = self._key(content_sha256, extractor)
        pfile = folder / "params.json"
        if not pfile.exists():
            folder.mkdir(parents=True, exist_ok=True)
            text = json.dumps(extractor.params(), sort_keys=True, indent=1).encode()
            atomic_write(pfile, lambda fh: fh.write(text))
        path.parent.mkdir(parents=True, exist_ok=True)
        save_features(path, features, {"sha256": content_sha256, "params_digest": digest})


def _as_cache(cache):
    if cache is None or isinstance(cache, FeatureCache):
        return cache
    return FeatureCache(cache)


def features_of_bytes(data, path, extractor, cache, sha256_hex=None):
    """(Features, cache hit?) of an image file's bytes: the cache entry when there is
    one, else extracted (and stored in the cache). ``sha256_hex``: the bytes' digest,
    when the caller has it already."""
    if cache is not None:
        sha256_hex = sha256_hex or hashlib.sha256(data).hexdigest()
        cached = cache.get(sha256_hex, extractor)
        if cached is not None:
            return cached, True
    features = extractor.extract_array(_decode_gray(data, path))
    if cache is not None:
        try:
            cache.put(sha256_hex, extractor, features)
        except OSError as exc:
            warnings.warn(f"could not write the feature cache entry for {path}: {exc}",
                          RuntimeWarning, stacklevel=3)
    return features, False


def _extract_with_cache(path, extractor, cache):
    """(Features, cache hit?): the file is read once, hashed only when a cache is used."""
    return features_of_bytes(_read_file_bytes(path), path, extractor, cache)


def extract(path, extractor=None, cache=None):
    """Features of one image file.

    extractor: an :class:`Extractor` (None: :func:`default_extractor`).
    cache: None, a directory, or a :class:`FeatureCache`; features are then
    computed once per (file content, extractor parameters).
    Raises :class:`~streamk.errors.ImageReadError` for an unreadable image. An
    image without features gives an empty set (0 x 128), not an error.
    """
    extractor = default_extractor() if extractor is None else extractor
    return _extract_with_cache(path, extractor, _as_cache(cache))[0]


# =========================================================================== many images
class ExtractionResult(NamedTuple):
    path: object
    features: object  # Features, or None on failure
    error: object  # None, or "ErrorType: reason"
    cached: bool  # True when read from the cache


def _describe(exc):
    reason = exc.reason if isinstance(exc, ImageReadError) else (str(exc) or repr(exc))
    return f"{type(exc).__name__}: {reason}"


def _extract_task(ctx, item):
    """One image ``(path as given, absolute path)`` in a worker (see :mod:`streamk.workers`);
    never raises."""
    path, read_path = item
    try:
        features, hit = _extract_with_cache(read_path, ctx["extractor"], ctx["cache"])
        return ExtractionResult(path, features, None, hit)
    except Exception as exc:  # reported per file, never raised mid-run
        return ExtractionResult(path, None, _describe(exc), False)


def _crashed(item):
    return ExtractionResult(item[0], None, "WorkerCrashed: the extraction process died on this image "
                                        "(a crash in the detector library?)", False)


def _failed(item, exc):
    return ExtractionResult(item[0], None, _describe(exc), False)


def _default_workers():
    from .workers import default_workers

    return default_workers()


def iter_extract(paths, extractor=None, cache_dir=None, workers=None, progress=False, executor=None):
    """Extract features of many images; yield an :class:`ExtractionResult` per distinct path.

    Results come in completion order. workers: number of processes (None: all
    cores this process may use; 1: in this process, no pool). executor: a
    :mod:`streamk.workers` executor to run on instead (e.g. a Dask cluster's).
    Each file is read once, in the worker, which serves cache hits too.
    Failures are yielded as results with ``error`` set, never raised; an image
    that crashes a worker process is isolated and reported as ``WorkerCrashed``.
    With workers > 1 the processes are *spawned*: a script calling this must
    guard its entry point with ``if __name__ == "__main__":``.
    """
    from .workers import make_executor

    extractor = default_extractor() if extractor is None else extractor
    if not isinstance(extractor, Extractor):
        raise ConfigError(f"extractor must be an Extractor, got {extractor!r}")
    paths = list(dict.fromkeys(paths))
    workers = None if workers is None else _check_positive_int(workers, "workers")
    cache = None if cache_dir is None else FeatureCache(cache_dir)
    spec = {"encoder": None, "extractor": extractor,
            "cache_dir": None if cache is None else str(cache.directory)}
    from tqdm.auto import tqdm

    bar = tqdm(total=len(paths), disable=not progress, unit="img", desc=f"features ({extractor.name})",
               dynamic_ncols=True)
    counts = {"failed": 0, "cached": 0}
    own = executor is None
    if own:
        executor = make_executor(max(1, min(workers or _default_workers(), len(paths))))
    try:
        items = ((p, os.path.abspath(p)) for p in paths)  # a Dask worker's working folder is not ours
        for _, r in executor.map_unordered(_extract_task, items, spec, _crashed, _failed):
            counts["failed"] += r.error is not None
            counts["cached"] += r.cached
            bar.update(1)
            if progress:
                bar.set_postfix(counts, refresh=False)
            yield r
    finally:
        bar.close()
        if own:
            executor.close()


def extract_many(paths, extractor=None, cache_dir=None, workers=None, progress=True, executor=None):
    """Extract features of many images on all cores, with a progress bar.

    Returns ``(features, errors)``: dicts keyed by the given paths, in input
    order; ``features[path]`` is a :class:`Features`, ``errors[path]`` a message
    "ErrorType: reason" for each file that failed (unreadable, corrupt, crash).
    See :func:`iter_extract` for the options and for streaming use.
    """
    paths = list(dict.fromkeys(paths))
    got = {r.path: r for r in iter_extract(paths, extractor, cache_dir, workers, progress, executor)}
    features = {p: got[p].features for p in paths if got[p].error is None}
    errors = {p: got[p].error for p in paths if got[p].error is not None}
    return features, errors

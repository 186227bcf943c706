"""Local features: the first stage, image file -> keypoints + raw SIFT descriptors.

    file bytes --sha256--> cache lookup (hit: done)
      -> size limits (file bytes, header pixels: :mod:`streamk.features.images`)
      -> Pillow decode, grayscale, EXIF orientation ignored; downscaled so that the
         long side is at most ``max_side`` (default 1024; a JPEG already while decoding)
      -> detector: Hessian-affine + SIFT (pyhesaff, the paper's features; default)
                   or OpenCV's DoG SIFT
      -> keypoints mapped back to ORIGINAL pixel coordinates
      -> strongest first, cap ``max_features`` (default 8192) -> :class:`Features`

Defaults, and why (change them with the options, ``--max-side`` / ``--max-features``
of ``streamk index create``; ``None`` turns one off):

* :data:`DEFAULT_MAX_SIDE` = 1024 px: the Oxford5k / Paris6k images the paper's
  numbers come from are 1024 px on their long side, so features (and the learned
  vocabularies) are at the scale the method was tuned for, and a 10000 x 8000 photo
  costs like a 1024 x 819 one instead of ~100 s and 3 GB (issue 17). Smaller images
  are never enlarged.
* :data:`DEFAULT_MAX_FEATURES` = 8192: Hessian-affine gives ~2,100 features on a
  1024 px Paris6k photo (measured on 21 of the subset: at most 5,329), while a
  1024 px image of noise gives ~28,000. The cap leaves real photos alone and bounds
  pathological images (noise, foliage, text), whose encoding and local geometry
  would otherwise grow with them.

Indexes store their extractor's parameters (:meth:`Extractor.params`): queries are
described like the images, and an index made before these defaults (``max_side``
stored as null) keeps extracting at full resolution. The file-size and pixel limits
(``max_file_size``, ``max_pixels``) change no feature, only which files are refused:
they are not part of the parameters, and are set per run.

Descriptors are raw SIFT, uint8 (n, 128), for both extractors; RootSIFT is the
encoder's business (``EncoderConfig.rootsift``), not done here.

The keypoint convention is in :mod:`streamk.features.local_features`.

Order and cap ("strongest first"): OpenCV features are sorted by detector
response (descending). pyhesaff does not report its Hessian response, so its
features are sorted by scale ``sqrt(a11 * a22)`` (descending: large features
are the most repeatable); raise the ``threshold`` option to keep the features
with the strongest Hessian response instead. Ties are broken by position and
orientation, so the output is a deterministic function of the image and the
options, whatever order the detector (threaded in OpenCV) emits.
"""

import math
import warnings
from typing import Any

import numpy as np

from ..errors import ConfigError, DimensionError, ExtractorUnavailableError
from .images import (MAX_FILE_SIZE, MAX_PIXELS, _check_limit, decode_gray_scaled, pil_image, read_image_bytes,
                     resize_gray, scaled_size)
from .local_features import DESCRIPTOR_DIM, KEYPOINT_COLUMNS, Features

#: Version of this module's pipeline (decoding, resizing, coordinate convention); part of cache keys.
#: 2: a JPEG larger than ``max_side`` is reduced by libjpeg while decoding. With
#: ``max_side=None`` nothing differs from 1, which :meth:`Extractor.params` then reports
#: (features at full resolution, their caches and indexes, stay valid).
#: 3: an image is turned upright for its EXIF orientation before anything else
#: (:mod:`streamk.features.images`): a phone's portrait photo, stored sideways with a tag,
#: matches a landscape photo of the scene. An index keeps the version it was made with.
FEATURES_VERSION = 3
#: the features version of the evaluation datasets' extractors: their query boxes are
#: given in the stored pixel grid, so no EXIF turn (version 2's decoding)
STORED_PIXELS_VERSION = 2
DEFAULT_EXTRACTOR = "hesaff"
#: Default long side (pixels) images are reduced to before detection: the Oxford/Paris images' size.
DEFAULT_MAX_SIDE = 1024
#: Default cap on the features kept per image (strongest first).
DEFAULT_MAX_FEATURES = 8192
_MIN_SIDE = 16  # smallest accepted max_side


def check_positive_int(value, name, minimum=1):
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
        Default :data:`DEFAULT_MAX_SIDE`.
    max_features: keep at most this many features, strongest first (see the
        module doc for what "strongest" means per extractor). None: all.
        Default :data:`DEFAULT_MAX_FEATURES`.
    max_file_size, max_pixels: the limits of :mod:`streamk.features.images` for
        the files this extractor reads (not parameters: see :meth:`set_limits`).
    """

    name = "base"
    features_version = FEATURES_VERSION  # 1: decodes JPEGs whole; 2: no EXIF turn (an index's of that version)

    @property
    def orients(self):
        """Whether images are turned upright for their EXIF orientation (version 3 on)."""
        return self.features_version >= 3

    def __init__(self, max_side=DEFAULT_MAX_SIDE, max_features=DEFAULT_MAX_FEATURES, *,
                 max_file_size=MAX_FILE_SIZE, max_pixels=MAX_PIXELS):
        self.max_side = check_positive_int(max_side, "max_side", _MIN_SIDE)
        self.max_features = check_positive_int(max_features, "max_features")
        self.set_limits(max_file_size=max_file_size, max_pixels=max_pixels)

    # -- limits (which files are refused; no influence on any feature) -------
    def set_limits(self, max_file_size=None, max_pixels=None):
        """Set the file-size and pixel limits (None: leave as is); returns self."""
        if max_file_size is not None:
            self.max_file_size = _check_limit(max_file_size, "max_file_size")
        if max_pixels is not None:
            self.max_pixels = _check_limit(max_pixels, "max_pixels")
        return self

    def limits(self):
        """{"max_file_size": bytes, "max_pixels": pixels}."""
        return {"max_file_size": self.max_file_size, "max_pixels": self.max_pixels}

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
        version = self.features_version
        if self.max_side is None and version == 2:
            version = 1  # the same decoding at full resolution
        return {"extractor": self.name, "options": self.options(), "versions": self.versions(),
                "features_version": version}

    def __repr__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in {**self.options(), **self.limits()}.items())
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
        target = scaled_size((W, H), self.max_side)
        small = gray if target == (W, H) else resize_gray(gray, target)
        return self._extract(small, (W, H))

    def extract_bytes(self, data, path):
        """Features of an image file's bytes (``path`` names it in errors): the pixel
        limit checked on the header, a JPEG reduced while decoding (see the module doc)."""
        small, size = decode_gray_scaled(data, path, self.max_side, self.max_pixels,
                                         draft=self.features_version >= 2, orient=self.orients)
        return self._extract(small, size)

    def read(self, path):
        """The bytes of an image file, within :attr:`max_file_size`."""
        return read_image_bytes(path, self.max_file_size)

    def _extract(self, small, size):
        """Features of ``small``, the image of original ``size`` = (W, H) reduced (or not)."""
        W, H = size
        kp, desc, strength = self._detect(np.ascontiguousarray(small))
        kp = np.asarray(kp, dtype=np.float64).reshape(-1, len(KEYPOINT_COLUMNS))
        desc = np.asarray(desc).reshape(-1, DESCRIPTOR_DIM)
        strength = np.asarray(strength, dtype=np.float64).reshape(-1)
        if not (len(kp) == len(desc) == len(strength)):
            raise DimensionError(f"{self.name}: detector returned {len(kp)} keypoints, "
                                 f"{len(desc)} descriptors, {len(strength)} strengths")
        h2, w2 = small.shape
        if (w2, h2) != (W, H):  # back to original pixel coordinates (pixel centres at integers)
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
        return self.extract_bytes(self.read(path), path)

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

    def __init__(self, max_side=DEFAULT_MAX_SIDE, max_features=DEFAULT_MAX_FEATURES, *,
                 max_file_size=MAX_FILE_SIZE, max_pixels=MAX_PIXELS, **hesaff_params):
        super().__init__(max_side, max_features, max_file_size=max_file_size, max_pixels=max_pixels)
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
                "pillow": pil_image().__version__}

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

    def __init__(self, max_side=DEFAULT_MAX_SIDE, max_features=DEFAULT_MAX_FEATURES, n_octave_layers=3,
                 contrast_threshold=0.04, edge_threshold=10.0, sigma=1.6, *, max_file_size=MAX_FILE_SIZE,
                 max_pixels=MAX_PIXELS):
        super().__init__(max_side, max_features, max_file_size=max_file_size, max_pixels=max_pixels)
        _import_cv2()
        self.n_octave_layers = check_positive_int(n_octave_layers, "n_octave_layers")
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
        return {"opencv": _import_cv2().__version__, "pillow": pil_image().__version__}

    def _sift(self):
        if getattr(self, "_lib_sift", None) is None:
            cv2 = _import_cv2()  # its thread pool: sized by OPENCV_FOR_THREADS_NUM (1 in workers)
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
        # positions in one C++ call; size, angle and response in one pass (no per-column Python loop)
        size_angle_response = np.array([(k.size, k.angle, k.response) for k in keypoints], np.float64)
        kp = np.zeros((n, 6), np.float64)
        kp[:, :2] = _import_cv2().KeyPoint_convert(keypoints)
        kp[:, 2] = kp[:, 4] = size_angle_response[:, 0] / 2.0
        angle = size_angle_response[:, 1]
        kp[:, 5] = np.where(angle >= 0, np.radians(angle), 0.0)  # OpenCV's angle is -1 when not computed
        return kp, np.asarray(desc, dtype=np.uint8), size_angle_response[:, 2]


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


def make_extractor(name: str | None = None, **options: Any) -> Extractor:
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
            hes_only = set(options) - {"max_side", "max_features", "max_file_size", "max_pixels"}
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


def stored_pixels(extractor):
    """``extractor`` as it reads an evaluation dataset: images as stored, without their EXIF
    turn (the datasets' query boxes are in the stored pixel grid); the same extractor when
    it does not turn them."""
    import copy

    if not extractor.orients:
        return extractor
    ex = copy.copy(extractor)
    ex.features_version = STORED_PIXELS_VERSION
    return ex


def extractor_from_params(params):
    """Rebuild an extractor from :meth:`Extractor.params` (e.g. stored beside an index).

    Library versions that differ from the stored ones give a warning: the
    features may differ slightly from those stored.
    """
    try:
        name, options = params["extractor"], dict(params["options"])
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"not extractor parameters: {params!r}") from exc
    options.setdefault("max_side", None)  # absent: stored before the defaults (full resolution)
    options.setdefault("max_features", None)
    ex = make_extractor(name, **options)
    try:  # decoded as it was stored: 1 JPEGs whole, 2 no EXIF turn
        version = int(params.get("features_version", 1))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"not extractor parameters (features_version): {params!r}") from exc
    if version > FEATURES_VERSION:
        raise ConfigError(f"extractor parameters of features version {version}, newer than this streamk's "
                          f"{FEATURES_VERSION}: upgrade streamk")
    ex.features_version = max(version, 1)
    stored = params.get("versions") or {}
    if stored and stored != ex.versions():
        warnings.warn(f"extractor library versions differ from the stored ones: stored {stored}, "
                      f"here {ex.versions()}", RuntimeWarning, stacklevel=2)
    return ex


__all__ = ["DEFAULT_EXTRACTOR", "DEFAULT_MAX_FEATURES", "DEFAULT_MAX_SIDE", "EXTRACTORS", "FEATURES_VERSION",
           "STORED_PIXELS_VERSION", "Extractor", "HessianAffineSift",
           "OpenCVSift", "available_extractors", "check_positive_int", "default_extractor",
           "extractor_from_params", "make_extractor", "stored_pixels"]

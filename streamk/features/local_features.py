"""The result of feature extraction: an image's keypoints and raw SIFT descriptors.

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

Descriptors are raw SIFT, uint8 (n, 128), for both extractors; RootSIFT is the
encoder's business (``EncoderConfig.rootsift``), not done here.
"""

import io
import json
from dataclasses import dataclass

import numpy as np

from ..checks import clip_box
from ..errors import DescriptorFileError, DimensionError
from .descriptor_files import atomic_write

KEYPOINT_COLUMNS = ("x", "y", "a11", "a21", "a22", "theta")
DESCRIPTOR_DIM = 128

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
    """Keep the features whose centre lies inside ``box`` = (x1, y1, x2, y2), edges included
    (a box reaching past the image is clipped to it; one wholly outside it is a ConfigError
    that says the image's size: :func:`streamk.checks.clip_box`).

    The box is in original-image pixel coordinates, as the Oxford/Paris
    ground-truth ``bbx`` (query protocol: the query is described by the
    features of the full image that fall inside its box).
    """
    x1, y1, x2, y2 = clip_box(box, features.image_size)  # streamk's one box rule, clipped to the image
    x, y = features.keypoints[:, 0], features.keypoints[:, 1]
    return features.subset((x >= x1) & (x <= x2) & (y >= y1) & (y <= y2))


def features_to_npz_bytes(features, meta):
    buf = io.BytesIO()
    np.savez(buf, keypoints=features.keypoints, descriptors=features.descriptors,
             image_size=np.asarray(features.image_size, np.int64),
             meta=np.array(json.dumps(meta, sort_keys=True)))
    return buf.getvalue()


def features_from_npz(source):
    """(Features, meta dict) from an .npz path or file object; ValueError-family on a bad file."""
    with np.load(source, allow_pickle=False) as npz:
        meta = json.loads(str(npz["meta"])) if "meta" in npz.files else {}
        f = Features(npz["keypoints"], npz["descriptors"], tuple(npz["image_size"].tolist()))
    if not np.isfinite(f.keypoints).all():
        raise ValueError("non-finite keypoints")
    return f, meta


def save_features(path, features, meta=None):
    """Save features as .npz (keypoints, descriptors, image_size, meta JSON); atomic, no pickle."""
    data = features_to_npz_bytes(features, meta or {})
    atomic_write(path, lambda fh: fh.write(data))


def load_features(path):
    """Load features saved by :func:`save_features` (never unpickles); a bad file raises
    :class:`~streamk.errors.DescriptorFileError`."""
    try:
        return features_from_npz(path)[0]
    except OSError as exc:
        raise DescriptorFileError(f"cannot read features file {path}: {exc}") from exc
    except Exception as exc:
        raise DescriptorFileError(f"{path}: not a streamk features file ({exc})") from exc


__all__ = ["DESCRIPTOR_DIM", "KEYPOINT_COLUMNS", "Features", "crop_to_box", "features_from_npz",
           "features_to_npz_bytes", "load_features", "save_features"]

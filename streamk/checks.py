"""Input validation shared by the stages: shapes, dtypes, finiteness."""

import numpy as np

from .errors import ConfigError, DimensionError, EmptyDescriptorSetError, NonFiniteError


def as_descriptor_set(X, dim=None, what="descriptor set"):
    """Return X as a C-contiguous float32 (n, d) array, or raise a named error."""
    try:
        X = np.asarray(X)
    except Exception as exc:  # ragged lists and the like
        raise DimensionError(f"{what}: not an array ({exc})") from exc
    if X.ndim != 2 and X.shape != (0,):
        raise DimensionError(f"{what}: expected a 2-D (n, d) array, got shape {X.shape}")
    if X.shape[0] == 0:  # also [] (an empty list of descriptors)
        raise EmptyDescriptorSetError(f"{what} is empty (no descriptors)")
    if dim is not None and X.shape[1] != dim:
        raise DimensionError(f"{what}: descriptors have dimension {X.shape[1]}, expected {dim}")
    if not np.issubdtype(X.dtype, np.number) or np.iscomplexobj(X):
        raise DimensionError(f"{what}: expected real numbers, got dtype {X.dtype}")
    X = np.ascontiguousarray(X, dtype=np.float32)
    if not np.isfinite(X).all():
        raise NonFiniteError(f"{what} contains NaN or infinite values")
    return X


def as_gram(K):
    """Return a square, finite Gram matrix as a C-contiguous float array."""
    K = np.asarray(K)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise DimensionError(f"Gram matrix must be square, got shape {K.shape}")
    if K.shape[0] == 0:
        raise EmptyDescriptorSetError("Gram matrix of an empty descriptor set")
    if K.dtype not in (np.float32, np.float64):
        K = K.astype(np.float64)
    K = np.ascontiguousarray(K)
    if not np.isfinite(K).all():
        raise NonFiniteError("Gram matrix contains NaN or infinite values")
    return K


def as_vectors(V, dim=None, what="vectors"):
    """Return a finite (N, D) float array of image vectors (1-D input is one vector)."""
    V = np.asarray(V, dtype=np.float64)
    if V.ndim == 1:
        V = V[None, :]
    if V.ndim != 2 or V.shape[0] == 0:
        raise DimensionError(f"{what}: expected a non-empty (N, D) array, got shape {V.shape}")
    if dim is not None and V.shape[1] != dim:
        raise DimensionError(f"{what}: dimension {V.shape[1]}, expected {dim}")
    if not np.isfinite(V).all():
        raise NonFiniteError(f"{what} contain NaN or infinite values")
    return V


def check_box(box, what="box"):
    """A query box as a tuple of 4 floats (x1, y1, x2, y2), or ConfigError: the one box rule
    of streamk (the index, spatial verification, cropping, the server, the widgets).

    In pixels of the query image, the centre of the top-left pixel being (0, 0); finite,
    with x1 < x2 and y1 < y2 (a box of no width or height holds no feature: refused here
    rather than searched as an empty query)."""
    try:
        b = np.asarray(box, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what} must be 4 numbers (x1, y1, x2, y2), got {box!r}") from exc
    if b.shape != (4,) or isinstance(box, (str, bytes)):
        raise ConfigError(f"{what} must be 4 numbers (x1, y1, x2, y2), got {box!r}")
    if not np.isfinite(b).all():
        raise ConfigError(f"{what} must be 4 finite numbers, got {box!r}")
    x1, y1, x2, y2 = (float(v) for v in b)
    if not (x1 < x2 and y1 < y2):
        raise ConfigError(f"{what} must have x1 < x2 and y1 < y2 (pixels of the query image), got {box!r}")
    return x1, y1, x2, y2


def clip_box(box, image_size, what="box"):
    """``box`` checked (:func:`check_box`) and clipped to the image of ``image_size`` =
    (width, height): the tuple of 4 floats searched, the one rule of every front end (the
    Python API, the CLI, the server, the widgets) for a box out of the image's bounds.

    The image spans [-0.5, width - 0.5] x [-0.5, height - 0.5] (pixel centres from (0, 0)):
    a box reaching past it is clipped to it (its features are the same; its matched region
    is what the image shows), and a box with nothing of the image inside is a ConfigError
    naming the image's size."""
    x1, y1, x2, y2 = check_box(box, what)
    w, h = (int(v) for v in image_size)
    lo_x, lo_y, hi_x, hi_y = -0.5, -0.5, w - 0.5, h - 0.5
    clipped = max(x1, lo_x), max(y1, lo_y), min(x2, hi_x), min(y2, hi_y)
    if not (clipped[0] < clipped[2] and clipped[1] < clipped[3]):
        raise ConfigError(f"{what} ({x1:g}, {y1:g}, {x2:g}, {y2:g}) lies outside the image, which is {w} x {h} "
                          f"pixels: give a box that overlaps x from 0 to {w - 1} and y from 0 to {h - 1} "
                          f"(pixels of the image as viewers show it)")
    return clipped

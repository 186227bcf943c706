"""Input validation shared by the stages: shapes, dtypes, finiteness."""

import numpy as np

from .errors import DimensionError, EmptyDescriptorSetError, NonFiniteError


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

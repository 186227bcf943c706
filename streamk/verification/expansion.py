"""Query expansion: a new query vector from the query and the images it found.

- AQE, average query expansion (Chum, Philbin, Sivic, Isard, Zisserman, "Total
  recall", ICCV 2007): q' = normalise(q + sum_i d_i) over the spatially verified
  results (they are the reason AQE does not drift: an unverified false positive in
  the average pulls the next search towards it).
- alpha-QE (Radenovic, Tolias, Chum, TPAMI 2018): q' = normalise(q + sum_i
  max(q . d_i, 0)^alpha d_i), alpha = 3: a result counts with its similarity to
  the query raised to alpha; alpha = 0 is AQE.

Expansion uses verified images only unless asked (``include_unverified``): see
:func:`expansion_rows`. The expanded vector is L2-normalised and searched once more
by the first stage.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError, DimensionError, NonFiniteError

DEFAULT_ALPHA = 3.0  # Radenovic et al. 2018
DEFAULT_TOP = 50  # verified results averaged, at most

__all__ = ["DEFAULT_ALPHA", "DEFAULT_TOP", "alpha_query_expansion", "average_query_expansion", "expand_query",
           "expansion_rows"]


def _vectors(query, neighbours):
    q = np.asarray(query, dtype=np.float64)
    if q.ndim != 1 or q.size == 0:
        raise DimensionError(f"query must be a non-empty 1-D vector, got shape {q.shape}")
    N = np.asarray(neighbours, dtype=np.float64)
    if N.size == 0:
        N = N.reshape(0, q.size)
    if N.ndim != 2 or N.shape[1] != q.size:
        raise DimensionError(f"neighbours must be (n, {q.size}), got shape {N.shape}")
    if not (np.isfinite(q).all() and np.isfinite(N).all()):
        raise NonFiniteError("query expansion inputs contain NaN or infinite values")
    return q, N


def _normalise(v):
    norm = float(np.linalg.norm(v))
    if not norm > 0:
        raise DimensionError("the expanded query has zero norm")
    return v / norm


def average_query_expansion(query, neighbours):
    """normalise(q + sum of the neighbours' rows) (Chum et al. 2007)."""
    q, N = _vectors(query, neighbours)
    return _normalise(q + N.sum(axis=0))


def alpha_query_expansion(query, neighbours, alpha=DEFAULT_ALPHA):
    """normalise(q + sum_i max(q . d_i, 0)^alpha d_i) (Radenovic et al. 2018)."""
    q, N = _vectors(query, neighbours)
    try:
        alpha = float(alpha)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"alpha must be a number, got {alpha!r}") from exc
    if not (math.isfinite(alpha) and alpha >= 0):
        raise ConfigError(f"alpha must be finite and >= 0, got {alpha!r}")
    w = np.maximum(N @ q, 0.0) ** alpha if len(N) else np.zeros(0)
    return _normalise(q + w @ N)


def expand_query(query, neighbours, method="aqe", alpha=DEFAULT_ALPHA):
    """AQE (``method="aqe"``) or alpha-QE (``"alpha"``) of a query vector."""
    if method == "aqe":
        return average_query_expansion(query, neighbours)
    if method == "alpha":
        return alpha_query_expansion(query, neighbours, alpha)
    raise ConfigError(f"unknown query expansion {method!r}; choose 'aqe' or 'alpha'")


def expansion_rows(ranking, n_verified, top=DEFAULT_TOP, include_unverified=False):
    """The database rows to expand with: the first ``top`` verified rows of a re-ranked
    list (verified first, as :func:`~verification.spatial.rerank` returns it), or, only with
    ``include_unverified``, the first ``top`` rows whatever their verification."""
    ranking = np.asarray(ranking)
    if ranking.ndim != 1 or ranking.dtype.kind not in "iu":
        raise DimensionError(f"ranking must be a 1-D integer array, got {ranking.shape} {ranking.dtype}")
    for name, v in (("top", top), ("n_verified", n_verified)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ConfigError(f"{name} must be a non-negative integer, got {v!r}")
    if n_verified > len(ranking):
        raise ConfigError(f"n_verified = {n_verified} exceeds the ranking's length {len(ranking)}")
    n = int(top) if include_unverified else min(int(top), int(n_verified))
    return ranking[:n].astype(np.int64)

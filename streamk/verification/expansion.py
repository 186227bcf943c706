"""Query expansion: a new query vector from the query and the images it found.

- AQE, average query expansion (Chum, Philbin, Sivic, Isard, Zisserman, "Total
  recall", ICCV 2007): q' = normalise(q + sum_i d_i) over the spatially verified
  results (they are the reason AQE does not drift: an unverified false positive in
  the average pulls the next search towards it).
- alpha-QE (Radenovic, Tolias, Chum, TPAMI 2018): q' = normalise(q + sum_i
  max(q . d_i, 0)^alpha d_i), alpha = 3: a result counts with its similarity to
  the query raised to alpha; alpha = 0 is AQE.

- recursive AQE (Chum et al. 2007, "recursive average query expansion"): AQE again
  and again, each query averaging every verified image so far, the results of each
  expanded search verified in turn; :func:`recursive_expansion`.

- centred recursive AQE, the default of a search: the recursion above with the mean of
  the rest of the collection subtracted from each expanded query, q' = normalise(q +
  sum_i d_i - (n + 1) mu') over the n averaged, mu' = (N mu - sum_i d_i) / (N - n) the mean
  of the N - n images not averaged (mu: the mean of all N): Rocchio's relevance feedback
  (1971; Salton & Buckley 1990: q' = a q + b mean(relevant) - c mean(non-relevant)) with
  a = b = c and the rest of the collection as the non-relevant set (none left, N <= n:
  nothing is subtracted; a centred query of zero length, the query and the averaged being
  all there is alike, is the plain one). It is also discriminative QE's (Arandjelovic &
  Zisserman 2012) heavily regularised limit: a linear SVM with balanced classes and a small
  C keeps every sample inside its margin, so its weight vector is the difference of the
  class means, and a sample of the collection's rows has the collection's mean. Why:
  with the power law and no RN the vectors share a large common component, and the
  average of many verified images is mostly that component; subtracting it leaves what
  they share beyond any image. The first stage does not gain from it (paris6k-subset
  GMP k = 16: 74.2 raw, 73.4 with the query centred); the expansion does (bench/README.md
  section 8: +1.1 on the 12 official queries, +1.2 on every photo as a query, +1.1 on
  50-photo collections). With RN the vectors are centred already and it changes little.

Expansion uses verified images only unless asked (``include_unverified``): see
:func:`expansion_rows`. The expanded vector is L2-normalised and searched once more
by the first stage (by the recursive expansion, once per round).

Why recursive AQE. AQE over N verified images loses quality as N drops (paris6k-subset
GMP k = 16: 85.0 mAP at N = 50, 83.3 at N = 5; recursive 84.9 at N = 5): none of the
verified images is wrong; five simply carry less than the fifteen or so a query's top 100
verifies. Recursion keeps N as the step: each round adds at most N verified images, the
ones with the most inliers first (Chum et al.'s queue keyed by inliers), searches, and
verifies the new results of that search, so that an image the first stage ranked too low
to verify can still join. It stops as the paper's does, when no verified image is left to
add or 50 are averaged, and within bounds on work: at most :data:`RECURSIVE_ROUNDS`
expanded searches and ``max_verifications`` new verifications (an index's search allows
R / 10: ``streamk.index.second_stage.RECURSIVE_VERIFICATIONS``, for the cost target).
Weights from the verification's evidence change how the N images count, not how many
there are; alpha-QE collapses with GMP similarities of 0.1-0.3 (cubed, they weigh the
expanded images at 0.001-0.03). Discriminative QE (Arandjelovic & Zisserman 2012, a linear
SVM against low-ranked images) was measured (bench/README.md section 8): one round is 1.2
points above AQE at N = 5 and 1.2 below recursive AQE; inside the recursion it adds 1.1-1.3
on every photo as a query, 0.1 on the 12 official queries, for a fit (~10 ms with
scikit-learn) per round: not offered.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..errors import ConfigError, DimensionError, NonFiniteError
from .spatial import DEFAULT_R

DEFAULT_ALPHA = 3.0  # Radenovic et al. 2018
DEFAULT_TOP = 50  # verified results averaged, at most (Chum et al. 2007: "m < 50"; recursive AQE stops at 50)
# expanded searches of one recursive expansion, at most: with the R / 10 new verifications an
# index allows, its worst case at 10k images costs 1.05-1.10x AQE's second stage (the extra
# searches cost more on a larger index: ~10 ms each with flat PQ over 1M codes)
RECURSIVE_ROUNDS = 4

__all__ = ["DEFAULT_ALPHA", "DEFAULT_TOP", "RECURSIVE_ROUNDS", "RecursiveExpansion", "alpha_query_expansion",
           "average_query_expansion", "expand_query", "expansion_rows", "recursive_expansion"]


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




class RecursiveExpansion(NamedTuple):
    """What :func:`recursive_expansion` found: ``vector`` (the last expanded query, unit),
    ``averaged`` (the ids in it, in the order they joined), ``verified`` ([(id, inliers)]:
    the verified ids given and the ones it verified, by inliers, ties in the order found),
    ``results`` (the last search's [(id, score)], best first), ``searches`` and
    ``verifications`` (the new ones)."""

    vector: np.ndarray
    averaged: list
    verified: list
    results: list
    searches: int
    verifications: int


def _centred(v, n, total, mu, population):
    """v - (n + 1) mu': v = q + the sum ``total`` of the n averaged, mu' the mean of the rest
    of a collection of ``population`` images whose mean is mu (module doc); v itself when no
    image is left or the difference has no length."""
    if population <= n:
        return v
    rest = (population * mu - total) / (population - n)
    c = v - (n + 1) * rest
    return c if np.linalg.norm(c) > 1e-6 * np.linalg.norm(v) else v


def _count(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def recursive_expansion(query, verified, vectors, search, verify=None, step=DEFAULT_TOP, checked=(),
                        top=DEFAULT_TOP, window=DEFAULT_R, max_verifications=DEFAULT_R, rounds=RECURSIVE_ROUNDS,
                        centre=None):
    """Recursive AQE (Chum et al. 2007), bounded; see the module doc.

    query: (D,) vector; verified: [(id, inliers)] the images verified so far, best first;
    vectors(ids) -> (n, D) their vectors; search(q) -> [(id, score)] best first;
    verify(ids) -> [(inliers, verified)] of new ids (None: nothing new is verified);
    step: images added per round (``expand``); checked: ids verified before, whatever the
    answer, never verified again; top: images averaged in all; window: the first results
    of each search whose new ids are verified; max_verifications: new verifications in
    all; rounds: expanded searches, at most; centre: (mu, N), the collection's mean vector
    (D,) and its number of images, for centred recursive AQE (the module doc), or None.

    Each round: the next ``step`` ids of the queue (the verified, by inliers) join the
    average, q' = normalise(q + sum of their vectors); q' is searched; the new ids among
    its first ``window`` results are verified, and those verified join the queue behind
    the ids already averaged, by inliers. It stops when no id is left to add, ``top`` are
    averaged, or after ``rounds`` searches. Returns :class:`RecursiveExpansion`; with
    nothing verified, no search is made and ``vector`` is None.
    """
    q, _ = _vectors(query, np.zeros((0, np.size(query))))
    if centre is not None:
        mu, population = centre
        mu, population = _vectors(q, np.reshape(mu, (1, -1)))[1][0], _count("the collection's size", population, 0)
    step, top, window = _count("step", step, 1), _count("top", top, 1), _count("window", window, 0)
    budget, rounds = _count("max_verifications", max_verifications, 0), _count("rounds", rounds, 1)
    queue = [(i, int(c)) for i, c in verified]
    seen = set(checked) | {i for i, _ in queue}
    total, used, results, vector, searches, new_checks = np.zeros_like(q), 0, [], None, 0, 0
    while searches < rounds:
        take = min(step, len(queue) - used, top - used)
        if take <= 0:
            break
        added = _vectors(q, vectors([i for i, _ in queue[used:used + take]]))[1]
        total, used = total + added.sum(axis=0), used + take
        vector = _normalise(q + total if centre is None else _centred(q + total, used, total, mu, population))
        results, searches = list(search(vector)), searches + 1
        new = [i for i, _ in results[:window] if i not in seen][:budget - new_checks]
        if verify is None or not new:
            continue
        seen.update(new)
        new_checks += len(new)
        found = [(i, int(c)) for i, (c, ok) in zip(new, verify(new)) if ok]
        queue[used:] = sorted(queue[used:] + found, key=lambda v: -v[1])  # stable: ties in the order found
    order = sorted(range(len(queue)), key=lambda j: -queue[j][1])
    return RecursiveExpansion(vector, [i for i, _ in queue[:used]], [queue[j] for j in order], results, searches,
                              new_checks)

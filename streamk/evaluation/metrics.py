"""Retrieval evaluation: AP and mAP exactly as the official scripts compute them.

Average precision (one query).  The official Oxford ``compute_ap.cpp``, the
official Holidays ``holidays_map.py`` (``score_ap_from_ranks_1``) and revisitop's
``compute_map`` all compute the same number: walk the ranked list, **skip junk
images entirely** (they take no rank), and add a trapezoid of the
precision-recall curve at each positive, the curve starting at precision 1::

    for the t-th positive found (t = 0, 1, ...) at position j among non-junk images:
        precision_0 = t / j        if j > 0 else 1
        precision_1 = (t + 1) / (j + 1)
        ap += (precision_0 + precision_1) / 2 * (1 / n_positives)

``n_positives`` is the size of the positive set, so positives missing from a
(partial) ranking contribute nothing.  An image listed both as positive and as
junk is junk (``compute_ap.cpp`` tests junk first).

- Oxford / Paris: positives = good + ok, junk = junk.
- Holidays: ``holidays_map.py`` drops the query from its own ranking (a
  ``rank_shift`` for the images after it) and then scores with the trapezoid
  above; that is the same as treating the query as junk, which is what the
  .mat ground truth does too.  ``evaluate`` adds the query to junk when the
  dataset's ``exclude_query`` flag is set, so both sources agree.
- Revisited Oxford / Paris: revisitop ``compute_map`` on the Easy / Medium /
  Hard ground truth (see :meth:`streamk.datasets.Query.ground_truth`); queries
  without positives are skipped (AP NaN) and not counted in the mean.  mP@k
  follows revisitop too, quirk included: with ``pos`` the 1-based ranks (junk
  removed) of the positives found, ``kq = min(max(pos), k)`` and
  ``P@k = |{pos <= kq}| / kq`` -- when every found positive lies within the
  top k, the precision is taken at the last of them, not at k.
- UKBench: N-S score = average over all queries of the number of the 4 images
  of the query's group (the query included) among its top 4 results (max 4).

Rankings: ``ranks`` is an (n_queries, n_db) integer array of database indices
in ranked order, or a list of 1-D integer arrays (possibly shorter than the
database: a shortlist).  Indices must be in range and not repeated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import GroundTruthError, RankingError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ..datasets import Dataset

__all__ = [
    "average_precision", "ap_from_positions", "positive_positions", "precision_recall", "query_precision_recall",
    "precision_at_k",
    "compute_map", "MapResult", "ns_scores", "evaluate", "EvaluationResult", "ProtocolResult", "check_rankings",
]

DEFAULT_KS = (1, 5, 10)


# ------------------------------------------------------------- one query


def _as_index_array(a, what="indices") -> np.ndarray:
    """1-D int64 array of non-negative indices (RankingError for a ranking, GroundTruthError otherwise)."""
    err = RankingError if what.startswith("ranking") else GroundTruthError
    arr = np.asarray(a)
    if arr.size == 0:
        return np.empty(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise err(f"{what} must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False).ravel()
    if arr.min() < 0:
        raise err(f"{what} has a negative index")
    return arr


def _positions(r: np.ndarray, pos: np.ndarray, junk: np.ndarray, n: int) -> np.ndarray:
    """Positions of pos in r once junk is removed, in O(len(r) + n) (junk wins over positive)."""
    mark = np.zeros(n, dtype=np.int8)
    mark[pos] = 1
    mark[junk] = 2
    m = mark[r]
    if junk.size:
        m = m[m != 2]
    return np.flatnonzero(m == 1)


def _extent(*arrays) -> int:
    return max((int(a.max()) + 1 for a in arrays if a.size), default=0)


def positive_positions(ranking, positives, junk=()) -> np.ndarray:
    """0-based positions of the positives in ``ranking`` once junk images are removed from it."""
    r = _as_index_array(ranking, "ranking")
    pos = _as_index_array(positives, "positives")
    junk = _as_index_array(junk, "junk")
    return _positions(r, pos, junk, _extent(r, pos, junk))


def ap_from_positions(positions, n_positives: int) -> float:
    """Trapezoid AP from the sorted 0-based positions (junk removed) of the positives found.

    This is revisitop's ``compute_ap`` and Holidays' ``score_ap_from_ranks_1``.
    NaN when there are no positives.
    """
    if n_positives <= 0:
        return float("nan")
    p = np.asarray(positions, dtype=np.float64)
    t = np.arange(p.size, dtype=np.float64)                  # positives found before this one
    precision_0 = np.where(p > 0, t / np.maximum(p, 1.0), 1.0)
    precision_1 = (t + 1.0) / (p + 1.0)
    return float(np.sum((precision_0 + precision_1) / 2.0) / n_positives)


def average_precision(ranking, positives, junk=()) -> float:
    """AP of one ranked list of database indices (official Oxford ``compute_ap``); NaN without positives."""
    pos = np.unique(_as_index_array(positives, "positives"))
    return ap_from_positions(positive_positions(ranking, pos, junk), pos.size)


def precision_recall(ranking, positives, junk=()) -> tuple[np.ndarray, np.ndarray]:
    """Precision-recall curve points of one query: (recall, precision), junk removed.

    The first point is (0, 1); then one point after each non-junk image of the
    ranking.  The trapezoid area under these points is exactly
    :func:`average_precision` (``np.trapezoid(precision, recall)``).
    """
    pos = np.unique(_as_index_array(positives, "positives"))
    r = _as_index_array(ranking, "ranking")
    junk = _as_index_array(junk, "junk")
    n = _extent(r, pos, junk)
    is_junk = np.zeros(n, dtype=bool)
    is_junk[junk] = True
    is_pos = np.zeros(n, dtype=bool)
    is_pos[pos] = True
    is_pos[junk] = False
    r = r[~is_junk[r]]
    hits = np.cumsum(is_pos[r])
    n = max(pos.size, 1)
    recall = np.concatenate([[0.0], hits / n])
    precision = np.concatenate([[1.0], hits / np.arange(1, r.size + 1)])
    return recall, precision


def query_precision_recall(ranking, dataset, query, protocol: str | None = None):
    """:func:`precision_recall` of one query of a dataset (by position or name), with its protocol's junk.

    For Holidays the query image is junk (removed from its ranking); for the
    revisited datasets ``protocol`` picks easy / medium (default) / hard.
    """
    if isinstance(query, str):
        query = dataset.query_names.index(query) if query in dataset.query_names else None
        if query is None:
            raise GroundTruthError(f"dataset {dataset.name!r} has no such query")
    pos, junk = dataset.ground_truth(protocol)[int(query)]
    return precision_recall(ranking, pos, junk)


def precision_at_k(positions, k: int) -> float:
    """revisitop's P@k from 0-based positions (junk removed): kq = min(max rank, k); 0 if none found.

    See the module docstring for the quirk this reproduces.
    """
    p = np.asarray(positions, dtype=np.int64) + 1
    if p.size == 0:
        return 0.0
    kq = min(int(p.max()), int(k))
    return float(np.count_nonzero(p <= kq) / kq)


# ------------------------------------------------------------ many queries


def check_rankings(ranks, n_queries: int | None = None, n_db: int | None = None) -> list[np.ndarray]:
    """Rankings as a list of int64 arrays; RankingError if malformed (count, dtype, range, repeats)."""
    if isinstance(ranks, np.ndarray):
        if ranks.ndim != 2:
            raise RankingError(f"ranks must be a 2-D (n_queries, n_db) array or a list of arrays, "
                               f"got shape {ranks.shape}")
        rows = list(ranks)
    else:
        try:
            rows = [np.asarray(r) for r in ranks]
        except TypeError as exc:
            raise RankingError(f"ranks must be an array or a list of arrays: {exc}") from exc
    if n_queries is not None and len(rows) != n_queries:
        raise RankingError(f"{len(rows)} rankings for {n_queries} queries")
    out = []
    for q, r in enumerate(rows):
        if r.ndim != 1:
            raise RankingError(f"ranking {q} is not 1-D (shape {r.shape})")
        r = _as_index_array(r, f"ranking {q}")
        if r.size:
            hi = int(r.max())
            if n_db is not None and hi >= n_db:
                raise RankingError(f"ranking {q} has an index outside [0, {n_db})")
            seen = np.zeros(hi + 1, dtype=bool)
            seen[r] = True
            if np.count_nonzero(seen) != r.size:
                raise RankingError(f"ranking {q} lists an image more than once")
        out.append(r)
    return out


@dataclass
class MapResult:
    """mAP over queries; queries without positives are skipped (AP NaN) and counted."""

    map: float
    aps: np.ndarray
    n_skipped: int
    ks: tuple[int, ...] = ()
    mp_at_k: dict = field(default_factory=dict)
    p_at_k: np.ndarray | None = None        # (n_queries, len(ks)), NaN for skipped queries


def compute_map(ranks, ground_truth, ks=()) -> MapResult:
    """mAP (and revisitop mP@k for each k in ks) of rankings against [(positives, junk)] per query."""
    rows = check_rankings(ranks, n_queries=len(ground_truth))
    ks = tuple(int(k) for k in ks)
    nq = len(rows)
    aps = np.full(nq, np.nan)
    prs = np.full((nq, len(ks)), np.nan)
    skipped = 0
    for q, (r, (pos, junk)) in enumerate(zip(rows, ground_truth)):
        pos = np.unique(_as_index_array(pos, "positives"))
        if pos.size == 0:
            skipped += 1
            continue
        junk = _as_index_array(junk, "junk")
        positions = _positions(r, pos, junk, _extent(r, pos, junk))
        aps[q] = ap_from_positions(positions, pos.size)
        for j, k in enumerate(ks):
            prs[q, j] = precision_at_k(positions, k)
    scored = nq - skipped
    mean = float(np.nanmean(aps)) if scored else float("nan")
    mpk = {k: (float(np.nanmean(prs[:, j])) if scored else float("nan")) for j, k in enumerate(ks)}
    return MapResult(map=mean, aps=aps, n_skipped=skipped, ks=ks, mp_at_k=mpk, p_at_k=prs)


def ns_scores(ranks, ground_truth, top: int = 4) -> np.ndarray:
    """Per query, the number of its positives among its first ``top`` results (UKBench N-S, top=4)."""
    rows = check_rankings(ranks, n_queries=len(ground_truth))
    return np.array([np.count_nonzero(np.isin(r[:top], _as_index_array(pos, "positives")))
                     for r, (pos, _) in zip(rows, ground_truth)], dtype=np.int64).reshape(-1)


# ---------------------------------------------------------------- evaluate


@dataclass
class ProtocolResult:
    map: float
    aps: np.ndarray
    n_skipped: int
    mp_at_k: dict


@dataclass
class EvaluationResult:
    """Result of :func:`evaluate`.

    ``map``, ``aps``, ``n_skipped``: the dataset's headline protocol (Medium for
    the revisited datasets; every protocol is in ``protocols``).  ``ns_score``
    is set for UKBench only (its ``map`` uses the 4 group images as positives).
    """

    dataset: str
    protocol: str
    map: float
    aps: np.ndarray
    n_queries: int
    n_skipped: int
    query_names: list
    protocols: dict = field(default_factory=dict)
    ns_score: float | None = None
    ns_per_query: np.ndarray | None = None

    def summary(self) -> str:
        pct = lambda v: "nan" if v is None or math.isnan(v) else f"{100 * v:.2f}"  # noqa: E731
        lines = [f"{self.dataset}: {self.n_queries} queries, {self.n_skipped} skipped (no positives)"]
        if self.protocols:
            for name, pr in self.protocols.items():
                mpk = "  ".join(f"mP@{k} {pct(v)}" for k, v in pr.mp_at_k.items())
                lines.append(f"  {name:<6} mAP {pct(pr.map)}  {mpk}".rstrip())
        else:
            lines.append(f"  mAP {pct(self.map)}")
        if self.ns_score is not None:
            lines.append(f"  N-S score {self.ns_score:.3f} / 4")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """Plain JSON-able dict (NaN APs become None)."""
        f = lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)  # noqa: E731
        out: dict[str, Any] = {"dataset": self.dataset, "protocol": self.protocol, "map": f(self.map),
               "n_queries": self.n_queries, "n_skipped": self.n_skipped,
               "aps": {n: f(a) for n, a in zip(self.query_names, self.aps.tolist())}}
        if self.protocols:
            out["protocols"] = {name: {"map": f(pr.map), "n_skipped": pr.n_skipped,
                                       "mp_at_k": {str(k): f(v) for k, v in pr.mp_at_k.items()},
                                       "aps": {n: f(a) for n, a in zip(self.query_names, pr.aps.tolist())}}
                                for name, pr in self.protocols.items()}
        if self.ns_score is not None:
            out["ns_score"] = float(self.ns_score)
        return out


def evaluate(ranks: ArrayLike | Sequence[ArrayLike], dataset: Dataset,
             ks: Sequence[int] = DEFAULT_KS) -> EvaluationResult:
    """Score rankings on a :class:`streamk.datasets.Dataset` with its official protocol.

    ranks: (n_queries, n_db) int array of database indices in ranked order, or
    a list of 1-D int arrays (shortlists allowed), one per query in
    ``dataset.queries`` order.  ks: the k of mP@k for the revisited datasets.
    """
    rows = check_rankings(ranks, n_queries=dataset.n_queries, n_db=dataset.n_images)
    names = dataset.query_names
    if dataset.protocol == "revisited":
        protocols = {}
        for name in dataset.protocols:
            res = compute_map(rows, dataset.ground_truth(name), ks=ks)
            protocols[name] = ProtocolResult(map=res.map, aps=res.aps, n_skipped=res.n_skipped, mp_at_k=res.mp_at_k)
        head = protocols["medium"]
        return EvaluationResult(dataset=dataset.name, protocol=dataset.protocol, map=head.map, aps=head.aps,
                                n_queries=dataset.n_queries, n_skipped=head.n_skipped, query_names=names,
                                protocols=protocols)
    gt = dataset.ground_truth()          # Holidays: the query is in junk (exclude_query)
    res = compute_map(rows, gt)
    result = EvaluationResult(dataset=dataset.name, protocol=dataset.protocol, map=res.map, aps=res.aps,
                              n_queries=dataset.n_queries, n_skipped=res.n_skipped, query_names=names)
    if dataset.protocol == "ukbench":
        per_query = ns_scores(rows, gt, top=4)
        result.ns_per_query = per_query
        result.ns_score = float(per_query.mean()) if per_query.size else float("nan")
    return result

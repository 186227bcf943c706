"""The second stage of a search, on the reading side: the first stage's top R verified
against the query's local geometry, verified images first by inliers, then the
query expanded with them and searched once more.

    first stage: top max(k, R) rows of the query vector q
    verify:      the R rows' geometry records (one read each, from ``geometry``) against
                 the query's record (streamk.verification: tentative matches + RANSAC)
    re-rank:     verified rows (inliers >= min_inliers) first, by inliers
    expand:      q' = normalise(q + sum of the first N verified rows' vectors) (AQE; or alpha-QE)
    again:       top k + V of q'; the result: the V verified rows, then the rows of the
                 second search that are not among them, k in all

Unverified images never enter the expansion (Chum et al. 2007: they would drift it). A
row without a geometry record (an image added as a vector or descriptors, or before the
index had local features) is never verified and keeps its first-stage order among the
unverified. Scores stay inner products: a verified row's is its first-stage score, a row
from the second search its score against the expanded query.
"""

import numpy as np

from ..errors import GeometryRecordError
from ..verification import DEFAULT_MAX_RECORD_FEATURES, expand_query, make_query_record, verify_geometry
from ..verification.spatial import DEFAULT_MIN_INLIERS
from .search_params import DEFAULT_EXPAND, DEFAULT_VERIFY, EXPANSIONS


class Hit(tuple):
    """One result: ``(id, score)`` as before (it unpacks and compares as that pair), and
    why it is there: ``inliers`` (None: not verified, e.g. no local geometry), ``verified``,
    ``region`` ((4, 2) polygon in the result image: the query box, or the whole query,
    mapped by the verified affine map; None without one), ``affine`` ((2, 3) query ->
    result), ``pairs`` ((n, 4) x_q, y_q, x_r, y_r inlier pairs, when asked for), ``stage``
    ("first", "verified" or "expanded")."""

    def __new__(cls, image_id, score, **explanation):
        hit = super().__new__(cls, (image_id, float(score)))
        hit.__dict__.update({"inliers": None, "verified": False, "region": None, "affine": None, "pairs": None,
                             "stage": "first"}, **explanation)
        return hit

    id = property(lambda self: self[0])
    score = property(lambda self: self[1])

    def to_dict(self, pairs=True):
        """JSON-able: id, score, stage, inliers, verified, region, affine (and pairs)."""
        out = {"id": self.id, "score": self.score, "stage": self.stage, "inliers": self.inliers,
               "verified": bool(self.verified),
               "region": None if self.region is None else np.round(self.region, 2).tolist(),
               "affine": None if self.affine is None or not np.isfinite(self.affine).all()
               else np.round(self.affine, 6).tolist()}
        if pairs and self.pairs is not None:
            out["pairs"] = np.round(self.pairs, 2).tolist()
        return out


def query_record(vocabulary, features):
    """The query's geometry record (every feature, multiple assignment), from the
    Features of the query (already cropped to its box)."""
    return make_query_record(vocabulary, features.keypoints, features.descriptors, features.image_size)


def records_of(store, txn, rows):
    """Deprecated in streamk 0.3 (removed after it): ``store.geometry_records(txn, rows)``."""
    import warnings
    warnings.warn("streamk.index.second_stage.records_of is deprecated and will be removed after streamk 0.3: "
                  "use Store.geometry_records(txn, rows)", DeprecationWarning, stacklevel=2)
    return store.geometry_records(txn, rows)


def damaged_records(store, rows, recs):
    """``store.damaged_geometry(rows, recs)`` (the storage owner's)."""
    return store.damaged_geometry(rows, recs)


def verify_top(view, txn, rows, scores, qrec, params, min_inliers=DEFAULT_MIN_INLIERS):
    """The first R (``params.verify_count()``) of the first stage's (rows, scores) verified
    against the query's record (the query's ``params.box`` mapped into each, the inlier
    pairs with ``params.pairs``): (verified rows by inliers, their scores, the rest of the
    first stage's rows and scores in order, explanations by row)."""
    verify_r, box, return_pairs = params.verify_count(), params.box, params.pairs
    rows = np.asarray(rows, np.int64)
    scores = np.asarray(scores, np.float32)
    keep = rows >= 0
    rows, scores = rows[keep], scores[keep]
    cand = rows[:verify_r]
    recs = view.store.geometry_records(txn, cand)
    have = [i for i, r in enumerate(recs) if r is not None]
    checks = {}
    if have:
        try:
            checked = verify_geometry(qrec, [recs[i] for i in have], query_box=box, return_pairs=return_pairs,
                             min_inliers=min_inliers)
        except GeometryRecordError as exc:  # a stored record that fails its checks: damage, named
            raise view.store.damaged_geometry([int(cand[i]) for i in have], [recs[i] for i in have]) from exc
        for i, v in zip(have, checked):
            checks[i] = v
    inliers = np.array([checks[i].inliers if i in checks else -1 for i in range(len(cand))], np.int64)
    verified = np.flatnonzero(inliers >= min_inliers)
    verified = verified[np.argsort(-inliers[verified], kind="stable")]
    explanations = {int(cand[i]): {"inliers": v.inliers, "verified": v.verified, "region": v.region,
                                   "affine": v.affine, "pairs": v.pairs,
                                   "stage": "verified" if v.verified else "first"} for i, v in checks.items()}
    rest = np.ones(len(rows), bool)
    rest[verified] = False
    return cand[verified], scores[:verify_r][verified], rows[rest], scores[rest], explanations


def merge_after(head_rows, head_scores, tail_rows, tail_scores, k):
    """The head (verified) rows, then the tail's rows that are not among them: k in all."""
    taken = set(np.asarray(head_rows).tolist())
    out_rows, out_scores = list(head_rows[:k]), list(head_scores[:k])
    for r, s in zip(np.asarray(tail_rows).tolist(), np.asarray(tail_scores).tolist()):
        if len(out_rows) >= k:
            break
        if r is None or (isinstance(r, (int, np.integer)) and r < 0) or r in taken:
            continue
        taken.add(r)
        out_rows.append(r)
        out_scores.append(s)
    return out_rows, out_scores


def second_stage(view, txn, q, rows, scores, qrec, params, mode="exact", allow=None, min_inliers=DEFAULT_MIN_INLIERS):
    """(rows, scores, explanations) of the final k results of one query; see the module doc.

    q: (D,) unit query vector; rows, scores: its first-stage top (at least min(R, N)),
    best first; qrec: the query's geometry record; params: the search's
    :class:`~streamk.index.SearchParams` (k, verify, expand, expansion, box, pairs, nprobe,
    rerank); mode: the first stage's mode ("exact" or "pq"); allow: the search filter's
    RowFilter (the expanded search keeps to it)."""
    k = params.k
    head_rows, head_scores, rest_rows, rest_scores, explanations = verify_top(
        view, txn, rows, scores, qrec, params, min_inliers)
    n_expand = min(params.expand_count(), len(head_rows))
    if n_expand:
        V = view.vectors_of(txn, head_rows[:n_expand])
        q2 = expand_query(q, V, method=params.expansion).astype(np.float32)[None, :]
        s2, r2 = view.search(txn, q2, k + len(head_rows), mode=mode, nprobe=params.nprobe, rerank=params.rerank,
                             allow=allow)
        out_rows, out_scores = merge_after(head_rows, head_scores, r2[0], s2[0], k)
        for r in out_rows[len(head_rows):]:
            explanations.setdefault(r, {})["stage"] = "expanded"
    else:  # no expansion: the first stage's order after the verified ones
        out_rows, out_scores = merge_after(head_rows, head_scores, rest_rows, rest_scores, k)
    return np.asarray(out_rows, np.int64), np.asarray(out_scores, np.float32), explanations


__all__ = ["DEFAULT_EXPAND", "DEFAULT_MAX_RECORD_FEATURES", "DEFAULT_VERIFY", "EXPANSIONS", "Hit",
           "damaged_records",
           "merge_after", "query_record", "records_of", "second_stage", "verify_top"]

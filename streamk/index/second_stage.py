"""The second stage of a search, on the reading side: the first stage's top R verified
against the query's local geometry, verified images first by inliers, then the
query expanded with them and searched once more.

    first stage: top max(k, R) rows of the query vector q
    verify:      the R rows' geometry records (one read each, from ``geometry``) against
                 the query's record (streamk.verification: tentative matches + RANSAC)
    re-rank:     verified rows (verification's decision) first, by inliers
    expand:      recursive AQE (the default): q' = normalise(q + sum of the first N verified
                 rows' vectors), searched; its new results in the top R verified (R / 10 in all)
                 and N more verified rows added a round (4 searches at most; on a sharded index
                 each row verified by its shard: verify_on_shard, vectors_on_shard); or AQE
                 (one such search) or alpha-QE
    again:       top k + V of q'; the result: the V verified rows, then the rows of the
                 second search that are not among them, k in all

Unverified images never enter the expansion (Chum et al. 2007: they would drift it). A
row without a geometry record (an image added as a vector or descriptors, or before the
index had local features) is never verified and keeps its first-stage order among the
unverified. Scores stay inner products: a verified row's is its first-stage score, a row
from the second search its score against the expanded query (each clipped to [-1, 1] as
its Hit is made, after every ranking: :func:`cosine_score`).
"""

import math
import warnings
from typing import NamedTuple

import numpy as np

from ..errors import ConfigError, DamagedRecordWarning, GeometryRecordError
from ..verification import DEFAULT_MAX_RECORD_FEATURES, expand_query, make_query_record, rerank, verify_geometry
from ..verification import DEFAULT_TOP, recursive_expansion
from ..verification import DEFAULT_MIN_INLIERS
from .integrity import advice
from .search_params import DEFAULT_EXPAND, DEFAULT_VERIFY, EXPANSIONS

DAMAGED = "damaged"  # the why of a candidate whose stored record fails its checks (WHY_NOT_VERIFIED)

# the recursive expansion's new verifications per query, at most, as a share of R: the
# second stage then verifies at most 1.1 R images, whatever its searches find. Chosen for
# the cost target (<= 30 ms per query at R = 100, one core; AQE's second stage 23.9 ms):
# in bench/second_stage.py's worst case (random rows: every expanded search brings new
# ones, 4 searches) a share of 0.1 cost 1.05-1.10x AQE, 0.2 1.16-1.22x, 0.25 1.25x, 1.0
# 1.74x (2026-11-26, 10k rows, load 8-12), leaving 0.1 the only one with a margin for load
# and machines
RECURSIVE_VERIFICATIONS = 0.1


def cosine_score(score):
    """A score as a result shows it: the cosine of the unit query and stored vectors, in
    [-1, 1]. Rounding takes an inner product a little past 1 (a vector stored as float16
    against itself: 1.0001) and PQ's approximate scores further (an image's code against
    its own vector: up to ~1.03); the ranking is made before, on the scores as computed
    (the scans and their merges never clip), and the result says the cosine it
    approximates. Every result of one query is a :class:`Hit`, which clips its score here."""
    return min(1.0, max(-1.0, float(score)))


def cosine_scores(scores):
    """:func:`cosine_score` of an array of scores (a batch search's (nq, k), a page's
    pairs), a new array; the -inf of an empty slot (past the number of images) kept."""
    out = np.minimum(scores, 1)
    np.maximum(out, -1, out=out, where=np.isfinite(out))
    return out


class Hit(tuple):
    """One result: ``(id, score)`` as before (it unpacks and compares as that pair), and
    why it is there: ``inliers`` (None: not verified, e.g. no local geometry), ``verified``,
    ``region`` ((4, 2) polygon in the result image: the query box, or the whole query,
    mapped by the verified affine map; None without one), ``affine`` ((2, 3) query ->
    result), ``pairs`` ((n, 4) x_q, y_q, x_r, y_r inlier pairs, when asked for), ``stage``
    ("first", "verified" or "expanded"), ``why`` (checked and not verified: a key of
    :data:`streamk.verification.WHY_NOT_VERIFIED`; else None) and ``log10_nfa`` (the
    inliers' log10 number of false alarms, the decision's statistic; None when no model
    was tested). The score is clipped to [-1, 1] (:func:`cosine_score`)."""

    # set on each instance by __new__; declared here for type checkers (no class attribute is made)
    inliers: int | None
    verified: bool
    region: np.ndarray | None
    affine: np.ndarray | None
    pairs: np.ndarray | None
    stage: str
    why: str | None
    log10_nfa: float | None

    def __new__(cls, image_id, score, **explanation):
        hit = super().__new__(cls, (image_id, cosine_score(score)))
        hit.__dict__.update({"inliers": None, "verified": False, "region": None, "affine": None, "pairs": None,
                             "stage": "first", "why": None, "log10_nfa": None}, **explanation)
        return hit

    id = property(lambda self: self[0])
    score = property(lambda self: self[1])

    def to_dict(self, pairs=True):
        """JSON-able: id, score, stage, inliers, verified, why, log10_nfa, region, affine (and pairs)."""
        out = {"id": self.id, "score": self.score, "stage": self.stage, "inliers": self.inliers,
               "verified": bool(self.verified), "why": self.why,
               "log10_nfa": None if self.log10_nfa is None else round(float(self.log10_nfa), 2),
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


class Candidate(NamedTuple):
    """One first-stage result on its way through the second stage: ``id`` (a row of one
    index, or an image id across shards), ``score`` (its inner product with the query),
    ``vector`` (its stored vector, for the expansion: read for the verified ones that
    may enter it, else None) and ``explanation`` (what verifying it found: {} when it
    was not verified; the fields of a :class:`Hit`)."""

    id: object
    score: float
    vector: object
    explanation: dict


def verify_candidates(view, txn, rows, scores, qrec, params, min_inliers=DEFAULT_MIN_INLIERS):
    """The first stage's (rows, scores) as [Candidate] in first-stage order, the first R
    (``params.verify_count()``) verified against the query's record ``qrec`` (the query's
    ``params.box`` mapped into each, the inlier pairs with ``params.pairs``); rows without
    a geometry record keep an empty explanation, rows whose record fails its checks (damage)
    the why "damaged" (every other one is verified; the search goes on). Vectors are not read here."""
    rows = np.asarray(rows, np.int64)
    scores = np.asarray(scores, np.float32)
    keep = rows >= 0
    rows, scores = rows[keep], scores[keep]
    cand = rows[:params.verify_count()]
    recs = view.store.geometry_records(txn, cand)
    have = [i for i, r in enumerate(recs) if r is not None]
    checks, damaged = {}, set()

    def verify(positions):
        return verify_geometry(qrec, [recs[i] for i in positions], query_box=params.box, return_pairs=params.pairs,
                               params=params.verification_params(), min_inliers=min_inliers)
    if have:
        try:
            checked = verify(have)
        except GeometryRecordError:  # some stored record is damaged: found alone (R checks), the rest verified
            damaged = {have[p] for p in view.store.failing_geometry([recs[i] for i in have])}
            if not damaged:  # the query's record, then: not the index's damage
                raise
            have = [i for i in have if i not in damaged]
            checked = verify(have) if have else []
        checks = dict(zip(have, checked))
    return [Candidate(r, sc, None, {"why": DAMAGED} if i in damaged else explanation_of(checks.get(i)))
            for i, (r, sc) in enumerate(zip(rows.tolist(), scores.tolist()))]


def damaged_ids(candidates):
    """The ids of ``candidates`` whose stored record was found damaged (why "damaged")."""
    return [c.id for c in candidates if c.explanation.get("why") == DAMAGED]


def warn_damaged(path, ids, left="left unverified in this search"):
    """The one warning of a search (or a copy pass) that met damaged records (the images
    ``ids``, ``left`` as it says) in the index at ``path``; nothing when ``ids`` is empty."""
    ids = list(dict.fromkeys(ids))
    if not ids:
        return
    shown = ", ".join(repr(i) for i in ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    warnings.warn(f"{path}: the local-geometry record of {'images' if len(ids) > 1 else 'image'} {shown} is "
                  f"damaged: {left}; {advice(path)}", DamagedRecordWarning, stacklevel=4)


def explanation_of(verification):
    """A candidate's explanation (the fields of a :class:`Hit`) from its
    :class:`~streamk.verification.Verification`; {} for None (not verified)."""
    v = verification
    if v is None:
        return {}
    shown = v.verified  # a region says "the query is here": only a verified map draws one (its doc)
    return {"inliers": v.inliers, "verified": v.verified, "region": v.region if shown else None,
            "affine": v.affine if shown else None, "pairs": v.pairs,
            "stage": "verified" if v.verified else "first", "why": v.why,
            "log10_nfa": float(v.log10_nfa) if math.isfinite(v.log10_nfa) else None}


def verified_first(candidates, min_inliers=DEFAULT_MIN_INLIERS):
    """(the verified candidates by inliers, the others in their order): ``candidates`` in
    first-stage order, a candidate verified when its explanation says so (verification's
    decision, which ``min_inliers`` only sets under the rule before 0.3;
    :func:`streamk.verification.rerank`: ties keep the first-stage order)."""
    inliers = np.array([c.explanation["inliers"] if c.explanation.get("verified") else -1
                        for c in candidates], np.int64)  # verified ones have >= 4 inliers
    order, n_verified = rerank(np.arange(len(candidates), dtype=np.int64), inliers, 1)
    return [candidates[i] for i in order[:n_verified]], [candidates[i] for i in order[n_verified:]]


def expanded_results(q, head, rest, params, search_again, again=None, centre=None):
    """The final k results of one query, [(id, score, explanation)], from its candidates
    split by :func:`verified_first`: the verified ``head`` (by inliers; the first
    ``params.expand_count()`` with their vectors) and the ``rest`` (first-stage order).

    The verified first; then, when some are averaged into an expanded query (AQE or
    alpha-QE, ``params.expansion``), the results of ``search_again(q2, n)`` -> [(id, score)]
    best first, else the rest; an id once only, k in all. Written once for one index (ids
    are rows) and for the shards of a sharded index (ids are image ids). The recursive
    expansion also verifies the results of its searches: ``again`` is
    (verify(ids, scores) -> [Candidate], vectors([Candidate]) -> (n, D)), each run where
    the records and vectors are (one index's read transaction; each id's shard). The
    centred recursion subtracts the mean of the rest of the collection: ``centre()`` ->
    (its mean vector (D,), its number of images), asked only then."""
    k = params.k
    n_expand = min(params.expand_count(), len(head))
    if n_expand and params.expansion in ("recursive", "recursive-centred"):
        if params.expansion == "recursive-centred" and centre is None:
            raise ConfigError("expansion='recursive-centred' subtracts the collection's mean vector: give centre")
        mean = centre() if params.expansion == "recursive-centred" else None
        head, tail = recursive_results(q, head, rest, params, search_again, again, mean)
    elif n_expand:
        V = np.stack([c.vector for c in head[:n_expand]])
        q2 = expand_query(q, V, method=params.expansion).astype(np.float32)[None, :]
        explained = {c.id: c.explanation for c in rest}
        tail = [Candidate(i, sc, None, {**explained.get(i, {}), "stage": "expanded"})
                for i, sc in search_again(q2, k + len(head))]
    else:  # no expansion: the first stage's order after the verified ones
        tail = rest
    taken = {c.id for c in head}
    out = list(head[:k])
    for c in tail:
        if len(out) >= k:
            break
        if c.id not in taken:
            taken.add(c.id)
            out.append(c)
    return [(c.id, c.score, c.explanation) for c in out]


def recursive_results(q, head, rest, params, search_again, again, centre=None):
    """(verified, tail) [Candidate] of the recursive expansion
    (:func:`streamk.verification.recursive_expansion`, step ``params.expand_count()``, 50
    averaged in all or one step's worth if more): the verified of the first stage and of
    its searches by inliers, and the last search's results; ``centre``: (the collection's
    mean vector, its number of images) for the centred recursion, or None.

    What the first stage verified is never verified again: the unverified of its top R,
    ``rest[:R - len(head)]`` in first-stage order (a sharded index, too, verifies the merged
    top R by id for it: ShardedIndex._verified_by_id)."""
    if again is None:
        raise ConfigError("expansion='recursive' verifies the results of its own searches: give "
                          "again=(verify, vectors)")
    verify, vectors = again
    R, known = params.verify_count(), {c.id: c for c in head}
    explained = {c.id: c.explanation for c in rest}
    scores = {}

    def search(q2):
        found = search_again(q2.astype(np.float32)[None, :], params.k + len(head) + R)
        scores.update(found)
        return found

    def verify_ids(ids):
        checked = verify(ids, [scores[i] for i in ids])
        known.update((c.id, c) for c in checked if c.explanation.get("verified"))
        explained.update((c.id, c.explanation) for c in checked)
        return [(c.explanation.get("inliers") or 0, bool(c.explanation.get("verified"))) for c in checked]

    checked = [c.id for c in rest[:max(0, R - len(head))]]  # the first stage's unverified top R
    top = max(DEFAULT_TOP, params.expand_count())  # a larger step: one round as AQE's
    rx = recursive_expansion(q, [(c.id, c.explanation["inliers"]) for c in head],
                             lambda ids: vectors([known[i] for i in ids]), search, verify_ids,
                             step=params.expand_count(), checked=checked, window=R,
                             max_verifications=recursive_budget(R), top=top, centre=centre)
    tail = [Candidate(i, sc, None, {**explained.get(i, {}), "stage": "expanded"}) for i, sc in rx.results]
    return [known[i] for i, _ in rx.verified], tail


def recursive_budget(R):
    """The recursive expansion's new verifications per query, at most, for R first-stage ones
    (:data:`RECURSIVE_VERIFICATIONS` of R, rounded up)."""
    return int(np.ceil(RECURSIVE_VERIFICATIONS * R))


def second_stage(view, txn, q, rows, scores, qrec, params, mode="exact", allow=None, min_inliers=DEFAULT_MIN_INLIERS,
                 damaged=None):
    """[(row, score, explanation)] of the final k results of one query; see the module doc.

    q: (D,) unit query vector; rows, scores: its first-stage top (at least min(R, N)),
    best first; qrec: the query's geometry record; params: the search's
    :class:`~streamk.index.SearchParams`; mode: the first stage's mode ("exact" or "pq");
    allow: the search filter's RowFilter (the expanded search keeps to it); damaged: a list
    that the rows whose record was found damaged are added to (for one warning, by id)."""
    damaged = [] if damaged is None else damaged
    first = verify_candidates(view, txn, rows, scores, qrec, params, min_inliers)
    damaged += damaged_ids(first)
    head, rest = verified_first(first, min_inliers)
    head = with_vectors(view, txn, head, params.expand_count())

    def search_again(q2, n):
        s2, r2 = view.search(txn, q2, n, mode=mode, nprobe=params.nprobe, rerank=params.rerank, allow=allow)
        return [(r, sc) for r, sc in zip(r2[0].tolist(), s2[0].tolist()) if r >= 0]

    def verify_again(ids, id_scores):  # the recursive expansion's new results (at most R of them)
        checked = verify_candidates(view, txn, ids, id_scores, qrec, params, min_inliers)
        damaged.extend(damaged_ids(checked))
        return checked

    def vectors_of(candidates):
        return stacked_vectors(candidates, lambda rows: view.vectors_of(txn, np.array(rows, np.int64)))
    return expanded_results(q, head, rest, params, search_again, again=(verify_again, vectors_of),
                            centre=lambda: collection_mean([view.mean_vector(txn)]))


def collection_mean(parts):
    """(mean (D,) float64, images) of a collection from its parts' [(sum of a sample of their
    vectors, its size, their images)] (:meth:`streamk.index.reader.SearchView.mean_vector`;
    one part per index or shard): each part's sample mean weighted by its images; (zeros, 0)
    when no part has a vector in its sample (nothing to subtract)."""
    sampled = [(s, c, i) for s, c, i in parts if c and i]
    images = sum(i for _, _, i in sampled)
    if not images:
        return np.zeros_like(parts[0][0]), 0
    return sum((i / images) * (s / c) for s, c, i in sampled), images


def stacked_vectors(candidates, read):
    """(n, D): the vectors of ``candidates``, those not carried yet (``vector`` None) read in
    one call ``read(ids)`` -> (m, D)."""
    unread = [c.id for c in candidates if c.vector is None]
    got = dict(zip(unread, read(unread))) if unread else {}
    return np.stack([got[c.id] if c.vector is None else c.vector for c in candidates])


def verify_on_shard(index, image_ids, scores, qrec, params):
    """A shard's side of a sharded index's second stage: its ``image_ids`` (of the merged
    first stage's top R, or new results of an expanded search, with their scores) verified
    against the query's record ``qrec`` in one read
    transaction of the shard's StreamingIndex ``index``, as :func:`verify_candidates` does
    on one index: [Candidate] in their order, ids as image ids, the verified ones with
    their stored vectors (what the expansion may average next; none with expand 0). An id removed since the
    search comes back unverified."""
    store, view = index.store, index.view
    with store.read(buffers=True) as txn:
        rows = _rows_of(store, txn, image_ids)
        found = iter(verify_candidates(view, txn, rows[rows >= 0], np.asarray(scores, np.float32)[rows >= 0], qrec,
                                       params))
        out = [next(found)._replace(id=i) if r >= 0 else Candidate(i, float(sc), None, {})
               for i, r, sc in zip(image_ids, rows.tolist(), np.asarray(scores, np.float32).tolist())]
        verified = [p for p, c in enumerate(out) if c.explanation.get("verified")]
        if verified and params.expand_count():  # expand 0: nothing is averaged
            V = view.vectors_of(txn, rows[verified])
            for p, v in zip(verified, V):
                out[p] = out[p]._replace(vector=v)
    return out


def vectors_on_shard(index, image_ids):
    """(n, D) float32: the stored vectors of a shard's ``image_ids`` (one read transaction);
    an image removed since it was verified gives zeros, so that it adds nothing to an
    expanded query."""
    store = index.store
    with store.read(buffers=True) as txn:
        rows = _rows_of(store, txn, image_ids)
        out = np.zeros((len(image_ids), index.dim), np.float32)
        if (rows >= 0).any():
            out[rows >= 0] = index.view.vectors_of(txn, rows[rows >= 0])
    return out


def _rows_of(store, txn, image_ids):
    """(n,) int64: the row of each image id as ``txn`` sees the store, -1 for an id not there
    (removed since the search that found it)."""
    records = [store.image(txn, i) for i in image_ids]
    return np.array([-1 if r is None else r.row for r in records], np.int64)


def with_vectors(view, txn, head, n):
    """``head`` with the stored vectors of its first ``n`` candidates (rows) read."""
    n = min(int(n), len(head))
    if not n:
        return head
    V = view.vectors_of(txn, np.array([c.id for c in head[:n]], np.int64))
    return [c._replace(vector=v) for c, v in zip(head[:n], V)] + head[n:]


__all__ = ["DAMAGED", "DEFAULT_EXPAND", "DEFAULT_MAX_RECORD_FEATURES", "DEFAULT_VERIFY", "EXPANSIONS", "Candidate",
           "Hit", "RECURSIVE_VERIFICATIONS", "collection_mean", "damaged_ids", "damaged_records", "expanded_results",
           "explanation_of",
           "query_record", "records_of", "recursive_budget", "recursive_results", "second_stage",
           "stacked_vectors", "vectors_on_shard", "verified_first", "verify_candidates", "verify_on_shard",
           "warn_damaged", "with_vectors"]

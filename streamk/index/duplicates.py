"""Near-duplicates: images that are the same photo re-encoded, resized or cropped a little.

Two images are near-duplicates when the inner product of their unit vectors is at
least a threshold (``DEFAULT_DUPLICATE_THRESHOLD``, measured by ``bench/duplicates.py`` on
the demo's photo changes with T-emb k = 16: see bench/README.md), and, when asked
(``verify=True``), when the second stage confirms the pair: RANSAC finds at least
``min_inliers`` inliers between their local-geometry records.

- One image (:func:`duplicates_of`): a range search, the first-stage top
  ``max_results + 1`` of its own vector kept down to the threshold (bounded: at most
  ``max_results`` come back, MAX_DUPLICATES by default).
- The whole index (:func:`duplicate_groups`; a sharded one: :func:`sharded_duplicate_groups`):
  every image's top ``neighbours`` (batches of ``batch_size`` vectors read block by block
  from the map, or page by page where each shard lives, searched as a batch), the pairs
  at or above the threshold, then the connected components of those pairs
  (scipy.sparse.csgraph): a group holds images linked by a chain of near-duplicate pairs.
  N searches in all: with a PQ / IVF codec this is what a few thousand queries cost per
  second; an exact index compares every pair (N^2 D), fine up to some 10^4 images.
- Ingestion (:func:`nearest_of_vectors`): each new image's nearest stored image, for
  ``streamk ingest --on-duplicate skip|keep|report``.
"""

import sys

import numpy as np

from ..errors import ConfigError
from ..verification import verify_geometry as verify_records
from ..verification import DEFAULT_MIN_INLIERS
from .queries import MAX_BATCH
from .search_params import check_count
from .second_stage import Hit

# Measured by bench/duplicates.py (T-emb k = 16, GMP, the demo's extractor; 80 Paris photos,
# the encoder learned on 60 others): a photo's copies re-encoded (JPEG q = 12, q = 50), resized
# to 50 % or cropped to 90 % of the area score >= 0.596 with it (medians 0.74-0.91); different photos at most
# 0.377 (another photo of the same landmark; 0.234 for different landmarks) and a copy's most
# similar other photo 0.399. The threshold sits in the middle of that gap, [0.40, 0.60].
DEFAULT_DUPLICATE_THRESHOLD = 0.5
MAX_DUPLICATES = 100  # near-duplicates returned for one image, at most
DEFAULT_NEIGHBOURS = 10  # neighbours of each image looked at when grouping the whole index
MAX_NEIGHBOURS = 1000
DUPLICATE_POLICIES = ("keep", "skip", "report")


def check_threshold(threshold):
    try:
        t = float(threshold)
    except (TypeError, ValueError):
        raise ConfigError(f"threshold must be a number in (0, 1], got {threshold!r}") from None
    if isinstance(threshold, bool) or not 0.0 < t <= 1.0:
        raise ConfigError(f"threshold must be a number in (0, 1] (an inner product of unit vectors), "
                          f"got {threshold!r}")
    return t


def _verified(txn, store, row, cand_rows, min_inliers):
    """Inliers of each candidate row against ``row``'s record (-1: a record is missing)."""
    recs = store.geometry_records(txn, [row] + list(cand_rows))
    out = np.full(len(cand_rows), -1, np.int64)
    have = [i for i, r in enumerate(recs[1:]) if r is not None]
    if recs[0] is None or not have:
        return out
    for i, v in zip(have, verify_records(recs[0], [recs[1:][i] for i in have], min_inliers=min_inliers)):
        out[i] = v.inliers
    return out


def _need_geometry(index):
    if not index.has_local_features:
        raise ConfigError("verify=True needs the second stage: this index keeps no local geometry "
                          "(give it some with `streamk index add-local-features`)")


def duplicates_of(index, image_id, threshold=DEFAULT_DUPLICATE_THRESHOLD, verify=False,
                  max_results=MAX_DUPLICATES, mode=None, min_inliers=DEFAULT_MIN_INLIERS):
    """The near-duplicates of one stored image: [Hit] (score >= threshold, best first,
    at most ``max_results``; with ``verify``, only the pairs the second stage confirms,
    each Hit carrying its ``inliers``)."""
    threshold = check_threshold(threshold)
    max_results = check_count("max_results", max_results, 1, MAX_DUPLICATES * 10)
    if verify:
        _need_geometry(index)
    store = index.store
    with store.read(buffers=True) as txn:
        row = store.require_image(txn, image_id).row
        view = index.view
        view.refresh(txn)
        q = view.vectors_of(txn, [row])
        if mode is None:
            mode = "pq" if view.lists is not None else "exact"
        scores, rows = view.search(txn, q, max_results + 1, mode=mode)
        keep = (rows[0] >= 0) & (rows[0] != row) & (scores[0] >= threshold)
        rows, scores = rows[0][keep][:max_results], scores[0][keep][:max_results]
        inliers = _verified(txn, store, row, rows, min_inliers) if verify and len(rows) else None
        if inliers is not None:
            ok = inliers >= min_inliers
            rows, scores, inliers = rows[ok], scores[ok], inliers[ok]
        ids = view.ids_of(txn, rows)
    if inliers is None:
        return [Hit(i, s) for i, s in zip(ids, scores)]
    return [Hit(i, s, inliers=int(n), verified=True, stage="verified") for i, s, n in zip(ids, scores, inliers)]


def duplicate_groups(index, threshold=DEFAULT_DUPLICATE_THRESHOLD, verify=False, neighbours=DEFAULT_NEIGHBOURS,
                     batch_size=256, mode=None, progress=None, min_inliers=DEFAULT_MIN_INLIERS):
    """Groups of near-duplicates in the whole index: [{"ids": [...], "pairs": [[id_a, id_b,
    score, inliers or None], ...]}], largest group first (ids in the order they were added).
    See the module doc for the cost."""
    from tqdm.auto import tqdm

    threshold = check_threshold(threshold)
    neighbours = check_count("neighbours", neighbours, 1, MAX_NEIGHBOURS)
    batch_size = check_count("batch_size", batch_size, 1, MAX_BATCH)
    if verify:
        _need_geometry(index)
    store = index.store
    view = index.view
    pa, pb, ps = [], [], []
    bar = tqdm(total=len(index), desc="duplicates", unit="img", file=sys.stderr, dynamic_ncols=True,
               disable=True if progress is False else (None if progress is None else False))
    try:
        with store.read(buffers=True) as txn:
            view.refresh(txn)
            if mode is None:
                mode = "pq" if view.lists is not None else "exact"
            next_row = store.get_int(b"next_row", txn)
            dead = view.dead

            def live(rows):
                ok = rows < next_row
                inside = rows < dead.shape[0]
                ok[inside] &= dead[rows[inside]] == 0
                return ok
            for rows, V in view.vectors.scan(txn, live=live):
                for lo in range(0, len(rows), batch_size):
                    r, Q = rows[lo:lo + batch_size], np.ascontiguousarray(V[lo:lo + batch_size])
                    scores, cand = view.search(txn, Q, neighbours + 1, mode=mode)
                    for part, x in zip((pa, pb, ps), _page_pairs(r, cand, scores, cand >= 0, threshold)):
                        part.append(x)
                    bar.update(len(r))
            a, b, s = _unique_pairs(pa, pb, ps)
            if not len(a):
                return []
            inl = None
            if verify:
                inl = np.full(len(a), -1, np.int64)
                starts = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
                for lo, hi in zip(starts, np.r_[starts[1:], len(a)]):  # one call per image with pairs
                    inl[lo:hi] = _verified(txn, store, int(a[lo]), b[lo:hi], min_inliers)
                ok = inl >= min_inliers
                a, b, s, inl = a[ok], b[ok], s[ok], inl[ok]
                if not len(a):
                    return []
            nodes = np.unique(np.concatenate([a, b]))
            ids = view.ids_of(txn, nodes)
    finally:
        bar.close()
    return _groups(a, b, s, inl, nodes, ids)


def _page_pairs(queries, cand, scores, found, threshold):
    """(smaller, larger, score) of the pairs (query, neighbour) of one searched page: each
    found neighbour other than the query itself, at or above the threshold."""
    hit = found & (cand != queries[:, None]) & (scores >= threshold)
    a, b = np.broadcast_to(queries[:, None], cand.shape)[hit], cand[hit]
    return np.where(a < b, a, b), np.where(a < b, b, a), scores[hit]


def _unique_pairs(pa, pb, ps):
    """Concatenated pair arrays (a < b), each pair once (found from both ends: its higher score kept)."""
    a = np.concatenate(pa) if pa else np.zeros(0, np.int64)
    b = np.concatenate(pb) if pb else np.zeros(0, np.int64)
    s = np.concatenate(ps) if ps else np.zeros(0, np.float32)
    order = np.lexsort((-s, b, a))
    a, b, s = a[order], b[order], s[order]
    first = np.ones(len(a), bool)
    first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return a[first], b[first], s[first]


def _groups(a, b, s, inl, nodes, ids):
    """The connected components of the pairs (a[i], b[i]) over ``nodes`` (sorted, each
    named by ``ids``), as groups of ids with their pairs, largest first."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    ia, ib = np.searchsorted(nodes, a), np.searchsorted(nodes, b)
    graph = coo_matrix((np.ones(len(a)), (ia, ib)), shape=(len(nodes), len(nodes)))
    _, label = connected_components(graph, directed=False)
    groups = {}
    for n, lab in enumerate(label.tolist()):
        groups.setdefault(lab, {"ids": [], "pairs": []})["ids"].append(ids[n])
    for p in range(len(a)):
        groups[int(label[ia[p]])]["pairs"].append(
            [ids[ia[p]], ids[ib[p]], float(s[p]), None if inl is None else int(inl[p])])
    return sorted(groups.values(), key=lambda g: -len(g["ids"]))


def sharded_duplicate_groups(index, threshold=DEFAULT_DUPLICATE_THRESHOLD, neighbours=DEFAULT_NEIGHBOURS,
                             batch_size=256, progress=None):
    """The groups of near-duplicates of a ShardedIndex, from the vectors: each shard's
    images read page by page (``batch_size``, :meth:`StreamingIndex.vectors_page`, where
    the shard lives), each page searched as a batch on every shard for its top
    ``neighbours``; then the same pairs and groups as :func:`duplicate_groups` (ids in a
    group sorted)."""
    from tqdm.auto import tqdm

    threshold = check_threshold(threshold)
    neighbours = check_count("neighbours", neighbours, 1, MAX_NEIGHBOURS)
    batch_size = check_count("batch_size", batch_size, 1, MAX_BATCH)
    pa, pb, ps = [], [], []
    bar = tqdm(total=len(index), desc="duplicates", unit="img", file=sys.stderr, dynamic_ncols=True,
               disable=True if progress is False else (None if progress is None else False))
    try:
        after = None
        while True:  # every shard's images in turn, page by page (Index.vectors_page's cursor)
            page, Q, after = index.vectors_page(after, batch_size)
            if not page:
                break
            scores, cand = index.search(Q, k=neighbours + 1, verify=0, expand=0)
            found = cand != None  # noqa: E711 (elementwise: ids, None where a shard had fewer)
            for part, x in zip((pa, pb, ps), _page_pairs(np.asarray(page, object), cand, scores, found, threshold)):
                part.append(x)
            bar.update(len(page))
    finally:
        bar.close()
    if not any(len(x) for x in pa):
        return []
    names, codes = np.unique(np.concatenate(pa + pb), return_inverse=True)  # ids -> integers
    n = sum(len(x) for x in pa)
    a, b, s = _unique_pairs([codes[:n]], [codes[n:]], ps)
    return _groups(a, b, s, None, np.arange(len(names)), names.tolist())


def nearest_of_vectors(index, V, threshold=DEFAULT_DUPLICATE_THRESHOLD):
    """For each unit vector of V (n, D): (id, score) of its nearest stored image when the
    score is >= threshold, else None (one batch search; StreamingIndex or ShardedIndex)."""
    threshold = check_threshold(threshold)
    out = [None] * len(V)
    if not len(V) or not len(index):
        return out
    for lo in range(0, len(V), MAX_BATCH):
        scores, ids = index.search(np.asarray(V[lo:lo + MAX_BATCH], np.float32), k=1, verify=0, expand=0)
        for i in range(scores.shape[0]):
            if ids[i, 0] is not None and scores[i, 0] >= threshold:
                out[lo + i] = (ids[i, 0], float(scores[i, 0]))
    return out


__all__ = ["DEFAULT_DUPLICATE_THRESHOLD", "DEFAULT_NEIGHBOURS", "DUPLICATE_POLICIES", "MAX_DUPLICATES",
           "check_threshold", "duplicate_groups", "duplicates_of", "nearest_of_vectors", "sharded_duplicate_groups"]

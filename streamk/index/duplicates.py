"""Near-duplicates: images that are the same photo re-encoded, resized or cropped a little.

Two rules, one entry point (:meth:`streamk.index.Index.duplicates`, written once in
``streamk/index/base.py`` for the single and the sharded index):

- By vector similarity (``verify=False``): the inner product of their unit vectors is at
  least a threshold (``DEFAULT_DUPLICATE_THRESHOLD``, measured by ``bench/duplicates.py`` on
  the demo's photo changes with T-emb k = 16: see bench/README.md). Such a group may hold
  other photos of the same scene.
- By the copy classes (``verify=True``, deprecated in 0.3 for :func:`copy_report` /
  :func:`copies_of`, which say each pair's class): the pairs classed exact or copy below.
  Until 0.3 ``verify=True`` kept the pairs with >= 12 RANSAC inliers, which grouped
  different photos of one scene (two Invalides photos share 204 inliers, a copy 63).

The vector rule:

- One image (:func:`duplicates_of`; any index: :func:`vector_duplicates_of`): a range
  search, the first-stage top ``max_results + 1`` of its own vector kept down to the
  threshold (bounded: at most ``max_results`` come back, MAX_DUPLICATES by default).
- The whole index (:func:`duplicate_groups`; any index, e.g. a sharded one:
  :func:`vector_duplicate_groups`): every image's top ``neighbours`` (batches of
  ``batch_size`` vectors read block by block from the map, or page by page where each
  shard lives, searched as a batch), the pairs at or above the threshold, then the
  connected components of those pairs (scipy.sparse.csgraph): a group holds images linked
  by a chain of near-duplicate pairs. N searches in all: with a PQ / IVF codec this is
  what a few thousand queries cost per second; an exact index compares every pair
  (N^2 D), fine up to some 10^4 images.
- Ingestion (:func:`nearest_of_vectors`): each new image's nearest stored image, for
  ``streamk ingest --on-duplicate skip|keep|report``.

Copies (``streamk duplicates``; :func:`copy_report`, :func:`copies_of`, :func:`copies_of_new`
for ingestion; any :class:`~streamk.index.Index`, single or sharded, through its interface):
the vector only proposes (each image's DEFAULT_COPY_NEIGHBOURS nearest, whatever their score,
searched page by page with :meth:`Index.vectors_page` and :meth:`Index.search`); each candidate
is verified by the second stage (the geometry records of GEOMETRY_BATCH images and of their
candidates read in one :meth:`Index.geometries` call: one read per shard that holds some) and
each verified pair classed exact / copy / same scene by
:func:`streamk.verification.classify_pair` (one similarity, precise inliers over most of the
smaller image, the aligned pixels agree). A pair is verified from the image whose id sorts
first, whichever shard holds each. Pixels: the stored thumbnail, else the source file when
it still holds the indexed content. Groups are made of exact and copy pairs only.
Quarter-turned and mirrored copies need the turned / mirrored query (``rotations``,
``mirrored``): the source file described again, 3 times / once per image.
"""

import sys
import warnings
from dataclasses import dataclass, replace

import numpy as np

from ..errors import ConfigError, IndexCorruptError
from ..features import MAX_FILE_SIZE
from .queries import MAX_BATCH
from .search_params import check_count
from .second_stage import Hit, cosine_scores, warn_damaged
from .store import DAMAGED_RECORD

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


def _need_geometry(index):
    if index.vocabulary is None:
        how = ("create it with local features (`streamk index create --shards N` without --no-local-features)"
               if hasattr(index, "shards") else "give it some with `streamk index add-local-features`")
        raise ConfigError(f"verify=True needs the second stage: this index keeps no local geometry ({how})")


def _progress_bar(total, desc, progress):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="img", file=sys.stderr, dynamic_ncols=True,
                disable=True if progress is False else (None if progress is None else False))


def duplicates_of(index, image_id, threshold=DEFAULT_DUPLICATE_THRESHOLD, max_results=MAX_DUPLICATES, mode=None):
    """The near-duplicates of one image stored in a StreamingIndex, by vector similarity:
    [Hit] (score >= threshold, best first, at most ``max_results``), in one read transaction."""
    threshold = check_threshold(threshold)
    max_results = check_count("max_results", max_results, 1, MAX_DUPLICATES * 10)
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
        ids = view.ids_of(txn, rows)
    return [Hit(i, s) for i, s in zip(ids, scores)]


def vector_duplicates_of(index, image_id, threshold=DEFAULT_DUPLICATE_THRESHOLD, max_results=MAX_DUPLICATES):
    """The near-duplicates of one image of any :class:`~streamk.index.Index` (a sharded one:
    its vector searched on every shard), by vector similarity: [Hit], as :func:`duplicates_of`."""
    from .queries import MAX_K

    threshold = check_threshold(threshold)
    max_results = check_count("max_results", max_results, 1, MAX_DUPLICATES * 10)
    image_id = index.stored_id(image_id)  # (given in either Unicode normal form): itself left out below
    hits = index.search(index.vector(image_id), k=min(max_results + 1, MAX_K), verify=0, expand=0)
    return [h for h in hits if h.id != image_id and h.score >= threshold][:max_results]


def duplicate_groups(index, threshold=DEFAULT_DUPLICATE_THRESHOLD, neighbours=DEFAULT_NEIGHBOURS,
                     batch_size=256, mode=None, progress=None):
    """Groups of near-duplicates in the whole of a StreamingIndex, by vector similarity:
    [{"ids": [...], "pairs": [[id_a, id_b, score, None], ...]}], largest group first (ids in
    the order they were added). See the module doc for the cost."""
    threshold = check_threshold(threshold)
    neighbours = check_count("neighbours", neighbours, 1, MAX_NEIGHBOURS)
    batch_size = check_count("batch_size", batch_size, 1, MAX_BATCH)
    store = index.store
    view = index.view
    bar = _progress_bar(len(index), "duplicates", progress)
    try:
        with store.read(buffers=True) as txn:
            view.refresh(txn)
            if mode is None:
                mode = "pq" if view.lists is not None else "exact"
            a, b, s = _scan_pairs(txn, store, view, threshold, neighbours, batch_size, mode, bar)
            if not len(a):
                return []
            nodes = np.unique(np.concatenate([a, b]))
            ids = view.ids_of(txn, nodes)
    finally:
        bar.close()
    return _groups(a, b, s, None, nodes, ids)


def _scan_pairs(txn, store, view, threshold, neighbours, batch_size, mode, bar):
    """(a, b, score) row pairs (a < b, each once) of every live image with its top
    ``neighbours`` at or above ``threshold``: the vector blocks read in order, searched in
    batches of ``batch_size``."""
    next_row = store.get_int(b"next_row", txn)
    dead = view.dead
    pa, pb, ps = [], [], []

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
    return _unique_pairs(pa, pb, ps)


def _page_pairs(queries, cand, scores, found, threshold):
    """(smaller, larger, score) of the pairs (query, neighbour) of one searched page: each
    found neighbour other than the query itself, at or above the threshold."""
    hit = found & (cand != queries[:, None]) & (scores >= threshold)
    a, b = np.broadcast_to(queries[:, None], cand.shape)[hit], cand[hit]
    return np.where(a < b, a, b), np.where(a < b, b, a), cosine_scores(scores[hit])  # as a Hit's, in [-1, 1]


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


def _component_labels(n, ia, ib):
    """The connected component of each of ``n`` nodes linked by the edges (ia[k], ib[k])
    (scipy.sparse.csgraph), as labels (n,)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(ia)), (ia, ib)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def _groups(a, b, s, inl, nodes, ids):
    """The connected components of the pairs (a[i], b[i]) over ``nodes`` (sorted, each
    named by ``ids``), as groups of ids with their pairs, largest first."""
    ia, ib = np.searchsorted(nodes, a), np.searchsorted(nodes, b)
    label = _component_labels(len(nodes), ia, ib)
    groups = {}
    for n, lab in enumerate(label.tolist()):
        groups.setdefault(lab, {"ids": [], "pairs": []})["ids"].append(ids[n])
    for p in range(len(a)):
        groups[int(label[ia[p]])]["pairs"].append(
            [ids[ia[p]], ids[ib[p]], float(s[p]), None if inl is None else int(inl[p])])
    return sorted(groups.values(), key=lambda g: -len(g["ids"]))


def neighbour_pairs(index, neighbours, batch_size=256, threshold=-np.inf, bar=None):
    """(a, b, score) of each image of any :class:`~streamk.index.Index` with its top
    ``neighbours`` at or above ``threshold``: id arrays (object) with a < b, each pair once
    (its higher score kept), sorted by a then b. Each shard's images read page by page
    (``batch_size``, :meth:`Index.vectors_page`, where the shard lives), each page searched
    as a batch (on every shard)."""
    pa, pb, ps = [], [], []
    after = None
    while True:  # every shard's images in turn, page by page (Index.vectors_page's cursor)
        page, Q, after = index.vectors_page(after, batch_size)
        if not page:
            break
        scores, cand = index.search(Q, k=neighbours + 1, verify=0, expand=0)
        found = cand != None  # elementwise: ids, None where a shard had fewer
        for part, x in zip((pa, pb, ps), _page_pairs(np.asarray(page, object), cand, scores, found, threshold)):
            part.append(x)
        if bar is not None:
            bar.update(len(page))
    if not any(len(x) for x in pa):
        return np.zeros(0, object), np.zeros(0, object), np.zeros(0, np.float32)
    names, codes = np.unique(np.concatenate(pa + pb).astype(str), return_inverse=True)  # ids -> integers
    n = sum(len(x) for x in pa)
    a, b, s = _unique_pairs([codes[:n]], [codes[n:]], ps)  # the codes sort as the ids do
    names = names.astype(object)
    return names[a], names[b], s


def vector_duplicate_groups(index, threshold=DEFAULT_DUPLICATE_THRESHOLD, neighbours=DEFAULT_NEIGHBOURS,
                             batch_size=256, progress=None):
    """The groups of near-duplicates of any :class:`~streamk.index.Index` (a ShardedIndex's),
    from the vectors (:func:`neighbour_pairs`); the same pairs and groups as
    :func:`duplicate_groups` (ids in a group sorted)."""
    threshold = check_threshold(threshold)
    neighbours = check_count("neighbours", neighbours, 1, MAX_NEIGHBOURS)
    batch_size = check_count("batch_size", batch_size, 1, MAX_BATCH)
    bar = _progress_bar(len(index), "duplicates", progress)
    try:
        a, b, s = neighbour_pairs(index, neighbours, batch_size, threshold, bar)
    finally:
        bar.close()
    if not len(a):
        return []
    names, codes = np.unique(np.concatenate([a, b]).astype(str), return_inverse=True)
    return _groups(codes[:len(a)], codes[len(a):], s, None, np.arange(len(names)), names.tolist())


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


# ------------------------------------------------------------------ copies: exact | copy | same scene
# The vector only proposes: each image's DEFAULT_COPY_NEIGHBOURS nearest, whatever their score.
# A copy's vector can fall far from its original's (0.29 after JPEG q30 + a 60 % resize,
# against 0.5 before), but it stays among its nearest: the nearest in every case seen; 10
# leave room for an image with several copies and photos of the same place between them.
# Each candidate costs one verification (about a millisecond) and, when verified with a
# copy's geometry, one pixel check: bench/copy_detection.py measures the pass.
DEFAULT_COPY_NEIGHBOURS = 10
PIXEL_CACHE = 256  # decoded images kept during a pass (an image's pixels are read once per group of pairs);
# at 1,024 x 768 8-bit each, at most ~200 MB


@dataclass(frozen=True)
class DuplicatePair:
    """One pair of a duplicates report: ``a``, ``b`` (ids), the class (exact / copy / same
    scene), the vector ``score``, the similarity's ``inliers``, the ``covered`` fraction, the
    pixels' ``agreement`` (None: not compared), ``turns`` (quarter turns of a's query
    counter-clockwise, 0 unless the turned queries found it) and a ``reason``."""

    a: str
    b: str
    kind: str
    score: float
    inliers: int
    covered: float
    agreement: float | None
    turns: int
    reason: str
    mirrored: bool = False

    def to_dict(self):
        return {"a": self.a, "b": self.b, "class": self.kind, "score": round(float(self.score), 4),
                "inliers": int(self.inliers), "covered": round(float(self.covered), 4),
                "agreement": None if self.agreement is None else round(float(self.agreement), 4),
                "turns": int(self.turns), "mirrored": bool(self.mirrored), "reason": self.reason}


class _Pixels:
    """8-bit grey pixels (a source file at up to 1,024 px a side, for the detail-band test; a
    stored thumbnail at its 256 px) and sha256 of stored images: the stored thumbnail,
    else the source file when it still holds the indexed content (same sha256); None when
    neither is at hand. The pixels are read and decoded on first use only. Bounded cache."""

    def __init__(self, index, source_filter=None):
        self.index = index
        extractor = index.extractor()
        self.orient = extractor.orients  # pixels in the frame the features see (EXIF turn)
        self.extraction_side = extractor.max_side  # the unit of the copy check's precise inliers
        self.cache = {}  # image id -> [its record, its grey pixels or _UNREAD]
        self.source_filter = source_filter  # path -> the path to read, or None (the server's collection rule)

    def record(self, image_id):
        from .store import ImageRecord

        raw = self.index.records([image_id])[0]
        return None if raw is None else ImageRecord.from_json(raw, self.index.path, image_id)

    def source_bytes(self, rec):
        import hashlib

        from ..errors import ImageReadError
        from ..features import read_image_bytes

        if rec is None or not rec.source or rec.box is not None:
            return None
        path = rec.source if self.source_filter is None else self.source_filter(rec.source)
        if path is None:
            return None
        try:
            data = read_image_bytes(path)
        except ImageReadError:
            return None
        return data if not rec.sha256 or hashlib.sha256(data).hexdigest() == rec.sha256 else None

    def _entry(self, image_id):
        if image_id not in self.cache:
            if len(self.cache) >= PIXEL_CACHE:
                self.cache.pop(next(iter(self.cache)))
            self.cache[image_id] = [self.record(image_id), _UNREAD]
        return self.cache[image_id]

    def gray(self, image_id, source=None):
        """Its grey pixels or None (``source``: its source file's bytes when already in hand)."""
        entry = self._entry(image_id)
        if entry[1] is _UNREAD:
            data = self.index.thumbnail(image_id) or (self.source_bytes(entry[0]) if source is None else source)
            entry[1] = _decoded(data, image_id, self.orient)
        return entry[1]

    def get(self, image_id):
        """(zero-argument callable: its grey array or None, read on the first call; sha256 or None)."""
        rec = self._entry(image_id)[0]
        return (lambda: self.gray(image_id)), (None if rec is None else rec.sha256)


_UNREAD = object()


def _decoded(data, name, orient):
    """Grey pixels for the copy check of an image's bytes, or None (no bytes, not decodable);
    ``orient``: turned for its EXIF orientation (the index's extractor's ``orients``)."""
    from ..errors import ImageReadError
    from ..verification import decode_for_copies

    try:
        return None if data is None else decode_for_copies(data, name, orient=orient)
    except ImageReadError:
        return None


def _file_pixels(path, name, max_file_size, orient):
    """A zero-argument callable: the grey pixels of the file at ``path`` (None: no path, gone
    or unreadable since), read and decoded on the first call only (turned for its EXIF
    orientation with ``orient``)."""
    from ..errors import ImageReadError
    from ..features import read_image_bytes

    memo = []

    def pixels():
        if not memo:
            try:
                data = None if path is None else read_image_bytes(path, max_file_size)
            except ImageReadError:
                data = None
            memo.append(_decoded(data, name, orient))
        return memo[0]
    return pixels


def _classify_candidates(pixels, image_id, qrec, cand_ids, cand_recs, scores, params, turns=0, qgray=None,
                         qsha=None):
    """[DuplicatePair] of one image (its record ``qrec``, stored or turned) against its
    candidates' stored records (None: the candidate has none): verified ones only. qgray,
    qsha: the query's pixels (an array, a zero-argument callable or None) and sha256, when
    not the stored image's."""
    from ..verification import classify_pair, unpack, verify_geometry

    have = [i for i, r in enumerate(cand_recs) if r is not None]
    if not have:
        return []
    checks = verify_geometry(qrec, [cand_recs[i] for i in have], return_pairs=True)
    rec_a = unpack(qrec) if isinstance(qrec, (bytes, bytearray, memoryview)) else qrec
    out = []
    for i, v in zip(have, checks):
        if not v.verified:
            continue
        gray_a, sha_a = (qgray, qsha) if qgray is not None or qsha is not None else pixels.get(image_id)
        gray_b, sha_b = pixels.get(cand_ids[i])
        c = classify_pair(rec_a, unpack(cand_recs[i]), v.pairs, True, gray_a, gray_b, sha_a, sha_b, params,
                          extraction_side=pixels.extraction_side)
        out.append(DuplicatePair(image_id, cand_ids[i], c.kind, float(scores[i]), c.inliers, c.covered,
                                 c.agreement, turns, c.reason))
    return out


def _turned_queries(index, image_id, pixels, views):
    """[(turns, mirrored, query record, unit vector, grey pixels)] of an image's ``views``
    ((quarter turns counter-clockwise, mirrored left-right first)): its source file decoded,
    turned, described as a query (features, vector, multiple-assignment record); [] when
    the source is not at hand."""
    from ..features import decode_gray_scaled
    from ..verification import make_query_record

    data = pixels.source_bytes(pixels._entry(image_id)[0])
    if data is None:
        return []
    ex = index.extractor()
    small, _ = decode_gray_scaled(data, image_id, ex.max_side, orient=ex.orients)
    gray = pixels.gray(image_id, data)
    out = []
    for turns, mirrored in views:
        def view(a, turns=turns, mirrored=mirrored):
            return np.ascontiguousarray(np.rot90(a[:, ::-1] if mirrored else a, turns))
        f = ex.extract_array(view(small))
        if not len(f.descriptors):
            continue
        q = index.query_vector(f.descriptors.astype(np.float32))
        rec = make_query_record(index.vocabulary, f.keypoints, f.descriptors, f.image_size)
        out.append((turns, mirrored, rec, q, None if gray is None else view(gray)))
    return out


def _views(rotations, mirrored):
    """The extra query views: quarter turns, the mirror image."""
    return ([(t, False) for t in (1, 2, 3)] if rotations else []) + ([(0, True)] if mirrored else [])


def copies_of(index, image_id, neighbours=DEFAULT_COPY_NEIGHBOURS, rotations=False, params=None,
              source_filter=None, mirrored=False):
    """The verified pairs of one stored image with its ``neighbours`` nearest, each classed
    exact / copy / same scene (:class:`DuplicatePair`, most alike first); ``rotations``:
    also its quarter-turned queries (reads and describes its source file three times);
    ``mirrored``: also its mirror image (once more)
    source_filter: path -> the path to read its pixels from, or None (not to be read)."""
    neighbours = check_count("neighbours", neighbours, 1, MAX_NEIGHBOURS)
    _need_geometry(index)
    pixels = _Pixels(index, source_filter)
    image_id = index.stored_id(image_id)  # (given in either Unicode normal form): itself left out below
    hits = index.search(index.vector(image_id), k=neighbours + 1, verify=0, expand=0)
    cand = [h for h in hits if h.id != image_id]
    out = _classified_pairs(index, pixels, np.array([image_id] * len(cand), object),
                            np.array([h.id for h in cand], object), np.array([h.score for h in cand]), params)
    if rotations or mirrored:
        out += _turned_pairs(index, pixels, image_id, neighbours, params, {p.b for p in out if p.kind != "same scene"},
                             _views(rotations, mirrored))
    return sorted(out, key=_pair_order)


GEOMETRY_BATCH = 32  # images whose geometry records, and their candidates', are read in one Index.geometries call


def _is_record_damage(exc):
    """Whether an IndexCorruptError is one record's damage (Store.damaged_geometry), not the store's."""
    return (getattr(exc, "what", None) or "").startswith(DAMAGED_RECORD)


def _readable_geometries(index, ids):
    """``index.geometries(ids)``, a damaged record read as None (its pairs are not classed:
    both images kept) with one warning naming it; each record alone only when a batch
    held a damaged one."""
    try:
        return index.geometries(ids)
    except IndexCorruptError as exc:
        if not _is_record_damage(exc):
            raise
    recs, damaged = [], []
    for image_id in ids:
        try:
            recs.append(index.geometries([image_id])[0])
        except IndexCorruptError as exc:
            if not _is_record_damage(exc):
                raise
            recs.append(None)
            damaged.append(image_id)
    warn_damaged(index.path, damaged, "its pairs are not classed (both images kept)")
    return recs


def _classified_pairs(index, pixels, a, b, s, params):
    """[DuplicatePair] of the verified candidate pairs (a[i], b[i], vector score s[i]) of stored
    images, grouped by a (each a's candidates contiguous, in the order given): the records of
    GEOMETRY_BATCH images and of their candidates read in one :meth:`Index.geometries` call
    (a sharded index: one read per shard that holds some), each record once per batch."""
    starts = np.flatnonzero(np.r_[True, a[1:] != a[:-1]]) if len(a) else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], len(a)].astype(np.int64)
    out = []
    for g in range(0, len(starts), GEOMETRY_BATCH):
        first, last = starts[g:g + GEOMETRY_BATCH], ends[g:g + GEOMETRY_BATCH]
        names = sorted(set(a[first[0]:last[-1]].tolist()) | set(b[first[0]:last[-1]].tolist()))
        recs = dict(zip(names, _readable_geometries(index, names)))
        for lo, hi in zip(first.tolist(), last.tolist()):
            image_id, ids = a[lo], b[lo:hi].tolist()
            if recs[image_id] is not None:
                out += _classify_candidates(pixels, image_id, recs[image_id], ids, [recs[i] for i in ids],
                                            s[lo:hi].tolist(), params)
    return out


def _pairs_with(index, pixels, image_id, qrec, cand, params, turns=0, qgray=None, qsha=None):
    if qrec is None or not cand:
        return []
    ids = [c[0] for c in cand]
    recs = _readable_geometries(index, ids)
    return _classify_candidates(pixels, image_id, qrec, ids, recs, [c[1] for c in cand], params, turns,
                                qgray, qsha)


def _turned_pairs(index, pixels, image_id, neighbours, params, found, views):
    """The copy pairs that only a turned query finds (candidates already found are skipped)."""
    out = []
    for turns, mirrored, rec, q, gray in _turned_queries(index, image_id, pixels, views):
        scores, ids = index.search(q[None, :], k=neighbours + 1, verify=0, expand=0)
        cand = [(i, s) for i, s in zip(ids[0], scores[0]) if i is not None and i != image_id and i not in found]
        got = [p for p in _pairs_with(index, pixels, image_id, rec, cand, params, turns, gray, qsha="")
               if p.kind != "same scene"]  # qsha "": the turned pixels or none, never the upright ones
        got = [replace(p, mirrored=mirrored) for p in got]
        found |= {p.b for p in got}
        out += got
    return out


def _pair_order(p):
    return (KIND_ORDER.get(p.kind, 9), -p.score)


KIND_ORDER = {"exact": 0, "copy": 1, "same scene": 2}


def copy_report(index, neighbours=DEFAULT_COPY_NEIGHBOURS, rotations=False, params=None, progress=None,
                batch_size=256, mirrored=False):
    """Every verified pair among each image's ``neighbours`` nearest, classed (exact / copy /
    same scene), and the groups that copy and exact pairs make (never same-scene ones):
    ``{"schema_version", "pairs": [DuplicatePair.to_dict()], "groups": [{"ids", "pairs"}]}``,
    groups largest first. Any :class:`~streamk.index.Index`: a sharded one's pairs span its
    shards. ``rotations``: each image's quarter-turned queries too (three descriptions per
    image: see bench/copy_detection.py for the cost)."""
    from ..schema import JSON_SCHEMA_VERSION

    pairs = copy_pairs(index, neighbours, rotations, params, progress, batch_size, mirrored)
    return {"schema_version": JSON_SCHEMA_VERSION, "pairs": [p.to_dict() for p in pairs],
            "groups": copy_groups(pairs)}


def copy_pairs(index, neighbours=DEFAULT_COPY_NEIGHBOURS, rotations=False, params=None, progress=None,
               batch_size=256, mirrored=False):
    """The classed pairs of :func:`copy_report`: [DuplicatePair], exact first, then copies,
    then same scene, each class by decreasing score. Each pair is verified from its smaller
    id (the same on every kind of index)."""
    neighbours = check_count("neighbours", neighbours, 1, MAX_NEIGHBOURS)
    batch_size = check_count("batch_size", batch_size, 1, MAX_BATCH)
    _need_geometry(index)
    bar = _progress_bar(len(index) * (2 if rotations or mirrored else 1), "copies", progress)
    pixels = _Pixels(index)
    pairs = []
    try:
        a, b, s = neighbour_pairs(index, neighbours, batch_size, bar=bar)
        pairs += _classified_pairs(index, pixels, a, b, s, params)
        if rotations or mirrored:
            found = {}
            for p in pairs:
                if p.kind != "same scene":
                    found.setdefault(p.a, set()).add(p.b)
                    found.setdefault(p.b, set()).add(p.a)
            for image_id in index.ids():
                pairs += _turned_pairs(index, pixels, image_id, neighbours, params, found.get(image_id, set()),
                                       _views(rotations, mirrored))
                bar.update(1)
    finally:
        bar.close()
    pairs.sort(key=_pair_order)
    return pairs


VERIFY_DEPRECATED = (
    "Index.duplicates(verify=True) keeps the copy and exact pairs of the copy classes since streamk 0.3 (it kept "
    "every pair with >= 12 inliers, other photos of the same scene too); verify=True will be removed after "
    "streamk 0.3: call streamk.index.copies_of(index, image_id) for one image's pairs, or "
    "streamk.index.copy_report(index) for the whole index's, each pair classed exact / copy / same scene")


def verified_duplicates(index, image_id=None, threshold=None, max_results=MAX_DUPLICATES,
                        neighbours=DEFAULT_COPY_NEIGHBOURS, progress=None):
    """``Index.duplicates(verify=True)`` (deprecated, with a DeprecationWarning): the exact and
    copy pairs of :func:`copies_of` / :func:`copy_report`, in 0.2's shapes. image_id given:
    [Hit] of its copies (exact first, then by score; at most ``max_results``), each
    verified with its ``inliers``. None: the groups of copies, [{"ids", "pairs": [[id_a,
    id_b, score, inliers], ...]}], largest first. ``threshold`` (None: none): a pair scoring
    below it is left out, as 0.2 did."""
    warnings.warn(VERIFY_DEPRECATED, DeprecationWarning, stacklevel=3)
    threshold = None if threshold is None else check_threshold(threshold)
    max_results = check_count("max_results", max_results, 1, MAX_DUPLICATES * 10)
    if image_id is not None:
        pairs = copies_of(index, image_id, neighbours=neighbours)
    else:
        pairs = copy_pairs(index, neighbours, progress=progress)
    pairs = [p for p in pairs if p.kind != "same scene" and (threshold is None or p.score >= threshold)]
    if image_id is not None:
        return [Hit(p.b, p.score, inliers=p.inliers, verified=True, stage="verified") for p in pairs[:max_results]]
    return [{"ids": g["ids"], "pairs": [[p["a"], p["b"], p["score"], p["inliers"]] for p in g["pairs"]]}
            for g in copy_groups(pairs)]


def copies_of_new(index, items, neighbours=DEFAULT_COPY_NEIGHBOURS, params=None, max_file_size=MAX_FILE_SIZE):
    """For each new image (``items``: (its file's path or None, its id, unit vector, stored-form
    geometry record or None, sha256 or None)), the most alike of its verified pairs with the
    stored images (:class:`DuplicatePair`, b the stored id), or None: what ``streamk ingest
    --on-duplicate`` reports (one batch search, then a verification per new image). A file is
    read (up to ``max_file_size`` bytes) and decoded only when a pair needs its pixels."""
    out = [None] * len(items)
    if not items or not len(index):
        return out
    neighbours = check_count("neighbours", neighbours, 1, MAX_NEIGHBOURS)
    pixels = _Pixels(index)
    V = np.stack([np.asarray(it[2], np.float32) for it in items])
    for lo in range(0, len(V), MAX_BATCH):
        scores, ids = index.search(V[lo:lo + MAX_BATCH], k=neighbours, verify=0, expand=0)
        for i in range(scores.shape[0]):
            path, image_id, _, qrec, sha = items[lo + i]
            cand = [(c, float(sc)) for c, sc in zip(ids[i], scores[i]) if c is not None and c != items[lo + i][1]]
            if qrec is None or not cand:
                continue
            recs = _readable_geometries(index, [c for c, _ in cand])
            pairs = _classify_candidates(pixels, image_id, qrec, [c for c, _ in cand], recs, [sc for _, sc in cand],
                                         params, qgray=_file_pixels(path, image_id, max_file_size, pixels.orient),
                                         qsha=sha or "")
            pairs = sorted((p for p in pairs if p.kind != "same scene"), key=_pair_order)
            out[lo + i] = pairs[0] if pairs else None
    return out


def copy_groups(pairs):
    """The connected components of the exact and copy pairs ([DuplicatePair]): [{"ids": [...],
    "pairs": [to_dict(), ...]}], largest first, ids sorted."""
    kept = [p for p in pairs if p.kind in ("exact", "copy")]
    if not kept:
        return []
    names, codes = np.unique([p.a for p in kept] + [p.b for p in kept], return_inverse=True)
    n = len(kept)
    label = _component_labels(len(names), codes[:n], codes[n:])
    groups = {}
    for k, lab in enumerate(label.tolist()):
        groups.setdefault(lab, {"ids": [], "pairs": []})["ids"].append(str(names[k]))
    for i, p in enumerate(kept):
        groups[int(label[codes[i]])]["pairs"].append(p.to_dict())
    return sorted(groups.values(), key=lambda g: (-len(g["ids"]), g["ids"]))


VECTOR_ONLY = "by vector similarity only{why}: they may be other photos of the same scene, not copies; {how}"


def vector_only_note(index, where=None, asked=None):
    """What every frontend says of near-duplicates found by the vector alone: why (``asked``:
    the option that asked for them on an index with local geometry, e.g. "--threshold"), and
    what gives the copy classes instead (``where``: the index as the user names it; None:
    its path)."""
    if index.vocabulary is not None:  # local geometry: the vector rule was asked for
        return VECTOR_ONLY.format(why=f" (asked with {asked})" if asked else "",
                                  how=(f"leave {asked} out" if asked else "ask for the copy classes")
                                  + " to have each pair classed exact / copy / same scene")
    if not hasattr(index, "has_local_features"):  # a sharded index made without visual words
        return VECTOR_ONLY.format(why=" (a sharded index without local geometry)",
                                  how="the copy classes need an index created with visual words")
    return VECTOR_ONLY.format(why=" (this index keeps no local geometry)",
                              how=f"give it some with `streamk index add-local-features {where or index.path}` to "
                                  "have each pair classed exact / copy / same scene")


__all__ = [
    "DEFAULT_COPY_NEIGHBOURS",
    "DEFAULT_DUPLICATE_THRESHOLD",
    "DEFAULT_NEIGHBOURS",
    "DUPLICATE_POLICIES",
    "MAX_DUPLICATES",
    "DuplicatePair",
    "check_threshold",
    "copies_of",
    "vector_only_note",
    "copy_groups",
    "copy_pairs",
    "copy_report",
    "duplicate_groups",
    "duplicates_of",
    "nearest_of_vectors",
    "neighbour_pairs",
    "vector_duplicate_groups",
    "vector_duplicates_of",
    "verified_duplicates",
]

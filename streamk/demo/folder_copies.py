"""Copies among the images of a user's folder (``streamk demo --images DIR``).

With ``--images`` a query's only positive is the image it was made from, so a second copy of
that image in the folder (the same photo exported again, resized, re-encoded) would come first
and count as a false positive. The demo finds such pairs and makes each image of a pair junk
for the other's queries (not counted), as the bursty scenes' photos are for theirs.

- The same bytes (sha256): never both indexed; :func:`streamk.demo.main_job.extract_database`
  skips the second file and says so (``DuplicateError``).
- Edited copies: ``streamk duplicates``'s rule (:func:`streamk.verification.classify_pair`),
  applied to the pairs the vector proposes: each image's nearest at most ``neighbours`` others
  whose vectors score at least ``threshold`` (the vector rule's threshold,
  :data:`streamk.index.DEFAULT_DUPLICATE_THRESHOLD`, measured with GMP and the demo's
  extractor: copies score >= 0.6, other photos of one landmark <= 0.4); then the second stage's
  verification and the copy classes: one similarity over most of the smaller image, the aligned
  pixels agree. Only the pairs classed exact or copy are set aside; other photos of one scene
  stay negatives, as ``--images`` counts them.

Cost: nothing when no pair scores ``threshold`` (a folder without near-copies). Else visual
words learned on the candidate images' descriptors only (a few seconds for a few images, ~30 s
for 250 images on two cores), their geometry records, about a millisecond per verified pair,
and the candidate files decoded at most once each for the pixel check. The first use on a
machine compiles the second stage's Numba kernels (cached on disk afterwards).
Not found: copies turned by quarter turns or mirrored (``streamk duplicates --rotations``
turns the query), and copies whose vectors score under ``threshold`` (heavy crops).
"""

import numpy as np

DEFAULT_NEIGHBOURS = 10  # candidates of one image, at most (as streamk duplicates' DEFAULT_COPY_NEIGHBOURS)
_BLOCK = 1024  # rows of the score matrix computed at once
PIXELS_KEPT = 64  # decoded images kept at once (pairs come grouped by their first row: it stays in)


def candidate_pairs(vectors, threshold, neighbours=DEFAULT_NEIGHBOURS):
    """(a, b) row arrays, a < b, of the pairs among each row's ``neighbours`` best-scoring later
    rows whose inner product is at least ``threshold`` (vectors: (n, D) unit rows)."""
    V = np.ascontiguousarray(vectors, np.float32)
    n = len(V)
    a_out, b_out = [], []
    for lo in range(0, n, _BLOCK):
        S = V[lo:lo + _BLOCK] @ V.T
        rows = np.arange(lo, lo + len(S))
        S[np.arange(n)[None, :] <= rows[:, None]] = -np.inf  # each pair once, from its first row
        m = min(neighbours, n)
        top = np.argpartition(-S, m - 1, axis=1)[:, :m] if m < n else np.broadcast_to(np.arange(n), S.shape)
        keep = np.take_along_axis(S, top, axis=1) >= threshold
        a_out.append(np.broadcast_to(rows[:, None], top.shape)[keep])
        b_out.append(top[keep])
    a = np.concatenate(a_out) if a_out else np.zeros(0, np.int64)
    b = np.concatenate(b_out) if b_out else np.zeros(0, np.int64)
    order = np.lexsort((b, a))
    return a[order].astype(np.int64), b[order].astype(np.int64)


def folder_copies(paths, fs, shas, vectors, orient, threshold=None, neighbours=DEFAULT_NEIGHBOURS, seed=0,
                  extraction_side=None):
    """([(row a, row b, PairClass)] of the pairs classed exact or copy, number of pairs checked).

    paths: the images' files; fs: their Features (keypoints, descriptors, image size);
    shas: their sha256; vectors: (n, D) their unit vectors; orient: whether the extractor
    turned them upright by their EXIF orientation (the pixels are compared as the features
    saw them); threshold: None for the vector rule's DEFAULT_DUPLICATE_THRESHOLD; extraction_side:
    the extractor's ``max_side`` (None: the default's), the unit of the copy check's tolerance."""
    from ..index import DEFAULT_DUPLICATE_THRESHOLD
    from ..verification import Vocabulary, classify_pair, stored_record, unpack, verify_geometry

    a, b = candidate_pairs(vectors, DEFAULT_DUPLICATE_THRESHOLD if threshold is None else threshold, neighbours)
    if not len(a):
        return [], 0
    rows = np.unique(np.concatenate([a, b]))
    sets = [fs[r].descriptors for r in rows.tolist()]
    vocabulary = Vocabulary(seed=seed)
    if sum(len(x) for x in sets) < vocabulary.n_coarse:  # too few features to verify anything
        return [], 0
    vocabulary.fit(sets)
    records = {r: stored_record(vocabulary, fs[r].keypoints, fs[r].descriptors, fs[r].image_size)
               for r in rows.tolist()}
    pixels = _Pixels(paths, shas, orient)
    found = []
    starts = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
    for lo, hi in zip(starts.tolist(), np.r_[starts[1:], len(a)].tolist()):
        first, others = int(a[lo]), b[lo:hi].tolist()
        checks = verify_geometry(records[first], [records[o] for o in others], return_pairs=True)
        for other, v in zip(others, checks):
            if not v.verified:
                continue
            c = classify_pair(unpack(records[first]), unpack(records[other]), v.pairs, True, pixels.of(first),
                              pixels.of(other), shas[first], shas[other], extraction_side=extraction_side)
            if c.kind in ("exact", "copy"):
                found.append((first, other, c))
    return found, len(a)


class _Pixels:
    """Grey pixels of the folder's files for the copy check, decoded when first needed and
    kept while among the ``keep`` most recently used; None when the file is gone, changed
    since its features were extracted, or not decodable (the pair then stays a negative)."""

    def __init__(self, paths, shas, orient, keep=PIXELS_KEPT):
        from collections import OrderedDict

        self.paths, self.shas, self.orient = paths, shas, orient
        self.cache, self.keep = OrderedDict(), keep  # the most recently used rows' pixels (a bounded memory)

    def of(self, row):
        def gray():
            if row in self.cache:
                self.cache.move_to_end(row)
            else:
                self.cache[row] = self._read(row)
                if len(self.cache) > self.keep:
                    self.cache.popitem(last=False)
            return self.cache[row]
        return gray

    def _read(self, row):
        import hashlib

        from ..errors import ImageReadError
        from ..features import read_image_bytes
        from ..verification import decode_for_copies

        try:
            data = read_image_bytes(self.paths[row])
            if hashlib.sha256(data).hexdigest() != self.shas[row]:
                return None
            return decode_for_copies(data, self.paths[row], orient=self.orient)
        except ImageReadError:
            return None

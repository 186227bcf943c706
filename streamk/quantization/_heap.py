"""The heap of the k best (score, row): one set of primitives for every scan and merge.

Its root is the worst entry: the lowest score and, among equal scores, the
largest row, so that ties go to the smaller row, as in a stable sort by
decreasing score. Plain array code, no checks (callers check).
"""

import numpy as np
from numba import njit


@njit(inline="always")
def replace_root(hs, hr, k, s, r):
    """Put (s, r) at the root of the heap (hs, hr) of size k and sift it down."""
    pos = 0
    while True:
        c = 2 * pos + 1
        if c >= k:
            break
        d = c + 1
        if d < k and (hs[d] < hs[c] or (hs[d] == hs[c] and hr[d] > hr[c])):
            c = d
        if hs[c] < s or (hs[c] == s and hr[c] > r):
            hs[pos] = hs[c]
            hr[pos] = hr[c]
            pos = c
        else:
            break
    hs[pos] = s
    hr[pos] = r


@njit(inline="always")
def push(hs, hr, filled, s, r):
    """Add (s, r) to a heap holding ``filled`` entries (with room for one more): sift up."""
    pos = filled
    while pos > 0:
        p = (pos - 1) // 2
        if hs[p] > s or (hs[p] == s and hr[p] < r):
            hs[pos] = hs[p]
            hr[pos] = hr[p]
            pos = p
        else:
            break
    hs[pos] = s
    hr[pos] = r


@njit(inline="always")
def offer(hs, hr, k, filled, s, r):
    """Keep (s, r) if the heap is not full or it beats the root; returns the new fill."""
    if filled < k:
        push(hs, hr, filled, s, r)
        return filled + 1
    if s > hs[0] or (s == hs[0] and r < hr[0]):
        replace_root(hs, hr, k, s, r)
    return filled


@njit(inline="always")
def drain(hs, hr, filled, out_s, out_r):
    """Empty a heap of ``filled`` entries into out_s / out_r (length k), best first;
    the slots past ``filled`` get (-inf, -1)."""
    for t in range(filled - 1, -1, -1):  # pop the worst first: fills out from the back
        out_s[t] = hs[0]
        out_r[t] = hr[0]
        last_s = hs[t]
        last_r = hr[t]
        replace_root(hs, hr, t, last_s, last_r)
    for t in range(filled, out_s.shape[0]):
        out_s[t] = -np.inf
        out_r[t] = -1


@njit(cache=True)
def merge_topk(cand_s, cand_r, k):
    """The k best of each query's candidates (Q, C) by decreasing score, ties by
    increasing row; candidates with row -1 are unused slots. Returns (Q, k) each.
    cand_r may have one line (1, C) shared by every query (e.g. column numbers)."""
    nq, nc = cand_s.shape
    shared = cand_r.shape[0] == 1
    out_s = np.empty((nq, k), dtype=np.float32)
    out_r = np.empty((nq, k), dtype=np.int64)
    hs = np.empty(k, dtype=np.float32)
    hr = np.empty(k, dtype=np.int64)
    for a in range(nq):
        filled = 0
        for c in range(nc):
            r = cand_r[0, c] if shared else cand_r[a, c]
            if r >= 0:
                filled = offer(hs, hr, k, filled, cand_s[a, c], r)
        drain(hs, hr, filled, out_s[a], out_r[a])
    return out_s, out_r

"""Numba kernels of matching.py: array code only, no checks (the caller validates).

Tentative correspondences by a merge of two word-sorted feature lists: for each
word present in both, every (query, candidate) pair with signatures at most
``ht`` bits apart, at most ``cap`` of them per word (the closest, ties by
position), emitted in the order (word, Hamming distance, query index, candidate
index).
"""

import numpy as np
from numba import njit

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@njit(cache=True, inline="always")
def popcount64(x):
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return np.int64((x * _H01) >> np.uint64(56))


@njit(cache=True)
def match_bound(qw, dw, cap):
    """(upper bound on the number of correspondences, largest nq * nd of a shared word)."""
    i = 0
    j = 0
    nq = qw.shape[0]
    nd = dw.shape[0]
    bound = 0
    block = 0
    while i < nq and j < nd:
        if qw[i] < dw[j]:
            i += 1
        elif qw[i] > dw[j]:
            j += 1
        else:
            w = qw[i]
            i1 = i
            while i1 < nq and qw[i1] == w:
                i1 += 1
            j1 = j
            while j1 < nd and dw[j1] == w:
                j1 += 1
            p = (i1 - i) * (j1 - j)
            bound += min(p, cap)
            block = max(block, p)
            i = i1
            j = j1
    return bound, block


@njit(cache=True)
def match_into(qw, qs, dw, ds, ht, cap, out_q, out_d, out_h, scratch):
    """Fill out_q / out_d / out_h (sized by match_bound); returns the count written.
    scratch: int64 array of at least the largest nq * nd of a shared word."""
    i = 0
    j = 0
    nq = qw.shape[0]
    nd = dw.shape[0]
    count = 0
    while i < nq and j < nd:
        if qw[i] < dw[j]:
            i += 1
        elif qw[i] > dw[j]:
            j += 1
        else:
            w = qw[i]
            i1 = i
            while i1 < nq and qw[i1] == w:
                i1 += 1
            j1 = j
            while j1 < nd and dw[j1] == w:
                j1 += 1
            # keys: distance (7 bits) | local query index (21) | local candidate index (21)
            m = 0
            for a in range(i, i1):
                sa = qs[a]
                for b in range(j, j1):
                    h = popcount64(sa ^ ds[b])
                    if h <= ht:
                        scratch[m] = (h << 42) | ((a - i) << 21) | (b - j)
                        m += 1
            if m > 0:
                keys = np.sort(scratch[:m])
                for r in range(min(m, cap)):
                    key = keys[r]
                    out_h[count] = key >> 42
                    out_q[count] = i + ((key >> 21) & 0x1FFFFF)
                    out_d[count] = j + (key & 0x1FFFFF)
                    count += 1
            i = i1
            j = j1
    return count

"""Numba kernels of the ASMK baseline (streamk/asmk.py): plain array code, no checks.

The inverted file is stored by visual word: word ``c`` owns entries
``offsets[c]:offsets[c+1]``; entry ``e`` is one database image's aggregated
residual for that word (``entry_image[e]``, and a float vector or a packed sign
code).  A query adds, for each of its words c and each entry e of c,

    w_c * sigma_alpha(u) * image_norm[entry_image[e]]

to its image's score, u being the cosine of the two aggregated residuals
(ASMK) or 1 - 2 h / n_bits for the sign codes (ASMK*, h the Hamming distance),
and sigma_alpha(u) = sign(u) |u|^alpha if u > tau, else 0.
"""

import numpy as np
from numba import njit

REDUCE = {"reassoc", "contract"}

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@njit(cache=True, inline="always")
def popcount64(x):
    """Set bits of a uint64 (SWAR: no popcount intrinsic in Numba)."""
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return (x * _H01) >> np.uint64(56)


@njit(cache=True, inline="always")
def selectivity(u, alpha, tau):
    """sigma_alpha(u) = sign(u) |u|^alpha above the threshold tau, 0 below or at it."""
    if u <= tau:
        return 0.0
    s = np.abs(u) ** alpha
    return s if u >= 0.0 else -s


@njit(cache=True, fastmath=REDUCE)
def asmk_scores(q_words, q_vecs, word_weight, offsets, entry_image, entry_vecs, image_norm, alpha, tau,
                scores):
    """ASMK: add a query's kernel values to ``scores`` (one per database image), in place."""
    d = q_vecs.shape[1]
    for i in range(q_words.shape[0]):
        c = q_words[i]
        w = word_weight[c]
        for e in range(offsets[c], offsets[c + 1]):
            u = 0.0
            for t in range(d):
                u += q_vecs[i, t] * entry_vecs[e, t]
            s = selectivity(u, alpha, tau)
            if s != 0.0:
                img = entry_image[e]
                scores[img] += w * s * image_norm[img]


@njit(cache=True)
def asmk_binary_scores(q_words, q_codes, n_bits, word_weight, offsets, entry_image, entry_codes, image_norm,
                       alpha, tau, scores):
    """ASMK*: the same with packed sign codes, u = 1 - 2 h / n_bits."""
    n_words64 = q_codes.shape[1]
    for i in range(q_words.shape[0]):
        c = q_words[i]
        w = word_weight[c]
        for e in range(offsets[c], offsets[c + 1]):
            h = np.uint64(0)
            for t in range(n_words64):
                h += popcount64(q_codes[i, t] ^ entry_codes[e, t])
            u = 1.0 - 2.0 * float(h) / n_bits
            s = selectivity(u, alpha, tau)
            if s != 0.0:
                img = entry_image[e]
                scores[img] += w * s * image_norm[img]

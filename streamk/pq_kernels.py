"""Numba kernels of product-quantisation search: plain array code, no checks.

Scores are inner products (image vectors are L2-normalised, so ranking by
inner product is ranking by cosine / L2 distance).
"""

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def adc_scores(codes, table):
    """Asymmetric distance computation: score[i] = sum_m table[m, codes[i, m]].

    codes: (N, M) uint8; table: (M, 256) float32 look-up of <q_m, c_m,j>.
    """
    n, m = codes.shape
    out = np.empty(n, dtype=np.float32)
    for i in prange(n):
        s = np.float32(0.0)
        for j in range(m):
            s += table[j, codes[i, j]]
        out[i] = s
    return out


@njit(parallel=True, cache=True)
def adc_scores_batch(codes, tables):
    """Scores of Q queries at once (Q, N): one pass over the codes per block of rows."""
    n, m = codes.shape
    q = tables.shape[0]
    out = np.empty((q, n), dtype=np.float32)
    for i in prange(n):
        for a in range(q):
            s = np.float32(0.0)
            for j in range(m):
                s += tables[a, j, codes[i, j]]
            out[a, i] = s
    return out

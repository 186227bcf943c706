"""Numba kernels of vocabulary.py: array code only, no checks (the caller validates)."""

import numpy as np
from numba import njit


@njit(cache=True, fastmath={"reassoc", "contract", "nsz"})  # SIMD dot products; inf kept
def nearest_child(X, cells, fine, fine_sqnorms, offsets, out):
    """out[i] = the child word of cell cells[i] nearest to X[i] (squared L2 up to ||x||^2)."""
    n, d = X.shape
    for i in range(n):
        c = cells[i]
        best = np.inf
        arg = offsets[c]
        for w in range(offsets[c], offsets[c + 1]):
            dot = np.float32(0.0)
            for k in range(d):
                dot += X[i, k] * fine[w, k]
            dist = fine_sqnorms[w] - 2.0 * dot
            if dist < best:
                best = dist
                arg = w
        out[i] = arg


@njit(cache=True, fastmath={"reassoc", "contract", "nsz"})
def nearest_children_ma(X, cells, fine, fine_sqnorms, offsets, out, out_d, single):
    """Multiple assignment: out[i, :m] = the m nearest words of X[i] among the children of
    its m' coarse cells cells[i, :m'] (nearest first; ties by word id), out_d their distances.
    Slots with no word left (cells with fewer children) are -1. single[i] = the nearest
    child of cells[i, 0] (the single assignment when cells[i, 0] is the nearest cell)."""
    n, d = X.shape
    m = out.shape[1]
    for i in range(n):
        for r in range(m):
            out[i, r] = -1
            out_d[i, r] = np.inf
        best0 = np.inf
        for ci in range(cells.shape[1]):
            c = cells[i, ci]
            for w in range(offsets[c], offsets[c + 1]):
                dot = np.float32(0.0)
                for k in range(d):
                    dot += X[i, k] * fine[w, k]
                dist = fine_sqnorms[w] - 2.0 * dot
                if ci == 0 and dist < best0:  # the same comparison as nearest_child
                    best0 = dist
                    single[i] = w
                # insertion into the sorted top-m list
                if dist < out_d[i, m - 1] or (dist == out_d[i, m - 1] and out[i, m - 1] > w):
                    r = m - 1
                    while r > 0 and (out_d[i, r - 1] > dist or (out_d[i, r - 1] == dist and out[i, r - 1] > w)):
                        out_d[i, r] = out_d[i, r - 1]
                        out[i, r] = out[i, r - 1]
                        r -= 1
                    out_d[i, r] = dist
                    out[i, r] = w

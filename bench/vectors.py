"""Synthetic image vectors and the exact references the search benchmarks share.

The vectors have the structure of RN-rotated image vectors (PCA basis: variance
decaying with the component): a mixture of Gaussian clusters whose
per-dimension variance decays as (1 + j)^-0.7, L2-normalised. They are drawn in
seeded chunks, so a million of them never need to sit in memory at once
(``database_chunks``) and every script draws the same ones.
"""

import statistics
import time

import numpy as np

SPECTRUM_DECAY = 0.7  # per-dimension variance ~ (1 + j)^-decay
N_CLUSTERS = 4096
SPREAD = 0.6  # within-cluster std relative to the spread of the cluster centres


def spectrum(dim):
    return ((1.0 + np.arange(dim)) ** (-SPECTRUM_DECAY / 2)).astype(np.float32)


def centres(dim, seed):
    rng = np.random.default_rng([seed, 0])
    return rng.standard_normal((N_CLUSTERS, dim), dtype=np.float32) * spectrum(dim)


def draw(rng, n, C, out=None):
    """n L2-normalised draws of the mixture with centres C (written into ``out``)."""
    sd = spectrum(C.shape[1])
    X = C[rng.integers(len(C), size=n)]
    X += SPREAD * rng.standard_normal(X.shape, dtype=np.float32) * sd
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    if out is not None:
        out[:] = X
        return out
    return X


CHUNK = 65536


def database_chunks(n, dim, seed, start=0, chunk=CHUNK):
    """(first row, vectors) of database rows start..n-1, one seeded chunk at a time
    (rows are the same whatever ``start``; ``start`` must be a multiple of ``chunk``)."""
    C = centres(dim, seed)
    for c, lo in enumerate(range(start, n, chunk), start // chunk):
        yield lo, draw(np.random.default_rng([seed, 1, c]), min(chunk, n - lo), C)


def make_database(n, dim, seed, chunk=CHUNK):
    X = np.empty((n, dim), np.float32)
    for lo, V in database_chunks(n, dim, seed, chunk=chunk):
        X[lo:lo + len(V)] = V
    return X


def make_queries(nq, dim, seed):
    return draw(np.random.default_rng([seed, 2]), nq, centres(dim, seed))


def exact_topk(X, Q, k, chunk=CHUNK):
    """Exact top-k rows of X by inner product with each query (chunked BLAS, float32);
    best first, ties by row. X: an array, or an iterable of (first row, chunk)."""
    chunks = ((lo, X[lo:lo + chunk]) for lo in range(0, len(X), chunk)) if isinstance(X, np.ndarray) else X
    best_s = np.full((len(Q), 0), -np.inf, np.float32)
    best_r = np.zeros((len(Q), 0), np.int64)
    for lo, Xc in chunks:
        S = Q @ Xc.T
        kk = min(k, S.shape[1])
        part = np.argpartition(-S, kk - 1, axis=1)[:, :kk]
        best_s = np.concatenate([best_s, np.take_along_axis(S, part, axis=1)], axis=1)
        best_r = np.concatenate([best_r, part + lo], axis=1)
        order = np.lexsort((best_r, -best_s), axis=1)[:, :k]
        best_s = np.take_along_axis(best_s, order, axis=1)
        best_r = np.take_along_axis(best_r, order, axis=1)
    return best_s, best_r


def recall_at(ranked, truth, R):
    """R@R: fraction of queries whose exact nearest neighbour is in the first R."""
    return float(np.mean([truth[q, 0] in ranked[q, :R] for q in range(len(truth))]))


def overlap_at(ranked, truth, R):
    """R@R overlap ("10@10"): mean |first R results & exact top R| / R."""
    return float(np.mean([len(np.intersect1d(ranked[q, :R], truth[q, :R])) / R for q in range(len(truth))]))


def set_threads(n):
    import numba

    numba.set_num_threads(n)
    try:
        import faiss
        faiss.omp_set_num_threads(n)
    except ImportError:
        pass


def time_one(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def alternate(fns, queries, repeat=1):
    """Median seconds per query of each fn(q), the fns alternating query by query."""
    times = [[] for _ in fns]
    for _ in range(repeat):
        for q in queries:
            for t, fn in zip(times, fns):
                t.append(time_one(lambda: fn(q))[0])
    return [statistics.median(t) for t in times]

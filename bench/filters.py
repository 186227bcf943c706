#!/usr/bin/env python
"""Filtered search: a metadata filter selecting 1 % of N images against the same search
unfiltered, measured in the same run on the same index (exact, flat PQ, IVF-PQ).

    python bench/filters.py [--n 100000] [--dim 1920] [--queries 50] [--k 10] [--M 16]
                            [--nlist 1024] [--nprobe 8] [--keep DIR]

Data: N synthetic unit vectors of dimension D (T-emb k = 16 gives D = 1,920) with the
structure of image vectors (``bench/vectors.py``: a mixture of clusters, a decaying
spectrum), float16 in a StreamingIndex. Each image i has the metadata
``{"bucket": i % 100, "x": i / N}``, both fields indexed, so that

- ``{"bucket": 7}`` (equality) selects 1 % of the images, spread over every cluster;
- ``{"x": {"gte": 0.37, "lt": 0.38}}`` (a range) selects 1 % too (one posting per
  distinct value: N / 100 cursor steps to build its rows).

Per mode, the queries (fresh draws from the mixture) alternate between the unfiltered
and the filtered searches, one query at a time (k = 10; PQ: the top max(4k, 100) re-ranked
with the stored vectors), median ms per query. "ratio" is filtered / unfiltered (the
target: <= 2). "k found" is the fewest results a filtered query returned (k whenever k
images match); "10@10" the overlap with the exact top 10 (filtered: numpy over the allowed
rows; unfiltered: the exact mode's results, when it ran). Nothing asserts; the CPU model
and the load are printed.
"""

import streamk  # first: it sets the thread wait policies before numpy loads its pools  # noqa: F401,I001

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, table  # noqa: E402
from vectors import database_chunks, make_queries  # noqa: E402

ADD_BATCH = 1024


def make_encoder(dim):
    """An encoder of vectors of dimension ``dim`` (VLAD, dim / 128 words): the benchmark
    adds vectors, so only the dimension matters."""
    from streamk import Encoder

    rng = np.random.default_rng(0)
    sets = [rng.integers(0, 256, (200, 128)).astype(np.float32) for _ in range(4)]
    return Encoder(embedding="vlad", k=dim // 128, aggregation="sum").fit(sets)


def build(path, n, dim, seed):
    from streamk.index import StreamingIndex

    idx = StreamingIndex.create(path, make_encoder(dim), vector_dtype="float16", indexed_fields=["bucket", "x"],
                                store_extras=False)
    t0 = time.perf_counter()
    for lo, V in database_chunks(n, dim, seed):
        for s in range(0, len(V), ADD_BATCH):
            part = V[s:s + ADD_BATCH]
            res = idx.add_many(({"id": str(lo + s + j), "vector": v,
                                 "metadata": {"bucket": (lo + s + j) % 100, "x": (lo + s + j) / n}}
                                for j, v in enumerate(part)), batch_size=ADD_BATCH)
            if any(r.status != "added" for r in res):
                raise RuntimeError(f"add failed: {[r for r in res if r.status != 'added'][0]}")
        log(f"  added {lo + len(V):,} / {n:,} ({(lo + len(V)) / (time.perf_counter() - t0):,.0f}/s)")
    return idx


def exact_filtered(idx, Q, rows, k):
    """The exact top k of each query among ``rows`` (numpy over their stored vectors)."""
    with idx.store.read(buffers=True) as txn:
        V = idx.view.vectors_of(txn, rows)
        S = Q @ V.T
        top = np.argsort(-S, axis=1, kind="stable")[:, :k]
        return {a: set(idx.view.ids_of(txn, rows[t]).tolist()) for a, t in enumerate(top)}


def run_mode(idx, name, Q, filters, k, nprobe, truth, mode="pq"):
    """Alternate unfiltered / filtered searches query by query; one table row per filter.
    truth: the exact top k (sets of ids) of each query, unfiltered ("none") and per filter;
    an exact run fills truth["none"]."""
    names = ["none", *filters]
    times = {f: [] for f in names}
    found = {f: k for f in names}
    overlap = {f: [] for f in names}
    for f in names:  # warm: compile, load the codes
        idx.search(Q[0], k=k, nprobe=nprobe, where=filters.get(f), mode=mode)
    for a, q in enumerate(Q):
        for f in names:
            t = time.perf_counter()
            hits = idx.search(q, k=k, nprobe=nprobe, where=filters.get(f), mode=mode)
            times[f].append(time.perf_counter() - t)
            found[f] = min(found[f], len(hits))
            ids = {h.id for h in hits}
            if mode == "exact" and f == "none":
                truth.setdefault("none", {})[a] = ids
            overlap[f].append(len(ids & truth[f][a]) / k if a in truth.get(f, {}) else np.nan)
    base = statistics.median(times["none"]) * 1e3
    rows = []
    for f in names:
        ms = statistics.median(times[f]) * 1e3
        rows.append([name, f, f"{ms:.2f}", f"{ms / base:.2f}", found[f],
                     "" if np.isnan(overlap[f]).all() else f"{np.nanmean(overlap[f]):.3f}"])
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=1920)
    p.add_argument("--queries", type=int, default=50)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--M", type=int, default=16)
    p.add_argument("--nlist", type=int, default=1024)
    p.add_argument("--nprobe", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", default=None, help="build the index here (kept, and reused by a later run)")
    p.add_argument("--no-exact", action="store_true", help="skip the exact mode (N vectors read per query)")
    args = p.parse_args()
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical cores); load {load_str()}")
    from streamk.index import StreamingIndex

    tmp = None
    path = args.keep
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="streamk-filters-")
        path = os.path.join(tmp.name, "idx")
    if os.path.isdir(path) and os.listdir(path):
        idx = StreamingIndex.open(path)
        log(f"reusing {path} ({len(idx):,} images)")
    else:
        log(f"building {args.n:,} x {args.dim} (float16) with metadata ...")
        idx = build(path, args.n, args.dim, args.seed)
    n = len(idx)
    Q = make_queries(args.queries, args.dim, args.seed + 1)
    filters = {"bucket = 7 (1 %)": {"bucket": 7}, "0.37 <= x < 0.38 (1 %)": {"x": {"gte": 0.37, "lt": 0.38}}}
    t = time.perf_counter()
    allowed = {f: idx.allowed(w) for f, w in filters.items()}
    log(f"  filters' rows: {', '.join(f'{a.count:,}' for a in allowed.values())} "
        f"({(time.perf_counter() - t) * 1e3 / len(filters):.1f} ms each, cold)")
    truth = {f: exact_filtered(idx, Q, a.rows, args.k) for f, a in allowed.items()}
    rows = []
    if not args.no_exact:
        log("exact ...")
        rows += run_mode(idx, "exact", Q, filters, args.k, None, truth, mode="exact")
    codec = idx.codec()
    for nlist in sorted((1, args.nlist), key=lambda n: codec is None or codec.nlist != n):  # the trained one first
        codec = idx.codec()
        if codec is None or codec.nlist != nlist:
            log(f"training nlist={nlist}, M={args.M} ...")
            idx.train(nlist=nlist, M=args.M, nprobe=args.nprobe if nlist > 1 else None, progress=False)
        name = "PQ (flat ADC)" if nlist == 1 else f"IVF{nlist}-PQ, nprobe {args.nprobe}"
        log(f"{name} ...")
        rows += run_mode(idx, name, Q, filters, args.k, args.nprobe if nlist > 1 else None, truth)
    table(["mode", "filter", "ms/query", "ratio", "k found (min)", "10@10 vs exact"], rows,
          f"Filtered search, N = {n:,}, D = {args.dim}, k = {args.k}, {len(Q)} queries alternating, one at a time "
          f"(load {load_str()})")
    idx.close()
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()

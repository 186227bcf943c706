#!/usr/bin/env python
"""PQ search benchmark: streamk's ProductQuantizer against faiss ``IndexPQ``, same
data, same training sample, same M, measured in the same run.

    python bench/search.py [--n 1000000] [--dim 1024] [--Ms 8,16,32,64] [--queries 1000]
                           [--single 100] [--train 65536] [--quick] [--no-faiss]

Data: N synthetic L2-normalised vectors of dimension D with the structure of
PCA-ed image vectors: a mixture of Gaussian clusters whose per-dimension variance
decays as (1 + j)^-0.7; generated in seeded chunks (1M x 1024 float32 is 4 GB).
Queries are fresh draws from the same mixture (not database vectors).

Ground truth: exact inner-product search by chunked BLAS (float32), top 100.

Per M, streamk and faiss are trained on the same sample (``--train`` vectors,
25 k-means iterations each; streamk: scikit-learn k-means++, faiss: its own
k-means), then encode all N vectors, then search:
- "1 query, 1 thread": one query at a time, Numba / OpenMP on one thread
  (``numba.set_num_threads(1)``, ``faiss.omp_set_num_threads(1)``); the median
  over the first ``--single`` queries, streamk and faiss alternating query by
  query so that a background load hits both alike;
- "1 query, all threads": the same, every core;
- "batched": all queries in one call, every core; time per query.
Every time includes the look-up tables of the query and the top-k selection
(k = 100). streamk: ``ProductQuantizer.search`` (top-k kept inside the scan);
"streamk, scores + argpartition" is the path ``ProductQuantizer.scores`` followed
by numpy's argpartition (the N scores materialised), for comparison.

Recall (as in Jegou et al., TPAMI 2011): R@R = the fraction of queries whose exact
nearest neighbour is among the first R results of the PQ ranking (1-recall@R).
"10@10" = the mean overlap of the first 10 results with the exact top 10.
"+ re-rank": streamk's PQ top 100 re-scored with the exact vectors (what
``StreamingIndex.search(mode="pq")`` does with its stored vectors), 1 query, 1 thread.

``--index-n N`` (M = ``--index-M``) also builds a real ``StreamingIndex`` of the
first N vectors (float16 vectors in LMDB, ``train_pq``) and times
``StreamingIndex.search`` one query at a time (k = 10; "pq": ADC top 400 re-ranked
with the stored vectors, the default; "exact": all vectors), against the exact
top 10 of those N vectors.

Nothing here asserts a time; the script prints tables and ratios. Without faiss
(``pip install faiss-cpu``, the ``bench`` extra) it prints streamk alone.
"""

import streamk  # first: it sets the thread wait policies before numpy loads its pools  # noqa: F401,I001

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from streamk.quantization.pq import ProductQuantizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_str, log, machine_info, table  # noqa: E402
from vectors import (N_CLUSTERS, SPECTRUM_DECAY, SPREAD, alternate, exact_topk, make_database,  # noqa: E402
                     make_queries, overlap_at, recall_at,
                     set_threads, time_one)

K = 100  # results kept per query (recall up to R@100)


def streamk_argpartition(pq, codes, q, k):
    """The older path: all N scores, then numpy's argpartition and a sort of the k."""
    s = pq.scores(q[None, :], codes)[0]
    top = np.argpartition(-s, k - 1)[:k]
    return top[np.lexsort((top, -s[top]))]


def streamk_rerank(pq, codes, X, q, k, R):
    """PQ top R, re-scored with the exact vectors (StreamingIndex.search(mode="pq"))."""
    _, cand = pq.search(q, codes, R)
    cand = cand[0]
    s = X[cand] @ q
    top = np.lexsort((cand, -s))[:k]
    return cand[top]


# ============================================================== the index

def index_level(args, X, Q, all_threads):
    """StreamingIndex.search (PQ with re-ranking, and exact) on the first --index-n vectors."""
    import tempfile

    from streamk.encoding.encoder import Encoder
    from streamk.index import StreamingIndex

    n, D, M = min(args.index_n, len(X)), X.shape[1], args.index_M
    if D % 128 or D // 128 < 1:
        print(f"\n(index-level search skipped: D={D} is not (k-1) x 128 for a T-emb encoder)")
        return
    # any fitted encoder of dimension D: vectors are added as vectors
    rng = np.random.default_rng(args.seed)
    enc = Encoder(embedding="temb", k=D // 128 + 1, aggregation="sum").fit(
        [np.abs(rng.standard_normal((500, 128))).astype(np.float32) for _ in range(10)])
    assert enc.dim == D
    _, truth = exact_topk(X[:n], Q, 10)
    set_threads(all_threads)
    with tempfile.TemporaryDirectory(prefix="streamk-bench-search-") as tmp:
        idx = StreamingIndex.create(os.path.join(tmp, "idx"), enc, vector_dtype="float16",
                                    map_size=1 << 30)
        t_add, res = time_one(lambda: idx.add_many(({"id": str(i), "vector": X[i]} for i in range(n)),
                                                   batch_size=1024))
        assert all(r.status == "added" for r in res)
        t_train, _ = time_one(lambda: idx.train_pq(M=M, seed=args.seed))
        idx.search(Q[0], k=10, mode="pq")
        rows = []
        for mode in ("pq", "exact"):
            for threads in (1, all_threads):
                set_threads(threads)
                t = alternate([lambda q: idx.search(q, k=10, mode=mode)], Q[:args.single])[0]
                ranked = np.array([[int(i) for i, _ in idx.search(q, k=10, mode=mode)] for q in Q])
                rows.append([mode + (" (re-rank 400)" if mode == "pq" else ""), threads, fmt_ms(t),
                             fmt_r(recall_at(ranked, truth, 1)), fmt_r(recall_at(ranked, truth, 10)),
                             fmt_r(overlap_at(ranked, truth, 10))])
                if all_threads == 1:
                    break
        set_threads(all_threads)
        du = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(tmp) for f in fs)
        idx.close()
    table(["StreamingIndex.search", "threads", "ms/query", "R@1", "R@10", "10@10"], rows,
          f"Index level: StreamingIndex of {n:,} vectors (float16 in LMDB, {du / n:.0f} B/vector on disk; "
          f"held in memory as float32 + {M} B codes), PQ M={M}, k=10, median over {args.single} queries; "
          f"add_many {n / t_add:,.0f} vectors/s, train_pq {t_train:.1f} s")


# ============================================================== main

def fmt_ms(s):
    return "-" if s is None else f"{1e3 * s:.2f}"


def fmt_r(x):
    return "-" if x is None else f"{x:.3f}"


def ratio(a, b):
    return "-" if a is None or b is None or b <= 0 else f"{a / b:.2f}"


def run(args):
    import numba

    try:
        import faiss
    except ImportError:
        faiss = None
    if args.no_faiss:
        faiss = None
    all_threads = numba.config.NUMBA_NUM_THREADS
    info = machine_info()
    print("# PQ search: streamk vs faiss IndexPQ\n")
    print(f"machine: {info['cpu']}, {info['logical_cores']} logical cores; Python {info['python']}, "
          f"numpy {info['numpy']}, numba {info['numba']} ({info['numba_threads']} threads)"
          + (f", faiss {faiss.__version__}" if faiss else ""))
    if faiss is None:
        print("faiss: not installed (pip install faiss-cpu, the 'bench' extra) or --no-faiss: "
              "streamk alone")
    print(f"data: N={args.n:,} D={args.dim} (mixture of {N_CLUSTERS} Gaussian clusters, "
          f"variance ~ (1+j)^-{SPECTRUM_DECAY}, within-cluster std {SPREAD} x the centres', "
          f"L2-normalised), {args.queries} fresh queries, training sample {args.train:,}, "
          f"seed {args.seed}; k = {K}")
    print(f"load average at start (1/5/15 min): {load_str()}", flush=True)

    t0 = time.perf_counter()
    X = make_database(args.n, args.dim, args.seed)
    Q = make_queries(args.queries, args.dim, args.seed)
    log(f"data: {time.perf_counter() - t0:.1f} s")
    set_threads(all_threads)
    t_exact, (_, truth) = time_one(lambda: exact_topk(X, Q, K))
    log(f"ground truth: {t_exact:.1f} s")
    sample = X[np.sort(np.random.default_rng([args.seed, 3]).choice(args.n, min(args.train, args.n),
                                                                     replace=False))]
    singles = Q[:args.single]

    build_rows, search_rows, ratio_rows = [], [], []
    for M in args.Ms:
        log(f"M={M}: training ... (load {load_str()})")
        set_threads(all_threads)
        pq = ProductQuantizer(M=M, seed=args.seed, max_train=len(sample))
        t_fit, _ = time_one(lambda: pq.fit(sample))
        t_enc, codes = time_one(lambda: pq.encode(X))
        fx = None
        if faiss is not None:
            fx = faiss.IndexPQ(args.dim, M, 8, faiss.METRIC_INNER_PRODUCT)
            f_fit, _ = time_one(lambda: fx.train(sample))
            f_enc, _ = time_one(lambda: fx.add(X))
        build_rows.append([M, codes.nbytes // args.n, fx.code_size if fx else "-", f"{t_fit:.1f}",
                           f"{f_fit:.1f}" if fx else "-", f"{t_enc:.1f}", f"{f_enc:.1f}" if fx else "-"])
        log(f"M={M}: fit {t_fit:.1f} s, encode {t_enc:.1f} s" + (f"; faiss {f_fit:.1f} s, {f_enc:.1f} s" if fx else ""))

        # warm-up (compilation / cache load) outside the timings
        pq.search(Q[:2], codes, K)
        pq.search(Q[0], codes, K)
        streamk_argpartition(pq, codes, Q[0], K)
        pq.scores(Q[:2], codes[:10])

        sk = lambda q: pq.search(q, codes, K)  # noqa: E731
        fs = (lambda q: fx.search(q[None, :], K)) if fx else None
        ap = lambda q: streamk_argpartition(pq, codes, q, K)  # noqa: E731
        rr = lambda q: streamk_rerank(pq, codes, X, q, K, K)  # noqa: E731

        times = {}
        for threads in (1, all_threads):
            set_threads(threads)
            fns = [sk] + ([fs] if fx else []) + ([ap, rr] if threads == 1 else [])
            out = alternate(fns, singles)
            times[("sk", threads)] = out[0]
            times[("fs", threads)] = out[1] if fx else None
            if threads == 1:
                times[("ap", 1)], times[("rr", 1)] = out[-2], out[-1]
            if all_threads == 1:
                break
        set_threads(all_threads)
        t_sk_b, (_, sk_rows) = time_one(lambda: pq.search(Q, codes, K))
        f_rows = None
        if fx:
            t_fs_b, (_, f_rows) = time_one(lambda: fx.search(Q, K))
        # the single-query answers are those of the batch
        same = all(np.array_equal(pq.search(q, codes, K)[1][0], sk_rows[i]) for i, q in enumerate(singles[:10]))
        if not same:
            print(f"WARNING: M={M}: single-query and batched answers differ")
        rr_rows = np.stack([streamk_rerank(pq, codes, X, q, K, K) for q in Q])

        def rec(rows):
            return [recall_at(rows, truth, 1), recall_at(rows, truth, 10), recall_at(rows, truth, 100),
                    overlap_at(rows, truth, 10)]

        r_sk, r_fs, r_rr = rec(sk_rows), (rec(f_rows) if fx else None), rec(rr_rows)
        nb = lambda t: t / len(Q)  # noqa: E731
        search_rows.append([M, "streamk", fmt_ms(times[("sk", 1)]), fmt_ms(times.get(("sk", all_threads))),
                            fmt_ms(nb(t_sk_b)), *map(fmt_r, r_sk)])
        if fx:
            search_rows.append([M, "faiss IndexPQ", fmt_ms(times[("fs", 1)]),
                                fmt_ms(times.get(("fs", all_threads))), fmt_ms(nb(t_fs_b)), *map(fmt_r, r_fs)])
        search_rows.append([M, "streamk, scores + argpartition", fmt_ms(times[("ap", 1)]), "-", "-",
                            *map(fmt_r, r_sk)])
        search_rows.append([M, "streamk + re-rank 100 (exact)", fmt_ms(times[("rr", 1)]), "-", "-",
                            fmt_r(r_rr[0]), fmt_r(r_rr[1]), "-", fmt_r(r_rr[3])])
        if fx:
            ratio_rows.append([M, ratio(times[("sk", 1)], times[("fs", 1)]),
                               ratio(times.get(("sk", all_threads)), times.get(("fs", all_threads))),
                               ratio(nb(t_sk_b), nb(t_fs_b)),
                               f"{r_sk[0] - r_fs[0]:+.3f}", f"{r_sk[1] - r_fs[1]:+.3f}",
                               f"{r_sk[2] - r_fs[2]:+.3f}", f"{r_sk[3] - r_fs[3]:+.3f}"])
        log(f"M={M}: done (load {load_str()})")
        codes = fx = None  # free the codes before the next M

    table(["M", "streamk B/vector", "faiss B/vector", "streamk train s", "faiss train s",
           "streamk encode s", "faiss encode s"], build_rows,
          f"Memory and build: codes per vector (the ids are rows), training on {len(sample):,} "
          f"vectors, encoding {args.n:,} vectors (all threads)")
    table(["M", "method", "1 query 1 thread ms", f"1 query {all_threads} threads ms",
           f"batched ({len(Q)}) ms/query", "R@1", "R@10", "R@100", "10@10"], search_rows,
          f"Search, N={args.n:,}, k={K}: median ms per query over {len(singles)} queries "
          f"(batched: total / {len(Q)}); recall over {len(Q)} queries")
    if ratio_rows:
        table(["M", "time ratio 1 query 1 thread", f"1 query {all_threads} threads", "batched",
               "R@1 diff", "R@10 diff", "R@100 diff", "10@10 diff"], ratio_rows,
              "streamk / faiss (time: < 1 means streamk faster; recall: streamk - faiss)")
    print(f"\nexact search (BLAS, batched, {all_threads} threads): {1e3 * t_exact / len(Q):.1f} ms/query")
    if args.index_n:
        index_level(args, X, Q, all_threads)
    print(f"load average at end (1/5/15 min): {load_str()}", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000, help="database vectors")
    p.add_argument("--dim", type=int, default=1024, help="dimension D'")
    p.add_argument("--Ms", type=lambda s: [int(x) for x in s.split(",") if x], default=[8, 16, 32, 64])
    p.add_argument("--queries", type=int, default=1000, help="queries (recall, batched time)")
    p.add_argument("--single", type=int, default=100, help="queries timed one at a time")
    p.add_argument("--train", type=int, default=65536, help="training sample (both libraries)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--index-n", type=int, default=0, help="also time StreamingIndex.search on this many vectors")
    p.add_argument("--index-M", type=int, default=16, help="PQ M of the StreamingIndex")
    p.add_argument("--quick", action="store_true",
                   help="N=100,000, 200 queries, 50 timed one at a time, training on 16,384")
    p.add_argument("--no-faiss", action="store_true", help="streamk alone even if faiss is installed")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.queries, args.single = min(args.n, 100_000), min(args.queries, 200), min(args.single, 50)
        args.train = min(args.train, 16384)
    args.single = min(args.single, args.queries)
    return args


if __name__ == "__main__":
    run(parse_args())

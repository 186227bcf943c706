#!/usr/bin/env python
"""A sharded index against one index holding the same vectors: search time and
reader memory at 1M vectors (D' = 1,024, float16) with S = 1, 2, 4 shards, every
number measured in the same run (``bench/distributed.py --shards`` runs this).

    python bench/shards.py                         # 1M vectors, S = 1 (one index), 2, 4
    python bench/shards.py --n 100000 --nlist 1024 # minutes
    python bench/shards.py --workdir /big --keep   # keep the indexes for another run

1. One IVF-PQ codec (``--nlist``, ``--M``) trained on a separate sample, installed
   in one StreamingIndex and in each sharded index (one codec for all shards, as
   ``ShardedIndex.train`` does), then the same N vectors written to each.
2. A reader process per index (``bench/scale.py``'s): time from the process start
   and from the open to the first answer; its memory above an empty index's
   reader; per query (one at a time, 1 thread): ADC alone (k = 100, no re-ranking)
   and the default search (re-ranking the best 100, k = 10); R@1 / R@10 against
   numpy exact search. With S shards the reader opens S shards and searches each
   in turn (one process: the cost of the fan-out itself).
3. The shards owned by Dask actors (a LocalCluster of min(S, cores) single-thread
   workers) and searched from this process: the time per query through the
   actors (scatter, S searches in parallel, gather, merge).

Prints tables; asserts nothing.
"""

import streamk  # first: it sets the thread wait policies before numpy loads its pools  # noqa: F401,I001

import argparse
import hashlib
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# this folder holds bench/distributed.py: it must not shadow the Dask package
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE)]
from common import load_str, log, machine_info, table  # noqa: E402
from scale import Reader, make_encoder, mb, ms, recalls  # noqa: E402
from vectors import centres, database_chunks, draw, exact_topk, make_queries  # noqa: E402

K = 100


def encoded(lo, V):
    """EncodedImage items of vectors V with ids str(lo + j) (the write path itself is not
    what this benchmark measures: bench/scale.py does)."""
    from streamk.index import EncodedImage

    out = []
    for j, v in enumerate(V):
        content = hashlib.sha256(b"vector\0" + hashlib.sha256(v.tobytes()).digest()).digest()
        out.append(EncodedImage(str(lo + j).encode(), v, content, {"kind": "vector"}, None))
    return out


def build(path, S, n, codec, args):
    from streamk.index import StreamingIndex
    from streamk.index.sharded import ShardedIndex

    encoder = make_encoder(args.dim)
    if S == 1:
        idx = StreamingIndex.create(path, encoder, vector_dtype="float16")
        idx.train(codec=codec, progress=False)
    else:
        idx = ShardedIndex.create(path, encoder, shards=S, vector_dtype="float16")
        idx.train(codec=codec)
    t = time.perf_counter()
    for lo, V in database_chunks(n, args.dim, args.seed):
        for s in range(0, len(V), 8192):
            bad = [o for o in idx.write_encoded(encoded(lo + s, V[s:s + 8192])) if o != "added"]
            if bad:
                raise RuntimeError(f"write failed: {bad[0]}")
        log(f"  S={S}: {lo + len(V):,} / {n:,} written ({(lo + len(V)) / (time.perf_counter() - t):,.0f}/s)")
    idx.close()


def dask_search(path, S, Q, args):
    """Per-query time through Dask actors (LocalCluster of min(S, cores) workers)."""
    from distributed import Client, LocalCluster

    from streamk.index.sharded import ShardedIndex

    workers = max(1, min(S, os.cpu_count()))
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                           silence_logs=logging.ERROR)
    client = Client(cluster)
    try:
        with ShardedIndex.open(path, readonly=True, dask=client) as idx:
            idx.search(Q[:1], k=10, rerank=0, nprobe=args.nprobe)  # warm: the shards load their codes
            times = []
            for q in Q[:args.dask_queries]:
                t = time.perf_counter()
                idx.search(q[None, :], k=K, rerank=0, nprobe=args.nprobe)
                times.append(time.perf_counter() - t)
        return statistics.median(times), workers
    finally:
        client.close()
        cluster.close()


def run(args):
    from streamk.index import StreamingIndex
    from streamk.quantization.ivfpq import IVFPQ, default_train_size

    work = Path(args.workdir or tempfile.mkdtemp(prefix="streamk-shards-"))
    work.mkdir(parents=True, exist_ok=True)
    dim, n = args.dim, args.n
    log(f"N = {n:,}, D' = {dim}, IVF{args.nlist}, M = {args.M}, S = {args.shards}; load {load_str()}")
    Q = make_queries(args.queries, dim, args.seed)
    qfile = work / "queries.npy"
    np.save(qfile, Q)
    _, truth = exact_topk(database_chunks(n, dim, args.seed), Q, K)
    codec_file = work / f"codec-{args.nlist}-{args.M}.npz"
    if codec_file.exists():
        codec = IVFPQ.from_bytes(codec_file.read_bytes())
    else:
        n_train = args.train or default_train_size(args.nlist)
        log(f"training IVF{args.nlist},PQ{args.M} on {n_train:,} vectors ...")
        X = draw(np.random.default_rng([args.seed, 3]), n_train, centres(dim, args.seed))
        codec = IVFPQ(nlist=args.nlist, M=args.M, seed=args.seed, kmeans_iter=args.kmeans_iter).fit(X)
        codec_file.write_bytes(codec.to_bytes())
    codec.nprobe = args.nprobe
    empty = work / "empty"
    if not empty.exists():
        StreamingIndex.create(empty, make_encoder(dim), vector_dtype="float16").close()
        with StreamingIndex.open(empty) as e:
            e.train(codec=codec, progress=False)
    r0 = Reader(empty)
    for rerank, k in ((0, K), (None, 10)):  # the same calls as below: the same code loaded
        r0.ask(op="search", queries=str(qfile), k=k, nprobe=args.nprobe, rerank=rerank, threads=1,
               out=str(work / "found.npy"))
    base = r0.ask(op="memory")
    r0.close()
    rows = []
    try:
        for S in args.shards:
            path = work / f"n{n}-s{S}"
            if not path.exists():
                build(path, S, n, codec, args)
            reader = Reader(path)
            first = reader.first
            out = {"S": S, "first": first}
            for key, rerank, k in (("adc", 0, K), ("default", None, 10)):
                # twice: the first pass reads the pages it needs from disk (this VM keeps little page
                # cache), the second runs on cached pages, as a reader that has been up a while
                for when in ("_cold", ""):
                    res = reader.ask(op="search", queries=str(qfile), k=k, nprobe=args.nprobe, rerank=rerank,
                                     threads=1, out=str(work / "found.npy"))
                    out[key + when] = res["median"]
                out[key + "_recall"] = recalls(np.load(work / "found.npy"), truth)
            mem = reader.ask(op="memory")
            out.update(anon=mem["anon"] - base["anon"], file=mem["file"] - base["file"], view=mem["view"])
            reader.close()
            if S > 1 and args.dask:
                out["dask"], out["dask_workers"] = dask_search(path, S, Q, args)
            rows.append(out)
            log(f"S={S}: {out}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report(args, rows)


def report(args, rows):
    info = machine_info()
    print(f"\nmachine: {info['cpu']}, {info['usable_cores']} cores; load {load_str()} at the end")
    print(f"{args.n:,} vectors, D' = {args.dim} (float16 in LMDB), IVF{args.nlist} + PQ{args.M}, one codec; "
          f"nprobe {args.nprobe}; {args.queries} queries, one at a time, 1 thread, median")
    one = rows[0]
    table(["shards", "process start -> first answer s", "open -> first answer s", "reader memory MB (private)",
           "mapped file MB", "ADC k=100 ms (first pass)", "vs one index", "R@1 / R@10 / R@100",
           "default (re-rank 100, k=10) ms (first pass)",
           "its R@1 / R@10", "via Dask actors ms (workers)"],
          [[r["S"] if r["S"] > 1 else "1 (one index)", f"{r['first']['parent_spawn_to_first']:.2f}",
            f"{r['first']['open_to_first']:.3f}", mb(r["anon"]), mb(r["file"]), f"{ms(r['adc'])} ({ms(r['adc_cold'])})",
            f"{r['adc'] / one['adc']:.2f}", " / ".join(f"{x:.3f}" for x in r["adc_recall"]),
            f"{ms(r['default'])} ({ms(r['default_cold'])})",
            " / ".join(f"{x:.3f}" for x in r["default_recall"][:2]),
            f"{ms(r['dask'])} ({r['dask_workers']})" if "dask" in r else "-"] for r in rows],
          title="A sharded index against one index with the same vectors and codec")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--M", type=int, default=64)
    p.add_argument("--nlist", type=int, default=4096)
    p.add_argument("--nprobe", type=int, default=16)
    p.add_argument("--shards", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2, 4])
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--dask-queries", type=int, default=50)
    p.add_argument("--no-dask", dest="dask", action="store_false")
    p.add_argument("--train", type=int, default=None)
    p.add_argument("--kmeans-iter", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default=None)
    p.add_argument("--keep", action="store_true")
    return p.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())

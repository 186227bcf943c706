#!/usr/bin/env python
"""Ingestion on the two executors: images per second of ``Ingester.ingest`` (what
``streamk ingest`` runs) on real photos, with 1 and 2 workers, on the local
process pool and on a Dask LocalCluster.

    python bench/distributed.py [--images ../shared/data/paris6k-subset/jpg] [--n 40]
                                [--k 16] [--workers 1,2] [--repeat 1]

On the first ``--n`` photos of ``--images`` (skipped with a message when absent):

1. an encoder (T-emb k=``--k``, GMP) is trained by ``streamk.training.train_encoder``
   on a sample (``--train-images`` photos taken from the rest of the folder,
   ``--train-descriptors`` descriptors each) on a 2-process local pool, and
   timed apart;
2. for each number of workers W and each executor, ``Ingester.ingest`` of the
   photos into a fresh index (hash, Hessian-affine extraction, encoding in the
   workers, LMDB writes here; no feature cache). The local pool starts its W
   processes inside the call (spawn, imports, encoder, Numba kernels loaded):
   that is part of its time. The Dask cluster (W worker processes of one
   thread) is started before the timing, as a long-lived cluster is; the
   run's spec (the encoder) is sent to its workers and built there inside the
   timing. The order is pool, Dask for each W, ``--repeat`` times; the median
   is kept.
3. two rates: *wall* (images / the whole call) and *steady* (images after
   the first result / the time from the first result to the last one: start-up
   excluded on both executors); and the CPU seconds per image, of the worker
   processes and of this process (which writes, and runs the Dask scheduler and
   nannies): on a machine shared with other jobs, where wall-clock rates follow
   the load, CPU time per image still compares the executors' overheads.

Ratios printed: Dask with 2 workers over 1 (target >= 1.7), and Dask over the
local pool at equal workers (target >= 0.9). The machine is shared: the load
average seen during each run is printed with it. Nothing here asserts a time.

``--shards 1,2,4`` (after the ingestion part, or alone with ``--no-ingest``) runs
``bench/shards.py``: a sharded index against one index holding the same 1M
vectors (``--shard-n``), search time and reader memory with S = 1, 2, 4 shards.
"""

import sys
from pathlib import Path

# This file's name is the Dask package's: its folder must not shadow the package (here
# and in the worker processes, which get this sys.path).
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

import streamk  # first: it sets the thread wait policies before numpy loads its pools  # noqa: E402,F401,I001

import argparse
import importlib.util
import logging
import os
import shutil
import statistics
import tempfile
import time

from streamk import features as feat
from streamk.index import StreamingIndex
from streamk.pipeline.ingest import Ingester, collect_images
from streamk.pipeline.encoder_training import train_encoder
from streamk.parallel import LocalPoolExecutor

_spec = importlib.util.spec_from_file_location("bench_common", HERE / "common.py")
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)
cpu_model, load_str, log, table = common.cpu_model, common.load_str, common.log, common.table

REPO = Path(__file__).resolve().parents[1]
DEFAULT_IMAGES = REPO.parent / "shared" / "data" / "paris6k-subset" / "jpg"


class Timed:
    """An executor wrapper that notes when each result comes back."""

    def __init__(self, executor):
        self.executor, self.name, self.times = executor, executor.name, []

    def map_unordered(self, *args, **kwargs):
        for out in self.executor.map_unordered(*args, **kwargs):
            self.times.append(time.perf_counter())
            yield out

    def close(self):
        pass


def _cpu_of_this_process():
    import psutil

    t = psutil.Process().cpu_times()
    return t.user + t.system


def workers_cpu(executor):
    """CPU seconds used so far by the executor's worker processes: the Dask workers (alive),
    or the local pool's (ended and waited for, so counted in RUSAGE_CHILDREN)."""
    import resource

    if executor.name == "dask":
        return sum(executor.client.run(_cpu_of_this_process).values())
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def ingest_once(encoder, extractor, paths, executor, work, name):
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)
    timed = Timed(executor)
    with StreamingIndex.create(folder, encoder, extractor=extractor) as idx:
        ing = Ingester(idx, executor=timed, progress=False, report=lambda p, r: log(f"  failed {p}: {r}"))
        load0 = os.getloadavg()[0]
        cpu_w0, cpu_p0 = workers_cpu(executor), _cpu_of_this_process()
        t0 = time.perf_counter()
        stats = ing.ingest(paths)
        wall = time.perf_counter() - t0
        cpu_w, cpu_p = workers_cpu(executor) - cpu_w0, _cpu_of_this_process() - cpu_p0
        load1 = os.getloadavg()[0]
    shutil.rmtree(folder, ignore_errors=True)
    n = stats.added
    steady = (len(timed.times) - 1) / (timed.times[-1] - timed.times[0]) if len(timed.times) > 1 else 0.0
    return {"added": n, "failed": stats.n_failed, "wall": wall, "rate": n / wall, "steady": steady,
            "first": timed.times[0] - t0 if timed.times else float("nan"), "load": (load0 + load1) / 2,
            "cpu_workers": cpu_w / max(n, 1), "cpu_parent": cpu_p / max(n, 1)}


def run(args):
    images = Path(args.images)
    if not images.is_dir():
        print(f"bench/distributed.py: {images} not found: nothing to measure (pass --images DIR)")
        return 0
    all_paths, _ = collect_images([images])
    paths = all_paths[:args.n]
    rest = all_paths[args.n:] or all_paths
    if not paths:
        print(f"bench/distributed.py: no image files in {images}")
        return 0
    from distributed import Client, LocalCluster

    from streamk.parallel.dask_executor import DaskExecutor

    extractor = feat.default_extractor()
    work = Path(tempfile.mkdtemp(prefix="streamk-bench-distributed-"))
    for p in paths:  # page cache warm for every timing
        Path(p).read_bytes()
    print("# Ingestion: local pool vs Dask\n")
    print(f"machine: {cpu_model()}, {os.cpu_count()} logical cores; Python {sys.version.split()[0]}; "
          f"extractor {extractor.name}; {len(paths)} photos of {images}")
    print(f"load average at start (1/5/15 min): {load_str()}", flush=True)

    with LocalPoolExecutor(2) as ex:
        encoder, info = train_encoder(rest, {"embedding": "temb", "k": args.k, "aggregation": "gmp"}, extractor, ex,
                                      max_images=args.train_images, descriptors_per_image=args.train_descriptors)
    print(f"encoder: T-emb k={args.k} GMP, dim {encoder.dim}; trained on {info.summary()} on a "
          f"2-process local pool", flush=True)

    results = {}
    for w in args.workers:
        t0 = time.perf_counter()
        cluster = LocalCluster(n_workers=w, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.ERROR)
        client = Client(cluster)
        client.wait_for_workers(w)
        dask = DaskExecutor(client)
        log(f"Dask LocalCluster of {w} worker(s) started in {time.perf_counter() - t0:.1f} s")
        try:
            for r in range(args.repeat):
                for name, ex in (("local pool", LocalPoolExecutor(w)), ("dask", dask)):
                    res = ingest_once(encoder, extractor, paths, ex, work, f"ix-{name}-{w}-{r}")
                    results.setdefault((name, w), []).append(res)
                    log(f"{name}, {w} worker(s), run {r + 1}: {res['added']} added in {res['wall']:.1f} s "
                        f"({res['rate']:.2f} img/s, steady {res['steady']:.2f}), load {res['load']:.2f}")
        finally:
            client.close()
            cluster.close()
    shutil.rmtree(work, ignore_errors=True)

    def med(name, w, key):
        return statistics.median(x[key] for x in results[(name, w)])

    rows = [[name, w, len(paths), f"{med(name, w, 'first'):.1f}", f"{med(name, w, 'wall'):.1f}",
             f"{med(name, w, 'rate'):.3f}", f"{med(name, w, 'steady'):.3f}", f"{med(name, w, 'cpu_workers'):.2f}",
             f"{med(name, w, 'cpu_parent'):.2f}", f"{med(name, w, 'load'):.2f}"]
            for w in args.workers for name in ("local pool", "dask")]
    table(["executor", "workers", "images", "first result s", "wall s", "img/s (wall)", "img/s (steady)",
           "workers CPU s/img", "parent CPU s/img", "load avg"], rows,
          title=f"Ingestion, median of {args.repeat} run(s)")
    if 1 in args.workers and 2 in args.workers:
        print()
        for key in ("rate", "steady"):
            print(f"Dask 2 workers / 1 worker ({key}): {med('dask', 2, key) / med('dask', 1, key):.2f}x "
                  f"(target >= 1.7); local pool 2 / 1: {med('local pool', 2, key) / med('local pool', 1, key):.2f}x")
    for w in args.workers:
        cpu = {name: med(name, w, "cpu_workers") + med(name, w, "cpu_parent") for name in ("local pool", "dask")}
        print(f"CPU s per image at {w} worker(s), workers + parent: local pool {cpu['local pool']:.2f}, "
              f"Dask {cpu['dask']:.2f} (Dask / pool {cpu['dask'] / cpu['local pool']:.2f})")
    for w in args.workers:
        print(f"Dask / local pool at {w} worker(s): wall {med('dask', w, 'rate') / med('local pool', w, 'rate'):.2f}, "
              f"steady {med('dask', w, 'steady') / med('local pool', w, 'steady'):.2f} (target >= 0.90)")
    print(f"load average at the end (1/5/15 min): {load_str()}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", default=str(DEFAULT_IMAGES))
    ap.add_argument("--n", type=int, default=40, help="photos ingested per run")
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--train-images", type=int, default=20)
    ap.add_argument("--train-descriptors", type=int, default=500)
    ap.add_argument("--workers", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-ingest", dest="ingest", action="store_false", help="skip the ingestion part")
    ap.add_argument("--shards", default=None, help="e.g. 1,2,4: also run bench/shards.py with these S")
    ap.add_argument("--shard-n", type=int, default=1_000_000, help="vectors of the sharded benchmark")
    args, shard_args = ap.parse_known_args(argv)
    rc = run(args) if args.ingest else 0
    if args.shards:
        import subprocess
        rc = rc or subprocess.call([sys.executable, str(HERE / "shards.py"), "--shards", args.shards,
                                    "--n", str(args.shard_n), *shard_args])
    return rc


if __name__ == "__main__":
    sys.exit(main())

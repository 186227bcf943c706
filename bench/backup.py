"""What an online backup costs ingestion, and how fast it copies.

    python bench/backup.py [--preload 100000] [--n 30000] [--dim 128]

An index of ``--preload`` synthetic unit vectors (float32, dimension D, a VLAD encoder of
D / 128 words), then three ingests of ``--n`` more vectors each through ``add_many``
(batches of 1,000): without a backup, while another process takes backups back to back
(``streamk.index.backup``: LMDB's compacting copy in one read transaction, then
``check_index`` on the copy), and without again (the baseline is the mean of the two
without). It prints the ingest throughput of each (vectors/s) and their ratio, and each
backup's size, copy time, verification time and MB/s, and one backup of the idle index
for reference. Warm: the map is in the page cache. CPU model and load average printed:
on a shared machine the figures move with the load. Never asserts.
"""

import streamk  # first: it sets the thread wait policies before numpy loads its pools  # noqa: F401,I001

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, table  # noqa: E402

BACKUP_LOOP = r"""
import json, shutil, sys, time
from pathlib import Path
from streamk.index import backup

index, work, stop = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
i = 0
while i == 0 or not stop.exists():  # at least one
    dest = work / f"b{i}"
    r = backup(index, dest, progress=False)
    print(json.dumps({"bytes": r.bytes, "images": r.images, "seconds": r.seconds, "copy": r.copy_seconds}),
          flush=True)
    shutil.rmtree(dest)
    i += 1
"""


def make_encoder(dim):
    from streamk import Encoder

    rng = np.random.default_rng(0)
    sets = [rng.integers(0, 256, (60, 128)).astype(np.float32) for _ in range(8)]
    return Encoder(embedding="vlad", k=dim // 128, aggregation="sum").fit(sets)


def unit_vectors(rng, n, dim):
    V = rng.standard_normal((n, dim)).astype(np.float32)
    return V / np.linalg.norm(V, axis=1, keepdims=True)


def ingest(idx, V, start):
    t = time.perf_counter()
    idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V, start)], batch_size=1000)
    return len(V) / (time.perf_counter() - t)


def backup_row(what, b):
    mb = b["bytes"] / 1e6
    return [what, f"{b['images']:,}", f"{mb:,.1f}", f"{b['copy']:.2f}", f"{b['seconds'] - b['copy']:.2f}",
            f"{mb / b['copy']:,.0f}", f"{mb / b['seconds']:,.0f}"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preload", type=int, default=100000)
    ap.add_argument("--n", type=int, default=30000)
    ap.add_argument("--dim", type=int, default=128)
    args = ap.parse_args()
    from streamk.index import StreamingIndex, backup

    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        path = work / "ix"
        log(f"preloading {args.preload:,} x {args.dim} ...")
        idx = StreamingIndex.create(path, make_encoder(args.dim), vector_dtype="float32")
        ingest(idx, unit_vectors(rng, args.preload, args.dim), 0)
        log("a backup of the idle index ...")
        r = backup(path, work / "idle", progress=False)
        idle = {"bytes": r.bytes, "images": r.images, "seconds": r.seconds, "copy": r.copy_seconds}
        start, rates, backups, loads = args.preload, {}, [], {}
        for phase in ("without (1)", "while backing up", "without (2)"):
            V = unit_vectors(rng, args.n, args.dim)
            log(f"ingesting {args.n:,} {phase} ...")
            child = None
            if phase == "while backing up":
                (work / "loop").mkdir()
                child = subprocess.Popen([sys.executable, "-c", BACKUP_LOOP, str(path), str(work / "loop"),
                                          str(work / "stop")], stdout=subprocess.PIPE, text=True,
                                         env=dict(os.environ, OMP_NUM_THREADS="1"))
                time.sleep(1.0)  # the child imports streamk and starts its first copy
            rates[phase] = ingest(idx, V, start)
            loads[phase] = load_str()
            start += args.n
            if child is not None:
                (work / "stop").touch()
                out, _ = child.communicate(timeout=600)
                backups = [json.loads(line) for line in out.splitlines() if line.strip()]
        idx.close()
    base = (rates["without (1)"] + rates["without (2)"]) / 2
    print(f"CPU: {cpu_model()}; {os.cpu_count()} cores; load {load_str()} (1/5/15 min) at the end")
    table(["ingest", "vectors/s", "vs without (mean)", "load after"],
          [[p, f"{r:,.0f}", f"{r / base:.2f}x", loads[p]] for p, r in rates.items()],
          title=f"add_many of {args.n:,} vectors of {args.dim} float32 (batches of 1,000) into an index of "
                f"{args.preload:,}+: without a backup, and while another process backs it up back to back")
    table(["backup", "images", "MB", "copy s", "verify s", "copy MB/s", "MB/s (copy + verify)"],
          [backup_row("idle index", idle)] + [backup_row(f"during ingest #{i + 1}", b) for i, b in enumerate(backups)],
          title="Backups (LMDB compacting copy in one read transaction, then check_index on the copy)")


if __name__ == "__main__":
    main()

"""What the index's CRC32C checksums cost a search (format 3: every vector block, row, code
block and row code is checked when read).

    python bench/checksums.py [--n 10000] [--dim 1024] [--queries 200]

An index of N synthetic unit vectors (float16, dimension D, a VLAD encoder of D / 128
words), a flat-PQ codec (M = 64). For a PQ search (k = 10, the default re-ranking of the
top 100 by their stored vectors: 100 row checks) and an exact search (every block
checked), it prints the time per query and the time spent computing CRC32C in it
(every call timed, an upper bound: the timer's own cost is in it; and the same calls replayed
in a tight loop), and their ratio to the search; also the CRC32C throughput of this machine
(``crc32c`` wheel) on 64 KiB buffers. Warm: the map is in the page cache. Never asserts.
"""

import streamk  # first: it sets the thread wait policies before numpy loads its pools  # noqa: F401,I001

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, table  # noqa: E402


def make_encoder(dim):
    from streamk import Encoder

    rng = np.random.default_rng(0)
    sets = [rng.integers(0, 256, (60, 128)).astype(np.float32) for _ in range(8)]
    return Encoder(embedding="vlad", k=dim // 128, aggregation="sum").fit(sets)


class Timed:
    """crc32c replaced by itself, timed: calls, bytes and seconds inside it."""

    def __init__(self, fn):
        self.fn, self.calls, self.bytes, self.seconds, self.sizes = fn, 0, 0, 0.0, []

    def __call__(self, data):
        t = time.perf_counter()
        out = self.fn(data)
        self.seconds += time.perf_counter() - t
        self.calls += 1
        self.bytes += memoryview(data).nbytes
        self.sizes.append(memoryview(data).nbytes)
        return out

    def replay(self):
        """Seconds the same calls take in a tight loop (no timer around each)."""
        buf = np.random.default_rng(3).integers(0, 256, max(self.sizes), dtype=np.uint8).tobytes()
        views = [memoryview(buf)[:n] for n in self.sizes]
        t = time.perf_counter()
        for v in views:
            self.fn(v)
        return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    from streamk.index import StreamingIndex, integrity, vector_store
    from crc32c import crc32c

    rng = np.random.default_rng(1)
    V = rng.standard_normal((args.n, args.dim)).astype(np.float32)
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    Q = V[rng.choice(args.n, args.queries, replace=False)] + 0.05 * rng.standard_normal((args.queries, args.dim))
    Q = (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)
    with tempfile.TemporaryDirectory() as work:
        log(f"building {args.n:,} x {args.dim} ...")
        idx = StreamingIndex.create(Path(work) / "ix", make_encoder(args.dim), vector_dtype="float16")
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V)], batch_size=1000)
        idx.train(nlist=1, M=64, progress=False)
        idx.search(Q[:2], k=10)  # load the codes, warm the map
        idx.search(Q[:2], k=10, mode="exact")
        rows = []
        for mode, nq in (("pq", args.queries), ("exact", max(1, args.queries // 10))):
            t = time.perf_counter()
            for q in Q[:nq]:
                idx.search(q[None, :], k=10, mode=mode)
            per_query = (time.perf_counter() - t) / nq
            timed = Timed(crc32c)
            saved = vector_store.crc32c, integrity._crc32c
            vector_store.crc32c = integrity._crc32c = timed
            try:
                for q in Q[:nq]:
                    idx.search(q[None, :], k=10, mode=mode)
            finally:
                vector_store.crc32c, integrity._crc32c = saved
            crc, tight = timed.seconds / nq, timed.replay() / nq
            rows.append([mode, f"{per_query * 1e3:.3f}", f"{timed.calls / nq:,.0f}", f"{timed.bytes / nq / 1024:,.1f}",
                         f"{crc * 1e3:.4f}", f"{tight * 1e3:.4f}", f"{100 * crc / per_query:.2f} %",
                         f"{100 * tight / per_query:.2f} %"])
        idx.close()
    buf = np.random.default_rng(2).integers(0, 256, 1 << 16, dtype=np.uint8).tobytes()
    t = time.perf_counter()
    for _ in range(2000):
        crc32c(buf)
    gbps = 2000 * len(buf) / (time.perf_counter() - t) / 1e9
    print(f"CPU: {cpu_model()}; load {load_str()}; crc32c {gbps:.1f} GB/s on 64 KiB buffers")
    table(["search", "ms / query", "CRC calls", "KiB checked", "CRC ms (timed calls)", "CRC ms (replayed)",
           "share (timed)", "share (replayed)"], rows,
          title=f"CRC32C in a search of {args.n:,} vectors of {args.dim} float16 (k = 10; PQ M = 64, re-ranking 100)")


if __name__ == "__main__":
    main()

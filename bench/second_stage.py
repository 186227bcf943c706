"""The second stage's cost per query at R = 100, at 10k and at 1M images, beside the first
stage's and beside OpenCV's matcher + RANSAC on the same pairs, measured in one run.

    python bench/second_stage.py [--sizes 10000,1000000] [--queries 12] [--R 100] [--nlist 1]
                                 [--expansions aqe,recursive,recursive:1.0] [--expand 50]

Index: N rows; row i holds the real local-geometry record of Paris photo i mod 250
(paris6k-subset, Hessian-affine, the default vocabulary of 64 x 64 visual words learned on
the 250 photos, cached in ~/.cache/streamk/bench/) and a random 64-dimensional vector, so
that a query's top R are R rows spread over the collection: a mix of the 250 photos, one
in five of the query's landmark (more related images than a real first stage finds in a
million, so the count of verified pairs is on the high side). Queries: the 12 official
box queries, their records built as a search builds them (every feature, multiple
assignment).

Per query, one thread (BLAS, OpenMP and Numba limited to 1), after the query's features
and vector exist:

- first stage: the index's own search for the top R (exact at 10k, flat PQ M=16 +
  re-ranking at 1M; ``--nlist 4096``: IVF-PQ, as the README trains an index of a million);
- second stage: the query's record, the R records read from LMDB (by row, one read each),
  verification, re-ranking, the expanded vector and its first-stage search;
- warm: the query run once just before, so that its records' pages are in memory;
  cold: the index's file evicted from the page cache (posix_fadvise DONTNEED after
  closing the map) before each query;
- CPU ms: the thread's CPU time of the warm second stage (``time.thread_time``): what the
  one core spends, whatever else the machine runs (the wall times grow with the load);
- OpenCV: for the same R pairs, RootSIFT nearest neighbours with the ratio test (0.85,
  FLANN kd-trees) and ``cv2.estimateAffine2D`` (RANSAC, 20 px) on the two images' full
  feature sets (what the issue's prototype did per pair, with an affine model).

With ``--expansions`` (a comma list), the warm second stage of each query runs once per
expansion, one after the other (alternated query by query, so that the load weighs on
each alike), and a second table gives each one's CPU ms beside the first's. The vectors
are random here, so an expanded search finds rows the first stage did not: the
recursive expansion then verifies as many new rows as it may, its worst case: R times
``streamk.index.second_stage.RECURSIVE_VERIFICATIONS``, or times S for ``recursive:S``.

Prints, never asserts; the CPU model and the load average are in the table's title.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, paris_features, table  # noqa: E402

import streamk  # noqa: E402,F401  (thread policies before numpy's BLAS loads)

CACHE = Path(os.path.expanduser("~/.cache/streamk/bench"))
DIM = 64


def vocabulary(db):
    from streamk.verification import Vocabulary

    path = CACHE / "paris-vocabulary-64x64.npz"
    if path.exists():
        return Vocabulary.load(path)
    log("learning the vocabulary (once; cached) ...")
    voc = Vocabulary(seed=0).fit([f.descriptors for f in db])
    CACHE.mkdir(parents=True, exist_ok=True)
    voc.save(path)
    return voc


def build(path, n, records, centres, rng, nlist=1):
    from streamk.encoding import Encoder
    from streamk.index import EncodedImage, StreamingIndex, id_key

    X = rng.integers(0, 255, (300, 128)).astype(np.float32)
    encoder = Encoder(embedding="bow", k=DIM, aggregation="sum").fit([X])  # vectors are given, not encoded
    idx = StreamingIndex.create(path, encoder, vector_dtype="float16", store_extras=False, map_size=1 << 30)
    idx.store.write(lambda txn: txn.put(b"local_features", b"1", db=idx.store.meta_db))
    t0 = time.perf_counter()
    for lo in range(0, n, 2048):
        items = []
        for i in range(lo, min(n, lo + 2048)):
            v = rng.standard_normal(DIM)
            v = (v / np.linalg.norm(v)).astype(np.float32)
            items.append(EncodedImage(id_key(f"r{i}"), v, i.to_bytes(32, "big"), {"kind": "vector"}, None,
                                      records[i % len(records)]))
        idx.write_encoded(items)
        if lo % (64 * 2048) == 0:
            log(f"  {lo + len(items):,} rows ({time.perf_counter() - t0:.0f} s)")
    if n > 100_000:
        idx.train(nlist=nlist, M=16)
    return idx


def evict(path):
    fd = os.open(Path(path) / "data.mdb", os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def opencv_pairs(qf, pairs_features, qbox_scale):
    """ms per pair of OpenCV's ratio-test matching + estimateAffine2D RANSAC."""
    import cv2

    from streamk.encoding import rootsift

    cv2.setNumThreads(1)  # one core, as streamk's side; idle OpenCV threads would spin over the next query
    flann = cv2.FlannBasedMatcher({"algorithm": 1, "trees": 4}, {"checks": 64})
    dq = rootsift(qf.descriptors)
    t0 = time.perf_counter()
    for f in pairs_features:
        m = flann.knnMatch(dq, rootsift(f.descriptors), k=2)
        good = [a for a, b in (p for p in m if len(p) == 2) if a.distance < 0.85 * b.distance]
        if len(good) >= 3:
            src = qf.keypoints[[g.queryIdx for g in good], :2]
            dst = f.keypoints[[g.trainIdx for g in good], :2]
            cv2.estimateAffine2D(src, dst, method=cv2.RANSAC, ransacReprojThreshold=20.0)
    return 1000 * (time.perf_counter() - t0) / len(pairs_features)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="10000", help="index sizes (comma list), e.g. 10000,1000000")
    p.add_argument("--queries", type=int, default=12)
    p.add_argument("--R", type=int, default=100)
    p.add_argument("--opencv-pairs", type=int, default=20, help="pairs timed with OpenCV per query")
    p.add_argument("--expansions", default=None, help="expansions timed alternately (comma list; the first "
                                                       "fills the main table; recursive:S: at most S R new "
                                                       "verifications; default: a search's own, SearchParams())")
    p.add_argument("--expand", type=int, default=50, help="verified results in the expanded query (per round)")
    p.add_argument("--nlist", type=int, default=1, help="coarse lists of the first stage's PQ codec above 100k rows "
                                                         "(1: flat PQ; 4096: IVF, what the README trains at a million)")
    return p.parse_args()


def timed_second_stage(idx, voc, qf, q, box, args, mode, expansion):
    """(first stage ms, second stage ms, its CPU ms, the first stage's rows) of one query, in
    one read transaction."""
    import streamk.index.second_stage as stage
    from streamk.index import SearchParams
    from streamk.index.second_stage import query_record, second_stage

    expansion, _, share = expansion.partition(":")
    default_share = stage.RECURSIVE_VERIFICATIONS
    stage.RECURSIVE_VERIFICATIONS = float(share) if share else default_share
    with idx.store.read(buffers=True) as txn:
        idx.view.refresh(txn)
        t0 = time.perf_counter()
        s, r = idx.view.search(txn, q, args.R, mode=mode)
        t1, c1 = time.perf_counter(), time.thread_time()
        qrec = query_record(voc, qf)
        second_stage(idx.view, txn, q[0], r[0], s[0], qrec, SearchParams(
            k=10, verify=args.R, expand=args.expand, expansion=expansion, box=box), mode=mode)
        t2, c2 = time.perf_counter(), time.thread_time()
    stage.RECURSIVE_VERIFICATIONS = default_share
    return 1000 * (t1 - t0), 1000 * (t2 - t1), 1000 * (c2 - c1), r[0]


def main():
    args = parse_args()
    from streamk.index import SearchParams
    from streamk.quantization.ivfpq import default_nprobe

    expansions = (args.expansions or SearchParams().expansion).split(",")

    from threadpoolctl import threadpool_limits

    import numba

    from streamk.verification import stored_record

    ds, db, queries = paris_features()
    voc = vocabulary(db)
    records = [stored_record(voc, f.keypoints, f.descriptors, f.image_size) for f in db]
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((len(db), DIM))
    qidx = [q.index for q in ds.queries][:args.queries]
    rows, by_expansion = [], []
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(dir=os.environ.get("STREAMK_BENCH_DIR")) as tmp:
            log(f"building {n:,} rows ...")
            idx = build(Path(tmp) / "ix", n, records, centres, rng, args.nlist)
            mode = "pq" if idx.view.lists is not None or n > 100_000 else "exact"
            times = {"first": [], "warm": [], "cold": [], "opencv": [], "cpu": []}
            cpu_of = {e: [] for e in expansions}
            pairs = []
            with threadpool_limits(1):
                numba.set_num_threads(1)
                for phase in ("warm-up", "cold", "warm"):
                    for j, qi in enumerate(qidx):
                        qf = queries[j]
                        q = rng.standard_normal(DIM)
                        q = (q / np.linalg.norm(q)).astype(np.float32)[None, :]
                        if phase == "cold":
                            idx.close()
                            evict(Path(tmp) / "ix")
                            from streamk.index import StreamingIndex
                            idx = StreamingIndex.open(Path(tmp) / "ix", readonly=True)
                            idx.refresh()
                        # warm: the same query run just before, so its 100 records' pages are read
                        # (after the cold phase evicted the file, a new query's rows would be on disk)
                        for expansion in (expansions if phase == "warm" else expansions[:1]):
                            for _ in range(2 if phase == "warm" else 1):
                                run = timed_second_stage(idx, voc, qf, q, ds.queries[j].box, args, mode, expansion)
                            if phase == "warm":
                                cpu_of[expansion].append(run[2])
                            if expansion == expansions[0]:
                                first_ms, wall_ms, cpu_ms, r = run
                        if phase != "warm-up":
                            times[phase].append(wall_ms)
                        if phase == "warm":
                            times["cpu"].append(cpu_ms)
                            times["first"].append(first_ms)
                            pairs.append((qf, [db[int(x) % len(db)] for x in r[:args.opencv_pairs] if x >= 0]))
                # OpenCV after streamk's queries, not between them: its matcher leaves the
                # caches cold and, with threads of its own, can take the core streamk's next
                # query runs on
                for qf, cand in pairs:
                    times["opencv"].append(opencv_pairs(qf, cand, 1.0))
            idx.close()
        med = {k: float(np.median(v)) for k, v in times.items()}
        by_expansion += rows_by_expansion(n, cpu_of)
        first = mode if mode == "exact" or args.nlist == 1 else f"IVF{args.nlist}, nprobe {default_nprobe(args.nlist)}"
        rows.append([f"{n:,}", first, f"{med['first']:.2f}", f"{med['warm']:.1f}", f"{med['cpu']:.1f}",
                     f"{med['cold']:.1f}",
                     f"{float(np.percentile(times['warm'], 90)):.1f}", f"{med['opencv']:.0f}",
                     f"{med['opencv'] * args.R:.0f}", f"{med['opencv'] * args.R / med['warm']:.0f}x"])
    sizes = [len(r) for r in records]
    table(["images", "first stage", "first stage ms", "2nd stage ms (warm)", "its CPU ms (warm)",
           "2nd stage ms (cold)",
           "warm p90 ms", "OpenCV ms / pair", f"OpenCV ms / {args.R} pairs", "OpenCV / streamk"], rows,
          title=f"Second stage at R = {args.R}, one thread, median of {len(qidx)} queries; records "
                f"{np.mean(sizes):,.0f} B mean, {max(sizes):,} B max; {voc.n_words} words; CPU {cpu_model()}; "
                f"load {load_str()}")
    if len(expansions) > 1:
        table(["images", "expansion", "CPU ms (warm)", "p90", f"ratio to {expansions[0]} (median per query)"],
              by_expansion, title=f"Second stage by expansion, expand {args.expand}, R = {args.R}, one thread, "
                                  f"{len(qidx)} queries alternated; CPU {cpu_model()}; load {load_str()}")


def rows_by_expansion(n, cpu_of):
    """Table rows of each expansion's warm CPU ms ({expansion: [ms per query]}, the first the reference)."""
    base = np.asarray(next(iter(cpu_of.values())))
    return [[f"{n:,}", e, f"{np.median(c):.1f}", f"{np.percentile(c, 90):.1f}",
             f"{np.median(np.asarray(c) / base):.2f}"]
            for e, c in cpu_of.items()]


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""The streaming index at scale: real LMDB indexes of 10k, 100k and 1M vectors
(D' = 1,024, float16), and 10M codes in memory; every number beside a reference
measured in the same run (faiss ``IndexIVFPQ`` / ``IndexPQ``, numpy exact search).

    python bench/scale.py                            # 10k, 100k, 1M and 10M codes (an hour or more)
    python bench/scale.py --sizes 10000,100000 --no-codes-only   # minutes
    python bench/scale.py --sizes 1000000 --nlist 4096 --M 64 --workdir /big/disk
    python bench/scale.py --sizes 100000,1000000 --workdir /big/disk --open-only --trees OLD,NEW
        # open -> first answer alone, of indexes a run with --keep left there, two streamk trees alternating

Per N (``--vectors scenes``, the default: scenes each seen in SCENE_VIEWS database
rows, the scene points drawn from ``bench/vectors.py``'s Gaussian mixture with the
variance spectrum of RN-rotated image vectors, a view the point plus noise; a query is
one more view of a scene in the database, so its nearest neighbours spread over the
lists around the scene and recall rises with nprobe, as with real image vectors.
``--vectors mixture``: the earlier set, fresh draws of the mixture, recall flat in nprobe):

1. **codec**: IVF-PQ (``nlist`` by N unless given: 256 / 1,024 / 4,096 for 10k /
   100k / 1M; M bytes) trained once on a separate training sample, streamk and faiss
   on the same sample; both trainings timed.
2. **writer**: ``StreamingIndex.create``, the codec installed (``train(codec=...)``),
   then N vectors added through ``add_many`` (batches of 1,024, one transaction
   each, codes computed inline). Add rate of the first 10k and of the last 10k
   (the writer's rate at N).
3. **reader** (a separate process, as ``streamk search`` is, started after the index's
   pages were dropped from the page cache: ``/proc/sys/vm/drop_caches`` where permitted,
   else posix_fadvise DONTNEED on its files): time from the
   process start and from ``StreamingIndex.open`` to the first answer (and the same
   for a second reader started with the pages now cached: warm); resident
   memory after searching, above an empty index's reader with the same codec.
4. **search**, one query at a time (k = 10 and 100, ADC only, no re-ranking, as faiss),
   1 thread (``numba.set_num_threads(1)``, 1 BLAS thread, ``faiss.omp_set_num_threads(1)``)
   (and all threads with ``--all-threads``), median per query, for each ``nprobe``: streamk
   with the ids of the results (``Index.search``) and without (the rows of the view's
   search), faiss with the same nlist, M, nprobe, the three alternating by blocks of
   ``--block`` queries (a load that changes falls on all three), after one untimed pass of
   the queries through each (steady state: a reader's lists and id table filled); recall R@10 (the exact
   nearest neighbour in the first 10) and 10@10 (share of the exact top 10 in the first 10)
   against numpy exact search, for both.
   Plus streamk's default search (ADC top max(4k, 100) re-ranked with the stored
   vectors, k = 10).
5. **keeping up**: the writer (this process) adds one vector, then the reader
   searches; against a search with no change (alternated, median).
6. With ``--flat``, for N <= 100k, the same with flat PQ (nlist = 1) against faiss
   ``IndexPQ`` (retrains the index).

``--codes-only 10000000``: 10M random (list, code) entries built into the
reader's inverted lists in a fresh process: its memory against N (M + 8) bytes,
and its query time.

Prints tables; asserts nothing. Needs faiss for the references (``pip install
faiss-cpu``, the ``bench`` extra); without it, streamk alone.
"""

import streamk  # first: it sets the thread wait policies before numpy loads its pools  # noqa: F401,I001

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

if str(Path(__file__).resolve().parent) not in sys.path:  # (appended: bench/distributed.py shadows Dask)
    sys.path.append(str(Path(__file__).resolve().parent))
from common import load_str, log, machine_info, table  # noqa: E402

# The codecs here are fitted on vectors drawn apart from the index (possibly before its
# first image): the index counts every image added after as unseen by the codec and a
# search would warn at each query (StaleCodecWarning) although the sample was as
# representative as any.
warnings.filterwarnings("ignore", message=".*images were added since the PQ codec was trained")
from vectors import (CHUNK, centres, database_chunks, draw, exact_topk, make_queries, overlap_at,  # noqa: E402
                     recall_at, set_threads, spectrum)

K = 100
ADD_BATCH = 1024
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}  # cpu: the searching thread's CPU time
RATE_WINDOW = 10_000
HERE = Path(__file__).resolve()


def default_nlist(n):
    return 256 if n <= 20_000 else 1024 if n <= 200_000 else 4096


def proc_status():
    """Resident memory of this process (bytes): VmRSS (all), RssAnon (private: what the
    process allocated), RssFile (pages of mapped files: the LMDB map, libraries; the
    kernel maps up to 64 KiB of cached file around each page touched), VmHWM (peak)."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[name] = int(value.split()[0]) * 1024
    return out


def mb(x):
    return f"{x / 2 ** 20:,.0f}"


def ms(s):
    return f"{1e3 * s:.3f}" if s < 0.01 else f"{1e3 * s:.2f}" if s < 1 else f"{1e3 * s:,.0f}"


# ============================================================== the vectors
SCENE_VIEWS = 8  # database rows per scene (consecutive rows; a query is one more view)
SCENE_NOISE = 0.6  # a view's noise, relative to the norm of its scene point


class MixtureVectors:
    """``bench/vectors.py``'s Gaussian mixture, queries fresh draws of it: a query's
    neighbours are nearly equidistant members of its cluster, mostly in one list, so
    recall hardly moves with nprobe."""

    name = "mixture"

    def __init__(self, dim, seed):
        self.dim, self.seed = dim, seed

    def database_chunks(self, n):
        return database_chunks(n, self.dim, self.seed)

    def queries(self, nq, n):
        return make_queries(nq, self.dim, self.seed)

    def sample(self, rng, n):
        """n training (or extra) vectors, drawn apart from the database."""
        return draw(rng, n, centres(self.dim, self.seed))


class SceneVectors(MixtureVectors):
    """Scenes seen in several photos, as in image retrieval: scene points drawn from the
    mixture, each seen in SCENE_VIEWS database rows (the point plus noise, normalised); a
    query is one more view of a scene in the database. A query's nearest neighbours are
    its scene's views, clearly nearer than the rest, yet spread over the lists around
    the scene (the noise crosses list boundaries), so recall rises with nprobe as with
    real image vectors."""

    name = "scenes"

    def _points(self, chunk):
        """The scene points of database chunk ``chunk`` (CHUNK / SCENE_VIEWS of them)."""
        return draw(np.random.default_rng([self.seed, 7, chunk]), CHUNK // SCENE_VIEWS, centres(self.dim, self.seed))

    def _views(self, P, rng, reps):
        sd = spectrum(self.dim)
        X = np.repeat(P, reps, axis=0)
        scale = SCENE_NOISE / float(np.sqrt((sd ** 2).sum()))  # P is unit-norm: noise of norm ~ SCENE_NOISE
        X += scale * rng.standard_normal(X.shape, dtype=np.float32) * sd
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        return X

    def database_chunks(self, n):
        for c, lo in enumerate(range(0, n, CHUNK)):
            m = min(CHUNK, n - lo)
            P = self._points(c)[:-(-m // SCENE_VIEWS)]
            yield lo, self._views(P, np.random.default_rng([self.seed, 8, c]), SCENE_VIEWS)[:m]

    def queries(self, nq, n):
        rng = np.random.default_rng([self.seed, 9])
        scenes = rng.choice(n // SCENE_VIEWS, nq, replace=False)
        per_chunk = CHUNK // SCENE_VIEWS
        P = np.empty((nq, self.dim), np.float32)
        for c in np.unique(scenes // per_chunk):
            sel = scenes // per_chunk == c
            P[sel] = self._points(int(c))[scenes[sel] % per_chunk]
        return self._views(P, rng, 1)

    def sample(self, rng, n):
        return self._views(draw(rng, n, centres(self.dim, self.seed)), rng, 1)


VECTOR_SETS = {v.name: v for v in (SceneVectors, MixtureVectors)}


# ============================================================== the reader process
def reader_main(path, t_spawn):
    """A reader process: open, answer a first query, then commands (JSON lines)."""
    t_import = time.time()
    from threadpoolctl import threadpool_limits

    from streamk.index.sharded import open_index

    t0, c0 = time.perf_counter(), time.process_time()
    idx = open_index(path, readonly=True)  # one index, or the shards of a sharded one
    dim = idx.dim
    q0 = make_queries(1, dim, 12345)[0]
    first = idx.search(q0[None, :], k=10)
    t_first = time.perf_counter() - t0
    reply({"open_to_first": t_first, "open_to_first_cpu": time.process_time() - c0,
           "start_to_import": t_import - t_spawn, "start_to_first": time.time() - t_spawn,
           "found": first[1][0, 0] is not None})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "quit":
            break
        if op == "memory":
            st = proc_status()
            reply({"rss": st["VmRSS"], "anon": st["RssAnon"], "file": st["RssFile"], "peak": st["VmHWM"],
                   "view": idx.stats()["reader_memory"]})
        elif op == "search":  # queries lo..hi-1, one at a time: the seconds of each (and the ids found)
            Q = np.load(cmd["queries"])[cmd.get("lo", 0):cmd.get("hi")]
            set_threads(cmd["threads"])
            clock = CLOCKS[cmd.get("clock", "wall")]
            times, found = [], []
            with threadpool_limits(cmd["threads"], user_api="blas"):
                for q in Q:
                    if cmd.get("rows_only"):  # the view's search, with the ids of its rows or without
                        t = clock()
                        with idx.store.read(buffers=True) as txn:
                            idx.view.refresh(txn)
                            _, rows = idx.view.search(txn, q[None, :], cmd["k"], mode="pq", nprobe=cmd.get("nprobe"),
                                                      rerank=cmd.get("rerank"))
                            if cmd.get("view_ids"):
                                idx.view.ids_of(txn, rows)
                        times.append(clock() - t)
                        continue
                    t = clock()
                    _, ids = idx.search(q[None, :], k=cmd["k"], mode="pq", nprobe=cmd.get("nprobe"),
                                        rerank=cmd.get("rerank"))
                    times.append(clock() - t)
                    found.append([int(i) if i is not None and i.isdigit() else -1 for i in ids[0]])
            if cmd.get("out"):
                np.save(cmd["out"], np.array(found, np.int64))
            reply({"times": times, "median": statistics.median(times), "mean": float(np.mean(times))})
        elif op == "scanned":  # entries of the lists each query probes (what its scan reads), mean
            Q = np.load(cmd["queries"])
            with idx.store.read(buffers=True) as txn:
                idx.view.refresh(txn)
            probes, _ = idx.view.codec.probe(Q, cmd["nprobe"])
            reply({"per_query": float(idx.view.lists.size[probes].sum()) / len(Q)})
        elif op == "one":
            q = np.load(cmd["queries"])[cmd["i"]]
            t = time.perf_counter()
            idx.search(q[None, :], k=10, mode="pq", nprobe=cmd.get("nprobe"), rerank=0)
            reply({"seconds": time.perf_counter() - t})
    idx.close()


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Reader:
    """The parent's handle on a reader process (``tree``: the streamk it imports, a source
    tree put first on its PYTHONPATH; None: this process's)."""

    def __init__(self, path, tree=None):
        t = time.time()
        env = None if tree is None else dict(os.environ, PYTHONPATH=str(tree))
        self.proc = subprocess.Popen([sys.executable, str(HERE), "--reader", str(path), repr(t)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.first = self._read()
        self.first["parent_spawn_to_first"] = time.time() - t

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the reader process died")
        return json.loads(line)

    def ask(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            self.proc.kill()


# ============================================================== pieces
def make_encoder(dim):
    """An encoder whose vectors have dimension ``dim`` (VLAD, dim / 128 words): the
    benchmark adds vectors, so only the dimension matters."""
    from streamk import Encoder
    rng = np.random.default_rng(0)
    sets = [rng.integers(0, 256, (200, 128)).astype(np.float32) for _ in range(4)]
    return Encoder(embedding="vlad", k=dim // 128, aggregation="sum").fit(sets)


def train_codecs(args, nlist, dim, work):
    """streamk's and faiss's trained codecs (kept in ``work`` and reused by a later run
    with the same settings: training is the longest step at 1M)."""
    from streamk.quantization.ivfpq import IVFPQ, default_train_size
    n_train = args.train or default_train_size(nlist)
    cache = work / f"codecs-{args.vset.name}-IVF{nlist}-PQ{args.M}-{n_train}-{args.kmeans_iter}-{args.seed}"
    if (cache / "times.json").exists():
        times = json.loads((cache / "times.json").read_text())
        fx = None
        if args.faiss and (cache / "faiss.index").exists():
            import faiss
            fx = faiss.read_index(str(cache / "faiss.index"))
        log(f"  trained codecs reused from {cache}")
        return (IVFPQ.from_bytes((cache / "streamk.npz").read_bytes()), fx, times["streamk"],
                times.get("faiss") if fx is not None else None, n_train)
    codec, fx, t_ours, t_faiss, n_train = _train_codecs(args, nlist, dim, n_train)
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "streamk.npz").write_bytes(codec.to_bytes())
    if fx is not None:
        import faiss
        faiss.write_index(fx, str(cache / "faiss.index"))
    (cache / "times.json").write_text(json.dumps({"streamk": t_ours, "faiss": t_faiss}))
    return codec, fx, t_ours, t_faiss, n_train


def _train_codecs(args, nlist, dim, n_train):
    from streamk.quantization.ivfpq import IVFPQ
    X = args.vset.sample(np.random.default_rng([args.seed, 3]), n_train)
    log(f"  training IVF{nlist},PQ{args.M} on {n_train:,} vectors (streamk) ...")
    t = time.perf_counter()
    codec = IVFPQ(nlist=nlist, M=args.M, seed=args.seed, kmeans_iter=args.kmeans_iter).fit(X)
    t_ours = time.perf_counter() - t
    fx, t_faiss = None, None
    if args.faiss:
        import faiss
        log("  training faiss IndexIVFPQ ...")
        fx = faiss.index_factory(dim, f"IVF{nlist},PQ{args.M}", faiss.METRIC_INNER_PRODUCT)
        fx.cp.niter = args.kmeans_iter
        t = time.perf_counter()
        fx.train(X)
        t_faiss = time.perf_counter() - t
    return codec, fx, t_ours, t_faiss, n_train


def build_index(path, n, codec, args, dim):
    """The writer: create, install the codec, add n vectors; (index, first-10k rate, last-10k rate)."""
    from streamk.index import StreamingIndex
    idx = StreamingIndex.create(path, make_encoder(dim), vector_dtype="float16")
    idx.train(codec=codec, progress=False)
    marks = []  # (rows added, seconds) at each batch
    t0 = time.perf_counter()
    for lo, V in args.vset.database_chunks(n):
        for s in range(0, len(V), ADD_BATCH):
            part = V[s:s + ADD_BATCH]
            res = idx.add_many(({"id": str(lo + s + j), "vector": v} for j, v in enumerate(part)),
                               batch_size=ADD_BATCH)
            bad = [r for r in res if r.status != "added"]
            if bad:
                raise RuntimeError(f"add failed: {bad[0]}")
            marks.append((lo + s + len(part), time.perf_counter() - t0))
        log(f"  added {lo + len(V):,} / {n:,} ({(lo + len(V)) / (time.perf_counter() - t0):,.0f}/s)")

    def rate(first_row, last_row):
        t_a = max([t for r, t in marks if r <= first_row], default=0.0)
        t_b = min(t for r, t in marks if r >= last_row)
        r_a = max([r for r, t in marks if r <= first_row], default=0)
        r_b = min(r for r, t in marks if r >= last_row)
        return (r_b - r_a) / (t_b - t_a)
    return idx, rate(0, min(n, RATE_WINDOW)), rate(max(0, n - RATE_WINDOW), n), marks[-1][1]


def faiss_search(fx, Q, k, nprobe, threads, clock="wall"):
    import faiss
    faiss.omp_set_num_threads(threads)
    if hasattr(fx, "nprobe"):
        fx.nprobe = nprobe
    times, found = [], []
    clock = CLOCKS[clock]
    for q in Q:
        t = clock()
        _, I = fx.search(q[None, :], k)
        times.append(clock() - t)
        found.append(I[0])
    return times, np.array(found)


def faiss_scanned(fx, Q, nprobe):
    """Codes faiss's scan reads per query (its IVF statistics), mean."""
    import faiss
    fx.nprobe = nprobe
    faiss.cvar.indexIVF_stats.reset()
    fx.search(Q, 10)
    return faiss.cvar.indexIVF_stats.ndis / len(Q)


def imbalance_factor(sizes):
    """nlist * sum_l n_l^2 / N^2, as faiss's Clustering reports it: 1 for even lists; the
    codes an average query scans, over N nprobe / nlist, when queries are distributed as
    the database."""
    sizes = np.asarray(sizes, np.float64)
    return float(len(sizes) * (sizes ** 2).sum() / max(sizes.sum(), 1.0) ** 2)


def faiss_imbalance(fx):
    import faiss
    invlists = faiss.extract_index_ivf(fx).invlists
    return imbalance_factor([invlists.list_size(i) for i in range(invlists.nlist)])


def faiss_add(fx, n, args):
    t = time.perf_counter()
    for lo, V in args.vset.database_chunks(n):
        fx.add(V)
    return n / (time.perf_counter() - t)


def recalls(found, truth):
    return [recall_at(found, truth, r) for r in (1, 10, 100)]


# ============================================================== one size
def drop_page_cache(path, how="auto"):
    """Drop the index's files from the page cache: the whole cache where permitted (root:
    ``echo 3 > /proc/sys/vm/drop_caches``; ``how`` "auto"), else, or with ``how``
    "fadvise", each file's pages (posix_fadvise DONTNEED; pages another process maps
    stay). Returns how."""
    os.sync()
    try:
        if how == "fadvise":
            raise PermissionError("asked for")
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "drop_caches"
    except OSError:
        for f in Path(path).iterdir():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        return "fadvise"


def cold_and_warm_readers(path, how="auto", tree=None):
    """(the reader started with the index's pages dropped from the page cache, its first
    answer's times, those of a second reader started then: with the pages the first one
    read still cached); the second is closed."""
    cold = drop_page_cache(path, how)
    reader = Reader(path, tree)
    first = dict(reader.first, cold=cold)
    warm_reader = Reader(path, tree)
    warm_reader.close()
    return reader, first, warm_reader.first


def run_open_only(args):
    """``--open-only``: open -> first answer of existing indexes (``--workdir``), cold and warm,
    ``--open-repeats`` times, the source trees of ``--trees`` alternating (each reader a fresh
    process); medians."""
    trees = args.trees or [None]
    rows = []
    for n in args.sizes:
        path = Path(args.workdir) / f"ix{n}-{args.vset.name}"
        if not (path / "data.mdb").exists():
            sys.exit(f"no index at {path}: build it first (--sizes {n} --workdir {args.workdir} --keep)")
        got = {str(t): [] for t in trees}
        for rep in range(args.open_repeats):
            for tree in trees if rep % 2 == 0 else trees[::-1]:  # ABBA: a load that drifts falls on both
                reader, first, warm = cold_and_warm_readers(path, args.drop, tree)
                reader.close()
                got[str(tree)].append((first, warm))
                log(f"  N {n:,} tree {tree}: cold {first['open_to_first']:.3f} s "
                    f"(CPU {first['open_to_first_cpu']:.3f}), "
                    f"spawn -> first {first['parent_spawn_to_first']:.2f} s, warm {warm['open_to_first']:.3f} s; "
                    f"load {load_str()}")
        for tree, runs in got.items():
            med = {key: statistics.median(f[key] for f, _ in runs) for key in
                   ("open_to_first", "open_to_first_cpu", "parent_spawn_to_first", "start_to_import")}
            med_warm = {key: statistics.median(w[key] for _, w in runs) for key in
                        ("open_to_first", "open_to_first_cpu", "parent_spawn_to_first")}
            rows.append({"n": n, "tree": tree, "cold": runs[0][0]["cold"], "runs": runs, "median": med,
                         "median_warm": med_warm, "load": load_str()})
    where = f"[{machine_info()['cpu']}; load {load_str()}] "
    table(["N", "tree", "page cache", "runs", "cold: open -> first s", "of it CPU s", "spawn -> first s",
           "warm: open -> first s", "of it CPU s", "spawn -> first s", "each cold open -> first s", "load"],
          [[f"{r['n']:,}", r["tree"], r["cold"], len(r["runs"]), f"{r['median']['open_to_first']:.3f}",
            f"{r['median']['open_to_first_cpu']:.3f}", f"{r['median']['parent_spawn_to_first']:.2f}",
            f"{r['median_warm']['open_to_first']:.3f}", f"{r['median_warm']['open_to_first_cpu']:.3f}",
            f"{r['median_warm']['parent_spawn_to_first']:.2f}",
            " ".join(f"{f['open_to_first']:.2f}" for f, _ in r["runs"]), r["load"]] for r in rows],
          title=where + "Open -> first answer (a reader process each time, the index dropped from the page cache "
                "before the cold one; warm: a second reader right after), medians")
    return rows


def existing_index(path, n):
    """The index at ``path`` when it holds n images (``--reuse``), else None."""
    from streamk.index import StreamingIndex
    if not (path / "data.mdb").exists():
        return None
    idx = StreamingIndex.open(path)
    if len(idx) == n:
        return idx
    idx.close()
    return None


def timed_searches(args, reader, fx, Q, qfile, k, nprobe, threads):
    """Per-query seconds of streamk (with the ids, and the rows alone) and faiss, the three
    alternating by blocks of queries (a load that changes meanwhile falls on all three);
    and the ids / rows each found."""
    times = {"ids": [], "view_ids": [], "rows": [], "faiss": []}
    found, found_f = [], []
    block = args.block
    clock = args.clock if threads == 1 else "wall"  # a thread's CPU time misses the others'
    # one untimed pass first: what a reader does once (lists read as first probed, result
    # blocks of its id table filled) is not charged to whichever column runs first
    reader.ask(op="search", queries=str(qfile), k=k, nprobe=nprobe, rerank=0, threads=threads, clock=clock)
    if fx is not None:
        faiss_search(fx, Q, k, nprobe, threads, clock)
    for lo in range(0, len(Q), block):
        hi = min(len(Q), lo + block)
        res = reader.ask(op="search", queries=str(qfile), lo=lo, hi=hi, k=k, nprobe=nprobe, rerank=0,
                         threads=threads, clock=clock, out=str(qfile.with_name("found.npy")))
        times["ids"] += res["times"]
        found.append(np.load(qfile.with_name("found.npy")))
        for key, view_ids in (("rows", False), ("view_ids", True)):
            times[key] += reader.ask(op="search", queries=str(qfile), lo=lo, hi=hi, k=k, nprobe=nprobe, rerank=0,
                                     threads=threads, clock=clock, rows_only=True, view_ids=view_ids)["times"]
        if fx is not None:
            tf, ff = faiss_search(fx, Q[lo:hi], k, nprobe, threads, clock)
            times["faiss"] += tf
            found_f.append(ff)
    med = {key: statistics.median(t) if t else None for key, t in times.items()}
    return med, np.concatenate(found), (np.concatenate(found_f) if found_f else None)


def run_size(args, n, work, rows_out):
    dim = args.dim
    vset = args.vset
    nlist = args.nlist or default_nlist(n)
    log(f"N = {n:,}: IVF{nlist}, M = {args.M}, vectors {vset.name}; load {load_str()}")
    Q = vset.queries(args.queries, n)
    qfile = work / "queries.npy"
    np.save(qfile, Q)
    t = time.perf_counter()
    _, truth = exact_topk(vset.database_chunks(n), Q, K)
    t_exact = (time.perf_counter() - t) / len(Q)
    codec, fx, t_train, t_train_faiss, n_train = train_codecs(args, nlist, dim, work)
    path = work / f"ix{n}-{vset.name}"
    idx = existing_index(path, n) if args.reuse else None
    if idx is None:
        shutil.rmtree(path, ignore_errors=True)  # the writer's rates are part of the measure: built anew
        idx, rate_first, rate_last, t_build = build_index(path, n, codec, args, dim)
    else:
        log(f"  index reused from {path}")
        rate_first = rate_last = t_build = None
    rate_faiss = faiss_add(fx, n, args) if fx is not None else None
    disk = sum(f.stat().st_size for f in path.iterdir())

    # an empty index's reader with the same codec: the memory baseline
    from streamk.index import StreamingIndex
    shutil.rmtree(work / "empty", ignore_errors=True)
    empty = StreamingIndex.create(work / "empty", make_encoder(dim), vector_dtype="float16")
    empty.train(codec=codec, progress=False)
    empty.close()
    r0 = Reader(work / "empty")
    base = r0.ask(op="memory")
    r0.close()

    idx.close()  # nothing of the index left mapped here: the reader opens it cold
    reader, first, warm = cold_and_warm_readers(path, args.drop)
    mem = reader.ask(op="memory")
    out = {"n": n, "nlist": nlist, "M": args.M, "train": n_train, "t_train": t_train,
           "t_train_faiss": t_train_faiss, "rate_first": rate_first, "rate_last": rate_last,
           "rate_faiss": rate_faiss, "t_build": t_build, "disk": disk, "first": first, "warm": warm,
           "rss": mem["rss"], "rss_empty": base["rss"], "anon": mem["anon"] - base["anon"],
           "file": mem["file"] - base["file"], "peak": mem["peak"], "view": mem["view"],
           "t_exact_numpy": t_exact, "search": [], "vectors": vset.name, "load": load_str()}

    # the database's lists under streamk's codec (the reader's lists come in as probed)
    imbalance = imbalance_factor(sum(np.bincount(codec.assign(V), minlength=nlist)
                                     for _, V in vset.database_chunks(n)))
    for nprobe in args.nprobes if nlist > 1 else [1]:
        if nprobe > nlist:
            continue
        for k in args.ks:
            row = {"nprobe": nprobe, "k": k}
            med, found, found_f = timed_searches(args, reader, fx, Q, qfile, k, nprobe, 1)
            row.update(t1=med["ids"], t1_view_ids=med["view_ids"], t1_rows=med["rows"], faiss_t1=med["faiss"])
            row["recall"] = recalls(found, truth)
            row["scanned"] = reader.ask(op="scanned", queries=str(qfile), nprobe=nprobe)["per_query"]
            row["faiss_scanned"] = faiss_scanned(fx, Q, nprobe) if fx is not None else None
            row["imbalance"], row["faiss_imbalance"] = imbalance, faiss_imbalance(fx) if fx is not None else None
            row["overlap10"] = overlap_at(found, truth, 10)
            if found_f is not None:
                row["faiss_recall"] = recalls(found_f, truth)
                row["faiss_overlap10"] = overlap_at(found_f, truth, 10)
            if args.all_threads:
                med, _, _ = timed_searches(args, reader, fx, Q[:args.single], qfile, k, nprobe, args.threads)
                row.update(tall=med["ids"], faiss_tall=med["faiss"])
            out["search"].append(row)
            log(f"  nprobe {nprobe}, k {k}: {row}; load {load_str()}")
    res = reader.ask(op="search", queries=str(qfile), k=10, nprobe=args.default_nprobe, rerank=None,
                     threads=1, out=str(work / "found.npy"))
    out["rerank"] = {"t1": res["median"], "recall": recalls(np.load(work / "found.npy"), truth)[:2]}

    # keeping up: add one vector (the writer, this process), then the reader searches
    idx = StreamingIndex.open(path)
    extra = vset.sample(np.random.default_rng([args.seed, 9]), args.refresh_reps)
    plain, after = [], []
    for i in range(args.refresh_reps):
        plain.append(reader.ask(op="one", queries=str(qfile), i=i % len(Q), nprobe=args.default_nprobe)["seconds"])
        idx.add(f"extra{i}", vector=extra[i])
        after.append(reader.ask(op="one", queries=str(qfile), i=i % len(Q), nprobe=args.default_nprobe)["seconds"])
    out["one_plain"], out["one_after_add"] = statistics.median(plain), statistics.median(after)
    reader.close()
    idx.remove([f"extra{i}" for i in range(args.refresh_reps)])

    if n <= 100_000 and args.flat:
        out["flat"] = run_flat(args, n, idx, Q, qfile, truth, work, dim)
    idx.close()
    rows_out.append(out)
    if not args.keep:
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(work / "empty", ignore_errors=True)
    return out


def run_flat(args, n, idx, Q, qfile, truth, work, dim):
    """Flat PQ (nlist = 1) in the same index (retrained), against faiss IndexPQ."""
    from streamk.quantization.ivfpq import IVFPQ
    X = args.vset.sample(np.random.default_rng([args.seed, 3]), args.train or 65536)
    flat = IVFPQ(nlist=1, M=args.M, seed=args.seed).fit(X)
    idx.train(codec=flat, progress=False)
    reader = Reader(idx.path)
    row = {}
    for threads, key in ((1, "t1"), (args.threads, "tall")):
        res = reader.ask(op="search", queries=str(qfile), k=K, rerank=0, threads=threads, out=str(work / "found.npy"))
        row[key] = res["median"]
        if threads == 1:
            row["recall"] = recalls(np.load(work / "found.npy"), truth)
            row["t1_rows"] = reader.ask(op="search", queries=str(qfile), k=K, rerank=0, threads=1, rows_only=True,
                                        out=str(work / "found.npy"))["median"]
    row["rss"] = reader.ask(op="memory")["rss"]
    reader.close()
    if args.faiss:
        import faiss
        fx = faiss.IndexPQ(dim, args.M, 8, faiss.METRIC_INNER_PRODUCT)
        fx.train(X)
        faiss_add(fx, n, args)
        for threads, key in ((1, "t1"), (args.threads, "tall")):
            tf, found = faiss_search(fx, Q, K, 1, threads)
            row["faiss_" + key] = statistics.median(tf)
            if threads == 1:
                row["faiss_recall"] = recalls(found, truth)
    return row


# ============================================================== 10M codes, in memory
def codes_only_main(n, nlist, M, nprobe, nq):
    """A fresh process: the reader's inverted lists of n random entries."""
    from threadpoolctl import threadpool_limits

    from streamk.quantization.inverted_lists import InvertedLists
    from streamk.quantization import merge_topk  # noqa: F401  (compiled before the memory reading)

    rng = np.random.default_rng(0)
    before = proc_status()["RssAnon"]
    chunk = 1 << 20

    def parts():
        for lo in range(0, n, chunk):
            r = np.random.default_rng([1, lo])
            m = min(chunk, n - lo)
            yield (r.integers(0, nlist, m, dtype=np.uint32), r.integers(0, 256, (m, M), dtype=np.uint8),
                   np.arange(lo, lo + m, dtype=np.int64))
    dead = np.zeros(n, np.uint8)
    t = time.perf_counter()
    lists = InvertedLists.build(nlist, M, parts, dead, 0xFFFFFFFF)
    t_build = time.perf_counter() - t
    after = proc_status()["RssAnon"]
    tables = rng.standard_normal((1, M, 256)).astype(np.float32)
    times = {}
    for threads in (1, os.cpu_count()):
        set_threads(threads)
        with threadpool_limits(threads, user_api="blas"):
            ts = []
            for _ in range(nq):
                probes = np.sort(rng.choice(nlist, nprobe, replace=False))[None, :].astype(np.int64)
                coarse = rng.standard_normal((1, nprobe)).astype(np.float32)
                t = time.perf_counter()
                lists.search(probes, coarse, tables, dead, K)
                ts.append(time.perf_counter() - t)
            times[threads] = statistics.median(ts)
    reply({"n": n, "rss_increase": after - before, "dead": dead.nbytes, "arena": lists.memory_bytes(),
           "t_build": t_build, "t1": times[1], "tall": times[os.cpu_count()], "peak": proc_status()["VmHWM"]})


def run_codes_only(args):
    log(f"{args.codes_only:,} codes in memory (IVF{args.codes_only_nlist}, M = {args.M}) ...")
    out = subprocess.run([sys.executable, str(HERE), "--codes-only-worker", str(args.codes_only),
                          str(args.codes_only_nlist), str(args.M), str(args.default_nprobe)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ============================================================== report
def report(args, rows, codes_only):
    info = machine_info()
    where = f"[{info['cpu']}; load {load_str()}] "  # every table says where it was measured
    print(f"\nmachine: {info['cpu']}, {info['usable_cores']} cores; Python {info['python']}, numpy "
          f"{info['numpy']}, numba {info['numba']}; load {load_str()} at the end")
    print(f"vectors: {args.vectors}, D' = {args.dim}, float16 in LMDB; {args.queries} queries; "
          f"M = {args.M}; one query at a time; median per query")

    def num(x, fmt):
        return "-" if x is None else format(x, fmt)
    table(["N", "nlist", "add/s first 10k", "add/s last 10k", "last / first", "faiss add/s", "build s",
           "disk MB", "train s", "faiss train s"],
          [[f"{r['n']:,}", r["nlist"], num(r["rate_first"], ",.0f"), num(r["rate_last"], ",.0f"),
            f"{r['rate_last'] / r['rate_first']:.2f}" if r["rate_first"] else "-", num(r["rate_faiss"], ",.0f"),
            num(r["t_build"], ",.0f"), mb(r["disk"]), num(r["t_train"], ".0f"), num(r["t_train_faiss"], ".0f")]
           for r in rows],
          title=where + "Writer: add rate (add_many, 1,024 per transaction, codes inline) and training "
                "('-': the index was reused)")
    table(["N", "reader RSS MB", "empty index's reader MB", "above empty MB", "of which private MB",
           "of which mapped file MB", "N (M+8) MB", "peak MB",
           "process start -> first answer s", "open -> first answer s", "of it CPU s", "page cache",
           "warm: open -> first answer s", "of it CPU s", "search ms", "after 1 add ms", "ratio"],
          [[f"{r['n']:,}", mb(r["rss"]), mb(r["rss_empty"]), mb(r["rss"] - r["rss_empty"]), mb(r["anon"]),
            mb(r["file"]), mb(r["n"] * (r["M"] + 8)), mb(r["peak"]), f"{r['first']['parent_spawn_to_first']:.2f}",
            f"{r['first']['open_to_first']:.3f}", f"{r['first'].get('open_to_first_cpu', float('nan')):.3f}",
            f"cold ({r['first']['cold']})", f"{r['warm']['open_to_first']:.3f}",
            f"{r['warm']['open_to_first_cpu']:.3f}", ms(r["one_plain"]),
            ms(r["one_after_add"]), f"{r['one_after_add'] / r['one_plain']:.2f}"] for r in rows],
          title=where + "Reader (a separate process, the index's pages dropped from the page cache before it starts): "
                "memory, open -> first answer (cold; warm: a second reader started after the first one's "
                f"answer), a search right after one add (nprobe {args.default_nprobe}, k = 10)")
    lines = []
    for r in rows:
        for s in r["search"]:
            f = s.get("faiss_t1") is not None
            lines.append([f"{r['n']:,}", f"IVF{r['nlist']}", s["nprobe"], s["k"], ms(s["t1"]), ms(s["t1_view_ids"]),
                          ms(s["t1_rows"]), ms(s["faiss_t1"]) if f else "-",
                          f"{s['t1'] / s['faiss_t1']:.2f}" if f else "-",
                          f"{s['t1_view_ids'] / s['faiss_t1']:.2f}" if f else "-",
                          f"{s['t1_rows'] / s['faiss_t1']:.2f}" if f else "-",
                          f"{s['recall'][1]:.3f} / {s['overlap10']:.3f}",
                          f"{s['faiss_recall'][1]:.3f} / {s['faiss_overlap10']:.3f}" if f else "-",
                          ms(s["tall"]) if "tall" in s else "-",
                          ms(s["faiss_tall"]) if s.get("faiss_tall") is not None else "-", r["load"]])
        if "flat" in r:
            s = r["flat"]
            f = "faiss_t1" in s
            lines.append([f"{r['n']:,}", "flat PQ", "-", K, ms(s["t1"]), "-", ms(s["t1_rows"]),
                          ms(s["faiss_t1"]) if f else "-", f"{s['t1'] / s['faiss_t1']:.2f}" if f else "-", "-",
                          f"{s['t1_rows'] / s['faiss_t1']:.2f}" if f else "-", f"{s['recall'][1]:.3f} / -",
                          f"{s['faiss_recall'][1]:.3f} / -" if f else "-", ms(s["tall"]),
                          ms(s["faiss_tall"]) if f else "-", r["load"]])
    table(["N", "codec", "nprobe", "k", "streamk ms (API)", "streamk ms (ids)", "streamk ms (rows)", "faiss ms",
           "streamk / faiss (API)", "streamk / faiss (ids)", "streamk / faiss (rows)", "streamk R@10 / 10@10",
           "faiss R@10 / 10@10",
           f"streamk {args.threads} threads ms", f"faiss {args.threads} threads ms", "load"], lines,
          title=where + f"Search (ADC, no re-ranking), 1 thread ({args.clock} time), against faiss IndexIVFPQ "
                f"with the same nlist, M, nprobe "
                f"(alternating by blocks of {args.block} queries); (API): Index.search, the ids included; (ids): the "
                "view's search and the ids of its k results; (rows): the view's search alone; "
                "R@10: the exact nearest neighbour in the first 10; 10@10: share of the exact top 10 in the first 10")
    table(["N", "codec", "nprobe", "streamk codes scanned", "faiss codes scanned", "streamk / faiss",
           "streamk imbalance", "faiss imbalance"],
          [[f"{r['n']:,}", f"IVF{r['nlist']}", s["nprobe"], f"{s['scanned']:,.0f}",
            "-" if s.get("faiss_scanned") is None else f"{s['faiss_scanned']:,.0f}",
            "-" if not s.get("faiss_scanned") else f"{s['scanned'] / s['faiss_scanned']:.2f}",
            "-" if s.get("imbalance") is None else f"{s['imbalance']:.2f}",
            "-" if s.get("faiss_imbalance") is None else f"{s['faiss_imbalance']:.2f}"]
           for r in rows for s in r["search"] if s["k"] == r["search"][0]["k"] and "scanned" in s],
          title=where + "Codes each query's scan reads (the entries of the lists it probes), mean: each "
                "codec's coarse quantiser (trained apart) balances its lists its own way, so equal nprobe may "
                "be unequal work; imbalance: nlist sum n_l^2 / N^2 of the database's lists (1: even)")
    table(["N", "numpy exact ms/query (all threads)", f"streamk default (nprobe {args.default_nprobe}, "
           "re-rank top 100, k = 10) ms", "its R@1 / R@10"],
          [[f"{r['n']:,}", ms(r["t_exact_numpy"]), ms(r["rerank"]["t1"]),
            " / ".join(f"{x:.3f}" for x in r["rerank"]["recall"])] for r in rows],
          title=where + "Exact search (the reference) and streamk's default search with re-ranking (1 thread)")
    if codes_only:
        c = codes_only
        table(["N codes", "nlist", "memory MB", "N (M + 8) MB", "ratio", "build s", "search 1 thread ms",
               f"search {os.cpu_count()} threads ms"],
              [[f"{c['n']:,}", args.codes_only_nlist, mb(c["rss_increase"]), mb(c["n"] * (args.M + 8)),
                f"{c['rss_increase'] / (c['n'] * (args.M + 8)):.2f}", f"{c['t_build']:.1f}", ms(c["t1"]),
                ms(c["tall"])]],
              title=where + f"Codes only, in memory: the reader's inverted lists (random codes, nprobe "
                    f"{args.default_nprobe}, k = {K})")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--M", type=int, default=64)
    p.add_argument("--nlist", type=int, default=None, help="default: by N (256 / 1024 / 4096)")
    p.add_argument("--nprobes", default="4,16,64")
    p.add_argument("--default-nprobe", type=int, default=16)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--single", type=int, default=200, help="queries timed with all threads")
    p.add_argument("--train", type=int, default=None, help="training vectors (default: max(65536, 32 nlist))")
    p.add_argument("--kmeans-iter", type=int, default=20)
    p.add_argument("--refresh-reps", type=int, default=30)
    p.add_argument("--codes-only", type=int, default=10_000_000, help="0: skip")
    p.add_argument("--codes-only-nlist", type=int, default=4096)
    p.add_argument("--no-codes-only", dest="codes_only", action="store_const", const=0)
    p.add_argument("--flat", action="store_true", help="also flat PQ against faiss IndexPQ (N <= 100k; retrains "
                   "the index)")
    p.add_argument("--vectors", choices=sorted(VECTOR_SETS), default="scenes",
                   help="scenes (default): recall rises with nprobe; mixture: the earlier set")
    p.add_argument("--ks", default="10,100", help="result counts timed")
    p.add_argument("--block", type=int, default=25, help="queries per block (streamk and faiss alternate)")
    p.add_argument("--all-threads", action="store_true", help="also time with all threads")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                   help="1-thread searches timed by wall time, or by the searching thread's CPU time (cpu: "
                        "fair when other work shares the cores)")
    p.add_argument("--reuse", action="store_true", help="reuse an index of the same N and vectors in --workdir")
    p.add_argument("--no-faiss", dest="faiss", action="store_false")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default=None, help="where the indexes go (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the indexes")
    p.add_argument("--json", default=None, help="also write every number here")
    p.add_argument("--open-only", action="store_true", help="only open -> first answer of the indexes already in "
                   "--workdir (made with --keep), cold and warm")
    p.add_argument("--open-repeats", type=int, default=3, help="--open-only: readers per tree (medians)")
    p.add_argument("--trees", default=None, help="--open-only: source trees whose streamk the readers import, "
                   "alternating (comma-separated; default: this process's)")
    p.add_argument("--drop", choices=("auto", "fadvise"), default="auto", help="how the index leaves the page "
                   "cache: auto: drop_caches where permitted, else fadvise; fadvise: its files' pages only")
    args = p.parse_args(argv)
    args.trees = [Path(t).resolve() for t in args.trees.split(",")] if args.trees else None
    args.sizes = [int(x) for x in args.sizes.split(",") if x]
    args.nprobes = [int(x) for x in args.nprobes.split(",") if x]
    args.ks = [int(x) for x in args.ks.split(",") if x]
    args.vset = VECTOR_SETS[args.vectors](args.dim, args.seed)
    args.threads = os.cpu_count()
    if args.faiss:
        try:
            import faiss  # noqa: F401
        except ImportError:
            log("faiss is not installed (pip install faiss-cpu): streamk alone")
            args.faiss = False
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--reader"]:
        return reader_main(argv[1], float(argv[2]))
    if argv[:1] == ["--codes-only-worker"]:
        return codes_only_main(*(int(x) for x in argv[1:5]), nq=200)
    args = parse_args(argv)
    if args.open_only:
        if not args.workdir:
            sys.exit("--open-only needs --workdir (the indexes a run with --keep left there)")
        rows = run_open_only(args)
        if args.json:
            Path(args.json).write_text(json.dumps({"open": rows}, indent=1, default=str))
        return
    work = Path(args.workdir or tempfile.mkdtemp(prefix="streamk-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for n in args.sizes:
            run_size(args, n, work, rows)
        codes_only = run_codes_only(args) if args.codes_only else None
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    report(args, rows, codes_only)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "codes_only": codes_only}, indent=1, default=str))


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Ingestion benchmark: the CPU cost of each stage of describing and storing a photo, the
whole ingest's rate against the rate those costs allow, and the time a second process
takes from its start to its first search answer.

    python bench/ingest.py [--images ../shared/data/paris6k-subset/jpg] [--k 16] [--workers N]
                           [--limit N] [--fit-images 50] [--sections stages,ingest,extractors,...]
                           [--runs 3] [--quick]

In one run, on the same photos and workers (the files read once first: page cache warm):

1. an encoder (T-emb k=``--k``, GMP, the index default otherwise) and the visual words of
   the local geometry (``Vocabulary``, as ``streamk index create`` makes by default) are
   fitted on the descriptors of ``--fit-images`` photos spread over the folder (not timed);
2. "stages": each photo described stage by stage in this process on one thread (BLAS,
   Numba and OpenCV limited to 1, as in an ingestion worker), the CPU time
   (``time.process_time``) of each stage alone: read + sha256, decode, extraction,
   RootSIFT + embedding, aggregation (Gram, weights, xi), post-processing, visual words +
   geometry record, file metadata, the result's way back from the worker (pickle), the
   record and the commit in the parent (batches of 64), and the thumbnail (made for the
   server's uploads, not by ``ingest``: shown, not summed). Beside the encoding, measured
   image by image: ``Encoder.encode`` whole, and the GEMM floor of its shapes as
   ``bench/aggregation.py`` defines it (numpy float32 ``R @ P``, n x kd x D, and
   ``Phi @ Phi.T``, n x n x D), so that "encoding / floor" and the share of the encoding
   outside the paper's kernels (projection, Gram, weights, xi) come from the same images;
3. "ingest": ``Ingester(index, workers=W).ingest(photos)`` -- what ``streamk ingest``
   runs -- into a fresh index with those visual words: wall time, the time to its first
   result (pool start, worker imports, encoder load), the steady rate after it, the CPU
   of the parent and of the workers, and from ``/proc/stat`` what the other processes of
   the machine used meanwhile; then the ratios: measured rate / (W cores / summed stage
   CPU per image), the target being >= 0.9;
4. "extractors": Hessian-affine (pyhesaff) and OpenCV SIFT on the same decoded 1024-px
   photos, one thread: CPU ms and features per photo (quality: ``streamk eval
   --extractor``, bench/README.md);
5. "legacy" (off by default): extraction alone (``extract_many``, empty feature cache),
   the encoding from cached features in one process, and "resume" (every file hashed
   and skipped);
6. "second": a second process: ``python -c "import streamk.index; StreamingIndex.open(...);
   idx.search(...)"`` started from here, for a vector query (exact and PQ; a few synthetic
   vectors are added so that PQ can train on >= 256 images) and for an image query
   (extraction and encoding in that process); one warm-up run fills the Numba cache,
   then the median of ``--runs`` runs, split into interpreter start, ``import
   streamk.index``, ``open`` and first ``search``, with the count of Numba functions
   the process had to compile (0 = all loaded from the cache).

The machine's CPU model (``lscpu``'s model name) and the load average are printed with the
tables. Nothing here asserts a time; the script prints tables and ratios.
"""

import streamk  # first: it sets the thread wait policies before numpy loads its pools  # noqa: F401,I001

import argparse
import contextlib
import hashlib
import json
import os
import pickle
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streamk import features as feat
from streamk.errors import ExtractorUnavailableError
from streamk.encoding import _kernels as enc_kernels
from streamk.encoding import aggregation as agg
from streamk.encoding.encoder import Encoder
from streamk.encoding.embeddings import rootsift
from streamk.encoding.postprocessing import postprocess
from streamk.index import ImageDescription, StreamingIndex, encoded_image_file
from streamk.parallel import default_workers
from streamk.pipeline import extract_many
from streamk.pipeline.ingest import Ingester, collect_images
from streamk.verification import Vocabulary, stored_record

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_IMAGES = REPO.parent / "shared" / "data" / "paris6k-subset" / "jpg"
SECTIONS = ("stages", "ingest", "extractors", "legacy", "second")
DEFAULT_SECTIONS = ("stages", "ingest", "extractors", "second")
BATCH = 64  # images per write transaction, as Ingester's default
CPU = time.process_time  # every thread of this process: a library's own threads are counted


# ---------------------------------------------------------------- the machine
def cpu_ticks():
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat (None where absent)."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def busy_cores(before, after, seconds):
    """Cores kept busy by every process of the machine between two :func:`cpu_ticks`."""
    if before is None or after is None or seconds <= 0:
        return float("nan")
    return (after[0] - before[0]) / os.sysconf("SC_CLK_TCK") / seconds


@contextlib.contextmanager
def one_thread():
    """BLAS, OpenMP, Numba and OpenCV on one thread, as in an ingestion worker process."""
    import numba
    from threadpoolctl import threadpool_limits

    cv2 = sys.modules.get("cv2")
    numba_threads, cv2_threads = numba.get_num_threads(), cv2.getNumThreads() if cv2 else None
    with threadpool_limits(1):
        numba.set_num_threads(1)
        if cv2:
            cv2.setNumThreads(1)
        try:
            yield
        finally:
            numba.set_num_threads(numba_threads)
            if cv2:
                cv2.setNumThreads(cv2_threads)


def timed(acc, name, fn, *args):
    """fn(*args), its CPU seconds added to acc[name] (a list: one entry per image)."""
    t = CPU()
    out = fn(*args)
    acc.setdefault(name, []).append(CPU() - t)
    return out


# ---------------------------------------------------------------- 2. stages
STAGES = [  # (key, what the table calls it, where it runs)
    ("read", "read + sha256", "worker"),
    ("decode", "decode (Pillow, JPEG draft to 1024 px)", "worker"),
    ("extract", "extraction (detector + descriptors)", "worker"),
    ("embed", "RootSIFT + embedding (T-emb: residuals, R @ P, centring, row L2)", "worker"),
    ("aggregate", "aggregation (Gram, weights, xi)", "worker"),
    ("post", "post-processing (power-law, L2)", "worker"),
    ("geometry", "visual words + geometry record", "worker"),
    ("metadata", "file metadata (stat, EXIF date)", "worker"),
    ("pipe", "result to the parent (pickle + unpickle)", "both"),
    ("commit", "record + commit (LMDB, batches of 64)", "parent"),
]


def encode_by_parts(acc, encoder, X):
    """Encoder.encode's steps one by one, each timed: (vector, weights, (n, kd, D), R, Phi)."""
    c = encoder.config
    emb = encoder.embedding
    Xr = timed(acc, "embed", lambda: rootsift(X) if c.rootsift else np.asarray(X, np.float32))
    t = CPU()
    E = emb.embed(Xr)
    acc["embed"][-1] += CPU() - t
    if isinstance(E, np.ndarray):  # dense: the Gram (one triangle, as aggregate_many), the weights and xi timed apart
        with agg.gram_memory(E) as memory:
            K = timed(acc, "gram", agg.gram_upper, np.ascontiguousarray(E), memory)
            if c.aggregation == "sum":
                alpha = timed(acc, "weights", np.ones, E.shape[0])
            else:
                alpha = timed(acc, "weights", agg.dense_weights, K, c.aggregation, c.gamma, c.n_iter, c.lam, c.tol,
                              c.max_iter)
        xi = timed(acc, "xi", lambda: (alpha.astype(E.dtype) @ E).astype(np.float64))
        acc.setdefault("aggregate", []).append(acc["gram"][-1] + acc["weights"][-1] + acc["xi"][-1])
    else:
        xi, alpha = timed(acc, "aggregate", lambda: agg.aggregate_many(
            E, (c.aggregation,), c.gamma, c.n_iter, c.lam, c.tol, c.max_iter)[c.aggregation])
    v = timed(acc, "post", lambda: postprocess(xi, c.power, encoder.rn).astype(np.float32))
    return v, alpha, E


def gemm_floor(acc, encoder, Xr, Phi):
    """bench/aggregation.py's floor for this image's shapes: R @ P and Phi @ Phi.T (numpy float32)."""
    emb = encoder.embedding
    if not hasattr(emb, "projection_"):
        return
    R = enc_kernels.triangulation_residuals(Xr, emb.centroids_)  # the floor's input, not timed
    timed(acc, "floor_proj", lambda: R @ emb.projection_)
    timed(acc, "floor_gram", lambda: Phi @ Phi.T)


def describe_by_stages(acc, path, extractor, encoder, vocabulary):
    """One photo through every stage of an ingestion worker, each timed alone; returns the
    worker's result (a dict as ``ingest_task`` sends) and the photo's bytes."""
    data = timed(acc, "read", lambda: extractor.read(path))
    t = CPU()
    sha = hashlib.sha256(data).hexdigest()
    acc["read"][-1] += CPU() - t
    small, size = timed(acc, "decode", feat.decode_gray_scaled, data, path, extractor.max_side,
                        extractor.max_pixels, extractor.features_version >= 2)
    f = timed(acc, "extract", extractor.extract_array, small)
    f = feat.Features(f.keypoints, f.descriptors, size)  # coordinates do not matter to the costs
    v, alpha, Phi = encode_by_parts(acc, encoder, f.descriptors)
    record = timed(acc, "geometry", stored_record, vocabulary, f.keypoints, f.descriptors, f.image_size)
    meta = timed(acc, "metadata", feat.file_metadata, path, data)
    desc = ImageDescription(sha, size, f.keypoints, v, np.asarray(alpha, np.float32), record)
    out = {"path": path, "id": Path(path).name, "error": None, "stored_sha256": None, "sha256": sha,
           "description": desc, "metadata": meta}
    back = timed(acc, "pipe", lambda: pickle.loads(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)))
    timed(acc, "thumbnail", feat.thumbnail_jpeg, data, path)
    # references, image by image: the whole encode, and the GEMM floor of the same shapes
    whole = timed(acc, "encode", lambda: encoder.encode(f.descriptors, return_weights=True))
    acc.setdefault("cos", []).append(float(np.dot(whole[0], v) / np.linalg.norm(whole[0]) / np.linalg.norm(v)))
    if isinstance(Phi, np.ndarray):
        gemm_floor(acc, encoder, rootsift(f.descriptors), Phi)
    acc.setdefault("n", []).append(len(f))
    return back


def measure_stages(paths, extractor, encoder, vocabulary, index_dir):
    """{stage: [CPU seconds per image]} of every photo, one thread, and the parent's commit."""
    acc = {}
    with one_thread():
        describe_by_stages({}, str(paths[0]), extractor, encoder, vocabulary)  # every library and kernel loaded
        results = [describe_by_stages(acc, str(p), extractor, encoder, vocabulary) for p in paths]
    idx = StreamingIndex.create(index_dir, encoder, extractor=extractor, vocabulary=vocabulary)
    t_commit = 0.0
    for s in range(0, len(results), BATCH):
        t = CPU()
        batch = [r["description"].encoded(r["id"], r["path"], metadata=r["metadata"]) for r in results[s:s + BATCH]]
        outcomes = idx.write_encoded(batch)
        t_commit += CPU() - t
        assert all(o == "added" for o in outcomes), outcomes
    idx.close()
    acc["commit"] = [t_commit / len(results)] * len(results)
    return acc


def ms(values):
    return 1e3 * float(np.mean(values)) if values else float("nan")


def stage_rows(acc):
    """The stage table's rows and its sums: (rows, {worker, parent, total} ms per image)."""
    rows, sums = [], {"worker": 0.0, "parent": 0.0}
    for key, name, where in STAGES:
        v = ms(acc.get(key, []))
        if where == "both":  # pickling in the worker, unpickling in the parent: counted once, in the worker
            sums["worker"] += v
        else:
            sums[where] += v
        rows.append([name, where, f"{v:.1f}"])
    sums["total"] = sums["worker"] + sums["parent"]
    rows.append(["**sum, one image**", "", f"**{sums['total']:.1f}**"])
    rows.append(["thumbnail (server uploads; not made by `ingest`, not summed)", "server",
                 f"{ms(acc['thumbnail']):.1f}"])
    return rows, sums


def print_encoding_ratios(acc):
    """Encoding against its GEMM floor, and what lies around the paper's kernels."""
    enc = ms(acc["encode"])
    parts = ms(acc["embed"]) + ms(acc["aggregate"]) + ms(acc["post"])
    print(f"\nencoding, `Encoder.encode` whole: {enc:.1f} ms per image (the stages above: {parts:.1f}; "
          f"cos(vector by parts, whole) >= {min(acc['cos']):.6f}); {np.mean(acc['n']):.0f} descriptors per image "
          f"(min {min(acc['n'])}, max {max(acc['n'])})")
    if "floor_proj" not in acc:
        return
    proj, gram = ms(acc["floor_proj"]), ms(acc["floor_gram"])
    floor = proj + gram
    kernels = ms(acc["gram"]) + ms(acc["weights"]) + ms(acc["xi"]) + proj  # R @ P: as the floor's
    rows = [["GEMM floor: R @ P (n x kd x D)", f"{proj:.1f}", ""],
            ["GEMM floor: Phi @ Phi.T (n x n x D)", f"{gram:.1f}", ""],
            ["GEMM floor, sum", f"{floor:.1f}", "1.00"],
            ["Encoder.encode (whole)", f"{enc:.1f}", f"**{enc / floor:.2f}**"],
            ["of which the Gram (syrk, one triangle)", f"{ms(acc['gram']):.1f}", f"{ms(acc['gram']) / floor:.2f}"],
            ["of which the weights (CG / Sinkhorn)", f"{ms(acc['weights']):.1f}", f"{ms(acc['weights']) / floor:.2f}"],
            ["of which xi = Phi^T alpha", f"{ms(acc['xi']):.1f}", f"{ms(acc['xi']) / floor:.2f}"],
            ["around the paper's kernels (encode - projection - Gram - weights - xi)",
             f"{enc - kernels:.1f}", f"{(enc - kernels) / floor:.2f}"]]
    table(["encoding, one thread, CPU ms per image", "ms", "/ floor"], rows,
          "Encoding against bench/aggregation.py's GEMM floor of the same shapes, image by image "
          "(target: encode / floor <= 1.2; around the kernels a small share)")
    print(f"\nencode / GEMM floor = {enc / floor:.2f}: {'MET' if enc / floor <= 1.2 else 'MISSED'} (<= 1.2); "
          f"around the paper's kernels: {100 * (enc - kernels) / enc:.1f} % of the encoding; the weights "
          f"(the paper's solver, not a GEMM): {100 * ms(acc['weights']) / enc:.1f} %")


# ---------------------------------------------------------------- 3. the whole ingest
def measure_ingest(paths, encoder, extractor, vocabulary, workers, index_dir, max_inflight=None):
    """``Ingester.ingest`` of the photos into a fresh index: times, CPU, the machine's busy cores."""
    idx = StreamingIndex.create(index_dir, encoder, extractor=extractor, vocabulary=vocabulary)
    ing = Ingester(idx, workers=workers, progress=False, report=lambda p, r: log(f"failed: {p}: {r}"),
                   max_inflight=max_inflight)
    handled = []
    handle = ing._handle  # the bench wraps the parent's per-result step to time each result

    def timed_handle(r):
        handled.append(time.perf_counter())
        return handle(r)

    ing._handle = timed_handle
    kids0, cpu0, ticks0 = resource.getrusage(resource.RUSAGE_CHILDREN), CPU(), cpu_ticks()
    t0 = time.perf_counter()
    stats = ing.ingest([str(p) for p in paths])
    wall = time.perf_counter() - t0
    ticks1, cpu1, kids1 = cpu_ticks(), CPU(), resource.getrusage(resource.RUSAGE_CHILDREN)
    idx.close()
    kids = (kids1.ru_utime - kids0.ru_utime) + (kids1.ru_stime - kids0.ru_stime)
    first = handled[0] - t0 if handled else float("nan")
    steady = (len(handled) - 1) / (handled[-1] - handled[0]) if len(handled) > 1 else float("nan")
    return {"added": stats.added, "failed": stats.n_failed, "wall": wall, "first": first, "steady": steady,
            "parent_cpu": cpu1 - cpu0, "workers_cpu": kids, "busy": busy_cores(ticks0, ticks1, wall),
            "load": load_str()}


def print_ingest(res, sums, workers, n):
    """The ingest's row and its ratios to the rate the stage costs allow."""
    rate = res["added"] / res["wall"]
    allowed = workers / (sums["total"] / 1e3)
    ours = (res["parent_cpu"] + res["workers_cpu"]) / res["wall"]
    cpu_img = 1e3 * (res["parent_cpu"] + res["workers_cpu"]) / max(1, res["added"])
    rows = [["images added / failed", f"{res['added']} / {res['failed']}"],
            ["wall s (pool start included)", f"{res['wall']:.1f}"],
            ["first result after s (spawn, imports, encoder, warm-up, first photo)", f"{res['first']:.1f}"],
            ["**images/s, whole run**", f"**{rate:.2f}**"],
            ["images/s, steady (first result to last)", f"{res['steady']:.2f}"],
            [f"images/s allowed: {workers} cores / {sums['total']:.0f} CPU ms (the stages' sum)", f"{allowed:.2f}"],
            ["**measured / allowed, whole run** (target >= 0.9)", f"**{rate / allowed:.2f}**"],
            ["measured / allowed, steady", f"{res['steady'] / allowed:.2f}"],
            ["CPU ms per image: workers + parent (start-up included)",
             f"{cpu_img:.0f} ({1e3 * res['workers_cpu'] / n:.0f} + {1e3 * res['parent_cpu'] / n:.0f})"],
            ["CPU per image / the stages' sum", f"{cpu_img / sums['total']:.2f}"],
            ["cores this ingest used (its CPU / wall)", f"{ours:.2f} of {workers}"],
            ["measured / the rate those cores allow (the stages' sum): nothing serialised = 1",
             f"{rate / (ours / (sums['total'] / 1e3)):.2f}"],
            ["cores the whole machine used meanwhile (/proc/stat)", f"{res['busy']:.2f} of {os.cpu_count()}"],
            ["load average at its end", res["load"]]]
    table(["whole ingest (`Ingester.ingest`)", "value"], rows,
          f"Whole ingest of the same {n} photos, {workers} worker process(es), local geometry on")
    others = res["busy"] - ours
    print(f"\nmeasured / allowed = {rate / allowed:.2f}: {'MET' if rate / allowed >= 0.9 else 'MISSED'} (>= 0.9); "
          f"the machine's other processes kept {others:.2f} of its {os.cpu_count()} cores busy meanwhile"
          + (": the ingest did not have the cores it was given" if others > 0.2 else ""))


# ---------------------------------------------------------------- 4. extractors
def compare_extractors(paths, names):
    """CPU ms (one thread) and features per 1024-px photo for each extractor, on the same decoded photos."""
    extractors = {}
    for name in names:
        try:
            extractors[name] = feat.make_extractor(name)
        except ExtractorUnavailableError as exc:  # a library missing here: said, not measured
            log(f"extractor {name}: unavailable ({exc})")
    acc = {name: {"cpu": [], "n": []} for name in extractors}
    with one_thread():
        for p in paths:
            ex0 = next(iter(extractors.values()))
            small, _ = feat.decode_gray_scaled(ex0.read(p), p, ex0.max_side, ex0.max_pixels)
            for name, ex in extractors.items():  # interleaved: the load hits each alike
                t = CPU()
                f = ex.extract_array(small)
                acc[name]["cpu"].append(CPU() - t)
                acc[name]["n"].append(len(f))
    rows = []
    base = ms(acc[names[0]]["cpu"]) if names[0] in acc else float("nan")
    for name, a in acc.items():
        ex = extractors[name]
        rows.append([name, json.dumps(ex.versions()), f"{ms(a['cpu']):.0f}", f"{ms(a['cpu']) / base:.2f}",
                     f"{np.mean(a['n']):.0f}", f"{np.median(a['n']):.0f}"])
    table(["extractor", "library", "CPU ms per photo", f"/ {names[0]}", "features (mean)", "features (median)"],
          rows, f"Extractors on the same {len(paths)} decoded photos (long side 1024), one thread")


# ---------------------------------------------------------------- the second process

CHILD = r"""
import json, sys, time
t0 = time.time()
import numpy as np
import streamk.index
t1 = time.time()
path, query, mode = sys.argv[1], sys.argv[2], sys.argv[3]
idx = streamk.index.StreamingIndex.open(path, readonly=True)
t2 = time.time()
if query.endswith(".npy"):
    query = np.load(query)
hits = idx.search(query, k=10, mode=mode)
t3 = time.time()
import numba.core.registry, streamk
compiled, loaded = 0, 0
for name, mod in list(sys.modules.items()):
    if name.startswith("streamk"):
        for obj in vars(mod).values():
            stats = getattr(obj, "stats", None)
            if isinstance(obj, numba.core.registry.CPUDispatcher) and stats is not None:
                compiled += sum(stats.cache_misses.values())
                loaded += sum(stats.cache_hits.values())
print(json.dumps({"t0": t0, "t1": t1, "t2": t2, "t3": t3, "top": hits[0][0], "n": len(hits),
                  "compiled": compiled, "loaded": loaded,
                  "modules": sorted(m for m in ("scipy", "sklearn", "numba", "lmdb", "pyhesaff", "cv2",
                                                "PIL", "tqdm") if m in sys.modules)}))
"""


def second_process(index_dir, query, mode):
    """One child process: {"start", "import", "open", "search", "answer", "exit", ...} in seconds."""
    t_before = time.time()
    out = subprocess.run([sys.executable, "-c", CHILD, str(index_dir), str(query), mode],
                         check=False, capture_output=True, text=True, cwd=str(REPO))
    t_after = time.time()
    if out.returncode != 0:
        raise RuntimeError(f"second process failed:\n{out.stderr}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"start": r["t0"] - t_before, "import": r["t1"] - r["t0"], "open": r["t2"] - r["t1"],
            "search": r["t3"] - r["t2"], "answer": r["t3"] - t_before, "exit": t_after - r["t3"],
            "total": t_after - t_before, "compiled": r["compiled"], "loaded": r["loaded"],
            "modules": r["modules"], "top": r["top"]}


# ---------------------------------------------------------------- 5. legacy rows
def legacy_rows(paths, extractor, encoder, workers, work):
    """Extraction alone into an empty cache, then the encoding from the cached features in one
    process (read, encode, write), and a resume of the whole ingest (all hashed and skipped)."""
    cache_dir = work / "features"
    t0 = time.perf_counter()
    feats, errors = extract_many(paths, extractor, cache_dir=cache_dir, workers=workers, progress=False)
    t_extract = time.perf_counter() - t0
    idx = StreamingIndex.create(work / "index-legacy", encoder, extractor=extractor)
    cache = feat.FeatureCache(cache_dir)
    t_read = t_enc = t_write = 0.0
    added = failed = 0
    batch = []
    t0 = time.perf_counter()
    for i, p in enumerate(paths):
        t = time.perf_counter()
        data = Path(p).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        f = cache.get(sha, extractor)
        t_read += time.perf_counter() - t
        if f is None or len(f) == 0:
            failed += 1
            continue
        t = time.perf_counter()
        v, alpha = encoder.encode(f.descriptors, return_weights=True)
        batch.append(encoded_image_file(Path(p).name, p, sha, v, f.keypoints, alpha, f.image_size))
        t_enc += time.perf_counter() - t
        if len(batch) >= BATCH or i == len(paths) - 1:
            t = time.perf_counter()
            added += sum(o == "added" for o in idx.write_encoded(batch))
            t_write += time.perf_counter() - t
            batch.clear()
    t_b = time.perf_counter() - t0
    ing = Ingester(idx, workers=workers, progress=False, report=lambda p, r: None)
    t0 = time.perf_counter()
    st = ing.ingest([str(p) for p in paths])  # every id known: hashed and skipped
    t_r = time.perf_counter() - t0
    idx.close()
    rows = [[f"extraction alone (`extract_many`, {workers} processes, empty cache)", len(feats), len(errors),
             f"{t_extract:.1f}", f"{len(feats) / t_extract:.2f}"],
            ["extraction excluded (cached features: read, encode, write; 1 process, all threads)", added, failed,
             f"{t_b:.1f}", f"{added / t_b:.2f}"],
            ["resume (`Ingester.ingest` again: all hashed and skipped)", st.existing, st.n_failed,
             f"{t_r:.1f}", f"{st.processed / t_r:.1f}"]]
    table(["run", "images", "failed", "seconds", "images/s"], rows, "Other rows (wall time)")
    print(f"\nextraction excluded, split: feature-cache read {t_read:.1f} s, encode {t_enc:.1f} s "
          f"({1e3 * t_enc / max(1, added):.0f} ms/image, wall, this process's threads), LMDB write {t_write:.2f} s; "
          f"load {load_str()}")


# ---------------------------------------------------------------- 6. the second process
def second_process_rows(paths, encoder, extractor, work, runs):
    """Start -> first answer of a fresh process, for vector and image queries (median of ``runs``)."""
    # a photo without features is left out with its name (zipping the kept features with all paths misnamed them)
    fits = [(p, f) for p, f in ((p, extractor.extract(p)) for p in paths[:8]) if len(f)]
    idx = StreamingIndex.create(work / "index-second", encoder, extractor=extractor)
    for p, f in fits:
        idx.add(Path(p).name, descriptors=f.descriptors)
    vecs = np.stack([idx.vector(i) for i in idx.ids()])
    rng = np.random.default_rng(0)
    extra = max(0, 256 - len(vecs))
    for j in range(extra):  # PQ trains on >= 256 vectors
        v = vecs[j % len(vecs)] + 0.05 * rng.standard_normal(vecs.shape[1]).astype(np.float32) / np.sqrt(vecs.shape[1])
        idx.add(f"synthetic-{j}", vector=v)
    M = next(m for m in (16, 8, 4, 2, 1) if encoder.dim % m == 0)
    idx.train_pq(M=M)
    idx.close()
    np.save(work / "query.npy", vecs[len(vecs) // 2])
    variants = [("vector query, exact", work / "query.npy", "exact"),
                (f"vector query, PQ (M={M})", work / "query.npy", "pq"),
                ("image query, exact (extraction + encoding in the process)", paths[len(paths) // 3], "exact")]
    srows = []
    for name, query, mode in variants:
        second_process(work / "index-second", query, mode)  # warm-up: fills the Numba cache if needed
        rs = [second_process(work / "index-second", query, mode) for _ in range(runs)]
        med = {key: statistics.median(r[key] for r in rs) for key in
               ("start", "import", "open", "search", "answer", "exit", "total")}
        srows.append([name, f"{med['answer']:.2f}", f"{med['start']:.2f}", f"{med['import']:.2f}",
                      f"{med['open']:.3f}", f"{med['search']:.3f}", f"{med['exit']:.2f}",
                      max(r["compiled"] for r in rs), max(r["loaded"] for r in rs)])
        log(f"{name}: {med} modules {rs[-1]['modules']} (load {load_str()})")
    table(["query", "start -> answer s", "interpreter", "import streamk.index", "open", "first search",
           "exit", "Numba compiled", "Numba loaded"], srows,
          f"Second process (`python -c`), index of {len(vecs) + extra} images, warm Numba cache: "
          f"median of {runs} runs (target start -> answer <= 2 s)")


# ---------------------------------------------------------------- main
def fit_models(paths, extractor, k, fit_images):
    """(encoder, vocabulary, seconds) fitted on the descriptors of ``fit_images`` photos spread over ``paths``."""
    step = max(1, len(paths) // fit_images)
    t0 = time.perf_counter()
    sets = [f.descriptors for f in (extractor.extract(p) for p in paths[::step][:fit_images]) if len(f)]
    encoder = Encoder(embedding="temb", k=k, aggregation="gmp").fit(sets)
    vocabulary = Vocabulary(seed=0).fit(sets)
    return encoder, vocabulary, len(sets), time.perf_counter() - t0


def prepare(args):
    """(photos, work folder) or None when there is nothing to measure."""
    images = Path(args.images)
    if not images.is_dir():
        print(f"bench/ingest.py: {images} not found: nothing to measure (download it with "
              f"`streamk datasets download paris6k-subset --dir ...`, or pass --images DIR)")
        return None
    paths, _ = collect_images([images])
    paths = [str(p) for p in (paths[:args.limit] if args.limit else paths)]
    if not paths:
        print(f"bench/ingest.py: no image files in {images}")
        return None
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="streamk-bench-ingest-"))
    work.mkdir(parents=True, exist_ok=True)
    for p in work.iterdir():  # a kept work dir starts empty: every index here is fresh
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    for p in paths:  # page cache warm for every timing
        Path(p).read_bytes()
    return paths, work


def run(args):
    prepared = prepare(args)
    if prepared is None:
        return 0
    paths, work = prepared
    extractor = feat.make_extractor(args.extractor)
    workers = args.workers or default_workers()
    print("# Ingestion: the stages, the whole ingest, the extractors, a second process\n")
    print(f"CPU: {cpu_model()} (lscpu model name), {os.cpu_count()} logical cores; Python {sys.version.split()[0]}; "
          f"extractor {extractor.name} {json.dumps(extractor.versions())}; {workers} worker process(es)")
    print(f"photos: {len(paths)} in {args.images} ({sum(os.path.getsize(p) for p in paths) / 1e6:.0f} MB); "
          f"work dir {work}")
    print(f"load average at start (1/5/15 min): {load_str()}", flush=True)
    encoder, vocabulary, n_fit, t_fit = fit_models(paths, extractor, args.k, args.fit_images)
    print(f"encoder: T-emb k={args.k} + GMP, dim {encoder.dim}; visual words {vocabulary.n_words}; both fitted "
          f"on {n_fit} photos in {t_fit:.1f} s (not timed below)", flush=True)
    sums = None
    if "stages" in args.sections or "ingest" in args.sections:
        acc = measure_stages(paths, extractor, encoder, vocabulary, work / "index-stages")
        rows, sums = stage_rows(acc)
        table(["stage (one thread, as in a worker)", "runs in", "CPU ms per image"], rows,
              f"CPU time of each stage alone, mean over {len(paths)} photos (load {load_str()})")
        print_encoding_ratios(acc)
    if "ingest" in args.sections:
        res = measure_ingest(paths, encoder, extractor, vocabulary, workers, work / "index-ingest", args.max_inflight)
        print_ingest(res, sums, workers, len(paths))
    if "extractors" in args.sections:
        compare_extractors(paths[:args.compare], ["hesaff", "sift"])
    if "legacy" in args.sections:
        legacy_rows(paths, extractor, encoder, workers, work)
    if "second" in args.sections:
        second_process_rows(paths, encoder, extractor, work, args.runs)
    print(f"\nload average at end (1/5/15 min): {load_str()}", flush=True)
    if not args.workdir and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", default=str(DEFAULT_IMAGES), help="folder of photos")
    p.add_argument("--k", type=int, default=16, help="T-emb vocabulary size")
    p.add_argument("--fit-images", type=int, default=50, help="photos whose descriptors fit the encoder")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    p.add_argument("--max-inflight", type=int, default=None, help="Ingester's max_inflight (default: its own)")
    p.add_argument("--extractor", default=None, help="hesaff (default) or sift")
    p.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                   help=f"comma list of {', '.join(SECTIONS)} (default: {','.join(DEFAULT_SECTIONS)})")
    p.add_argument("--compare", type=int, default=20, help="photos for the extractor comparison")
    p.add_argument("--runs", type=int, default=3, help="second-process runs per query kind")
    p.add_argument("--limit", type=int, default=None, help="only the first N photos")
    p.add_argument("--quick", action="store_true", help="--limit 40 --fit-images 20 --runs 2 --compare 10")
    p.add_argument("--workdir", default=None, help="keep the indexes and the feature cache here")
    p.add_argument("--keep", action="store_true", help="do not delete the temporary work dir")
    args = p.parse_args(argv)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.quick:
        args.limit, args.fit_images = args.limit or 40, min(args.fit_images, 20)
        args.runs, args.compare = min(args.runs, 2), min(args.compare, 10)
    return args


if __name__ == "__main__":
    sys.exit(run(parse_args()))

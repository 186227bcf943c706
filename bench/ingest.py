#!/usr/bin/env python
"""Ingestion benchmark: images/s of ``streamk ingest`` on real photos, and the time a
second process takes from its start to its first search answer.

    python bench/ingest.py [--images ../shared/data/paris6k-subset/jpg] [--k 16]
                           [--fit-images 50] [--workers N] [--runs 3] [--quick]

Steps, on the photos of ``--images`` (skipped with a message when absent):
1. the files are read once (page cache warm for every timing below);
2. extraction alone: ``features.extract_many`` over all photos into an empty
   feature cache (process pool, all cores);
3. an encoder (T-emb k=``--k``, GMP, the index default otherwise) is fitted on
   the descriptors of ``--fit-images`` photos spread over the folder (not timed
   as ingestion);
4. "end-to-end": ``Ingester(index).ingest([folder])`` -- what ``streamk ingest``
   runs -- into a fresh index: hashing, extraction and encoding in the worker
   pool, LMDB writes; pool start-up included;
5. "extraction excluded": the same records (``index.encoded_image_file``) built
   from the features in the warm cache -- read, encode, write in batches of 64
   into a fresh index, in this process: the ingestion path minus extraction,
   with the time split (``Ingester(cache_dir=...)`` takes cached features in
   its workers; ``bench/distributed.py`` times the executors);
6. "resume": ``Ingester.ingest`` of the same folder into the full index again
   (every file hashed and skipped, nothing extracted);
7. second process: ``python -c "import streamk.index; StreamingIndex.open(...);
   idx.search(...)"`` started from here, for a vector query (exact and PQ; a few
   synthetic vectors are added so that PQ can train on >= 256 images) and for an
   image query (extraction and encoding in that process); one warm-up run fills
   the Numba cache, then the median of ``--runs`` runs, split into interpreter
   start, ``import streamk.index``, ``open`` and first ``search``, with the count
   of Numba functions the process had to compile (0 = all loaded from the cache).

Nothing here asserts a time; the script prints tables.
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
from pathlib import Path

import numpy as np

from streamk import features as feat
from streamk.parallel import default_workers
from streamk.pipeline import extract_many  # noqa: E402
from streamk.encoding.encoder import Encoder
from streamk.index import StreamingIndex, encoded_image_file
from streamk.pipeline.ingest import Ingester, collect_images

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_IMAGES = REPO.parent / "shared" / "data" / "paris6k-subset" / "jpg"


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
                         capture_output=True, text=True, cwd=str(REPO))
    t_after = time.time()
    if out.returncode != 0:
        raise RuntimeError(f"second process failed:\n{out.stderr}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"start": r["t0"] - t_before, "import": r["t1"] - r["t0"], "open": r["t2"] - r["t1"],
            "search": r["t3"] - r["t2"], "answer": r["t3"] - t_before, "exit": t_after - r["t3"],
            "total": t_after - t_before, "compiled": r["compiled"], "loaded": r["loaded"],
            "modules": r["modules"], "top": r["top"]}


# ---------------------------------------------------------------- main

def run(args):
    images = Path(args.images)
    if not images.is_dir():
        print(f"bench/ingest.py: {images} not found: nothing to measure (download it with "
              f"`streamk datasets download paris6k-subset --dir ...`, or pass --images DIR)")
        return 0
    paths, bad = collect_images([images])
    if args.limit:
        paths = paths[:args.limit]
    if not paths:
        print(f"bench/ingest.py: no image files in {images}")
        return 0
    extractor = feat.default_extractor()
    workers = args.workers or default_workers()
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="streamk-bench-ingest-"))
    work.mkdir(parents=True, exist_ok=True)
    for sub in ("features", "index-a", "index-b", "encoder.npz", "query.npy"):
        p = work / sub
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    print("# Ingestion and second-process start-up\n")
    print(f"machine: {cpu_model()}, {os.cpu_count()} logical cores; Python {sys.version.split()[0]}; "
          f"extractor {extractor.name}; {workers} worker process(es); work dir {work}")
    print(f"images: {len(paths)} photos in {images} ({sum(os.path.getsize(p) for p in paths) / 1e6:.0f} MB)")
    print(f"load average at start (1/5/15 min): {load_str()}", flush=True)
    for p in paths:  # page cache warm for every timing
        Path(p).read_bytes()

    # 2. extraction alone, into an empty cache
    cache_dir = work / "features"
    t0 = time.perf_counter()
    feats, errors = extract_many(paths, extractor, cache_dir=cache_dir, workers=workers, progress=False)
    t_extract = time.perf_counter() - t0
    n_desc = [len(feats[p]) for p in feats]
    log(f"extraction: {t_extract:.1f} s for {len(paths)} images (load {load_str()})")

    # 3. encoder
    step = max(1, len(paths) // args.fit_images)
    fit_sets = [feats[p].descriptors for p in paths[::step][:args.fit_images] if p in feats and len(feats[p])]
    t0 = time.perf_counter()
    encoder = Encoder(embedding="temb", k=args.k, aggregation="gmp").fit(fit_sets)
    t_fit = time.perf_counter() - t0
    encoder.save(work / "encoder.npz")
    log(f"encoder: T-emb k={args.k} GMP, dim {encoder.dim}, fitted on {len(fit_sets)} images in {t_fit:.1f} s")
    encoder.encode(fit_sets[0])  # Numba kernels loaded outside the timings

    rows = []

    # 4. end-to-end
    idx = StreamingIndex.create(work / "index-a", encoder, extractor=extractor)
    ing = Ingester(idx, workers=workers, progress=False, report=lambda p, r: None)
    t0 = time.perf_counter()
    stats = ing.ingest([images] if not args.limit else paths)
    t_a = time.perf_counter() - t0
    rows.append(["end-to-end (`Ingester.ingest`: hash, extract, encode, write)", stats.added, stats.n_failed,
                 f"{t_a:.1f}", f"{stats.added / t_a:.2f}"])
    log(f"end-to-end: {stats.summary()} (load {load_str()})")

    # 6. resume: everything known
    ing2 = Ingester(idx, workers=workers, progress=False, report=lambda p, r: None)
    t0 = time.perf_counter()
    st2 = ing2.ingest([images] if not args.limit else paths)
    t_r = time.perf_counter() - t0
    idx.close()

    # 5. extraction excluded
    idx = StreamingIndex.create(work / "index-b", encoder, extractor=extractor)
    cache = feat.FeatureCache(cache_dir)
    t_read = t_enc = t_write = 0.0
    added = failed = 0
    batch = []

    def flush():
        nonlocal t_write, added, failed
        t = time.perf_counter()
        outs = idx.write_encoded(batch)
        t_write += time.perf_counter() - t
        added += sum(o == "added" for o in outs)
        failed += sum(isinstance(o, Exception) for o in outs)
        batch.clear()

    import hashlib
    t0 = time.perf_counter()
    for p in paths:
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
        enc = encoded_image_file(Path(p).name, p, sha, v, f.keypoints, alpha, f.image_size)
        t_enc += time.perf_counter() - t
        batch.append(enc)
        if len(batch) >= 64:
            flush()
    flush()
    t_b = time.perf_counter() - t0
    rows.append(["extraction excluded (cached features: read, encode, write; 1 process)", added, failed,
                 f"{t_b:.1f}", f"{added / t_b:.2f}"])
    rows.append(["resume (`Ingester.ingest` again: all hashed and skipped)", st2.existing, st2.n_failed,
                 f"{t_r:.1f}", f"{st2.processed / t_r:.1f}"])
    rows.append([f"extraction alone (`extract_many`, {workers} processes, empty cache)", len(feats), len(errors),
                 f"{t_extract:.1f}", f"{len(feats) / t_extract:.2f}"])
    log(f"extraction excluded: {t_b:.1f} s (read {t_read:.1f}, encode {t_enc:.1f}, write {t_write:.1f}); "
        f"load {load_str()}")

    # PQ on index b: a few synthetic vectors so that there are >= 256 images
    vecs = np.stack([idx.vector(i) for i in idx.ids()])
    rng = np.random.default_rng(0)
    extra = max(0, 256 - len(vecs))
    for j in range(extra):
        v = vecs[j % len(vecs)] + 0.05 * rng.standard_normal(vecs.shape[1]).astype(np.float32) / np.sqrt(vecs.shape[1])
        idx.add(f"synthetic-{j}", vector=v)
    M = next(m for m in (16, 8, 4, 2, 1) if encoder.dim % m == 0)
    idx.train_pq(M=M)
    idx.close()
    np.save(work / "query.npy", vecs[len(vecs) // 2])
    query_image = paths[len(paths) // 3]

    table(["run", "images added", "failed", "seconds", "images/s"], rows,
          f"Ingestion of {len(paths)} photos, T-emb k={args.k} + GMP (dim {encoder.dim}), "
          f"{feat.default_extractor().name} features ({np.mean(n_desc):.0f} per image on average), "
          f"batches of 64")
    print(f"\nextraction excluded, split: feature-cache read {t_read:.1f} s, encode {t_enc:.1f} s "
          f"({1e3 * t_enc / max(1, added):.0f} ms/image), LMDB write {t_write:.2f} s; "
          f"encoder fit (not in the rates): {t_fit:.1f} s on {len(fit_sets)} images")

    # 7. second process
    variants = [("vector query, exact", work / "query.npy", "exact"),
                (f"vector query, PQ (M={M})", work / "query.npy", "pq"),
                ("image query, exact (extraction + encoding in the process)", query_image, "exact")]
    srows = []
    for name, query, mode in variants:
        second_process(work / "index-b", query, mode)  # warm-up: fills the Numba cache if needed
        runs = [second_process(work / "index-b", query, mode) for _ in range(args.runs)]
        med = {key: statistics.median(r[key] for r in runs) for key in
               ("start", "import", "open", "search", "answer", "exit", "total")}
        srows.append([name, f"{med['answer']:.2f}", f"{med['start']:.2f}", f"{med['import']:.2f}",
                      f"{med['open']:.3f}", f"{med['search']:.3f}", f"{med['exit']:.2f}",
                      max(r["compiled"] for r in runs), max(r["loaded"] for r in runs)])
        log(f"{name}: {med} modules {runs[-1]['modules']} (load {load_str()})")
    table(["query", "start -> answer s", "interpreter", "import streamk.index", "open", "first search",
           "exit", "Numba compiled", "Numba loaded"], srows,
          f"Second process (`python -c`), index of {len(vecs) + extra} images, warm Numba cache: "
          f"median of {args.runs} runs (target start -> answer <= 2 s)")
    print(f"\nload average at end (1/5/15 min): {load_str()}", flush=True)
    if not args.workdir and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", default=str(DEFAULT_IMAGES), help="folder of photos")
    p.add_argument("--k", type=int, default=16, help="T-emb vocabulary size")
    p.add_argument("--fit-images", type=int, default=50, help="photos whose descriptors fit the encoder")
    p.add_argument("--workers", type=int, default=None, help="extraction processes (default: all cores)")
    p.add_argument("--runs", type=int, default=3, help="second-process runs per query kind")
    p.add_argument("--limit", type=int, default=None, help="only the first N photos")
    p.add_argument("--quick", action="store_true", help="--limit 40 --fit-images 20 --runs 2")
    p.add_argument("--workdir", default=None, help="keep the indexes and the feature cache here")
    p.add_argument("--keep", action="store_true", help="do not delete the temporary work dir")
    args = p.parse_args(argv)
    if args.quick:
        args.limit, args.fit_images, args.runs = args.limit or 40, min(args.fit_images, 20), min(args.runs, 2)
    return args


if __name__ == "__main__":
    sys.exit(run(parse_args()))

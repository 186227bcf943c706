#!/usr/bin/env python
"""One vector per image against ASMK / ASMK* on the same descriptors: mAP, memory
per database image and time per query, measured in one run on paris6k-subset.

    python bench/asmk.py [--temb-k 16] [--words 1024,2048,4096] [--ma 5] [--cache DIR]

Protocol as ``streamk eval --dataset paris6k-subset``: 250 images, 12 official
queries described by the features inside their boxes, Hessian-affine RootSIFT,
everything learned on the database images themselves (no labels).

- T-emb rows: the paper's pipeline (power-law 0.5, L2, no RN). Memory: the
  vector as streamk's index stores it (float16; float32 in brackets). Query:
  encoding the query's descriptors (embedding, weights, post-processing),
  then the exact scan of the 250 vectors and the sort.
- ASMK rows (streamk.evaluation.asmk): codebook sizes around the paper's ratio (65k words
  for Oxford5k, about 250 descriptors per word: 2048 here); alpha = 3, tau = 0;
  with and without the query-side multiple assignment. Memory: the inverted
  file search reads (residuals or sign codes, image ids, per-word offsets and
  idf, per-image norms) over the number of images. Query: aggregation of its
  descriptors, then the inverted-file scan and the sort.

Query times are means over the 12 queries (ASMK's from
``streamk.evaluation.experiment.evaluate_dataset_asmk``, as ``streamk eval --method asmk``
prints them), Numba and BLAS on all cores; nothing is asserted.
"""

import streamk  # first: thread wait policies  # noqa: F401,I001

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from streamk.datasets import load_dataset
from streamk.encoding.encoder import Encoder
from streamk.evaluation.metrics import evaluate
from streamk.config import default_cache_dir
from streamk.evaluation.experiment import aggregate_all, dataset_descriptors, evaluate_dataset_asmk
from streamk.features import make_extractor
from streamk.encoding.postprocessing import postprocess

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_str, log, table  # noqa: E402


def single_vector_rows(dataset, database, queries, k, power=0.5):
    t0 = time.perf_counter()
    base = Encoder(embedding="temb", k=k, aggregation="sum", power=power).fit(database)
    log(f"T-emb k={k}: fitted in {time.perf_counter() - t0:.1f} s (load {load_str()})")
    methods = ("sum", "democratic", "gmp")
    xi, _ = aggregate_all(base, database, methods, "database", False)   # one embedding and Gram per image
    rows = []
    for method in methods:
        enc = base.derive(aggregation=method)
        db = postprocess(xi[method], power).astype(np.float32)
        enc.encode(queries[0])  # warm-up
        ranks, encode_ms, search_ms = [], [], []
        for X in queries:
            t0 = time.perf_counter()
            q = enc.encode(X)
            t1 = time.perf_counter()
            ranks.append(np.argsort(-(db @ q), kind="stable"))
            t2 = time.perf_counter()
            encode_ms.append(1000 * (t1 - t0))
            search_ms.append(1000 * (t2 - t1))
        res = evaluate(np.stack(ranks), dataset)
        rows.append([f"T-emb k={k} + {method}", f"{100 * res.map:.1f}",
                     f"{enc.dim * 2:,} ({enc.dim * 4:,})", f"{np.mean(encode_ms):.0f}",
                     f"{np.mean(search_ms):.2f}"])
        log(f"  {rows[-1]}")
    return rows


def asmk_rows(dataset, cache, n_words, ma):
    rows, info = evaluate_dataset_asmk(dataset, n_words=n_words, multiple_assignment=ma, cache_dir=cache,
                                       verbose=False)
    log(f"ASMK {n_words} words: codebook {info['fit_s']:.1f} s (load {load_str()})")
    out = []
    for label, res, c in rows:
        out.append([label, f"{100 * res.map:.1f}", f"{c['bytes_per_image']:,.0f}", f"{c['query_aggregate_ms']:.0f}",
                    f"{c['query_search_ms']:.2f}"])
        log(f"  {out[-1]}")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--temb-k", default="16", help="T-emb vocabulary sizes (comma list; '' for none)")
    p.add_argument("--words", default="1024,2048,4096", help="ASMK codebook sizes (comma list)")
    p.add_argument("--ma", type=int, default=5, help="query-side multiple assignment (1: none)")
    p.add_argument("--root", default=None, help="paris6k-subset root (default ../shared/data)")
    p.add_argument("--cache", default=default_cache_dir(), help="feature cache directory")
    a = p.parse_args(argv)

    dataset = load_dataset("paris6k-subset", a.root)
    database, queries = dataset_descriptors(dataset, make_extractor(None), a.cache, progress=True)
    log(f"paris6k-subset: {len(database)} images, {len(queries)} queries, "
        f"{np.mean([len(X) for X in database]):.0f} descriptors per image; load {load_str()}")
    rows = []
    for k in [int(x) for x in a.temb_k.split(",") if x]:
        rows += single_vector_rows(dataset, database, queries, k)
    for n_words in [int(x) for x in a.words.split(",") if x]:
        rows += asmk_rows(dataset, a.cache, n_words, a.ma)
    table(["method", "mAP", "bytes / image", "query: encode ms", "search ms"], rows,
          title=f"paris6k-subset, one run (load average at the end {load_str()})")


if __name__ == "__main__":
    main()

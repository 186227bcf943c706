#!/usr/bin/env python
"""mAP of the fast modes of bench/aggregation.py on the Paris6k subset, against
the exact weights, in the same run: the accuracy half of the fast-mode rule
(keep a fast mode only if it is >= 10x faster *and* loses <= 1 mAP point).

    python bench/fast_mode_map.py [--k 64] [--sketch 256,512] [--cache DIR]

Protocol as ``streamk eval --dataset paris6k-subset``: 250 images, 12 official
queries cropped to their boxes, T-emb learned on the database itself,
power-law 0.5 then L2, no RN.  Both ways share the embedding; only the weights
(and, for the sketch, the per-descriptor norms) differ.  The speed-ups per
method are measured by bench/aggregation.py; this prints mAP and the encoding
seconds per image; it asserts nothing.
"""

import streamk  # first: thread wait policies  # noqa: F401,I001

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from streamk.encoding.aggregation import aggregate_many
from streamk.datasets import load_dataset
from streamk.encoding.embeddings import TriangulationEmbedding, rootsift
from streamk.evaluation.metrics import evaluate
from streamk.config import default_cache_dir
from streamk.evaluation.experiment import dataset_descriptors
from streamk.features import make_extractor
from streamk.encoding.postprocessing import postprocess

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aggregation import FastModes  # noqa: E402  (the fast modes under study)
from common import load_str  # noqa: E402

METHODS = ("democratic", "gmp")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--k", type=int, default=64)
    p.add_argument("--sketch", default="256,512", help="sketch sizes m (default 256,512)")
    p.add_argument("--root", default=None, help="dataset root (default ../shared/data)")
    p.add_argument("--cache", default=default_cache_dir(), help="feature cache directory")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    ms = [int(m) for m in a.sketch.split(",") if m]

    try:
        dataset = load_dataset("paris6k-subset", a.root)
    except Exception as exc:  # no shared data here: say so, do not fail a bench sweep
        print(f"paris6k-subset not available ({exc}); nothing measured")
        return
    print(f"# fast modes on paris6k-subset: T-emb k={a.k}; load average at start {load_str()}")
    database, queries = dataset_descriptors(dataset, make_extractor(None), a.cache, None, True)
    database = [rootsift(X.astype(np.float32)) for X in database]
    queries = [rootsift(X.astype(np.float32)) for X in queries]
    t0 = time.perf_counter()
    emb = TriangulationEmbedding(a.k, seed=a.seed).fit(np.concatenate(database))
    print(f"fit: {time.perf_counter() - t0:.0f} s on {sum(len(X) for X in database)} descriptors")

    fm = FastModes(emb, gs=(), ms=ms, seed=a.seed)
    # exact: streamk's own path (one Phi, one Gram for both methods); sketch: per method
    names = ["exact"] + [f"sketch m={m}" for m in ms]
    vecs = {(method, name): ([], []) for method in METHODS for name in names}
    secs = {name: 0.0 for name in names}
    for which, sets in ((0, database), (1, queries)):
        for i, X in enumerate(sets):
            t0 = time.perf_counter()
            exact = aggregate_many(emb.embed(X), METHODS)
            secs["exact"] += time.perf_counter() - t0
            for method in METHODS:
                vecs[(method, "exact")][which].append(exact[method][0])
                for m in ms:
                    xi, _, _, t_all = fm.sketch(X, method, m)
                    vecs[(method, f"sketch m={m}")][which].append(xi)
                    secs[f"sketch m={m}"] += t_all
            if which == 0 and i % 25 == 0:
                print(f"  {i}/{len(sets)} database images, load {load_str()}", file=sys.stderr, flush=True)

    n_images = len(database) + len(queries)
    print(f"\nencoding, s per image: exact {secs['exact'] / n_images:.3f} (democratic and GMP together: one "
          "Phi, one Gram); " + "; ".join(f"{n} {secs[n] / n_images:.3f} (both methods, each its own)"
                                        for n in names[1:]))
    print("\n| aggregation | weights | mAP | loss vs exact |\n|---|---|---:|---:|")
    for method in METHODS:
        ref = None
        for name in names:
            db, qs = (postprocess(np.stack(v), 0.5) for v in vecs[(method, name)])
            ranks = np.argsort(-(qs @ db.T), axis=1, kind="stable")
            m_ap = 100 * evaluate(ranks, dataset).map
            ref = m_ap if ref is None else ref
            print(f"| {method} | {name} | {m_ap:.1f} | {ref - m_ap:+.1f} |")
    print(f"\nload average at end: {load_str()}")


if __name__ == "__main__":
    main()

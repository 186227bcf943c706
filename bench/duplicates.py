#!/usr/bin/env python
"""The near-duplicate threshold: how similar a photo's changed copies are to it, and how
similar different photos are, with the demo's encoder (T-emb k = 16, GMP).

    python bench/duplicates.py [--photos 100] [--learn 100] [--workers 2] [--cache DIR]

Photos: the Paris6k subset (``../shared/data/paris6k-subset/jpg``, 250 photos of five
landmarks; or ``STREAMK_SHARED_DATA``): ``--photos`` of them measured (a seeded sample,
every landmark), ``--learn`` others to learn the encoder on (distinct from the measured
ones). Features: the demo's extractor (Hessian-affine, long side 640, at most 1,000).

Near-duplicates: each measured photo changed as ``streamk.demo.transforms`` does, the
changes a near-duplicate detector must catch (re-encoded, resized, cropped a little):
``jpeg`` (the demo's: quality 12), ``jpeg50`` (quality 50), ``scale`` (the demo's: 50 %)
and ``crop90`` (a window of 90 % of the area); each saved as a file (JPEG quality 92
unless re-encoding is the change) and described from that file. Beside them, for
context only, the demo's stronger changes ``crop`` (60 % of the area)
and ``light``: other views of a photo rather than copies of it.

Different photos: every pair of measured photos, split into photos of the same landmark
(the hard case: same place, another photo) and of different landmarks; and each changed
copy's most similar *other* photo (what a too-low threshold would report).

Prints the distributions (quantiles) and, for thresholds around the gap, the share of
near-duplicate pairs found and of different-photo pairs wrongly reported. The chosen
default is :data:`streamk.index.duplicates.DEFAULT_DUPLICATE_THRESHOLD`. Nothing asserts.
"""

import streamk  # first: it sets the thread wait policies before numpy loads its pools  # noqa: F401,I001

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, paris_photos, table  # noqa: E402

COPIES = ("jpeg", "jpeg50", "scale", "crop90")  # what the threshold must catch
VIEWS = ("crop", "light")  # other views of a photo (the demo's stronger changes), for context


def landmark(path):
    return Path(path).name.split("_")[1]


def make_changes(photos, out, max_side):
    """{(photo index, change): file} of every change of every measured photo."""
    from streamk.demo import transforms as tf

    files = {}
    for i, p in enumerate(photos):
        img = tf.open_rgb(p, max_side=None)
        for name in COPIES + VIEWS:
            if name == "jpeg50":
                changed, quality = img, 50
            elif name == "crop90":
                changed, quality = tf.crop(img, tf.rng_for(0, p.name, name), area=0.9), 92
            else:
                changed, quality = tf.view(img, name, p.name), 92
            f = out / f"{i:03d}_{name}.jpg"
            changed.save(f, format="JPEG", quality=quality)
            files[(i, name)] = str(f)
    return files


def quantiles(x, qs):
    return [f"{np.quantile(x, q):.3f}" for q in qs]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--photos", type=int, default=100)
    p.add_argument("--learn", type=int, default=100)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cache", default=None, help="feature cache (default ~/.cache/streamk/features)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical cores); load {load_str()}")
    from streamk import Encoder
    from streamk.config import feature_cache_dir
    from streamk.features import make_extractor
    from streamk.index.duplicates import DEFAULT_DUPLICATE_THRESHOLD
    from streamk.pipeline import extract_many

    allp = paris_photos()
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(allp))
    measured = sorted(allp[i] for i in order[:args.photos])
    learn = sorted(allp[i] for i in order[args.photos:args.photos + args.learn])
    extractor = make_extractor(None, max_side=640, max_features=1000)
    cache = feature_cache_dir(args.cache, False)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="streamk-dups-") as tmp:
        files = make_changes(measured, Path(tmp), 640)
        log(f"{len(files)} changed copies written; extracting {len(measured) + len(learn) + len(files)} images ...")
        paths = [str(x) for x in measured + learn] + list(files.values())
        feats, errors = extract_many(paths, extractor, cache_dir=cache, workers=args.workers, progress=True)
        if errors:
            log(f"  {len(errors)} failed: {next(iter(errors.items()))}")
    log(f"  features in {time.perf_counter() - t0:.0f} s")
    enc = Encoder(embedding="temb", k=16, aggregation="gmp").fit([feats[str(x)].descriptors for x in learn])

    def vec(path):
        v = enc.encode(feats[path].descriptors)
        return v / np.linalg.norm(v)
    V = np.stack([vec(str(x)) for x in measured])  # the originals
    S = V @ V.T
    iu = np.triu_indices(len(measured), 1)
    same = np.array([landmark(measured[a]) == landmark(measured[b]) for a, b in zip(*iu)])
    pair = S[iu]
    rows, dup, nearest_other = [], {}, {}
    for name in COPIES + VIEWS:
        have = [i for i in range(len(measured)) if files[(i, name)] in feats]
        C = np.stack([vec(files[(i, name)]) for i in have])
        sims = C @ V.T  # copy x originals
        dup[name] = sims[np.arange(len(have)), have]
        masked = sims.copy()
        masked[np.arange(len(have)), have] = -np.inf
        nearest_other[name] = masked.max(axis=1)
        rows.append([name, "near-duplicate" if name in COPIES else "other view (context)", len(have),
                     *quantiles(dup[name], [0.0, 0.01, 0.05, 0.5]), f"{nearest_other[name].max():.3f}"])
    table(["change", "kind", "n", "min", "1 %", "5 %", "median", "max sim. to another photo"], rows,
          f"Similarity of each changed copy to its original (T-emb k = 16, GMP, D = {enc.dim}; "
          f"{len(measured)} photos, encoder learned on {len(learn)} others)")
    rows = [["same landmark, other photo", int(same.sum()), *quantiles(pair[same], [0.5, 0.99, 0.999, 1.0])],
            ["different landmarks", int((~same).sum()), *quantiles(pair[~same], [0.5, 0.99, 0.999, 1.0])]]
    table(["pairs of different photos", "n", "median", "99 %", "99.9 %", "max"], rows,
          "Similarity of different photos (every pair of the measured originals)")
    copies = np.concatenate([dup[c] for c in COPIES])
    others = np.concatenate([pair, *[nearest_other[c] for c in COPIES]])
    rows = []
    for t in (0.35, 0.40, 0.45, 0.50, 0.55, 0.60, 0.70):
        rows.append([f"{t:.2f}" + (" (default)" if abs(t - DEFAULT_DUPLICATE_THRESHOLD) < 1e-9 else ""),
                     f"{(copies >= t).mean():.3f}", f"{(pair[same] >= t).mean():.4f}",
                     f"{(pair[~same] >= t).mean():.4f}", f"{(others >= t).mean():.4f}"])
    table(["threshold", "copies found", "same-landmark pairs reported", "other pairs reported",
           "all different-photo pairs reported"], rows,
          f"Thresholds (copies: {', '.join(COPIES)}; load {load_str()})")
    gap_lo, gap_hi = float(others.max()), float(copies.min())
    print(f"\nlowest copy similarity {gap_hi:.3f}; highest different-photo similarity {gap_lo:.3f}; "
          f"default threshold {DEFAULT_DUPLICATE_THRESHOLD}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Copy detection: recall per edit kind, precision, false copies among photos of one
landmark, and the cost of a whole-index pass, measured in one run.

    python bench/copy_detection.py [--originals 20] [--seed 0] [--rotation-sample 40] [--combined]

Photos: paris6k-subset's 250 photos (``../shared/data``, or ``STREAMK_SHARED_DATA``). A
seeded random draw of ``--originals`` of them; each gets one edited copy per edit kind of
``bench/copy_edits.py`` (heavy JPEG q10-30; resized to 400-640 px; cropped to 50-90 % of
the area; a frame or letterbox; a caption band or watermark; gamma, contrast, colour cast,
saturation; a quarter turn; a mirror image; upscaled by 1.05-1.25x, half of them cropped first),
each kind's parameters drawn at random (the upscale from its own generator, so that the other
kinds' draws are those of the runs before it was added). The index: the 250
photos (the hard negatives: 50 photos of each landmark, among them near-identical views of
one photographer) plus the copies, with T-emb k = 8 GMP learned on 50 of the 250 (the vector
only proposes candidates) and the visual words of bench/false_verification.py (learned on the 250, cached).

``--combined``: one copy per pair of edits of ``copy_edits.COMBINED`` instead (a downscale and a
heavy re-encoding, a crop and a downscale, a frame and a caption, ...: edits the single kinds do
not draw, which no parameter here was chosen on).

Counted: a *copy pair* (an edited copy and its original) is found when the report classes it
exact or copy. Precision: the copy/exact pairs that are a copy pair or two copies of one
original, over all copy/exact pairs. False copies: copy/exact pairs of two different photos
(of one landmark: every one seen is). Rotated and mirrored copies: the whole-index pass
without turned queries, then each rotated copy's ``copies_of(rotations=True)`` (each
mirrored one's ``mirrored=True``); the cost of the turned queries measured on
``--rotation-sample`` images and given per 1,000.

Each copy missed is listed with what the report said of it and its original (class, inliers,
covered, reason). Prints, never asserts; the CPU model (lscpu) and the load average are in the title.
"""

import argparse
import io
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, paris_photos, table
from copy_edits import COMBINED, EDITS, apply
from false_verification import vocabulary

import streamk  # noqa: F401  (thread policies before numpy's BLAS loads)


def make_copies(originals, out, seed, kinds=EDITS):
    """{copy id: (original id, kind, parameters)}: each original edited once per kind, saved under ``out``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    made = {}
    for p in originals:
        img = Image.open(p).convert("RGB")
        for kind in kinds:
            own = np.random.default_rng([seed, zlib.crc32(p.stem.encode())]) if kind == "upscale" else rng
            edited, quality, what = apply(kind, img, own)
            cid = f"copy_{kind}_{p.stem}"
            buf = io.BytesIO()
            edited.save(buf, "JPEG", quality=quality)
            (out / f"{cid}.jpg").write_bytes(buf.getvalue())
            made[cid] = (p.stem, kind, what)
    return made


def build_index(path, all_photos, copy_dir, made):
    from streamk.config import default_cache_dir
    from streamk.encoding import Encoder
    from streamk.features import HessianAffineSift, extract
    from streamk.index import StreamingIndex

    ex = HessianAffineSift()
    feats = [extract(p, ex, cache=default_cache_dir()) for p in all_photos]
    # the vector only proposes
    enc = Encoder(embedding="temb", k=8, aggregation="gmp").fit([f.descriptors for f in feats[::5]])
    voc = vocabulary("250", feats)
    from streamk.index import open_index
    from streamk.pipeline import run_ingest

    StreamingIndex.create(path, enc, vector_dtype="float32", extractor=ex, vocabulary=voc).close()
    t0 = time.perf_counter()
    files = [str(p) for p in all_photos] + [str(copy_dir / f"{cid}.jpg") for cid in made]
    run_ingest(path, files, workers=2, cache_dir=default_cache_dir(), progress=False, log=log)
    idx = open_index(path)
    log(f"index of {len(idx)} images built in {time.perf_counter() - t0:.0f} s")
    return idx


def stem(image_id):
    return image_id.removesuffix(".jpg")


def score(pairs, made):
    """(found copy pairs by kind, copy/exact pairs, true ones among them, false ones (a, b))."""
    origin = {cid: o for cid, (o, _, _) in made.items()}
    found, claimed, true, false = {}, 0, 0, []
    for p in pairs:
        if p["class"] not in ("copy", "exact"):
            continue
        claimed += 1
        a, b = stem(p["a"]), stem(p["b"])
        oa, ob = origin.get(a, a), origin.get(b, b)
        if oa == ob:
            true += 1
            for x in (a, b):
                if x in made and origin[x] in (a, b):
                    found[x] = True
        else:
            false.append((p["a"], p["b"], p["class"], p["inliers"], p["covered"], p["agreement"]))
    return found, claimed, true, false


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--originals", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rotation-sample", type=int, default=40)
    ap.add_argument("--combined", action="store_true", help="two edits at once per copy (copy_edits.COMBINED)")
    args = ap.parse_args(argv)
    kinds = COMBINED if args.combined else EDITS
    from streamk.index import copies_of, copy_report

    allp = paris_photos()
    rng = np.random.default_rng(args.seed)
    originals = [allp[i] for i in sorted(rng.choice(len(allp), args.originals, replace=False))]
    tmp = Path(tempfile.mkdtemp(prefix="streamk-copies-"))
    try:
        made = make_copies(originals, tmp, args.seed, kinds)
        log(f"{len(made)} copies of {len(originals)} originals written")
        idx = build_index(tmp / "ix", allp, tmp, made)
        n = len(idx)
        t0, c0 = time.perf_counter(), time.process_time()
        report = copy_report(idx, progress=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        found, claimed, true, false = score(report["pairs"], made)
        rot = [cid for cid, (_, kind, _) in made.items() if {"rotate", "mirror"} & set(kind.split("+"))]
        t1 = time.perf_counter()
        turned = []
        ids = {stem(i): i for i in idx.ids()}
        for cid in rot:
            edits = made[cid][1].split("+")
            turned += [p.to_dict() for p in copies_of(idx, ids[cid], rotations="rotate" in edits,
                                                      mirrored="mirror" in edits)]
        rot_wall = time.perf_counter() - t1
        rfound, rclaimed, rtrue, rfalse = score(turned, made)
        sample = idx.ids()[:: max(1, n // args.rotation_sample)][: args.rotation_sample]
        t2, c2 = time.perf_counter(), time.process_time()
        for image_id in sample:
            copies_of(idx, image_id, rotations=True)
        per_turned = (time.perf_counter() - t2) / len(sample)
        cpu_turned = (time.process_time() - c2) / len(sample)
        idx.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    found_any = found.keys() | rfound.keys()  # upright or turned
    # each missed copy with what the report said of it and its original (the last word: its turned pass)
    said = {frozenset((stem(p["a"]), stem(p["b"]))): p for p in report["pairs"] + turned}
    missed = [(cid, kind, what, said.get(frozenset((cid, o))))
              for cid, (o, kind, what) in made.items() if cid not in found_any]
    rows = []
    for kind in kinds:
        ids = [cid for cid, (_, k, _) in made.items() if k == kind]
        hit = sum(1 for c in ids if c in found_any)
        rows.append((kind, len(ids), hit, f"{100 * hit / len(ids):.1f} %"))
    total = sum(r[2] for r in rows)
    rows.append(("all", len(made), total, f"{100 * total / len(made):.1f} %"))
    table(("edit", "copies", "found as copy", "recall"), rows,
          title=f"Copy recall per edit kind ({len(originals)} originals drawn with seed {args.seed}, index of {n} "
                f"images; {cpu_model()}, load {load_str()})")
    for cid, kind, what, p in missed:
        print(f"  missed: {cid} ({what}):", "no verified pair with its original" if p is None else
              f"{p['class']}, {p['inliers']} inliers, covered {p['covered']:.2f}, {p['reason']}")
    claimed_all, true_all = claimed + rclaimed, true + rtrue
    origin = {cid: o for cid, (o, _, _) in made.items()}
    different = sum(1 for p in report["pairs"]
                    if origin.get(stem(p["a"]), stem(p["a"])) != origin.get(stem(p["b"]), stem(p["b"])))
    table(("copy/exact pairs reported", "true", "false (different photos)", "precision",
           "verified pairs of different photos"),
          [(claimed_all, true_all, len(false) + len(rfalse), f"{100 * true_all / max(claimed_all, 1):.2f} %",
            different)], title="Precision")
    for f in false + rfalse:
        print("  false:", f)
    verified = sum(1 for p in report["pairs"])
    table(("pass", "images", "wall s", "CPU s", "per 1,000 images"),
          [("whole index, upright queries", n, f"{wall:.1f}", f"{cpu:.1f}",
            f"{1000 * wall / n:.0f} s wall, {1000 * cpu / n:.0f} s CPU"),
           ("one image with its turned queries (3)", len(sample), f"{per_turned * len(sample):.1f}",
            f"{cpu_turned * len(sample):.1f}", f"{1000 * per_turned:.0f} s wall, {1000 * cpu_turned:.0f} s CPU")],
          title=f"Cost ({verified} verified pairs classed; pixels from the source files; turned queries "
                f"measured on {len(sample)} images; rotated copies' own pass {rot_wall:.1f} s)")


if __name__ == "__main__":
    main()

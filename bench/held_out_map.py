"""mAP of photos held out of the index, searched as a user searches: the first stage, the
second stage with the defaults, and with ``--verify 100 --expand 5``.

    python bench/held_out_map.py [--collection large|small] [--folds 5] [--draws 8] [--k 64]
                                 [--workers 2] [--work DIR] [--keep]

The issue's held-out check (web photos of the five landmarks that are not in the project,
searched against an index of Paris photos) asks that the second stage lose nothing against
the code before the significance rule. This is that check on the data we have, with the
collections of ``bench/false_verification.py``'s held-out queries:

- large: the 250 paris6k-subset photos in ``--folds`` folds (a permutation from
  ``numpy.random.default_rng(0)``, as ``--collections held-out-large``); each fold's photos
  query an index of the other photos;
- small: ``--draws`` draws of a new user's first index (50 photos: 8 of each landmark and 10
  others, draw d from ``default_rng(d)``, as ``--collections held-out``); the other photos query it.

Each index is made the way a user makes one (``create_index`` with the encoder and the visual
words trained on its own photos alone, T-emb ``--k`` + GMP, the index's defaults otherwise;
``run_ingest``); each photo outside it that is a positive of a landmark with a positive in the
index is a query (the whole photo), ranked over the whole index (k = its size) by ``Index.search``.
AP by the official protocol (``streamk.evaluation.metrics.average_precision``): its
landmark's good and ok photos in the index the positives, its junk ignored, every other photo
a negative. A second table counts the results in each query's top 10 marked verified that
show a different place (``streamk.verification.pairs``: both photos positives of landmarks,
neither a positive or junk of the other's), what a user reading the mark would be misled by.

Runs against whichever streamk is imported: to compare two versions, run the script twice
with ``PYTHONPATH`` at each tree (``--work`` apart; each builds its own indexes, extraction
shared through the feature cache). Prints the CPU model and load; never asserts.
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, paris_photos, table  # noqa: E402

import streamk  # noqa: E402  (thread policies before numpy's BLAS loads)

# name, search keywords (those left out: the imported version's defaults)
SEARCHES = (("first stage (verify 0)", {"verify": 0, "expand": 0}),
            ("defaults", {}),
            ("verify 100, expand 5", {"verify": 100, "expand": 5}))


def ground_truth():
    """The official Paris6k ground truth (of the shared data)."""
    from streamk.datasets.benchmarks import default_data_dir, load_mat_ground_truth

    return load_mat_ground_truth(default_data_dir() / "gt" / "gnd_paris6k.mat", name="paris6k")


def collections(kind, ids, gt, folds, draws):
    """[(label, positions in ``ids`` of the index's photos)] of a kind of collection."""
    if kind == "large":
        order = np.random.default_rng(0).permutation(len(ids))
        return [(f"fold {f}", np.setdiff1d(np.arange(len(ids)), order[f::folds])) for f in range(folds)]
    from false_verification import small_collection

    return [(f"draw {d}", np.asarray(small_collection(ids, gt, seed=d))) for d in range(draws)]


def build(index_path, photos, k, workers, cache_dir):
    """An index at ``index_path`` of ``photos``, its encoder and words learned on them."""
    from streamk.pipeline import create_index, run_ingest

    quiet = lambda *a, **kw: None  # noqa: E731
    create_index(index_path, train=[str(p) for p in photos], k=k, workers=workers, cache_dir=cache_dir,
                 progress=False, log=quiet)
    run_ingest(index_path, [str(p) for p in photos], workers=workers, cache_dir=cache_dir, progress=False,
               log=quiet)


def fold_aps(index_path, queries, db_positions, ids, positive, junk, different):
    """({search name: [AP of each query]}, {search name: (false verified in the top 10, queries with
    one)}) of the held-out ``queries`` (positions) against the index; ``different``: (n, n) bool,
    the pairs of different places (``streamk.verification.pairs.place_pairs``)."""
    from streamk.evaluation.metrics import average_precision
    from streamk.index import open_index

    row_of = {ids[j]: r for r, j in enumerate(db_positions)}
    aps = {name: [] for name, _ in SEARCHES}
    false = {name: np.zeros(2, np.int64) for name, _ in SEARCHES}
    with open_index(index_path) as idx:
        photos = paris_photos()
        for a in queries:
            features = idx.queries.features(str(photos[a]))
            vector = idx.query_vector(features.descriptors)
            lm = positive[a]
            pos = np.flatnonzero(positive[db_positions][:, lm].any(axis=1))
            jnk = np.flatnonzero(junk[db_positions][:, lm].any(axis=1) & ~positive[db_positions][:, lm].any(axis=1))
            for name, kw in SEARCHES:
                hits = idx.search(vector, k=len(db_positions), features=features, **kw)
                ranking = np.array([row_of[Path(h[0]).stem] for h in hits], np.int64)
                aps[name].append(average_precision(ranking, pos, jnk))
                wrong = sum(bool(h.verified) and different[a, db_positions[r]] for h, r in zip(hits[:10], ranking))
                false[name] += (wrong, wrong > 0)
    return aps, false


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collection", choices=("large", "small"), default="large")
    ap.add_argument("--folds", type=int, default=5, help="large: folds of the 250 photos (default 5)")
    ap.add_argument("--draws", type=int, default=8, help="small: draws of the 50-photo collection (default 8)")
    ap.add_argument("--k", type=int, default=64, help="the encoder's k (default 64, the index's default)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", default=None, help="folder for the indexes (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the indexes (with --work: reused when there)")
    args = ap.parse_args(argv)
    from streamk.config import default_cache_dir
    from streamk.verification.pairs import landmark_labels, place_pairs

    photos = paris_photos()
    ids = [p.stem for p in photos]
    gt = ground_truth()
    _, positive, junk = landmark_labels(gt, ids)
    different = np.zeros((len(ids), len(ids)), bool)
    different[tuple(place_pairs(gt, ids)[1].T)] = True
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="held_out_map-"))
    made = []  # the indexes this run built: all that is removed without --keep (never --work itself)
    version = getattr(streamk, "__version__", "?")
    log(f"streamk {version} from {Path(streamk.__file__).parent}, indexes in {work}")
    per_fold, pooled = [], {name: [] for name, _ in SEARCHES}
    false = {name: np.zeros(2, np.int64) for name, _ in SEARCHES}
    try:
        for label, db_positions in collections(args.collection, ids, gt, args.folds, args.draws):
            held = np.setdiff1d(np.arange(len(ids)), db_positions)
            # a query with a positive in the index (its landmark may have none among 50 photos)
            queries = [a for a in held if positive[db_positions][:, positive[a]].any()]
            name = label.replace(" ", "") + (f"-of-{args.folds}" if args.collection == "large" else "")
            index_path = work / f"{args.collection}-{name}-k{args.k}"
            t0 = time.perf_counter()
            if not (args.keep and index_path.exists()):
                shutil.rmtree(index_path, ignore_errors=True)
                made.append(index_path)
                build(index_path, [photos[j] for j in db_positions], args.k, args.workers, default_cache_dir())
            t1 = time.perf_counter()
            aps, wrong = fold_aps(index_path, queries, db_positions, ids, positive, junk, different)
            log(f"{label}: {len(db_positions)} photos indexed in {t1 - t0:.0f} s, {len(queries)} queries in "
                f"{time.perf_counter() - t1:.0f} s, load {load_str()}")
            per_fold.append([label, len(queries)] + [f"{100 * np.mean(aps[n]):.1f}" for n, _ in SEARCHES])
            for n, _ in SEARCHES:
                pooled[n] += aps[n]
                false[n] += wrong[n]
    finally:
        if not args.keep:
            for path in made:
                shutil.rmtree(path, ignore_errors=True)
            if not args.work:
                shutil.rmtree(work, ignore_errors=True)
    n_q = len(pooled[SEARCHES[0][0]])
    rows = per_fold + [["all", n_q] + [f"{100 * np.mean(pooled[n]):.1f}" for n, _ in SEARCHES]]
    table(("held-out queries", "queries") + tuple(n for n, _ in SEARCHES), rows,
          title=f"mAP of held-out photos, {args.collection} collection, streamk {version}, T-emb k = {args.k} + "
                f"GMP, {cpu_model()}, load {load_str()}")
    table(("search", "false verifications in a top 10", "queries with one"),
          [(n, int(false[n][0]), int(false[n][1])) for n, _ in SEARCHES if n != SEARCHES[0][0]],
          title=f"Results of a different place marked verified in a query's top 10 ({n_q} queries)")


if __name__ == "__main__":
    main()

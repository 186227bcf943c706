"""Query expansion over verified images (+SP+QE) at expand 5, 10, 20 and 50, on three
query sets of paris6k-subset, for each expansion streamk offers.

    python bench/expansion.py [--expand 5,10,20,50] [--methods aqe,recursive,recursive-centred]
                              [--max-verifications 25,100] [--subsets 8]

Vectors: T-emb k = 16 + GMP, no RN, seed 0, learned on the 250 photos (the rows
``T-emb k=16 + gmp +SP`` and ``+SP+QE(recursive)`` of ``streamk eval --dataset paris6k-subset --vocab-size 16``);
visual words learned on the 250 photos with seed 0, as that row's.

Query sets:

- official: the 12 box queries and their ground truth (what ``streamk eval`` scores);
- every photo: each of the 250 photos that is a positive of a landmark, as a query (the
  whole photo, its stored vector); positives: the good and ok images of its landmarks,
  junk ignored, the photo itself left out of the database it searches (leave one out);
- 50-photo collections: the same, on ``--subsets`` draws of a new user's first index (8
  photos of each landmark and 10 others, bench/false_verification.py's draws), with the 250
  photos' vectors and decisions; the mean of their mAPs.

Each query's verification against every database photo is computed once (the same
``verify_geometry`` call a search makes; the decision of a pair does not depend on the
others verified with it) and cached in ~/.cache/streamk/bench/; an expansion that
verifies the results of its own searches reads its decisions from there. The searches
are exact (inner products with the 250 vectors). Prints mAP and the extra work per
query (searches and verifications beyond the first stage's R); never asserts.
"""

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, paris_features, table  # noqa: E402

import streamk  # noqa: E402,F401  (thread policies before numpy's BLAS loads)

CACHE = Path(os.path.expanduser("~/.cache/streamk/bench"))
R = 100


def vectors(db, queries):
    """(database (N, D), official queries (Q, D)) of T-emb k = 16 + GMP, seed 0, no RN."""
    from streamk.evaluation.experiment import run_experiment

    path = CACHE / "expansion-temb16-gmp-seed0.npz"
    if path.exists():
        z = np.load(path)
        return z["database"], z["queries"]
    log("encoding T-emb k = 16 + GMP (once; cached) ...")
    rows, _ = run_experiment([f.descriptors for f in db], [f.descriptors for f in db], [f.descriptors for f in queries],
                             "temb", 16, {}, ("gmp",), (False,), learning_is_database=True, verbose=False, seed=0)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(path, database=rows[0].database, queries=rows[0].queries)
    return rows[0].database, rows[0].queries


def vocabulary(db):
    from streamk.verification import Vocabulary

    path = CACHE / "paris-250-vocabulary.npz"  # the same words as bench/false_verification.py's
    if path.exists():
        return Vocabulary.load(path)
    log("learning the visual words (once; cached) ...")
    voc = Vocabulary(seed=0).fit([f.descriptors for f in db])
    voc.save(path)
    return voc


def every_photo_queries(ds, full):
    """[(database index of the photo, positives, junk)] of the photos that are a landmark's positive."""
    from streamk.verification.pairs import landmark_labels

    _, positive, junk = landmark_labels(full, list(ds.image_ids))
    out = []
    for p in range(len(ds.image_ids)):
        own = np.flatnonzero(positive[p])
        if len(own):
            pos = np.flatnonzero(positive[:, own].any(axis=1))
            jnk = np.flatnonzero(junk[:, own].any(axis=1) & ~positive[:, own].any(axis=1))
            out.append((p, pos[pos != p], jnk[jnk != p]))
    return out


def verification_code():
    """The bytes of streamk.verification's modules but the expansion's: a cached decision is
    reused only while the code that made it is unchanged."""
    import streamk.verification as package

    root = Path(package.__file__).parent
    return b"".join(p.read_bytes() for p in sorted(root.glob("*.py")) if p.name != "expansion.py")


def verification_matrix(name, voc, qrecs, boxes, records):
    """(inliers, verified): (Q, N) of every query against every database record, cached
    (keyed by the records, the boxes and the verification code)."""
    from streamk.verification import verify_geometry

    key = hashlib.sha1(b"".join(bytes(r) for r in records[:5]) + repr(boxes).encode()
                       + verification_code()).hexdigest()[:12]
    path = CACHE / f"expansion-verified-{name}-{key}.npz"
    if path.exists():
        z = np.load(path)
        return z["inliers"], z["verified"]
    log(f"verifying {len(qrecs)} queries x {len(records)} photos (once; cached) ...")
    t0 = time.perf_counter()
    inl = np.zeros((len(qrecs), len(records)), np.int64)
    ver = np.zeros((len(qrecs), len(records)), bool)
    for i, (qrec, box) in enumerate(zip(qrecs, boxes)):
        checks = verify_geometry(qrec, records, query_box=box)
        inl[i] = [c.inliers for c in checks]
        ver[i] = [c.verified for c in checks]
    log(f"  {time.perf_counter() - t0:.0f} s")
    np.savez(path, inliers=inl, verified=ver)
    return inl, ver


def average_precision(ranking, pos, junk):
    """Oxford's AP (the trapezoid of streamk.evaluation), junk removed from the ranking."""
    from streamk.evaluation.metrics import compute_map

    return compute_map([ranking], [(pos, junk)]).aps[0]


class QuerySet:
    """One query set: vectors, verification decisions, ground truth; searches exact."""

    def __init__(self, name, D, Q, inliers, verified, gt, leave_out):
        self.name, self.D, self.Q = name, D, Q
        self.inliers, self.verified, self.gt = inliers, verified, gt
        self.leave_out = leave_out  # database index each query may not find (itself), or -1

    def searcher(self, i, counter):
        """search(q) -> [(row, score)] of every row best first, without the left-out row."""
        def search(q2):
            counter["searches"] += 1
            s = self.D @ np.asarray(q2, np.float64).reshape(-1)
            if self.leave_out[i] >= 0:
                s[self.leave_out[i]] = -np.inf
            order = np.argsort(-s, kind="stable")
            return [(int(r), float(s[r])) for r in order if np.isfinite(s[r])]
        return search

    def verifier(self, i, counter):
        """verify(rows) -> [(inliers, verified)] of query i, from the matrix."""
        def verify(rows):
            rows = np.asarray(rows, np.int64)
            counter["verifications"] += len(rows)
            return list(zip(self.inliers[i, rows].tolist(), self.verified[i, rows].tolist()))
        return verify


def plus_sp_qe(qs, i, method, expand, counter, budget):
    """The +SP+QE ranking of query i: its first stage's top R verified, expanded by ``method``:
    "aqe" (one AQE over the first ``expand`` verified), "recursive" (step ``expand``),
    "recursive-capped" (recursive AQE that averages ``expand`` images in all),
    "rounds-only" (the recursion's rounds over the first stage's verified, nothing new verified) or
    "recursive-centred" (recursive AQE less the collection's mean vector, a search's default);
    ``budget``: the recursion's new verifications, at most."""
    from streamk.verification import average_query_expansion, recursive_expansion

    search, verify = qs.searcher(i, counter), qs.verifier(i, counter)
    rows = np.array([r for r, _ in search(qs.Q[i])], np.int64)
    checks = verify(rows[:R])
    head = sorted([(int(r), c) for r, (c, ok) in zip(rows[:R], checks) if ok], key=lambda v: -v[1])
    if not head or not expand:
        found = [r for r, _ in head]
        return found + [r for r in rows.tolist() if r not in set(found)]
    if method == "aqe":
        found = [r for r, _ in head]
        results = search(average_query_expansion(qs.Q[i], qs.D[found[:expand]]))
    else:
        rx = recursive_expansion(qs.Q[i], head, lambda ids: qs.D[np.asarray(ids, np.int64)], search,
                                 None if method == "rounds-only" else verify,
                                 step=expand, checked=rows[:R].tolist(), max_verifications=budget,
                                 centre=(qs.D.mean(axis=0), len(qs.D)) if method == "recursive-centred" else None,
                                 **({"top": expand} if method == "recursive-capped" else {}))
        found, results = [r for r, _ in rx.verified], rx.results
    return found + [r for r, _ in results if r not in set(found)]


def run_method(qs, method, expand, budget):
    """(mAP, mean extra searches, mean extra verifications) of one expansion on a query set."""
    aps, extra_s, extra_v = [], [], []
    for i in range(len(qs.Q)):
        counter = {"searches": 0, "verifications": 0}
        ranking = plus_sp_qe(qs, i, method, expand, counter, budget)
        pos, junk = qs.gt[i]
        aps.append(average_precision(np.asarray(ranking, np.int64), pos, junk))
        extra_s.append(counter["searches"] - 1)
        extra_v.append(counter["verifications"] - min(R, len(qs.D) - int(qs.leave_out[i] >= 0)))  # beyond the first R
    return 100 * float(np.nanmean(aps)), float(np.mean(extra_s)), float(np.mean(extra_v))


def query_sets():
    from streamk.verification import make_query_record, stored_record

    ds, db, queries, full = paris_features(ground_truth=True)
    D, Q = vectors(db, queries)
    voc = vocabulary(db)
    records = [stored_record(voc, f.keypoints, f.descriptors, f.image_size) for f in db]
    boxes = [q.box for q in ds.queries]
    qrecs = [make_query_record(voc, f.keypoints, f.descriptors, f.image_size) for f in queries]
    inl, ver = verification_matrix("official", voc, qrecs, boxes, records)
    official = QuerySet("official 12", D, Q, inl, ver, ds.ground_truth(), np.full(len(Q), -1))
    photos = every_photo_queries(ds, full)
    idx = [p for p, _, _ in photos]
    prec = [make_query_record(voc, db[p].keypoints, db[p].descriptors, db[p].image_size) for p in idx]
    inl, ver = verification_matrix("photos", voc, prec, [None] * len(idx), records)
    every = QuerySet(f"every photo ({len(idx)})", D, D[idx], inl, ver, [(pos, jnk) for _, pos, jnk in photos],
                     np.array(idx))
    return official, every, (ds, full, photos)


def subset_query_sets(every, context, draws):
    """The photo queries on 50-photo collections (bench/false_verification.py's draws 0..draws-1:
    8 photos of each landmark and 10 others), each landmark photo in one a query against the
    other 49: a new user's first index. The vectors and decisions are the 250 photos' (their
    encoder and words), restricted to the 50."""
    from false_verification import small_collection

    ds, full, photos = context
    row_of = {p: r for r, (p, _, _) in enumerate(photos)}
    gt = {p: (pos, jnk) for p, pos, jnk in photos}
    out = []
    for d in range(draws):
        sel = np.sort(small_collection(list(ds.image_ids), full, seed=d))
        at = {int(s): k for k, s in enumerate(sel)}
        qi = [int(p) for p in sel if int(p) in row_of]
        r = [row_of[p] for p in qi]
        truth = [(np.array([at[x] for x in gt[p][0] if x in at], np.int64),
                  np.array([at[x] for x in gt[p][1] if x in at], np.int64)) for p in qi]
        out.append(QuerySet(f"draw {d}", every.D[sel], every.D[qi], every.inliers[r][:, sel],
                            every.verified[r][:, sel], truth, np.array([at[p] for p in qi])))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--expand", default="5,10,20,50", help="verified images averaged, at most (comma list)")
    p.add_argument("--methods", default="aqe,recursive,recursive-centred", help="expansions (comma list)")
    p.add_argument("--max-verifications", default=None,
                   help="the recursion's new verifications per query, at most (comma list: a row each; default: "
                        "the index's, streamk.index.second_stage.recursive_budget(R))")
    p.add_argument("--subsets", type=int, default=8,
                   help="50-photo collections (the false-verification bench's draws) pooled into a third row (0: none)")
    args = p.parse_args()
    from streamk.index.second_stage import recursive_budget

    official, every, context = query_sets()
    sets = [official, every]
    if args.subsets:
        sets.append(subset_query_sets(every, context, args.subsets))
    rows = []
    budgets = [int(b) for b in (args.max_verifications or str(recursive_budget(R))).split(",")]
    for method in args.methods.split(","):
        for budget in (budgets if method.startswith("recursive") else budgets[:1]):
            for qs in sets:
                cells, cost = [], []
                for n in (int(x) for x in args.expand.split(",")):
                    parts = [run_method(one, method, n, budget) for one in (qs if isinstance(qs, list) else [qs])]
                    m, s, v = np.mean(parts, axis=0)  # a list of collections: the mean of their mAPs
                    cells.append(f"{m:.1f}")
                    cost.append(f"{s:.1f} / {v:.0f}")
                name = f"{method} (<= {budget} new)" if method.startswith("recursive") else method
                label = f"50-photo collections ({len(qs)}, mean)" if isinstance(qs, list) else qs.name
                rows.append([name, label, *cells, ", ".join(cost)])
    table(["expansion", "queries", *[f"expand {n}" for n in args.expand.split(",")],
           "extra searches / verifications per query"], rows,
          title=f"+SP+QE mAP, paris6k-subset T-emb k = 16 GMP seed 0, R = {R}; CPU {cpu_model()}; load {load_str()}")


if __name__ == "__main__":
    main()

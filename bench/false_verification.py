"""False verifications per 1,000 pairs of photos of different places, beside the share of
true pairs verified, before (the fixed 12 inliers) and after (the significance test and the
plausibility checks of ``streamk.verification``), measured in one run.

    python bench/false_verification.py [--draws 4] [--collections large,small,held-out,held-out-large]
                                       [--per-draw] [--show-false] [--set NAME=VALUE ...]

Pairs: paris6k-subset's 250 photos with the official Paris6k ground truth
(``streamk.verification.pairs``): *different places* are ordered pairs of positives
(good/ok) of different landmarks, neither junk for the other's landmark; *true pairs* are
ordered pairs of positives of one landmark. Junk and images that are no landmark's
positive take part in no pair. Each pair is one verification: the first photo's query
record (every feature, 3 words each, the whole image) against the second's stored record.

Collections, each with its own visual words (``Vocabulary(seed=0)``, the defaults, learned
on the collection's own photos as ``streamk index create`` does; cached in
~/.cache/streamk/bench/):

- large: the 250 photos;
- small: a new user's first index, 50 photos: 8 positives of each of the five landmarks and
  10 photos that are none of theirs (junk, Arc de Triomphe, unlabelled), drawn at random;
  ``--draws`` selections, draw d from ``numpy.random.default_rng(d)`` (so any draw is
  reproducible alone), each learning its own words (cached under its seed), their pairs
  pooled. ``--per-draw`` prints one line per draw; the spread of the true-pair share over
  the draws (min / median / max) is printed either way;
- held-out (not in the default): the issue's held-out check on the data we have. Per draw of
  the small collection, each of the other ~200 photos (held out: not among the 50 the words
  were learned on) is a query, searched as a user would with ``--verify 100``: every one of
  the 50 photos is verified (R = 100 > 50) and the verified ones ranked first by inliers.
  Prints the precision of the mark (true verified / all verified, over the pairs with an
  answer), false verifications per 10,000 pairs, and the queries with a false verification in
  their top 10 (a tie in inliers counted against it).
- held-out-large (not in the default): the same against the large collection. The 250 photos
  in 5 folds (a permutation from ``numpy.random.default_rng(0)``); each fold's 50 photos query an
  index of the other 200, whose words were learned on those 200 alone. Every one of the 200 is
  verified, a superset of a search's R = 100: the false verifications and the top 10 counted here
  are at least those a search would show.

Pooling: a pair of photos drawn into several collections is verified once in each, with
that collection's words and records, so each is a separate trial of the decision, but the
trials are not independent (the same two photos, words learned on overlapping sets). The
pooled 95 % bound treats them as independent and is to be read with that caveat; the count
of DISTINCT ordered pairs of photos covered is printed beside it (the bound over distinct
pairs alone is the conservative reading). The 250 photos hold 30,490 ordered pairs of different
places in all, so that reading cannot go below 0.98 per 10,000 with none false (24 draws cover
19,850 of them, 48 draws 26,504, 96 draws 29,914).

``--set`` overrides a field of the significance rule's ``VerificationParams`` (repeatable, e.g.
``--set hamming_threshold=22``): a variant measured against the fixed rule in one run.

Prints, never asserts; the CPU model (lscpu) and the load average are in the title. The
95 % bound is the one-sided Clopper-Pearson upper bound of the rate; CPU ms per pair is the
thread's CPU time of the verifications (query records excluded), BLAS and Numba on one thread.
"nearest different" is the least log10 NFA of a pair of different places (the margin to the
line, log10 1e-4 = -4, under the significance rule). For the large and small collections, a
second table counts the true pairs the significance rule did not verify by the first check
they failed (``Verification.why``: chance, one-likeness, one-line, no-model, few-matches).
"""

import argparse
import collections
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, paris_features, table  # noqa: E402

import streamk  # noqa: E402,F401  (thread policies before numpy's BLAS loads)

CACHE = Path(os.path.expanduser("~/.cache/streamk/bench"))
LANDMARKS = ("defense", "eiffel", "invalides", "louvre", "moulinrouge")
PER_LANDMARK, OTHERS = 8, 10


def small_collection(ids, full, seed):
    """Positions in ``ids`` of a 50-photo collection (module docstring) drawn with
    ``numpy.random.default_rng(seed)``: 8 of each landmark's positives, then 10 of the rest."""
    from streamk.verification.pairs import landmark_labels

    names, positive, _ = landmark_labels(full, ids)
    rng = np.random.default_rng(seed)
    chosen = []
    for name in LANDMARKS:
        col = names.index(name)
        own = [i for i, iid in enumerate(ids) if iid.split("_")[1] == name and positive[i, col]]
        chosen += rng.choice(own, PER_LANDMARK, replace=False).tolist()
    others = [i for i in range(len(ids)) if not positive[i, [names.index(n) for n in LANDMARKS]].any()]
    return sorted(chosen + rng.choice(others, OTHERS, replace=False).tolist())


def vocabulary(name, feats):
    from streamk.verification import Vocabulary

    path = CACHE / f"paris-{name}-vocabulary.npz"
    if path.exists():
        return Vocabulary.load(path)
    log(f"learning the visual words of {name} on {len(feats)} photos (once; cached) ...")
    voc = Vocabulary(seed=0).fit([f.descriptors for f in feats])
    CACHE.mkdir(parents=True, exist_ok=True)
    voc.save(path)
    return voc


def verify_pairs(voc, feats, pairs, params, counts=None, whys=None):
    """(verified flag per pair, log10 NFA per pair, CPU seconds of the verifications) of ordered
    pairs (a, b) of positions in feats (the thread's CPU time: what one core spends, whatever
    the load). ``counts``: an (n, 2) int array, filled with each pair's inliers and tentative
    correspondences; ``whys``: a list of n, filled with each pair's ``Verification.why``."""
    from streamk.verification import make_query_record, stored_record, verify_geometry

    records = [stored_record(voc, f.keypoints, f.descriptors, f.image_size) for f in feats]
    out = np.zeros(len(pairs), bool)
    nfa = np.full(len(pairs), np.inf)
    t = 0.0
    for a in np.unique(pairs[:, 0]):
        rows = np.flatnonzero(pairs[:, 0] == a)
        f = feats[a]
        q = make_query_record(voc, f.keypoints, f.descriptors, f.image_size)
        t0 = time.thread_time()
        checks = verify_geometry(q, [records[b] for b in pairs[rows, 1]], params=params)
        t += time.thread_time() - t0
        out[rows] = [v.verified for v in checks]
        nfa[rows] = [v.log10_nfa for v in checks]
        if counts is not None:
            counts[rows] = [(v.inliers, v.tentative) for v in checks]
        if whys is not None:
            for r, v in zip(rows, checks):
                whys[r] = v.why
    return out, nfa, t


def measure(name, voc, feats, ids, full, overrides, seen=None, false_pairs=None, why_counts=None):
    """{rule: (false, different pairs, true verified, true pairs, ms per pair, least log10 NFA of
    a pair of different places)} of one collection, and under "fixed inliers" the fixed rule's
    inliers of the pairs of different places and of the true pairs (two arrays: the same rule
    at any threshold >= 12, :func:`print_thresholds`); overrides: the significance rule's. ``seen``
    (a dict of two sets, "different" and "same") collects the ordered pairs of image ids;
    ``false_pairs`` (a list) the significance rule's false verifications: (collection, query id,
    candidate id, inliers, tentative, log10 NFA); ``why_counts`` (a Counter) the first check
    that each true pair it did not verify failed (``Verification.why``)."""
    from streamk.verification import VerificationParams
    from streamk.verification.pairs import place_pairs

    same, different = place_pairs(full, ids)
    if seen is not None:
        for kind, part in (("different", different), ("same", same)):
            seen[kind].update((ids[a], ids[b]) for a, b in part)
    pairs = np.concatenate([different, same])
    out = {}
    for rule, params in (("before", VerificationParams.fixed_inliers()), ("after", VerificationParams(**overrides))):
        counts = np.zeros((len(pairs), 2), np.int64)
        whys = [None] * len(pairs)
        ok, nfa, seconds = verify_pairs(voc, feats, pairs, params, counts, whys)
        if rule == "after" and why_counts is not None:
            why_counts.update(whys[j] for j in range(len(different), len(pairs)) if not ok[j])
        if rule == "after" and false_pairs is not None:
            false_pairs += [(name, ids[pairs[j, 0]], ids[pairs[j, 1]], int(counts[j, 0]), int(counts[j, 1]),
                             float(nfa[j])) for j in np.flatnonzero(ok[:len(different)])]
        out[rule] = (int(ok[:len(different)].sum()), len(different), int(ok[len(different):].sum()), len(same),
                     1000 * seconds / len(pairs), float(nfa[:len(different)].min(initial=np.inf)))
        if rule == "before":
            out["fixed inliers"] = (counts[:len(different), 0], counts[len(different):, 0])
        log(f"{name} {rule}: {out[rule]}")
    return out


def parse_overrides(items):
    """{field: value} of ``--set NAME=VALUE`` items: a VerificationParams field, the value a Python
    literal (a number, a tuple, None) or else the string as given."""
    import ast
    from dataclasses import fields

    from streamk.verification import VerificationParams

    known = {f.name for f in fields(VerificationParams)}
    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or name not in known:
            sys.exit(f"--set {item!r}: expected NAME=VALUE with NAME one of {sorted(known)}")
        try:
            out[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[name] = text
    VerificationParams(**out).checked()  # a bad value fails here, before any photo is read
    return out


def significance_label(overrides):
    """The significance rule's name in a table (its bar, ``false_alarms_per_pair``), with the other
    fields ``--set`` changed."""
    from streamk.verification import VerificationParams

    bar = VerificationParams(**overrides).false_alarms_per_pair
    shown = f"{bar:.1e}".replace(".0e", "e").replace("e-0", "e-").replace("e+0", "e")  # 1e-4, 2.7e-6
    return f"NFA <= {shown} + plausible" + "".join(f", {k}={v!r}" for k, v in overrides.items()
                                                 if k != "false_alarms_per_pair")


def upper95(k, n):
    from scipy.stats import beta

    return float(beta.ppf(0.95, k + 1, n - k)) if k < n else 1.0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=4, help="selections of the small collection (default 4)")
    ap.add_argument("--collections", default="large,small", help="any of large, small, held-out, held-out-large")
    ap.add_argument("--per-draw", action="store_true", help="print one line per draw of the small collection")
    ap.add_argument("--show-false", action="store_true",
                    help="list each false verification of the significance rule (collection, photos, inliers, NFA)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a VerificationParams field of the significance rule (repeatable)")
    args = ap.parse_args(argv)
    wanted = args.collections.split(",")
    unknown = set(wanted) - {"large", "small", "held-out", "held-out-large"}
    if unknown:
        sys.exit(f"--collections: unknown {sorted(unknown)}; any of large, small, held-out, held-out-large")
    overrides = parse_overrides(args.set)
    ds, db, _, full = paris_features(ground_truth=True)
    ids = list(ds.image_ids)
    results, false_pairs, why_counts = {}, [], {}
    if "large" in wanted:
        name = "large (250 photos)"
        why_counts[name] = collections.Counter()
        results[name] = measure("large", vocabulary("250", db), db, ids, full, overrides, false_pairs=false_pairs,
                                why_counts=why_counts[name])
    if "small" in wanted:
        name = f"small (50 photos, {args.draws} random draws)"
        why_counts[name] = collections.Counter()
        results[name] = small_draws(db, ids, full, overrides, args, false_pairs, why_counts[name])
    if results:
        print_pooled(results, overrides)
        print_thresholds(results, overrides)
        print_whys(results, why_counts)
    if "held-out" in wanted:
        held_out_draws(db, ids, full, overrides, args, false_pairs)
    if "held-out-large" in wanted:
        held_out_folds(db, ids, full, overrides, false_pairs)
    if args.show_false and not false_pairs:
        print("\nFalse verifications of the significance rule: none")
    elif args.show_false:
        table(("collection", "query photo", "candidate photo", "inliers / tentative", "log10 NFA"),
              [(c, a, b, f"{k} / {n}", f"{v:.2f}") for c, a, b, k, n, v in false_pairs],
              title=f"False verifications of the significance rule ({len(false_pairs)})")


def small_draws(db, ids, full, overrides, args, false_pairs=None, why_counts=None):
    """The small collection's results pooled over ``args.draws`` random draws; prints the
    per-draw lines (with ``--per-draw``), the spread of the true-pair share and the distinct pairs.
    ``false_pairs``, ``why_counts``: as :func:`measure`'s, over every draw."""
    pooled, per_draw, seen = {}, [], {"different": set(), "same": set()}
    for d in range(args.draws):
        t0 = time.perf_counter()
        sel = small_collection(ids, full, seed=d)
        feats = [db[i] for i in sel]
        got = measure(f"small seed {d}", vocabulary(f"small-seed{d}", feats), feats, [ids[i] for i in sel],
                      full, overrides, seen, false_pairs, why_counts)
        wall = time.perf_counter() - t0
        log(f"small seed {d}: {wall:.0f} s wall, load {load_str()}")
        per_draw.append((d, got, wall))
        inliers = got.pop("fixed inliers")
        pooled["fixed inliers"] = tuple(np.concatenate([a, b]) for a, b in
                                        zip(pooled.get("fixed inliers", (np.zeros(0, np.int64),) * 2), inliers))
        for rule, v in got.items():
            old = pooled.get(rule, (0, 0, 0, 0, 0.0, np.inf))
            pooled[rule] = tuple(a + b for a, b in zip(old[:4], v[:4])) + (old[4] + v[4] / args.draws,
                                                                            min(old[5], v[5]))
    if args.per_draw:
        table(("seed", "rule", "false / different pairs", "true verified / true pairs", "nearest different (log10 NFA)",
               "wall s"), [(d, rule, f"{v[0]} / {v[1]}", f"{v[2]} / {v[3]} ({100 * v[2] / v[3]:.1f} %)", f"{v[5]:.2f}",
                            f"{wall:.0f}") for d, got, wall in per_draw for rule, v in got.items()],
              title="Small collection, per draw")
    rows = []
    for rule in ("before", "after"):
        share = np.array([100 * got[rule][2] / got[rule][3] for _, got, _ in per_draw])
        rows.append((rule, f"{share.min():.1f} / {np.median(share):.1f} / {share.max():.1f} %"))
    table(("rule", "true pairs verified per draw (min / median / max)"), rows,
          title=f"Small collection, {args.draws} draws: spread of the true-pair share")
    walls = np.array([w for _, _, w in per_draw])
    nd, ns = len(seen["different"]), len(seen["same"])
    f_after = pooled["after"][0]
    # with none false, no distinct pair was false either: the bound over the distinct pairs alone holds
    distinct = f"{10000 * upper95(0, nd):.2f} per 10,000" if f_after == 0 else "not computed (some false)"
    print(f"\ndistinct ordered pairs covered: {nd} of different places, {ns} true; pooled pairs of different "
          f"places: {pooled['after'][1]} (re-drawn pairs are separate trials but not independent: the pooled bound "
          f"assumes independence); {f_after} false after: 95 % bound over the distinct pairs alone {distinct}\n"
          f"wall per draw: {walls.mean():.0f} s mean ({walls.min():.0f}-{walls.max():.0f}), load {load_str()}")
    return pooled


def held_out_draws(db, ids, full, overrides, args, false_pairs=None):
    """The held-out queries of ``args.draws`` draws of the small collection (module docstring)."""
    draws = [(f"seed {d}", small_collection(ids, full, seed=d), f"small-seed{d}") for d in range(args.draws)]
    held_out(db, ids, full, overrides, draws, f"the small collection, {args.draws} draws", false_pairs)


FOLDS = 5  # held-out-large: the 250 photos in 5 folds, each against the other 200


def held_out_folds(db, ids, full, overrides, false_pairs=None):
    """The held-out queries of the large collection (module docstring): each of FOLDS folds of the
    250 photos queries an index of the other photos, whose words were learned on those alone."""
    order = np.random.default_rng(0).permutation(len(ids))
    folds = [(f"fold {k}", np.sort(np.setdiff1d(order, order[k::FOLDS])), f"fold{k}-of-{FOLDS}")
             for k in range(FOLDS)]
    size = len(ids) - len(ids) // FOLDS
    held_out(db, ids, full, overrides, folds, f"the large collection ({size} photos), {FOLDS} folds", false_pairs)


def held_out(db, ids, full, overrides, selections, title, false_pairs=None):
    """Held-out queries against each of ``selections`` ((label, positions in ``ids``, name of its
    cached words)): every other photo with an answer is a query, each photo of the collection
    verified (a superset of a search's R = 100 where the collection is larger), the verified ranked
    first by inliers. One table row per rule, pooled over the collections; ``false_pairs`` (a list)
    collects the significance rule's false verifications, as :func:`measure`'s."""
    from streamk.verification import VerificationParams, make_query_record, stored_record, verify_geometry
    from streamk.verification.pairs import place_pairs

    same, different = place_pairs(full, ids)
    answer = np.zeros((len(ids), len(ids)), np.int8)  # 1 same place, -1 different places, 0 no answer
    answer[same[:, 0], same[:, 1]] = 1
    answer[different[:, 0], different[:, 1]] = -1
    rules = (("fixed 12 inliers", VerificationParams.fixed_inliers()),
             (significance_label(overrides), VerificationParams(**overrides)))
    # per rule: false, different pairs, true verified, true pairs, queries, queries with a false one in the top 10
    tally = {name: np.zeros(6, np.int64) for name, _ in rules}
    # the fixed rule at other thresholds, from its inliers (print_thresholds): false, true verified, top 10
    at = {m: np.zeros(3, np.int64) for m in FIXED_THRESHOLDS}
    t0 = time.perf_counter()
    for label, sel, words in selections:
        held = np.setdiff1d(np.arange(len(ids)), sel)
        feats = [db[i] for i in sel]
        voc = vocabulary(words, feats)
        records = [stored_record(voc, f.keypoints, f.descriptors, f.image_size) for f in feats]
        for a in held:
            kinds = answer[a, sel]
            if not kinds.any():
                continue  # a query with no answer against any of the 50 (junk, unlabelled)
            f = db[a]
            q = make_query_record(voc, f.keypoints, f.descriptors, f.image_size)
            for rule, (name, params) in enumerate(rules):
                checks = verify_geometry(q, records, params=params)
                ok = np.array([v.verified for v in checks])
                inl = np.array([v.inliers for v in checks])
                false = ok & (kinds == -1)
                # rank of a false one among the verified (shown first, by inliers): ties against it
                ranks = [int((ok & (inl >= inl[j])).sum()) for j in np.flatnonzero(false)]
                if false_pairs is not None and rule == 1:  # the significance rule's, as measure's
                    false_pairs += [(f"held-out {label} (rank {r})", ids[a], ids[sel[j]], int(inl[j]),
                                     int(checks[j].tentative), float(checks[j].log10_nfa))
                                    for j, r in zip(np.flatnonzero(false), ranks)]
                tally[name] += (int(false.sum()), int((kinds == -1).sum()), int((ok & (kinds == 1)).sum()),
                                int((kinds == 1).sum()), 1, int(any(r <= 10 for r in ranks)))
                if rule == 0:
                    for m, row in at.items():
                        okm = inl >= m
                        worst = inl[okm & (kinds == -1)]  # a false one's rank: the verified with as many inliers
                        row += (len(worst), int((okm & (kinds == 1)).sum()),
                                int(any((okm & (inl >= w)).sum() <= 10 for w in worst)))
        log(f"held-out {label}: {time.perf_counter() - t0:.0f} s, load {load_str()}")
    rows = []
    for name, (f, nd, t, ns, nq, top) in tally.items():
        rows.append((name, nq, nd, f"{f} ({10000 * f / max(nd, 1):.2f})", f"{10000 * upper95(f, nd):.2f}",
                     f"{100 * t / max(ns, 1):.1f} %", f"{100 * t / max(t + f, 1):.2f} %", top))
    table(("rule", "queries", "pairs of different places", "false (per 10,000)", "95 % bound per 10,000",
           "true pairs verified", "precision of the mark", "queries with a false one in the top 10"), rows,
          title=f"Held-out queries against {title} ({cpu_model()}, load {load_str()})")
    ns = tally[rules[0][0]][3]
    table(("rule", "false", "true pairs verified", "precision of the mark", "queries with a false one in the top 10"),
          [(f"fixed {m} inliers", f, f"{100 * t / max(ns, 1):.1f} %", f"{100 * t / max(t + f, 1):.2f} %", top)
           for m, (f, t, top) in at.items()],
          title=f"Held-out queries against {title}: the fixed rule at other thresholds (the same run's inliers)")


FIXED_THRESHOLDS = (12, 14, 16, 18, 20, 24)  # inliers; 12 is the rule before 0.3


def print_thresholds(results, overrides):
    """The fixed rule at other inlier thresholds, from the same run's inliers (a threshold >= 12
    changes the decision only, not the search), beside the significance rule: the true share at
    an equal count of false verifications."""
    rows = []
    for name, res in results.items():
        inl_different, inl_same = res["fixed inliers"]
        for m in FIXED_THRESHOLDS:
            rows.append((name, f"fixed {m} inliers", int((inl_different >= m).sum()),
                         f"{100 * (inl_same >= m).mean():.1f} %"))
        # the least threshold with none false (this run's inliers say nothing below 12)
        zero = max(int(inl_different.max(initial=0)) + 1, FIXED_THRESHOLDS[0])
        rows.append((name, f"fixed {zero} inliers (the least >= 12 with none false)", 0,
                     f"{100 * (inl_same >= zero).mean():.1f} %"))
        f, _, t, ns = res["after"][:4]
        rows.append((name, significance_label(overrides), f, f"{100 * t / ns:.1f} %"))
    table(("collection", "rule", "false verifications", "true pairs verified"), rows,
          title="The fixed rule at other thresholds (the same run's inliers) and the significance rule")


def print_whys(results, why_counts):
    """Why the true pairs the significance rule did not verify were not: per collection, the count
    (and share of its true pairs) of each first check failed (streamk.verification.WHY_NOT_VERIFIED)."""
    from streamk.verification import WHY_NOT_VERIFIED

    codes = [w for w in WHY_NOT_VERIFIED if any(c[w] for c in why_counts.values())]
    rows = []
    for name, counts in why_counts.items():
        ns = results[name]["after"][3]
        rows.append((name, ns, *[f"{counts[w]} ({100 * counts[w] / max(ns, 1):.1f} %)" for w in codes]))
    table(("collection", "true pairs", *codes), rows,
          title=f"True pairs not verified by the significance rule, by the first check they failed ({cpu_model()})")


def print_pooled(results, overrides):
    """The pooled table: one row per collection and rule."""
    rows = []
    for name, res in results.items():
        for rule in ("before", "after"):
            f, nd, t, ns, ms, nearest = res[rule]
            rows.append((name, "fixed 12 inliers" if rule == "before" else significance_label(overrides), nd,
                         f"{1000 * f / nd:.3f} ({f})", f"{1000 * upper95(f, nd):.3f}",
                         f"{10000 * upper95(f, nd):.2f}", ns, f"{100 * t / ns:.1f} %",
                         f"{nearest:.2f}", f"{ms:.2f}"))
    table(("collection", "rule", "pairs of different places", "false per 1,000 (count)", "95 % bound per 1,000",
           "95 % bound per 10,000", "true pairs", "true pairs verified", "nearest different (log10 NFA)",
           "CPU ms per pair"), rows,
          title=f"False verifications, paris6k-subset pairs ({cpu_model()}, load {load_str()})")


if __name__ == "__main__":
    main()

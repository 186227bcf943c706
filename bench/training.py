"""Training an encoder: its cost against its floor, its size, float16 storage, the default encoder.

    python bench/training.py                       # every part, T-emb k = 16, on paris6k-subset's descriptors
    python bench/training.py --k 16,32 --descriptors 40667 --parts fit

Parts (``--parts``, comma list):

- **fit**: ``Encoder(embedding="temb", k).fit`` on ``--descriptors`` descriptors sampled
  from paris6k-subset's database images (Hessian-affine RootSIFT, the feature cache),
  against the floor measured in the same run on the same shapes: numpy's ``R^T R`` of
  the ``n_w x k d`` float64 residuals (the whitening covariance) + ``numpy.linalg.eigh``
  of the ``k d x k d`` result. Prints the ratio fit / floor, the estimate the fit states
  beforehand (``Encoder.fit_cost``) against the time measured, and the encoder's size
  on disk stated before against the file written, in float32 and float16 storage.
- **float16**: the ranking change of float16 storage on paris6k-subset: an encoder
  (T-emb k = 16, GMP, no RN) learned on the 250 database images (unsupervised, as
  ``streamk eval`` does), saved with ``storage="float32"`` and ``"float16"``, each loaded
  and used to encode the database and the 12 box queries: mAP of both, and over the 12
  queries and the 250 database images as queries, the mean top-10 overlap and the
  number of searches whose top 10 differ.
- **default**: the default encoder of ``streamk index create`` (learned on scikit-image's
  photos, :mod:`streamk.pipeline.bundled_encoder`) against the same encoder learned on the
  collection itself (the float16 part's float32 encoder): paris6k-subset mAP of each.

The CPU model (``lscpu``) and the load average are printed with the tables.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, table  # noqa: E402


def paris_features():
    from streamk.datasets import load_paris6k_subset
    from streamk.evaluation.experiment import dataset_features

    dataset = load_paris6k_subset()
    database, queries = dataset_features(dataset, progress=False)
    return dataset, [f.descriptors for f in database], [f.descriptors for f in queries]


# ---------------------------------------------------------------- fit against its floor
def floor_seconds(n_w, kd, seed=0):
    """numpy's R^T R (n_w x kd float64, by the fit's chunks) + eigh of the kd x kd result."""
    rng = np.random.default_rng(seed)
    chunk = max(1, 2_000_000 // kd)
    cov = np.zeros((kd, kd))
    R = rng.standard_normal((min(chunk, n_w), kd))
    t0 = time.perf_counter()
    for s in range(0, n_w, chunk):
        rows = R[:min(chunk, n_w - s)]
        cov += rows.T @ rows
    t_gemm = time.perf_counter() - t0
    cov /= n_w
    t0 = time.perf_counter()
    np.linalg.eigh(cov)
    return t_gemm, time.perf_counter() - t0


def fit_part(ks, n_descriptors, database, out_dir):
    from streamk import Encoder
    from streamk.encoding import machine_rates

    rng = np.random.default_rng(0)
    X = np.concatenate(database)
    X = X[np.sort(rng.choice(len(X), min(n_descriptors, len(X)), replace=False))]
    rates = machine_rates()
    rows, size_rows = [], []
    for k in ks:
        enc = Encoder(embedding="temb", k=k, aggregation="gmp")
        cost = enc.fit_cost(len(X))
        stages = cost.stage_seconds(rates)
        log(f"k={k}: {cost.describe(rates)}")
        load_before = load_str()
        t0 = time.perf_counter()
        enc.fit([X], verbose=False)
        t_fit = time.perf_counter() - t0
        n_w = int(cost.covariance_flops / (2 * cost.eigh_order ** 2))
        t_gemm, t_eigh = floor_seconds(n_w, cost.eigh_order)
        floor = t_gemm + t_eigh
        rows.append([k, f"{cost.eigh_order:,}", f"{len(X):,}", f"{t_fit:.1f}", f"{t_gemm:.1f}", f"{t_eigh:.1f}",
                     f"{t_fit / floor:.2f}", f"{cost.seconds(rates):.1f}",
                     f"{stages['covariance']:.1f} / {stages['eigh']:.1f}", f"{cost.seconds(rates) / t_fit:.2f}",
                     f"{load_before} -> {load_str()}"])
        sizes = []
        for storage in ("float32", "float16"):
            path = Path(out_dir) / f"encoder-k{k}-{storage}.npz"
            enc.save(path, storage=storage)
            stated = cost.encoder_bytes if storage == "float32" else cost.encoder_bytes_float16
            sizes += [f"{stated / 1e6:.1f}", f"{path.stat().st_size / 1e6:.1f}"]
            path.unlink()
        size_rows.append([k, *sizes])
    table(["k", "kd", "descriptors", "fit s", "GEMM s", "eigh s", "fit / (GEMM + eigh)", "estimated s",
           "est. cov / eigh s", "estimate / fit", "load"], rows,
          title=f"T-emb fit against numpy's GEMM + eigh of the same shapes ({cpu_model()}; rates measured "
                f"here: GEMM {rates.gemm64 / 1e9:.1f} GFLOP/s float64, eigh {rates.eigh / 1e9:.1f} "
                f"(9 n^3)/s at n = {rates.eigh_order})")
    table(["k", "float32 stated MB", "float32 file MB", "float16 stated MB", "float16 file MB"], size_rows,
          title="The encoder on disk: stated before the fit (Encoder.fit_cost) and the file written")


# ---------------------------------------------------------------- rankings
def rankings(encoder, database, queries):
    D = encoder.encode_many(database, verbose=False)
    Q = encoder.encode_many(queries, verbose=False)
    return np.argsort(-(Q @ D.T), axis=1, kind="stable"), np.argsort(-(D @ D.T), axis=1, kind="stable")


def map_of(ranks, dataset):
    from streamk.evaluation import compute_map

    return 100.0 * compute_map(ranks, dataset.ground_truth()).map


def learned_on_collection(database):
    from streamk import Encoder

    return Encoder(embedding="temb", k=16, aggregation="gmp").fit(database, verbose=False)


def float16_part(dataset, database, queries, encoder):
    from streamk import Encoder

    t0 = time.perf_counter()
    b32, b16 = encoder.to_bytes("float32"), encoder.to_bytes("float16")
    (q32, d32) = rankings(Encoder.from_bytes(b32), database, queries)
    (q16, d16) = rankings(Encoder.from_bytes(b16), database, queries)
    top32 = np.concatenate([q32[:, :10], d32[:, :10]])
    top16 = np.concatenate([q16[:, :10], d16[:, :10]])
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top32, top16)])
    differ = int(sum(not np.array_equal(a, b) for a, b in zip(top32, top16)))
    table(["storage", "encoder MB", "mAP (12 box queries)", "top-10 overlap", "searches whose top 10 differ"],
          [["float32", f"{len(b32) / 1e6:.1f}", f"{map_of(q32, dataset):.2f}", "1.000", "-"],
           ["float16", f"{len(b16) / 1e6:.1f}", f"{map_of(q16, dataset):.2f}",
            f"{overlap:.4f}", f"{differ} of {len(top32)}"]],
          title=f"float16 storage, paris6k-subset, T-emb k=16 GMP learned on the database "
                f"({time.perf_counter() - t0:.0f} s, load {load_str()})")
    return q32


def default_part(dataset, database, queries, q_self):
    from streamk.pipeline.bundled_encoder import default_encoder, learning_sample

    sets, meta = learning_sample()
    enc, _ = default_encoder(log=log)
    q_def, _ = rankings(enc, database, queries)
    table(["encoder", "learned on", "mAP (12 box queries)"],
          [["default (streamk index create)", f"{len(sets)} scikit-image photos, {sum(map(len, sets)):,} "
            "descriptors", f"{map_of(q_def, dataset):.2f}"],
           ["learned on the collection", f"the 250 paris6k-subset photos, {sum(map(len, database)):,} descriptors",
            f"{map_of(q_self, dataset):.2f}"]],
          title=f"The default encoder against one learned on the collection: T-emb k=16 GMP, no RN, first stage "
                f"(load {load_str()})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="fit,float16,default")
    ap.add_argument("--k", default="16", help="T-emb k for the fit part (comma list)")
    ap.add_argument("--descriptors", type=int, default=20_000, help="learning descriptors of the fit part")
    ap.add_argument("--out", default="/tmp", help="where encoders are written (and removed) to measure sizes")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    print(f"CPU: {cpu_model()}; load {load_str()}", flush=True)
    dataset, database, queries = paris_features()
    if "fit" in parts:
        fit_part([int(k) for k in args.k.split(",")], args.descriptors, database, args.out)
    if parts & {"float16", "default"}:
        encoder = learned_on_collection(database)
        q_self = float16_part(dataset, database, queries, encoder) if "float16" in parts else \
            rankings(encoder, database, queries)[0]
        if "default" in parts:
            default_part(dataset, database, queries, q_self)


if __name__ == "__main__":
    main()

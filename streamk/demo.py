"""The main job until the streaming index lands: encode a synthetic collection
with bursts, search it with sum / democratic / GMP aggregation, print mAP."""

import time

import numpy as np

from .encoder import Encoder
from .synthetic import make_collection

METHODS = ("sum", "democratic", "gmp")


def average_precision(ranked, positives):
    """Plain AP of one ranking (no junk): mean of precision at each positive."""
    hits = np.isin(ranked, positives)
    if not hits.any():
        return 0.0
    ranks = np.flatnonzero(hits)
    return float(np.mean(np.arange(1, len(ranks) + 1) / (ranks + 1)) * hits.sum() / len(positives))


def run_demo(configs=(("temb", 16, {}), ("fv", 16, {"hard": True})), seed=0, out=print):
    coll = make_collection(seed=seed)
    n_desc = sum(len(X) for X in coll.database) / len(coll.database)
    out(f"synthetic collection: {len(coll.database)} database images, {len(coll.queries)} queries, "
        f"{n_desc:.0f} descriptors per image (with bursts), {len(coll.learning)} learning images")
    rows = []
    for embedding, k, params in configs:
        for method in METHODS:
            t0 = time.perf_counter()
            enc = Encoder(embedding=embedding, k=k, embedding_params=params, aggregation=method).fit(coll.learning)
            t_fit = time.perf_counter() - t0
            t0 = time.perf_counter()
            db = enc.encode_many(coll.database)
            queries = enc.encode_many(coll.queries)
            t_enc = (time.perf_counter() - t0) / (len(coll.database) + len(coll.queries))
            ranks = np.argsort(-(queries @ db.T), axis=1, kind="stable")
            m = np.mean([average_precision(r, p) for r, p in zip(ranks, coll.positives)])
            name = f"{embedding}{'-hard' if params.get('hard') else ''} k={k}"
            rows.append((name, method, 100 * m, t_fit, 1000 * t_enc))
    out(f"\n{'embedding':<14}{'aggregation':<13}{'mAP':>7}{'fit s':>8}{'ms/image':>10}")
    for name, method, m, t_fit, t_enc in rows:
        out(f"{name:<14}{method:<13}{m:7.1f}{t_fit:8.1f}{t_enc:10.1f}")
    return rows

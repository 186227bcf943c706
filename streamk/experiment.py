"""Experiments as in the paper's tables: one embedding, several aggregation
methods, with and without RN, on a database, its queries and a learning set.

Every image is embedded once and its Gram matrix computed once; the aggregation
methods share them.  RN is learned per method on the learning images' vectors.
"""

import time
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from .encoder import Encoder
from .postprocessing import RotationNormalisation, l2_normalize, postprocess


@dataclass
class MethodVectors:
    """Image vectors of one (embedding, aggregation, RN) configuration."""

    label: str
    database: np.ndarray  # (N, D) float32
    queries: np.ndarray  # (Q, D) float32

    def ranks(self):
        """Database indices of each query by decreasing similarity (Q, N)."""
        scores = self.queries @ self.database.T
        return np.argsort(-scores, axis=1, kind="stable")


@dataclass
class ExperimentTimings:
    fit_s: float = 0.0
    encode_s_per_image: float = 0.0
    descriptors_per_image: float = 0.0


def _aggregate_all(encoder, sets, methods, desc, verbose):
    """{method: (len(sets), D) L2-normalised xi} and the mean time per image."""
    out = {m: [] for m in methods}
    t0 = time.perf_counter()
    for X in tqdm(sets, desc=desc, disable=not verbose):
        for method, (xi, _) in encoder.aggregate_methods(X, methods).items():
            out[method].append(xi)
    per_image = (time.perf_counter() - t0) / max(1, len(sets))
    return {m: l2_normalize(np.stack(v)) for m, v in out.items()}, per_image


def run_experiment(learning_sets, database_sets, query_sets, embedding="temb", k=64, embedding_params=None,
                   methods=("sum", "democratic", "gmp"), rn=(False, True), power=0.5, rn_components=1000,
                   dims=(None,), learning_is_database=False, verbose=True, **aggregation_params):
    """Vectors of every (method, RN, D') configuration.

    Returns (list of MethodVectors, ExperimentTimings).  With
    ``learning_is_database`` the database vectors serve as RN learning vectors
    (the unsupervised set-up of ``paris6k-subset``), otherwise the learning
    images are aggregated too.
    """
    timings = ExperimentTimings()
    t0 = time.perf_counter()
    encoder = Encoder(embedding=embedding, k=k, embedding_params=embedding_params or {},
                      aggregation="sum", power=power, **aggregation_params)
    encoder.fit(learning_sets, verbose=verbose)
    timings.fit_s = time.perf_counter() - t0
    timings.descriptors_per_image = float(np.mean([len(X) for X in database_sets]))

    db, timings.encode_s_per_image = _aggregate_all(encoder, database_sets, methods, "database", verbose)
    queries, _ = _aggregate_all(encoder, query_sets, methods, "queries", verbose)
    learn = None
    if True in rn:
        learn = db if learning_is_database else \
            _aggregate_all(encoder, learning_sets, methods, "learning", verbose)[0]

    name = {"temb": "T-emb", "fv": "FV", "vlad": "VLAD", "bow": "BOW"}[embedding]
    if embedding == "fv" and (embedding_params or {}).get("hard"):
        name = "FV-hard"
    results = []
    for method in methods:
        for use_rn in rn:
            for dim in (dims if use_rn else (None,)):
                rot = RotationNormalisation(rn_components, dim).fit(learn[method]) if use_rn else None
                label = f"{name} k={k} + {method}" + (" + RN" if use_rn else "") + (f" -> {dim}" if dim else "")
                results.append(MethodVectors(
                    label,
                    postprocess(db[method], power, rot).astype(np.float32),
                    postprocess(queries[method], power, rot).astype(np.float32)))
    return results, timings

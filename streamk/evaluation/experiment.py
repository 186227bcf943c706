"""Experiments as in the paper's tables: one embedding, several aggregation
methods, with and without RN, on a database, its queries and a learning set.

Every image is embedded once and its Gram matrix computed once; the aggregation
methods share them.  RN is learned per method on the learning images' vectors.
"""

import time
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from ..encoding import Encoder
from ..errors import DatasetImageError
from ..encoding import RotationNormalisation, l2_normalize, postprocess
from .second_stage_rows import DEFAULT_EXPAND, DEFAULT_EXPANSION, SecondStageRows


@dataclass
class MethodVectors:
    """Image vectors of one (embedding, aggregation, RN) configuration."""

    label: str
    database: np.ndarray  # (N, D) float32
    queries: np.ndarray  # (Q, D) float32
    ranking: np.ndarray | None = None  # (Q, N) when the rows are not ranked by exact scores (PQ)

    def ranks(self):
        """Database indices of each query by decreasing similarity (Q, N)."""
        if self.ranking is not None:
            return self.ranking
        scores = self.queries @ self.database.T
        return np.argsort(-scores, axis=1, kind="stable")


@dataclass
class ExperimentTimings:
    fit_s: float = 0.0
    encode_s_per_image: float = 0.0
    descriptors_per_image: float = 0.0


def aggregate_all(encoder, sets, methods, desc, verbose):
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
                   dims=(None,), learning_is_database=False, verbose=True, pq_bytes=(), rerank=50, pq_views=3,
                   seed=None, **aggregation_params):
    """Vectors of every (method, RN, D') configuration.

    Returns (list of MethodVectors, ExperimentTimings).  With
    ``learning_is_database`` the database vectors serve as RN learning vectors
    (the unsupervised set-up of ``paris6k-subset``), otherwise the learning
    images are aggregated too. ``seed`` (when given) seeds every learning stage
    (the embedding's k-means / GMM and the PQ codebooks): one of the paper's
    "vocabularies". ``pq_bytes``: rows of PQ codes of these sizes (see
    :func:`pq_rows`) for each reduced (``dims``) vector, or for the full
    vectors when no D' is asked.
    """
    if seed is not None:
        embedding_params = {**(embedding_params or {}), "seed": int(seed)}
    timings = ExperimentTimings()
    t0 = time.perf_counter()
    encoder = Encoder(embedding=embedding, k=k, embedding_params=embedding_params or {},
                      aggregation="sum", power=power, **aggregation_params)
    encoder.fit(learning_sets, verbose=verbose)
    timings.fit_s = time.perf_counter() - t0
    timings.descriptors_per_image = float(np.mean([len(X) for X in database_sets]))

    db, timings.encode_s_per_image = aggregate_all(encoder, database_sets, methods, "database", verbose)
    queries, _ = aggregate_all(encoder, query_sets, methods, "queries", verbose)
    learn = None
    if True in rn:
        learn = db if learning_is_database else \
            aggregate_all(encoder, learning_sets, methods, "learning", verbose)[0]

    name = {"temb": "T-emb", "fv": "FV", "vlad": "VLAD", "bow": "BOW"}[embedding]
    if embedding == "fv" and (embedding_params or {}).get("hard"):
        name = "FV-hard"
    pq_learn = None
    if pq_bytes:
        # PQ codebooks are learned on learning-image vectors; where the learning set is the
        # database, on it plus ``pq_views`` vectors of random halves of each image's
        # descriptors (256 centroids per sub-quantiser need more than 250 vectors)
        pq_learn = learn if learn is not None else (
            db if learning_is_database else aggregate_all(encoder, learning_sets, methods, "learning", verbose)[0])
        if learning_is_database and pq_views:
            rng = np.random.default_rng([0 if seed is None else int(seed), 7])
            halves = [X[np.sort(rng.choice(len(X), max(1, len(X) // 2), replace=False))]
                      for _ in range(pq_views) for X in learning_sets]
            extra, _ = aggregate_all(encoder, halves, methods, "PQ learning views", verbose)
            pq_learn = {m: np.concatenate([pq_learn[m], extra[m]]) for m in methods}
    reduced = any(d is not None for d in dims)
    results = []
    for method in methods:
        for use_rn in rn:
            for dim in (dims if use_rn else (None,)):
                rot = RotationNormalisation(rn_components, dim).fit(learn[method]) if use_rn else None
                label = f"{name} k={k} + {method}" + (" + RN" if use_rn else "") + (f" -> {dim}" if dim else "")
                row = MethodVectors(label, postprocess(db[method], power, rot).astype(np.float32),
                                    postprocess(queries[method], power, rot).astype(np.float32))
                results.append(row)
                if pq_bytes and (dim is not None or not reduced):
                    train = postprocess(pq_learn[method], power, rot).astype(np.float32)
                    results.extend(pq_rows(row, train, pq_bytes, rerank, 0 if seed is None else int(seed)))
    return results, timings


def pq_rows(row, train, pq_bytes, rerank, seed=0):
    """Rows of a configuration's vectors as PQ codes of M bytes (M in ``pq_bytes``):
    ranked by ADC (the query's float vector against the database codes), and with
    the ADC top ``rerank`` re-ranked by the float vectors (0: no such row)."""
    from ..quantization import ProductQuantizer

    out = []
    n = row.database.shape[0]
    for M in pq_bytes:
        if row.database.shape[1] % M:
            continue  # D' not divisible by M: no such code
        pq = ProductQuantizer(M=int(M), seed=seed).fit(train)
        adc = pq.scores(row.queries, pq.encode(row.database))
        ranking = np.argsort(-adc, axis=1, kind="stable")
        out.append(MethodVectors(f"{row.label} + PQ {M} B", row.database, row.queries, ranking))
        if rerank:
            R = min(int(rerank), n)
            top = ranking[:, :R]
            exact = np.einsum("qd,qrd->qr", row.queries, row.database[top])
            head = np.take_along_axis(top, np.argsort(-exact, axis=1, kind="stable"), axis=1)
            out.append(MethodVectors(f"{row.label} + PQ {M} B + re-rank {R}", row.database, row.queries,
                                     np.concatenate([head, ranking[:, R:]], axis=1)))
    return out


# ---------------------------------------------------------------- on a dataset

# The paper's protocol: learning stages use a distinct collection.
DEFAULT_LEARNING = {"oxford5k": "paris6k", "oxford105k": "paris6k", "roxford5k": "paris6k",
                    "paris6k": "oxford5k", "paris106k": "oxford5k", "rparis6k": "oxford5k"}


def dataset_features(dataset, extractor=None, cache_dir=None, workers=None, progress=True):
    """(database Features, query Features) of a dataset, the queries as its protocol
    says (box crop for Oxford/Paris). A database image that cannot be read is an error
    (the protocol needs all). Images as stored, without their EXIF turn: the protocols'
    query boxes are in the stored pixel grid (:func:`streamk.features.stored_pixels`)."""
    from ..features import crop_to_box, default_extractor, stored_pixels
    from ..pipeline import extract_many

    extractor = stored_pixels(default_extractor() if extractor is None else extractor)
    paths = [dataset.image_path(i) for i in range(dataset.n_images)]
    qpaths = [dataset.query_image_path(q) for q in dataset.queries]
    feats, errors = extract_many(list(dict.fromkeys(paths + qpaths)), extractor, cache_dir, workers, progress)
    if errors:
        listed = "\n".join(f"  {p}: {e}" for p, e in list(errors.items())[:10])
        raise DatasetImageError(f"{len(errors)} image(s) of {dataset.name} could not be read:\n{listed}")
    database = [feats[p] for p in paths]
    queries = [crop_to_box(feats[p], q.box) if dataset.crop_query and q.box is not None else feats[p]
               for q, p in zip(dataset.queries, qpaths)]
    return database, queries


def dataset_descriptors(dataset, extractor=None, cache_dir=None, workers=None, progress=True):
    """(database descriptor sets, query descriptor sets) of a dataset (see :func:`dataset_features`)."""
    database, queries = dataset_features(dataset, extractor, cache_dir, workers, progress)
    return [f.descriptors for f in database], [f.descriptors for f in queries]


def evaluate_dataset(dataset, embedding="temb", k=64, embedding_params=None, methods=("sum", "democratic", "gmp"),
                     rn=(False, True), dims=(None,), power=0.5, learning=None, extractor=None, cache_dir=None,
                     workers=None, verbose=True, seeds=None, pq_bytes=(), rerank=50, verify=0, expand=DEFAULT_EXPAND,
                     expansion=DEFAULT_EXPANSION, **aggregation_params):
    """mAP of each configuration on a dataset; returns (rows, info).

    ``verify`` = R > 0 adds the second stage beside each exact row (``+QE``, ``+SP``,
    ``+SP+QE(expansion)``, a search's default expansion unless ``expansion`` says:
    :mod:`streamk.evaluation.second_stage_rows`), its visual words learned on
    the learning set with every other learned part; ``info["query_ms"]`` holds each
    such row's cost per query.

    ``learning``: descriptor sets of a distinct learning collection, or None to
    learn on the database itself (unsupervised; only sensible where no distinct
    set exists, as for ``paris6k-subset``).

    ``seeds``: None, one run with the given parameters, rows (label, EvaluationResult);
    or a list of seeds, every learning stage re-run per seed (the paper averages
    three vocabularies), rows (label, [EvaluationResult per seed]).
    """
    from .metrics import evaluate

    db_features, q_features = dataset_features(dataset, extractor, cache_dir, workers, verbose)
    database, queries = [f.descriptors for f in db_features], [f.descriptors for f in q_features]
    learn_sets = database if learning is None else learning
    per_seed, fit_s, encode_s, query_ms = [], [], [], {}
    for seed in ([None] if seeds is None else list(seeds)):
        results, timings = run_experiment(learn_sets, database, queries, embedding, k, embedding_params, methods,
                                          rn, power, dims=dims, learning_is_database=learning is None,
                                          verbose=verbose, pq_bytes=pq_bytes, rerank=rerank, seed=seed,
                                          **aggregation_params)
        rows = [(r.label, evaluate(r.ranks(), dataset)) for r in results]
        if verify:
            stage = SecondStageRows.learn(learn_sets, db_features, q_features, dataset, verify, expand, seed or 0,
                                          verbose, expansion)
            rows = stage.beside(rows, results, dataset, query_ms)
        per_seed.append(rows)
        fit_s.append(timings.fit_s)
        encode_s.append(timings.encode_s_per_image)
    if seeds is None:
        rows = per_seed[0]
    else:
        rows = [(label, [runs[i][1] for runs in per_seed]) for i, (label, _) in enumerate(per_seed[0])]
    dim = results[0].database.shape[1] if results else None
    info = {"dataset": dataset.name, "n_images": dataset.n_images, "n_queries": dataset.n_queries,
            "descriptors_per_image": timings.descriptors_per_image,
            "query_descriptors": [len(q) for q in queries],
            "fit_s": float(np.mean(fit_s)), "encode_s_per_image": float(np.mean(encode_s)),
            "seeds": None if seeds is None else list(seeds),
            "learning": "database (unsupervised)" if learning is None else f"{len(learning)} images",
            "rn_learning_images": len(learn_sets), "dim": dim,
            "query_ms": {label: float(np.mean(v)) for label, v in query_ms.items()}}
    return rows, info


# ---------------------------------------------------------------- ASMK beside it

def evaluate_dataset_asmk(dataset, n_words=None, multiple_assignment=5, learning=None, extractor=None,
                          cache_dir=None, workers=None, verbose=True, seed=0, alpha=3.0, tau=0.0, verify=0):
    """ASMK and ASMK* (streamk.evaluation.asmk) on a dataset's descriptors, with and without the
    query-side multiple assignment; returns (rows, info) as :func:`evaluate_dataset`,
    each row (label, EvaluationResult, costs) with costs = bytes per database image
    (inverted file), ms per query to aggregate its descriptors and ms to search.
    """
    from .asmk import ASMKCodebook, ASMKIndex
    from .metrics import evaluate

    db_features, q_features = dataset_features(dataset, extractor, cache_dir, workers, verbose)
    database, queries = [f.descriptors for f in db_features], [f.descriptors for f in q_features]
    learn = database if learning is None else learning
    stage = SecondStageRows.learn(learn, db_features, q_features, dataset, verify, DEFAULT_EXPAND, seed, verbose) \
        if verify else None
    t0 = time.perf_counter()
    codebook = ASMKCodebook(n_words, seed=seed).fit(learn)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    db = [codebook.aggregate(X) for X in tqdm(database, desc="ASMK database", disable=not verbose)]
    aggregate_s = (time.perf_counter() - t0) / len(database)
    assignments = (1,) if multiple_assignment in (None, 1) else (1, int(multiple_assignment))
    rows = []
    for binary in (False, True):
        index = ASMKIndex(codebook, db, binary=binary, alpha=alpha, tau=tau)
        index.scores(codebook.aggregate(queries[0]))  # warm-up: Numba loads (or compiles) its kernel
        for m in assignments:
            agg_s = search_s = 0.0
            ranks = []
            for X in queries:
                t0 = time.perf_counter()
                q = codebook.aggregate(X, multiple_assignment=m)
                t1 = time.perf_counter()
                ranks.append(index.ranks(q))
                agg_s += t1 - t0
                search_s += time.perf_counter() - t1
            label = ("ASMK*" if binary else "ASMK") + f" {codebook.n_words} words" + (f" + MA{m}" if m > 1 else "")
            costs = {"bytes_per_image": index.nbytes / index.n_images,
                     "entries_per_image": index.n_entries / index.n_images,
                     "query_aggregate_ms": 1000 * agg_s / len(queries),
                     "query_search_ms": 1000 * search_s / len(queries)}
            rows.append((label, evaluate(np.stack(ranks), dataset), costs))
            if stage is not None:  # the same second stage on ASMK's rankings (no vector: no QE)
                t0 = time.perf_counter()
                verified = [stage.verified_ranking(i, r) for i, r in enumerate(ranks)]
                sp_ms = 1000 * (time.perf_counter() - t0) / len(queries)
                rows.append((label + " +SP", evaluate(np.stack(verified), dataset),
                             dict(costs, query_search_ms=costs["query_search_ms"] + sp_ms)))
    info = {"dataset": dataset.name, "n_images": dataset.n_images, "n_queries": dataset.n_queries,
            "descriptors_per_image": float(np.mean([len(X) for X in database])),
            "n_words": codebook.n_words, "alpha": alpha, "tau": tau, "fit_s": fit_s,
            "aggregate_s_per_image": aggregate_s,
            "learning": "database (unsupervised)" if learning is None else f"{len(learning)} images"}
    return rows, info

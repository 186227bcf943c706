"""``streamk eval`` as a library call: a benchmark's tables laid out like the paper's,
printed as they are computed, and returned as one JSON-able report."""

from pathlib import Path

import numpy as np

from ..config import default_cache_dir
from ..datasets import load_dataset
from ..encoding import (
    DEFAULT_GAMMA, DEFAULT_LAMBDA, DEFAULT_N_ITER, check_params, check_reduced_dim, embedding_spec,
)
from ..errors import ConfigError
from ..features import make_extractor
from .experiment import DEFAULT_LEARNING, dataset_descriptors, evaluate_dataset, evaluate_dataset_asmk
from .second_stage_rows import DEFAULT_EXPAND, DEFAULT_EXPANSION, DEFAULT_VERIFY


def learning_set(dataset, learn_dataset, learn_root, extractor, cache, workers, progress, log):
    """The descriptor sets of a distinct learning collection, or None where the dataset
    (paris6k-subset) is learned on its own images; a ConfigError where one is needed."""
    learn_name = learn_dataset or DEFAULT_LEARNING.get(dataset.name)
    if learn_root or learn_dataset:
        if not learn_name:
            raise ConfigError("--learn-root needs --learn-dataset NAME")
        learning, _ = dataset_descriptors(load_dataset(learn_name, learn_root), extractor, cache, workers, progress)
        log(f"learning set: {learn_name} ({len(learning)} images), distinct from the database")
        return learning
    if dataset.name == "paris6k-subset":
        log("learning set: the 250 database images themselves (unsupervised: k-means, whitening and RN "
            "use no labels; no distinct learning set is available for this subset)")
        return None
    raise ConfigError(f"{dataset.name} needs a distinct learning set: pass --learn-root DIR "
                      f"(and --learn-dataset NAME{', default ' + learn_name if learn_name else ''})")


def run_eval(dataset, root=None, method="single", embeddings=("temb",), ks=(64,),
             aggregations=("sum", "democratic", "gmp"), rn=(False, True), dims=None, power=0.5, seeds=1, pq_bytes=(),
             rerank=50, fv_pca=64, gamma=None,
             lam=None, learn_dataset=None, learn_root=None, extractor=None, max_side=None, max_features=None,
             cache=None, no_cache=False, workers=None, asmk_words=None, asmk_ma=5, verify=DEFAULT_VERIFY,
             expand=DEFAULT_EXPAND, expansion=DEFAULT_EXPANSION, log=print, progress=True):
    """What ``streamk eval`` prints (through ``log``), as a report dict."""
    dataset = load_dataset(dataset, root)
    if method != "asmk":  # before minutes of extraction and learning
        check_eval_params(embeddings, ks, aggregations, rn, dims, pq_bytes, fv_pca, gamma, lam)
    if dataset.image_dir is None or not Path(dataset.image_dir).is_dir():  # before minutes of learning
        where = "no image folder given" if dataset.image_dir is None else f"{dataset.image_dir} is not a folder"
        raise ConfigError(f"{dataset.name}: {where}: pass --root DIR (root=), the folder that 'streamk datasets "
                          f"download {dataset.name} --dir DIR' fills (images in DIR/jpg)")
    extractor = make_extractor(extractor, max_side=max_side, max_features=max_features)
    cache = None if no_cache else (cache or default_cache_dir())
    learning = learning_set(dataset, learn_dataset, learn_root, extractor, cache, workers, progress, log)
    if method == "asmk":
        return asmk_report(dataset, learning, extractor, cache, workers, asmk_words, asmk_ma, log, progress, verify)
    aggregation_params = {name: value for name, value in (("gamma", gamma), ("lam", lam)) if value is not None}
    params = {"power": power, "gamma": DEFAULT_GAMMA if gamma is None else gamma, "n_iter": DEFAULT_N_ITER,
              "lam": DEFAULT_LAMBDA if lam is None else lam}
    report = {"dataset": dataset.name, "protocol": protocol_text(dataset), "params": params, "configs": []}
    log(f"protocol: {report['protocol']}")
    log(f"parameters: power-law {params['power']:g} then L2; democratic gamma {params['gamma']:g}, "
        f"{params['n_iter']} Sinkhorn iterations on max(K, 0); GMP lambda {params['lam']:g}")
    seeds = list(range(seeds))
    dims = dims or (None,)
    for embedding_name in embeddings:
        embedding, params = embedding_spec(embedding_name, fv_pca)
        for k in ks:
            rows, info = evaluate_dataset(
                dataset, embedding, k, params, aggregations, rn, dims, power, learning=learning, extractor=extractor,
                cache_dir=cache, workers=workers, verbose=progress, seeds=seeds, pq_bytes=pq_bytes or (),
                rerank=rerank, verify=verify, expand=expand, expansion=expansion, **aggregation_params)
            report["configs"].append({"embedding": embedding_name, "k": k, **info, "rows": [
                {"method": label, "map_mean": float(np.mean([r.map for r in runs])),
                 "map_std": float(np.std([r.map for r in runs])), "per_seed": [r.to_dict() for r in runs],
                 "query_ms": info["query_ms"].get(label)}
                for label, runs in rows]})
            log(f"\n{dataset.name}: {info['n_images']} images, {info['n_queries']} queries; "
                f"{info['descriptors_per_image']:.0f} descriptors per image ({extractor.name}); "
                f"fit {info['fit_s']:.1f} s; encoding {info['encode_s_per_image']:.2f} s per image "
                f"(all methods, one Gram)" + (f"; mean of {len(seeds)} seeds" if len(seeds) > 1 else ""))
            for note in eval_notes(info, rn, pq_bytes, dims):
                log(f"note: {note}")
            table = []
            for label, runs in rows:
                m = [100 * r.map for r in runs]
                cost = info["query_ms"].get(label)
                table.append([label, f"{np.mean(m):.1f} ± {np.std(m):.1f}" if len(m) > 1 else f"{m[0]:.1f}",
                              "" if cost is None else f"{cost:.1f}"])
            if not any(row[2] for row in table):  # no second-stage rows: no empty column
                table = [row[:2] for row in table]
            for line in table_lines(["method", "mAP", "2nd stage ms/query"][:len(table[0])], table):
                log(line)
    return report


def check_eval_params(embeddings, ks, aggregations, rn, dims, pq_bytes, fv_pca, gamma, lam):
    """A ConfigError for what ``run_eval`` would refuse (or silently skip) only after
    minutes of extraction and learning: an unknown aggregation (``max`` was refused once the
    encoder was fitted), D' without RN (its rows were left out without a word), a D'
    above an embedding's dimension, an empty list."""
    for what, values in (("embeddings", embeddings), ("vocabulary sizes", ks), ("aggregations", aggregations),
                         ("rn", rn)):
        if not list(values):
            raise ConfigError(f"no {what} to evaluate: give at least one")
    for method in aggregations:
        check_params(method, DEFAULT_GAMMA if gamma is None else gamma, DEFAULT_N_ITER,
                     DEFAULT_LAMBDA if lam is None else lam)
    if any(v not in (False, True) for v in rn):
        raise ConfigError(f"rn: expected False (off) and / or True (on), got {list(rn)}")
    dims = [d for d in (dims or ()) if d is not None]
    if dims and True not in rn:
        raise ConfigError("D' (--dim) keeps the first components after RN: add RN (--rn on, or off,on)")
    if any(int(d) < 1 for d in dims) or any(int(m) < 1 for m in (pq_bytes or ())):
        raise ConfigError(f"D' and PQ bytes must be >= 1, got {dims} and {list(pq_bytes or ())}")
    for name in embeddings:
        for k in ks:
            check_reduced_dim(name, k, fv_pca, max(dims) if dims else None)


def protocol_text(dataset):
    """How a dataset's queries are run and scored, in one line (what ``evaluate`` does)."""
    query = "the features inside its official box" if dataset.crop_query else "the whole image"
    if dataset.exclude_query:
        query += ", removed from its own ranking"
    if dataset.protocol == "revisited":
        scoring = ("AP as revisitop's compute_map on the Medium ground truth (Easy and Hard in --json), "
                   "junk images skipped; queries without positives not counted")
    elif dataset.protocol == "ukbench":
        scoring = "AP with the 4 images of the query's group as positives (and the N-S score in --json)"
    else:
        scoring = "AP as the official compute_ap (positives: good + ok; junk images skipped: they take no rank)"
    return f"each query described by {query}; {scoring}; mAP = mean AP over the {dataset.n_queries} queries"


def table_lines(header, rows, gap=2):
    """The lines of a text table: the first column left-aligned, the others right-aligned, each
    as wide as its widest cell or header (so values end under their header, whatever the rows
    hold), ``gap`` spaces apart; trailing blanks dropped."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return [(" " * gap).join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]).rstrip()
            for row in cells]


def eval_notes(info, rn, pq_bytes, dims=(None,)):
    """What makes a row differ from the paper's protocol, or a row asked for that is not
    there, said next to the table."""
    n, dim = info["rn_learning_images"], info["dim"]
    coded = [d for d in (dims or ()) if d is not None] or [dim]
    for m in pq_bytes or ():
        if dim is not None and any(d % m for d in coded):
            yield (f"no PQ {m} B rows for D' = {', '.join(str(d) for d in coded if d % m)}: "
                   f"a PQ code of M bytes splits the vector into M equal parts (D' a multiple of M)")
    if True in rn and dim is not None and n <= dim:
        yield (f"RN is learned on {n} images for D = {dim}: only {n - 1} principal components exist, the "
               f"components past them are an arbitrary basis of the rest, so D' >= {n - 1} keeps all of the "
               "PCA and rows -> D' are not the paper's (RN learned on a distinct, larger collection)")
    if pq_bytes and info["learning"].startswith("database"):
        yield ("PQ codebooks are learned on the database vectors plus 3 vectors of random halves of each "
               "image's descriptors (no distinct learning images): an optimistic estimate of the PQ loss")


def asmk_report(dataset, learning, extractor, cache, workers, n_words, multiple_assignment, log, progress, verify=0):
    """``streamk eval --method asmk``: ASMK / ASMK* on the same descriptors (+SP rows with
    the second stage)."""
    rows, info = evaluate_dataset_asmk(dataset, n_words=n_words, multiple_assignment=multiple_assignment,
                                       learning=learning, extractor=extractor, cache_dir=cache, workers=workers,
                                       verbose=progress, verify=verify)
    log(f"\n{dataset.name}: {info['n_images']} images, {info['n_queries']} queries; "
        f"{info['descriptors_per_image']:.0f} descriptors per image ({extractor.name}); codebook "
        f"{info['n_words']} words (fit {info['fit_s']:.1f} s); alpha {info['alpha']:g}, tau {info['tau']:g}; "
        f"aggregation {1000 * info['aggregate_s_per_image']:.0f} ms per database image")
    table = [[label, f"{100 * res.map:.1f}", f"{c['bytes_per_image']:,.0f}", f"{c['entries_per_image']:.0f}",
              f"{c['query_aggregate_ms']:.1f}", f"{c['query_search_ms']:.2f}"] for label, res, c in rows]
    for line in table_lines(["method", "mAP", "bytes/image", "entries/image", "query: aggregate ms", "search ms"],
                            table):
        log(line)
    return {"dataset": dataset.name, "method": "asmk", **info,
            "rows": [{"method": label, **res.to_dict(), **costs} for label, res, costs in rows]}


__all__ = ["asmk_report", "check_eval_params", "eval_notes", "learning_set", "protocol_text", "run_eval",
           "table_lines"]

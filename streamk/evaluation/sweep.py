"""Parameter sweeps as in the paper's figures: mAP against the power-law
exponent alpha and against the vocabulary size k, for sum / democratic / GMP
aggregation, with and without RN.

    result = run_sweep(dataset, configs=[{"embedding": "temb", "k": 8}, {"embedding": "temb", "k": 16}])
    result.table()                      # mAP at the default exponent (0.5)
    result.map_vs_power("T-emb k=16", rn=False)
    result.map_vs_k(rn=True)

Per configuration (an embedding and its k) the encoder is fitted once, and every
database and query image is embedded and aggregated once for all methods (one
Gram matrix, :meth:`Encoder.aggregate_methods`).  The L2-normalised raw vectors
xi are kept; each (method, RN, exponent) is then only matrix work on (N, D):
RN is learned once per method on the learning vectors (the database's when no
learning set is given: the unsupervised set-up) and the rotated vectors reused
for every exponent, then power-law, L2, ranking by inner product and
:func:`streamk.evaluation.metrics.evaluate` with the dataset's own protocol.
"""

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..encoding import EMBEDDINGS, METHODS, Encoder
from ..errors import ConfigError
from .metrics import evaluate
from ..config import default_cache_dir
from .experiment import MethodVectors, aggregate_all, dataset_descriptors
from ..features import default_extractor, stored_pixels
from ..pipeline import iter_extract
from ..encoding import DEFAULT_POWER, RotationNormalisation, postprocess

DEFAULT_CONFIGS = ({"embedding": "temb", "k": 8}, {"embedding": "temb", "k": 16})
DEFAULT_POWERS = tuple(round(0.1 * i, 1) for i in range(11))
_CONFIG_KEYS = {"embedding", "k", "embedding_params", "label"}
_NAMES = {"temb": "T-emb", "fv": "FV", "vlad": "VLAD", "bow": "BOW"}


# ------------------------------------------------------------------ input checks
def embedding_name(config):
    """The paper's name of a config's embedding: T-emb, FV, FV-hard, VLAD, BOW."""
    if config["embedding"] == "fv" and config.get("embedding_params", {}).get("hard"):
        return "FV-hard"
    return _NAMES.get(config["embedding"], config["embedding"])


def _check_configs(configs):
    if isinstance(configs, dict):
        configs = [configs]
    try:
        configs = list(configs)
    except TypeError:
        raise ConfigError(f"configs must be a list of dicts, got {configs!r}") from None
    if not configs:
        raise ConfigError("configs is empty: give at least one {'embedding': ..., 'k': ...}")
    out = []
    for c in configs:
        if not isinstance(c, dict):
            raise ConfigError(f"a config is a dict like {{'embedding': 'temb', 'k': 16}}, got {c!r}")
        unknown = set(c) - _CONFIG_KEYS
        if unknown:
            raise ConfigError(f"unknown config key(s) {sorted(unknown)}; allowed: {sorted(_CONFIG_KEYS)}")
        embedding = c.get("embedding", "temb")
        if embedding not in EMBEDDINGS:
            raise ConfigError(f"unknown embedding {embedding!r}; choose one of {sorted(EMBEDDINGS)}")
        k = c.get("k")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ConfigError(f"config k must be a positive integer, got {k!r}")
        params = dict(c.get("embedding_params") or {})
        norm = {"embedding": embedding, "k": int(k), "embedding_params": params}
        norm["label"] = str(c.get("label") or f"{embedding_name(norm)} k={int(k)}")
        out.append(norm)
    labels = [c["label"] for c in out]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"two configs share a label: {labels}")
    return out


def _check_methods(methods):
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    if not methods:
        raise ConfigError("methods is empty")
    for m in methods:
        if m not in METHODS:
            raise ConfigError(f"unknown aggregation method {m!r}; choose among {METHODS}")
    if len(set(methods)) != len(methods):
        raise ConfigError(f"a method is listed twice: {methods}")
    return methods


def _check_rn(rn):
    rn = (rn,) if isinstance(rn, bool) else tuple(rn)
    if not rn or any(not isinstance(r, (bool, np.bool_)) for r in rn) or len(set(rn)) != len(rn):
        raise ConfigError(f"rn must be a tuple of distinct booleans such as (False, True), got {rn!r}")
    return tuple(bool(r) for r in rn)


def _check_power(p, what="power"):
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a number in [0, 1], got {p!r}") from None
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"{what} must be in [0, 1], got {p}")
    return round(p, 6)  # 0.6000000000000001 from a linspace is 0.6


def _check_powers(powers, default_power):
    powers = (powers,) if isinstance(powers, (int, float)) else tuple(powers)
    if not powers:
        raise ConfigError("powers is empty")
    powers = [_check_power(p, "each power-law exponent") for p in powers]
    default_power = _check_power(default_power, "default_power")
    return tuple(sorted(set(powers) | {default_power})), default_power


# ------------------------------------------------------------------ result
def _key(method, rn):
    return f"{method}{' + RN' if rn else ''}"


def _num(v):
    """JSON-safe float: NaN becomes None."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


@dataclass
class SweepResult:
    """Everything :func:`run_sweep` measured.

    ``maps[(config label, method, rn, power)]``: mAP in percent.  At
    ``default_power``, per (config label, method, rn): ``aps`` the per-query AP
    in percent (NaN for a query without positives), ``rankings`` the database
    indices of each query best first (Q, N) and ``scores`` the matching
    similarities (Q, N).  ``timings[label]``: seconds (fit, aggregation per
    image, post-processing and evaluation of all the (method, RN, exponent)
    combinations).
    """

    dataset: str
    n_images: int
    n_queries: int
    query_names: list
    configs: list
    methods: tuple
    rn: tuple
    powers: tuple
    default_power: float
    learning: str
    maps: dict = field(default_factory=dict)
    aps: dict = field(default_factory=dict)
    rankings: dict = field(default_factory=dict)
    scores: dict = field(default_factory=dict)
    dims: dict = field(default_factory=dict)  # label -> vector dimension D
    timings: dict = field(default_factory=dict)
    features_s: float = 0.0
    descriptors_per_image: float = 0.0
    query_descriptors_per_image: float = 0.0

    @property
    def labels(self):
        return [c["label"] for c in self.configs]

    def _config(self, config):
        if isinstance(config, int):
            return self.configs[config]
        for c in self.configs:
            if c["label"] == config:
                return c
        raise ConfigError(f"no config {config!r} in this sweep; it has {self.labels}")

    def _power(self, power):
        power = self.default_power if power is None else float(power)
        if power not in self.powers:
            raise ConfigError(f"exponent {power} was not evaluated; the sweep has {list(self.powers)}")
        return power

    def _rn(self, rn):
        if bool(rn) not in self.rn:
            raise ConfigError(f"rn={rn} was not evaluated; the sweep has rn={self.rn}")
        return bool(rn)

    def map(self, config, method, rn=False, power=None):
        """mAP (percent) of one combination."""
        label = self._config(config)["label"]
        if method not in self.methods:
            raise ConfigError(f"method {method!r} was not evaluated; the sweep has {self.methods}")
        return self.maps[(label, method, self._rn(rn), self._power(power))]

    def table(self):
        """Rows of the mAP table at the default exponent: one dict per (config, method)
        with ``map`` (without RN) and ``map_rn`` (with RN), None where not evaluated."""
        p = self.default_power
        return [{"config": c["label"], "method": m, "dim": self.dims.get(c["label"]),
                 "map": self.maps.get((c["label"], m, False, p)),
                 "map_rn": self.maps.get((c["label"], m, True, p))}
                for c in self.configs for m in self.methods]

    def map_vs_power(self, config, rn=False):
        """(exponents, {method: mAP in percent at each exponent}) of one config."""
        label, rn = self._config(config)["label"], self._rn(rn)
        powers = np.array(self.powers)
        return powers, {m: np.array([self.maps[(label, m, rn, p)] for p in self.powers]) for m in self.methods}

    def k_families(self):
        """{embedding name: [configs sorted by k]} for the embeddings swept over >= 2 values of k."""
        groups = {}
        for c in self.configs:
            groups.setdefault(embedding_name(c), []).append(c)
        return {name: sorted(cs, key=lambda c: c["k"]) for name, cs in groups.items()
                if len({c["k"] for c in cs}) >= 2}

    def map_vs_k(self, rn=False, power=None):
        """{embedding name: (ks, {method: mAP in percent at each k})} at one exponent
        (default: ``default_power``), for each embedding with >= 2 values of k; {} when none."""
        rn, power = self._rn(rn), self._power(power)
        out = {}
        for name, cs in self.k_families().items():
            ks = np.array([c["k"] for c in cs])
            out[name] = (ks, {m: np.array([self.maps[(c["label"], m, rn, power)] for c in cs])
                              for m in self.methods})
        return out

    def to_dict(self, top=10):
        """A JSON-serialisable dict: the settings, every mAP, and at the default exponent
        the per-query APs and the first ``top`` results of each query (NaN -> None)."""
        per = {}
        for (label, m, rn), aps in self.aps.items():
            entry = per.setdefault(label, {}).setdefault(_key(m, rn), {})
            entry["aps"] = {q: _num(a) for q, a in zip(self.query_names, aps.tolist())}
            if top:
                ranks, scores = self.rankings[(label, m, rn)], self.scores[(label, m, rn)]
                entry["top"] = {q: {"images": r[:top].tolist(), "scores": [float(s) for s in sc[:top]]}
                                for q, r, sc in zip(self.query_names, ranks, scores)}
        return {
            "dataset": self.dataset, "n_images": self.n_images, "n_queries": self.n_queries,
            "learning": self.learning, "configs": [dict(c) for c in self.configs],
            "methods": list(self.methods), "rn": list(self.rn), "powers": list(self.powers),
            "default_power": self.default_power, "dims": dict(self.dims),
            "maps": [{"config": label, "method": m, "rn": rn, "power": p, "map": _num(v)}
                     for (label, m, rn, p), v in self.maps.items()],
            "per_query": per, "timings": {k: dict(v) for k, v in self.timings.items()},
            "features_s": self.features_s, "descriptors_per_image": self.descriptors_per_image,
            "query_descriptors_per_image": self.query_descriptors_per_image,
        }


# ------------------------------------------------------------------ progress
class _Reporter:
    """Counts steps and forwards them to a ``(done, total, description)`` callback
    (a tqdm bar when none is given)."""

    def __init__(self, total, callback):
        self.done, self.total, self.description = 0, int(total), ""
        self.bar = None
        if callback is None:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, desc="sweep", dynamic_ncols=True)
        self.callback = callback

    def __call__(self, n=0, description=None):
        self.done += n
        if description is not None:
            self.description = description
        if self.bar is not None:
            self.bar.set_description(self.description, refresh=False)
            self.bar.update(n)
        else:
            self.callback(self.done, self.total, self.description)

    def each(self, items, description):
        """``items`` as a sized iterable that reports one step after each item is used."""
        return _Stepping(items, self, description)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class _Stepping:
    def __init__(self, items, reporter, description):
        self.items, self.reporter, self.description = items, reporter, description

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        self.reporter(0, self.description)
        for item in self.items:
            yield item
            self.reporter(1)  # the caller finished with this item


# ------------------------------------------------------------------ the sweep
def run_sweep(dataset, configs=DEFAULT_CONFIGS, methods=METHODS, rn=(False, True), powers=DEFAULT_POWERS,
              default_power=DEFAULT_POWER, learning=None, extractor=None, cache_dir=None, progress=None,
              rn_components=1000, workers=None, **aggregation_params):
    """mAP of every (config, method, RN, power-law exponent) on a dataset; a :class:`SweepResult`.

    configs: dicts ``{"embedding": "temb", "k": 16}`` (optional ``embedding_params``
    and ``label``). methods: among sum / democratic / gmp. rn: which of False / True.
    powers: exponents in [0, 1] (``default_power`` is always evaluated too: the
    per-query results are kept for it). learning: descriptor sets of a distinct
    learning collection, or None to learn the embedding and RN on the database
    itself (unsupervised, as ``run_experiment(..., learning_is_database=True)``).
    extractor, cache_dir, workers: feature extraction, through the feature cache
    (``cache_dir`` None: :func:`streamk.config.default_cache_dir`). progress: a callback ``(done, total,
    description)``, or None for a tqdm bar. aggregation_params: gamma, lam, ...
    of :class:`streamk.encoding.encoder.EncoderConfig`.
    """
    configs = _check_configs(configs)
    methods = _check_methods(methods)
    rn = _check_rn(rn)
    powers, default_power = _check_powers(powers, default_power)
    if learning is not None:
        learning = list(learning)
        if not learning:
            raise ConfigError("learning is empty: give descriptor sets, or None to learn on the database")
    for c in configs:  # bad options fail here, before any image is read
        try:
            Encoder(embedding=c["embedding"], k=c["k"], embedding_params=c["embedding_params"], **aggregation_params)
        except TypeError as exc:  # an embedding parameter it does not take
            raise ConfigError(f"config {c['label']!r}: {exc}") from None

    n, nq = dataset.n_images, dataset.n_queries
    paths = list(dict.fromkeys([dataset.image_path(i) for i in range(n)] +
                               [dataset.query_image_path(q) for q in dataset.queries]))
    n_learn = len(learning) if (learning is not None and True in rn) else 0
    per_config = 1 + n + nq + n_learn + len(methods) * len(rn) * len(powers)
    report = _Reporter(len(paths) + 1 + len(configs) * per_config, progress)
    try:
        t0 = time.perf_counter()
        cache_dir = default_cache_dir() if cache_dir is None else cache_dir
        # fill the feature cache image by image (a step each), then read the protocol's descriptor
        # sets (query crops) from it; an unreadable image is reported by dataset_descriptors
        report(0, f"features of {len(paths)} images")
        extractor = stored_pixels(extractor or default_extractor())  # as dataset_descriptors reads them
        for _ in iter_extract(paths, extractor, cache_dir, workers):
            report(1)
        report(0, "reading the features")
        database, queries = dataset_descriptors(dataset, extractor, cache_dir, workers, progress=False)
        features_s = time.perf_counter() - t0
        report(1)
        result = SweepResult(
            dataset=dataset.name, n_images=n, n_queries=nq, query_names=list(dataset.query_names),
            configs=configs, methods=methods, rn=rn, powers=powers, default_power=default_power,
            learning="database (unsupervised)" if learning is None else f"{len(learning)} images",
            features_s=features_s, descriptors_per_image=float(np.mean([len(X) for X in database])),
            query_descriptors_per_image=float(np.mean([len(X) for X in queries])) if queries else 0.0)
        for c in configs:
            _sweep_config(result, c, database, queries, learning, rn_components, aggregation_params, dataset, report)
    finally:
        report.close()
    return result


def _sweep_config(result, c, database, queries, learning, rn_components, aggregation_params, dataset, report):
    label, methods, rn = c["label"], result.methods, result.rn
    timings = result.timings[label] = {}
    report(0, f"{label}: fitting the embedding")
    t0 = time.perf_counter()
    encoder = Encoder(embedding=c["embedding"], k=c["k"], embedding_params=c["embedding_params"],
                      aggregation="sum", **aggregation_params)
    encoder.fit(database if learning is None else learning)
    timings["fit_s"] = time.perf_counter() - t0
    report(1)
    result.dims[label] = int(encoder.dim)

    # every image embedded and aggregated once for all methods (one Gram each)
    db, timings["aggregate_s_per_image"] = aggregate_all(
        encoder, report.each(database, f"{label}: database"), methods, "database", False)
    qs, _ = aggregate_all(encoder, report.each(queries, f"{label}: queries"), methods, "queries", False)
    learn = db
    if learning is not None and True in rn:
        learn, _ = aggregate_all(encoder, report.each(learning, f"{label}: learning"), methods, "learning", False)

    t0 = time.perf_counter()
    report(0, f"{label}: power-law, RN, evaluation")
    for method in methods:
        for use_rn in rn:
            D, Q = db[method], qs[method]
            if use_rn:  # learned once, rotated once: only the power-law changes below
                rot = RotationNormalisation(rn_components).fit(learn[method])
                D, Q = postprocess(D, 1.0, rot), postprocess(Q, 1.0, rot)  # = L2, rotate, L2
            for p in result.powers:
                vectors = MethodVectors(f"{label} + {_key(method, use_rn)}",
                                        postprocess(D, p).astype(np.float32), postprocess(Q, p).astype(np.float32))
                ranks = vectors.ranks()
                ev = evaluate(ranks, dataset)
                result.maps[(label, method, use_rn, p)] = 100.0 * ev.map
                if p == result.default_power:
                    key = (label, method, use_rn)
                    result.aps[key] = 100.0 * np.asarray(ev.aps, dtype=np.float64)
                    result.rankings[key] = ranks
                    result.scores[key] = np.take_along_axis(vectors.queries @ vectors.database.T, ranks, axis=1)
                report(1)
    timings["evaluate_s"] = time.perf_counter() - t0

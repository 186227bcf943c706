"""run_sweep: mAP against the power-law exponent and k, checked against independent computations."""

import json

import numpy as np
import pytest

from streamk.encoding.encoder import Encoder
from streamk.errors import ConfigError
from streamk.evaluation.metrics import average_precision, compute_map, evaluate
from streamk.evaluation.experiment import dataset_descriptors, run_experiment
from streamk.evaluation.sweep import SweepResult, run_sweep

from helpers.examples import small_example_fixture

CONFIGS = [{"embedding": "temb", "k": 4}, {"embedding": "temb", "k": 8}]
POWERS = (0.0, 0.5, 1.0)


example = small_example_fixture()


@pytest.fixture(scope="module")
def descriptors(example):
    return dataset_descriptors(example.dataset, example.index.extractor(), progress=False)


@pytest.fixture(scope="module")
def calls():
    return []


@pytest.fixture(scope="module")
def sweep(example, calls):
    return run_sweep(example.dataset, CONFIGS, powers=POWERS, extractor=example.index.extractor(),
                     progress=lambda *a: calls.append(a))


def test_result_shape(sweep, example):
    ds = example.dataset
    assert isinstance(sweep, SweepResult)
    assert sweep.labels == ["T-emb k=4", "T-emb k=8"]
    assert sweep.learning == "database (unsupervised)"
    assert len(sweep.maps) == 2 * 3 * 2 * 3
    assert all(0.0 <= v <= 100.0 for v in sweep.maps.values())
    for key, ranks in sweep.rankings.items():
        assert ranks.shape == (ds.n_queries, ds.n_images)
        assert np.all(np.sort(ranks, axis=1) == np.arange(ds.n_images))  # each a permutation
        assert np.all(np.diff(sweep.scores[key], axis=1) <= 1e-6)       # best first
        assert sweep.aps[key].shape == (ds.n_queries,)
    assert sweep.dims == {"T-emb k=4": 3 * 128, "T-emb k=8": 7 * 128}  # D = (k - 1) d
    assert sweep.descriptors_per_image > 100


def test_sum_and_gmp_match_plain_encoder_and_numpy_ranking(sweep, example, descriptors):
    """Another code path: Encoder(aggregation=m, power=p).encode per image, numpy argsort, compute_map."""
    ds = example.dataset
    database, queries = descriptors
    gt = [(q.positives, q.junk) for q in ds.queries]
    for method, p in (("sum", 1.0), ("gmp", 0.5), ("democratic", 0.0)):
        enc = Encoder(embedding="temb", k=8, aggregation=method, power=p).fit(database)
        D = np.stack([enc.encode(X) for X in database]).astype(np.float64)
        Q = np.stack([enc.encode(X) for X in queries]).astype(np.float64)
        ranks = np.argsort(-(Q @ D.T), axis=1, kind="stable")
        expected = compute_map(ranks, gt)
        assert sweep.maps[("T-emb k=8", method, False, p)] == pytest.approx(100 * expected.map, abs=1e-6)
        if p == sweep.default_power:
            np.testing.assert_array_equal(sweep.rankings[("T-emb k=8", method, False)], ranks)
            aps = [100 * average_precision(r, pos, junk) for r, (pos, junk) in zip(ranks, gt)]
            np.testing.assert_allclose(sweep.aps[("T-emb k=8", method, False)], aps)


def test_rn_learned_on_the_database_matches_run_experiment(sweep, example, descriptors):
    database, queries = descriptors
    results, _ = run_experiment(database, database, queries, "temb", 8, rn=(True,), power=0.5,
                                learning_is_database=True, verbose=False)
    assert [r.label for r in results] == [f"T-emb k=8 + {m} + RN" for m in ("sum", "democratic", "gmp")]
    for r, method in zip(results, ("sum", "democratic", "gmp")):
        expected = evaluate(r.ranks(), example.dataset)
        assert sweep.maps[("T-emb k=8", method, True, 0.5)] == pytest.approx(100 * expected.map, abs=1e-6)


def test_power_changes_the_result(sweep):
    for label in sweep.labels:
        at0 = [sweep.maps[(label, m, False, 0.0)] for m in sweep.methods]
        at1 = [sweep.maps[(label, m, False, 1.0)] for m in sweep.methods]
        assert at0 != at1
    powers, series = sweep.map_vs_power("T-emb k=8", rn=False)
    assert powers.tolist() == list(POWERS)
    assert set(series) == {"sum", "democratic", "gmp"}
    assert series["gmp"][1] == sweep.map("T-emb k=8", "gmp", False, 0.5)


def test_powers_do_not_reaggregate(example, monkeypatch):
    n = []
    original = Encoder.aggregate_methods

    def counting(self, X, methods):
        n.append(tuple(methods))
        return original(self, X, methods)

    monkeypatch.setattr(Encoder, "aggregate_methods", counting)
    result = run_sweep(example.dataset, [{"embedding": "temb", "k": 4}], powers=np.linspace(0, 1, 6),
                       extractor=example.index.extractor(), progress=lambda *a: None)
    ds = example.dataset
    assert len(n) == ds.n_images + ds.n_queries  # once per image, for all methods, RN and powers
    assert set(n) == {("sum", "democratic", "gmp")}
    assert result.powers == (0.0, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0)  # the default exponent is always evaluated
    assert len(result.maps) == 3 * 2 * 7


def test_progress_callback(calls, example):
    done = [c[0] for c in calls]
    total = {c[1] for c in calls}
    assert len(total) == 1 and done == sorted(done) and done[-1] == total.pop()
    assert any("database" in c[2] for c in calls) and any("queries" in c[2] for c in calls)


def test_table_map_vs_k_and_json(sweep):
    rows = sweep.table()
    assert [(r["config"], r["method"]) for r in rows] == [
        (c, m) for c in sweep.labels for m in ("sum", "democratic", "gmp")]
    assert rows[0]["map"] == sweep.maps[("T-emb k=4", "sum", False, 0.5)]
    assert rows[0]["map_rn"] == sweep.maps[("T-emb k=4", "sum", True, 0.5)]
    by_k = sweep.map_vs_k(rn=True)
    ks, series = by_k["T-emb"]
    assert ks.tolist() == [4, 8]
    assert series["democratic"].tolist() == [sweep.maps[(f"T-emb k={k}", "democratic", True, 0.5)] for k in (4, 8)]
    assert sweep.map_vs_k(rn=False, power=0.0)["T-emb"][1]["sum"][0] == sweep.maps[("T-emb k=4", "sum", False, 0.0)]
    with pytest.raises(ConfigError):
        sweep.map_vs_k(power=0.3)  # not evaluated
    d = json.loads(json.dumps(sweep.to_dict(), allow_nan=False))
    assert len(d["maps"]) == len(sweep.maps) and d["learning"] == "database (unsupervised)"
    top = d["per_query"]["T-emb k=8"]["gmp + RN"]["top"]
    assert len(top) == sweep.n_queries and all(len(t["images"]) == 9 for t in top.values())


@pytest.mark.parametrize("kwargs, match", [
    ({"configs": []}, "empty"),
    ({"configs": [{"embedding": "nope", "k": 8}]}, "embedding"),
    ({"configs": [{"embedding": "temb", "k": 0}]}, "k"),
    ({"configs": [{"embedding": "temb", "k": 8, "colour": 1}]}, "unknown config key"),
    ({"configs": [{"embedding": "temb", "k": 8}, {"embedding": "temb", "k": 8}]}, "label"),
    ({"methods": ("sum", "max")}, "unknown aggregation"),
    ({"methods": ()}, "empty"),
    ({"powers": (0.5, 1.5)}, r"\[0, 1\]"),
    ({"powers": (-0.1,)}, r"\[0, 1\]"),
    ({"default_power": 2}, "default_power"),
    ({"rn": ()}, "rn"),
    ({"learning": []}, "learning"),
    ({"lam": -1.0}, "lam|lambda"),
])
def test_bad_input_is_a_config_error_before_any_work(example, kwargs, match):
    kwargs = {"configs": [{"embedding": "temb", "k": 4}], **kwargs}
    with pytest.raises(ConfigError, match=match):
        run_sweep(example.dataset, progress=pytest.fail, **kwargs)


@pytest.mark.slow
def test_paper_ordering_on_paris6k_subset(shared_data):
    """T-emb k=16, alpha = 0.5, no RN: GMP >= democratic >= sum (about 74 / 71 / 68 here before)."""
    from streamk.datasets import load_paris6k_subset

    result = run_sweep(load_paris6k_subset(), [{"embedding": "temb", "k": 16}], rn=(False,), powers=(0.5,),
                       progress=lambda *a: None)
    m = {method: result.maps[("T-emb k=16", method, False, 0.5)] for method in result.methods}
    assert m["gmp"] >= m["democratic"] >= m["sum"]
    for method, expected in (("sum", 68.1), ("democratic", 71.2), ("gmp", 74.2)):
        assert abs(m[method] - expected) < 3

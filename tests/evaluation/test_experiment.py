"""Experiments and `streamk eval`: the paper's table on real and synthetic data."""

import re

import numpy as np
import pytest

from streamk.cli import main
from streamk.datasets import load_dataset
from streamk.evaluation.experiment import evaluate_dataset, run_experiment
from streamk.datasets.synthetic import make_collection


@pytest.fixture(scope="module")
def collection():
    return make_collection(n_scenes=12, views=2, n_queries=6, n_learning=40, seed=3)


def test_run_experiment_rows_and_vectors(collection):
    c = collection
    results, timings = run_experiment(c.learning, c.database, c.queries, "vlad", 8, methods=("sum", "gmp"),
                                      rn=(False, True), dims=(None, 16), verbose=False)
    labels = [r.label for r in results]
    assert labels == ["VLAD k=8 + sum", "VLAD k=8 + sum + RN", "VLAD k=8 + sum + RN -> 16",
                      "VLAD k=8 + gmp", "VLAD k=8 + gmp + RN", "VLAD k=8 + gmp + RN -> 16"]
    for r in results:
        assert r.queries.shape[0] == len(c.queries) and r.database.shape[0] == len(c.database)
        np.testing.assert_allclose(np.linalg.norm(r.database, axis=1), 1, rtol=1e-5)
        assert r.database.shape[1] == (16 if r.label.endswith("16") else 8 * 128)
        # ranks sort the cosine similarities in decreasing order
        s = r.queries @ r.database.T
        assert np.all(np.diff(np.take_along_axis(s, r.ranks(), axis=1), axis=1) <= 1e-6)
    assert timings.descriptors_per_image == pytest.approx(np.mean([len(X) for X in c.database]))


def test_experiment_matches_encoder(collection):
    """The shared-Gram path gives the same vectors as a plain Encoder per method."""
    from streamk.encoding.encoder import Encoder

    c = collection
    results, _ = run_experiment(c.learning, c.database[:5], c.queries[:2], "fv", 4, {"hard": True},
                                methods=("democratic",), rn=(False,), verbose=False)
    enc = Encoder(embedding="fv", k=4, embedding_params={"hard": True}, aggregation="democratic").fit(c.learning)
    np.testing.assert_allclose(results[0].database, enc.encode_many(c.database[:5]), atol=1e-5)


def test_eval_on_part_of_paris_subset(shared_data, tmp_path):
    """Real photos, real ground truth: a 40-image slice with 2 queries, cheap settings."""
    ds = load_dataset("paris6k-subset")
    keep = [i for i in ds.image_ids if "defense" in i or "eiffel" in i][:40]
    small = ds.restrict(keep)
    assert small.n_queries >= 1
    rows, info = evaluate_dataset(small, "vlad", 8, methods=("sum", "gmp"), rn=(False,),
                                  cache_dir=tmp_path / "cache", workers=1, verbose=False)
    assert info["n_images"] == len(keep) and info["descriptors_per_image"] > 100
    for label, res in rows:
        assert 0.0 < res.map <= 1.0 and res.n_skipped == 0


@pytest.mark.slow
def test_paper_ordering_on_paris_subset(shared_data, tmp_path):
    """T-emb k=16, power-law 0.5, no RN: sum < democratic < GMP, about 68 / 71 / 74 mAP."""
    rows, _ = evaluate_dataset(load_dataset("paris6k-subset"), "temb", 16, rn=(False,),
                               cache_dir=tmp_path / "cache", verbose=False)
    m = {label.split(" + ")[1]: 100 * res.map for label, res in rows}
    assert m["sum"] < m["democratic"] < m["gmp"]
    for method, expected in (("sum", 68), ("democratic", 71), ("gmp", 74)):
        assert abs(m[method] - expected) < 3


def test_eval_cli_needs_a_distinct_learning_set(capsys, tmp_path):
    from PIL import Image

    (tmp_path / "jpg").mkdir()
    for name in ("100000", "100001"):  # Holidays names: ground truth from file names
        Image.new("L", (32, 32)).save(tmp_path / "jpg" / f"{name}.jpg")
    assert main(["eval", "--dataset", "holidays", "--root", str(tmp_path)]) == 2
    assert "distinct learning set" in capsys.readouterr().err


# ---------------------------------------------------------------- seeds and short codes

def test_seed_reruns_the_learning_stages(collection):
    """A seed is a vocabulary: the same seed gives the same vectors, another one others."""
    c = collection
    run = lambda seed: run_experiment(c.learning, c.database, c.queries, "vlad", 8, methods=("sum",),  # noqa: E731
                                      rn=(False,), verbose=False, seed=seed)[0][0].database
    np.testing.assert_array_equal(run(1), run(1))
    assert not np.allclose(run(0), run(1))


def adc_reference(train, database, queries, M, seed):
    """ADC by hand: codes by nearest sub-centroid, scores against the reconstructions."""
    from streamk.quantization.pq import ProductQuantizer

    books = ProductQuantizer(M=M, seed=seed).fit(train).codebooks_  # (M, 256, d) from the same training
    d = database.shape[1] // M
    recon = np.empty_like(database, dtype=np.float64)
    for m in range(M):
        sub = database[:, m * d:(m + 1) * d].astype(np.float64)
        dist = ((sub[:, None, :] - books[m][None].astype(np.float64)) ** 2).sum(axis=2)
        recon[:, m * d:(m + 1) * d] = books[m][dist.argmin(axis=1)]
    return queries.astype(np.float64) @ recon.T


def test_pq_rows_match_a_numpy_adc_reference():
    from streamk.evaluation.experiment import MethodVectors, pq_rows

    rng = np.random.default_rng(0)
    unit = lambda X: (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    centres = rng.standard_normal((20, 32))
    draw = lambda n: unit(centres[rng.integers(0, 20, n)] + 0.3 * rng.standard_normal((n, 32)))  # noqa: E731
    train, database, queries = draw(600), draw(80), draw(7)
    row = MethodVectors("x", database, queries)
    rows = pq_rows(row, train, (4, 8, 5), rerank=10, seed=3)
    assert [r.label for r in rows] == ["x + PQ 4 B", "x + PQ 4 B + re-rank 10", "x + PQ 8 B",
                                       "x + PQ 8 B + re-rank 10"]  # 32 is not a multiple of 5: no row
    for M, (adc_row, rerank_row) in zip((4, 8), (rows[0:2], rows[2:4])):
        ref = adc_reference(train, database, queries, M, seed=3)
        got = np.take_along_axis(ref, adc_row.ranks(), axis=1)
        assert np.all(np.diff(got, axis=1) <= 1e-5 * np.abs(ref).max())  # ranked by ADC score
        top = adc_row.ranks()[:, :10]
        np.testing.assert_array_equal(np.sort(rerank_row.ranks()[:, :10], axis=1), np.sort(top, axis=1))
        exact = np.take_along_axis(queries @ database.T, rerank_row.ranks()[:, :10], axis=1)
        assert np.all(np.diff(exact, axis=1) <= 1e-6)  # the head re-sorted by the float vectors
        np.testing.assert_array_equal(rerank_row.ranks()[:, 10:], adc_row.ranks()[:, 10:])
        for r in (adc_row, rerank_row):  # every database image once
            np.testing.assert_array_equal(np.sort(r.ranks(), axis=1), np.tile(np.arange(80), (7, 1)))


def test_eval_seeds_and_short_codes_on_part_of_paris_subset(shared_data, tmp_path, capsys):
    """--seeds: per-seed rows equal separate runs with that seed; mean and std over them.
    --pq-bytes: PQ rows beside the float rows; the RN note where RN has too few images."""
    import json

    ds = load_dataset("paris6k-subset")
    keep = [i for i in ds.image_ids if "defense" in i or "eiffel" in i][:40]
    small = ds.restrict(keep)
    cache = tmp_path / "cache"
    rows, info = evaluate_dataset(small, "vlad", 4, methods=("gmp",), rn=(False,), cache_dir=cache, workers=1,
                                  verbose=False, seeds=[0, 1])
    assert info["seeds"] == [0, 1]
    for s in (0, 1):
        single, _ = evaluate_dataset(small, "vlad", 4, {"seed": s}, methods=("gmp",), rn=(False,),
                                     cache_dir=cache, workers=1, verbose=False)
        assert single[0][1].map == rows[0][1][s].map

    # the CLI on the whole subset would take minutes: its report on a 70-image slice
    # (PQ's 256 centroids need > 256 learning vectors: 70 images and 3 halves of each)
    from streamk.evaluation import report as eval_report

    slice70 = ds.restrict([i for i in ds.image_ids if "defense" in i or "eiffel" in i][:70])

    real = eval_report.evaluate_dataset
    calls = []

    def on_slice(dataset, *a, **kw):
        calls.append(kw)
        return real(slice70, *a, **kw)
    eval_report.evaluate_dataset = on_slice
    try:
        code = main(["eval", "--dataset", "paris6k-subset", "--embedding", "vlad", "--k", "4",
                     "--aggregation", "gmp", "--rn", "on", "--dim", "32", "--seeds", "2", "--pq-bytes", "8",
                     "--rerank", "5", "--verify", "0", "--cache", str(cache), "--workers", "1", "--json"])
    finally:
        eval_report.evaluate_dataset = real
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    labels = [r["method"] for r in report["configs"][0]["rows"]]
    assert labels == ["VLAD k=4 + gmp + RN -> 32", "VLAD k=4 + gmp + RN -> 32 + PQ 8 B",
                      "VLAD k=4 + gmp + RN -> 32 + PQ 8 B + re-rank 5"]
    for r in report["configs"][0]["rows"]:
        maps = [p["map"] for p in r["per_seed"]]
        assert len(maps) == 2
        assert r["map_mean"] == pytest.approx(np.mean(maps)) and r["map_std"] == pytest.approx(np.std(maps))
    assert calls[0]["seeds"] == [0, 1] and calls[0]["pq_bytes"] == [8]


def test_eval_without_the_benchmark_s_images_says_where_before_learning(tmp_path, capsys, monkeypatch):
    """`streamk eval --dataset ukbench` with no --root (or one without jpg/) failed after the
    learning set's extraction, with the library's "pass root= or image_dir="; now before it,
    with the flag and the download command."""
    from streamk.evaluation import report

    learned = []
    monkeypatch.setattr(report, "learning_set", lambda *a, **k: learned.append(1))
    assert main(["eval", "--dataset", "ukbench", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'jpg'} is not a folder" in err and "--root DIR" in err
    assert "streamk datasets download ukbench --dir DIR" in err and not learned


def test_eval_table_columns_line_up(shared_data, tmp_path, capsys, monkeypatch):
    """The header ended at column 78 above mAP values ending at 72, and the "2nd stage ms/query"
    values sat under the gap: each value now ends where its header does, whatever the rows
    hold (a label of any length, a mean ± std, a row with no second stage). A 30-photo slice."""
    import re

    from streamk.evaluation import report as eval_report

    ds = load_dataset("paris6k-subset")
    small = ds.restrict([i for i in ds.image_ids if "defense" in i or "eiffel" in i][:30])
    real = eval_report.evaluate_dataset
    monkeypatch.setattr(eval_report, "evaluate_dataset", lambda dataset, *a, **kw: real(small, *a, **kw))
    assert main(["eval", "--dataset", "paris6k-subset", "--embedding", "vlad", "--vocab-size", "4",
                 "--aggregation", "sum,gmp", "--rn", "off", "--verify", "10", "--expand", "2",
                 "--cache", str(tmp_path / "cache"), "--workers", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("method "))
    header, rows = lines[at], [line for line in lines[at + 1:] if line.startswith("VLAD")]
    map_end, cost_end = header.index("mAP") + len("mAP"), len(header)
    assert header.endswith("2nd stage ms/query") and len(rows) >= 3
    costs = 0
    for row in rows:
        value = re.search(r" (\d+\.\d(?: ± \d+\.\d)?)(?: |$)", row)  # the first number: the mAP
        assert value and value.end(1) == map_end, (header, row)
        if len(row) > map_end:
            assert re.fullmatch(r" +\d+\.\d", row[map_end:]) and len(row) == cost_end, (header, row)
            costs += 1
    assert 0 < costs < len(rows)  # rows with and without a second stage


def test_table_lines_fit_their_widest_cell():
    """A label longer than the old fixed 64 columns pushed its row's values right of the rest."""
    from streamk.evaluation.report import table_lines

    long = "T-emb k=64 + democratic + RN -> 512 + PQ 64 B + re-rank 50 + SP + QE (recursive-centred)"
    lines = table_lines(["method", "mAP", "2nd stage ms/query"], [[long, "85.0 ± 0.8", "26.1"], ["short", "7.5", ""]])
    assert lines == [f"{'method':<{len(long)}}         mAP  2nd stage ms/query",
                     f"{long}  85.0 ± 0.8                26.1",
                     f"{'short':<{len(long)}}         7.5"]


@pytest.mark.parametrize("kwargs, said", [
    ({"aggregations": ("sum", "max")}, "unknown aggregation 'max'"),
    ({"rn": (False,), "dims": (128,)}, "add RN (--rn on"),
    ({"ks": (16,), "rn": (True,), "dims": (4096,)}, "D' = 4096 exceeds the dimension of temb with k = 16 (1920)"),
    ({"aggregations": ()}, "no aggregations to evaluate"),
    ({"gamma": 2.0}, "gamma must be in (0, 1]"),
])
def test_eval_refuses_what_it_cannot_run_before_learning(shared_data, monkeypatch, kwargs, said):
    """`streamk eval --aggregation max` (or run_eval from Python) said so only once the
    encoder was fitted (20 s at k = 16, minutes at 64); `--dim 128 --rn off` ran and left the
    D' rows out without a word; a D' above the embedding's dimension failed after every image
    was aggregated. Now a ConfigError before any feature is read or learned."""
    from streamk.errors import ConfigError
    from streamk.evaluation import report

    learned = []
    monkeypatch.setattr(report, "learning_set", lambda *a, **k: learned.append(1))
    with pytest.raises(ConfigError, match=re.escape(said)):
        report.run_eval("paris6k-subset", **{"ks": (16,), **kwargs}, log=lambda *a: None, progress=False)
    assert not learned


def test_eval_says_its_protocol_and_parameters(shared_data, tmp_path, capsys, monkeypatch):
    """The output did not say how queries were run and scored (the box, junk, the AP) nor the
    aggregation's parameters, showed an empty "2nd stage ms/query" column with --verify 0, and
    left out PQ rows whose M does not divide D' without a word. A 30-photo slice."""
    import json

    from streamk.evaluation import report as eval_report

    ds = load_dataset("paris6k-subset")
    small = ds.restrict([i for i in ds.image_ids if "defense" in i or "eiffel" in i][:30])
    real = eval_report.evaluate_dataset
    monkeypatch.setattr(eval_report, "evaluate_dataset", lambda dataset, *a, **kw: real(small, *a, **kw))
    argv = ["eval", "--dataset", "paris6k-subset", "--embedding", "vlad", "--vocab-size", "4", "--aggregation",
            "sum,gmp", "--rn", "off", "--verify", "0", "--pq-bytes", "3", "--lam", "2",
            "--cache", str(tmp_path / "cache"), "--workers", "1"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    protocol = ("protocol: each query described by the features inside its official box; AP as the official "
                "compute_ap (positives: good + ok; junk images skipped: they take no rank); mAP = mean AP over "
                f"the {ds.n_queries} queries")
    assert protocol in lines
    assert ("parameters: power-law 0.5 then L2; democratic gamma 0.5, 10 Sinkhorn iterations on max(K, 0); "
            "GMP lambda 2") in lines
    assert any(line.startswith("note: no PQ 3 B rows for D' = 512") for line in lines)
    header = next(line for line in lines if line.startswith("method "))
    assert header.split() == ["method", "mAP"]
    assert main(argv + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["protocol"] == protocol.removeprefix("protocol: ")
    assert out["params"] == {"power": 0.5, "gamma": 0.5, "n_iter": 10, "lam": 2.0}

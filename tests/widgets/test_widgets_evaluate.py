"""EvalDashboard: runs a sweep with a progress bar, draws the table and figures, redraws on demand."""

import dataclasses
import json
import shutil

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

from streamk.errors import DatasetImageError
from streamk.widgets.evaluate import EvalDashboard

from helpers.examples import small_example_fixture

CONFIGS = [{"embedding": "temb", "k": 4}, {"embedding": "temb", "k": 8}]
POWERS = (0.0, 0.5, 1.0)
PNG = b"\x89PNG"


example = small_example_fixture()


@pytest.fixture(scope="module")
def dash(example):
    return EvalDashboard(example.dataset, CONFIGS, extractor=example.index.extractor(), powers=POWERS)


def test_construction_runs_and_fills_everything(dash, example):
    assert dash.runs == 1 and dash.result is not None
    assert dash.error_box.text == ""
    assert dash.result.labels == ["T-emb k=4", "T-emb k=8"]
    assert "streamk-map-table" in dash.table._dom_classes
    table = dash.table.value
    assert table.count("<tr>") == 1 + 2 * 3  # header + (config, method) rows
    gmp = dash.result.maps[("T-emb k=8", "gmp", True, 0.5)]
    assert f"{gmp:.1f}" in table and "mAP + RN" in table
    for img, css in ((dash.bars, "streamk-ap-bars"), (dash.pr, "streamk-pr"),
                     (dash.power_plot, "streamk-map-vs-power"), (dash.k_plot, "streamk-map-vs-k")):
        assert css in img._dom_classes and bytes(img.value).startswith(PNG)
    assert dash.k_note.value == ""
    assert set(dash.redraws) == {"table", "bars", "pr", "power", "k"}
    assert dash.progress.layout.display == "none"  # hidden once done
    assert list(dash.query_dd.options) == [(n, i) for i, n in enumerate(example.dataset.query_names)]


def test_query_dropdown_redraws_the_pr_curve_only(dash, example):
    before = dict(dash.redraws)
    runs, pr, ranked, bars = dash.runs, bytes(dash.pr.value), dash.ranked.value, bytes(dash.bars.value)
    q = (dash.query_dd.value + 1) % example.dataset.n_queries
    dash.query_dd.value = q
    assert dash.redraws["pr"] == before["pr"] + 1
    assert {k: v for k, v in dash.redraws.items() if k != "pr"} == {k: v for k, v in before.items() if k != "pr"}
    assert dash.runs == runs and bytes(dash.pr.value) != pr and dash.ranked.value != ranked
    assert bytes(dash.bars.value) == bars
    # ranked thumbnails: the query, then the first results with positive / negative borders
    q = example.dataset.queries[q]
    html = dash.ranked.value
    assert html.count("<img") == 1 + min(10, example.dataset.n_images)
    assert q.name in html
    assert "#2a2" in html and "#c33" in html  # positives (green) and negatives (red) both shown
    assert dash.thumbnails.reads >= 1 + len(q.positives)


def test_selection_dropdowns_redraw_bars_and_pr(dash):
    before = dict(dash.redraws)
    bars = bytes(dash.bars.value)
    dash.method_dd.value = "sum"
    assert dash.redraws["bars"] == before["bars"] + 1 and bytes(dash.bars.value) != bars
    bars = bytes(dash.bars.value)
    dash.config_dd.value = "T-emb k=4"
    assert bytes(dash.bars.value) != bars
    dash.rn_dd.value = not dash.rn_dd.value
    assert dash.redraws["bars"] == before["bars"] + 3 and dash.redraws["pr"] == before["pr"] + 3
    assert dash.redraws["table"] == before["table"] and dash.redraws["power"] == before["power"]
    assert dash.runs == 1
    assert dash.selection == ("T-emb k=4", "sum", dash.rn_dd.value)


def test_run_button_reruns_and_keeps_the_selection(dash):
    runs, tables = dash.runs, dash.redraws["table"]
    selection = dash.selection
    dash.run_button.click()
    assert dash.runs == runs + 1 and dash.redraws["table"] == tables + 1
    assert dash.selection == selection and dash.error_box.text == ""


def test_one_config_shows_a_note_instead_of_map_vs_k(example):
    d = EvalDashboard(example.dataset, [{"embedding": "temb", "k": 4}], extractor=example.index.extractor(),
                      powers=(0.5, 1.0), rn=(False,), methods=("sum", "gmp"))
    assert d.result is not None and d.k_plot.layout.display == "none"
    assert "two configs" in d.k_note.value
    assert "mAP + RN" not in d.table.value and d.table.value.count("<tr>") == 1 + 2
    json.dumps(d.result.to_dict(), allow_nan=False)


def test_missing_image_is_shown_not_raised(example, tmp_path):
    ds = example.dataset
    images = tmp_path / "database"
    shutil.copytree(ds.image_dir, images)
    (images / ds.image_ids[2]).unlink()
    broken = dataclasses.replace(ds, image_dir=images)
    d = EvalDashboard(broken, [{"embedding": "temb", "k": 4}], extractor=example.index.extractor())
    assert d.result is None and d.runs == 0
    assert isinstance(d.error_box.last, DatasetImageError)
    assert "DatasetImageError" in d.error_box.value and ds.image_ids[2] in d.error_box.text
    assert d.results_box.layout.display == "none"
    d.run_button.click()  # still usable: the same error again, nothing raised
    assert isinstance(d.error_box.last, DatasetImageError) and not d.run_button.disabled


def test_bad_options_and_run_false(example):
    d = EvalDashboard(example.dataset, [{"embedding": "temb", "k": 4}], run=False, powers=(2.0,))
    assert d.result is None and d.runs == 0 and "Run" in d.status.value
    d.run()
    assert "ConfigError" in d.error_box.text and d.result is None

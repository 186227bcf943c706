"""Every notebook in notebooks/ runs top to bottom (nbclient, headless) on a small example,
and is stored with its outputs cleared; executed, it keeps its widgets' state, and
notebooks/export_html.py turns it into HTML that shows the widgets with no script."""

import importlib.util
import os
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
EXPORT_HTML = Path(__file__).resolve().parents[2] / "notebooks" / "export_html.py"


def export_html():
    """notebooks/export_html.py, a script, as a module."""
    spec = importlib.util.spec_from_file_location("export_html", EXPORT_HTML)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_notebooks():
    assert {p.name for p in NOTEBOOKS} >= {"search.ipynb", "evaluate.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_cleared(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: clear the outputs"


def run_notebook(path, example_dir, tmp_path, timeout=600):
    nb = nbformat.read(path, as_version=4)
    env_before = os.environ.get("STREAMK_EXAMPLE_DIR")
    os.environ["STREAMK_EXAMPLE_DIR"] = str(example_dir)  # the kernel inherits it
    try:
        client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                                         resources={"metadata": {"path": str(tmp_path)}})
        client.execute()
    finally:
        if env_before is None:
            os.environ.pop("STREAMK_EXAMPLE_DIR", None)
        else:
            os.environ["STREAMK_EXAMPLE_DIR"] = env_before
    return nb


def widget_states(nb):
    """The state of every widget model, as saved in the executed notebook."""
    saved = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    return [m["state"] for m in saved.get("state", {}).values()]


def outputs(nb):
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            yield out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, small_example_dir, tmp_path):
    nb = run_notebook(path, small_example_dir, tmp_path)
    outs = list(outputs(nb))
    assert not [o for o in outs if o.output_type == "error"]
    widgets = [o for o in outs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widgets, f"{path.name} shows no widget"
    text = "".join(o.get("text", "") for o in outs if o.output_type == "stream")
    assert "Traceback" not in text
    states = widget_states(nb)
    errors = [st["value"] for st in states if "streamk-error" in st.get("_dom_classes", ())]
    assert errors and not any(errors), f"{path.name}: an error shown in a widget: {errors}"
    if path.name == "search.ipynb":
        grids = [st["value"] for st in states if "streamk-results" in st.get("_dom_classes", ())]
        assert len(grids) == 1 and grids[0].count('class="streamk-hit"') == 9
        assert "demo: 9 images, 12 queries" in text
        assert len([line for line in text.splitlines() if line[:2].strip().isdigit()]) == 5  # the ranking printed
    check_saved_widgets(nb, widgets, path.name)


def check_saved_widgets(nb, widget_outputs, name):
    """Every widget the notebook shows has its state saved in it; the HTML made from it
    draws each of them (results, images) and loads no script."""
    saved = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    shown = [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] for o in widget_outputs]
    assert shown and all(saved.get(m, {}).get("state") for m in shown), f"{name}: widget state not saved"
    page = export_html().to_html(nb)
    assert "widget-view+json" not in page and not re.search(r"<script[^>]*\bsrc=", page), name
    assert page.count('class="jupyter-widget') >= len(shown)
    images = [len(b) for b in re.findall(r'src="data:image/[a-z]+;base64,([A-Za-z0-9+/=]*)"', page)]
    assert images and min(images) > 100, f"{name}: an image drawn empty"
    if name == "search.ipynb":
        assert page.count('class="streamk-hit"') == 9


@pytest.fixture(scope="module")
def paris_example_dir(shared_data, tmp_path_factory):
    pytest.importorskip("pyhesaff")
    from streamk.demo.examples import build_example

    folder = tmp_path_factory.mktemp("paris") / "paris6k-subset"
    build_example("paris6k-subset", folder, k=8, progress=False).close()
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_on_paris6k_subset(path, paris_example_dir, tmp_path):
    nb = run_notebook(path, paris_example_dir, tmp_path, timeout=1800)
    assert not [o for o in outputs(nb) if o.output_type == "error"]
    errors = [st["value"] for st in widget_states(nb) if "streamk-error" in st.get("_dom_classes", ())]
    assert errors and not any(errors), errors


def test_widgets_are_drawn_from_their_saved_state():
    """The static drawing of a saved state: boxes of children, HTML, labels, an image from
    its buffer, a control as its value, an Output widget's outputs; an unknown reference is
    skipped."""
    draw = export_html()
    models = {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_row", "IPY_MODEL_gone"],
                                                     "_dom_classes": ["streamk-app"]}},
        "row": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_html", "IPY_MODEL_pick",
                                                                  "IPY_MODEL_img", "IPY_MODEL_out"]}},
        "html": {"model_name": "HTMLModel", "state": {"value": "<b class=x>3 results</b>"}},
        "pick": {"model_name": "DropdownModel", "state": {"description": "query", "index": 1,
                                                          "_options_labels": ["a.jpg", "b<c>.jpg"]}},
        "img": {"model_name": "ImageModel", "state": {"format": "png", "width": "64"},
                "buffers": [{"path": ["value"], "data": "iVBORw0KGgo=", "encoding": "base64"}]},
        "out": {"model_name": "OutputModel", "state": {"outputs": [
            {"output_type": "stream", "name": "stdout", "text": "mAP 0.91\n"}]}},
    }
    page = draw.widget_html(models, "box")
    assert page.startswith('<div class="jupyter-widget streamk-app sk-widget-col">')
    assert "<b class=x>3 results</b>" in page and "query <b>b&lt;c&gt;.jpg</b>" in page
    assert '<img src="data:image/png;base64,iVBORw0KGgo=" width="64">' in page
    assert "<pre>mAP 0.91\n</pre>" in page and "sk-widget-row" in page

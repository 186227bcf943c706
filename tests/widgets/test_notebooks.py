"""Every notebook in notebooks/ runs top to bottom (nbclient, headless) on a small example,
and is stored with its outputs cleared."""

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


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
        client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
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

"""A notebook as one HTML file that shows its widgets as they were, with no script from a CDN.

    python notebooks/export_html.py notebooks/search.ipynb [-o search.html] [--execute]

A notebook keeps its widgets' state only when it is saved with it: nbclient and
``jupyter nbconvert --execute`` store it (``store_widget_state``), JupyterLab only with
Settings > "Save Widget State Automatically". nbconvert's own HTML then draws the widgets
with @jupyter-widgets/html-manager, loaded from a CDN (``--HTMLExporter.widget_renderer_url``
can name a local copy of its ``embed-amd.js``, which no Python package ships): offline, the
widgets are blank. This script instead writes each widget's saved state as plain HTML (its
text, HTML and images; controls as their values, disabled), so the file reads anywhere.
``--execute`` first runs the notebook headless (nbclient), storing its widgets' state, and
saves the executed notebook beside the HTML.
"""

import argparse
import html
import sys
from pathlib import Path

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
CSS = """<style>
.sk-widget-row { display: flex; flex-wrap: wrap; gap: 4px 12px; align-items: center; }
.sk-widget-col { display: flex; flex-direction: column; gap: 4px; }
.sk-control { font-size: 13px; color: #444; }
.sk-control b { font-weight: 600; color: #111; }
</style>"""


def saved_widget_state(nb):
    """{model id: {"state": ..., "buffers": ...}} saved in the notebook's metadata ({} when none)."""
    return dict(nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {}))


def _child_id(ref):
    return ref[len("IPY_MODEL_"):] if isinstance(ref, str) and ref.startswith("IPY_MODEL_") else None


def _buffer(model, name):
    for buf in model.get("buffers", ()):
        if buf.get("path") == [name]:
            return buf.get("data", "")
    value = model["state"].get(name)
    return value if isinstance(value, str) else ""


def _label(state):
    text = state.get("description") or ""
    return f"{html.escape(text)} " if text else ""


def _selected(state):
    labels, index = state.get("_options_labels") or [], state.get("index")
    return labels[index] if isinstance(index, int) and 0 <= index < len(labels) else ""


def _control(name, state):
    """A control as its value, read-only (None: not a control)."""
    if name in ("DropdownModel", "SelectModel", "RadioButtonsModel", "ToggleButtonsModel"):
        value = _selected(state)
    elif name.endswith(("SliderModel", "TextModel")) or name == "TextareaModel":
        value = state.get("value")
    elif name in ("CheckboxModel", "ToggleButtonModel"):
        value = "on" if state.get("value") else "off"
    elif name.endswith("ProgressModel"):
        return (f'<span class="sk-control">{_label(state)}<progress value="{state.get("value", 0)}" '
                f'max="{state.get("max", 100)}"></progress></span>')
    elif name in ("ButtonModel", "FileUploadModel"):
        return f'<button disabled>{html.escape(state.get("description") or "")}</button>'
    else:
        return None
    return f'<span class="sk-control">{_label(state)}<b>{html.escape(str(value))}</b></span>'


def _output(out):
    """One output of an Output widget (or of a cell) as HTML."""
    data = out.get("data", {})
    if "text/html" in data:
        return "".join(data["text/html"])
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            return f'<img src="data:{mime};base64,{"".join(data[mime]).strip()}">'
    text = out.get("text") or "".join(data.get("text/plain", ""))
    return f"<pre>{html.escape(''.join(text))}</pre>" if text else ""


def widget_html(models, model_id, seen=None):
    """The widget ``model_id`` and its children as static HTML, from their saved state."""
    seen = set() if seen is None else seen
    model = models.get(model_id)
    if model is None or model_id in seen:
        return ""
    seen.add(model_id)
    name, state = model.get("model_name", ""), model.get("state", {})
    classes = " ".join(["jupyter-widget", *state.get("_dom_classes", ())])
    if name in ("HTMLModel", "HTMLMathModel"):
        body = _label(state) + (state.get("value") or "")
    elif name == "LabelModel":
        body = html.escape(state.get("value") or "")
    elif name == "ImageModel":
        data, fmt = _buffer(model, "value"), state.get("format") or "png"
        size = "".join(f' {k}="{html.escape(str(state[k]))}"' for k in ("width", "height") if state.get(k))
        body = f'<img src="data:image/{fmt};base64,{data}"{size}>' if data else ""
    elif name == "OutputModel":
        body = "".join(_output(o) for o in state.get("outputs", ()))
    elif "children" in state:
        kind = "sk-widget-row" if name in ("HBoxModel", "GridBoxModel") else "sk-widget-col"
        classes += f" {kind}"
        body = "".join(widget_html(models, _child_id(c), seen) for c in state["children"] if _child_id(c))
    else:
        body = _control(name, state) or ""
    return f'<div class="{html.escape(classes)}">{body}</div>' if body else ""


def static_widgets(nb):
    """A copy of ``nb`` whose widget outputs are HTML drawn from the saved state, and which
    carries no widget state (so nbconvert adds no widget script); the number drawn."""
    import copy

    nb = copy.deepcopy(nb)
    models = saved_widget_state(nb)
    drawn = 0
    for cell in nb.cells:
        for out in cell.get("outputs", ()):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                continue
            body = widget_html(models, view.get("model_id"))
            del out["data"][WIDGET_VIEW]
            if body:
                out["data"]["text/html"] = body
                drawn += 1
    nb.metadata.pop("widgets", None)
    if drawn:
        nb.cells.insert(0, _css_cell())
    return nb, drawn


def _css_cell():
    import nbformat

    return nbformat.v4.new_markdown_cell(CSS)


def execute(nb, cwd, timeout=1800):
    """Run ``nb`` headless, storing its widgets' state in its metadata."""
    import nbclient

    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


# nbconvert's lab page less what it loads from CDNs: require.js, MathJax and mermaid (the
# notebooks have no math, no diagram, and no widget script is left to need require.js)
NO_CDN_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def to_html(nb):
    """The notebook as one HTML page: widgets drawn from their saved state, images inline,
    no script from elsewhere."""
    import jinja2
    from nbconvert import HTMLExporter

    static, _ = static_widgets(nb)
    exporter = HTMLExporter(template_name="lab", embed_images=True, template_file="no_cdn.html.j2",
                            extra_loaders=[jinja2.DictLoader({"no_cdn.html.j2": NO_CDN_TEMPLATE})])
    body, _ = exporter.from_notebook_node(static)
    return body


def main(argv=None):
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("-o", "--output", type=Path, help="the HTML file (default: the notebook's name, .html)")
    parser.add_argument("--execute", action="store_true", help="run the notebook first (headless), storing "
                        "its widgets' state; the executed notebook is saved beside the HTML")
    args = parser.parse_args(argv)
    output = args.output or Path(args.notebook.name).with_suffix(".html")
    nb = nbformat.read(args.notebook, as_version=4)
    if args.execute:
        execute(nb, args.notebook.resolve().parent)
        nbformat.write(nb, output.with_suffix(".ipynb"))
    if not saved_widget_state(nb):
        print(f"{args.notebook}: no widget state saved in it; run it with --execute (or save it from "
              "JupyterLab with Settings > Save Widget State Automatically)", file=sys.stderr)
    output.write_text(to_html(nb), encoding="utf-8")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()

"""EvalDashboard: evaluate sum / democratic / GMP aggregation on a dataset and show
the paper's numbers and plots.

    EvalDashboard(dataset, configs=[{"embedding": "temb", "k": k} for k in (8, 16)])

Runs :func:`streamk.evaluation.sweep.run_sweep` (synchronously, with a progress bar) and shows
the mAP table at the default power-law exponent, the AP of every query, the
precision-recall curve of a chosen query with its first results, and the paper's
two figures: mAP against the power-law exponent alpha and against k, for each
aggregation method, without RN (solid) and with RN (dashed).  The dropdowns only
redraw the figure they feed (no re-evaluation); errors are shown in the widget.
"""

import html
import math
from collections import Counter

import ipywidgets as W
import numpy as np

from ..errors import StreamkError
from ..evaluation import DEFAULT_CONFIGS, query_precision_recall, run_sweep
from .common import ErrorBox, Progress, ThumbnailCache, data_uri, figure_png, guarded, new_figure, placeholder_svg

METHOD_NAMES = {"sum": "sum", "democratic": "democratic", "gmp": "GMP"}
METHOD_COLOURS = {"sum": "#1f77b4", "democratic": "#ff7f0e", "gmp": "#2ca02c"}
BORDER = {"positive": "#2a2", "junk": "#999", "negative": "#c33"}
N_THUMBS = 10
THUMB_PX = 110


def _pct(v):
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def _image(css_class):
    img = W.Image(format="png", layout=W.Layout(max_width="100%"))
    img.add_class(css_class)
    return img


class EvalDashboard(W.VBox):
    """mAP table, per-query AP, precision-recall with ranked thumbnails, mAP vs alpha and vs k.

    dataset: a :class:`streamk.datasets.Dataset`. configs: embeddings to compare
    (``{"embedding": "temb", "k": 16}``; give several k of one embedding for the
    mAP-vs-k plot). run: evaluate now (else press Run). extractor, cache_dir: the
    feature extractor and cache (pass the one the collection was built with so that
    the cached features are reused). sweep_options: more :func:`run_sweep` options
    (methods, rn, powers, default_power, learning, ...).

    ``result`` is the last :class:`streamk.evaluation.sweep.SweepResult` (None before a
    successful run); ``runs`` counts the sweeps and ``redraws`` counts what was
    drawn ("table", "bars", "pr", "power", "k").
    """

    def __init__(self, dataset, configs=DEFAULT_CONFIGS, run=True, extractor=None, cache_dir=None,
                 **sweep_options):
        self.dataset = dataset
        self.configs = configs
        self.extractor = extractor
        self.cache_dir = cache_dir
        self.sweep_options = sweep_options
        self.result = None
        self.runs = 0
        self.redraws = Counter()
        self.thumbnails = ThumbnailCache(side=2 * THUMB_PX)
        self._quiet = False  # set while dropdown options are being replaced

        self.title = W.HTML(self._title_html())
        self.run_button = W.Button(description="Run", icon="play", button_style="primary",
                                   tooltip="evaluate every configuration (features come from the cache)")
        self.run_button.on_click(lambda _: self.run())
        self.progress = Progress()
        self.error_box = ErrorBox()
        self.status = W.HTML("" if run else "<i>Press Run to evaluate.</i>")
        self.table = W.HTML()
        self.table.add_class("streamk-map-table")

        dd = {"style": {"description_width": "initial"}, "layout": W.Layout(width="auto")}
        self.config_dd = W.Dropdown(description="config", **dd)
        self.method_dd = W.Dropdown(description="aggregation", **dd)
        self.rn_dd = W.Dropdown(description="RN", **dd)
        self.query_dd = W.Dropdown(description="query", **dd)
        self.bars = _image("streamk-ap-bars")
        self.pr = _image("streamk-pr")
        self.ranked = W.HTML()
        self.ranked.add_class("streamk-ranked")
        self.power_plot = _image("streamk-map-vs-power")
        self.k_plot = _image("streamk-map-vs-k")
        self.k_note = W.HTML()
        self.k_note.add_class("streamk-map-vs-k-note")

        for w in (self.config_dd, self.method_dd, self.rn_dd):
            w.observe(self._on_selection, names="value")
        self.query_dd.observe(self._on_query, names="value")

        self.results_box = W.VBox([
            self.table,
            W.HTML("<h4>Per query</h4>"),
            W.HBox([self.config_dd, self.method_dd, self.rn_dd]),
            self.bars,
            self.query_dd,
            W.HBox([self.pr, self.ranked], layout=W.Layout(align_items="flex-start")),
            W.HTML("<h4>The paper's plots</h4>"),
            self.power_plot,
            self.k_plot,
            self.k_note,
        ])
        self.results_box.layout.display = "none"
        super().__init__([self.title, W.HBox([self.run_button, self.progress]), self.error_box, self.status,
                          self.results_box])
        self.add_class("streamk-eval")
        if run:
            self.run()

    # ------------------------------------------------------------ running
    def _title_html(self):
        d = self.dataset
        return (f"<b>Evaluation on {html.escape(str(d.name))}</b>: {d.n_images} database images, "
                f"{d.n_queries} queries (protocol {html.escape(str(d.protocol))})")

    def run(self):
        """Run the sweep (progress in the bar), then redraw everything; errors go to the error box."""
        self.run_button.disabled = True
        try:
            out = guarded(self.error_box, self._sweep)
        finally:
            self.run_button.disabled = False
        if isinstance(out, Exception):
            self.status.value = "<i>The evaluation failed (see above); fix the cause and press Run.</i>"
            return None
        self.result = out
        self.runs += 1
        self._fill_options()
        self.results_box.layout.display = None
        self.redraw()
        return out

    def _sweep(self):
        try:
            return run_sweep(self.dataset, self.configs, extractor=self.extractor, cache_dir=self.cache_dir,
                             progress=self.progress.update, **self.sweep_options)
        finally:
            self.progress.hide()

    def _fill_options(self):
        r = self.result
        self._quiet = True
        try:
            keep = (self.config_dd.value, self.method_dd.value, self.rn_dd.value, self.query_dd.value)
            self.config_dd.options = r.labels
            self.method_dd.options = [(METHOD_NAMES[m], m) for m in r.methods]
            self.rn_dd.options = [("with RN" if v else "without RN", v) for v in r.rn]
            self.query_dd.options = [(name, i) for i, name in enumerate(r.query_names)]
            method = "gmp" if "gmp" in r.methods else r.methods[0]
            aps = r.aps[(r.labels[-1], method, r.rn[0])]
            hardest = int(np.nanargmin(aps)) if np.isfinite(aps).any() else 0  # the most telling PR curve
            defaults = (r.labels[-1], method, r.rn[0], hardest)
            for w, old, new in zip((self.config_dd, self.method_dd, self.rn_dd, self.query_dd), keep, defaults):
                values = [o[1] if isinstance(o, tuple) else o for o in w.options]
                w.value = old if old in values else new
        finally:
            self._quiet = False

    # ------------------------------------------------------------ redraws
    def redraw(self):
        """Draw everything from ``result`` (no re-evaluation)."""
        if self.result is None:
            return
        self.status.value = self._status_html()
        for draw in (self._draw_table, self._draw_bars, self._draw_pr, self._draw_power, self._draw_k):
            if isinstance(guarded(self.error_box, draw), Exception):
                return

    def _on_selection(self, change):
        if self._quiet or self.result is None:
            return
        for draw in (self._draw_bars, self._draw_pr):
            if isinstance(guarded(self.error_box, draw), Exception):
                return

    def _on_query(self, change):
        if self._quiet or self.result is None:
            return
        guarded(self.error_box, self._draw_pr)

    @property
    def selection(self):
        """(config label, method, rn) chosen in the dropdowns."""
        return self.config_dd.value, self.method_dd.value, self.rn_dd.value

    def _status_html(self):
        r = self.result
        parts = [f"features {r.features_s:.1f} s"]
        for label, t in r.timings.items():
            parts.append(f"{html.escape(label)}: fit {t['fit_s']:.1f} s, "
                         f"{1000 * t['aggregate_s_per_image']:.0f} ms/image, evaluation {t['evaluate_s']:.1f} s")
        return (f"<small>{r.descriptors_per_image:.0f} descriptors per database image; learning: "
                f"{html.escape(r.learning)}; " + "; ".join(parts) + "</small>")

    def _draw_table(self):
        r = self.result
        rows = r.table()
        has_rn = {False: False in r.rn, True: True in r.rn}
        head = "<tr><th>config</th><th>D</th><th>aggregation</th>"
        head += "<th>mAP</th>" if has_rn[False] else ""
        head += "<th>mAP + RN</th>" if has_rn[True] else ""
        best = {}
        for row in rows:
            for col in ("map", "map_rn"):
                if row[col] is not None and not math.isnan(row[col]):
                    best[(row["config"], col)] = max(best.get((row["config"], col), -1.0), row[col])
        body = []
        for row in rows:
            cells = [html.escape(row["config"]), str(row["dim"] or ""), METHOD_NAMES[row["method"]]]
            for col, shown in (("map", has_rn[False]), ("map_rn", has_rn[True])):
                if shown:
                    text = _pct(row[col])
                    if row[col] is not None and row[col] == best.get((row["config"], col)):
                        text = f"<b>{text}</b>"
                    cells.append(text)
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        caption = (f"mAP (%) on {html.escape(str(r.dataset))}, power-law exponent α = {r.default_power:g}; "
                   f"best per column and config in bold")
        self.table.value = (
            "<style>.streamk-map-table table{border-collapse:collapse}"
            ".streamk-map-table td,.streamk-map-table th{padding:2px 10px;border-bottom:1px solid #ddd;"
            "text-align:right}</style>"
            f"<table><caption style='caption-side:top;text-align:left'>{caption}</caption>"
            f"{head}</tr>{''.join(body)}</table>")
        self.redraws["table"] += 1

    def _draw_bars(self):
        r = self.result
        label, method, rn = self.selection
        aps = r.aps[(label, method, rn)]
        nq = len(aps)
        fig, ax = new_figure(figsize=(min(14.0, max(6.0, 0.13 * nq)), 3.0))
        x = np.arange(nq)
        ax.bar(x, np.nan_to_num(aps, nan=0.0), color=METHOD_COLOURS.get(method, "#777"), width=0.8)
        mean = r.maps[(label, method, rn, r.default_power)]
        ax.axhline(mean, color="k", lw=1, ls="--", label=f"mAP {mean:.1f}")
        ax.set_xlim(-0.6, nq - 0.4)
        ax.set_ylim(0, 100)
        ax.set_ylabel("AP (%)")
        if nq <= 40:
            ax.set_xticks(x)
            ax.set_xticklabels(r.query_names, rotation=75, ha="right", fontsize=7)
        else:
            ax.set_xlabel("query")
        ax.set_title(f"{label} + {METHOD_NAMES[method]}{' + RN' if rn else ''}: AP per query "
                     f"(α = {r.default_power:g})", fontsize=10)
        ax.legend(loc="lower right", fontsize=8)
        self.bars.value = figure_png(fig)
        self.redraws["bars"] += 1

    def _draw_pr(self):
        r = self.result
        label, method, rn = self.selection
        q = int(self.query_dd.value)
        fig, ax = new_figure(figsize=(4.2, 3.6))
        for m in r.methods:
            ranking = r.rankings[(label, m, rn)][q]
            recall, precision = query_precision_recall(ranking, self.dataset, q)
            ap = r.aps[(label, m, rn)][q]
            ax.plot(recall, precision, color=METHOD_COLOURS.get(m), lw=2.2 if m == method else 1.0,
                    alpha=1.0 if m == method else 0.6, label=f"{METHOD_NAMES[m]} (AP {_pct(ap)})")
        ax.set_xlim(0, 1.02)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("recall")
        ax.set_ylabel("precision")
        ax.set_title(f"{r.query_names[q]}: {label}{' + RN' if rn else ''}", fontsize=9)
        ax.legend(loc="lower left", fontsize=8)
        self.pr.value = figure_png(fig)
        self.ranked.value = self._ranked_html(q, r.rankings[(label, method, rn)][q], r.scores[(label, method, rn)][q])
        self.redraws["pr"] += 1

    def _thumb(self, path, box=None):
        try:
            return data_uri(self.thumbnails.get(path, box))
        except (StreamkError, OSError) as exc:  # an unreadable image gets a grey square, the rest still shows
            return placeholder_svg(type(exc).__name__, side=THUMB_PX)

    def _ranked_html(self, q, ranking, scores):
        d = self.dataset
        query = d.queries[q]
        positives, junk = d.ground_truth()[q]
        pos, junk = set(np.asarray(positives).tolist()), set(np.asarray(junk).tolist())
        box = query.box if d.crop_query else None

        def cell(src, border, caption):
            return (f"<div style='display:inline-block;margin:3px;text-align:center;font-size:11px;"
                    f"width:{THUMB_PX + 6}px;vertical-align:top'><img src='{src}' style='max-width:{THUMB_PX}px;"
                    f"max-height:{THUMB_PX}px;border:3px solid {border}'/><br>{caption}</div>")

        cells = [cell(self._thumb(d.query_image_path(q), box), "#36c",
                      f"<b>query</b><br>{html.escape(query.name)}")]
        for rank, (i, s) in enumerate(zip(ranking[:N_THUMBS], scores[:N_THUMBS]), 1):
            i = int(i)
            kind = "junk" if i in junk else "positive" if i in pos else "negative"
            cells.append(cell(self._thumb(d.image_path(i)), BORDER[kind],
                              f"{rank}. {html.escape(d.image_ids[i][:18])}<br>{s:.3f}"))
        legend = " ".join(f"<span style='border-bottom:3px solid {c};margin-right:8px'>{k}</span>"
                          for k, c in BORDER.items())
        return f"<div style='max-width:760px'>{''.join(cells)}</div><small>{legend}</small>"

    def _method_lines(self, ax, xs, series, rn):
        for m, ys in series.items():
            ax.plot(xs, ys, color=METHOD_COLOURS.get(m), ls="--" if rn else "-", marker="o", ms=3,
                    label=f"{METHOD_NAMES[m]}{' + RN' if rn else ''}")

    def _draw_power(self):
        r = self.result
        n = len(r.configs)
        ncols = min(n, 3)
        nrows = math.ceil(n / ncols)
        fig, axes = new_figure(nrows, ncols, figsize=(4.3 * ncols, 3.4 * nrows), squeeze=False, sharey=True)
        for ax in axes.ravel()[n:]:
            ax.set_visible(False)
        for ax, c in zip(axes.ravel(), r.configs):
            for rn in r.rn:
                powers, series = r.map_vs_power(c["label"], rn)
                self._method_lines(ax, powers, series, rn)
            ax.axvline(r.default_power, color="#bbb", lw=0.8, ls=":")
            ax.set_xlim(-0.02, 1.02)
            ax.set_xlabel("power-law exponent α")
            ax.set_title(c["label"], fontsize=10)
            ax.grid(alpha=0.3)
        for ax in axes[:, 0]:
            ax.set_ylabel("mAP (%)")
        axes.ravel()[0].legend(fontsize=7, loc="lower right")
        self.power_plot.value = figure_png(fig)
        self.redraws["power"] += 1

    def _draw_k(self):
        r = self.result
        families = r.k_families()
        if not families:
            self.k_plot.layout.display = "none"
            self.k_note.value = ("<i>mAP against k needs at least two configs of the same embedding with "
                                 "different k, e.g. configs=[{'embedding': 'temb', 'k': k} for k in (8, 16)].</i>")
            self.redraws["k"] += 1
            return
        n = len(families)
        fig, axes = new_figure(1, n, figsize=(4.3 * n, 3.4), squeeze=False)
        for rn in r.rn:
            for ax, (name, (ks, series)) in zip(axes[0], r.map_vs_k(rn).items()):
                self._method_lines(ax, ks, series, rn)
        for ax, (name, cs) in zip(axes[0], families.items()):
            ks = [c["k"] for c in cs]
            ax.set_xscale("log", base=2)
            ax.set_xticks(ks)
            ax.set_xticklabels([str(k) for k in ks])
            ax.minorticks_off()
            ax.set_xlabel("k (vocabulary size)")
            ax.set_ylabel("mAP (%)")
            ax.set_title(f"{name}, α = {r.default_power:g}", fontsize=10)
            ax.grid(alpha=0.3)
        axes[0, 0].legend(fontsize=7, loc="lower right")
        self.k_plot.value = figure_png(fig)
        self.k_plot.layout.display = None
        self.k_note.value = ""
        self.redraws["k"] += 1

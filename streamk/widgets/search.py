"""SearchApp: interactive search of a StreamingIndex in a notebook.

    app = SearchApp(index, dataset=dataset)   # dataset (optional): queries and ground truth
    app                                        # shown as the cell's output

A query comes from an uploaded file, a path (or an index id) typed in, or a
query / image picked from the list; an optional crop box keeps the features
inside it. Changing k, exact / PQ, the aggregation method, gamma, lambda or the
power-law exponent re-encodes the query from its cached features and re-ranks at
once (other aggregation settings than the index's own re-aggregate the database
once, with a progress bar: :mod:`streamk.pipeline.reaggregation`). Results show rank,
score and id, bordered green / grey / red for positive / junk / negative when the
query's ground truth is known. With an index that keeps local geometry, *verify*
(on by default) runs the second stage: the top 100 spatially verified, verified
results first with their inlier count and the query (or its box) drawn where it
matched in the result, then query expansion; *false alarms* sets the verified mark's bar
(1 in 10^4 pairs of different places by default, down to 1 in 10^7); *show matches* draws
the inlier pairs between the query and a chosen result. A weights view explains a chosen result.
"""

import html
import os
import shutil
import time
import weakref
from typing import NamedTuple

import ipywidgets as W

from .. import features as feat
from ..pipeline import extract_many
from ..checks import check_box
from ..errors import ConfigError, EmptyDescriptorSetError, ImageReadError, ImageTooLargeError
from ..index import SearchParams
from ..pipeline import Reaggregator, Settings
from ..verification import DEFAULT_FALSE_ALARMS_PER_PAIR, NFA_MEANING, WHY_NOT_VERIFIED, log10_nfa_text
from .common import ErrorBox, Progress, ThumbnailCache, data_uri, guarded, placeholder_svg
from .weights import WeightsView

METHOD_LABELS = (("sum", "sum"), ("democratic", "democratic"), ("GMP", "gmp"))
BORDER = {"positive": "#2a2", "junk": "#999", "negative": "#d22", None: "#fff"}
# the verified mark's bar (false verifications per pair of different places): the default, then stricter ones for
# a user who acts on the mark without looking (bench/README.md section 8 measures each)
BARS = tuple((f"1 in 10^{e}" + (" pairs (default)" if 10.0 ** -e == DEFAULT_FALSE_ALARMS_PER_PAIR else " pairs"),
              10.0 ** -e) for e in (4, 5, 6, 7))


class QueryImage(NamedTuple):
    """The current query: its image file, its full features and its ground truth."""

    label: str
    path: str  # an upload is written to the app's temporary folder first
    features: feat.Features
    positives: frozenset | None  # index ids; None: ground truth unknown
    junk: frozenset


class SearchApp(W.VBox):
    """See the module doc. Programmatic use (tests, scripts) goes through the same
    methods the controls call: :meth:`search_path`, :meth:`search_upload`,
    :meth:`pick`, and the control widgets' ``value``."""

    # class defaults: close() (ipywidgets calls it at garbage collection) works on an app whose constructor raised
    _upload_dir = None  # made at the first upload; holds the current query's upload only
    _remove_uploads = None  # removes that folder with the app (or at exit)

    def __init__(self, index, dataset=None, k=10, cache_dir=None, workers=None, thumbnails=None,
                 first_query=True):
        self.index = index
        self.dataset = dataset
        self.thumbnails = thumbnails or ThumbnailCache()
        self.reaggregator = Reaggregator(index, cache_dir=cache_dir, workers=workers)
        self.extractor = index.extractor()
        self.cache_dir = self.reaggregator.cache_dir
        self.query = None
        self.hits = []  # [Hit] of the last ranking
        self.state = 0  # redraws of the result grid
        self.timings = {}
        self._suspended = False  # True while the app sets controls itself
        self._k_asked, self._size = k, len(index)  # k and the picker follow the index as it grows
        self._query_controls()
        self._ranking_controls(self.reaggregator.index_settings(), k, len(index))
        self._second_stage_controls(index.vocabulary is not None)  # local geometry, either kind of index
        self._output_views()
        self._wire()
        super().__init__([
            W.HBox([self.picker, self.path_text, self.path_button, self.upload]),
            W.HBox([self.use_box, *self.box_fields, self.box_note]),
            W.HBox([self.method, self.reset_button]),
            W.HBox([self.gamma, self.lam, self.power]),
            W.HBox([self.k, self.mode, self.verify, self.bar, self.explain_toggle, self.matches_toggle]),
            self.progress, self.errors, self.status,
            W.HBox([self.query_view, self.results]),
            self.matches_view,
            self.weights_box,
        ])
        self.add_class("streamk-search-app")
        self._update_sliders()
        self._shown = self._snapshot()  # what the results shown were made with: restored when a change fails
        if first_query and self.picker.options:
            self._run(self._pick_value, self.picker.value)

    # ---------------------------------------------------------------- the widgets
    def _query_controls(self):
        """The query's sources (a pick, a path or id, an upload) and its crop box."""
        self.picker = W.Dropdown(options=self._pick_options(), description="query", layout=W.Layout(width="420px"))
        self.picker.add_class("streamk-picker")
        self.path_text = W.Text(placeholder="image path, or an id of the index", continuous_update=False,
                                layout=W.Layout(width="340px"))
        self.path_button = W.Button(description="search", layout=W.Layout(width="80px"))
        self.upload = W.FileUpload(accept="image/*", multiple=False, description="upload")
        self.use_box = W.Checkbox(value=False, description="crop box", indent=False, layout=W.Layout(width="90px"))
        self.box_fields = [W.BoundedFloatText(value=0, min=0, max=1e5, description=d, step=1,
                                              layout=W.Layout(width="130px"), style={"description_width": "22px"})
                           for d in ("x1", "y1", "x2", "y2")]
        self.box_note = W.HTML()  # a box being typed in: said quietly, searched once it is valid
        self.box_note.add_class("streamk-box-note")

    def _ranking_controls(self, s, k, n):
        """The aggregation settings ``s`` (the index's at first), k (of ``n`` images), exact / PQ."""
        self.method = W.ToggleButtons(options=list(METHOD_LABELS), value=s.method, description="aggregation")
        self.method.add_class("streamk-method")
        self.gamma = W.FloatSlider(value=s.gamma, min=0.05, max=1.0, step=0.05, description="γ (dem.)",
                                   continuous_update=False, readout_format=".2f")
        self.lam = W.FloatLogSlider(value=s.lam, base=10, min=-3, max=3, step=0.25, description="λ (GMP)",
                                    continuous_update=False)
        self.power = W.FloatSlider(value=s.power, min=0.0, max=1.0, step=0.05, description="power α",
                                   continuous_update=False, readout_format=".2f")
        self.k = W.IntSlider(value=min(k, max(1, n)), min=1, max=max(1, min(100, n)), description="k",
                             continuous_update=False)
        self.k.add_class("streamk-k")
        self.mode = W.ToggleButtons(options=[("exact", "exact"), ("PQ", "pq")], value="exact", description="search")
        self._update_mode()
        self.mode.add_class("streamk-mode")
        self.reset_button = W.Button(description="index settings", tooltip="the settings the index was built with")

    def _second_stage_controls(self, has_geometry):
        """verify + expand, and the inlier pairs' view (an index that keeps local geometry)."""
        self.verify = W.Checkbox(value=has_geometry, description="verify (spatial) + expand", indent=False,
                                 disabled=not has_geometry, layout=W.Layout(width="210px"),
                                 tooltip="second stage: RANSAC on the local geometry of the top 100, then query "
                                         "expansion" if has_geometry else "the index keeps no local geometry "
                                         "(streamk index add-local-features)")
        self.verify.add_class("streamk-verify")
        self.bar = W.Dropdown(options=list(BARS), value=DEFAULT_FALSE_ALARMS_PER_PAIR, description="false alarms",
                              disabled=not has_geometry, layout=W.Layout(width="250px"),
                              tooltip="the verified mark's bar: " + NFA_MEANING)
        self.bar.add_class("streamk-bar")
        self.matches_toggle = W.ToggleButton(value=False, description="show matches", icon="link",
                                             disabled=not has_geometry)
        self.matches_view = W.HTML()
        self.matches_view.add_class("streamk-matches")

    def _output_views(self):
        """Progress, errors, status, the query and the results, the weights view."""
        self.progress = Progress()
        self.errors = ErrorBox()
        self.status = W.HTML()
        self.status.add_class("streamk-status")
        self.query_view = W.HTML()
        self.query_view.add_class("streamk-query")
        self.results = W.HTML()
        self.results.add_class("streamk-results")
        self.explain = W.Dropdown(options=[], description="explain", layout=W.Layout(width="420px"))
        self.weights = WeightsView(self.index.encoder, orient=self.extractor.orients)
        self.weights_box = W.VBox([W.HTML("<b>Why this match?</b> keypoints coloured by their democratic "
                                          "and GMP weights (warmer = higher)"), self.explain, self.weights])
        self.weights_box.layout.display = "none"
        self.explain_toggle = W.ToggleButton(value=False, description="show weights", icon="eye")

    def _wire(self):
        self.picker.observe(lambda ch: None if self._suspended else self._run(self._pick_value, ch["new"]),
                            names="value")
        self.path_button.on_click(lambda _: self._run(self.search_path, self.path_text.value))
        self.path_text.observe(self._on_path, names="value")  # Enter (or leaving the field) searches
        self.upload.observe(self._on_upload, names="value")
        for w in (self.use_box, *self.box_fields, self.method, self.gamma, self.lam, self.power, self.k, self.mode,
                  self.verify, self.bar):
            w.observe(self._on_control, names="value")
        self.matches_toggle.observe(lambda ch: self._run(self.show_matches, self.explain.value), names="value")
        self.reset_button.on_click(lambda _: self._run(self.reset_settings))
        self.explain_toggle.observe(self._on_explain_toggle, names="value")
        self.explain.observe(self._on_explain, names="value")

    # ---------------------------------------------------------------- controls
    def settings(self):
        return Settings(self.method.value, float(self.gamma.value), float(self.lam.value), float(self.power.value))

    def _update_mode(self):
        """PQ offered only when the index has a codec (it may be trained while the app is open)."""
        has_pq = self.index.codec_params() is not None
        self.mode.disabled = not has_pq and self.mode.value == "exact"
        self.mode.tooltips = ["all stored vectors", "PQ codes, then re-rank" if has_pq
                              else "the index has no PQ codes yet (index.train(), or streamk index train)"]

    def _follow_the_index(self):
        """k's maximum and the picker's list as the index is now (len is O(1): the list is read when it changed)."""
        n = len(self.index)
        if n == self._size:
            return
        self._size = n
        self._suspended = True
        try:
            capped = self.k.value == self.k.max  # (an index empty at first kept k at 1: the k asked for now)
            self.k.max = max(1, min(100, n))
            if capped:
                self.k.value = min(self._k_asked, self.k.max)
            picked = self.picker.value
            self.picker.options = self._pick_options()
            if any(v == picked for _, v in self.picker.options):
                self.picker.value = picked
        finally:
            self._suspended = False

    def _update_sliders(self):
        self.gamma.disabled = self.method.value != "democratic"
        self.lam.disabled = self.method.value != "gmp"

    def _snapshot(self):
        """The query and the controls' values (the box fields' bounds too) a ranking is made with."""
        return {"query": self.query, "box_max": [f.max for f in self.box_fields],
                "values": [w.value for w in self._ranking_widgets()]}

    def _ranking_widgets(self):
        return (self.use_box, *self.box_fields, self.method, self.gamma, self.lam, self.power, self.k, self.mode,
                self.verify, self.bar)

    def _restore(self, snap):
        """Put the query and the controls back as ``snap`` has them, searching nothing."""
        self._suspended = True
        try:
            self.query = snap["query"]
            for f, m in zip(self.box_fields, snap["box_max"]):
                f.max = m
            for w, v in zip(self._ranking_widgets(), snap["values"]):
                w.value = v
        finally:
            self._suspended = False
        self._update_sliders()
        self.box_note.value = ""

    def _run(self, fn, *args):
        """Every control goes through here: an error is shown in the app, never raised."""
        return guarded(self.errors, fn, *args)

    def _on_control(self, change):
        if self._suspended or (change["owner"] in self.box_fields and not self.use_box.value):
            return  # (a box not used changes no ranking)
        if self.use_box.value:
            try:
                check_box(tuple(float(f.value) for f in self.box_fields))
            except ConfigError:  # typing a box passes through such boxes: no search until it is valid
                self.box_note.value = ('<span style="color:#777">searched once x1 &lt; x2 and y1 &lt; y2; '
                                       "the results are of the last box searched</span>")
                return
        self.box_note.value = ""
        self._run(self._rerank_or_restore)

    def _rerank_or_restore(self):
        """Rank under the controls' values; on error put them back as the results shown were made."""
        shown = self._shown
        try:
            return self.rerank()
        except Exception:
            self._restore(shown)
            raise

    def _pick_options(self):
        opts = []
        if self.dataset is not None:
            opts += [(f"query: {q.name}", ("query", i)) for i, q in enumerate(self.dataset.queries)]
        ids = self.index.ids()
        opts += [(f"index: {i}", ("id", i)) for i in ids[:500]]  # a longer list is no use in a drop-down
        return opts

    def _pick_value(self, value):
        kind, what = value
        return self.pick_query(what) if kind == "query" else self.pick(what)

    def _on_upload(self, change):
        files = change["new"]
        if not files:
            return
        f = files[0] if isinstance(files, (list, tuple)) else next(iter(files.values()))
        name = f.get("name") or f.get("metadata", {}).get("name", "upload")
        self._run(self.search_upload, name, bytes(f["content"]))
        self.upload.value = ()  # the same file may be chosen again

    def _on_path(self, change):
        if change["new"].strip():
            self._run(self.search_path, change["new"])

    def _on_explain(self, change):
        if not self._suspended and self.explain_toggle.value:
            self._run(self.explain_result, change["new"])
        if not self._suspended and self.matches_toggle.value:
            self._run(self.show_matches, change["new"])

    def _on_explain_toggle(self, change):
        self.weights_box.layout.display = None if change["new"] else "none"
        if change["new"]:
            self._run(self.explain_result, self.explain.value)

    def reset_settings(self):
        s = self.reaggregator.index_settings()
        self._suspended = True
        try:
            self.method.value, self.gamma.value, self.lam.value, self.power.value = s.method, s.gamma, s.lam, s.power
        finally:
            self._suspended = False
        return self._rerank_or_restore()

    # ---------------------------------------------------------------- queries
    def _features_of_file(self, path):
        found, errors = extract_many([path], self.extractor, self.cache_dir, workers=1, progress=False)
        if errors:
            raise ImageReadError(path, errors[path].split(": ", 1)[-1])
        return found[path]

    def _set_query(self, query, box=None):
        """Take a new query (features already extracted) and rank; nothing changes on error
        (the query shown, its box and the controls stay as they were)."""
        if len(query.features) == 0:
            raise EmptyDescriptorSetError(f"{query.label}: no local features in this image")
        w, h = query.features.image_size
        old = self.query
        shown = self._shown
        self.query = query
        try:
            self._suspended = True
            try:
                for f, m in zip(self.box_fields, (w, h, w, h)):
                    f.max = float(m)
                for f, v in zip(self.box_fields, (0, 0, w, h) if box is None else box):
                    f.value = float(min(max(v, 0), f.max))
                self.use_box.value = box is not None
            finally:
                self._suspended = False
            self.rerank()
        except Exception:
            self._restore(shown)
            raise
        # only the current query's upload is kept: a session of many uploads does not fill the disk
        if old is not None and old.path != query.path and os.path.dirname(old.path) == self._upload_dir:
            _remove_quietly(old.path)
        return self.hits

    def pick_query(self, i):
        """Search with the dataset's query ``i`` (its box, its ground truth)."""
        q = self.dataset.queries[int(i)]
        path = str(self.dataset.query_image_path(q))
        pos, junk = self.dataset.ground_truth()[int(i)]
        ids = self.dataset.image_ids
        return self._set_query(QueryImage(f"query {q.name}", path, self._features_of_file(path),
                                          frozenset(ids[j] for j in pos), frozenset(ids[j] for j in junk)),
                               box=q.box if self.dataset.crop_query else None)

    def pick(self, image_id):
        """Search with an image of the index (its stored source file)."""
        info = self.index.info(image_id)
        if not info.get("source"):
            raise ConfigError(f"image {image_id!r} was added as {info.get('kind')}: no image file to query with")
        return self.search_path(info["source"], label=f"index image {image_id}")

    def search_path(self, path, label=None):
        """Search with an image file (or, if ``path`` is an id of the index, with that image)."""
        path = str(path).strip()
        if not path:
            raise ConfigError("type an image path or an id of the index")
        if not os.path.exists(path) and path in self.index:
            return self.pick(path)
        positives, junk = self._ground_truth_of(path)
        return self._set_query(QueryImage(label or path, path, self._features_of_file(path), positives, junk))

    def search_upload(self, name, data):
        """Search with the bytes of an uploaded image file."""
        import tempfile

        if not data:
            raise ImageReadError(name, "empty file")
        if len(data) > self.extractor.max_file_size:
            raise ImageTooLargeError(name, f"an upload of {len(data):,} bytes is over the limit of "
                                           f"{self.extractor.max_file_size:,} (max_file_size)", limit="max_file_size")
        f = self.extractor.extract_bytes(bytes(data), name)  # a bad file (or one over a limit) stops here
        if self._upload_dir is None:
            self._upload_dir = tempfile.mkdtemp(prefix="streamk-upload-")
            self._remove_uploads = weakref.finalize(self, shutil.rmtree, self._upload_dir, True)
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in os.path.basename(str(name)))[-80:]
        path = os.path.join(self._upload_dir, f"{self.state:06d}-{safe or 'upload'}")
        with open(path, "wb") as fh:
            fh.write(bytes(data))
        try:
            return self._set_query(QueryImage(f"upload {name}", path, f, None, frozenset()))
        except BaseException:
            _remove_quietly(path)
            raise

    def search_image(self, image, name="image"):
        """Search with an image held in memory: a PIL image, an (H, W, 3 or 4) uint8 array (as
        skimage gives it) or the file's bytes; shown and searched as an upload named ``name``."""
        from ..features import in_memory_image_bytes

        data = in_memory_image_bytes(image, name, self.extractor.max_file_size, self.extractor.max_pixels)
        if data is None:
            raise ConfigError(f"{type(image).__name__} is not an image: give a PIL image, an (H, W, 3) uint8 "
                              f"array or the file's bytes (a grey array: Image.fromarray(a))")
        return self.search_upload(name if isinstance(image, (bytes, bytearray, memoryview)) else f"{name}.png", data)

    def close(self):
        """Close the widgets and remove the uploads' temporary folder."""
        if self._remove_uploads is not None:
            self._remove_uploads()
        super().close()

    def _ground_truth_of(self, path):
        """Ground truth of a file that is one of the dataset's query images, else unknown."""
        if self.dataset is None:
            return None, frozenset()
        real = os.path.realpath(path)
        for i, q in enumerate(self.dataset.queries):
            if os.path.realpath(self.dataset.query_image_path(q)) == real:
                pos, junk = self.dataset.ground_truth()[i]
                ids = self.dataset.image_ids
                return frozenset(ids[j] for j in pos), frozenset(ids[j] for j in junk)
        return None, frozenset()

    # ---------------------------------------------------------------- ranking
    def box(self):
        return tuple(float(f.value) for f in self.box_fields) if self.use_box.value else None

    def query_features(self):
        f = self.query.features
        box = self.box()
        if box is not None:
            f = feat.crop_to_box(f, box)
            if len(f) == 0:
                raise EmptyDescriptorSetError(f"{self.query.label}: no local features inside the box {box}")
        return f

    def rerank(self):
        """Encode the query under the current settings and rank; redraws the grid."""
        self._update_sliders()
        self._update_mode()
        self._follow_the_index()
        if self.query is None:
            return []
        s = self.settings()
        f = self.query_features()
        t0 = time.perf_counter()
        q, alpha = self.reaggregator.encode_query(f.descriptors, s)
        t_enc = time.perf_counter() - t0
        work = self.reaggregator.work_needed(s)
        label = f"aggregating the database again ({s.method})"
        t_db = 0.0
        if work:  # once per setting: the database under it, with a progress bar
            try:
                self.reaggregator.database(s, progress=lambda done, total, stage:
                                           self.progress.update(done, total, f"{label}: {stage}"))
            finally:
                self.progress.hide()
            t_db = time.perf_counter() - t0 - t_enc
        params = SearchParams(k=self.k.value, mode=self.mode.value, box=self.box(), pairs=True,
                              false_alarms_per_pair=self.bar.value)
        self.bar.disabled = not self.verify.value or self.verify.disabled
        if self.verify.value and self.reaggregator.is_index_settings(s):
            hits = self.index.search(q, features=f, params=params)
        else:  # the second stage compares the index's own vectors: under other settings, the first stage
            hits = self.reaggregator.search(q, s, k=params.k, mode=params.mode)
        self.timings = {"encode_s": t_enc, "database_s": t_db,
                        "search_s": time.perf_counter() - t0 - t_enc - t_db}
        self.hits = hits
        self._draw(f, s)
        return hits

    def relevance(self, image_id):
        """"positive" / "junk" / "negative", or None when the query's ground truth is unknown."""
        if self.query is None or self.query.positives is None:
            return None
        if image_id in self.query.positives:
            return "positive"
        return "junk" if image_id in self.query.junk else "negative"

    def _thumb(self, path, box=None):
        try:
            return data_uri(self.thumbnails.get(path, box, orient=self.extractor.orients))
        except (ImageReadError, OSError) as exc:
            return placeholder_svg("image missing" if "no such file" in str(exc) else "unreadable")

    def _draw(self, f, s):
        self.state += 1
        q = self.query
        box = self.box()
        src = self._thumb(q.path, box)
        self.query_view.value = (
            f'<figure style="margin:4px;text-align:center"><img src="{src}" style="border:3px solid #36c"/>'
            f'<figcaption style="max-width:{self.thumbnails.side}px;font-size:11px">{html.escape(q.label)}<br>'
            f'{len(f)} features{" in the box" if box else ""}</figcaption></figure>')
        cards = []
        for rank, hit in enumerate(self.hits, 1):
            rel = self.relevance(hit.id)
            size = None
            try:
                info = self.index.info(hit.id)
                src, size = self._thumb(info.get("source") or ""), info.get("image_size")
            except Exception:  # removed meanwhile by another process: still listed, without a picture
                src = placeholder_svg("removed")
            inliers = getattr(hit, "inliers", None)
            verified = bool(getattr(hit, "verified", False))
            why = getattr(hit, "why", None)
            nfa = log10_nfa_text(getattr(hit, "log10_nfa", None))
            cards.append(
                f'<figure class="streamk-hit" data-id="{html.escape(hit.id)}" data-rank="{rank}" '
                f'data-relevance="{rel or ""}" data-inliers="{"" if inliers is None else inliers}" '
                f'data-verified="{int(verified)}" data-why="{why or ""}" data-log10-nfa="{nfa}" '
                + (f'title="not verified: {html.escape(WHY_NOT_VERIFIED.get(why, why))}" ' if why else "")
                + f'style="margin:4px;text-align:center;width:{self.thumbnails.side + 8}px">'
                f'<div style="position:relative;display:inline-block">'
                f'<img src="{src}" style="border:4px solid {BORDER[rel]};max-width:{self.thumbnails.side}px;'
                f'display:block"/>{self._region_svg(hit, size)}</div>'
                f'<figcaption style="font-size:11px;word-break:break-all">#{rank} · {hit.score:.3f}'
                + ("" if inliers is None else f' · <b>{inliers}</b> inliers{" ✓" if verified else ""}')
                + (f' · <span title="{html.escape(NFA_MEANING)}">log10 NFA {nfa}</span>' if nfa else "")
                + (f' ({html.escape(why)})' if why else "")
                + f'<br>{html.escape(hit.id)}</figcaption></figure>')
        if not cards:
            cards.append("<i>the index is empty</i>")
        self.results.value = (
            f'<div class="streamk-grid" data-method="{s.method}" data-k="{self.k.value}" '
            f'data-mode="{self.mode.value}" data-bar="{self.bar.value:g}" data-query="{html.escape(q.label)}" '
            f'data-state="{self.state}" '
            f'style="display:flex;flex-wrap:wrap">{"".join(cards)}</div>')
        n_pos = None if q.positives is None else sum(self.relevance(h.id) == "positive" for h in self.hits)
        own = self.reaggregator.is_index_settings(s)
        self.status.value = (
            f"{len(self.hits)} results of {len(self.index)} · {s.method}"
            + (f" γ={s.gamma:.2f}" if s.method == "democratic" else "")
            + (f" λ={s.lam:.3g}" if s.method == "gmp" else "") + f" α={s.power:.2f} · {self.mode.value}"
            + ("" if own else " (database aggregated again" + (f" in {self.timings['database_s']:.1f} s"
                                                                 if self.timings["database_s"] else "") + ")")
            + f" · query {1000 * self.timings['encode_s']:.0f} ms, search {1000 * self.timings['search_s']:.0f} ms"
            + ("" if n_pos is None else f" · {n_pos} positive(s) shown of {len(q.positives)}"))
        self._shown = self._snapshot()  # the grid and status now show these (the weights view below may fail)
        self.box_note.value = ""
        ids = [h.id for h in self.hits]
        keep = self.explain.value if self.explain.value in ids else (ids[0] if ids else None)
        self._suspended = True
        try:
            self.explain.options = ids
            self.explain.value = keep
        finally:
            self._suspended = False
        if self.explain_toggle.value:
            self.explain_result(keep)
        if self.matches_toggle.value:
            self.show_matches(keep)

    def _region_svg(self, hit, image_size):
        """An SVG over a result's thumbnail: the query (or its box) where it matched."""
        region = getattr(hit, "region", None)
        if region is None or not getattr(hit, "verified", False) or not image_size:
            return ""
        w, h = (float(v) for v in image_size)
        scale = min(1.0, self.thumbnails.side / max(w, h))
        pts = " ".join(f"{(x + 0.5) * scale:.1f},{(y + 0.5) * scale:.1f}" for x, y in region)
        return (f'<svg class="streamk-region" width="{w * scale:.0f}" height="{h * scale:.0f}" '
                f'style="position:absolute;left:4px;top:4px;overflow:visible;pointer-events:none">'
                f'<polygon points="{pts}" fill="none" stroke="#ffd400" stroke-width="2"/></svg>')

    def show_matches(self, image_id):
        """Draw the query and ``image_id`` side by side, the inlier pairs between them and
        the matched region (a verified result); hide the view when toggled off."""
        from .common import figure_png, new_figure, open_image

        if not self.matches_toggle.value or self.query is None or image_id is None:
            self.matches_view.value = ""
            return None
        hit = next((h for h in self.hits if h.id == image_id), None)
        pairs = getattr(hit, "pairs", None)
        src = self.index.info(image_id).get("source")
        if hit is None or pairs is None or not src:
            self.matches_view.value = (f"<i>{html.escape(str(image_id))}: no inlier pairs (not verified, or "
                                       "the second stage is off)</i>")
            return None
        orient = self.extractor.orients  # drawn in the frame of the features
        q_img, r_img = open_image(self.query.path, orient=orient), open_image(src, orient=orient)
        gap = 20
        fig, ax = new_figure(figsize=(10, 4.5))
        ax.imshow(q_img, extent=(-0.5, q_img.width - 0.5, q_img.height - 0.5, -0.5))
        ax.imshow(r_img, extent=(q_img.width + gap - 0.5, q_img.width + gap + r_img.width - 0.5,
                                 r_img.height - 0.5, -0.5))
        for xq, yq, xr, yr in pairs:
            ax.plot([xq, xr + q_img.width + gap], [yq, yr], color="#00e060", linewidth=0.6, alpha=0.7)
        if hit.region is not None:
            poly = [(x + q_img.width + gap, y) for x, y in hit.region]
            ax.plot([p[0] for p in poly + poly[:1]], [p[1] for p in poly + poly[:1]], color="#ffd400", linewidth=2)
        box = self.box() or (0, 0, q_img.width - 1, q_img.height - 1)
        ax.plot([box[0], box[2], box[2], box[0], box[0]], [box[1], box[1], box[3], box[3], box[1]], color="#36c")
        ax.set_xlim(-0.5, q_img.width + gap + r_img.width)
        ax.set_ylim(max(q_img.height, r_img.height), -0.5)
        ax.set_axis_off()
        ax.set_title(f"{len(pairs)} inlier matches: query (left) and {image_id} (right)", fontsize=10)
        self.matches_view.value = (f'<img class="streamk-matches-figure" data-id="{html.escape(image_id)}" '
                                   f'data-pairs="{len(pairs)}" src="{data_uri(figure_png(fig), "image/png")}"/>')
        return len(pairs)

    # ---------------------------------------------------------------- weights
    def explain_result(self, image_id):
        """Show the query's and ``image_id``'s keypoints coloured by their weights."""
        if self.query is None:
            return
        rows = [("query", self.query.path, self.query_features())]
        if image_id is not None:
            src = self.index.info(image_id).get("source")
            if src:
                rows.append((image_id, src, self._features_of_file(src)))
        s = self.settings()
        if (self.weights.gamma, self.weights.lam) != (s.gamma, s.lam):
            self.weights.set_params(gamma=s.gamma, lam=s.lam)
        self.weights.show(rows)


def _remove_quietly(path):
    try:
        os.remove(path)
    except OSError:
        pass

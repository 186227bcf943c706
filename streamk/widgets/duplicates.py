"""DuplicatesView: an index's duplicate pairs, or one image's copies, in a notebook.

    view = DuplicatesView(index)                    # the whole index: every verified pair classed
    view = DuplicatesView(index, image_id="a.jpg")  # one image's pairs with its nearest
    view                                            # shown as the cell's output

The classes are the index's own (:func:`streamk.index.copy_report`, :func:`streamk.index.copies_of`:
the same as ``streamk duplicates`` and the server's ``/images/{id}/duplicates``), on a single or a
sharded index that keeps local geometry. Each pair shows its class (exact / copy / same scene),
the vector score, the inliers of its similarity, the fraction of the smaller image they cover,
the pixels' agreement and why, with both thumbnails. Groups ("keep one") are made of exact and
copy pairs only: other photos of the same scene are never grouped. *copies* shows the exact and
copy pairs; *every verified pair* adds the same-scene ones (a redraw, nothing computed again).
Typing an id (empty: the whole index) or changing *neighbours* and pressing *find* computes the
pairs again: bench/copy_detection.py measures what a whole-index pass costs per 1,000 images.

An index without local geometry has no copy classes: the view falls back to the vector rule, as
``streamk duplicates`` does (pairs whose vectors score at least DEFAULT_DUPLICATE_THRESHOLD, and their
groups), with a note that such a group may hold other photos of the same scene and how to get the classes.
"""

import html

import ipywidgets as W

from ..errors import ImageReadError
from .common import ErrorBox, ThumbnailCache, data_uri, guarded, placeholder_svg

DEFAULT_NEIGHBOURS = 10  # as streamk.index.DEFAULT_COPY_NEIGHBOURS (not imported: this module stays light)
MAX_NEIGHBOURS = 1000  # as the library's bound (streamk.index.duplicates.MAX_NEIGHBOURS)
KIND_COLOUR = {"exact": "#2a2", "copy": "#28a", "same scene": "#999"}
VECTOR_CLASS = "similar vector"  # a pair of the vector rule: a copy, or maybe another photo of the same scene
THUMB_PX = 120  # the thumbnails' side in the table


class DuplicatesView(W.VBox):
    """See the module doc. Programmatic use (tests, scripts) goes through the methods the
    controls call: :meth:`find` and the control widgets' ``value``. ``pairs`` and ``groups``
    hold the last answer (each pair as :meth:`streamk.index.DuplicatePair.to_dict` gives it)."""

    def __init__(self, index, image_id=None, neighbours=DEFAULT_NEIGHBOURS, every_pair=False, thumbnails=None,
                 run=True):
        from ..index import check_count

        neighbours = check_count("neighbours", neighbours, 1, MAX_NEIGHBOURS)  # refused, as the library does
        self.index = index
        self.thumbnails = thumbnails or ThumbnailCache()
        self.pairs, self.groups = [], []
        self.rule, self.note = "classes", ""  # "vector" (and why) on an index without local geometry
        self.state = 0  # redraws
        self.searches = 0  # answers computed
        self._thumbs = {}  # image id -> data URI
        self.image = W.Text(value=image_id or "", description="image id",
                            placeholder="empty: every pair of the index")
        self.neighbours = W.BoundedIntText(value=neighbours, min=1, max=MAX_NEIGHBOURS, description="neighbours")
        self.show = W.ToggleButtons(options=[("copies", False), ("every verified pair", True)], value=every_pair)
        self.find_button = W.Button(description="find", button_style="primary")
        self.errors = ErrorBox()
        self.status = W.HTML()
        self.note_view = W.HTML()
        self.note_view.add_class("streamk-duplicates-note")
        self.groups_view = W.HTML()
        self.pairs_view = W.HTML()
        self.find_button.on_click(lambda _: self.find())
        # an id typed computes on Enter (or leaving the box), not on each key
        self.image.continuous_update = False
        self.image.observe(lambda _: self.find(), names="value")
        self._quiet = False  # True while the view puts its toggle back itself
        self.show.observe(self._on_show, names="value")
        super().__init__([W.HBox([self.image, self.neighbours, self.find_button]), self.show, self.errors,
                          self.note_view, self.status, self.groups_view, self.pairs_view])
        self.add_class("streamk-duplicates")
        if run:
            self.find()

    # ------------------------------------------------------------ answers
    def find(self):
        """Compute the pairs (of the typed image, or of the whole index) and draw them; an
        error is shown in the widget, the previous answer kept."""
        return guarded(self.errors, self._find)

    def _find(self):
        from ..index import copies_of, copy_report, vector_only_note

        image_id = self.image.value.strip() or None
        if self.index.vocabulary is None:  # no second stage: the vector rule, said
            rule, note = "vector", "groups " + vector_only_note(self.index)
            pairs, groups = vector_answer(self.index, image_id, self.neighbours.value)
        elif image_id is None:
            rule, note = "classes", ""
            report = copy_report(self.index, neighbours=self.neighbours.value, progress=False)
            pairs, groups = report["pairs"], report["groups"]
        else:
            rule, note = "classes", ""
            pairs = [p.to_dict() for p in copies_of(self.index, image_id, neighbours=self.neighbours.value)]
            groups = one_image_group(image_id, pairs)
        self.pairs, self.groups, self.rule, self.note = pairs, groups, rule, note
        self.searches += 1
        self._draw()

    def shown_pairs(self):
        """The pairs the table shows: copies (exact and copy) only, or every verified pair."""
        if self.rule == "vector" or self.show.value:
            return list(self.pairs)
        return [p for p in self.pairs if p["class"] != "same scene"]

    # ------------------------------------------------------------ drawing
    def draw(self):
        """Redraw the last answer (copies, or every verified pair); an error is shown in the widget
        (and returned), the table left as it was."""
        return guarded(self.errors, self._draw)

    def _on_show(self, change):
        if self._quiet:
            return
        if isinstance(self.draw(), Exception):  # the toggle goes back to what the table shows
            self._quiet = True
            try:
                self.show.value = change["old"]
            finally:
                self._quiet = False

    def _draw(self):
        shown = self.shown_pairs()
        table = "".join(self._row(p) for p in shown)  # first: the thumbnails may fail, nothing drawn then
        vector = self.rule == "vector"
        counts = {k: sum(p["class"] == k for p in self.pairs) for k in KIND_COLOUR}
        self.show.disabled = vector  # the vector rule has no classes to choose from
        self.note_view.value = (f'<p style="color:#a60"><b>note:</b> {html.escape(self.note)}</p>' if self.note
                                else "")
        self.status.value = (
            f"<b>{len(self.groups)} group(s) of near-duplicates</b>, {sum(len(g['ids']) for g in self.groups)} "
            f"images; {len(self.pairs)} pair(s) with vectors scoring {self.threshold():g} or more" if vector else
            f"<b>{len(self.groups)} group(s) of copies</b>, "
            f"{sum(len(g['ids']) for g in self.groups)} images; pairs: {counts['exact']} exact, "
            f"{counts['copy']} copy, {counts['same scene']} same scene (other photos: keep both)")
        keep = "near-duplicates by vector similarity" if vector else "copies of one capture: keep one"
        self.groups_view.value = "".join(
            f'<div class="streamk-group" data-ids="{html.escape(" ".join(g["ids"]))}">group {n} '
            f"({len(g['ids'])} images, {keep}): {html.escape(', '.join(g['ids']))}</div>"
            for n, g in enumerate(self.groups, 1))
        if not shown:
            what = "near-duplicates" if vector else "verified pairs" if self.show.value else "copies"
            self.pairs_view.value = f'<p class="streamk-no-pairs">no {what} found</p>'
        else:
            self.pairs_view.value = (
                f'<table class="streamk-pairs" data-state="{self.state + 1}"><tr><th>class</th><th>a</th><th>b</th>'
                "<th>score</th><th>inliers</th><th>covered</th><th>pixels agree</th><th>why</th></tr>"
                f"{table}</table>")
        self.state += 1

    @staticmethod
    def threshold():
        from ..index import DEFAULT_DUPLICATE_THRESHOLD

        return DEFAULT_DUPLICATE_THRESHOLD

    def _row(self, p):
        agreement = "-" if p["agreement"] is None else f"{p['agreement']:.2f}"
        inliers = "-" if p["inliers"] is None else str(int(p["inliers"]))
        covered = "-" if p["covered"] is None else f"{100 * p['covered']:.0f} %"
        turned = ((f", turned {90 * p['turns']}°" if p.get("turns") else "")
                  + (", mirrored" if p.get("mirrored") else ""))
        a, b, kind = (html.escape(str(p[k])) for k in ("a", "b", "class"))
        return (f'<tr class="streamk-pair" data-a="{a}" data-b="{b}" data-class="{kind}">'
                f'<td style="color:{KIND_COLOUR.get(p["class"], "#000")}"><b>{kind}</b></td>'
                f"<td>{self._figure(p['a'])}</td><td>{self._figure(p['b'])}</td>"
                f"<td>{p['score']:.3f}</td><td>{inliers}</td><td>{covered}</td>"
                f"<td>{agreement}</td><td>{html.escape(p['reason'] + turned)}</td></tr>")

    def _figure(self, image_id):
        return (f'<figure style="margin:0"><img src="{self.thumbnail_uri(image_id)}" '
                f'style="max-width:{THUMB_PX}px;max-height:{THUMB_PX}px"/>'
                f"<figcaption>{html.escape(image_id)}</figcaption></figure>")

    def thumbnail_uri(self, image_id):
        """The image's stored thumbnail, else one made from its source file, else a grey square
        saying there is none (a data URI; each image's read once per view)."""
        if image_id not in self._thumbs:
            self._thumbs[image_id] = self._thumbnail_uri(image_id)
        return self._thumbs[image_id]

    def _thumbnail_uri(self, image_id):
        data = self.index.thumbnail(image_id)
        if data:
            return data_uri(data)
        info = self.index.info(image_id)
        if info.get("source"):
            try:
                return data_uri(self.thumbnails.get(info["source"], info.get("box"),
                                                    orient=self.index.extractor().orients))
            except (ImageReadError, OSError):  # moved or changed since: said, not raised
                return placeholder_svg("source unreadable")
        return placeholder_svg("no thumbnail")


def vector_answer(index, image_id, neighbours):
    """(pairs, groups) by the vector rule (:meth:`streamk.index.Index.duplicates`), the pairs in the
    table's shape (no inliers, coverage or pixels: nothing verified them)."""
    def pair(a, b, score):
        return {"a": a, "b": b, "class": VECTOR_CLASS, "score": float(score), "inliers": None, "covered": None,
                "agreement": None, "reason": "vectors alike: a copy, or maybe another photo of the same scene"}

    if image_id is None:
        groups = index.duplicates(neighbours=neighbours, progress=False)
        pairs = [pair(a, b, score) for g in groups for a, b, score, _ in g["pairs"]]
        return pairs, [{"ids": list(g["ids"]), "pairs": [p for p in pairs if p["a"] in g["ids"]]} for g in groups]
    pairs = [pair(image_id, h.id, h.score) for h in index.duplicates(image_id)]
    return pairs, ([{"ids": sorted({image_id} | {p["b"] for p in pairs}), "pairs": pairs}] if pairs else [])


def one_image_group(image_id, pairs):
    """The group of one image's answer: the image and those of its pairs classed exact or copy
    ([] when none): the pairs all start at the image, so their copies form one group."""
    copies = [p for p in pairs if p["class"] in ("exact", "copy")]
    if not copies:
        return []
    return [{"ids": sorted({image_id} | {p["b"] for p in copies}), "pairs": copies}]


__all__ = ["DuplicatesView"]

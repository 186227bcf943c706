"""Pieces the notebook widgets share: thumbnails, figures as PNG, an error box, a progress bar.

Plots are matplotlib figures rendered to PNG (Agg) and shown in an
``ipywidgets.Image``: they look the same in JupyterLab, in a headless run
(nbclient) and in a saved notebook, and need no front-end extension.
"""

import base64
import html
import io
import os
import threading
import traceback
from collections import OrderedDict

import ipywidgets as W
import numpy as np

from ..errors import ImageReadError, StreamkError

THUMB_SIDE = 160


# ---------------------------------------------------------------- images
def open_image(path, max_side=None, orient=False):
    """An RGB PIL image (decoded now), at most ``max_side`` pixels on its long side, turned
    for its EXIF orientation with ``orient`` (as the index's extractor sees it: its
    ``orients``); ImageReadError for a missing, corrupt or non-image file."""

    from ..features import read_image_bytes

    data = read_image_bytes(path)
    return image_from_bytes(data, path, max_side, orient)


def image_from_bytes(data, name, max_side=None, orient=False):
    from PIL import UnidentifiedImageError

    from ..features import eight_bit, exif_orientation, orient_image, pil_image

    if not data:
        raise ImageReadError(name, "empty file")
    Image = pil_image(data)  # (a HEIC photo: its opener registered)
    try:
        with Image.open(io.BytesIO(data)) as img:
            orientation = exif_orientation(img) if orient else 1
            img.load()
            rgb = orient_image(eight_bit(img, "RGB"), orientation)
    except UnidentifiedImageError as exc:
        raise ImageReadError(name, "not a recognised image format") from exc
    except Exception as exc:  # Pillow's decoders raise OSError, ValueError, SyntaxError, ...
        raise ImageReadError(name, f"corrupt image ({exc or type(exc).__name__})") from exc
    if max_side is not None and max(rgb.size) > max_side:
        rgb.thumbnail((max_side, max_side))
    return rgb


def jpeg_bytes(img, quality=85):
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def data_uri(data, mime="image/jpeg"):
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


class ThumbnailCache:
    """JPEG thumbnails by (path, box), read once: a re-rank does not re-read full images.

    Keyed on the file's size and modification time too, so a replaced file gets a
    new thumbnail. ``reads`` counts the full images decoded (for tests and curiosity).
    """

    def __init__(self, side=THUMB_SIDE, max_items=4096):
        self.side = side
        self.max_items = max_items
        self.reads = 0
        self._items = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path, box=None, orient=False):
        """JPEG bytes of the thumbnail of ``path`` (its ``box`` region if given), turned for
        its EXIF orientation with ``orient`` (the frame of the features the box is in)."""
        st = os.stat(path) if os.path.exists(path) else None
        key = (os.fspath(path), None if box is None else tuple(box),
               None if st is None else (st.st_size, st.st_mtime_ns), bool(orient))
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        img = open_image(path, orient=orient)
        self.reads += 1
        if box is not None:
            img = img.crop(tuple(int(round(v)) for v in box))
        img.thumbnail((self.side, self.side))
        data = jpeg_bytes(img)
        with self._lock:
            self._items[key] = data
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)
        return data

    def __len__(self):
        return len(self._items)


def placeholder_svg(text, side=THUMB_SIDE):
    """A grey square saying why there is no thumbnail (a data URI)."""
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{side}" height="{side}">'
           f'<rect width="100%" height="100%" fill="#ddd"/><text x="50%" y="50%" font-size="12" '
           f'text-anchor="middle" fill="#555">{html.escape(text)}</text></svg>')
    return data_uri(svg.encode(), "image/svg+xml")


# ---------------------------------------------------------------- figures
def new_figure(nrows=1, ncols=1, figsize=(6, 4), **kwargs):
    """(figure, axes) made without pyplot: nothing is registered or shown by the notebook's
    backend; the figure becomes a PNG through :func:`figure_png`."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def figure_png(fig, dpi=90):
    """PNG bytes of a matplotlib figure (Agg)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def weight_colours(values):
    """Values -> [0, 1] by rank (warmer = higher), robust to outliers and negative GMP weights."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values
    order = np.argsort(np.argsort(values, kind="stable"), kind="stable")
    return order / max(1, values.size - 1)


# ---------------------------------------------------------------- errors and progress
class ErrorBox(W.HTML):
    """Where a widget shows what went wrong, instead of a dead cell.

    A streamk error (bad image, no features, ...) shows its message; anything else
    shows its type and message with the traceback folded below.
    """

    def __init__(self, **kwargs):
        super().__init__(value="", **kwargs)
        self.add_class("streamk-error")
        self.layout.display = "none"
        self.last = None  # the last exception shown

    def show(self, exc):
        self.last = exc
        text = html.escape(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, StreamkError):
            body = f"<b>{text}</b>"
        else:
            tb = html.escape("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            body = f"<b>{text}</b><details><summary>traceback</summary><pre>{tb}</pre></details>"
        self.value = f'<div style="color:#a00;border:1px solid #a00;padding:4px 8px">{body}</div>'
        self.layout.display = None

    def clear(self):
        self.last = None
        self.value = ""
        self.layout.display = "none"

    @property
    def text(self):
        return "" if self.last is None else f"{type(self.last).__name__}: {self.last}"


class Progress(W.HBox):
    """An ipywidgets progress bar with a label; hidden when idle.

    ``progress.update`` is a ``(done, total, description)`` callback, as
    :func:`streamk.evaluation.sweep.run_sweep` and :class:`streamk.pipeline.reaggregation.Reaggregator` call it.
    """

    def __init__(self, **kwargs):
        self.bar = W.IntProgress(min=0, max=1, value=0, layout=W.Layout(width="300px"))
        self.label = W.Label("")
        super().__init__([self.bar, self.label], **kwargs)
        self.add_class("streamk-progress")
        self.layout.display = "none"

    def update(self, done, total, description):
        total = max(1, int(total))
        self.bar.max = total
        self.bar.value = min(int(done), total)
        self.label.value = f"{description}: {int(done)}/{total}"
        self.layout.display = None

    def hide(self):
        self.layout.display = "none"


def guarded(error_box, fn, *args, **kwargs):
    """Run ``fn``; an exception is shown in ``error_box`` (and returned), never raised
    into the notebook's event loop where it would vanish in the log."""
    try:
        out = fn(*args, **kwargs)
    except Exception as exc:  # shown to the user: the widget stays usable
        error_box.show(exc)
        return exc
    error_box.clear()
    return out

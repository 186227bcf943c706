"""The weights view: keypoints coloured by their democratic and GMP weights.

As the paper's figure of relative weights ("Relative weights for descriptors
(warmer colours indicate higher descriptor weights) ... Middle: democratic
weights. Right: GMP weights"): one row per image, two panels (democratic |
GMP), the image in grey under its keypoints' ellipses coloured by weight.

    view = WeightsView(index.encoder)          # gamma, lam: the encoder's unless given
    view.show([("query", path, features), ("best result", path2, features2)])
    view                                        # the widget (a VBox)

Relative weight. The scale of alpha is arbitrary: the image vector is
L2-normalised ("the value of the constant C has no influence given that the
final embedding is typically l2-normalised"), so only the ratios of the weights
within one image mean anything. A keypoint is coloured by its weight divided
by the mean weight of its image, alpha_i / mean(alpha): 1 is an average
descriptor, 1/2 one weighted half as much, 2 twice. The colours follow the log
of that ratio, so halving and doubling are equally far from 1, over each
panel's own 5th-95th percentile range (:func:`colour_range`; the spread of
democratic weights is often much narrower than that of GMP weights, and a
common range would show one of them flat), or over [1/max_ratio, max_ratio]
for every panel when ``max_ratio`` is given. Democratic weights are positive
(Sinkhorn on K+ = max(K, 0)); GMP weights alpha = (K + lam I)^-1 1 may be
negative (their mean is positive: 1^T (K + lam I)^-1 1 > 0), and a negative
weight is drawn in the colour map's "under" colour (black), below the coldest
one. ``scale="rank"`` colours by rank within the image instead
(:func:`streamk.widgets.common.weight_colours`).

Bursty descriptors (repeated windows, foliage) are similar to many others of
their image: democratic weights make each descriptor contribute equally to the
self-similarity, alpha_i (K alpha)_i = C, and GMP makes each equally similar to
the aggregate, phi(x_i)^T xi = 1; both divide a burst's weight among its members,
so the burst comes out cold.
"""

import math

import ipywidgets as W
import numpy as np

from ..errors import ConfigError, DimensionError, EmptyDescriptorSetError
from .common import ErrorBox, figure_png, guarded, new_figure, open_image, weight_colours

__all__ = ["METHODS", "WeightsView", "colour_range", "descriptor_weights", "ellipse_polygons",
           "relative_weights", "weights_figure"]

METHODS = ("democratic", "gmp")
TITLES = {"democratic": "democratic", "gmp": "GMP"}
CMAP = "turbo"  # a perceptual jet: warm = high, as the paper's figure
UNDER_COLOUR = "black"  # negative (GMP) weights
_MIN_RANGE, _MAX_RANGE = 1.1, 16.0  # bounds of a panel's own colour range (see colour_range)
# Hessian-affine ellipses are pyhesaff's measurement regions (3 sqrt(3) times the
# affine-adapted scale): drawn at full size they cover the image. Drawn at this
# fraction they keep their shape, orientation and relative size.
DEFAULT_ELLIPSE_SCALE = 0.25
IMAGE_MAX_SIDE = 1024  # the background image is decoded at most this large
_ELLIPSE_POINTS = 20


# ---------------------------------------------------------------- weights
def _number(name, value):
    """A parameter as a float, or the ConfigError that names it (its range is the encoder's check)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None


def _weights_encoder(encoder, gamma=None, lam=None):
    """``encoder`` itself, or a variant sharing its fitted embedding with other gamma / lam
    (without RN: the weights come before post-processing, and RN would need refitting)."""
    c = encoder.config
    gamma = c.gamma if gamma is None else _number("gamma", gamma)
    lam = c.lam if lam is None else _number("lam", lam)
    if gamma == c.gamma and lam == c.lam:
        return encoder
    return encoder.derive(gamma=gamma, lam=lam, rn=False, dim=None)


def descriptor_weights(encoder, descriptors, gamma=None, lam=None):
    """{"democratic": alpha, "gmp": alpha}: the weights of one image's descriptors.

    ``descriptors``: the (n, 128) raw SIFT of the image (as ``Features.descriptors``);
    ``encoder``: a fitted :class:`~streamk.encoding.encoder.Encoder`, whose embedding is used
    (RootSIFT, embedding, one shared Gram). gamma (democratic) and lam (GMP)
    default to the encoder's. Each alpha is float64 (n,), in input order.
    EmptyDescriptorSetError for no descriptors.
    """
    enc = _weights_encoder(encoder, gamma, lam)
    out = enc.aggregate_methods(descriptors, METHODS)
    return {m: np.asarray(out[m][1], dtype=np.float64) for m in METHODS}


def relative_weights(alpha):
    """alpha / mean(alpha): 1 = an average descriptor of the image (see the module doc).

    Where the mean is not positive (it is for democratic and GMP weights) the
    weights are divided by the mean of their absolute values instead.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    if alpha.size == 0:
        return alpha
    mean = alpha.mean()
    if not (np.isfinite(mean) and mean > 0):
        mean = np.abs(alpha).mean()
    return alpha / mean if mean > 0 else np.zeros_like(alpha)


# ---------------------------------------------------------------- figure
def _check_rows(rows, weights):
    rows, weights = list(rows), list(weights)
    if not rows:
        raise ConfigError("weights_figure: no rows to draw")
    if len(rows) != len(weights):
        raise ConfigError(f"weights_figure: {len(rows)} rows but {len(weights)} weight dicts")
    out = []
    for row, w in zip(rows, weights):
        try:
            label, path, features, *rest = row
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"a row is (label, image_path, Features[, box]), got {row!r}") from exc
        if len(rest) > 1:
            raise ConfigError(f"a row is (label, image_path, Features[, box]), got {len(row)} items")
        box = rest[0] if rest else None
        for m in METHODS:
            if m not in w:
                raise ConfigError(f"{label}: no {m!r} weights")
            if len(w[m]) != len(features):
                raise DimensionError(f"{label}: {len(w[m])} {m} weights for {len(features)} keypoints")
        out.append((str(label), path, features, box, w))
    return out


def ellipse_polygons(keypoints, scale=DEFAULT_ELLIPSE_SCALE, points=_ELLIPSE_POINTS):
    """(n, points, 2) outlines of the keypoints' ellipses (x, y) + scale * A u, |u| = 1,
    A = [[a11, 0], [a21, a22]] (see :mod:`streamk.features`), in image pixels."""
    kp = np.asarray(keypoints, dtype=np.float64).reshape(-1, 6)
    t = np.linspace(0.0, 2.0 * np.pi, points, endpoint=False)
    u = np.stack([np.cos(t), np.sin(t)])  # (2, points)
    dx = kp[:, 2:3] * u[0]
    dy = kp[:, 3:4] * u[0] + kp[:, 4:5] * u[1]
    return np.stack([kp[:, 0:1] + scale * dx, kp[:, 1:2] + scale * dy], axis=-1)


def colour_range(alpha, max_ratio=None):
    """(lo, hi): the relative weights the colour map spans, on a log scale.

    max_ratio given: [1/max_ratio, max_ratio], the same for every panel. None: this
    image's own 5th-95th percentiles of the positive relative weights, widened to at
    least [1/1.1, 1.1] (a uniformly weighted image is not blown up into a rainbow)
    and narrowed to at most [1/16, 16].
    """
    if max_ratio is not None:
        return 1.0 / max_ratio, float(max_ratio)
    r = relative_weights(alpha)
    r = r[r > 0]
    if r.size == 0:
        return 1.0 / _MIN_RANGE, _MIN_RANGE
    lo, hi = np.percentile(r, [5, 95])
    return float(np.clip(lo, 1.0 / _MAX_RANGE, 1.0 / _MIN_RANGE)), float(np.clip(hi, _MIN_RANGE, _MAX_RANGE))


def _colours(alpha, scale, lo, hi, cmap):
    """RGBA per keypoint: log(alpha / mean) from lo (coldest) to hi (warmest), clipped;
    negative weights in the colour map's "under" colour. scale "rank": by rank."""
    if scale == "rank":
        return cmap(weight_colours(alpha))
    r = relative_weights(alpha)
    pos = r > 0
    v = np.zeros(r.shape)
    v[pos] = np.clip((np.log(r[pos]) - math.log(lo)) / (math.log(hi) - math.log(lo)), 0.0, 1.0)
    rgba = cmap(v)
    rgba[~pos] = cmap.get_under()
    return rgba


def _ticks(lo, hi):
    """Colour-bar ticks: 1, the ends, and the powers of 2 between them (or midpoints)."""
    ticks = {lo, hi, 1.0} | {2.0 ** k for k in range(-4, 5) if lo * 1.15 < 2.0 ** k < hi / 1.15}
    if len(ticks) < 5:
        ticks |= {math.sqrt(lo), math.sqrt(hi)}
    return sorted(ticks)


def _grey_background(path, orient):
    img = open_image(path, max_side=IMAGE_MAX_SIDE, orient=orient).convert("L")
    g = np.asarray(img, dtype=np.float32) / 255.0
    return 0.25 + 0.6 * g  # faded: the coloured keypoints stand out


def weights_figure(rows, weights, scale="log", max_ratio=None,
                   ellipse_scale=DEFAULT_ELLIPSE_SCALE, panel_width=4.5, orient=True):
    """A matplotlib Figure: one row per image, democratic | GMP, keypoints coloured by weight.

    rows: [(label, image_path, Features[, box])]: the Features whose descriptors
        were weighed (already cropped to a query box if any; a 4th item ``box`` =
        (x1, y1, x2, y2) zooms the panels to it).
    weights: the matching {"democratic": alpha, "gmp": alpha} (see descriptor_weights).
    scale: "log": colour by log(alpha / mean(alpha)) over :func:`colour_range`
        (max_ratio None: each panel its own range, with its colour bar; a number:
        [1/max_ratio, max_ratio] for all panels), negative weights black;
        "rank": by rank within the image.
    ellipse_scale: the keypoint ellipses are drawn at this fraction of their size.
    orient: the images turned for their EXIF orientation, as an extractor of features
        version 3 (the default, every new index's) sees them; False: as stored.

    ImageReadError for an unreadable image file.
    """
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import LogNorm

    if scale not in ("log", "rank"):
        raise ConfigError(f"scale must be 'log' or 'rank', got {scale!r}")
    if max_ratio is not None and not max_ratio > 1:
        raise ConfigError(f"max_ratio must be > 1 (or None: each panel its own range), got {max_ratio}")
    items = _check_rows(rows, weights)
    backgrounds = [_grey_background(path, orient) for _, path, _, _, _ in items]
    cmap = colormaps[CMAP].with_extremes(under=UNDER_COLOUR)
    per_panel = scale == "log" and max_ratio is None

    heights = []
    for _, _, f, box, _ in items:
        (xa, xb), (ya, yb) = _view_limits(f, box)
        heights.append(panel_width * abs(ya - yb) / max(abs(xb - xa), 1.0))
    fig, axes = new_figure(len(items), 2, figsize=(2 * panel_width + 1.5, sum(heights) + 0.6 * len(items) + 0.3),
                           squeeze=False, gridspec_kw={"height_ratios": heights})
    fig.set_layout_engine("constrained")  # room for titles and colour bars, no gaps
    for (label, path, f, box, w), bg, ax_row in zip(items, backgrounds, axes):
        for m, ax in zip(METHODS, ax_row):
            alpha = np.asarray(w[m], dtype=np.float64)
            lo, hi = _draw_panel(ax, bg, f, box, alpha, f"{label}: {TITLES[m]}", scale, max_ratio, cmap,
                                 ellipse_scale, per_panel)
            if per_panel:
                _colour_bar(fig, ScalarMappable(norm=LogNorm(lo, hi), cmap=cmap), ax, per_panel,
                            extend="min" if bool((alpha < 0).any()) else "neither")
    _figure_legend(fig, axes, scale, max_ratio, cmap, per_panel)
    return fig


def _view_limits(f, box):
    """((x left, x right), (y bottom, y top)) of a panel: the whole image, or the box."""
    w, h = f.image_size
    if box is None:
        return (-0.5, w - 0.5), (h - 0.5, -0.5)
    x1, y1, x2, y2 = (float(v) for v in box)
    return (x1 - 0.5, x2 + 0.5), (y2 + 0.5, y1 - 0.5)


def _draw_panel(ax, background, f, box, alpha, title, scale, max_ratio, cmap, ellipse_scale, per_panel):
    """One panel: the image in grey, its keypoints' ellipses coloured by ``alpha``, the
    title with the keypoint count (and the colour range); returns the range (lo, hi)."""
    from matplotlib.collections import PolyCollection

    width, height = f.image_size
    ax.imshow(background, cmap="gray", vmin=0, vmax=1, extent=(-0.5, width - 0.5, height - 0.5, -0.5),
              interpolation="antialiased")
    lo, hi = colour_range(alpha, max_ratio) if scale == "log" else (0.0, 1.0)
    if len(f):
        rgba = _colours(alpha, scale, lo, hi, cmap)
        order = np.argsort(-f.scales, kind="stable")  # large first: small ones stay visible
        polys = ellipse_polygons(f.keypoints[order], ellipse_scale)
        edge = rgba[order]
        face = edge.copy()
        face[:, 3] = 0.2
        ax.add_collection(PolyCollection(polys, facecolors=face, edgecolors=edge, linewidths=0.9))
    xlim, ylim = _view_limits(f, box)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_xticks([])
    ax.set_yticks([])
    n = len(f)
    sub = f"{n} keypoint{'s' if n != 1 else ''}"
    if n and scale == "log":
        neg = int((alpha < 0).sum())
        sub += f"; 5-95%: {lo:.2g}-{hi:.2g} x mean" if per_panel else ""
        sub += f"; {neg} negative" if neg else ""
    ax.set_title(f"{title}\n{sub}", fontsize=9)
    return lo, hi


def _colour_bar(fig, mappable, ax, per_panel, extend="neither", label=None):
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    cb = fig.colorbar(mappable, ax=ax, extend=extend, fraction=0.05 if per_panel else 0.03, pad=0.01)
    cb.ax.tick_params(labelsize=7)
    if isinstance(mappable.norm, LogNorm):
        cb.ax.yaxis.set_major_locator(FixedLocator(_ticks(mappable.norm.vmin, mappable.norm.vmax)))
        cb.ax.yaxis.set_minor_locator(NullLocator())
        cb.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2g}"))
    if label:
        cb.set_label(label, fontsize=8)
    return cb


def _figure_legend(fig, axes, scale, max_ratio, cmap, per_panel):
    """What the colours mean: a caption under per-panel colour bars, else one colour bar
    for every panel."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import LogNorm, Normalize

    if per_panel:
        fig.supxlabel("colour: relative weight = weight / mean weight of the image, log scale, "
                      "each panel its own 5-95% range; warm = higher weight; black = negative (GMP)", fontsize=8)
    elif scale == "log":
        _colour_bar(fig, ScalarMappable(norm=LogNorm(1.0 / max_ratio, max_ratio), cmap=cmap), axes.ravel().tolist(),
                    per_panel, extend="min", label="relative weight = weight / mean weight of the image\n"
                                                   "warm = higher weight; black = negative (GMP)")
    else:
        _colour_bar(fig, ScalarMappable(norm=Normalize(0, 1), cmap=cmap), axes.ravel().tolist(), per_panel,
                    label="rank of the weight within the image (warm = higher weight)")


# ---------------------------------------------------------------- widget
class WeightsView(W.VBox):
    """Keypoints of one or more images coloured by their democratic and GMP weights.

    WeightsView(encoder, gamma=None, lam=None); ``show(rows)`` with rows =
    [(label, image_path, Features[, box])] weighs each row's descriptors (pass
    the Features already cropped to a query box) and redraws. Errors (an image
    without features, an unreadable file) appear in ``error`` and leave the
    previous figure.

    Attributes: ``weights`` (the last [{"democratic": alpha, "gmp": alpha}]),
    ``png`` (the last figure's PNG bytes), ``image`` (the ipywidgets.Image),
    ``error`` (the ErrorBox), ``redraws`` (how many figures were drawn).
    """

    def __init__(self, encoder, gamma=None, lam=None, scale="log", max_ratio=None,
                 ellipse_scale=DEFAULT_ELLIPSE_SCALE, orient=True, **kwargs):
        self.encoder = encoder
        self.orient = orient  # the images drawn as the features' extractor saw them (weights_figure)
        self._weigher = _weights_encoder(encoder, gamma, lam)
        self.scale, self.max_ratio, self.ellipse_scale = scale, max_ratio, ellipse_scale
        self.rows = []
        self.weights = []
        self.png = b""
        self.redraws = 0
        self.error = ErrorBox()
        self.caption = W.HTML(value=self._caption())
        self.image = W.Image(format="png", layout=W.Layout(max_width="100%", height="auto"))
        self.image.add_class("streamk-weights-figure")
        super().__init__([self.caption, self.error, self.image], **kwargs)
        self.add_class("streamk-weights")

    @property
    def gamma(self):
        return self._weigher.config.gamma

    @property
    def lam(self):
        return self._weigher.config.lam

    def _caption(self):
        return (f'<span style="font-size:90%">Descriptor weights: democratic (&gamma; = {self.gamma:g}) '
                f"and GMP (&lambda; = {self.lam:g}); warm = higher weight.</span>")

    def show(self, rows):
        """Weigh each row's descriptors and redraw; True if redrawn, False if an error is shown."""
        return guarded(self.error, self._show, rows) is True

    def set_params(self, gamma=None, lam=None):
        """Other gamma / lam (None: keep them), redrawing the current rows if any; True on
        success, False if an error is shown (the parameters and the figure are then unchanged)."""
        def run():
            weigher = _weights_encoder(self.encoder, self.gamma if gamma is None else gamma,
                                       self.lam if lam is None else lam)
            if self.rows:
                self._show(self.rows, weigher)
            self._weigher = weigher
            self.caption.value = self._caption()
            return True
        return guarded(self.error, run) is True

    def _show(self, rows, weigher=None):
        weigher = self._weigher if weigher is None else weigher
        rows = list(rows)
        weights = []
        for row in rows:
            try:
                label, path, features = row[0], row[1], row[2]
            except (TypeError, IndexError, KeyError) as exc:
                raise ConfigError(f"a row is (label, image_path, Features[, box]), got {row!r}") from exc
            if len(features) == 0:
                raise EmptyDescriptorSetError(f"{label} ({path}): no local features to weigh")
            weights.append(descriptor_weights(weigher, features.descriptors))
        fig = weights_figure(rows, weights, scale=self.scale, max_ratio=self.max_ratio,
                             ellipse_scale=self.ellipse_scale, orient=self.orient)
        png = figure_png(fig)
        # all computed: now replace the shown figure
        self.rows, self.weights, self.png = rows, weights, png
        self.image.value = png
        self.redraws += 1
        return True

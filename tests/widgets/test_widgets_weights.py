"""The weights view (streamk.widgets.weights): weights against a plain-numpy reference,
the burstiness property of the paper's figure of relative weights on real
Hessian-affine features, the figure's colours, and the widget's redraws and errors."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

from streamk import features as feat
from streamk.encoding.embeddings import rootsift
from streamk.errors import ConfigError, EmptyDescriptorSetError, ImageReadError
from streamk.widgets.weights import (WeightsView, colour_range, descriptor_weights,
                                     ellipse_polygons, relative_weights, weights_figure)

# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def example(small_example_dir):
    """The small demo example of conftest (astronaut, brick, camera; T-emb k=16), opened once."""
    from streamk.demo.examples import open_example

    ex = open_example(directory=small_example_dir, progress=False)
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def encoder(example):
    return example.index.encoder


@pytest.fixture(scope="module")
def extractor():
    return feat.make_extractor(None, max_side=640, max_features=1000)


def _grey(name):
    from skimage import data
    from skimage.color import rgb2gray

    img = getattr(data, name)()
    return (rgb2gray(img) * 255).astype(np.uint8) if img.ndim == 3 else img


def _window_motif(cell=40):
    """One facade 'window': a dark frame with four light panes on a light wall."""
    m = np.full((cell, cell), 200, np.uint8)
    m[6:34, 8:32] = 60
    for y0, x0 in ((10, 12), (10, 21), (22, 12), (22, 21)):
        m[y0:y0 + 9, x0:x0 + 7] = 160
    return m


def _half_and_half(left, right, H=384, W=768):
    out = np.empty((H, W), np.uint8)
    out[:, :W // 2] = left[:H, :W // 2]
    out[:, W // 2:] = right[:H, :W // 2]
    return out


def _facade(H=384, W=384, cell=40):
    return np.tile(_window_motif(cell), (H // cell + 1, W // cell + 1))[:H, :W]


def _save(gray, path):
    from PIL import Image

    Image.fromarray(gray).save(path)
    return str(path)


def _relative_means(features, weights, mask):
    out = {}
    for m, alpha in weights.items():
        r = alpha / alpha.mean()  # the relative weight, computed here by hand
        out[m] = (r[mask].mean(), r[~mask].mean())
    return out


# ---------------------------------------------------------------- plain-numpy reference
def _reference_weights(encoder, X, gamma, lam, n_iter=10):
    """Algorithm 1 (Sinkhorn on K+) and alpha = (K + lam I)^-1 1, in float64 numpy."""
    Phi = np.asarray(encoder.embedding.embed(rootsift(X)), dtype=np.float64)
    K = Phi @ Phi.T
    Kp = np.maximum(K, 0.0)
    a = np.ones(len(K))
    for _ in range(n_iter):
        sigma = a * (Kp @ a)  # diag(a) K+ diag(a) 1
        a = a / sigma ** gamma
    g = np.linalg.solve(K + lam * np.eye(len(K)), np.ones(len(K)))
    return a, g


def test_descriptor_weights_match_numpy_reference(encoder, example):
    path = example.dataset.query_image_path(0)
    X = example.index.extractor().extract(path).descriptors[:150]
    assert encoder.config.gamma == 0.5 and encoder.config.lam == 1.0
    for gamma, lam in ((None, None), (0.1, 0.25)):
        w = descriptor_weights(encoder, X, gamma=gamma, lam=lam)
        dem, gmp = _reference_weights(encoder, X, 0.5 if gamma is None else gamma, 1.0 if lam is None else lam)
        assert set(w) == {"democratic", "gmp"}
        assert w["democratic"].shape == w["gmp"].shape == (150,)
        # the scale of the democratic weights is the algorithm's, so compare them as they are
        np.testing.assert_allclose(w["democratic"], dem, rtol=2e-4)
        np.testing.assert_allclose(w["gmp"], gmp, rtol=1e-4, atol=1e-6 * np.abs(gmp).max())
    # the parameters do reach the solvers
    w5 = descriptor_weights(encoder, X)
    w1 = descriptor_weights(encoder, X, gamma=0.1, lam=0.25)
    assert not np.allclose(relative_weights(w5["democratic"]), relative_weights(w1["democratic"]), rtol=1e-2)
    assert not np.allclose(w5["gmp"], w1["gmp"], rtol=1e-2)
    # input order: permuting the descriptors permutes the weights
    perm = np.random.default_rng(0).permutation(150)
    wp = descriptor_weights(encoder, X[perm])
    np.testing.assert_allclose(wp["gmp"], w5["gmp"][perm], rtol=1e-4, atol=1e-8)


def test_descriptor_weights_empty_raises(encoder):
    with pytest.raises(EmptyDescriptorSetError):
        descriptor_weights(encoder, np.zeros((0, 128), np.uint8))


def test_relative_weights_by_hand():
    np.testing.assert_allclose(relative_weights([1.0, 2.0, 3.0]), [0.5, 1.0, 1.5])
    np.testing.assert_allclose(relative_weights([-1.0, 5.0]), [-0.5, 2.5])  # GMP: negative kept
    np.testing.assert_allclose(relative_weights([-1.0, -3.0]), [-0.5, -1.5])  # mean < 0: by mean |alpha|


def test_ellipse_polygons_follow_the_affine_frame():
    # A = [[a11, 0], [a21, a22]]: (x, y) + A (cos t, sin t); at t = 0: (x + a11, y + a21)
    kp = np.array([[10.0, 20.0, 3.0, 1.0, 2.0, 0.0]])
    poly = ellipse_polygons(kp, scale=1.0, points=4)  # t = 0, pi/2, pi, 3pi/2
    np.testing.assert_allclose(poly[0], [[13, 21], [10, 22], [7, 19], [10, 18]], atol=1e-12)
    np.testing.assert_allclose(ellipse_polygons(kp, scale=0.5, points=4)[0, 0], [11.5, 20.5])


# ---------------------------------------------------------------- burstiness (the paper's figure)
def test_repeated_windows_get_low_weight(encoder, extractor):
    """A facade of identical windows beside a natural photo: the windows' descriptors
    are bursty (many near-copies in the image) and get a low relative weight from
    both methods, as the paper's figure of relative weights shows for facades."""
    natural = _grey("coffee")  # not among the encoder's learning photos
    img = _half_and_half(natural, _facade())
    f = extractor.extract_array(img)
    repeated = f.positions[:, 0] >= img.shape[1] / 2
    assert repeated.sum() >= 50 and (~repeated).sum() >= 50
    w = descriptor_weights(encoder, f.descriptors)
    means = _relative_means(f, w, repeated)
    # measured: democratic 0.67 (repeated) vs 2.77 (natural), GMP 0.24 vs 5.1
    dem_rep, dem_nat = means["democratic"]
    gmp_rep, gmp_nat = means["gmp"]
    assert dem_rep < 0.5 * dem_nat, means
    assert gmp_rep < 0.5 * gmp_nat, means
    assert dem_rep < 1 < dem_nat and gmp_rep < 1 < gmp_nat  # below / above the image's average
    # democratic weights stay positive (Sinkhorn on K+); GMP gives some repeated ones negative weight
    assert (w["democratic"] > 0).all()
    assert (w["gmp"][repeated] < 0).any()


def test_two_natural_halves_are_weighed_alike(encoder, extractor):
    """The control: with two natural photos side by side neither half is bursty, and the
    mean relative weights of the halves are close (so the test above measures repetition,
    not a left/right or photo effect)."""
    img = _half_and_half(_grey("coffee"), _grey("chelsea")[:, 75:], H=288, W=600)
    f = extractor.extract_array(img)
    right = f.positions[:, 0] >= img.shape[1] / 2
    assert right.sum() >= 50 and (~right).sum() >= 50
    means = _relative_means(f, descriptor_weights(encoder, f.descriptors), right)
    for m, (a, b) in means.items():  # measured: democratic 1.00 / 1.00, GMP 1.02 / 0.94
        assert 0.67 < a / b < 1.5, (m, means)


def test_paris_photos_bursty_descriptors_get_low_weight(encoder, extractor, paris6k_subset_photos):
    """Real facades: a descriptor's burstiness, counted in plain numpy as the number of
    other descriptors of its image within RootSIFT distance 0.5, is rank-anticorrelated
    with its weight (Spearman), for both methods; the democratic weights more strongly.
    Measured on these 5: democratic -0.46 .. -0.71, GMP -0.27 .. -0.49 (12 random photos:
    democratic -0.32 .. -0.87, GMP -0.26 .. -0.65)."""
    from scipy.stats import spearmanr

    paths = paris6k_subset_photos
    rho = {"democratic": [], "gmp": []}
    for p in paths[::50]:  # 5 photos spread over the landmarks
        f = extractor.extract(p)
        X = rootsift(f.descriptors).astype(np.float64)
        d2 = (X * X).sum(1)[:, None] + (X * X).sum(1)[None, :] - 2 * X @ X.T
        burst = (d2 < 0.5 ** 2).sum(1) - 1
        w = descriptor_weights(encoder, f.descriptors)
        for m, values in rho.items():
            values.append(spearmanr(burst, w[m])[0])
    assert max(rho["democratic"]) < -0.2 and np.median(rho["democratic"]) < -0.35, rho
    assert max(rho["gmp"]) < -0.1 and np.median(rho["gmp"]) < -0.2, rho
    assert np.median(rho["democratic"]) < np.median(rho["gmp"]), rho


# ---------------------------------------------------------------- the figure
def _synthetic_row(tmp_path, n=5):
    img = np.full((60, 80), 128, np.uint8)
    path = _save(img, tmp_path / "flat.png")
    kp = np.zeros((n, 6), np.float32)
    kp[:, 0] = np.linspace(10, 70, n)
    kp[:, 1] = 30
    kp[:, 2] = kp[:, 4] = 4
    f = feat.Features(kp, np.zeros((n, 128), np.uint8), (80, 60))
    return ("flat", path, f)


def _drawn_colours(ax):
    """The edge colours of a panel's ellipses, in keypoint order (the synthetic
    keypoints are at increasing x; the figure draws them in its own order)."""
    from matplotlib.collections import PolyCollection

    (coll,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    centres = np.array([p.vertices[:-1].mean(0)[0] for p in coll.get_paths()])
    return coll.get_edgecolors()[np.argsort(centres)]


def test_colour_range_by_hand():
    assert colour_range(np.ones(10), max_ratio=4) == (0.25, 4.0)
    lo, hi = colour_range(np.ones(10))  # uniform weights: the narrowest range, not a rainbow
    assert (lo, hi) == pytest.approx((1 / 1.1, 1.1))
    alpha = 3.0 * np.exp(np.linspace(-1.0, 1.0, 101))
    r = alpha / alpha.mean()
    assert colour_range(alpha) == pytest.approx(tuple(np.percentile(r, [5, 95])))
    assert colour_range(np.r_[np.full(94, 1e-6), np.ones(6)]) == pytest.approx((1 / 16, 16))  # r: 1.7e-5, 16.7
    # GMP: only the positive weights set the low end; negatives are drawn black
    alpha = np.array([-1.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0])  # mean 9.5 / 7
    positive = alpha[1:] / (9.5 / 7)
    assert colour_range(alpha) == pytest.approx(tuple(np.percentile(positive, [5, 95])))


def test_figure_default_colours_span_each_panels_range(tmp_path):
    from matplotlib import colormaps

    row = _synthetic_row(tmp_path)
    dem = np.array([1.0, 1.2, 1.4, 1.6, 1.8])  # narrower spread
    gmp = np.array([0.1, 1.0, 3.0, 9.0, -2.0])  # wide, one negative
    fig = weights_figure([row], [{"democratic": dem, "gmp": gmp}])
    turbo = colormaps["turbo"]
    assert len(fig.axes) == 4  # two panels, each with its colour bar
    d, g = _drawn_colours(fig.axes[0]), _drawn_colours(fig.axes[1])
    # each panel spans the whole colour map: its lowest weight coldest, its highest warmest
    np.testing.assert_allclose(d[0], turbo(0.0), atol=1e-6)
    np.testing.assert_allclose(d[-1], turbo(1.0), atol=1e-6)
    np.testing.assert_allclose(g[0], turbo(0.0), atol=1e-6)
    np.testing.assert_allclose(g[3], turbo(1.0), atol=1e-6)
    np.testing.assert_allclose(g[4], [0, 0, 0, 1])
    # the middle democratic weight sits where its relative weight falls in the log range
    lo, hi = colour_range(dem)
    r = dem[2] / dem.mean()
    np.testing.assert_allclose(d[2], turbo((np.log(r) - np.log(lo)) / (np.log(hi) - np.log(lo))), atol=1e-6)


def test_figure_colours_are_relative_weights_on_a_log_scale(tmp_path):
    from matplotlib import colormaps

    row = _synthetic_row(tmp_path)
    dem = np.array([1.0, 2.0, 0.5, 4.0, 0.5]) * 0.3  # relative: / mean(dem) = 0.48
    gmp = np.array([2.0, -1.0, 1.0, 2.0, 1.0])  # mean 1: relative weights as they are
    fig = weights_figure([row], [{"democratic": dem, "gmp": gmp}], max_ratio=4.0)
    turbo = colormaps["turbo"]
    dem_ax, gmp_ax = fig.axes[0], fig.axes[1]
    assert "democratic" in dem_ax.get_title() and "GMP" in gmp_ax.get_title() and "flat" in dem_ax.get_title()

    drawn = _drawn_colours
    assert len(fig.axes) == 3  # one colour bar for all panels
    def expect(r):
        return turbo((np.log2(np.clip(r, 0.25, 4)) + 2) / 4)

    r = dem / dem.mean()
    np.testing.assert_allclose(drawn(dem_ax), expect(r), atol=1e-6)
    got = drawn(gmp_ax)
    np.testing.assert_allclose(got[[0, 2, 3, 4]], expect(np.array([2.0, 1.0, 2.0, 1.0])), atol=1e-6)
    np.testing.assert_allclose(got[1], [0, 0, 0, 1])  # negative: black, under the colour map
    # warm = high: the largest democratic weight is the reddest
    assert drawn(dem_ax)[3][0] > drawn(dem_ax)[2][0]


def test_figure_checks_its_input(tmp_path):
    row = _synthetic_row(tmp_path)
    ok = {"democratic": np.ones(5), "gmp": np.ones(5)}
    with pytest.raises(ConfigError):
        weights_figure([row], [ok, ok])
    with pytest.raises(ConfigError):
        weights_figure([row], [{"democratic": np.ones(5)}])
    with pytest.raises(ValueError):
        weights_figure([row], [{"democratic": np.ones(4), "gmp": np.ones(4)}])
    with pytest.raises(ImageReadError):
        weights_figure([("missing", str(tmp_path / "nope.jpg"), row[2])], [ok])
    # rank scale: the colours of 5 distinct weights are 5 evenly spaced ranks
    fig = weights_figure([row], [ok | {"democratic": np.array([3.0, 1, 2, 5, 4])}], scale="rank")
    assert fig.axes[0].get_title()


# ---------------------------------------------------------------- the widget
@pytest.fixture(scope="module")
def photos(example, tmp_path_factory):
    """Two database photos of the example with their features, a corrupt file and a flat image."""
    root = tmp_path_factory.mktemp("weights-files")
    ids = sorted(example.index.ids())
    ext = example.index.extractor()
    a = example.index.info(ids[0])["source"]
    b = example.index.info(ids[-1])["source"]
    bad = root / "corrupt.jpg"
    bad.write_bytes(b"\xff\xd8 this is not a jpeg")
    flat = _save(np.full((120, 160), 128, np.uint8), root / "flat.png")
    return {"a": (a, ext.extract(a)), "b": (b, ext.extract(b)), "bad": str(bad),
            "flat": (flat, ext.extract(flat))}


def test_view_redraws_with_other_rows(encoder, photos):
    import ipywidgets as W

    view = WeightsView(encoder)
    assert isinstance(view, W.VBox) and "streamk-weights" in view._dom_classes
    assert isinstance(view.image, W.Image) and "streamk-weights-figure" in view.image._dom_classes
    assert view.redraws == 0 and view.png == b""
    (pa, fa), (pb, fb) = photos["a"], photos["b"]
    assert view.show([("query", pa, fa)]) is True
    assert view.redraws == 1 and view.error.last is None
    assert view.png[:8] == b"\x89PNG\r\n\x1a\n" and bytes(view.image.value) == view.png
    first = view.png
    np.testing.assert_allclose(view.weights[0]["gmp"], descriptor_weights(encoder, fa.descriptors)["gmp"])
    assert view.show([("query", pa, fa), ("result", pb, fb)]) is True
    assert view.redraws == 2 and view.png != first and bytes(view.image.value) == view.png
    assert len(view.weights) == 2 and len(view.weights[1]["democratic"]) == len(fb)
    # a cropped query: the caller passes the features inside the box
    w, h = fa.image_size
    box = (0, 0, w / 2, h / 2)
    crop = feat.crop_to_box(fa, box)
    assert 0 < len(crop) < len(fa)
    assert view.show([("query (box)", pa, crop, box)]) is True
    assert view.redraws == 3 and len(view.weights[0]["gmp"]) == len(crop)


def test_view_errors_keep_the_previous_figure(encoder, photos):
    view = WeightsView(encoder)
    (pa, fa), (pb, fb) = photos["a"], photos["b"]
    assert view.show([("query", pa, fa)])
    png, weights = view.png, view.weights
    flat_path, flat_f = photos["flat"]
    assert len(flat_f) == 0  # a uniform grey image has no features
    cases = [([("flat", flat_path, flat_f)], EmptyDescriptorSetError, "no local features"),
             ([("query", pa, fa), ("corrupt", photos["bad"], fb)], ImageReadError, "corrupt"),
             ([("gone", str(Path(photos["bad"]).with_name("missing.jpg")), fb)], ImageReadError, "missing")]
    for rows, error, text in cases:
        assert view.show(rows) is False
        assert isinstance(view.error.last, error), view.error.text
        assert text in view.error.text and view.error.layout.display != "none"
        assert view.redraws == 1 and view.png == png and bytes(view.image.value) == png
        assert view.weights is weights
    assert view.show([("result", pb, fb)]) is True  # the next success clears the error
    assert view.error.last is None and view.error.layout.display == "none" and view.redraws == 2


def test_view_parameters(encoder, photos):
    (pa, fa) = photos["a"]
    view = WeightsView(encoder, gamma=0.3, lam=0.25)
    assert (view.gamma, view.lam) == (0.3, 0.25)
    assert view.show([("query", pa, fa)])
    ref = descriptor_weights(encoder, fa.descriptors, gamma=0.3, lam=0.25)
    np.testing.assert_allclose(view.weights[0]["democratic"], ref["democratic"])
    assert view.set_params(gamma=0.5, lam=1.0) is True
    assert view.redraws == 2 and "0.5" in view.caption.value
    np.testing.assert_allclose(view.weights[0]["gmp"], descriptor_weights(encoder, fa.descriptors)["gmp"])
    assert view.set_params(gamma=2.0) is False  # gamma must be in (0, 1]
    assert isinstance(view.error.last, ConfigError) and view.gamma == 0.5 and view.redraws == 2

# The notebook (notebooks/weights.ipynb) runs headless in tests/test_notebooks.py.


def test_parameters_that_are_not_numbers_are_named(encoder):
    """WeightsView(encoder, gamma="x") raised Python's bare "could not convert string to float"."""
    from streamk.errors import ConfigError
    from streamk.widgets import WeightsView

    for kw in ({"gamma": "x"}, {"lam": [1]}):
        with pytest.raises(ConfigError, match=f"{next(iter(kw))} must be a number"):
            WeightsView(encoder, **kw)
    with pytest.raises(ConfigError, match="gamma must be in"):
        WeightsView(encoder, gamma=2.0)  # a number out of range: the encoder's own check

"""Local features: both detectors on synthetic images made here, keypoints in original
coordinates under downscaling, the cap, the box crop, the cache, the named errors
for bad files, the no-feature case, and extraction of many images in processes."""

import io
import json
import os
import struct

import numpy as np
import pytest

pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

from helpers.images import blobs  # noqa: E402
from streamk import features as F  # noqa: E402
from streamk.features import cache as feature_cache  # noqa: E402
from streamk.pipeline import extract_many, iter_extract  # noqa: E402
from streamk.errors import (ConfigError, DescriptorFileError, DimensionError,  # noqa: E402
                            ImageReadError, StreamkError)

AVAILABLE = F.available_extractors()
needs_hesaff = pytest.mark.skipif("hesaff" not in AVAILABLE, reason="pyhesaff not installed")
needs_sift = pytest.mark.skipif("sift" not in AVAILABLE, reason="opencv-python-headless not installed")
EXTRACTORS = [pytest.param("hesaff", marks=needs_hesaff), pytest.param("sift", marks=needs_sift)]


def textured(w=320, h=240, seed=0, n_blobs=60):
    """Grey image with dark and bright Gaussian blobs of several sizes and a checkerboard patch."""
    return blobs(w, h, seed, n_blobs)


def jpeg_bytes(arr, quality=92, **kw):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=quality, **kw)
    return buf.getvalue()


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("images")
    paths = {}
    for i, seed in enumerate((0, 1, 2)):
        p = d / f"textured{i}.png"
        Image.fromarray(textured(seed=seed)).save(p)
        paths[f"textured{i}"] = p
    p = d / "textured.jpg"
    p.write_bytes(jpeg_bytes(textured(seed=3)))
    paths["jpg"] = p
    p = d / "flat.png"
    Image.fromarray(np.full((150, 200), 128, np.uint8)).save(p)
    paths["flat"] = p
    return paths


@pytest.fixture(scope="module")
def gray():
    return textured()


# --------------------------------------------------------------------------- detection
@pytest.mark.parametrize("name", EXTRACTORS)
def test_detectors_find_features_on_a_textured_image(name, gray):
    f = F.make_extractor(name).extract_array(gray)
    h, w = gray.shape
    assert f.image_size == (w, h)
    assert len(f) >= 50
    assert f.keypoints.shape == (len(f), 6) and f.keypoints.dtype == np.float32
    assert f.descriptors.shape == (len(f), 128) and f.descriptors.dtype == np.uint8
    assert np.isfinite(f.keypoints).all()
    x, y = f.positions.T
    assert (x >= 0).all() and (x <= w - 1).all() and (y >= 0).all() and (y <= h - 1).all()
    assert (f.keypoints[:, 2] > 0).all() and (f.keypoints[:, 4] > 0).all()
    assert (f.descriptors.sum(axis=1) > 0).all()  # raw SIFT, not all-zero


@pytest.mark.parametrize("name", EXTRACTORS)
def test_output_is_deterministic(name, gray):
    a = F.make_extractor(name).extract_array(gray)
    b = F.make_extractor(name).extract_array(gray)
    assert np.array_equal(a.keypoints, b.keypoints)
    assert np.array_equal(a.descriptors, b.descriptors)


@needs_hesaff
def test_hesaff_keypoints_and_descriptors_are_pyhesaffs(gray):
    """Same set of features as calling pyhesaff directly (only the order may differ)."""
    import pyhesaff

    kp, desc = pyhesaff.detect_feats_in_image(gray)
    f = F.make_extractor("hesaff").extract_array(gray)
    assert len(f) == len(kp)
    ours = sorted(map(tuple, np.hstack([f.keypoints, f.descriptors]).tolist()))
    theirs = sorted(map(tuple, np.hstack([kp, desc]).tolist()))
    assert ours == theirs


@needs_sift
def test_sift_cap_keeps_the_strongest_responses(gray):
    """Independent reference: OpenCV's own keypoints sorted by response."""
    import cv2

    kps = cv2.SIFT_create().detect(gray, None)
    resp = np.array(sorted((k.response for k in kps), reverse=True))
    # a cap where the response strictly drops, so the kept set is unambiguous
    k = next(i for i in range(40, len(resp)) if resp[i - 1] > resp[i])
    threshold = resp[k - 1]
    strong = {(round(p.pt[0], 3), round(p.pt[1], 3)) for p in kps if p.response >= threshold}
    f = F.make_extractor("sift", max_features=k).extract_array(gray)
    assert len(f) == k
    assert {(round(float(x), 3), round(float(y), 3)) for x, y in f.positions} == strong


@needs_sift
def test_sift_keypoints_are_opencvs_own_fields(gray):
    """Independent reference: each of OpenCV's KeyPoints read field by field, in the
    convention of streamk.features.local_features (x, y, a11 = a22 = size / 2, a21 = 0,
    theta = the angle in radians), against the rows streamk returns, in any order."""
    import cv2

    kps = cv2.SIFT_create().detect(gray, None)
    ref = np.array([(k.pt[0], k.pt[1], k.size / 2, 0.0, k.size / 2, np.deg2rad(k.angle) if k.angle >= 0 else 0.0)
                    for k in kps], np.float32)
    f = F.make_extractor("sift", max_side=None, max_features=None).extract_array(gray)
    assert len(f) == len(kps) > 20

    def rows(a):
        return a[np.lexsort(a.T[::-1])]

    assert np.array_equal(rows(f.keypoints), rows(ref))


@pytest.mark.parametrize("name", EXTRACTORS)
def test_cap_is_the_strongest_prefix(name, gray):
    full = F.make_extractor(name).extract_array(gray)
    cap = len(full) // 3
    capped = F.make_extractor(name, max_features=cap).extract_array(gray)
    assert len(capped) == cap
    assert np.array_equal(capped.keypoints, full.keypoints[:cap])
    assert np.array_equal(capped.descriptors, full.descriptors[:cap])
    if name == "hesaff":  # strongest = largest scale, documented
        assert capped.scales.min() >= full.scales[cap:].max()
        assert np.all(np.diff(full.scales) <= 1e-5)
    big = F.make_extractor(name, max_features=10 * len(full)).extract_array(gray)
    assert len(big) == len(full)


# --------------------------------------------------------------------------- downscaling
class FixedDetector(F.Extractor):
    """Reports one keypoint at a fixed place of the image it is given, and that image's shape."""

    name = "fixed"

    def versions(self):
        return {}

    def _detect(self, gray):
        self.seen_shape = gray.shape
        kp = np.array([[10.0, 5.0, 2.0, 1.0, 3.0, 0.25]], np.float32)
        return kp, np.full((1, 128), 7, np.uint8), np.ones(1)


def test_max_side_maps_keypoints_to_original_pixels_by_hand():
    ex = FixedDetector(max_side=100)
    f = ex.extract_array(np.zeros((200, 400), np.uint8))
    assert ex.seen_shape == (50, 100)  # long side 400 -> 100: factor 4 on both axes
    # pixel centres at integers: x_orig = (x + 0.5) * 4 - 0.5; A <- 4 A
    assert f.keypoints[0].tolist() == pytest.approx([41.5, 21.5, 8.0, 4.0, 12.0, 0.25])
    assert f.image_size == (400, 200)
    ex = FixedDetector(max_side=500)  # never upscales
    f = ex.extract_array(np.zeros((200, 400), np.uint8))
    assert ex.seen_shape == (200, 400)
    assert f.keypoints[0].tolist() == pytest.approx([10, 5, 2, 1, 3, 0.25])


@pytest.mark.parametrize("name", EXTRACTORS)
def test_max_side_on_an_upscaled_copy_finds_the_same_features_in_its_coordinates(name, gray):
    from scipy.spatial import cKDTree

    h, w = gray.shape
    up = np.asarray(Image.fromarray(gray).resize((2 * w, 2 * h), Image.Resampling.BICUBIC))
    a = F.make_extractor(name).extract_array(gray)
    b = F.make_extractor(name, max_side=w).extract_array(up)
    assert b.image_size == (2 * w, 2 * h)
    expected = (a.positions + 0.5) * 2 - 0.5  # a's centres in the upscaled image's pixels
    dist, j = cKDTree(b.positions).query(expected)
    matched = dist < 2.0
    assert matched.mean() > 0.7
    assert np.median(dist) < 0.25  # a half-pixel convention error would show here
    assert np.median(b.scales[j[matched]] / a.scales[matched]) == pytest.approx(2.0, rel=0.05)
    assert b.positions[:, 0].max() > w and b.positions[:, 1].max() > h  # not left in the small image


# --------------------------------------------------------------------------- box crop
def test_crop_to_box_by_hand():
    xy = [(10, 10), (50, 50), (100, 20), (50, 100), (30, 40), (20, 60), (101, 30)]
    kp = np.array([[x, y, 1, 0, 1, 0] for x, y in xy], np.float32)
    desc = np.arange(len(xy), dtype=np.uint8)[:, None].repeat(128, axis=1)
    f = F.Features(kp, desc, (200, 200))
    got = F.crop_to_box(f, (20, 10, 100, 60))  # edges included
    # (10,10): x < 20 out; (50,50) in; (100,20) on the right edge, in; (50,100) y > 60 out;
    # (30,40) in; (20,60) on the corner, in; (101,30) x > 100 out
    assert got.descriptors[:, 0].tolist() == [1, 2, 4, 5]
    assert got.positions.tolist() == [[50, 50], [100, 20], [30, 40], [20, 60]]
    assert got.image_size == (200, 200)
    none = F.crop_to_box(f, (150, 150, 160, 160))
    assert none.keypoints.shape == (0, 6) and none.descriptors.shape == (0, 128)
    assert len(F.crop_to_box(f, np.array([0.0, 0.0, 199.0, 199.0]))) == len(xy)


@pytest.mark.parametrize("box", [(10, 10, 5, 20), (0, 0, 1), (0, 0, np.nan, 3), "abcd", None])
def test_crop_to_box_rejects_bad_boxes(box):
    f = F.Features.empty((10, 10))
    with pytest.raises(ConfigError):
        F.crop_to_box(f, box)


# --------------------------------------------------------------------------- no features
@pytest.mark.parametrize("name", EXTRACTORS)
@pytest.mark.parametrize("shape", [(150, 200), (8, 8), (1, 1)])
def test_flat_or_tiny_image_gives_an_empty_set(name, shape):
    f = F.make_extractor(name).extract_array(np.full(shape, 128, np.uint8))
    assert f.keypoints.shape == (0, 6) and f.keypoints.dtype == np.float32
    assert f.descriptors.shape == (0, 128) and f.descriptors.dtype == np.uint8
    assert f.image_size == (shape[1], shape[0])


@pytest.mark.parametrize("name", EXTRACTORS)
def test_flat_image_file_gives_an_empty_set(name, images):
    f = F.extract(images["flat"], F.make_extractor(name))
    assert len(f) == 0 and f.descriptors.shape == (0, 128) and f.image_size == (200, 150)


# --------------------------------------------------------------------------- image reading
def test_load_gray_luma_16_bit_and_alpha(tmp_path):
    Image.fromarray(np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255]]], np.uint8)).save(tmp_path / "rgb.png")
    # ITU-R 601-2: L = (299 R + 587 G + 114 B) / 1000
    assert F.load_gray(tmp_path / "rgb.png").tolist() == [[76, 150, 29]]
    Image.fromarray(np.array([[0, 25700, 65535]], np.uint16)).save(tmp_path / "a16.png")
    assert F.load_gray(tmp_path / "a16.png").tolist() == [[0, 100, 255]]  # / 257
    rgba = np.array([[[255, 0, 0, 0], [0, 255, 0, 255]]], np.uint8)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "rgba.png")
    assert F.load_gray(tmp_path / "rgba.png").tolist() == [[76, 150]]  # alpha ignored


def test_exif_orientation_is_ignored(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    Image.fromarray(textured(300, 200)).save(tmp_path / "rot.jpg", exif=exif.tobytes())
    assert Image.open(tmp_path / "rot.jpg").getexif().get(0x0112) == 6
    g = F.load_gray(tmp_path / "rot.jpg")
    assert g.shape == (200, 300)  # raw pixel grid, as Oxford/Paris boxes expect


def _bad_files(tmp_path):
    good = jpeg_bytes(textured())
    (tmp_path / "corrupt.jpg").write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 5000, np.uint8)))
    (tmp_path / "empty.jpg").write_bytes(b"")
    (tmp_path / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (tmp_path / "text.jpg").write_text("this is not a picture\n")
    (tmp_path / "garbage_body.jpg").write_bytes(good[:600] + b"\x00" * 50 + bytes(range(256)) * 4)
    (tmp_path / "folder.jpg").mkdir()
    return {
        "corrupt.jpg": "not a recognised image format",
        "empty.jpg": "empty file",
        "truncated.jpg": "truncated",
        "text.jpg": "not a recognised image format",
        "garbage_body.jpg": "",
        "folder.jpg": "is a directory",
        "missing.jpg": "no such file",
    }


def test_bad_files_raise_image_read_error(tmp_path):
    for name, reason in _bad_files(tmp_path).items():
        path = tmp_path / name
        with pytest.raises(ImageReadError) as info:
            F.load_gray(path)
        err = info.value
        assert isinstance(err, StreamkError) and isinstance(err, ValueError)
        assert err.path == str(path) and err.reason
        assert reason in err.reason, (name, err.reason)
        assert str(path) in str(err)


@pytest.mark.parametrize("name", EXTRACTORS)
def test_extract_raises_image_read_error_and_leaves_no_cache_entry(name, tmp_path):
    bad = _bad_files(tmp_path)
    cache = F.FeatureCache(tmp_path / "cache")
    for fname in bad:
        with pytest.raises(ImageReadError):
            F.extract(tmp_path / fname, F.make_extractor(name), cache=cache)
    assert not list((tmp_path / "cache").rglob("*.npz"))


def test_mutated_image_bytes_decode_or_raise_image_read_error(tmp_path):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    seeds = {"jpg": jpeg_bytes(textured(64, 48)), "png": None}
    buf = io.BytesIO()
    Image.fromarray(textured(64, 48)).save(buf, "PNG")
    seeds["png"] = buf.getvalue()

    @hypothesis.settings(max_examples=120, deadline=None, database=None)
    @hypothesis.given(kind=st.sampled_from(sorted(seeds)), cut=st.integers(0, 10 ** 6),
                      edits=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)), max_size=8))
    def check(kind, cut, edits):
        data = bytearray(seeds[kind])
        for pos, val in edits:
            data[pos % len(data)] = val
        data = bytes(data[: max(1, cut % (len(data) + 1))])
        path = tmp_path / f"fuzz.{kind}"
        path.write_bytes(data)
        try:
            g = F.load_gray(path)
        except ImageReadError:
            return
        assert g.dtype == np.uint8 and g.ndim == 2

    check()


# --------------------------------------------------------------------------- cache
class CountingSift(F.OpenCVSift):
    calls = 0

    def _detect(self, gray):
        type(self).calls += 1
        return super()._detect(gray)


@needs_sift
def test_cache_computes_once_and_misses_on_changed_parameters_or_content(tmp_path, images):
    CountingSift.calls = 0
    cache = F.FeatureCache(tmp_path / "cache")
    ex = CountingSift()
    a = F.extract(images["textured0"], ex, cache=cache)
    assert (CountingSift.calls, cache.hits, cache.misses) == (1, 0, 1)
    b = F.extract(images["textured0"], CountingSift(), cache=cache)
    assert (CountingSift.calls, cache.hits) == (1, 1)
    assert np.array_equal(a.keypoints, b.keypoints) and np.array_equal(a.descriptors, b.descriptors)
    assert a.image_size == b.image_size
    # same bytes under another name: keyed by content
    copy = tmp_path / "copy_of_textured0.png"
    copy.write_bytes(images["textured0"].read_bytes())
    F.extract(copy, ex, cache=cache)
    assert (CountingSift.calls, cache.hits) == (1, 2)
    # a changed parameter misses
    F.extract(images["textured0"], CountingSift(max_features=10), cache=cache)
    F.extract(images["textured0"], CountingSift(contrast_threshold=0.05), cache=cache)
    assert CountingSift.calls == 3
    # changed content misses
    copy.write_bytes(images["textured1"].read_bytes())
    F.extract(copy, ex, cache=cache)
    assert CountingSift.calls == 4
    # a cache directory given as a path works the same (a new FeatureCache on the same folder)
    F.extract(images["textured0"], ex, cache=tmp_path / "cache")
    assert CountingSift.calls == 4


@needs_sift
def test_cache_entries_are_plain_npz_and_corrupt_entries_are_recomputed(tmp_path, images):
    import hashlib

    CountingSift.calls = 0
    cache = F.FeatureCache(tmp_path / "cache")
    ex = CountingSift()
    a = F.extract(images["textured0"], ex, cache=cache)
    sha = hashlib.sha256(images["textured0"].read_bytes()).hexdigest()
    entry = cache.entry_path(sha, ex)
    assert entry.name == f"{sha}.npz" and entry.exists()
    with np.load(entry, allow_pickle=False) as npz:  # no pickle needed to read it
        assert np.array_equal(npz["descriptors"], a.descriptors)
        assert json.loads(str(npz["meta"]))["sha256"] == sha
    params = json.loads((entry.parent.parent / "params.json").read_text())
    assert params["extractor"] == "sift" and "opencv" in params["versions"]
    assert not [p for p in entry.parent.iterdir() if p.suffix == ".tmp"]
    entry.write_bytes(b"garbage")
    b = F.extract(images["textured0"], ex, cache=cache)
    assert CountingSift.calls == 2 and np.array_equal(a.descriptors, b.descriptors)
    c = F.extract(images["textured0"], ex, cache=cache)  # rewritten entry is good again
    assert CountingSift.calls == 2 and np.array_equal(a.descriptors, c.descriptors)


# --------------------------------------------------------------------------- many images
@pytest.mark.parametrize("name", EXTRACTORS)
def test_extract_many_reports_the_bad_file_and_returns_the_rest(name, tmp_path, images):
    bad = tmp_path / "bad.jpg"
    bad.write_text("not an image")
    paths = [images["textured0"], bad, images["jpg"], str(images["textured1"])]
    ex = F.make_extractor(name)
    feats, errors = extract_many(paths, ex, cache_dir=tmp_path / "cache", workers=2, progress=False)
    assert list(feats) == [paths[0], paths[2], paths[3]]  # input order, keys as given
    assert list(errors) == [bad] and "not a recognised image format" in errors[bad]
    for p in feats:  # same as in this process: deterministic across processes
        ref = ex.extract(p)
        assert np.array_equal(feats[p].keypoints, ref.keypoints)
        assert np.array_equal(feats[p].descriptors, ref.descriptors)
    # second run: every good image comes from the cache, the bad one is reported again
    results = list(iter_extract(paths, ex, cache_dir=tmp_path / "cache", workers=2))
    assert sorted((str(r.path), r.cached, r.error is None) for r in results) == sorted(
        [(str(paths[0]), True, True), (str(bad), False, False), (str(paths[2]), True, True),
         (str(paths[3]), True, True)])


@needs_sift
def test_extract_many_in_process_and_duplicates(images):
    p = images["textured0"]
    feats, errors = extract_many([p, p, images["flat"]], F.make_extractor("sift"), workers=1,
                                   progress=False)
    assert list(feats) == [p, images["flat"]] and not errors
    assert len(feats[images["flat"]]) == 0


class CrashingSift(F.OpenCVSift):
    """Kills its process on images 100 pixels wide, like a segfault in a C++ detector would."""

    def _detect(self, gray):
        if gray.shape[1] == 100:
            os._exit(3)
        return super()._detect(gray)


@needs_sift
def test_a_crashing_image_is_isolated_and_reported(tmp_path, images):
    crash = tmp_path / "crash.png"
    Image.fromarray(textured(100, 80)).save(crash)
    paths = [images["textured0"], crash, images["textured1"]]
    feats, errors = extract_many(paths, CrashingSift(), workers=2, progress=False)
    assert list(errors) == [crash] and errors[crash].startswith("WorkerCrashed")
    assert list(feats) == [paths[0], paths[2]] and all(len(f) > 0 for f in feats.values())


# --------------------------------------------------------------------------- factory, params, types
def test_make_extractor_validates_names_and_options():
    with pytest.raises(ConfigError):
        F.make_extractor("surf")
    with pytest.raises(ConfigError):
        FixedDetector(max_side=3)  # below the minimum side
    with pytest.raises(ConfigError):
        FixedDetector(max_features=0)
    with pytest.raises(ConfigError):
        FixedDetector(max_features=2.5)
    if "sift" in AVAILABLE:
        with pytest.raises(ConfigError):
            F.make_extractor("sift", threshold=3)
        with pytest.raises(ConfigError):
            F.make_extractor("sift", contrast_threshold=-1)
    if "hesaff" in AVAILABLE:
        with pytest.raises(ConfigError):
            F.make_extractor("hesaff", not_a_param=1)
        with pytest.raises(ConfigError):
            F.make_extractor("hesaff", only_count=True)
        with pytest.raises(ConfigError):
            F.make_extractor("hesaff", numberOfScales=2.5)


@needs_hesaff
def test_default_extractor_is_hessian_affine():
    assert F.make_extractor().name == "hesaff" == F.DEFAULT_EXTRACTOR
    assert isinstance(F.make_extractor("hessian-affine"), F.HessianAffineSift)


@pytest.mark.parametrize("name", EXTRACTORS)
def test_params_are_json_and_rebuild_the_extractor(name):
    ex = F.make_extractor(name, max_side=640, max_features=500)
    params = json.loads(json.dumps(ex.params()))
    again = F.extractor_from_params(params)
    assert type(again) is type(ex) and again.params() == ex.params()
    with pytest.raises(ConfigError):
        F.extractor_from_params({"options": {}})


def test_features_type_checks_and_save_load(tmp_path):
    with pytest.raises(DimensionError):
        F.Features(np.zeros((2, 5)), np.zeros((2, 128), np.uint8), (4, 4))
    with pytest.raises(DimensionError):
        F.Features(np.zeros((2, 6)), np.zeros((3, 128), np.uint8), (4, 4))
    with pytest.raises(DimensionError):
        F.Features(np.zeros((2, 6)), np.zeros((2, 128), np.float32), (4, 4))
    with pytest.raises(DimensionError):
        F.Features(np.zeros((2, 6)), np.zeros((2, 128), np.uint8), (0, 4))
    rng = np.random.default_rng(0)
    f = F.Features(rng.random((5, 6)), rng.integers(0, 256, (5, 128)).astype(np.uint8), (30, 20))
    F.save_features(tmp_path / "f.npz", f)
    g = F.load_features(tmp_path / "f.npz")
    assert np.array_equal(f.keypoints, g.keypoints) and np.array_equal(f.descriptors, g.descriptors)
    assert g.image_size == (30, 20)
    (tmp_path / "bad.npz").write_bytes(struct.pack("<4i", 1, 2, 3, 4))
    with pytest.raises(DescriptorFileError):
        F.load_features(tmp_path / "bad.npz")


# --------------------------------------------------------------------------- real photographs
@needs_hesaff
def test_real_paris_photo_has_a_plausible_number_of_hesaff_features(paris6k_subset_photos):
    path = paris6k_subset_photos[0]
    f = F.extract(path, F.make_extractor("hesaff"))
    with Image.open(path) as im:
        assert f.image_size == im.size and max(im.size) == 1024
    assert 200 <= len(f) <= 10000
    w, h = f.image_size
    assert (f.positions >= 0).all() and (f.positions[:, 0] < w).all() and (f.positions[:, 1] < h).all()
    inside = F.crop_to_box(f, (0, 0, w / 2, h))  # the left half keeps a strict subset
    assert 0 < len(inside) < len(f)


@needs_sift
def test_without_pyhesaff_the_default_falls_back_to_opencv_with_a_warning(monkeypatch):
    from streamk.errors import ExtractorUnavailableError

    def missing():
        raise ExtractorUnavailableError("pyhesaff is not installed (simulated)")

    monkeypatch.setattr(F.extractors, "_import_pyhesaff", missing)
    with pytest.warns(RuntimeWarning, match="not the paper's Hessian-affine"):
        ex = F.make_extractor(max_features=10)
    assert ex.name == "sift" and ex.max_features == 10
    with pytest.raises(ExtractorUnavailableError):
        F.make_extractor("hesaff")  # asked for by name: no silent substitute
    assert "hesaff" not in F.available_extractors()


# --------------------------------------------------------------------------- the cache's bound
def _entry(cache, i, nbytes=10_000, mtime=None):
    """A file where the entry of content i would be, of nbytes, last used at mtime."""
    path = cache.directory / "0123456789abcdef" / f"{i:02x}"[:2] / f"{i:064x}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * nbytes)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_cache_trim_removes_the_least_recently_used_down_to_its_share(tmp_path):
    cache = F.FeatureCache(tmp_path / "cache", max_bytes=100_000)
    paths = [_entry(cache, i, mtime=1_000_000 + i) for i in range(12)]  # 120 kB over 100 kB
    stale = paths[0].parent / ".x.npz.1.ab.tmp"
    stale.write_bytes(b"y" * 5_000)
    os.utime(stale, (1, 1))  # left by a process killed long ago: trimmed first
    fresh = paths[0].parent / ".z.npz.2.cd.tmp"
    fresh.write_bytes(b"z" * 5_000)  # a write under way: counted, never removed
    assert cache.size() == (13, 130_000)
    removed, freed = cache.trim()
    left = sorted(p for p in paths if p.exists())
    assert not stale.exists() and fresh.exists()
    assert left == paths[-8:] and (removed, freed) == (5, 45_000)  # the oldest went: 85 kB <= 0.9 x 100 kB
    assert cache.trim() == (0, 0)  # under the bound: nothing
    assert cache.trim(max_bytes=0)[0] == 8 and cache.size() == (0, 5_000)  # 0: emptied


@needs_sift
def test_a_bounded_cache_keeps_what_is_used(tmp_path, images):
    """Puts past the bound trim the cache; a hit renews an entry, so it stays."""
    import hashlib

    ex = F.OpenCVSift()
    a, b, c = (images[n] for n in sorted(images)[:3])
    probe = F.FeatureCache(tmp_path / "probe", max_bytes=0)
    sizes = []
    for p in (a, b, c):
        F.extract(p, ex, cache=probe)
        sizes.append(probe.entry_path(hashlib.sha256(p.read_bytes()).hexdigest(), ex).stat().st_size)
    bound = int((sizes[0] + sizes[2]) / feature_cache.TRIM_TO) + 1  # a and c fit after a trim, not b too
    assert sizes[0] + sizes[1] <= bound < sum(sizes)  # the images' sizes allow the test
    cache = F.FeatureCache(tmp_path / "cache", max_bytes=bound)
    F.extract(a, ex, cache=cache)
    F.extract(b, ex, cache=cache)
    for p, used in ((a, 1_000_000), (b, 2_000_000)):  # last used long ago, a before b (no clock to wait on)
        os.utime(cache.entry_path(hashlib.sha256(p.read_bytes()).hexdigest(), ex), (used, used))
    F.extract(a, ex, cache=cache)  # a hit: a is now the most recently used
    assert cache.hits == 1
    F.extract(c, ex, cache=cache)  # over the bound: b, the least recently used, goes
    assert cache.size() == (2, sizes[0] + sizes[2])
    F.extract(a, ex, cache=cache)
    F.extract(c, ex, cache=cache)
    assert cache.hits == 3
    F.extract(b, ex, cache=cache)  # trimmed: a miss
    assert cache.hits == 3 and cache.misses == 4


def test_cache_bound_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(feature_cache.MAX_BYTES_ENV, "12345")
    assert F.FeatureCache(tmp_path / "a").max_bytes == 12345
    monkeypatch.setenv(feature_cache.MAX_BYTES_ENV, "0")
    assert F.FeatureCache(tmp_path / "a").max_bytes == 0
    monkeypatch.delenv(feature_cache.MAX_BYTES_ENV)
    assert F.FeatureCache(tmp_path / "a").max_bytes == feature_cache.DEFAULT_MAX_BYTES == 5 * 2 ** 30
    for bad in ("5G", "-1", "x"):
        monkeypatch.setenv(feature_cache.MAX_BYTES_ENV, bad)
        with pytest.raises(ConfigError, match=feature_cache.MAX_BYTES_ENV):
            F.FeatureCache(tmp_path / "a")
    with pytest.raises(ConfigError):
        F.FeatureCache(tmp_path / "a", max_bytes=-5)

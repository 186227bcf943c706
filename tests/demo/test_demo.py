"""The main job (``streamk demo``) on tiny configurations, and the query transforms."""

import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from streamk.demo import transforms as tf
from streamk.cli import main
from streamk.errors import ConfigError, DatasetImageError, ImageReadError

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

TINY = dict(k=4, max_side=320, max_features=300, workers=1, progress=False)  # as builtin_run (conftest.py)


def _photo(mode="RGB", size=(200, 150), seed=0):
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0]) + ((3,) if mode == "RGB" else ())
    return Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)


# ---------------------------------------------------------------- transforms
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_transforms_sizes_and_modes(mode):
    img = _photo(mode)
    w, h = img.size
    views = {name: tf.view(img, name, "photo.png") for name in {**tf.TRANSFORMS, **tf.VARIANTS}}
    assert all(v.mode == mode for v in views.values())
    side = np.sqrt(0.6)
    assert views["crop"].size == (round(w * side), round(h * side))
    assert views["scale"].size == (w // 2, h // 2)
    assert views["persp"].size == views["jpeg"].size == views["light"].size == (w, h)
    rw, rh = views["rotate"].size  # 20-30 degrees, canvas expanded
    assert rw > w and rh > h
    assert views["tilted"].size[0] > round(0.7 * w)


def test_transforms_change_the_pixels_as_described():
    img = _photo("L", (120, 100))
    a = np.asarray(img, np.float64)
    persp = np.asarray(tf.view(img, "persp", "x"), np.float64)
    assert persp[0, 0] == 0 and persp[-1, -1] == 0  # corners pulled inward: black margins
    assert np.abs(np.asarray(tf.view(img, "jpeg", "x"), np.float64) - a).mean() > 5  # lossy
    assert not np.array_equal(np.asarray(tf.view(img, "light", "x")), np.asarray(img))


def test_transforms_are_deterministic_and_keyed():
    img = _photo()
    for name in tf.TRANSFORMS:
        a = np.asarray(tf.view(img, name, "a.png", seed=3))
        assert np.array_equal(a, np.asarray(tf.view(img, name, "a.png", seed=3))), name
    crops = {tf.view(img, "crop", key).tobytes() for key in ("a.png", "b.png", "c.png", "d.png")}
    assert len(crops) > 1  # the window position depends on the image key


def test_transform_bad_input():
    with pytest.raises(ConfigError):
        tf.view(_photo(), "blur", "x")
    with pytest.raises(ConfigError):
        tf.view(_photo().convert("RGBA"), "crop", "x")
    with pytest.raises(ConfigError):
        tf.check_names(["crop", "crop"])
    with pytest.raises(ConfigError):
        tf.check_names([])


def test_open_rgb(tmp_path):
    _photo().convert("RGBA").save(tmp_path / "a.png")
    _photo().convert("P").save(tmp_path / "p.png")
    Image.fromarray((np.arange(40000).reshape(200, 200) % 65535).astype(np.uint16)).save(tmp_path / "i16.png")
    assert tf.open_rgb(tmp_path / "a.png").mode == "RGB"
    assert tf.open_rgb(tmp_path / "p.png", max_side=50).size == (50, 38)
    assert tf.open_rgb(tmp_path / "i16.png").mode == "L"
    (tmp_path / "bad.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    with pytest.raises(ImageReadError):
        tf.open_rgb(tmp_path / "bad.jpg")


# ---------------------------------------------------------------- the demo
class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.srcs, self.text = [], []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.srcs.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.text.append(data)


def _check_page(page):
    html = page.read_text(encoding="utf-8")
    parser = _Page()
    parser.feed(html)
    assert parser.srcs, "the page shows no image"
    for src in parser.srcs:  # relative links to files written beside the page
        assert not Path(src).is_absolute() and (page.parent / src).is_file(), src
    return html, "".join(parser.text)


def _check_table(result, lines):
    assert [m.method for m in result.methods] == ["sum", "democratic", "gmp"]
    for m in result.methods:
        assert 0 <= m.map <= 100
        assert all(0 <= v <= 100 for v in m.per_transform.values())
        row = next(line for line in lines if line.startswith(m.method + " "))
        assert float(row.split()[1]) == pytest.approx(m.map, abs=0.051)


def test_demo_on_builtin_photos(builtin_run):
    result, lines, _ = builtin_run
    # 4 photos + 1 variant each; 3 bursty scenes (camera, coins, the motorcycle pair: one object)
    # + 1 variant each, and the 3 places they hang on, bare, twice each
    assert result.n_database == 8 + 3 * 2 + 3 * 2
    assert result.n_queries == 4 * 3 + 3 * 3  # 4 photos and 3 scenes x 3 changes
    _check_table(result, lines)
    # retrieval works on the photos: a random ranking of their 8 images scores about 53 mAP (2
    # positives of 8 for camera and coins, 4 for the motorcycle stereo pair)
    for m in result.methods:
        assert m.per_category["photos"] >= 90, f"{m.method}: mAP {m.per_category['photos']:.1f}"
    assert any("unsupervised" in line for line in lines)
    assert any(line.startswith("time:") and "total" in line for line in lines)
    html, text = _check_page(result.html)
    assert "motorcycle_right.png" in text
    # the stereo pair is one scene: the left view's queries have the right image as a positive
    assert "motorcycle_left.png" in text and 'class="pos"' in html


def test_bursty_scenes_sum_pooling_falls_behind(builtin_run):
    """The paper's claim on the scenes built to show it (streamk.demo.scenes): sum pooling is
    dominated by the walls' bursts, GMP is not; and every method beats a random ranking."""
    result, _, _ = builtin_run
    by = {m.method: m.per_category["bursty scenes"] for m in result.methods}
    # a random ranking of the 20 images: 2 positives per scene query (its original and variant),
    # and 2 junk (4 for the motorcycle pair's scene), so 2 positives among at least 16 scored
    # images (fewer images: a higher random AP, the bound is generous); mean AP by sampling
    rng = np.random.default_rng(0)
    random_ap = np.mean([np.mean((np.arange(2) + 1) / (np.sort(rng.choice(16, 2, replace=False)) + 1))
                         for _ in range(4000)])
    assert min(by.values()) > 100 * random_ap + 10, (by, random_ap)
    assert by["gmp"] > by["sum"], by


def test_demo_index_holds_what_search_encodes(builtin_run):
    from streamk.features import extract
    from streamk.index import StreamingIndex

    result, _, tmp = builtin_run
    for method in ("sum", "democratic", "gmp"):
        with StreamingIndex.open(result.out_dir / f"index-{method}", readonly=True) as idx:
            assert len(idx) == result.n_database and idx.encoder.config.aggregation == method
            for image_id in idx.ids()[:3]:
                f = extract(idx.info(image_id)["source"], idx.extractor(), cache=tmp / "cache")
                assert np.allclose(idx.vector(image_id), idx.encoder.encode(f.descriptors), atol=1e-5)


def test_demo_rerun_replaces_its_own_output_only(tmp_path):
    pytest.importorskip("pyhesaff")
    pytest.importorskip("skimage")
    from streamk.demo.main_job import PHOTOS, run_demo

    kw = dict(n_variants=0, cache_dir=tmp_path / "cache", out=lambda *a: None, **TINY)
    run_demo(out_dir=tmp_path / "out", photos=PHOTOS[2:4], transforms=("scale", "crop"), **kw)
    again = run_demo(out_dir=tmp_path / "out", photos=PHOTOS[2:4], transforms=("scale",), scenes=0, **kw)
    # 2 photos, one change, no bursty scene: the first run's 8 query files and its scenes are gone
    assert again.n_queries == 2 and len(list((tmp_path / "out" / "queries").iterdir())) == 2
    # the database is the photos where scikit-image keeps them: the folder held the scenes only
    assert again.n_database == 2 and not any((tmp_path / "out" / "database").iterdir())
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("not the demo's")
    with pytest.raises(ConfigError, match="not empty"):
        run_demo(out_dir=mine, photos=PHOTOS[2:4], **kw)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_demo_without_skimage_names_the_extra(monkeypatch, tmp_path):
    import sys

    from streamk.demo.main_job import run_demo

    monkeypatch.setitem(sys.modules, "skimage", None)  # import fails
    with pytest.raises(DatasetImageError, match=r"streamk\[demo\]"):
        run_demo(out_dir=tmp_path / "out", out=lambda *a: None, **TINY)
    assert not (tmp_path / "out").exists()


def test_cli_demo_on_a_folder_with_a_corrupt_file(tmp_path, capsys):
    pytest.importorskip("pyhesaff")
    skimage = pytest.importorskip("skimage")
    data = Path(skimage.__file__).parent / "data"
    photos = tmp_path / "photos"
    (photos / "sub").mkdir(parents=True)
    shutil.copy(data / "camera.png", photos / "camera.png")
    shutil.copy(data / "coins.png", photos / "sub" / "coins.png")
    shutil.copy(data / "page.png", photos / "<b>&'page\".png")  # an id that must be escaped
    shutil.copy(data / "camera.png", photos / "camera-copy.png")  # same content: reported
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    out = photos / "demo-out"  # inside the folder: not indexed itself
    rc = main(["demo", "--images", str(photos), "--out", str(out), "--max-queries", "2",
               "--transforms", "crop,light", "--vocab-size", "4", "--max-side", "320", "--max-features", "300",
               "--workers", "1", "--cache", str(tmp_path / "cache"), "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "broken.jpg" in captured.err and "camera-copy.png" in captured.err
    assert "database: 3 images" in captured.out
    lines = captured.out.splitlines()
    for method in ("sum", "democratic", "gmp"):
        row = next(line for line in lines if line.startswith(method + " "))
        assert 0 <= float(row.split()[1]) <= 100
    html, text = _check_page(out / "index.html")
    assert "<b>&'page\".png" in text  # shown as text...
    assert "<b>" not in html.split("</style>", 1)[1]  # ...never as markup
    assert "&lt;b&gt;&amp;&#x27;page&quot;.png" in html
    assert "sub__coins.png" in text
    assert str(tmp_path) not in html  # the folder is named, not its path


def test_demo_images_a_copy_in_the_folder_is_not_counted(tmp_path):
    """A user's folder holding a photo twice (camera.png and a resized JPEG export of it): a
    query made from one found the other first, a false positive that lowered the printed mAP
    (AP 25 for such a query: the official AP of one positive at rank 2). The two are now
    classed copies, each junk for the other's queries; the other photos stay negatives."""
    pytest.importorskip("pyhesaff")
    skimage = pytest.importorskip("skimage")
    from streamk.demo.main_job import run_demo

    data = Path(skimage.__file__).parent / "data"
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("camera.png", "coins.png", "chelsea.png", "coffee.png"):
        shutil.copy(data / name, photos / name)
    with Image.open(data / "camera.png") as im:  # an export: 70 %, JPEG
        im.resize((im.width * 7 // 10, im.height * 7 // 10), Image.LANCZOS).save(photos / "camera-export.jpg",
                                                                                  quality=90)
    lines, transforms = [], ("crop", "light", "persp")
    result = run_demo(out_dir=tmp_path / "out", images=photos, max_queries=10, transforms=transforms,
                      cache_dir=tmp_path / "cache", out=lines.append, **TINY)
    ids = sorted(p.name for p in photos.iterdir())  # the database's order (rows), as scan gives them
    assert result.n_database == len(ids) == 5
    stems = [i.rsplit(".", 1)[0] for i in ids]
    pair = {ids.index("camera.png"), ids.index("camera-export.jpg")}
    sources = _query_sources(tmp_path / "out", transforms)
    assert len(sources) == result.n_queries == 15
    copy_first = 0
    for m in result.methods:
        for q, ap, ranking in zip(sources, m.aps, m.rankings):
            source = stems.index(q)
            rows = [row for row, _ in ranking]  # every image (5 <= show)
            assert sorted(rows) == list(range(5))
            if source in pair:  # the other copy is junk: left out of the ranking
                copy_first += rows.index(source) > rows.index((pair - {source}).pop())
                rows = [r for r in rows if r != (pair - {source}).pop()]
            # the official AP of one positive at 0-based rank r, by hand: 1 at r = 0, else the trapezoid
            # between precision 0 / r and 1 / (r + 1), (1 / (r + 1)) / 2
            r = rows.index(source)
            assert ap == pytest.approx(100.0 if r == 0 else 50 / (r + 1)), (m.method, q)
    assert copy_first  # the copy came first for some query: counted, it cost that query half its AP
    assert [sorted(pair[:2]) for pair in result.copies] == [["camera-export.jpg", "camera.png"]]
    said = next(line for line in lines if line.startswith("copies: "))
    assert said.startswith("copies: 1 pair(s) of images of the folder are copies of each other")
    assert "camera-export.jpg ~ camera.png" in said
    _, text = _check_page(result.html)
    assert "copies of each other" in text


@pytest.mark.parametrize("n, neighbours", [(7, 3), (7, 10), (1, 10), (2100, 4)])
def test_copy_candidates_are_each_images_nearest_above_the_threshold(n, neighbours):
    """The pairs the copy check looks at: for each row, its ``neighbours`` best-scoring later rows
    at or above the threshold; against a plain loop over every pair (2,100 rows: three blocks)."""
    from streamk.demo.folder_copies import candidate_pairs

    rng = np.random.default_rng(n)
    V = rng.standard_normal((n, 8)).astype(np.float32)
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    a, b = candidate_pairs(V, 0.3, neighbours)
    S = V @ V.T
    expected = []
    for i in range(n):
        later = (i + 1 + np.argsort(-S[i, i + 1:]))[:neighbours]
        expected += sorted((i, int(j)) for j in later if S[i, j] >= 0.3)
    assert list(zip(a.tolist(), b.tolist())) == expected
    assert n < 3 or len(expected)  # some pairs there to find


def test_the_copy_checks_pixels_are_kept_for_the_most_recent_images_only(tmp_path):
    """The decoded pixels of a folder's files are a bounded cache: at most ``keep`` images at once;
    an image pushed out is decoded again (equal) when a later pair needs it."""
    import hashlib

    from PIL import Image

    from streamk.demo.folder_copies import _Pixels

    paths, shas = [], []
    for i in range(3):
        path = tmp_path / f"{i}.png"
        Image.fromarray(np.full((32, 48), 60 * i, np.uint8)).save(path)
        paths.append(str(path))
        shas.append(hashlib.sha256(path.read_bytes()).hexdigest())
    pixels = _Pixels(paths, shas, orient=False, keep=2)
    first = pixels.of(0)()
    assert first is not None and pixels.of(1)() is not None and pixels.of(2)() is not None
    assert sorted(pixels.cache) == [1, 2]
    np.testing.assert_array_equal(pixels.of(0)(), first)
    assert sorted(pixels.cache) == [0, 2]


def _query_sources(out, transforms):
    """The source id of each query, in the demo's order: by image, then change (the query files are
    named NNNN-stem.change.jpg; the stems here are the ids without their extension)."""
    names = [p.name.rsplit(".", 2)[:2] for p in (out / "queries").iterdir()]
    names.sort(key=lambda n: (n[0].split("-", 1)[0], transforms.index(n[1])))
    return [n[0].split("-", 1)[1] for n in names]


@pytest.mark.parametrize("argv, message", [
    (["demo", "--images", "/no/such/folder"], "not a folder"),
    (["demo", "--transforms", "crop,blur"], "unknown transform"),
])
def test_cli_demo_bad_input_exit_code(argv, message, tmp_path, capsys):
    assert main(argv + ["--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_demo_folder_without_usable_images(tmp_path, capsys):
    pytest.importorskip("pyhesaff")
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "broken.png").write_bytes(b"\x89PNG not really")
    argv = ["demo", "--images", str(tmp_path / "photos"), "--out", str(tmp_path / "out"), "--workers", "1",
            "--cache", str(tmp_path / "cache"), "--no-progress"]
    assert main(argv) == 4  # TooFewImagesError
    err = capsys.readouterr().err
    assert "broken.png" in err and "usable image" in err
    # nothing the failed run made is left (it left an empty database/, queries/, thumbs/ and the marker)
    assert not (tmp_path / "out").exists()


def test_cli_demo_failed_in_an_earlier_demos_folder_leaves_only_what_was_there(tmp_path, capsys):
    """A failed run in an existing folder removes what it made, the marker too when it made it."""
    pytest.importorskip("pyhesaff")
    skimage = pytest.importorskip("skimage")
    (tmp_path / "photos").mkdir()
    shutil.copy(Path(skimage.__file__).parent / "data" / "camera.png", tmp_path / "photos" / "one.png")
    (tmp_path / "out").mkdir()
    argv = ["demo", "--images", str(tmp_path / "photos"), "--out", str(tmp_path / "out"), "--workers", "1",
            "--cache", str(tmp_path / "cache"), "--no-progress"]
    assert main(argv) == 4  # one photo: TooFewImagesError
    assert "1 usable image(s)" in capsys.readouterr().err
    assert list((tmp_path / "out").iterdir()) == []


def test_cli_demo_images_inside_out_said_before_anything_is_deleted(tmp_path, capsys):
    """--images inside --out: the earlier demo output was wiped, then its images skipped in silence
    ("0 usable image(s)"); now refused first, saying why, with the folder untouched."""
    out = tmp_path / "demo-out"
    (out / "mine").mkdir(parents=True)
    (out / ".streamk-demo").write_text("written by streamk demo\n")
    (out / "index.html").write_text("an earlier demo's page\n")
    (out / "mine" / "a.jpg").write_bytes(b"any bytes: never read")
    for images in (out / "mine", out):
        assert main(["demo", "--images", str(images), "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"streamk: error: --images {images} is inside --out {out}, the demo's output folder")
        assert "move the images out of it, or give another --out" in err
    assert sorted(p.name for p in out.iterdir()) == [".streamk-demo", "index.html", "mine"]
    assert (out / "index.html").read_text() == "an earlier demo's page\n"


@pytest.mark.parametrize("argv", [["--max-queries", "0"], ["--scenes", "-1"]])
def test_cli_demo_rejects_bad_numbers(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", *argv])
    assert exc.value.code == 2


def test_cli_rejects_unknown_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err

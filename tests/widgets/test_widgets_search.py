"""SearchApp: controls changed programmatically re-rank, errors stay in the widget."""

import io
import os
import re

import numpy as np
import pytest

pytest.importorskip("ipywidgets")

from streamk.pipeline import extract_many  # noqa: E402
from streamk.demo.examples import open_example  # noqa: E402
from streamk.config import default_cache_dir  # noqa: E402

METHOD_OPTIONS = (("sum", "sum"), ("democratic", "democratic"), ("GMP", "gmp"))


@pytest.fixture(scope="module")
def example(small_example_dir):
    ex = open_example(directory=small_example_dir)
    yield ex
    ex.close()


@pytest.fixture
def app(example):
    """The app on the first stage alone (the rankings below are the first stage's)."""
    from streamk.widgets import SearchApp

    app = SearchApp(example.index, dataset=example.dataset, k=5)
    assert app.verify.value  # on by default: the example index keeps local geometry
    app.verify.value = False
    return app


def upload(app, name, data):
    """What the FileUpload widget holds after the user picked a file."""
    import datetime

    app.upload.value = ({"name": name, "type": "image/jpeg", "size": len(data), "content": memoryview(data),
                         "last_modified": datetime.datetime.now(datetime.timezone.utc)},)


def grid(app):
    """(attributes of the grid div, [(id, relevance)] of its cards) parsed from the HTML."""
    attrs = dict(re.findall(r'data-(\w+)="([^"]*)"', app.results.value.split("<figure", 1)[0]))
    cards = re.findall(r'class="streamk-hit" data-id="([^"]*)" data-rank="\d+" data-relevance="(\w*)"',
                       app.results.value)
    return attrs, cards


def reference_ranking(example, query_path, method, power=0.5):
    """Database ids by decreasing score, every image encoded by a plain Encoder."""
    enc = example.index.encoder.derive(aggregation=method, power=power)
    ids = example.index.ids()
    paths = [example.index.info(i)["source"] for i in ids] + [str(query_path)]
    found, _ = extract_many(paths, example.index.extractor(), default_cache_dir(), workers=1, progress=False)
    V = np.stack([enc.encode(found[p].descriptors) for p in paths[:-1]])
    q = enc.encode(found[paths[-1]].descriptors)
    return [ids[i] for i in np.argsort(-(V @ q), kind="stable")]


def test_first_query_is_shown_with_ground_truth_borders(app, example):
    assert app.errors.text == ""
    attrs, cards = grid(app)
    assert attrs["method"] == example.index.encoder.config.aggregation and attrs["k"] == "5"
    assert int(attrs["state"]) == app.state >= 1
    assert [c[0] for c in cards] == [h.id for h in app.hits] and len(cards) == 5
    pos, _ = example.dataset.ground_truth()[0]
    positives = {example.dataset.image_ids[j] for j in pos}
    for image_id, rel in cards:
        assert rel == ("positive" if image_id in positives else "negative")
    assert "#2a2" in app.results.value and "#d22" in app.results.value  # green and red borders drawn
    assert app.results.value.count("data:image/jpeg;base64,") == 5


@pytest.mark.parametrize("method", ["sum", "democratic", "gmp"])
def test_method_change_reranks_like_a_plain_encoder(app, example, method):
    app.method.value = "sum" if method != "sum" else "democratic"
    app.method.value = method
    attrs, cards = grid(app)
    assert attrs["method"] == method and app.errors.text == ""
    ref = reference_ranking(example, example.dataset.query_image_path(0), method)
    assert [c[0] for c in cards] == ref[:5]


def test_k_power_and_thumbnail_cache(app):
    app.k.value = 9
    reads = app.thumbnails.reads
    state = app.state
    app.k.value = 3
    assert len(app.hits) == 3 and len(grid(app)[1]) == 3 and app.state == state + 1
    app.power.value = 0.2
    app.method.value = "sum"
    app.k.value = 7
    assert app.thumbnails.reads == reads  # every result had been shown: no full image read again
    assert "α=0.20" in app.status.value


def test_parameters_move_the_scores(app):
    app.method.value = "democratic"
    before = [h.score for h in app.hits]
    app.gamma.value = 0.2
    assert app.errors.text == "" and [h.score for h in app.hits] != before
    assert app.lam.disabled and not app.gamma.disabled
    app.method.value = "gmp"
    before = [h.score for h in app.hits]
    app.lam.value = 100.0
    assert [h.score for h in app.hits] != before and app.gamma.disabled
    app.reset_settings()
    assert app.reaggregator.is_index_settings(app.settings())


def test_crop_box_changes_the_query(app):
    n_all = len(app.query_features())
    w, h = app.query.features.image_size
    app.box_fields[2].value = w / 2
    app.box_fields[3].value = h / 2
    app.use_box.value = True
    assert app.errors.text == ""
    assert 0 < len(app.query_features()) < n_all
    assert "in the box" in app.query_view.value
    state = app.state
    app.box_fields[2].value = 0.5  # a sliver without features
    assert "EmptyDescriptorSetError" in app.errors.text
    assert app.state == state  # nothing redrawn: the last ranking stays
    app.use_box.value = False
    assert app.errors.text == "" and len(app.query_features()) == n_all


def test_a_failed_new_query_keeps_the_query_its_box_and_the_controls(example):
    """A new query that cannot be ranked (here: its index closed meanwhile) leaves the query
    shown with its crop box and the controls as they were."""
    from streamk.index import open_index
    from streamk.widgets import SearchApp

    idx = open_index(example.index.path)
    try:
        app = SearchApp(idx, dataset=example.dataset, k=5, workers=1)
        app.verify.value = False
        w, h = app.query.features.image_size
        for f, v in zip(app.box_fields, (0, 0, w / 2, h / 2)):
            f.value = v
        app.use_box.value = True
        assert app.errors.text == ""
        query, box, html = app.query, app.box(), app.results.value
    finally:
        idx.close()
    other = example.dataset.query_image_path(1)
    assert app.query.path != str(other)
    app.path_text.value = str(other)
    assert "IndexClosedError" in app.errors.text and app.results.value == html
    assert app.query is query and app.use_box.value and app.box() == box
    assert [f.max for f in app.box_fields] == [w, h, w, h]


@pytest.mark.parametrize("data, reason", [(b"", "empty file"), (b"this is not an image", "not a recognised"),
                                          (b"\x89PNG\r\n\x1a\n\x00\x00", "")])
def test_bad_upload_shows_an_error_and_changes_nothing(app, data, reason):
    hits, state, query, html = list(app.hits), app.state, app.query, app.results.value
    upload(app, "bad.jpg", data)
    assert "ImageReadError" in app.errors.text and reason in app.errors.text
    assert (app.hits, app.state, app.query, app.results.value) == (hits, state, query, html)


def test_featureless_upload_is_refused(app):
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (200, 200), 128).save(buf, format="PNG")
    state = app.state
    upload(app, "grey.png", buf.getvalue())
    assert "EmptyDescriptorSetError" in app.errors.text and app.state == state


def test_upload_path_and_id_queries(app, example):
    path = example.dataset.query_image_path(1)
    data = path.read_bytes()
    upload(app, path.name, data)
    assert app.errors.text == "" and app.query.label == f"upload {path.name}"
    assert app.query.positives is None and set(c[1] for c in grid(app)[1]) == {""}  # no ground truth: no borders
    uploaded = [h.id for h in app.hits]
    app.path_text.value = str(path)  # Enter in the field
    assert [h.id for h in app.hits] == uploaded
    assert app.query.positives is not None  # a dataset query's file: its ground truth applies
    some_id = example.index.ids()[4]
    app.search_path(some_id)
    assert app.hits[0].id == some_id and app.query.label == f"index image {some_id}"
    app.path_text.value = "/no/such/file.jpg"
    assert "no such file" in app.errors.text and app.hits[0].id == some_id


def test_an_image_in_memory_is_searched_as_its_file(app, example):
    """app.search_image(array or PIL image): what a notebook holds, searched as an upload of
    its pixels (the example's files are PNGs: the same pixels, the same results)."""
    import numpy as np
    from PIL import Image

    from streamk.errors import ConfigError

    path = example.dataset.query_image_path(2)
    upload(app, path.name, path.read_bytes())
    want = [(h.id, h.score) for h in app.hits]
    pixels = np.asarray(Image.open(path).convert("RGB"))
    app.search_image(pixels, name="from skimage")
    assert [(h.id, h.score) for h in app.hits] == want and app.query.label == "upload from skimage.png"
    app.search_image(Image.open(path))
    assert [(h.id, h.score) for h in app.hits] == want
    with pytest.raises(ConfigError, match="Image.fromarray"):
        app.search_image(pixels[..., 0])
    assert [(h.id, h.score) for h in app.hits] == want  # nothing changed


def test_uploads_keep_one_file_and_leave_nothing_behind(example):
    """An upload is written to a temporary folder for the drawings; the folder holds the
    current query's file only, and goes with the app."""
    from streamk.widgets import SearchApp

    app = SearchApp(example.index, k=3, first_query=False)
    app.verify.value = False
    a, b = (example.dataset.query_image_path(i) for i in (0, 1))
    upload(app, a.name, a.read_bytes())
    folder = app._upload_dir
    assert app.errors.text == "" and os.listdir(folder) == [os.path.basename(app.query.path)]
    for _ in range(3):
        upload(app, b.name, b.read_bytes())
        assert app.errors.text == "" and os.listdir(folder) == [os.path.basename(app.query.path)]
    upload(app, "bad.jpg", b"not an image")  # refused: the current query and its file stay
    assert app.errors.text and os.listdir(folder) == [os.path.basename(app.query.path)]
    app.search_path(str(a))  # a query from a path: the upload is no longer needed
    assert os.listdir(folder) == []
    upload(app, a.name, a.read_bytes())
    app.close()
    assert not os.path.exists(folder)


def test_upload_folder_goes_at_exit_without_close(small_example_dir, tmp_path):
    """A notebook kernel that ends with the app open leaves no upload behind."""
    import subprocess
    import sys

    script = tmp_path / "app.py"
    script.write_text(
        "import sys\n"
        "from streamk.demo.examples import open_example\n"
        "from streamk.widgets import SearchApp\n"
        "ex = open_example(directory=sys.argv[1])\n"
        "app = SearchApp(ex.index, k=3, first_query=False)\n"
        "app.verify.value = False\n"
        "p = ex.dataset.query_image_path(0)\n"
        "app.search_upload(p.name, p.read_bytes())\n"
        "print(app._upload_dir)\n")
    run = subprocess.run([sys.executable, str(script), str(small_example_dir)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    folder = run.stdout.strip().splitlines()[-1]
    assert folder and "streamk-upload-" in folder and not os.path.exists(folder)


def unraisable_during(fn):
    """What Python would print as 'Exception ignored in ...' while ``fn`` runs and its garbage is collected."""
    import gc
    import sys

    seen = []
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: seen.append(f"{u.exc_type.__name__}: {u.exc_value}")
    try:
        fn()
        gc.collect()
    finally:
        sys.unraisablehook = hook
    return seen


def test_an_app_whose_constructor_raised_is_collected_quietly(example):
    """A closed index is refused by the constructor, and nothing more is said when the
    half-built app is collected (ipywidgets closes every widget then)."""
    from streamk.errors import IndexClosedError
    from streamk.index import open_index
    from streamk.widgets import SearchApp

    closed = open_index(example.index.path)
    closed.close()

    def refused():
        with pytest.raises(IndexClosedError):
            SearchApp(closed, workers=1)

    assert unraisable_during(refused) == []


def test_k_and_the_picker_follow_an_index_that_grows(example, tmp_path):
    """An app opened on an empty index: k is capped at 1 until the index has images; the next
    search lifts the cap to the k asked for and lists the new images."""
    from streamk.index import StreamingIndex
    from streamk.widgets import SearchApp

    with StreamingIndex.create(tmp_path / "grows", example.index.encoder,
                               extractor=example.index.extractor()) as idx:
        app = SearchApp(idx, k=5, workers=1)
        assert app.k.max == 1 and app.k.value == 1 and app.picker.options == ()
        ids = example.index.ids()[:3]
        for i in ids:
            idx.add(i, image_path=example.index.info(i)["source"])
        app.path_text.value = str(example.dataset.query_image_path(0))
        assert app.errors.text == "" and app.k.max == 3 and app.k.value == 3 and len(app.hits) == 3
        assert [v for _, v in app.picker.options] == [("id", i) for i in idx.ids()]
        assert app.query.path == str(example.dataset.query_image_path(0))  # the picker's refresh searched nothing


def test_picker_covers_queries_and_index_images(app, example):
    labels = [label for label, _ in app.picker.options]
    assert sum(lbl.startswith("query: ") for lbl in labels) == example.dataset.n_queries
    assert sum(lbl.startswith("index: ") for lbl in labels) == len(example.index)
    app.picker.value = app.picker.options[-1][1]
    assert app.errors.text == "" and app.query.label.startswith("index image")


def test_weights_view_explains_a_result(app):
    app.explain_toggle.value = True
    assert app.weights_box.layout.display is None
    assert app.weights.error.value == "" and len(app.weights.rows) == 2
    first = app.weights.png
    app.explain.value = app.explain.options[-1]
    assert app.weights.png != first and app.weights.rows[1][0] == app.explain.options[-1]
    app.explain_toggle.value = False
    assert app.weights_box.layout.display == "none"


def test_pq_mode_without_codes_is_reported_and_the_toggle_goes_back(app):
    assert app.index.codec_params() is None and app.mode.disabled  # nothing to choose: offered once trained
    html, state = app.results.value, app.state
    app.mode.value = "pq"  # (a program can still ask)
    assert "NotFittedError" in app.errors.text
    assert app.mode.value == "exact" and app.state == state and app.results.value == html  # as the grid shows
    app.k.value = 3  # the next change searches as usual
    assert app.errors.text == "" and app.state == state + 1 and grid(app)[0]["mode"] == "exact"


def test_a_failed_reaggregation_puts_the_method_back(app):
    shown = app.method.value
    other = next(v for _, v in METHOD_OPTIONS if v != shown)
    app.reaggregator.max_images = 1  # other settings than the index's own are refused on a larger index
    html, state = app.results.value, app.state
    app.method.value = other
    assert "ConfigError" in app.errors.text and "aggregation settings" in app.errors.text
    assert app.method.value == shown and app.state == state and app.results.value == html
    assert f" · {shown}" in app.status.value and app.progress.layout.display == "none"
    app.reaggregator.max_images = 10**6
    app.reset_button.click()  # the index's settings (already shown): searched again, no error
    assert app.errors.text == "" and app.method.value == shown and app.state == state + 1


def test_a_box_typed_field_by_field_searches_once_it_is_valid(app):
    w, h = app.query.features.image_size
    state = app.state
    for f, v in zip(app.box_fields, (0, 0, w / 4, h / 4)):
        f.value = v  # the box is off: nothing to search
    assert app.state == state
    app.use_box.value = True
    assert app.errors.text == "" and app.state == state + 1
    html = app.results.value
    # to (w/2, h/2, w, h) through boxes with x1 >= x2 or y1 >= y2: said quietly, not searched
    for f, v in zip(app.box_fields[:3], (w / 2, h / 2, w)):
        f.value = v
        assert app.errors.text == "" and app.state == state + 1 and app.results.value == html
        assert "x1 &lt; x2" in app.box_note.value
    app.box_fields[3].value = h  # valid: one search, with that box
    assert app.errors.text == "" and app.state == state + 2 and app.box_note.value == ""
    assert "in the box" in app.query_view.value and app.box() == (w / 2, h / 2, w, h)


def test_reaggregation_shows_progress_then_hides_it(app, example, monkeypatch):
    calls = []
    update = app.progress.update
    monkeypatch.setattr(app.progress, "update", lambda *a: (calls.append(a), update(*a)))
    app.method.value = "democratic"  # descriptors read (if not yet), database aggregated
    calls.clear()
    app.gamma.value = 0.35  # a setting no earlier test used: the database is aggregated again
    n = len(example.index)
    assert [c[:2] for c in calls] == [(i, n) for i in range(1, n + 1)]  # one step per image
    assert all("aggregating the database again" in c[2] for c in calls)
    assert app.progress.layout.display == "none" and app.errors.text == ""
    assert f"in {app.timings['database_s']:.1f} s" in app.status.value


def test_the_second_stage_shows_inliers_the_matched_region_and_the_matches(example):
    """A view of a photo (the demo's changes) is verified: the photo first with its inlier
    count, the query drawn where it matched, and the inlier pairs on request."""
    from streamk.widgets import SearchApp

    app = SearchApp(example.index, dataset=example.dataset, k=5)
    assert app.errors.text == "" and app.verify.value
    top = app.hits[0]
    assert top.verified and top.inliers >= 12
    card = re.search(r'data-id="%s"[^>]*data-inliers="(\d+)" data-verified="1"' % re.escape(top.id), app.results.value)
    assert card and int(card.group(1)) == top.inliers
    # a result checked and not verified shows why on its card (the code, its meaning on hover)
    from streamk.verification import WHY_NOT_VERIFIED
    for hit in app.hits:
        shown = re.search(r'data-id="%s"[^>]*data-why="([a-z-]*)" data-log10-nfa="([-0-9.]*)"' % re.escape(hit.id),
                          app.results.value)
        assert shown and shown.group(1) == (hit.why or "")
        # how significant its inliers are, as the CLI shows it (none for a result no model was tested on)
        assert shown.group(2) == ("" if hit.log10_nfa is None else f"{hit.log10_nfa:.1f}")
        if hit.why:
            assert hit.why in WHY_NOT_VERIFIED and not hit.verified
            assert f'title="not verified: {WHY_NOT_VERIFIED[hit.why]}' in app.results.value
    assert any(h.why for h in app.hits)  # the demo's other photos, below the verified views
    assert 'class="streamk-region"' in app.results.value and f"<b>{top.inliers}</b> inliers" in app.results.value
    assert top.log10_nfa <= -4 and f"log10 NFA {top.log10_nfa:.1f}</span>" in app.results.value
    pos, _ = example.dataset.ground_truth()[0]
    assert top.id in {example.dataset.image_ids[j] for j in pos}
    app.matches_toggle.value = True
    assert f'data-id="{top.id}" data-pairs="{top.inliers}"' in app.matches_view.value
    app.matches_toggle.value = False
    assert app.matches_view.value == ""
    app.method.value = "sum" if example.index.encoder.config.aggregation != "sum" else "democratic"
    assert all(getattr(h, "inliers", None) is None for h in app.hits)  # other settings: the first stage



def test_the_verified_mark_follows_the_bar_chosen(example, monkeypatch):
    """The bar control: the search gets the bar chosen, and each checked result is verified exactly when
    its log10 NFA is at or under the bar's log10, verified results first; the grid says the bar. (The marks
    against the bar on a real collection: tests/index/test_second_stage.py; the demo's views are verified
    far below any bar offered, so here the bar moves no mark.)"""
    import math

    from streamk.verification import DEFAULT_FALSE_ALARMS_PER_PAIR
    from streamk.widgets import SearchApp
    from streamk.widgets.search import BARS

    app = SearchApp(example.index, dataset=example.dataset, k=10)
    assert app.bar.value == DEFAULT_FALSE_ALARMS_PER_PAIR and not app.bar.disabled
    sent = []
    search = example.index.search
    monkeypatch.setattr(example.index, "search", lambda *a, **kw: sent.append(kw.get("params")) or search(*a, **kw))
    for _, bar in BARS[::-1]:  # the default last: each choice a change
        app.bar.value = bar
        assert app.errors.text == "" and f'data-bar="{bar:g}"' in app.results.value
        assert sent[-1].false_alarms_per_pair == bar
        assert any(h.verified for h in app.hits)  # the demo's views of a photo
        for h in app.hits:
            assert h.verified == (h.log10_nfa is not None and h.log10_nfa <= math.log10(bar))
            assert h.verified or h.why
        flags = [h.verified for h in app.hits]
        assert flags == sorted(flags, reverse=True)  # verified first
    app.verify.value = False
    assert app.errors.text == "" and app.bar.disabled and not any(getattr(h, "verified", False) for h in app.hits)


def test_the_app_searches_a_sharded_index_as_one_index(example, tmp_path):
    """The notebook is written once, over the Index interface: a sharded index holding the
    example's images gives the same ranking, marks and controls (it failed at start-up on
    a StreamingIndex-only method, and the second stage's controls were off)."""
    from streamk.index import ShardedIndex
    from streamk.widgets import SearchApp

    one = example.index
    with ShardedIndex.create(tmp_path / "shx", one.encoder, shards=2, vector_dtype=one.vector_dtype,
                             extractor=one.extractor(), vocabulary=one.vocabulary) as many:
        for image_id in one.ids():
            many.add(image_id, image_path=one.info(image_id)["source"])
        query = one.info(sorted(one.ids())[0])["source"]  # finds itself, verified, and its scene's views
        apps = [SearchApp(idx, k=4, first_query=False) for idx in (one, many)]
        for app in apps:
            assert app.verify.value and not app.verify.disabled
            app.search_path(query)
        got = [[(h.id, round(h.score, 4), h.verified, h.inliers) for h in app.hits] for app in apps]
        assert got[0] == got[1] and len(got[0]) == 4 and got[0][0][2]

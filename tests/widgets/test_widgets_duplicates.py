"""DuplicatesView: the classed pairs of an index (or of one image) with both thumbnails, groups
of copies only; controls changed programmatically redraw; errors stay in the widget."""

import os
import re

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
from helpers.copies import invalides_with_copies, sharded_copy  # noqa: E402

from streamk.verification.copies import DEFAULT_MIN_AGREEMENT, DEFAULT_MIN_COVERED  # noqa: E402

Image = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def index(paris6k_subset_photos, small_vocabulary, tmp_path_factory):
    """4 Invalides photos (other captures of one place) and two edited copies of the first:
    a half-size JPEG q30 and a crop. No image keeps a thumbnail: they are made from the files."""
    idx, photos = invalides_with_copies(paris6k_subset_photos, small_vocabulary, tmp_path_factory.mktemp("dupview"), 4)
    yield idx, photos[0].stem, [p.stem for p in photos[1:]]
    idx.close()


def rows(view):
    """[(a, b, class)] of the table's rows, parsed from its HTML."""
    return re.findall(r'class="streamk-pair" data-a="([^"]*)" data-b="([^"]*)" data-class="([^"]*)"',
                      view.pairs_view.value)


def groups(view):
    return [g.split(" ") for g in re.findall(r'class="streamk-group" data-ids="([^"]*)"', view.groups_view.value)]


def test_the_whole_index_copies_grouped_other_captures_apart(index):
    from streamk.index import copy_report
    from streamk.widgets import DuplicatesView

    idx, original, others = index
    view = DuplicatesView(idx, neighbours=5)
    assert view.errors.text == "" and view.searches == 1
    assert groups(view) == [sorted([original, "half", "crop"])]  # never another capture of the place
    want = copy_report(idx, neighbours=5, progress=False)
    assert view.pairs == want["pairs"]  # the library's classes, as the CLI prints them
    copies = [(p["a"], p["b"], p["class"]) for p in want["pairs"] if p["class"] != "same scene"]
    assert rows(view) == copies and {frozenset(r[:2]) for r in copies} >= {frozenset((original, "half")),
                                                                           frozenset((original, "crop"))}
    # each row: its score, inliers, covered fraction and pixel agreement, and both thumbnails
    for p, row in zip([p for p in want["pairs"] if p["class"] != "same scene"],
                      view.pairs_view.value.split('class="streamk-pair"')[1:]):
        cells = re.findall(r"<td>([^<]*)</td>", row)
        assert cells[:4] == [f"{p['score']:.3f}", str(p["inliers"]), f"{100 * p['covered']:.0f} %",
                             f"{p['agreement']:.2f}"]
        assert row.count("data:image/jpeg;base64,") == 2
    assert all(p["agreement"] >= DEFAULT_MIN_AGREEMENT and p["covered"] >= DEFAULT_MIN_COVERED
               for p in want["pairs"] if p["class"] == "copy")


def test_every_pair_is_a_redraw_and_shows_the_same_scene_pairs(index):
    from streamk.widgets import DuplicatesView

    idx, original, others = index
    view = DuplicatesView(idx, neighbours=5)
    state = view.state
    view.show.value = True  # every verified pair: drawn from the answer in hand
    assert view.searches == 1 and view.state == state + 1
    shown = rows(view)
    assert len(shown) == len(view.pairs) and any(kind == "same scene" for _, _, kind in shown)
    assert all(kind == "same scene" for a, b, kind in shown if {a, b} & set(others))
    assert groups(view) == [sorted([original, "half", "crop"])]  # the groups do not change
    view.show.value = False
    assert all(kind != "same scene" for _, _, kind in rows(view))


def test_one_image(index):
    from streamk.index import copies_of
    from streamk.widgets import DuplicatesView

    idx, original, others = index
    view = DuplicatesView(idx, image_id="half", neighbours=5, every_pair=True)
    assert view.errors.text == ""
    want = [p.to_dict() for p in copies_of(idx, "half", neighbours=5)]
    assert rows(view) == [(p["a"], p["b"], p["class"]) for p in want] and all(a == "half" for a, _, _ in rows(view))
    assert ("half", original, "copy") in rows(view)
    assert groups(view) == [sorted({"half"} | {p["b"] for p in want if p["class"] != "same scene"})]
    assert original in groups(view)[0] and not set(groups(view)[0]) & set(others)
    view.image.value = others[0]  # typing another id (Enter) computes its pairs
    assert view.searches == 2 and all(a == others[0] for a, _, _ in rows(view))
    assert groups(view) == [] and "0 group(s) of copies" in view.status.value


def test_errors_are_shown_and_the_last_answer_kept(index):
    from streamk.widgets import DuplicatesView

    idx, original, _ = index
    view = DuplicatesView(idx, image_id="half", neighbours=5)
    before = rows(view)
    view.image.value = "nope"
    assert "UnknownIdError" in view.errors.text and rows(view) == before and view.searches == 1
    view.image.value = "half"
    assert view.errors.text == "" and rows(view) == before


def test_neighbours_out_of_bounds_are_refused_and_the_half_built_view_goes_quietly(index):
    import gc
    import sys

    from streamk.errors import ConfigError
    from streamk.widgets import DuplicatesView

    idx, _, _ = index
    seen = []
    hook, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        for bad in (0, -3, 1001):
            with pytest.raises(ConfigError, match="neighbours"):
                DuplicatesView(idx, neighbours=bad, run=False)
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert seen == []


def test_a_redraw_that_fails_is_shown_and_the_toggle_goes_back(index):
    """The copies / every-pair toggle redraws: its error (here: the index closed meanwhile, so
    no thumbnail can be read) stays in the widget, with the table and the toggle as they were."""
    from streamk.index import open_index
    from streamk.widgets import DuplicatesView

    idx, _, _ = index
    handle = open_index(idx.path)
    try:
        view = DuplicatesView(handle, neighbours=5)
        assert view.errors.text == "" and view.show.value is False
        table = view.pairs_view.value
    finally:
        handle.close()
    view.show.value = True  # the same-scene pairs need thumbnails not read yet
    assert "IndexClosedError" in view.errors.text
    assert view.pairs_view.value == table and view.show.value is False


def test_an_index_without_local_geometry_groups_by_vector_with_a_note(tmp_path, encoder_for_errors):
    """As `streamk duplicates` does: the vector rule (the user asked for no verification), said."""
    from streamk.index import StreamingIndex
    from streamk.widgets import DuplicatesView

    rng = np.random.default_rng(0)
    x = rng.standard_normal(encoder_for_errors.dim).astype(np.float32)
    with StreamingIndex.create(tmp_path / "plain", encoder_for_errors, vector_dtype="float32") as plain:
        assert plain.vocabulary is None
        plain.add("x", vector=x)
        plain.add("x2", vector=x + 0.01 * rng.standard_normal(x.size).astype(np.float32))
        plain.add("y", vector=rng.standard_normal(x.size).astype(np.float32))
        want = plain.duplicates(neighbours=5, progress=False)
        view = DuplicatesView(plain, neighbours=5)
        assert view.errors.text == "" and view.rule == "vector"
        assert groups(view) == [list(g["ids"]) for g in want] == [["x", "x2"]]
        assert rows(view) == [("x", "x2", "similar vector")]
        note = view.note_view.value
        assert "other photos of the same scene" in note and "add-local-features" in note and str(plain.path) in note
        assert view.show.disabled and "1 group(s) of near-duplicates" in view.status.value
        view.image.value = "x2"  # one image: its near-duplicates by vector, said alike
        assert view.errors.text == "" and rows(view) == [("x2", "x", "similar vector")]
        assert groups(view) == [["x", "x2"]] and view.note_view.value == note
        view.image.value = "y"
        assert rows(view) == [] and "no near-duplicates found" in view.pairs_view.value


def test_a_thumbnail_falls_back_to_the_source_then_to_a_placeholder(index, tmp_path):
    from streamk.widgets import DuplicatesView

    idx, original, _ = index
    view = DuplicatesView(idx, run=False)
    assert view.searches == 0 and view.pairs_view.value == ""
    assert idx.thumbnail(original) is None
    assert view.thumbnail_uri(original).startswith("data:image/jpeg;base64,")  # made from its source file
    reads = view.thumbnails.reads
    view.thumbnail_uri(original)
    assert view.thumbnails.reads == reads  # read once
    view._thumbs.clear()
    src = idx.info("crop")["source"]
    moved = tmp_path / "moved.jpg"
    os.rename(src, moved)
    try:
        assert view.thumbnail_uri("crop").startswith("data:image/svg+xml")  # said, not raised
    finally:
        os.rename(moved, src)


@pytest.fixture(scope="module")
def encoder_for_errors():
    from helpers.index import make_encoder

    return make_encoder()


def test_a_sharded_index_is_shown_alike(index, tmp_path):
    """The same photos in 2 shards (their stored records, vectors and geometry): the same rows
    and groups as on one index."""
    from streamk.widgets import DuplicatesView

    idx, original, _ = index
    with sharded_copy(idx, tmp_path / "many", shards=2) as many:
        one, sharded = DuplicatesView(idx, neighbours=5), DuplicatesView(many, neighbours=5)
        assert sharded.errors.text == "" and rows(sharded) == rows(one)
        assert groups(sharded) == groups(one) == [sorted([original, "half", "crop"])]

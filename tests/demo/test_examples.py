"""Example collections: built once, reopened, ground truth consistent with the index."""

import json

import pytest

from streamk.errors import ConfigError
from streamk.demo.examples import build_example, open_example


def test_example_reopens_with_its_dataset(small_example_dir):
    ex = open_example(directory=small_example_dir)
    try:
        d = ex.dataset
        assert ex.name == "demo" and ex.info["n_images"] == len(ex.index) == d.n_images == 9
        assert sorted(ex.index.ids()) == sorted(d.image_ids)
        assert d.n_queries == 2 * 6  # two photos, one view per change
        for i, q in enumerate(d.queries):
            assert d.query_image_path(q).is_file()
            pos, junk = d.ground_truth()[i]
            # positives: the three database views of the query's scene
            scene = q.name.split("-", 1)[1].rsplit(".", 1)[0]
            assert sorted(d.image_ids[j] for j in pos) == sorted(
                i for i in d.image_ids if i.split(".")[0] == scene)
            assert len(junk) == 0
        for j in range(d.n_images):
            assert d.image_path(j).is_file()
            assert ex.index.info(d.image_ids[j])["source"] == str(d.image_path(j))
    finally:
        ex.close()


def test_open_example_does_not_rebuild(small_example_dir):
    stamp = (small_example_dir / "example.json").stat().st_mtime_ns
    open_example("demo", directory=small_example_dir, photos=1).close()  # options apply to a new build only
    assert (small_example_dir / "example.json").stat().st_mtime_ns == stamp


def test_refuses_a_foreign_folder(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="no streamk example"):
        build_example("demo", tmp_path, photos=1, max_queries=1, progress=False)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_interrupted_build_is_redone(tmp_path):
    folder = tmp_path / "ex"
    folder.mkdir()
    (folder / ".streamk-example").write_text("")
    (folder / "leftover").write_text("partial")
    ex = open_example(directory=folder, photos=1, max_queries=1, transforms=("crop",), progress=False)
    try:
        assert not (folder / "leftover").exists()
        assert len(ex.index) == 3 and ex.dataset.n_queries == 1
    finally:
        ex.close()


def test_unreadable_example_file_is_a_clear_error(tmp_path):
    (tmp_path / "example.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ConfigError, match="not a readable streamk example"):
        open_example(directory=tmp_path)


def test_unknown_example():
    with pytest.raises(ConfigError, match="unknown example"):
        build_example("nope", "/nonexistent")


@pytest.mark.slow
def test_paris_example(shared_data, tmp_path):
    pytest.importorskip("pyhesaff")
    ex = build_example("paris6k-subset", tmp_path / "paris", k=8, progress=False)
    try:
        assert len(ex.index) == ex.dataset.n_images == 250 and ex.dataset.n_queries == 12
        assert ex.dataset.crop_query and all(q.box is not None for q in ex.dataset.queries)
        # the query image is a database image; searching it finds itself first
        q = ex.dataset.queries[0]
        assert ex.index.search(str(ex.dataset.query_image_path(q)), k=1)[0][0] == q.image_id
    finally:
        ex.close()

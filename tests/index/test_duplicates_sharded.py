"""Copy classes on a sharded index whose images were ingested by relative paths: the pixel
check reads each image's source file wherever the process runs from (the source is stored
absolute, on every shard), and the pairs and classes are the single index's."""

import os

import pytest
from helpers.server import make_photos

Image = pytest.importorskip("PIL.Image")
pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_photos(tmp_path_factory.mktemp("photos"))


def test_relative_sources_inside_shards_give_the_single_index_classes(photos, tmp_path, monkeypatch):
    from streamk.index import ShardedIndex, StreamingIndex, copy_report, shard_of
    from streamk.pipeline import run_ingest

    folder = tmp_path / "collection"
    (folder / "edits").mkdir(parents=True)
    for n, p in enumerate(photos["paths"][:4]):
        Image.open(p).save(folder / f"p{n}.png")
    img = Image.open(folder / "p0.png").convert("L")
    img.save(folder / "edits" / "jpeg.jpg", quality=80)  # copies of p0, known edits
    img.crop((0, 0, int(0.9 * img.width), int(0.9 * img.height))).save(folder / "edits" / "crop.png")
    files = ["p0.png", "p1.png", "p2.png", "p3.png", os.path.join("edits", "jpeg.jpg"),
             os.path.join("edits", "crop.png")]
    kw = {"vector_dtype": "float32", "extractor": photos["extractor"], "vocabulary": photos["vocabulary"]}
    StreamingIndex.create(tmp_path / "one", photos["encoder"], **kw).close()
    ShardedIndex.create(tmp_path / "three", photos["encoder"], shards=3, **kw).close()
    monkeypatch.chdir(folder)  # the files named relative to the collection, as `cd photos; streamk ingest ...` does
    for name in ("one", "three"):
        stats = run_ingest(tmp_path / name, files, workers=1, progress=False, log=lambda *a, **k: None)
        assert stats.added == len(files), stats
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # read from another folder: relative sources would be lost
    with StreamingIndex.open(tmp_path / "one") as one, ShardedIndex.open(tmp_path / "three") as three:
        ids = three.ids()
        assert ids == one.ids() and len({shard_of(i, 3) for i in ids}) > 1
        expected = {os.path.realpath(folder / f) for f in files}  # stored absolute, whatever the folder
        for index in (one, three):
            sources = [index.info(i)["source"] for i in ids]
            assert all(os.path.isabs(s) for s in sources) and {os.path.realpath(s) for s in sources} == expected
        assert all(three.thumbnail(i) is None for i in ids)  # the pixels can only come from the files
        want, got = copy_report(one, progress=False), copy_report(three, progress=False)
    copies = {frozenset((p["a"], p["b"])): p for p in got["pairs"] if p["class"] == "copy"}
    names = {f: i for i in ids for f in (i, os.path.basename(i))}
    group = {names["p0.png"], names["jpeg.jpg"], names["crop.png"]}
    assert set(copies) == {frozenset((a, b)) for a in group for b in group if a < b}, got["pairs"]
    assert all(p["agreement"] is not None and p["agreement"] > 0 for p in copies.values())  # pixels were read
    assert [sorted(g["ids"]) for g in got["groups"]] == [sorted(group)]

    def classed(report):
        return {(p["a"], p["b"]): (p["class"], p["inliers"], p["covered"], p["agreement"]) for p in report["pairs"]}
    assert classed(got) == classed(want) and got["groups"] == want["groups"]

"""``streamk serve`` on a sharded index: ``GET /images/{id}/duplicates`` gives the pairs and
copy classes that the single index gives on the same images (each pair verified from the
shard that holds each image), copies made in the test classed copy, other photos not."""

import os

import pytest
from helpers.copies import sharded_copy
from helpers.server import make_index

Image = pytest.importorskip("PIL.Image")


def _copies(photos, folder):
    """Two copies of photo p0 with known edits: re-encoded as JPEG, cropped to 90 % a side."""
    folder.mkdir()
    img = Image.open(photos["paths"][0]).convert("L")
    img.save(folder / "jpeg.jpg", quality=80)
    w, h = img.size
    img.crop((0, 0, int(0.9 * w), int(0.9 * h))).save(folder / "crop.png")
    return {"jpeg": folder / "jpeg.jpg", "crop": folder / "crop.png"}


def test_a_sharded_index_serves_the_single_index_duplicate_classes(photos, tmp_path, make_server):
    from streamk.index import StreamingIndex, shard_of

    copies = _copies(photos, tmp_path / "copies")
    make_index(tmp_path / "one", photos, n=4)
    with StreamingIndex.open(tmp_path / "one") as single:
        for image_id, path in copies.items():
            single.add(image_id, image_path=str(path))
        ids = single.ids()
        sharded_copy(single, tmp_path / "three", shards=3).close()
    assert len({shard_of(i, 3) for i in ("p0", "jpeg", "crop")}) == 3  # every pair of the group spans shards
    folders = ["--images", os.path.dirname(photos["paths"][0]), "--images", str(tmp_path / "copies")]
    answers = {}
    for name in ("one", "three"):
        srv = make_server(tmp_path / name, args=["--workers", "1", *folders])
        with srv.client() as c:
            assert c.get("/stats").json()["shards"] == (3 if name == "three" else 1)
            answers[name] = {i: c.get(f"/images/{i}/duplicates").json() for i in ids}
    for i in ids:
        one, three = answers["one"][i], answers["three"][i]
        assert one["rule"] == three["rule"] == "classes", (one, three)
        assert [d["id"] for d in three["duplicates"]] == [d["id"] for d in one["duplicates"]]
        assert len(three["pairs"]) == len(one["pairs"])
        for p, q in zip(three["pairs"], one["pairs"]):
            assert abs(p.pop("score") - q.pop("score")) <= 2e-4  # the same vectors, searched per shard
            assert p == q, i
    # the edits made here: p0 and its two copies are copies of one another, nothing else is
    classes = {(i, p["b"]): p["class"] for i in ids for p in answers["three"][i]["pairs"]}
    for a, b in (("p0", "jpeg"), ("p0", "crop"), ("jpeg", "crop")):
        assert classes.get((a, b)) == classes.get((b, a)) == "copy", classes
    assert all(c == "same scene" for (a, b), c in classes.items() if {a, b} - {"p0", "jpeg", "crop"}), classes


def test_copies_without_pixels_to_compare_say_how_to_class_them(photos, tmp_path, make_server):
    """A server started without --images reads no file of the collection: copies whose
    geometry is a copy's are kept as "same scene" (keep both), and the answer said nothing
    of it while `streamk duplicates` on the same index said "copy". The note says what to do."""
    from streamk.index import StreamingIndex

    copies = _copies(photos, tmp_path / "copies")
    make_index(tmp_path / "one", photos, n=4)
    with StreamingIndex.open(tmp_path / "one") as single:
        for image_id, path in copies.items():
            single.add(image_id, image_path=str(path))
    srv = make_server(tmp_path / "one", args=["--workers", "1"])
    assert "no --images folder: /images/{id}/duplicates cannot read the pixels" in srv.log()  # said at start
    with srv.client() as c:
        answer = c.get("/images/p0/duplicates").json()
    kept = [p for p in answer["pairs"] if p["b"] in copies]
    assert [p["class"] for p in kept] == ["same scene"] * 2 and answer["duplicates"] == [], answer
    assert answer["note"] == ("2 pair(s) have the geometry of a copy but no pixels to compare (no --images folder "
                              "was given): they are kept as same scene; start the server with --images FOLDER, the "
                              "folder the images were ingested from, to class them")
    folders = ["--images", os.path.dirname(photos["paths"][0]), "--images", str(tmp_path / "copies")]
    srv = make_server(tmp_path / "one", args=["--workers", "1", *folders])
    with srv.client() as c:
        answer = c.get("/images/p0/duplicates").json()
    assert "no --images" not in srv.log()
    assert answer["note"] is None and sorted(d["id"] for d in answer["duplicates"]) == ["crop", "jpeg"]

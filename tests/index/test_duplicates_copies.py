"""The index's copies report (streamk.index.duplicates.copy_report / copies_of): each verified
pair classed exact / copy / same scene with its score, inliers, covered fraction and
agreement; groups made of copy pairs only; the JSON carries the schema version."""

import io
import json

import numpy as np
import pytest

from helpers.copies import invalides_with_copies, sharded_copy
from streamk.index import copies_of, copy_report
from streamk.schema import JSON_SCHEMA_VERSION

Image = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def index(paris6k_subset_photos, small_vocabulary, tmp_path_factory):
    """6 Invalides photos (same-landmark negatives) and two edited copies of one of them."""
    idx, photos = invalides_with_copies(paris6k_subset_photos, small_vocabulary, tmp_path_factory.mktemp("copies"), 6,
                                        extra=[("elsewhere", paris6k_subset_photos[0])])  # La Defense: no pair
    yield idx, photos[0].stem, photos[0]
    idx.close()


def test_the_report_classes_pairs_and_groups_copies_only(index):
    idx, original, _ = index
    report = copy_report(idx, neighbours=7, progress=False)
    assert report["schema_version"] == JSON_SCHEMA_VERSION
    json.dumps(report)  # plain JSON
    for p in report["pairs"]:
        assert set(p) >= {"a", "b", "class", "score", "inliers", "covered", "agreement", "reason"}
        assert p["class"] in ("exact", "copy", "same scene")
    copies = {frozenset((p["a"], p["b"])) for p in report["pairs"] if p["class"] == "copy"}
    assert frozenset((original, "half")) in copies and frozenset((original, "crop")) in copies
    assert all(p["class"] != "copy" for p in report["pairs"] if {p["a"], p["b"]} & {original, "half", "crop"} == set())
    assert [sorted(g["ids"]) for g in report["groups"]] == [sorted([original, "half", "crop"])]
    assert all(p["class"] in ("exact", "copy") for g in report["groups"] for p in g["pairs"])


def test_copies_of_one_image(index):
    idx, original, _ = index
    pairs = copies_of(idx, "half", neighbours=7)
    kinds = {p.b: p.kind for p in pairs}
    assert kinds.get(original) == "copy"
    assert pairs[0].kind in ("exact", "copy")  # most alike first
    d = pairs[0].to_dict()
    assert d["a"] == "half" and 0 < d["covered"] <= 1 and d["inliers"] > 0


def test_a_quarter_turned_copy_is_found_with_turned_queries(index, tmp_path):
    idx, original, path = index
    src = Image.open(path)
    buf = io.BytesIO()
    src.convert("RGB").transpose(Image.Transpose.ROTATE_90).save(buf, "JPEG", quality=90)
    (tmp_path / "turned.jpg").write_bytes(buf.getvalue())
    idx.add("turned", image_path=str(tmp_path / "turned.jpg"))
    try:
        plain = {p.b: p.kind for p in copies_of(idx, "turned", neighbours=9)}
        assert plain.get(original) != "copy"  # upright features do not match across a quarter turn
        turned = [p for p in copies_of(idx, "turned", neighbours=9, rotations=True) if p.b == original]
        assert turned and turned[0].kind == "copy" and turned[0].turns in (1, 2, 3)
    finally:
        idx.remove(["turned"])


def test_cli_classes_report_and_says_when_there_is_none(index, capsys):
    from streamk.cli import main

    idx, original, _ = index
    assert main(["duplicates", str(idx.path), "--classes", "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema_version"] == JSON_SCHEMA_VERSION
    assert [sorted(g["ids"]) for g in report["groups"]] == [sorted([original, "half", "crop"])]
    assert main(["duplicates", str(idx.path), "--classes", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "group 1 (3 images, copies of one capture: keep one)" in out and "copy" in out
    assert main(["duplicates", str(idx.path), "--classes", "--id", "elsewhere"]) == 0
    assert capsys.readouterr().out.startswith("no duplicates of elsewhere")
    assert main(["duplicates", str(idx.path), "--classes", "--id", "elsewhere", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"schema_version": JSON_SCHEMA_VERSION, "rule": "classes",
                                                   "id": "elsewhere", "pairs": []}
    assert main(["duplicates", str(idx.path), "--classes", "--threshold", "0.5"]) == 2  # one rule or the other
    assert main(["duplicates", str(idx.path), "--verify", "--threshold", "0.5"]) == 2
    assert main(["duplicates", str(idx.path), "--rotations", "--threshold", "0.5"]) == 2


def test_by_default_copies_are_grouped_and_other_photos_of_the_place_are_not(index, tmp_path, capsys):
    """An index with local geometry: plain ``streamk duplicates`` (and --verify, --id, the
    server's route) gives the classes; a JPEG re-encoded copy joins its original, the other
    photos of the Invalides (same place, other captures) stay apart; --threshold asks for the
    vector rule, said on stderr."""
    from fastapi.testclient import TestClient

    from streamk.cli import main
    from streamk.server import Service, create_app

    idx, original, path = index
    others = sorted(i for i in idx.ids() if i not in (original, "half", "crop", "elsewhere"))
    other_path = path.parent / (others[0] + path.suffix)
    Image.open(other_path).convert("RGB").save(tmp_path / "reencoded.jpg", "JPEG", quality=75)
    idx.add("reencoded", image_path=str(tmp_path / "reencoded.jpg"))
    try:
        expected = sorted([sorted([original, "half", "crop"]), sorted([others[0], "reencoded"])])
        for extra in ([], ["--verify"], ["--classes"]):
            assert main(["duplicates", str(idx.path), "--json", "--no-progress"] + extra) == 0
            report = json.loads(capsys.readouterr().out)
            assert report["rule"] == "classes" and sorted(sorted(g["ids"]) for g in report["groups"]) == expected
            for g in report["groups"]:  # never two captures of the place in one group
                assert len(set(g["ids"]) & set(others + [original])) == 1, g
        assert main(["duplicates", str(idx.path), "--no-progress"]) == 0
        captured = capsys.readouterr()
        assert "2 group(s) of copies, 5 images" in captured.out and "by vector similarity" not in captured.err
        assert main(["duplicates", str(idx.path), "--id", "reencoded", "--json"]) == 0
        pairs = json.loads(capsys.readouterr().out)["pairs"]
        assert [p["b"] for p in pairs if p["class"] != "same scene"] == [others[0]]
        assert all(p["class"] == "same scene" for p in pairs if p["b"] != others[0])
        assert main(["duplicates", str(idx.path), "--threshold", "0.5", "--no-progress"]) == 0
        assert "by vector similarity only (asked with --threshold" in capsys.readouterr().err
        with pytest.warns(DeprecationWarning, match="copy_report"):  # the library: the same groups
            groups = idx.duplicates(verify=True, progress=False)
        assert sorted(sorted(g["ids"]) for g in groups) == expected
        with pytest.warns(DeprecationWarning, match="copies_of"):
            assert [h.id for h in idx.duplicates("reencoded", verify=True)] == [others[0]]
        service = Service(idx.path, workers=1, writable=False, collection=(str(path.parent), str(tmp_path)))
        service.open()
        with TestClient(create_app(service)) as c:
            answer = c.get("/images/reencoded/duplicates").json()
            assert answer["rule"] == "classes" and answer["note"] is None
            assert [d["id"] for d in answer["duplicates"]] == [others[0]] and answer["duplicates"][0]["verified"]
            assert {p["b"] for p in answer["pairs"]} >= {others[0]}
    finally:
        idx.remove(["reencoded"])


def test_a_sharded_index_gives_the_same_classes_with_pairs_across_shards(index, tmp_path, capsys):
    """The same photos in a 3-shard index: the same pairs, classes and groups as one index
    (pixels from the source files: no thumbnails), copies on other shards than their original;
    ``streamk duplicates`` on it gives the classes."""
    from streamk.index import shard_of

    idx, original, _ = index
    many = sharded_copy(idx, tmp_path / "many", shards=3)
    try:
        want = copy_report(idx, neighbours=7, progress=False)
        got = copy_report(many, neighbours=7, progress=False)

        def classed(report):
            return {(p["a"], p["b"]): (p["class"], p["inliers"], p["covered"], p["agreement"]) for p in report["pairs"]}
        assert classed(got) == classed(want) and got["groups"] == want["groups"]
        [group] = got["groups"]
        assert sorted(group["ids"]) == sorted([original, "half", "crop"])
        assert len({shard_of(i, 3) for i in group["ids"]}) > 1  # pairs across shards
        assert [p.to_dict() for p in copies_of(many, "half", neighbours=7)][0]["class"] == "copy"
        many.add("vector-only", vector=idx.vector(original))  # no geometry
        ids = idx.ids()[::-1] + ["vector-only", original]  # every shard, out of order, one id twice
        assert many.geometries(ids) == [idx.geometry(i) for i in ids[:-2]] + [None, idx.geometry(original)]
        assert idx.geometries(ids[:-2]) == [idx.geometry(i) for i in ids[:-2]] and many.geometries([]) == []
    finally:
        many.close()
    from streamk.cli import main

    assert main(["duplicates", str(tmp_path / "many"), "--json", "--no-progress", "--neighbours", "7"]) == 0
    cli = json.loads(capsys.readouterr().out)  # the CLI on the sharded index: the classes too
    assert cli["rule"] == "classes" and cli["groups"] == want["groups"]


def test_the_servers_duplicates_answer_carries_the_classes(index):
    from fastapi.testclient import TestClient

    from streamk.server import Service, create_app

    idx, original, path = index
    folders = (str(path.parent), str(idx.path.parent))  # the collection: where the photos and the copies lie
    service = Service(idx.path, workers=1, writable=False, collection=folders)
    service.open()
    with TestClient(create_app(service)) as c:
        r = c.get("/images/half/duplicates", params={"classes": "true"})
        assert r.status_code == 200, r.text
        pairs = r.json()["pairs"]
        assert {p["b"]: p["class"] for p in pairs}.get(original) == "copy", pairs
        assert set(pairs[0]) == {"a", "b", "class", "score", "inliers", "covered", "agreement", "turns", "mirrored",
                                 "reason"}
        vector = c.get("/images/half/duplicates", params={"classes": "false"}).json()  # the vector rule, asked
        assert vector["pairs"] is None and vector["rule"] == "vector" and "same scene" in vector["note"]
        assert c.get("/images/half/duplicates").json()["pairs"] == pairs  # the classes: the default here
        assert c.get("/images/half/duplicates").headers["Streamk-Schema-Version"]
    service2 = Service(idx.path, workers=1, writable=False)  # no collection: no file read, so no copy
    service2.open()
    with TestClient(create_app(service2)) as c:
        pairs = c.get("/images/half/duplicates", params={"classes": "true"}).json()["pairs"]
        assert all(p["class"] != "copy" for p in pairs), pairs


def test_ingest_on_duplicate_skips_copies_and_keeps_other_photos_of_the_scene(index, paris6k_subset_photos,
                                                                              tmp_path):
    from streamk.pipeline.ingest import Ingester

    idx, original, path = index
    img = Image.open(path).convert("RGB")
    a = (np.asarray(img, np.float32) / 255.0) ** 1.4  # a toned copy
    Image.fromarray((a * 255 + 0.5).astype(np.uint8)).save(tmp_path / "toned.jpg", quality=85)
    stored = {p.stem for p in paris6k_subset_photos if idx.records([p.stem])[0] is not None}
    other = next(p for p in paris6k_subset_photos if "invalides" in p.name and p.stem not in stored
                 and p.name > path.name)  # another photo of the landmark, not in the index
    reports = []
    with Ingester(idx, workers=1, progress=False, on_duplicate="skip",
                  report=lambda p, reason: reports.append((p, reason))) as ing:
        stats = ing.ingest([str(tmp_path / "toned.jpg"), str(other)])
    try:
        assert stats.skipped_near_duplicates == 1, reports
        assert [(n[0], n[2]) for n in stats.near_duplicates] == [(str(tmp_path / "toned.jpg"), original)]
        assert any("copy: similarity" in reason and "inliers" in reason for _, reason in reports), reports
        assert idx.records([other.name])[0] is not None  # added: another photo, whatever its vector score
    finally:
        idx.remove([i for i in (other.name, "toned.jpg") if idx.records([i])[0] is not None])


def test_a_mirrored_copy_is_found_with_the_mirrored_query(index, tmp_path):
    idx, original, path = index
    Image.open(path).convert("RGB").transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(tmp_path / "m.jpg", quality=90)
    idx.add("mirror", image_path=str(tmp_path / "m.jpg"))
    try:
        assert {p.b: p.kind for p in copies_of(idx, "mirror", neighbours=9)}.get(original) != "copy"
        found = [p for p in copies_of(idx, "mirror", neighbours=9, mirrored=True) if p.b == original]
        assert found and found[0].kind == "copy" and found[0].mirrored and found[0].to_dict()["mirrored"]
    finally:
        idx.remove(["mirror"])

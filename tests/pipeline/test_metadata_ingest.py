"""Metadata through ingestion and the CLI (``ingest --metadata``, ``index create
--index-field``, ``index field``, ``search --where``), and near-duplicates: a photo
re-encoded, resized and cropped a little found as one group (``streamk duplicates``, also
verified by the second stage), and ``ingest --on-duplicate skip|report``."""

import json
import os

import numpy as np
import pytest

from streamk.cli import main
from streamk.index import StreamingIndex
from streamk.schema import JSON_SCHEMA_VERSION

pytest.importorskip("cv2")
PIL = pytest.importorskip("PIL")
from helpers.images import textured  # noqa: E402
from PIL import Image  # noqa: E402

CHANGED = ["p0_crop.png", "p0_q50.jpg", "p0_small.png"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Photos p0..p5 (textures), three changes of p0 (cropped a little, re-encoded as JPEG,
    resized to 75 %) and an encoder."""
    from streamk import Encoder
    from streamk.features import make_extractor
    from streamk.pipeline import extract_many

    root = tmp_path_factory.mktemp("dups")
    photos, changed = root / "photos", root / "changed"
    for i in range(6):
        textured(str(photos / f"p{i}.png"), i, size=256)
    img = Image.open(photos / "p0.png").convert("L")
    changed.mkdir()
    w, h = img.size
    img.crop((10, 8, w - 6, h - 10)).save(changed / "p0_crop.png")
    exif = Image.Exif()
    exif[0x0132] = "2021:05:06 07:08:09"  # DateTime
    img.save(changed / "p0_q50.jpg", quality=50, exif=exif)
    img.resize((192, 192), Image.Resampling.LANCZOS).save(changed / "p0_small.png")
    feats, _ = extract_many(sorted(str(p) for p in photos.glob("*.png")), make_extractor("sift"), workers=1,
                            progress=False)
    Encoder(embedding="vlad", k=4, aggregation="gmp").fit([f.descriptors for f in feats.values()]).save(
        root / "enc.npz")
    from streamk.verification import Vocabulary  # visual words, for an index made with local geometry

    Vocabulary(n_coarse=8, n_fine=8, min_per_word=4, seed=0).fit(
        np.concatenate([f.descriptors for f in feats.values()])).save(root / "words.npz")
    return root


def create(path, work, *extra):
    assert main(["index", "create", str(path), "--encoder", str(work / "enc.npz"), "--extractor", "sift",
                 "--vector-dtype", "float32", *extra]) == 0


def test_ingest_metadata_file_and_filters_from_the_cli(work, tmp_path, capsys):
    ix = tmp_path / "ix"
    create(ix, work, "--index-field", "album")
    meta = tmp_path / "meta.jsonl"
    meta.write_text(json.dumps({"id": "p1.png", "album": "paris", "stars": 4}) + "\n\n"
                    + json.dumps({"path": str(work / "photos" / "p2.png"), "album": "rome"}) + "\n"
                    + json.dumps({"id": "p0_q50.jpg", "album": "paris"}) + "\n")
    assert main(["ingest", str(ix), str(work / "photos"), str(work / "changed" / "p0_q50.jpg"), "--workers", "1",
                 "--no-progress", "--metadata", str(meta)]) == 0
    capsys.readouterr()
    with StreamingIndex.open(ix) as idx:
        m = idx.metadata("p1.png")
        src = work / "photos" / "p1.png"
        assert m["album"] == "paris" and m["stars"] == 4
        assert m["path"] == str(src) and m["folder"] == str(work / "photos") and m["name"] == "p1.png"
        assert m["size"] == os.path.getsize(src) and m["mtime"] == os.stat(src).st_mtime and "date" not in m
        assert idx.metadata("p2.png")["album"] == "rome" and "album" not in idx.metadata("p3.png")
        assert idx.metadata("p0_q50.jpg")["date"] == "2021-05-06 07:08:09"  # EXIF DateTime
    # filters from the command line
    assert main(["search", str(ix), str(work / "photos" / "p0.png"), "-k", "10", "--json", "--verify", "0",
                 "--where", '{"album": "paris"}']) == 0
    assert sorted(h["id"] for h in json.loads(capsys.readouterr().out)) == ["p0_q50.jpg", "p1.png"]
    assert main(["search", str(ix), str(work / "photos" / "p0.png"), "--where", '{"stars": 4}']) == 2
    err = capsys.readouterr().err
    assert "not indexed" in err and "streamk index field" in err and len(err.strip().splitlines()) == 1
    assert main(["search", str(ix), str(work / "photos" / "p0.png"), "--where", '{"album": {"near": 1}}']) == 2
    assert "a filter is a JSON object" in capsys.readouterr().err
    assert main(["index", "field", str(ix), "stars", "folder"]) == 0
    assert "indexed fields: album, stars, folder" in capsys.readouterr().out
    assert main(["search", str(ix), str(work / "photos" / "p0.png"), "--json", "--verify", "0",
                 "--where", json.dumps({"stars": {"gte": 3}, "folder": str(work / "photos")})]) == 0
    assert [h["id"] for h in json.loads(capsys.readouterr().out)] == ["p1.png"]
    # the metadata file of a later run is merged into images already stored
    meta.write_text(json.dumps({"id": "p3.png", "album": "oslo"}) + "\n")
    assert main(["ingest", str(ix), str(work / "photos"), "--workers", "1", "--no-progress", "--metadata",
                 str(meta)]) == 0
    assert "added 0, skipped 6 existing" in capsys.readouterr().out
    with StreamingIndex.open(ix) as idx:
        assert idx.metadata("p3.png")["album"] == "oslo" and idx.metadata("p3.png")["name"] == "p3.png"


@pytest.mark.parametrize("content,what", [
    ("not json\n", "not a JSON object"), ('{"album": "x"}\n', '"id" or "path"'),
    ('{"id": "a", "path": "b"}\n', '"id" or "path"'), ('{"id": 3}\n', "must be a string"),
    ('{"id": "a", "x": "' + "y" * 70000 + '"}\n', "at most"),
])
def test_a_bad_metadata_file_is_refused_before_anything_is_written(work, tmp_path, capsys, content, what):
    ix = tmp_path / "ix"
    create(ix, work)
    meta = tmp_path / "meta.jsonl"
    meta.write_text(content)
    assert main(["ingest", str(ix), str(work / "photos"), "--workers", "1", "--no-progress",
                 "--metadata", str(meta)]) == 3
    err = capsys.readouterr().err
    assert what in err and len(err.strip().splitlines()) == 1
    with StreamingIndex.open(ix) as idx:
        assert len(idx) == 0


def test_duplicates_groups_the_changed_photos(work, tmp_path, capsys):
    ix = tmp_path / "ix"
    create(ix, work)
    assert main(["ingest", str(ix), str(work / "photos"), str(work / "changed"), "--workers", "1",
                 "--no-progress"]) == 0
    capsys.readouterr()
    # no local geometry: groups by vector similarity, saying they may hold other photos of the scene
    assert main(["duplicates", str(ix), "--json", "--no-progress"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["schema_version"] == JSON_SCHEMA_VERSION and answer["rule"] == "vector"
    assert "same scene" in answer["note"] and "streamk index add-local-features" in answer["note"]
    groups = answer["groups"]
    assert [sorted(g["ids"]) for g in groups] == [sorted(["p0.png"] + CHANGED)]
    assert all(p[2] >= 0.5 and p[3] is None for p in groups[0]["pairs"])
    assert main(["duplicates", str(ix), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "1 group(s) of near-duplicates, 4 images" in captured.out
    note = captured.err.strip().splitlines()
    assert len(note) == 1 and "by vector similarity only" in note[0] and "add-local-features" in note[0]
    # the classes need the second stage
    for asked in ("--verify", "--classes"):
        assert main(["duplicates", str(ix), asked]) == 2  # no local geometry yet: says how to add it
        assert "add-local-features" in capsys.readouterr().err
    assert main(["index", "add-local-features", str(ix), "--workers", "1", "--no-cache"]) == 0
    capsys.readouterr()
    # with local geometry, the default (--verify says the same): each pair classed, groups of copies only
    for extra in ([], ["--verify"]):
        assert main(["duplicates", str(ix), "--json", "--no-progress"] + extra) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["schema_version"] == JSON_SCHEMA_VERSION and report["rule"] == "classes"
        assert [sorted(g["ids"]) for g in report["groups"]] == [sorted(["p0.png"] + CHANGED)]
        assert all(p["class"] in ("exact", "copy") and p["inliers"] > 0 for p in report["groups"][0]["pairs"])
    # one image
    assert main(["duplicates", str(ix), "--id", "p0.png", "--json"]) == 0
    pairs = json.loads(capsys.readouterr().out)["pairs"]
    assert sorted(p["b"] for p in pairs if p["class"] != "same scene") == sorted(CHANGED)
    assert main(["duplicates", str(ix), "--id", "p0.png", "--threshold", "0.5", "--json"]) == 0  # the vector rule
    hits = json.loads(capsys.readouterr().out)["duplicates"]
    assert sorted(h["id"] for h in hits) == sorted(CHANGED)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    with StreamingIndex.open(ix) as idx:
        assert idx.duplicates("p1.png") == []
        with pytest.warns(DeprecationWarning, match="copies_of"):  # verify=True: the copy classes since 0.3
            verified = idx.duplicates("p0.png", verify=True)
        assert sorted(h.id for h in verified) == sorted(CHANGED) and all(h.inliers >= 12 for h in verified)
        assert idx.duplicates(threshold=0.999) == []  # no two photos are that close
    with StreamingIndex.open(ix) as idx:  # the second stage (verification, expansion) keeps to a filter
        idx.index_field("name")
        where = {"name": {"in": ["p0_crop.png", "p0_small.png", "p1.png", "p2.png"]}}
        hits = idx.search(str(work / "photos" / "p0.png"), k=10, where=where)
        assert {h.id for h in hits} == {"p0_crop.png", "p0_small.png", "p1.png", "p2.png"}
        assert hits[0].verified and hits[1].verified and {hits[0].id, hits[1].id} == {"p0_crop.png", "p0_small.png"}
    with pytest.raises(SystemExit) as exit_:  # argparse refuses it
        main(["duplicates", str(ix), "--threshold", "1.5"])
    assert exit_.value.code == 2
    assert main(["duplicates", str(ix), "--id", "nope"]) == 4


@pytest.mark.parametrize("kind", [[], ["--shards", "2"]], ids=["one", "sharded"])
def test_ingest_on_duplicate_skip_and_report(work, tmp_path, capsys, kind):
    """The same rule on both kinds of index (a sharded one took the vector rule, without
    classes: other photos of a place were skipped as near-duplicates); "report" says a pair
    once the image is written, not as a skipped file, and a file whose bytes are already
    stored is said once (it was "near-duplicate ...; added", then "not added", counted twice)."""
    from streamk.index import open_index

    ix = tmp_path / "ix"
    create(ix, work, "--vocabulary", str(work / "words.npz"), *kind)
    assert main(["ingest", str(ix), str(work / "photos"), "--workers", "1", "--no-progress"]) == 0
    capsys.readouterr()
    # skip: the changed copies of p0 stay out (one of them against another of the same batch too)
    assert main(["ingest", str(ix), str(work / "changed"), "--workers", "1", "--no-progress",
                 "--on-duplicate", "skip"]) == 0
    captured = capsys.readouterr()
    assert "added 0, skipped 0 existing, 3 near-duplicates skipped" in captured.out
    assert captured.err.count("near-duplicate of 'p0.png' (copy: ") == 3, captured.err  # the class, not a score only
    assert captured.err.count("; not added\n") == 3
    with open_index(ix) as idx:
        assert len(idx) == 6
    # report: added, and each pair reported
    assert main(["ingest", str(ix), str(work / "changed"), "--workers", "1", "--no-progress",
                 "--on-duplicate", "report", "--batch-size", "1"]) == 0
    captured = capsys.readouterr()
    assert "added 3" in captured.out and "3 near-duplicates" in captured.out
    assert captured.err.count("added; a near-duplicate of 'p0.png' (copy: ") == 3, captured.err
    assert "skipped" not in captured.err
    with open_index(ix) as idx:
        assert len(idx) == 9
    # the same bytes as a stored image: one line, counted once
    (tmp_path / "twin").mkdir()
    (tmp_path / "twin" / "p3-again.png").write_bytes((work / "photos" / "p3.png").read_bytes())
    assert main(["ingest", str(ix), str(tmp_path / "twin"), "--workers", "1", "--no-progress",
                 "--on-duplicate", "report"]) == 0
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        f"streamk: skipped {tmp_path / 'twin' / 'p3-again.png'}: the same bytes are already indexed as 'p3.png'; "
        f"not added as 'p3-again.png'"]
    assert "added 0, skipped 0 existing and 1 with the bytes of another id, failed 0" in captured.out
    # keep (default): nothing looked up
    ix2 = tmp_path / "ix2"
    create(ix2, work)
    assert main(["ingest", str(ix2), str(work / "photos"), str(work / "changed"), "--workers", "1",
                 "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "added 9" in captured.out and "near-duplicate" not in captured.err

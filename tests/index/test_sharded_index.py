"""The sharded index: routing, equality with one index holding the same images (exact
mode), a codec trained once for all shards, and shards owned by Dask actors
(LocalCluster of 2 worker processes) while ingestion and searches go on."""

import json
import threading

import numpy as np
import pytest

from helpers.index import DIM, make_encoder, vectors  # noqa: F401
from streamk import Encoder
from streamk.errors import ConfigError, DuplicateError, ImageReadError, IndexExistsError, UnknownIdError
from streamk.index import StreamingIndex, encoded_vector
from streamk.index.sharded import ShardActor, ShardedIndex, is_sharded, open_index, shard_of
from streamk.quantization import IVFPQ

@pytest.fixture(scope="module")
def encoder():
    return make_encoder()



def test_routing_is_stable_and_spreads_ids():
    ids = [f"img{i}" for i in range(3000)]
    shards = [shard_of(i, 4) for i in ids]
    assert shards == [shard_of(i, 4) for i in ids]  # the same every time (no per-process hash seed)
    assert shard_of("img0", 4) == int.from_bytes(__import__("hashlib").sha256(b"img0").digest()[:8], "big") % 4
    counts = np.bincount(shards, minlength=4)
    assert counts.min() > 650  # about 750 each


def test_sharded_equals_one_index(tmp_path, encoder):
    V = vectors(1, 600)
    one = StreamingIndex.create(tmp_path / "one", encoder, vector_dtype="float32")
    many = ShardedIndex.create(tmp_path / "many", encoder, shards=3, vector_dtype="float32")
    try:
        assert is_sharded(tmp_path / "many") and not is_sharded(tmp_path / "one")
        items = [{"id": f"v{i}", "vector": v} for i, v in enumerate(V)]
        one.add_many(items)
        assert [r.status for r in many.add_many(items, batch_size=128)] == ["added"] * 600
        for s in range(3):  # each image in its shard, and only there
            assert all(shard_of(i, 3) == s for i in many._owners[s].call(ShardActor.ids))
        assert len(many) == 600 and many.ids() == one.ids()
        # updates and removals routed the same way
        for idx in (one, many):
            idx.remove(["v3", "v400"])
            idx.write_encoded([encoded_vector("v7", V[500] + 0.3, many.dim)], replace=True)
        with pytest.raises(UnknownIdError):
            many.remove(["v5", "nope"])
        assert "v5" in many and len(many) == 598
        # content de-duplicated across shards: "dup" and "v10" route to different shards
        assert shard_of("dup", 3) != shard_of("v10", 3)
        assert isinstance(many.write_encoded([encoded_vector("dup", V[10], many.dim)])[0], DuplicateError)
        many.remove(["v10"])  # frees its content
        assert many.write_encoded([encoded_vector("dup", V[10], many.dim)]) == ["added"]
        many.remove(["dup"])
        one.remove(["v10"])
        # a claim whose holder never stored the content (a crash between claim and write)
        ghost = encoded_vector("ghost", V[20] + 1.0, many.dim)
        many._claims(ShardActor.claim, [(ghost.content, "ghost")])
        assert many.write_encoded([encoded_vector("real", V[20] + 1.0, many.dim)]) == ["added"]
        many.remove(["real"])
        Q = vectors(2, 20)
        s1, i1 = one.search(Q, k=10, mode="exact")
        s2, i2 = many.search(Q, k=10, mode="exact")
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_allclose(s1, s2, atol=1e-6)
        assert many.search(V[11], k=1) == [("v11", pytest.approx(1.0, abs=1e-6))]
        # one codec trained on a sample of every shard, shared by all
        codec = many.train(nlist=4, M=8, train_size=400)
        for st in many.stats()["per_shard"]:
            assert st["codec"] == codec.describe()
        _, found = many.search(Q, k=10, mode="pq", nprobe=4, rerank=100)
        assert (found == i1).mean() > 0.9
        info = many.stats()
        assert info["images"] == 597 and info["shards"] == 3
    finally:
        one.close()
        many.close()
    with open_index(tmp_path / "many", readonly=True) as again:
        assert isinstance(again, ShardedIndex) and len(again) == 597
    with pytest.raises(IndexExistsError):
        ShardedIndex.create(tmp_path / "many", encoder, shards=2)
    with pytest.raises(ConfigError):
        ShardedIndex.create(tmp_path / "zero", encoder, shards=0)


def test_cli_sharded_index(tmp_path, encoder, capsys):
    from streamk.cli import main

    encoder.save(tmp_path / "enc.npz")
    ix = tmp_path / "ix"
    assert main(["index", "create", str(ix), "--encoder", str(tmp_path / "enc.npz"), "--shards", "2",
                 "--vector-dtype", "float32"]) == 0
    assert "in 2 shards" in capsys.readouterr().out
    with open_index(ix) as idx:
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(vectors(3, 300))])
    assert main(["index", "train", str(ix), "--M", "8"]) == 0
    assert main(["index", "info", str(ix), "--json"]) == 0
    out = capsys.readouterr().out
    info = json.loads(out[out.index("{"):])
    assert info["images"] == 300 and info["shards"] == 2 and info["codec"].startswith("PQ")


# ------------------------------------------------------------------ on a Dask cluster
def test_shards_owned_by_dask_actors(tmp_path, encoder, client):
    V = vectors(4, 500)
    items = [{"id": f"v{i}", "vector": v} for i, v in enumerate(V)]
    with ShardedIndex.create(tmp_path / "d", encoder, shards=2, vector_dtype="float32", dask=client) as idx:
        assert all(o.__class__.__name__ == "_Remote" for o in idx._owners)
        stop, errors, searches = threading.Event(), [], [0]

        def search_meanwhile():  # concurrent searches while the shards ingest
            with ShardedIndex.open(tmp_path / "d", readonly=True, dask=client) as reader:
                while not stop.is_set():
                    try:
                        reader.search(V[:4], k=5, mode="exact")
                        searches[0] += 1
                    except Exception as exc:  # noqa: BLE001 - any error fails the test
                        errors.append(exc)
                        return
        t = threading.Thread(target=search_meanwhile)
        t.start()
        try:
            idx.add_many(items, batch_size=50)
        finally:
            stop.set()
            t.join(timeout=120)
        assert not errors and searches[0] > 0
        assert len(idx) == 500
        idx.train(nlist=2, M=8, train_size=300)
        s, found = idx.search(V[:50], k=1, mode="pq", nprobe=2)
        assert (found[:, 0] == np.array([f"v{i}" for i in range(50)], dtype=object)).mean() > 0.95
    with StreamingIndex.create(tmp_path / "one", encoder, vector_dtype="float32") as one, \
            ShardedIndex.open(tmp_path / "d", dask=client) as idx:
        one.add_many(items)
        Q = vectors(5, 10)
        s1, i1 = one.search(Q, k=8, mode="exact")
        s2, i2 = idx.search(Q, k=8, mode="exact")
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_allclose(s1, s2, atol=1e-6)
        # duplicate groups: each shard's pages read on its Dask worker, searched on both;
        # the threshold: the 15th most similar pair's score (no copies among these vectors)
        t = float(np.sort((V @ V.T)[np.triu_indices(500, 1)])[-15]) - 1e-5
        want = brute_force_groups([f"v{i}" for i in range(500)], V, t)
        got = idx.duplicates(threshold=t, progress=False)
        assert want and sorted(sorted(g["ids"]) for g in got) == sorted(want)


def test_cli_ingest_and_search_a_sharded_index_on_dask(tmp_path, client, capsys):
    pytest.importorskip("cv2")
    from helpers.images import textured

    from streamk.cli import main
    from streamk.features import make_extractor
    from streamk.pipeline import extract_many

    imgs = tmp_path / "imgs"
    paths = [textured(str(imgs / f"p{i}.png"), i) for i in range(8)]
    feats, _ = extract_many(paths, make_extractor("sift"), workers=1, progress=False)
    Encoder(embedding="vlad", k=4, aggregation="gmp").fit([f.descriptors for f in feats.values()]).save(
        tmp_path / "enc.npz")
    address = client.scheduler.address
    ix = tmp_path / "ix"
    assert main(["index", "create", str(ix), "--encoder", str(tmp_path / "enc.npz"), "--extractor", "sift",
                 "--shards", "2", "--dask", address]) == 0
    assert main(["ingest", str(ix), str(imgs), "--dask", address, "--no-progress", "--no-cache"]) == 0
    assert "added 8, skipped 0 existing, failed 0" in capsys.readouterr().out
    assert main(["ingest", str(ix), str(imgs), "--dask", address, "--no-progress", "--no-cache"]) == 0
    assert "added 0, skipped 8 existing" in capsys.readouterr().out
    assert main(["search", str(ix), paths[5], "-k", "3", "--json", "--dask", address]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["id"] == "p5.png" and abs(hits[0]["score"] - 1.0) < 1e-3
    assert main(["search", str(ix), paths[2], "-k", "1", "--json"]) == 0  # no cluster: this process opens the shards
    assert json.loads(capsys.readouterr().out)[0]["id"] == "p2.png"


def brute_force_groups(ids, V, threshold):
    """The connected components of the pairs whose inner product is >= threshold: numpy
    over every pair, then a plain union-find."""
    S = V @ V.T
    parent = list(range(len(ids)))

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i
    for i, j in zip(*np.nonzero(np.triu(S >= threshold, 1))):
        parent[root(i)] = root(j)
    comps = {}
    for i in range(len(ids)):
        comps.setdefault(root(i), set()).add(ids[i])
    return sorted((sorted(c) for c in comps.values() if len(c) > 1), key=lambda c: (-len(c), c))


def test_duplicate_groups_of_a_sharded_index_equal_every_pair_compared(tmp_path, encoder):
    """Groups of near-duplicates across 3 shards (copies of one image usually land on
    different shards) equal the components of every pair at or above the threshold, and
    the groups one index finds for the same images; removed images are not in them."""
    rng = np.random.default_rng(5)
    base = vectors(9, 120)
    V, ids = [], []
    for i, v in enumerate(base):
        V.append(v)
        ids.append(f"b{i}")
        for c in range(int(rng.integers(0, 3)) if i % 4 == 0 else 0):  # a few images have 1-2 copies
            w = v + 0.08 * rng.standard_normal(DIM)
            V.append(w / np.linalg.norm(w))
            ids.append(f"b{i}-copy{c}")
    V = np.asarray(V, np.float32)
    items = [{"id": i, "vector": v} for i, v in zip(ids, V)]
    many = ShardedIndex.create(tmp_path / "many", encoder, shards=3, vector_dtype="float32")
    one = StreamingIndex.create(tmp_path / "one", encoder, vector_dtype="float32")
    try:
        many.add_many(items)
        one.add_many(items)
        gone = [i for i in ids if i.endswith("copy0")][:2]
        many.remove(gone)
        one.remove(gone)
        keep = [n for n, i in enumerate(ids) if i not in gone]
        want = brute_force_groups([ids[n] for n in keep], V[keep], 0.9)
        assert want and any(len({shard_of(i, 3) for i in g}) > 1 for g in want)  # groups span shards
        got = many.duplicates(threshold=0.9, neighbours=10, progress=False)
        assert sorted((sorted(g["ids"]) for g in got), key=lambda c: (-len(c), c)) == want
        assert sorted(sorted(g["ids"]) for g in got) == sorted(sorted(g["ids"]) for g in
                                                              one.duplicates(threshold=0.9, progress=False))
        assert [len(g["ids"]) for g in got] == sorted((len(g["ids"]) for g in got), reverse=True)
        for g in got:  # each pair at or above the threshold, with its score
            for a, b, score, inliers in g["pairs"]:
                assert a < b and score >= 0.9 and inliers is None
                assert abs(score - float(V[ids.index(a)] @ V[ids.index(b)])) < 1e-4
        with pytest.raises(ConfigError, match="local geometry"), pytest.warns(DeprecationWarning):  # no second stage
            many.duplicates(verify=True)
    finally:
        many.close()
        one.close()


# ---------------------------------------------------------------- one signature (streamk.index.Index), 0.2's forms kept
def test_the_0_2_call_forms_still_work_with_a_deprecation_warning(tmp_path, encoder):
    V = vectors(21, 300)
    with ShardedIndex.create(tmp_path / "old", encoder, shards=2, vector_dtype="float32") as idx:
        with pytest.warns(DeprecationWarning, match="give vector= by name"):
            assert idx.add("a", V[0]) == "a"  # add(id, vector): the vector second
        assert idx.add("b", vector=V[1], metadata={"x": 1}) == "b"
        assert np.allclose(idx.vector("a"), V[0], atol=1e-6)
        with pytest.raises(ImageReadError, match="photo.jpg"):  # images are described here too (0.2: refused)
            idx.add("c", image_path="photo.jpg")
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V[2:], 2)])
        shard = shard_of("a", 2)
        with pytest.warns(DeprecationWarning, match="vectors_page"):
            ids, Q, last = idx.vectors_page(shard, -1, 500)  # (shard, after_row, n): that shard's page
        assert "a" in ids and all(shard_of(i, 2) == shard for i in ids) and isinstance(last, int)
        codec = IVFPQ(nlist=1, M=8, seed=0).fit(V)
        with pytest.warns(DeprecationWarning, match="codec= and nprobe= by name"):
            assert idx.train(1, 8, 0, None, None, codec) is codec  # (..., train_size, nprobe, codec)
        assert idx.codec_params() == {"nlist": 1, "M": 8, "nprobe": 1}
        assert idx.indexed_fields() == []
        with pytest.warns(DeprecationWarning, match="indexed_fields is a method"):
            assert list(idx.indexed_fields) == []  # 0.2's property form
        w = vectors(22, 1)[0]
        assert idx.update("b", vector=w) == "b" and idx.metadata("b") == {"x": 1}  # kept, as on one index
        assert np.allclose(idx.vector("b"), w, atol=1e-6)
        with pytest.raises(UnknownIdError):
            idx.update("nope", vector=w)


@pytest.mark.parametrize("kind", [StreamingIndex, ShardedIndex])
def test_a_read_only_handle_never_writes_beside_a_writable_one(tmp_path, encoder, kind):
    """A sharded index opened read-only in a process that also had it open for writing
    was handed the writable shards: its add and remove went through (an image deleted
    through a read-only handle). Both kinds now refuse, and leave the index as it was."""
    from streamk.errors import ReadOnlyIndexError

    V = vectors(41, 3)
    extra = {} if kind is StreamingIndex else {"shards": 2}
    kind.create(tmp_path / "ix", encoder, vector_dtype="float32", **extra).close()
    with kind.open(tmp_path / "ix") as w:
        w.add("a", vector=V[0])
        with kind.open(tmp_path / "ix", readonly=True) as ro:
            assert ro.readonly and not w.readonly
            with pytest.raises(ReadOnlyIndexError):
                ro.add("b", vector=V[1])
            with pytest.raises(ReadOnlyIndexError):
                ro.remove("a")
            with pytest.raises(ReadOnlyIndexError):
                ro.set_metadata("a", {"x": 1})
            assert ro.ids() == ["a"] and [h.id for h in ro.search(V[0], k=1)] == ["a"]
        w.add("c", vector=V[2])  # the writable handle goes on
        assert sorted(w.ids()) == ["a", "c"] and w.metadata("a") == {}


def test_the_same_content_under_two_ids_in_one_batch_is_stored_once(tmp_path, encoder):
    """Two ids with the same content in one write (add_many, or one ingestion batch of two
    byte-identical files) were both stored when their ids routed to different shards: the
    second's claim saw the first's id, whose record was not written yet, and took the
    claim over. As on one index: the first added, the second a DuplicateError naming it."""
    V = vectors(43, 4)
    with ShardedIndex.create(tmp_path / "ix", encoder, shards=3, vector_dtype="float32") as idx:
        ids = ["a.jpg", "b.jpg", "c.jpg"]
        assert len({shard_of(i, 3) for i in ids}) > 1  # the case: not all on one shard
        got = idx.add_many([{"id": i, "vector": V[0]} for i in ids] + [{"id": "d", "vector": V[1]},
                                                                       {"id": "d", "vector": V[1]}])
        assert [r.status for r in got] == ["added", "error", "error", "added", "exists"]
        assert all(isinstance(r.error, DuplicateError) and r.error.existing_id == "a.jpg" for r in got[1:3])
        assert sorted(idx.ids()) == ["a.jpg", "d"]
        idx.remove("a.jpg")  # its content is free again: the next id takes it
        assert idx.add("b.jpg", vector=V[0]) == "b.jpg"
        with StreamingIndex.create(tmp_path / "one", encoder, vector_dtype="float32") as one:  # the same answers
            same = one.add_many([{"id": i, "vector": V[0]} for i in ids] + [{"id": "d", "vector": V[1]},
                                                                            {"id": "d", "vector": V[1]}])
            assert [r.status for r in same] == [r.status for r in got]


def test_too_few_images_to_train_is_said_alike(tmp_path, encoder):
    """Both kinds refuse a codec they cannot train with the same words (the sharded one
    said "IVF1-PQ training needs at least 256 vectors, got 9", after sampling the shards)."""
    from streamk.errors import TooFewImagesError

    said = []
    for kind, extra in ((StreamingIndex, {}), (ShardedIndex, {"shards": 2})):
        with kind.create(tmp_path / kind.__name__, encoder, vector_dtype="float32", **extra) as idx:
            idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(vectors(44, 9))])
            with pytest.raises(TooFewImagesError) as e:
                idx.train(nlist=1, M=16)
            said.append(str(e.value))
    assert said[0] == said[1] and said[0].endswith("training needs at least 256 images, the index has 9"), said


def test_the_vector_rule_is_explained_alike_by_every_frontend(tmp_path, encoder, random_vocabulary):
    """One note for near-duplicates by the vector alone (the CLI, the server and the notebook
    each had their own words): why, and what gives the copy classes."""
    from streamk.index import vector_only_note

    with StreamingIndex.create(tmp_path / "one", encoder) as one, \
            ShardedIndex.create(tmp_path / "many", encoder, shards=2) as many, \
            StreamingIndex.create(tmp_path / "words", encoder, vocabulary=random_vocabulary) as words:
        assert vector_only_note(one, "my-index") == (
            "by vector similarity only (this index keeps no local geometry): they may be other photos of the same "
            "scene, not copies; give it some with `streamk index add-local-features my-index` to have each pair "
            "classed exact / copy / same scene")
        assert f"add-local-features {one.path}`" in vector_only_note(one)
        assert "(a sharded index without local geometry)" in vector_only_note(many)
        assert vector_only_note(words, asked="--threshold").endswith(
            "(asked with --threshold): they may be other photos of the same scene, not copies; leave --threshold out "
            "to have each pair classed exact / copy / same scene")

"""The second stage inside the index: local geometry stored with each image, the first
stage's top R verified, the query expanded with verified images only, every result
explaining itself; against a numpy reference of the same rule, on real Paris photos."""

import json
import math
import subprocess

import numpy as np
import pytest

from streamk.errors import IndexCorruptError
from streamk.index import SearchParams, ShardedIndex, StreamingIndex, check_index
from streamk.verification import expand_query, make_query_record, unpack, verify_geometry

Image = pytest.importorskip("PIL.Image")

N_PHOTOS = 24


@pytest.fixture(scope="module")
def collection(paris6k_subset_photos, small_vocabulary, tmp_path_factory):
    """24 Paris photos (every landmark) and a half-size view of one of them, an encoder
    learned on them, the extractor, and the vocabulary."""
    from streamk.config import default_cache_dir
    from streamk.encoding import Encoder
    from streamk.features import HessianAffineSift, stored_pixels, extract

    photos = paris6k_subset_photos[::10][:N_PHOTOS]
    ex = stored_pixels(HessianAffineSift())  # the benchmark photos as `streamk eval` reads them: its cached features
    feats = [extract(p, ex, cache=default_cache_dir()) for p in photos]
    encoder = Encoder(embedding="temb", k=8, aggregation="gmp").fit([f.descriptors for f in feats])
    tmp = tmp_path_factory.mktemp("second-stage")
    src = photos[5]
    img = Image.open(src).convert("L")
    W, H = img.size
    view = tmp / "view.png"
    img.resize((W // 2, H // 2), Image.Resampling.LANCZOS).save(view)  # p' = (p + .5) / 2 - .5
    return {"photos": photos, "encoder": encoder, "extractor": ex, "vocabulary": small_vocabulary,
            "source": src, "view": view, "size": (W, H), "tmp": tmp}


def build(path, c, vocabulary=True):
    idx = StreamingIndex.create(path, c["encoder"], vector_dtype="float32", extractor=c["extractor"],
                                vocabulary=c["vocabulary"] if vocabulary else None)
    for p in c["photos"]:
        idx.add(p.stem, image_path=str(p))
    return idx


@pytest.fixture(scope="module")
def index(collection):
    idx = build(collection["tmp"] / "ix", collection)
    yield idx
    idx.close()


def test_each_image_keeps_a_bounded_record_and_the_view_is_verified_with_its_box_mapped(index, collection):
    sizes = [len(index.geometry(p.stem)) for p in collection["photos"]]
    assert max(sizes) <= 24 * 1024 and min(sizes) > 1000
    W, H = collection["size"]
    box = (0.25 * W / 2, 0.25 * H / 2, 0.75 * W / 2, 0.75 * H / 2)  # in the view's pixels
    hits = index.search(str(collection["view"]), k=5, box=box, pairs=True)
    top = hits[0]
    assert top.id == collection["source"].stem and top.verified and top.inliers >= 20
    expected = (np.array([(box[0], box[1]), (box[2], box[1]), (box[2], box[3]), (box[0], box[3])]) + 0.5) * 2 - 0.5
    assert np.abs(top.region - expected).max() < 4.0  # the view's box, mapped into the full photo
    assert top.pairs.shape == (top.inliers, 4)
    i, s = top  # still an (id, score) pair
    assert (i, s) == (top.id, top.score)


def test_a_lower_bar_marks_only_what_clears_it(index, collection):
    """SearchParams.false_alarms_per_pair is the bar the second stage verifies by: with the
    default (1e-4) and with 1e-12, a result is verified exactly when its log10 NFA is at or
    under the bar's log10, a tested one above it says "chance", and the verified come first."""
    view = str(collection["view"])
    for bar in (None, 1e-12):
        hits = index.search(view, params=SearchParams(k=N_PHOTOS, expand=0, false_alarms_per_pair=bar))
        level = math.log10(1e-4 if bar is None else bar)
        for h in hits:
            assert h.verified == (h.log10_nfa is not None and h.log10_nfa <= level), (bar, h.id, h.log10_nfa)
            if h.log10_nfa is not None and not h.verified:
                assert h.why == "chance"
        flags = [h.verified for h in hits]
        assert flags == sorted(flags, reverse=True) and flags[0]
    assert sum(h.log10_nfa is not None for h in hits) >= 2  # more than the view's source was tested


def test_verify_zero_is_the_first_stage(index, collection):
    q = index.query_vector(str(collection["view"]))
    first = index.search(q, k=8)
    off = index.search(str(collection["view"]), k=8, verify=0)
    assert [h.id for h in off] == [h.id for h in first]
    np.testing.assert_allclose([h.score for h in off], [h.score for h in first], atol=1e-6)
    assert all(h.inliers is None for h in off)


@pytest.mark.parametrize("expand", [0, 2])
def test_the_second_stage_equals_a_numpy_reference(index, collection, expand):
    """First stage by exact inner products, verification of the top R by streamk.verification
    on the stored records, verified by inliers first, AQE over them, exact search again."""
    from streamk.features import image_features

    R, k = 12, 10
    _, f = image_features(str(collection["view"]), collection["extractor"])
    q = index.query_vector(str(collection["view"]))
    ids = index.ids()
    V = np.stack([index.vector(i) for i in ids])
    order = np.argsort(-(V @ q), kind="stable")
    cand = order[:R]
    qrec = make_query_record(collection["vocabulary"], f.keypoints, f.descriptors, f.image_size)
    checks = verify_geometry(qrec, [index.geometry(ids[j]) for j in cand])
    inl = np.array([c.inliers for c in checks])
    ok = np.array([c.verified for c in checks])  # verification's decision (significance), ranked by inliers
    ver = cand[np.flatnonzero(ok)[np.argsort(-inl[ok], kind="stable")]]
    if expand and len(ver):
        q2 = expand_query(q, V[ver[:expand]])
        tail = np.argsort(-(V @ q2), kind="stable")
    else:
        tail = order
    expected = list(ver) + [j for j in tail if j not in set(ver)]
    got = index.search(str(collection["view"]), k=k, verify=R, expand=expand, expansion="aqe")
    assert len(ver) >= 1
    assert [h.id for h in got] == [ids[j] for j in expected[:k]]
    assert [h.verified for h in got[:len(ver)]] == [True] * len(ver)


def test_geometry_survives_retraining_and_goes_with_its_image(index, collection, tmp_path):
    idx = build(tmp_path / "ix", collection)
    rng = np.random.default_rng(0)
    idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(rng.standard_normal((260, idx.dim)))])
    before = {p.stem: idx.geometry(p.stem) for p in collection["photos"]}
    idx.train(nlist=1, M=4)
    assert {p.stem: idx.geometry(p.stem) for p in collection["photos"]} == before
    assert idx.geometry("v3") is None  # a vector has no local geometry
    hits = idx.search(str(collection["view"]), k=3, mode="pq")
    assert hits[0].id == collection["source"].stem and hits[0].verified
    gone = collection["photos"][0].stem
    idx.remove(gone)
    dump = idx.store.dump()["geometry"]
    assert len(dump) == N_PHOTOS - 1 and all(unpack(v) for v in dump.values())
    idx.close()


def test_a_damaged_record_is_named_never_a_wrong_answer(collection, tmp_path):
    """The damaged record's image stays unverified (why "damaged", a warning naming it) and the search goes
    on; reading the record itself is an IndexCorruptError naming the index, the image and its row."""
    from streamk.errors import DamagedRecordWarning

    source = collection["source"].stem
    idx = build(tmp_path / "ix", collection)
    row = idx.info(source)["row"]
    raw = bytearray(idx.geometry(source))
    raw[len(raw) // 2] ^= 0x5A

    def damage(txn):
        txn.put(row.to_bytes(8, "big"), bytes(raw), db=idx.store.geometry_db)
    idx.store.write(damage)
    with pytest.warns(DamagedRecordWarning, match=f"record of image '{source}' is damaged"):
        hits = idx.search(str(collection["view"]), k=3)
    hit = next(h for h in hits if h.id == source)
    assert hit.why == "damaged" and not hit.verified and hit.inliers is None
    with pytest.raises(IndexCorruptError, match=f"geometry record of image '{source}' \\(row {row}\\)") as info:
        idx.geometry(source)
    assert info.value.rows == [row] and str(idx.path) in str(info.value)
    assert idx.search(str(collection["view"]), k=3, verify=0)[0].id == source
    idx.close()
    report = check_index(tmp_path / "ix", repair=True, progress=False)  # the record is dropped, the image kept
    assert any(f"geometry records of image '{source}' (row {row})" in d for d in report.damaged)
    assert report.ok and not report.lost
    with StreamingIndex.open(tmp_path / "ix") as idx:
        assert idx.geometry(collection["source"].stem) is None
        assert collection["source"].stem in [h.id for h in idx.search(str(collection["view"]), k=3)]


def test_add_local_features_to_an_index_built_without(collection, tmp_path):
    from streamk.pipeline import add_local_features

    idx = build(tmp_path / "ix", collection, vocabulary=False)
    assert idx.vocabulary is None and idx.geometry(collection["source"].stem) is None
    assert all(h.inliers is None for h in idx.search(str(collection["view"]), k=3))
    added, failed = add_local_features(idx, vocabulary=collection["vocabulary"], workers=1, progress=False,
                                       log=lambda *a: None)
    assert (added, failed) == (N_PHOTOS, {})
    assert add_local_features(idx, workers=1, progress=False, log=lambda *a: None) == (0, {})  # resumable
    hits = idx.search(str(collection["view"]), k=3)
    assert hits[0].id == collection["source"].stem and hits[0].verified
    idx.close()


def test_a_sharded_index_verifies_where_each_shard_lives(index, collection, tmp_path):
    from streamk.pipeline import Ingester

    sharded = ShardedIndex.create(tmp_path / "sh", collection["encoder"], 2, vector_dtype="float32",
                                  extractor=collection["extractor"], vocabulary=collection["vocabulary"])
    with Ingester(sharded, workers=1, progress=False) as ing:
        assert ing.ingest([str(p) for p in collection["photos"]]).added == N_PHOTOS
    def strip(image_id):  # ingestion names an image by its file name, the index above by its stem
        return image_id.rsplit(".", 1)[0]
    for expand, expansion in ((0, "aqe"), (50, "aqe"), (5, "recursive"), (50, "recursive")):
        one = index.search(str(collection["view"]), k=6, expand=expand, expansion=expansion, mode="exact")
        many = sharded.search(str(collection["view"]), k=6, expand=expand, expansion=expansion, mode="exact")
        n = sum(h.verified for h in one)
        assert n >= 1
        assert [(strip(h.id), h.inliers, h.verified) for h in many[:n]] == [(h.id, h.inliers, True) for h in one[:n]]
        assert [strip(h.id) for h in many] == [h.id for h in one]
    # the verification's bar goes to the shards with the rest of the search's parameters
    p = SearchParams(k=6, expand=0, mode="exact", false_alarms_per_pair=1e-12)
    one, many = index.search(str(collection["view"]), params=p), sharded.search(str(collection["view"]), params=p)
    assert [(strip(h.id), h.verified, h.why) for h in many] == [(h.id, h.verified, h.why) for h in one]
    sharded.close()


def test_a_shard_verifies_the_ids_it_is_given(index, collection):
    """What a shard answers the recursive expansion: the ids given, in their order, verified
    as the index's own search verifies them (the view of the source photo: the same inliers),
    the verified with their stored vectors; an id removed meanwhile unverified, its vector
    zeros (it adds nothing to an expanded query)."""
    from streamk.features import extract
    from streamk.index import SearchParams
    from streamk.index.second_stage import query_record, vectors_on_shard, verify_on_shard

    src, other = collection["source"].stem, collection["photos"][0].stem
    qrec = query_record(collection["vocabulary"], extract(collection["view"], collection["extractor"]))
    got = verify_on_shard(index, [other, "gone", src], [0.1, 0.2, 0.3], qrec, SearchParams())
    assert [c.id for c in got] == [other, "gone", src]
    assert np.allclose([c.score for c in got], [0.1, 0.2, 0.3])
    hits = {h.id: h for h in index.search(str(collection["view"]), k=N_PHOTOS, expand=0, mode="exact")}  # all verified
    assert hits[src].verified and got[2].explanation["verified"] and got[2].explanation["inliers"] == hits[src].inliers
    assert np.array_equal(got[2].vector, index.vector(src))
    assert got[1].explanation == {} and got[1].vector is None
    assert got[0].explanation["inliers"] == hits[other].inliers
    assert got[0].explanation["verified"] == hits[other].verified and (got[0].vector is None) != hits[other].verified
    V = vectors_on_shard(index, [src, "gone", other])
    assert np.array_equal(V[0], index.vector(src)) and not V[1].any() and np.array_equal(V[2], index.vector(other))


def test_cli_search_prints_inliers_and_json_carries_the_explanation(index, collection):
    from helpers.processes import run_python

    args = ("-m", "streamk.cli", "search", index.path, collection["view"], "-k", "3")
    proc = run_python(*args, "--json", "--pairs", timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out[0]["id"] == collection["source"].stem and out[0]["verified"] and out[0]["inliers"] >= 20
    assert len(out[0]["pairs"]) == out[0]["inliers"] and len(out[0]["region"]) == 4
    proc = run_python(*args, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "inliers" in proc.stdout and f"{out[0]['inliers']}*" in proc.stdout


GEOMETRY_WRITER = """
import sys
import numpy as np
from streamk.index import StreamingIndex, encoded_vector
from streamk.verification import Vocabulary, stored_record

path, n = sys.argv[1], int(sys.argv[2])
idx = StreamingIndex.open(path)
voc = idx.vocabulary

def item(i):
    rng = np.random.default_rng(i)  # the same record for the same id, on both sides
    kp = np.c_[rng.uniform(0, 600, (50, 2)), np.full((50, 1), 3.0), np.zeros((50, 1)), np.full((50, 1), 3.0),
               np.zeros((50, 1))].astype(np.float32)
    geometry = stored_record(voc, kp, rng.integers(0, 120, (50, 128)).astype(np.uint8), (640, 480))
    return encoded_vector(f"v{i}", rng.standard_normal(idx.dim), idx.dim)._replace(geometry=geometry)

for lo in range(0, n, 7):
    idx.write_encoded([item(i) for i in range(lo, min(n, lo + 7))])
    print(" ".join(f"v{i}" for i in range(lo, min(n, lo + 7))), flush=True)  # committed
"""


def test_geometry_survives_a_sigkill_mid_batch(random_vocabulary, tmp_path):
    """Each image's record is written in its image's transaction: a writer killed at any
    moment leaves every committed image with its record, and no record without an image."""
    import random

    from helpers.index import make_encoder
    from helpers.processes import kill_and_collect, start_python

    path = tmp_path / "ix"
    StreamingIndex.create(path, make_encoder(), vector_dtype="float32", vocabulary=random_vocabulary).close()
    script = tmp_path / "writer.py"
    script.write_text(GEOMETRY_WRITER)
    rng = random.Random(3)
    committed = set()
    for _ in range(3):
        proc = start_python(script, path, 400, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
        first = ""
        try:
            first = proc.stdout.readline()
            assert first, proc.stderr.read()
            for _ in range(rng.randint(0, 8)):
                proc.stdout.readline()
        finally:
            lines = kill_and_collect(proc, first)
        committed.update(i for ln in lines for i in ln.split())
        with StreamingIndex.open(path, readonly=True) as idx:
            stored = set(idx.ids())
            assert committed <= stored
            dump = idx.store.dump()
            assert len(dump["geometry"]) == len(stored)  # no record without its image, no image without its record
            for i in sorted(stored)[:50]:
                assert unpack(idx.geometry(i)).image_size == (640, 480)


def test_verified_candidates_is_deprecated_and_still_answers(index, collection):
    """No sharded index asks for it since 0.3 (they verify the merged top R by id): it warns,
    and still gives the verified candidates a search verifies (the source photo among them)."""
    from streamk.features import extract
    from streamk.index import SearchParams
    from streamk.index.second_stage import query_record

    qrec = query_record(collection["vocabulary"], extract(collection["view"], collection["extractor"]))
    q = index.encoder.encode(extract(collection["view"], collection["extractor"]).descriptors)
    with pytest.warns(DeprecationWarning, match="verify_on_shard"):
        got = index.verified_candidates(q, qrec, SearchParams(k=5, mode="exact"))
    src = collection["source"].stem
    assert any(c.id == src and c.explanation.get("verified") for c in got)

"""The congruence suite (as scikit-learn's ``check_estimator`` and qdrant-client's
congruence tests): one set of behavioural checks run against every implementation of
:class:`streamk.index.Index` -- a StreamingIndex, a ShardedIndex opened in this process
and a ShardedIndex whose shards are Dask actors on a LocalCluster -- each holding the
same images, each expected to give the same answers: search (exact and PQ, one query and
a batch), filters, the second stage (verification and expansion), near-duplicates,
metadata and removal. Each answer is also checked against a numpy reference where one
exists (brute force over the vectors and the metadata).

Small synthetic data (seconds): 300 clustered vectors, and 6 "scenes" of random
keypoints seen in 3 views each (a scale and a shift of the same features), so that the
second stage verifies the views of a scene and nothing else; and a copy of one view (the
same features and the same thumbnail as that view, a vector near its own), so that the copy
classes find one copy among the views of the scenes."""

import io
import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from streamk.errors import ConfigError, DuplicateError, IdExistsError, UnknownIdError
from streamk.features import Features
from streamk.index import (Index, SearchParams, ShardedIndex, StreamingIndex, copies_of, copy_report, encoded_vector,
                           shard_of)
from streamk.index.store import row_key
from streamk.verification import stored_record

from helpers.index import DIM, make_encoder, vectors  # noqa: E402

N_VECTORS = 300  # enough to train flat PQ (256 centroids per sub-quantiser)
N_SCENES, VIEWS, N_FEATURES = 6, 3, 120
SIZE = (400, 300)
KINDS = ["one", "sharded-local", "sharded-dask"]


# ---------------------------------------------------------------- the same images for every index
def scene_views(seed=0):
    """{image id: (vector, Features)} of N_SCENES x VIEWS images: view v of a scene is its
    features scaled by 1 / (1 + v / 2) and shifted (the frames scaled alike), its vector
    near the scene's own."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(7).standard_normal((N_SCENES, DIM))
    out = {}
    for s in range(N_SCENES):
        xy = rng.uniform((20, 20), (380, 280), (N_FEATURES, 2))
        scale = rng.uniform(3, 8, N_FEATURES)
        theta = rng.uniform(-np.pi, np.pi, N_FEATURES)
        desc = rng.integers(0, 120, (N_FEATURES, 128)).astype(np.uint8)
        for v in range(VIEWS):
            f = 1 / (1 + v / 2)
            kp = np.column_stack([xy * f + 10 * v, scale * f, np.zeros(N_FEATURES), scale * f, theta])
            vec = centres[s] + 0.3 * rng.standard_normal(DIM)
            out[f"scene{s}-view{v}"] = ((vec / np.linalg.norm(vec)).astype(np.float32),
                                        Features(kp.astype(np.float32), desc, SIZE))
    return out


COPIED, COPY = "scene5-view0", "scene5-copy"  # a copy of one view: its features and its pixels


def scene_images():
    """{image id: (vector, Features)} of the scenes' views and the copy of COPIED (its vector
    near COPIED's: inner product about 0.93)."""
    out = scene_views()
    vec, f = out[COPIED]
    w = vec + 0.05 * np.random.default_rng(3).standard_normal(DIM)
    out[COPY] = ((w / np.linalg.norm(w)).astype(np.float32), f)
    return out


def thumbnail():
    """The thumbnail COPIED and its copy share: a smooth random texture (JPEG), at SIZE / 2."""
    from PIL import Image

    noise = np.random.default_rng(4).uniform(0, 255, (SIZE[1] // 16, SIZE[0] // 16)).astype(np.uint8)
    img = Image.fromarray(noise).resize((SIZE[0] // 2, SIZE[1] // 2), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def items(vocabulary):
    """The EncodedImage of every image (vectors with metadata; scenes with their geometry,
    COPIED and COPY with the same thumbnail)."""
    V = vectors(11, N_VECTORS)
    out = [encoded_vector(f"v{i:03d}", V[i], DIM, {"group": f"g{i % 4}", "n": int(i)}) for i in range(N_VECTORS)]
    out.append(encoded_vector("v000-copy", V[0] + 1e-3 * np.ones(DIM), DIM, {"group": "copies", "n": -1}))
    for image_id, (vec, f) in scene_images().items():
        rec = stored_record(vocabulary, f.keypoints, f.descriptors, f.image_size)
        enc = encoded_vector(image_id, vec, DIM, {"group": "scenes", "n": 1000})._replace(geometry=rec)
        out.append(enc._replace(thumbnail=thumbnail()) if image_id in (COPIED, COPY) else enc)
    return out


def stored_vectors():
    V = vectors(11, N_VECTORS)
    ids = [f"v{i:03d}" for i in range(N_VECTORS)] + ["v000-copy"] + list(scene_images())
    copy = V[0] + 1e-3 * np.ones(DIM)
    rows = [*V, copy / np.linalg.norm(copy), *(v for v, _ in scene_images().values())]
    return ids, np.asarray(rows, np.float32)


# ---------------------------------------------------------------- the indexes
@pytest.fixture(scope="module")
def built(tmp_path_factory, random_vocabulary):
    """{kind: index} holding the same images and the same trained codec."""
    tmp = tmp_path_factory.mktemp("congruence")
    encoder = make_encoder()
    enc = items(random_vocabulary)
    out = {"one": StreamingIndex.create(tmp / "one", encoder, vector_dtype="float32", vocabulary=random_vocabulary,
                                        indexed_fields=["group", "n"]),
           "sharded-local": ShardedIndex.create(tmp / "local", encoder, shards=3, vector_dtype="float32",
                                                vocabulary=random_vocabulary, indexed_fields=["group", "n"])}
    for idx in out.values():
        assert idx.write_encoded(enc) == ["added"] * len(enc)
    codec = out["one"].train(nlist=1, M=8, seed=0, progress=False)
    out["sharded-local"].train(codec=codec)
    out["codec"] = codec
    out["tmp"], out["encoder"], out["enc"] = tmp, encoder, enc
    yield out
    for kind in KINDS:
        if kind in out:
            out[kind].close()


@pytest.fixture(scope="module")
def dask_index(built, request):
    """The Dask kind, built on the module's LocalCluster only when a test asks for it."""
    client = request.getfixturevalue("client")
    idx = ShardedIndex.create(built["tmp"] / "dask", built["encoder"], shards=3, vector_dtype="float32",
                              vocabulary=built["one"].vocabulary, indexed_fields=["group", "n"], dask=client)
    assert idx.write_encoded(built["enc"]) == ["added"] * len(built["enc"])
    idx.train(codec=built["codec"])
    built["sharded-dask"] = idx
    return idx


@pytest.fixture(params=KINDS)
def index(request, built):
    if request.param == "sharded-dask":
        return request.getfixturevalue("dask_index")
    return built[request.param]


@pytest.fixture
def reference(built):
    return built["one"]


def hits_of(hits):
    """What a list of Hit says, comparable across index kinds."""
    return [(h.id, round(h.score, 5), h.inliers, bool(h.verified), h.stage, h.why,
             None if h.log10_nfa is None else round(h.log10_nfa, 3),
             None if h.region is None else np.round(h.region, 3).tolist()) for h in hits]


# ---------------------------------------------------------------- the checks
def test_every_kind_is_an_index(index):
    assert isinstance(index, Index)


@pytest.mark.parametrize("kind", ["one", "sharded-local"])
def test_a_closed_handle_says_so_and_another_handle_goes_on(built, kind):
    """A use after close() was LMDB's "Attempt to operate on closed/deleted/dropped object"
    (one index) or an IndexError (sharded); now IndexClosedError. Closing a second handle of
    the same index leaves the first one working."""
    from streamk.errors import IndexClosedError

    first = built[kind]
    second = type(first).open(first.path)
    q = first.vector("v001")
    assert [h.id for h in second.search(q, k=3)] == [h.id for h in first.search(q, k=3)]
    second.close()
    for use in (lambda: second.search(q, k=3), lambda: len(second), lambda: second.ids(),
                lambda: second.vector("v001"), lambda: second.metadata("v001")):
        with pytest.raises(IndexClosedError, match="was closed: open it again"):
            use()
    second.close()  # twice: nothing
    assert first.search(q, k=1)[0].id == "v001" and len(first) == len(built["enc"])


def test_what_it_holds(index, reference):
    ids, V = stored_vectors()
    assert len(index) == len(ids)
    assert index.ids() == sorted(ids)
    assert "scene0-view1" in index and "nope" not in index and "bad\0id" not in index
    assert np.allclose(index.vector("v005"), V[5], atol=1e-6)
    assert index.geometry("scene2-view0") == reference.geometry("scene2-view0") is not None
    assert index.geometry("v001") is None
    assert index.info("v007")["sha256"] == reference.info("v007")["sha256"]
    assert [json.loads(r)["sha256"] if r else None for r in index.records(["v001", "nope"])] == \
        [reference.info("v001")["sha256"], None]
    with pytest.raises(UnknownIdError):
        index.info("nope")
    assert sorted(index.indexed_fields()) == ["group", "n"]
    st = index.stats()
    assert st["images"] == len(ids) and st["codec_trained_on"] == len(ids) and st["added_since_training"] == 0
    assert index.codec_params() == reference.codec_params() == {"nlist": 1, "M": 8, "nprobe": 1}


def test_a_pass_over_every_vector_page_by_page(index):
    ids, V = stored_vectors()
    seen, after = {}, None
    while True:
        page, Q, after = index.vectors_page(after, 64)
        if not page:
            break
        assert len(page) <= 64
        seen.update(zip(page, Q))
    assert sorted(seen) == sorted(ids)
    assert all(np.allclose(seen[i], v, atol=1e-6) for i, v in zip(ids, V))


@pytest.mark.parametrize("mode, rerank", [("exact", None), ("pq", 0), ("pq", None)])
def test_search_one_query_and_a_batch(index, reference, mode, rerank):
    ids, V = stored_vectors()
    Q = vectors(12, 5)
    p = SearchParams(k=10, mode=mode, rerank=rerank)
    for q in Q:
        got = index.search(q, params=p)
        assert hits_of(got) == hits_of(reference.search(q, params=p))
        if mode == "exact" or rerank is None:  # every candidate re-scored: the brute-force ranking
            order = np.argsort(-(V @ q), kind="stable")[:10]
            assert [h.id for h in got] == [ids[i] for i in order]
            assert np.allclose([h.score for h in got], (V @ q)[order], atol=1e-5)
    scores, got_ids = index.search(Q, params=p)
    ref_scores, ref_ids = reference.search(Q, params=p)
    assert got_ids.tolist() == ref_ids.tolist()
    assert np.allclose(scores, ref_scores, atol=1e-6)


@pytest.mark.parametrize("where", [{"group": "g1"}, {"n": {"gte": 100, "lt": 120}}, {"group": {"in": ["g0", "g3"]}},
                                   {"group": "scenes"}, {"group": "none-such"}])
@pytest.mark.parametrize("mode", ["exact", "pq"])
def test_filters(index, reference, built, where, mode):
    ids, V = stored_vectors()
    meta = {e.key.decode(): e.metadata for e in built["enc"]}

    def selected(i):
        m, (field, cond) = meta[i], next(iter(where.items()))
        if not isinstance(cond, dict):
            return m[field] == cond
        if "in" in cond:
            return m[field] in cond["in"]
        return cond["gte"] <= m[field] < cond["lt"]
    q = vectors(13, 1)[0]
    p = SearchParams(k=8, mode=mode, where=where)
    got = index.search(q, params=p)
    assert hits_of(got) == hits_of(reference.search(q, params=p))
    order = [i for i in np.argsort(-(V @ q), kind="stable") if selected(ids[i])][:8]
    assert [h.id for h in got] == [ids[i] for i in order]


@pytest.mark.parametrize("kwargs", [{}, {"expand": 0}, {"verify": 4, "expand": 1, "k": 3},
                                    {"box": (50, 40, 300, 250), "pairs": True}, {"expansion": "alpha", "k": 12},
                                    {"where": {"group": "scenes"}, "k": 5}, {"mode": "pq", "rerank": 0},
                                    {"expansion": "recursive"},
                                    {"expansion": "recursive", "verify": 4, "expand": 1, "k": 3},
                                    {"expansion": "recursive-centred", "verify": 4, "expand": 1, "k": 3}])
def test_the_second_stage_verifies_the_views_of_a_scene(index, reference, kwargs):
    views = scene_views()
    for s in (0, 3):
        vec, f = views[f"scene{s}-view1"]
        p = SearchParams(**{"k": 8, "mode": "exact", **kwargs})
        got = index.search(vec, features=f, params=p)
        assert hits_of(got) == hits_of(reference.search(vec, features=f, params=p))
        verified = [h.id for h in got if h.verified]
        assert verified and set(verified) <= {f"scene{s}-view{v}" for v in range(VIEWS)}
        assert got[0].id == f"scene{s}-view1" and got[0].inliers == N_FEATURES
        assert [h.stage for h in got[:len(verified)]] == ["verified"] * len(verified)
        if kwargs.get("pairs"):
            assert all(h.pairs.shape == (h.inliers, 4) for h in got if h.verified)


@pytest.mark.parametrize("expansion, expand", [("aqe", None), ("alpha", None), ("recursive", None),
                                               ("recursive-centred", None), ("aqe", 0)])
def test_the_second_stage_verifies_the_merged_top_r(index, reference, expansion, expand):
    """Every expansion, and none (expand 0), verifies the first stage's top R of the whole
    index (brute force), R in all, on every kind: the views of the query's scene outside it
    come back unverified, without inliers (a shard verifying its own top R would verify
    the view at the top of its shard). The recursion verifies again what its searches
    find: its verified are views of the scene."""
    ids, V = stored_vectors()
    views, R = scene_views(), 1
    for s in (0, 3):
        vec, f = views[f"scene{s}-view1"]
        top = {ids[i] for i in np.argsort(-(V @ vec), kind="stable")[:R]}
        scene = {f"scene{s}-view{v}" for v in range(VIEWS)}
        p = SearchParams(k=12, mode="exact", verify=R, expand=expand, expansion=expansion)
        got = index.search(vec, features=f, params=p)
        assert hits_of(got) == hits_of(reference.search(vec, features=f, params=p))
        assert scene - top <= {h.id for h in got}  # the other views are among the results
        if expansion.startswith("recursive"):
            assert {h.id for h in got if h.verified} <= scene
        else:
            assert {h.id for h in got if h.inliers is not None} == top == {f"scene{s}-view1"}


def test_the_recursive_expansion_verifies_what_its_searches_find(index, reference):
    """expansion="recursive" (verification of each expanded search's new results, on the
    shard that holds them): a query whose first-stage top R holds one view of its scene (its
    vector pulled towards v000's) and whose expanded search holds the other two (brute
    force) first among its new results; every kind verifies all three, as one index does."""
    from streamk.index.second_stage import recursive_budget

    ids, V = stored_vectors()
    vec, f = scene_views()["scene2-view1"]
    q = vec + 1.2 * V[0]
    q /= np.linalg.norm(q)
    R, views = 20, {f"scene2-view{v}" for v in range(VIEWS)}
    first = [ids[i] for i in np.argsort(-(V @ q), kind="stable")[:R]]
    q2 = q + vec / np.linalg.norm(vec)  # the first expanded query: q + the one verified view
    new = [i for i in (ids[j] for j in np.argsort(-(V @ q2), kind="stable")[:R]) if i not in first]
    assert views & set(first) == {"scene2-view1"} and set(new[:2]) == views - {"scene2-view1"}
    assert recursive_budget(R) >= 2  # the new verifications the recursion may make
    p = SearchParams(k=8, mode="exact", verify=R, expand=1, expansion="recursive")
    got = index.search(q, features=f, params=p)
    assert hits_of(got) == hits_of(reference.search(q, features=f, params=p))
    assert [h.id for h in got if h.verified][:1] == ["scene2-view1"] and {h.id for h in got if h.verified} == views
    assert all(h.inliers > 0 for h in got if h.verified)


def test_the_second_stage_with_a_stored_record(index, reference):
    q, rec = index.vector("scene4-view2"), index.geometry("scene4-view2")
    got = index.search(q, record=rec, k=6, mode="exact")
    assert hits_of(got) == hits_of(reference.search(q, record=rec, k=6, mode="exact"))
    assert {h.id for h in got if h.verified} == {f"scene4-view{v}" for v in range(VIEWS)}


@contextmanager
def damaged_geometry(index, image_id):
    """One byte of ``image_id``'s stored geometry record flipped, in the index (or shard) that
    holds it, while inside; the record's bytes put back after."""
    path = Path(index.path)
    if isinstance(index, ShardedIndex):
        path = path / json.loads((path / "shards.json").read_text())["dirs"][shard_of(image_id, index.shards)]
    with StreamingIndex.open(path) as shard:
        store = shard.store
        with store.read() as txn:
            key = row_key(store.image(txn, image_id).row)
        original = store.stored_value("geometry", key)
        store.overwrite_value("geometry", key, lambda v: v[:100] + bytes([v[100] ^ 0xFF]) + v[101:])
        try:
            yield
        finally:
            store.overwrite_value("geometry", key, lambda v: original)


def test_a_damaged_geometry_record_leaves_its_image_unverified_and_the_search_goes_on(index, reference):
    """One damaged record made every verified search of the index fail (exit 5), and duplicates said only
    "geometry record checksum mismatch (damaged bytes)". Now its image keeps its first-stage rank, unverified
    (why "damaged"), one warning a search names it, and reading the record names the index, id and remedy."""
    from streamk.errors import DamagedRecordWarning, IndexCorruptError

    vec, f = scene_views()["scene1-view1"]
    p = SearchParams(k=8, mode="exact", expand=0)
    clean = index.search(vec, features=f, params=p)
    with damaged_geometry(index, "scene1-view0"):
        with pytest.warns(DamagedRecordWarning) as caught:
            got = index.search(vec, features=f, params=p)
        first = [h.id for h in index.search(vec, k=8, mode="exact", verify=0, expand=0)]
        verified = [h.id for h in got if h.verified]
        assert [h.id for h in got][len(verified):] == [i for i in first if i not in verified][:8 - len(verified)]
        hit = next(h for h in got if h.id == "scene1-view0")
        assert hit.why == "damaged" and not hit.verified and hit.inliers is None and hit.stage == "first"
        assert {h.id for h in got if h.verified} == {"scene1-view1", "scene1-view2"}
        with pytest.warns(DamagedRecordWarning) as expanded:  # the expansion verifies again: still one warning
            index.search(vec, features=f, k=8, mode="exact")
        for warned in (caught, expanded):
            messages = [str(w.message) for w in warned if issubclass(w.category, DamagedRecordWarning)]
            assert len(messages) == 1 and "'scene1-view0'" in messages[0], messages
            assert str(index.path) in messages[0] and "streamk index verify --repair" in messages[0]
        with pytest.raises(IndexCorruptError, match=r"the index is damaged: the local-geometry record of image "
                           r"'scene1-view0' \(row \d+\) fails its checks .*streamk index verify --repair"):
            index.geometry("scene1-view0")  # read alone: named, never a wrong record
        with pytest.warns(DamagedRecordWarning, match="'scene1-view0' is damaged: its pairs are not classed"):
            pairs = copies_of(index, "scene1-view1")  # what `streamk duplicates` reads: the others classed
        assert "scene1-view0" not in {p.b for p in pairs} and "scene1-view2" in {p.b for p in pairs}
    assert hits_of(index.search(vec, features=f, params=p)) == hits_of(clean)


def test_near_duplicates(index, reference):
    assert [h.id for h in index.duplicates("v000", threshold=0.99)] == ["v000-copy"]
    got = index.duplicates("v000")
    assert [(h.id, round(h.score, 4)) for h in got] == [(h.id, round(h.score, 4)) for h in reference.duplicates("v000")]
    assert all(h.score >= 0.5 for h in got) and len(got) > 1  # the default threshold: v000's cluster
    groups = index.duplicates(threshold=0.99, progress=False)
    assert [sorted(g["ids"]) for g in groups] == [["v000", "v000-copy"]]
    groups = index.duplicates(progress=False)
    expected = reference.duplicates(progress=False)
    assert sorted(sorted(g["ids"]) for g in groups) == sorted(sorted(g["ids"]) for g in expected)


def classed(pairs):
    """{(a, b): (class, inliers, covered, agreement)} and {(a, b): score} of pairs' to_dict()."""
    return ({(p["a"], p["b"]): (p["class"], p["inliers"], p["covered"], p["agreement"]) for p in pairs},
            {(p["a"], p["b"]): p["score"] for p in pairs})


def test_copy_classes(index, reference):
    """The same classed pairs on every kind, across shards: the views of each scene verified
    with each other as same scene (another capture, or no pixels to compare), the copy of
    COPIED with it as a copy; the groups hold the copy pair only."""
    _, V = stored_vectors()
    ids = stored_vectors()[0]
    report = copy_report(index, neighbours=10, progress=False)
    want = copy_report(reference, neighbours=10, progress=False)
    (got_classes, got_scores), (want_classes, want_scores) = classed(report["pairs"]), classed(want["pairs"])
    assert got_classes == want_classes
    assert all(abs(got_scores[k] - want_scores[k]) < 1e-4 for k in got_scores)
    scenes = {i.split("-")[0] for i in ids if i.startswith("scene")}
    same = {tuple(sorted((a, b))) for s in scenes for a in ids for b in ids
            if a < b and a.startswith(s + "-") and b.startswith(s + "-")}  # brute force: every pair in a scene
    assert set(got_classes) == same  # verified from the smaller id, nothing across scenes
    for (a, b), (kind, inliers, covered, agreement) in got_classes.items():
        assert abs(got_scores[(a, b)] - float(V[ids.index(a)] @ V[ids.index(b)])) < 1e-4
        if {a, b} == {COPIED, COPY}:
            assert kind == "copy" and inliers == N_FEATURES and covered == 1.0 and agreement > 0.99
        else:
            assert kind == "same scene"
    assert [g["ids"] for g in report["groups"]] == [[COPY, COPIED]]
    one = [p.to_dict() for p in copies_of(index, COPY)]
    assert classed(one)[0] == classed([p.to_dict() for p in copies_of(reference, COPY)])[0]
    assert [(p["b"], p["class"]) for p in one][:1] == [(COPIED, "copy")]


def test_duplicates_with_verify_gives_the_copy_classes(index, reference):
    """``duplicates(verify=True)`` (deprecated): the copy pairs of the classes, never other
    views of the scene, on every kind."""
    with pytest.warns(DeprecationWarning, match="copy_report"):
        groups = index.duplicates(verify=True, progress=False)
    assert [sorted(g["ids"]) for g in groups] == [[COPY, COPIED]]
    [(a, b, score, inliers)] = groups[0]["pairs"]
    assert {a, b} == {COPIED, COPY} and inliers == N_FEATURES and 0.8 < score < 0.99
    with pytest.warns(DeprecationWarning, match="copies_of"):
        hits = index.duplicates(COPIED, verify=True)
    assert [(h.id, h.inliers, h.verified) for h in hits] == [(COPY, N_FEATURES, True)]
    with pytest.warns(DeprecationWarning):
        assert index.duplicates(COPIED, verify=True, threshold=0.99) == []  # a threshold given: scores below it out
        assert hits_of(index.duplicates("scene2-view1", verify=True)) == []  # verified views, but no copies


def test_the_id_holding_each_content(index, built):
    """Ingestion asks which id holds a file's bytes before describing it (any shard's)."""
    enc = built["enc"]
    assert index.content_holders([enc[1].content, enc[-1].content, b"\0" * 32]) == \
        [enc[1].key.decode(), enc[-1].key.decode(), None]
    assert index.content_holders([]) == []


def test_metadata(index, reference):
    assert index.metadata("v010") == reference.metadata("v010") == {"group": "g2", "n": 10}
    assert index.metadata_many(["v011", "nope"]) == [{"group": "g3", "n": 11}, None]
    with pytest.raises(UnknownIdError):
        index.metadata("nope")
    q = index.vector("v020")
    try:
        assert index.set_metadata("v020", {"group": "moved"}, merge=True) == {"group": "moved", "n": 20}
        assert [h.id for h in index.search(q, k=3, mode="exact", where={"group": "moved"})] == ["v020"]
    finally:
        index.set_metadata("v020", {"group": "g0", "n": 20})
    assert index.search(q, k=3, mode="exact", where={"group": "moved"}) == []


def test_only_a_verified_result_has_a_region(index):
    """A region says where the query is in the result: an unverified result whose best map
    failed the test (4 inliers, "chance") carried one too, and the notebook drew it."""
    from streamk.index.second_stage import explanation_of, query_record
    from streamk.verification import verify_geometry

    vec, f = scene_views()["scene1-view1"]
    hits = index.search(vec, features=f, k=12, mode="exact", expand=0)
    assert any(h.verified for h in hits)
    for h in hits:
        assert (h.region is not None) == (h.affine is not None) == bool(h.verified), h
    _, g = scene_views()["scene1-view0"]
    four = stored_record(index.vocabulary, g.keypoints[:4], g.descriptors[:4], g.image_size)
    v = verify_geometry(query_record(index.vocabulary, f), [four], return_pairs=True)[0]
    assert not v.verified and v.why == "chance" and v.region is not None  # a map, not significant
    shown = explanation_of(v)
    assert shown["region"] is None and shown["affine"] is None and shown["inliers"] == 4 and shown["why"] == "chance"


def test_what_is_not_a_query_s_features_or_record_is_named(index):
    """search(v, features=...) took any object and failed inside with AttributeError."""
    v = index.vector("v001")
    with pytest.raises(ConfigError, match="features= is the query image's Features"):
        index.search(v, k=2, features="query.jpg")
    with pytest.raises(ConfigError, match="record= is a stored local-geometry record"):
        index.search(v, k=2, record="scene0-view0")


def test_the_codec_in_use_is_the_one_trained(index, built):
    """codec() on every kind: the one codec trained (a sharded index's shards share it)."""
    assert index.codec().to_bytes() == built["codec"].to_bytes()
    assert index.codec_params() == {"nlist": built["codec"].nlist, "M": built["codec"].M,
                                    "nprobe": built["codec"].nprobe}


def test_the_values_a_field_holds(index, built):
    """field_values lists what a filter can match, in value order, against the distinct
    values of the stored metadata (a plain loop over the items written)."""
    from streamk.errors import FilterError

    metas = [e.metadata for e in built["enc"]]
    groups = sorted({m["group"] for m in metas})
    numbers = sorted({float(m["n"]) for m in metas})
    assert index.field_values("group", limit=100) == (groups, False)
    assert index.field_values("group", limit=3) == (groups[:3], True)
    assert index.field_values("n", limit=5) == (numbers[:5], True)
    assert index.field_values("n", limit=100) == (numbers[:100], len(numbers) > 100)
    with pytest.raises(FilterError, match="not indexed"):
        index.field_values("colour")
    for bad in (0, 101, 2.5, True):
        with pytest.raises(FilterError, match="limit"):
            index.field_values("group", limit=bad)


def test_add_and_remove(index, reference):
    V = vectors(14, 3)
    new = [f"tmp{i}" for i in range(3)]
    n, changes = len(index), index.change_count()
    for i, v in zip(new, V):
        assert index.add(i, vector=v, metadata={"group": "tmp"}) == i
    try:
        assert len(index) == n + 3 and index.change_count() > changes
        assert [h.id for h in index.search(V[1], k=1, mode="exact")] == ["tmp1"]
        before = index.change_count()
        assert index.remove(new[:2]) == 2
        assert index.change_count() > before  # a removal too: an add and a remove leave len() as it was
        assert "tmp0" not in index and "tmp2" in index
        assert [h.id for h in index.search(V[1], k=10, mode="exact", where={"group": "tmp"})] == ["tmp2"]
        with pytest.raises(UnknownIdError):
            index.remove(["tmp2", "tmp0"])  # all or none
        assert "tmp2" in index
        w = vectors(16, 1)[0]
        before = index.change_count()
        assert index.update("tmp2", vector=w, metadata={"n": 2}) == "tmp2"
        assert index.change_count() > before
        assert index.metadata("tmp2") == {"group": "tmp", "n": 2}  # kept, updated
        assert [h.id for h in index.search(w, k=1, mode="exact")] == ["tmp2"]
        with pytest.raises(UnknownIdError, match=r"no image 'tmp0' in the index \(use add\(\)\)"):
            index.update("tmp0", vector=vectors(17, 1)[0])
        with pytest.raises(UnknownIdError):  # absent, whatever its content (it said "cannot add 'tmp0': ...")
            index.update("tmp0", vector=index.vector("v001"))
        with pytest.raises(DuplicateError, match="cannot update 'tmp2': the same content is already indexed as"):
            index.update("tmp2", vector=index.vector("v001"))
    finally:
        index.remove([i for i in new if i in index])
    assert len(index) == n
    q = vectors(15, 1)[0]
    assert hits_of(index.search(q, k=10, mode="exact")) == hits_of(reference.search(q, k=10, mode="exact"))


def test_images_descriptors_and_vectors_are_added_alike(index, reference, tmp_path):
    """add / update / add_many take the same sources on every kind (a sharded index
    describes an image in this process, as a query): an image file, one held in memory
    (bytes, a PIL image, an RGB array: the same vector as its file), a descriptor set;
    each with its record, metadata and geometry, a bad item its own error."""
    from PIL import Image

    from streamk.errors import DuplicateError

    from helpers.images import textured

    paths = [textured(str(tmp_path / f"t{i}.png"), 40 + i, size=160) for i in range(3)]
    rgb = np.asarray(Image.open(paths[1]).convert("RGB"))
    desc = np.random.default_rng(5).integers(0, 120, (60, 128)).astype(np.float32)
    n = len(index)
    added = ["f0", "m-bytes", "m-array", "d0"]
    try:
        assert index.add("f0", image_path=paths[0], metadata={"group": "tmp"}) == "f0"
        assert index.add("m-bytes", Path(paths[2]).read_bytes()) == "m-bytes"  # the second place, as search's
        assert index.add("m-array", image_path=rgb, metadata={"group": "tmp"}) == "m-array"
        assert index.add("d0", descriptors=desc) == "d0"
        info = {i: index.info(i) for i in added}
        assert info["f0"]["kind"] == "image_path" and info["f0"]["source"] == str(Path(paths[0]).resolve())
        assert info["m-array"]["kind"] == info["m-bytes"]["kind"] == "image" and info["m-array"]["source"] is None
        assert info["d0"]["kind"] == "descriptors" and info["d0"]["n_descriptors"] == 60
        assert index.metadata("f0")["name"] == "t0.png" and index.metadata("f0")["group"] == "tmp"
        assert index.metadata("m-bytes") == {"size": Path(paths[2]).stat().st_size}
        assert index.thumbnail("m-array") is not None and index.thumbnail("f0") is None  # no file left for pixels
        assert index.geometry("m-array") is not None and index.geometry("d0") is None
        for image_id, source in (("f0", paths[0]), ("m-array", rgb), ("m-bytes", paths[2])):
            np.testing.assert_allclose(index.vector(image_id), reference.query_vector(source), atol=1e-6)
        with pytest.raises(DuplicateError):  # the same bytes under another id, whichever form
            index.add("again", image_path=Path(paths[0]).read_bytes())
        results = index.add_many([{"id": "many0", "image_path": Image.open(paths[2]).convert("RGB")},
                                  {"id": "many1", "vector": vectors(31, 1)[0]},
                                  {"id": "many2", "image_path": str(tmp_path / "absent.png")},
                                  {"id": "many3", "colour": "red"}])
        added += ["many0", "many1"]
        assert [r.status for r in results] == ["added", "added", "error", "error"]
        assert type(results[2].error).__name__ == "ImageReadError" and "colour" in str(results[3].error)
        assert index.update("m-array", image_path=paths[1]) == "m-array"  # now its file
        assert index.info("m-array")["kind"] == "image_path" and index.metadata("m-array")["group"] == "tmp"
        np.testing.assert_allclose(index.vector("m-array"), reference.query_vector(paths[1]), atol=1e-6)
    finally:
        index.remove([i for i in added if i in index])
    assert len(index) == n


# ---------------------------------------------------------------- scores shown are cosines
@pytest.fixture(scope="module")
def float16_built(tmp_path_factory):
    """{kind: index} of N_VECTORS vectors stored as float16 (and a near copy of v000 that
    float16 stores as the same vector), one PQ codec: rounding takes inner products of a
    stored vector with itself past 1."""
    tmp = tmp_path_factory.mktemp("cosines")
    V = vectors(1, N_VECTORS)
    enc = [encoded_vector(f"v{i:03d}", v, DIM) for i, v in enumerate(V)]
    enc.append(encoded_vector("v000-same", V[0] + 1e-6 * np.ones(DIM, np.float32), DIM))  # other float32 bytes
    out = {"one": StreamingIndex.create(tmp / "one", make_encoder(), vector_dtype="float16"),
           "sharded-local": ShardedIndex.create(tmp / "local", make_encoder(), shards=3, vector_dtype="float16")}
    for idx in out.values():
        assert idx.write_encoded(enc) == ["added"] * len(enc)
    out["sharded-local"].train(codec=out["one"].train(nlist=1, M=8, seed=0, progress=False))
    yield out
    for kind in ("one", "sharded-local"):
        out[kind].close()


@pytest.mark.parametrize("kind", ["one", "sharded-local"])
def test_a_score_shown_is_a_cosine_in_minus_one_to_one(float16_built, kind):
    """float16 vectors and PQ codes scored 1.0001 and 1.03 against themselves; a result's
    score (a Hit's, a batch's, a near-duplicate pair's) is the cosine, clipped to [-1, 1]
    once ranked: the first stage's own scores (the scans, the merge of shards) are not."""
    index = float16_built[kind]
    Q = index.query_vectors(np.stack([index.vector(f"v{i:03d}") for i in range(0, N_VECTORS, 3)]))  # as searched
    for mode, rerank in [("exact", None), ("pq", 0), ("pq", None)]:
        p = SearchParams(k=20, mode=mode, rerank=rerank)
        raw, raw_ids = index.first_stage(Q, 20, params=p)
        assert raw.max() > 1.0001 if rerank == 0 else raw.max() > 1  # rounding, as ranked
        scores, ids = index.search(Q, params=p)
        assert ids.tolist() == raw_ids.tolist() and (scores == np.clip(raw, -1, 1)).all()
        for q, row, row_ids in zip(Q, raw, raw_ids):
            hits = index.search(q, params=p)
            shown = np.array([h.score for h in hits])
            assert [h.id for h in hits] == list(row_ids) and np.allclose(shown, np.clip(row, -1, 1), atol=1e-6)
            assert -1 <= shown.min() and shown.max() <= 1
    assert [(h.id, h.score) for h in index.duplicates("v000", threshold=0.999)] == [("v000-same", 1.0)]
    groups = index.duplicates(threshold=0.999, progress=False)
    assert [g["pairs"] for g in groups] == [[["v000", "v000-same", 1.0, None]]]


def test_cosine_scores_keep_the_empty_slots():
    from streamk.index.second_stage import cosine_score, cosine_scores

    got = cosine_scores(np.array([[1.03, 0.5, -np.inf], [-1.0002, -0.25, -np.inf]], np.float32))
    assert got.dtype == np.float32 and got.tolist() == [[1.0, 0.5, -np.inf], [-1.0, -0.25, -np.inf]]
    assert (cosine_score(1.0001), cosine_score(-1.5), cosine_score(0.25)) == (1.0, -1.0, 0.25)


# ---------------------------------------------------------------- ids in either Unicode normal form
NFC_ID, NFD_ID = "caf\u00e9.jpg", "cafe\u0301.jpg"  # typed; as macOS names the file (e + combining acute)


def _legacy_ids(shards=3):
    """(NFC, NFD) forms of an id whose two forms route to different shards (sha256 of the
    id's bytes, as before ids were normalised), so that a sharded index must look on both."""
    import hashlib
    import unicodedata

    def route(text):
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % shards

    for i in range(100):
        nfc = f"old-cr\u00e8me-{i}.jpg"
        nfd = unicodedata.normalize("NFD", nfc)
        assert nfd != nfc
        if route(nfc) != route(nfd):
            return nfc, nfd, route(nfd)
    raise AssertionError("no such id in 100")  # pragma: no cover


@pytest.fixture(scope="module")
def unicode_built(tmp_path_factory):
    """{kind: index} each holding "café.jpg" added under its NFD name (stored NFC), and an
    id written NFD as an index made before streamk normalised ids holds it (on a sharded
    index: on the shard of its NFD bytes), and vectors around them."""
    from streamk.index.sharded import read_manifest

    tmp = tmp_path_factory.mktemp("unicode-ids")
    V = vectors(3, 12)
    old_nfc, old_nfd, old_shard = _legacy_ids()
    legacy = encoded_vector(old_nfd, V[1], DIM, {"n": 1})._replace(key=old_nfd.encode())  # its bytes as stored before
    out = {"one": StreamingIndex.create(tmp / "one", make_encoder(), vector_dtype="float32"),
           "sharded-local": ShardedIndex.create(tmp / "local", make_encoder(), shards=3, vector_dtype="float32")}
    assert out["one"].write_encoded([legacy]) == ["added"]
    out["sharded-local"].close()
    with StreamingIndex.open(tmp / "local" / read_manifest(tmp / "local")["dirs"][old_shard]) as shard:
        assert shard.write_encoded([legacy]) == ["added"]
    out["sharded-local"] = ShardedIndex.open(tmp / "local")
    for idx in out.values():
        assert idx.add(NFD_ID, vector=V[0], metadata={"n": 0}) == NFC_ID
        assert idx.add_many([{"id": f"v{i}", "vector": V[i]} for i in range(2, 12)])
    out["old"] = (old_nfc, old_nfd, V)
    yield out
    for kind in ("one", "sharded-local"):
        out[kind].close()


@pytest.mark.parametrize("kind", ["one", "sharded-local"])
def test_an_id_is_found_in_either_unicode_normal_form(unicode_built, kind):
    """A new id is stored NFC, whatever form it was given in; a lookup of an id given in the
    other form finds it, and an id stored NFD by an older index is found typed (NFC)."""
    index = unicode_built[kind]
    old_nfc, old_nfd, V = unicode_built["old"]
    assert NFC_ID in index.ids() and NFD_ID not in index.ids() and old_nfd in index.ids()
    for given, stored, v in [(NFD_ID, NFC_ID, V[0]), (NFC_ID, NFC_ID, V[0]), (old_nfc, old_nfd, V[1]),
                             (old_nfd, old_nfd, V[1])]:
        assert given in index and index.stored_id(given) == stored
        assert np.allclose(index.vector(given), v, atol=1e-6)
        assert index.info(given)["kind"] == "vector" and index.records([given])[0] is not None
        assert index.metadata(given)["n"] == int(stored == old_nfd)
        assert index.metadata_many([given, "nope"]) == [index.metadata(given), None]  # one call per shard
        assert index.search(index.vector(given), k=1)[0].id == stored
        assert [h.id for h in index.duplicates(given, threshold=0.01)].count(stored) == 0  # itself left out
    assert index.add(NFC_ID, vector=V[0]) == NFC_ID  # the same content under the same id: nothing written
    with pytest.raises(IdExistsError):
        index.add(old_nfc, vector=V[5] + V[6])  # the older index's id, typed: the same id
    index.set_metadata(old_nfc, {"n": 7}, merge=True)
    assert index.metadata(old_nfd)["n"] == 7
    assert index.update(old_nfc, vector=V[7] - V[8]) and index.stored_id(old_nfc) == old_nfd
    assert np.allclose(index.vector(old_nfd), (V[7] - V[8]) / np.linalg.norm(V[7] - V[8]), atol=1e-6)
    n = len(index)
    assert index.remove([NFD_ID, old_nfc]) == 2 and len(index) == n - 2
    assert NFC_ID not in index and old_nfd not in index
    with pytest.raises(UnknownIdError):
        index.stored_id(NFD_ID)

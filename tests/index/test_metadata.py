"""Metadata and search filters: metadata stored, replaced, kept through updates and removed
with its image; filters parsed by their grammar; a filtered search equals the filter
applied to a brute-force search over every image (numpy), in exact, PQ and IVF-PQ modes
and on a sharded index; k results whenever k images match."""

import json

import numpy as np
import pytest

from helpers.index import make_encoder, vectors
from streamk.errors import ConfigError, FilterError, MetadataError, StreamkError, UnknownIdError
from streamk.index import FILTER_GRAMMAR, ShardedIndex, StreamingIndex
from streamk.index.metadata import MAX_METADATA_BYTES, parse_filter
from streamk.quantization import row_bitmap

N = 2400
FIELDS = ["group", "x", "name", "tags", "flag"]


@pytest.fixture(scope="module")
def encoder():
    return make_encoder()


def meta_of(i):
    return {"group": int(i % 40), "x": float(i) / 10.0, "name": f"n{i % 97:03d}", "tags": [f"t{i % 3}", f"u{i % 5}"],
            "flag": bool(i % 2), "free": "not indexed"}


# the filters and their slow, obvious twins (plain Python on the metadata)
FILTERS = [
    ({"group": 3}, lambda m: m["group"] == 3),
    ({"group": {"in": [1, 2, 39]}}, lambda m: m["group"] in (1, 2, 39)),
    ({"x": {"gte": 10, "lt": 30.5}}, lambda m: 10 <= m["x"] < 30.5),
    ({"x": {"gt": 100}}, lambda m: m["x"] > 100),
    ({"x": {"lte": 5}}, lambda m: m["x"] <= 5),
    ({"name": {"gte": "n010", "lte": "n012"}}, lambda m: "n010" <= m["name"] <= "n012"),
    ({"tags": "u4", "flag": True}, lambda m: "u4" in m["tags"] and m["flag"]),
    ({"group": 7, "x": {"lt": 50}}, lambda m: m["group"] == 7 and m["x"] < 50),
    ({"group": {"eq": 5}, "name": {"in": ["n005", "n044"]}},
     lambda m: m["group"] == 5 and m["name"] in ("n005", "n044")),
    ({"group": 1000}, lambda m: False),
]


@pytest.fixture(scope="module")
def filled(tmp_path_factory, encoder):
    """An index of N vectors with metadata (half its fields indexed at create, the rest
    later), its vectors and metadata."""
    V = vectors(3, N)
    idx = StreamingIndex.create(tmp_path_factory.mktemp("meta") / "ix", encoder, vector_dtype="float32",
                                indexed_fields=["group", "x"])
    res = idx.add_many([{"id": f"i{i}", "vector": V[i], "metadata": meta_of(i)} for i in range(N)], batch_size=600)
    assert {r.status for r in res} == {"added"}
    for f in ("name", "tags", "flag"):  # indexed once images are there: the postings are built from them
        assert idx.index_field(f) is True
    assert idx.index_field("name") is False
    yield idx, V
    idx.close()


def brute_force(V, Q, predicate, k):
    """Top k (ids, scores) of each query among the images the predicate keeps: numpy over
    every vector, ties by row (insertion order)."""
    keep = np.array([predicate(meta_of(i)) for i in range(len(V))])
    rows = np.flatnonzero(keep)
    out = []
    for q in Q:
        s = V[rows] @ q
        order = np.lexsort((rows, -s))[:k]
        out.append(([f"i{r}" for r in rows[order]], s[order]))
    return out


def check_equal(got, want):
    ids, scores = zip(*got) if got else ((), ())
    assert list(ids) == want[0]
    np.testing.assert_allclose(scores, want[1], rtol=0, atol=1e-5)


# ------------------------------------------------------------------ metadata
def test_metadata_round_trip_update_and_removal(tmp_path, encoder):
    V = vectors(1, 4)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, indexed_fields="color")
    idx.add("a", vector=V[0], metadata={"color": "red", "n": 1, "nested": {"x": [1, 2.5, None]}})
    idx.add("b", vector=V[1])
    assert idx.metadata("a") == {"color": "red", "n": 1, "nested": {"x": [1, 2.5, None]}}
    assert idx.metadata("b") == {}
    assert idx.metadata_many(["b", "nope", "a"])[1] is None
    assert idx.set_metadata("b", {"color": "blue"}) == {"color": "blue"}
    assert idx.set_metadata("a", {"n": 2}, merge=True)["color"] == "red"
    assert idx.allowed({"color": "red"}).count == 1 and idx.allowed({"color": "blue"}).count == 1
    idx.set_metadata("a", {"other": True})  # replaced: "red" is no longer a's
    assert idx.allowed({"color": "red"}).count == 0 and idx.metadata("a") == {"other": True}
    idx.set_metadata("a", {"color": "red"})
    idx.update("a", vector=V[2], metadata={"size": 3})  # new content, new row: metadata kept and updated
    assert idx.metadata("a") == {"color": "red", "size": 3}
    assert [h.id for h in idx.search(V[2], k=5, where={"color": "red"})] == ["a"]
    idx.remove("a")
    assert idx.allowed({"color": "red"}).count == 0
    assert idx.search(V[2], k=5, where={"color": "red"}) == []
    with pytest.raises(UnknownIdError):
        idx.metadata("a")
    with pytest.raises(UnknownIdError):
        idx.set_metadata("a", {})
    rows_meta = idx.store.dump()["metadata"]
    # (less its CRC32C)
    assert len(rows_meta) == 1 and json.loads(next(iter(rows_meta.values()))[:-4]) == {"color": "blue"}
    postings = idx.store.dump()["postings"]
    assert list(postings) == [b"color\0sblue"]
    idx.close()


@pytest.mark.parametrize("bad", [
    {"big": "x" * MAX_METADATA_BYTES}, ["not", "a", "dict"], {"nan": float("nan")}, {1: "int key"},
    {"obj": object()}, {"color": "y" * 500},  # an indexed value too long to index
])
def test_bad_metadata_is_refused_and_changes_nothing(tmp_path, encoder, bad):
    V = vectors(1, 2)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, indexed_fields=["color"])
    idx.add("a", vector=V[0], metadata={"color": "red"})
    before = idx.store.dump()
    with pytest.raises(MetadataError) as err:
        idx.add("b", vector=V[1], metadata=bad)
    assert isinstance(err.value, ValueError) and err.value.exit_code == 3
    with pytest.raises(MetadataError):
        idx.set_metadata("a", bad)
    out = idx.add_many([{"id": "b", "vector": V[1], "metadata": bad}])
    assert out[0].status == "error" and isinstance(out[0].error, MetadataError)
    assert idx.store.dump() == before
    idx.close()


# ------------------------------------------------------------------ the filter grammar
@pytest.mark.parametrize("bad", [
    [1, 2], "not json", 5, {"": 1}, {"f": None}, {"f": [1, 2]}, {"f": {}}, {"f": {"in": []}},
    {"f": {"in": "abc"}}, {"f": {"gte": 1, "gt": 0}}, {"f": {"lt": 1, "lte": 2}}, {"f": {"gte": 1, "lt": "b"}},
    {"f": {"gte": True}}, {"f": {"in": [1], "gte": 0}}, {"f": {"near": 3}}, {"f": float("nan")},
    {"f": {"in": list(range(2000))}}, {f"f{i}": 1 for i in range(17)}, {"f": {"eq": {"a": 1}}},
])
def test_malformed_filters_say_the_grammar(bad):
    with pytest.raises(FilterError) as err:
        parse_filter(bad)
    assert isinstance(err.value, ConfigError) and isinstance(err.value, StreamkError)
    assert err.value.exit_code == 2
    assert FILTER_GRAMMAR in str(err.value)


def test_no_filter_and_json_text():
    assert parse_filter(None) is None and parse_filter({}) is None
    assert parse_filter('{"a": 1}') == parse_filter({"a": 1.0})  # 1 == 1.0, as JSON numbers


def test_a_filter_on_an_unindexed_field_says_how_to_index_it(filled):
    idx, V = filled
    with pytest.raises(FilterError, match=r"not indexed.*index_field\('free'\)"):
        idx.search(V[0], k=3, where={"free": "not indexed"})


def test_row_bitmap_sets_the_bits_of_its_rows():
    rows = np.array([0, 1, 63, 64, 65, 200, 1000], np.int64)
    words = row_bitmap(rows, 1001)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    assert words.dtype == np.uint64 and words.shape == (16,)
    np.testing.assert_array_equal(np.flatnonzero(bits), rows)


# ------------------------------------------------------------------ filtered search == brute force
@pytest.mark.parametrize("where,predicate", FILTERS)
def test_filtered_exact_search_equals_brute_force(filled, where, predicate):
    idx, V = filled
    Q = vectors(11, 3)
    want = brute_force(V, Q, predicate, 10)
    assert idx.allowed(where).count == sum(predicate(meta_of(i)) for i in range(N))
    for q, w in zip(Q, want):
        check_equal(idx.search(q, k=10, mode="exact", where=where), w)
    scores, ids = idx.search(Q, k=10, mode="exact", where=where)  # a batch: every query filtered
    for a, w in enumerate(want):
        assert [i for i in ids[a] if i is not None] == w[0]


def adc_reference(idx, Q, predicate, k):
    """Top k by the codec's ADC scores (float32, summed in sub-quantiser order, plus the
    list's <q, c>) among the allowed rows: numpy over every stored code."""
    codec, lists = idx.view.codec, idx.view.lists
    entries = [(int(lst), lists.start[lst] + j) for lst in range(codec.nlist) for j in range(lists.size[lst])]
    pos = np.array([p for _, p in entries], np.int64)
    lst = np.array([l for l, _ in entries], np.int64)
    rows = lists.rows[pos]
    keep = np.array([predicate(meta_of(int(r))) for r in rows], bool)
    rows, pos, lst = rows[keep], pos[keep], lst[keep]
    out = []
    for q in Q:
        T = codec.pq_.tables(q[None, :])[0]
        s = np.zeros(len(rows), np.float32)
        for m in range(codec.M):
            s += T[m, lists.codes[pos, m]]
        probes, coarse = codec.probe(q[None, :], codec.nlist)  # <q, c_l> as the scan takes it
        cterm = np.zeros(codec.nlist, np.float32)
        cterm[probes[0]] = coarse[0]
        s = s + cterm[lst]
        order = np.lexsort((rows, -s))[:k]
        out.append(([f"i{r}" for r in rows[order]], s[order]))
    return out


@pytest.mark.parametrize("nlist", [1, 16])
def test_filtered_pq_and_ivf_scans_equal_brute_force(tmp_path, encoder, nlist):
    V = vectors(3, N)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32", indexed_fields=FIELDS)
    idx.add_many([{"id": f"i{i}", "vector": V[i], "metadata": meta_of(i)} for i in range(N)], batch_size=800)
    idx.train(nlist=nlist, M=8, nprobe=1)
    idx.refresh()
    Q = vectors(12, 3)
    for where, predicate in FILTERS:
        # codes only (no re-ranking), every list visited: the filter inside the ADC scan
        want = adc_reference(idx, Q, predicate, 10)
        for q, w in zip(Q, want):
            got = idx.search(q, k=10, where=where, rerank=0, nprobe=nlist)
            assert [h.id for h in got] == w[0]
            np.testing.assert_allclose([h.score for h in got], w[1], rtol=0, atol=1e-6)
        # re-ranked (default), one list probed by default: the scan visits lists until it has
        # seen enough allowed rows, so the k best of the filter come back whenever k match
        exact = brute_force(V, Q, predicate, 10)
        n_match = sum(predicate(meta_of(i)) for i in range(N))
        for q, w in zip(Q, exact):
            got = idx.search(q, k=10, where=where)
            assert len(got) == min(10, n_match)
            assert all(predicate(meta_of(int(h.id[1:]))) for h in got)
            if n_match <= 100:  # every allowed row is re-ranked: the exact answer
                check_equal(got, w)
    idx.close()


def test_k_results_whenever_k_images_match_with_one_probed_list(tmp_path, encoder):
    V = vectors(5, N)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32", indexed_fields=["group"])
    idx.add_many([{"id": f"i{i}", "vector": V[i], "metadata": {"group": i % 200}} for i in range(N)], batch_size=800)
    idx.train(nlist=32, M=8, nprobe=1)
    for q in vectors(13, 5):
        for rerank in (0, 12):  # 12 images per group, spread over the lists: 24 match
            got = idx.search(q, k=12, where={"group": {"in": [17, 18]}}, rerank=rerank)
            assert len(got) == 12 and all(int(h.id[1:]) % 200 in (17, 18) for h in got)
        got = idx.search(q, k=12, where={"group": 17}, rerank=0)
        assert sorted(h.id for h in got) == sorted(f"i{i}" for i in range(17, N, 200))
    idx.close()


def test_filters_see_removals_and_additions(filled):
    idx, V = filled
    other = idx
    where = {"group": 3, "flag": True}
    before = [h.id for h in idx.search(V[3], k=100, where=where)]
    assert "i3" in before
    other.remove(["i3"])
    assert [h.id for h in idx.search(V[3], k=100, where=where)] == [i for i in before if i != "i3"]
    other.add("i3", vector=V[3], metadata=meta_of(3))
    assert sorted(h.id for h in idx.search(V[3], k=100, where=where)) == sorted(before)


def test_sharded_filtered_search_equals_one_index(tmp_path, encoder, filled):
    idx, V = filled
    many = ShardedIndex.create(tmp_path / "many", encoder, shards=3, vector_dtype="float32",
                               indexed_fields=["group", "x"])
    try:
        many.add_many([{"id": f"i{i}", "vector": V[i], "metadata": meta_of(i)} for i in range(N)], batch_size=800)
        many.index_field("tags")
        assert many.metadata("i5") == meta_of(5)
        many.set_metadata("i5", {"group": 999}, merge=True)
        Q = vectors(14, 2)
        for where, predicate in FILTERS[:4] + [({"tags": "t1", "x": {"lt": 100}}, None)]:
            for q in Q:
                got = many.search(q, k=10, mode="exact", where=where)
                want = [h for h in idx.search(q, k=11, mode="exact", where=where) if h.id != "i5"][:10]
                assert [h.id for h in got] == [h.id for h in want]
        assert [h.id for h in many.search(V[5], k=3, where={"group": 999})] == ["i5"]
        # near-duplicates of one image across the shards: as one index finds them
        for image_id in ("i10", "i11"):
            want = idx.duplicates(image_id, threshold=0.8)
            got = many.duplicates(image_id, threshold=0.8)
            assert [h.id for h in got] == [h.id for h in want] and all(h.score >= 0.8 for h in got)
        with pytest.raises(ConfigError, match="local geometry"), pytest.warns(DeprecationWarning):  # no second stage
            many.duplicates("i10", verify=True)
        with pytest.raises(FilterError):
            many.search(V[0], k=3, where={"free": 1})
    finally:
        many.close()


def test_numpy_values_are_stored_and_filtered_as_the_json_they_hold(tmp_path, encoder):
    """Metadata from a DataFrame or an array (np.int64, np.float32, np.bool_, a 1-D array)
    was refused ("Object of type int64 is not JSON serializable"), and an 'in' filter given
    a numpy array too, while `where={"stars": np.int64(3)}` was taken. Stored as the JSON
    numbers, booleans and lists they hold, posted as those are when a field is indexed later."""
    V = vectors(51, 3)
    with StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32",
                               indexed_fields=["stars", "tags"]) as idx:
        idx.add("a", vector=V[0], metadata={"stars": np.int64(4), "w": np.float32(0.5), "ok": np.bool_(True),
                                            "tags": np.array([1, 2]), "also": np.array([7, 8])})
        idx.add("b", vector=V[1], metadata={"stars": 2, "tags": [3], "also": [8]})
        stored = idx.metadata("a")
        assert stored == {"stars": 4, "w": 0.5, "ok": True, "tags": [1, 2], "also": [7, 8]}
        assert all(type(v) in (int, float, bool, list) for v in stored.values())
        assert [h.id for h in idx.search(V[0], k=3, where={"tags": 2})] == ["a"]
        assert [h.id for h in idx.search(V[0], k=3, where={"stars": {"in": np.array([4, 2])}})] == ["a", "b"]
        idx.index_field("also")  # built from the stored JSON: the array's elements, as at write time
        assert [h.id for h in idx.search(V[0], k=3, where={"also": 7})] == ["a"]
        with pytest.raises(MetadataError, match="no NaN"):
            idx.add("c", vector=V[2], metadata={"w": np.float64("nan")})
        with pytest.raises(MetadataError):
            idx.add("c", vector=V[2], metadata={"when": np.datetime64("2024-01-01")})
        assert "c" not in idx

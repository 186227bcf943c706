"""SearchParams: one frozen object per search, checked once against one set of limits;
the HTTP server's limits derived from the index's; one box rule (streamk.checks.check_box), clipped
to the image (clip_box)."""

import dataclasses
import pickle

import numpy as np
import pytest

import streamk
from streamk.checks import check_box, clip_box
from streamk.errors import ConfigError, FilterError
from streamk.features import Features, crop_to_box
from streamk.index import (INDEX_LIMITS, MAX_BATCH, MAX_EXPAND, MAX_K, MAX_RERANK, MAX_VERIFY, SERVER_LIMITS,
                           SearchLimits, SearchParams, StreamingIndex, check_count, normalise_box)
from streamk.verification import GeometryRecord, verify_geometry

from helpers.index import make_encoder, vectors  # noqa: E402


def test_the_index_limits_are_the_documented_maxima():
    assert (INDEX_LIMITS.k, INDEX_LIMITS.rerank, INDEX_LIMITS.verify, INDEX_LIMITS.expand, INDEX_LIMITS.batch) == \
        (10_000, 10_000, 1_000, 1_000, 1_000)
    assert (MAX_K, MAX_RERANK, MAX_VERIFY, MAX_EXPAND, MAX_BATCH) == \
        (INDEX_LIMITS.k, INDEX_LIMITS.rerank, INDEX_LIMITS.verify, INDEX_LIMITS.expand, INDEX_LIMITS.batch)


def test_the_server_limits_are_derived_and_never_looser():
    assert (SERVER_LIMITS.k, SERVER_LIMITS.expand) == (1_000, 200)
    for f in dataclasses.fields(SearchLimits):
        if f.name != "whose":
            assert getattr(SERVER_LIMITS, f.name) <= getattr(INDEX_LIMITS, f.name)
    with pytest.raises(ConfigError, match="limit of 10,000"):
        INDEX_LIMITS.tighter("mine", k=20_000)
    with pytest.raises(ConfigError, match="limit of 1,000"):
        SERVER_LIMITS.tighter("mine", k=1_001)  # tighter than the server's, not only the index's
    with pytest.raises(ConfigError):
        SearchLimits(verify=10, expand=20)  # only verified results are averaged
    with pytest.raises(ConfigError, match="no search limit"):
        INDEX_LIMITS.tighter("mine", depth=3)


@pytest.mark.parametrize("limits", [INDEX_LIMITS, SERVER_LIMITS], ids=["index", "server"])
def test_each_count_is_refused_above_its_limit_and_accepted_at_it(limits):
    at = SearchParams(k=limits.k, rerank=limits.rerank, verify=limits.verify, expand=limits.expand, limits=limits)
    assert (at.k, at.rerank, at.verify, at.expand) == (limits.k, limits.rerank, limits.verify, limits.expand)
    for name in ("k", "rerank", "verify", "expand"):
        over = getattr(limits, name) + 1
        with pytest.raises(ConfigError, match=f"{name} = {over:,} is over {limits.whose} limit of "
                                              f"{getattr(limits, name):,}"):
            SearchParams(**{name: over}, limits=limits)


@pytest.mark.parametrize("kwargs, message", [
    ({"k": 0}, "k must be an integer >= 1, got 0"), ({"k": 2.5}, "k must be an integer >= 1"),
    ({"k": True}, "k must be an integer >= 1"), ({"k": "3"}, "k must be an integer >= 1"),
    ({"verify": -1}, "verify must be an integer >= 0"), ({"expand": 1.0}, "expand must be an integer >= 0"),
    ({"rerank": -5}, "rerank must be an integer >= 0"), ({"nprobe": 0}, "nprobe must be an integer >= 1"),
    ({"mode": "fast"}, r"mode must be one of \('exact', 'pq'\), got 'fast'"),
    ({"expansion": "dqe"}, r"expansion must be one of \('aqe', 'alpha', 'recursive', 'recursive-centred'\)"),
    ({"pairs": "yes"}, "pairs must be True or False"), ({"limits": {"k": 5}}, "limits must be"),
    ({"false_alarms_per_pair": 0}, r"false_alarms_per_pair must be a number in \(0, 1\), got 0"),
    ({"false_alarms_per_pair": 1.0}, r"false_alarms_per_pair must be a number in \(0, 1\)"),
    ({"false_alarms_per_pair": float("nan")}, "false_alarms_per_pair must be a number in"),
    ({"false_alarms_per_pair": "1e-7"}, "false_alarms_per_pair must be a number in"),
])
def test_errors_name_the_parameter_and_what_is_allowed(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SearchParams(**kwargs)


def test_the_verification_bar_goes_to_the_verification():
    """false_alarms_per_pair sets the second stage's VerificationParams; None keeps its default."""
    from streamk.verification import VerificationParams

    assert SearchParams().verification_params() == VerificationParams()
    p = SearchParams(false_alarms_per_pair=np.float32(1e-7))
    assert type(p.false_alarms_per_pair) is float
    assert p.verification_params() == VerificationParams(false_alarms_per_pair=float(np.float32(1e-7)))


def test_numpy_integers_are_taken_as_ints():
    p = SearchParams(k=np.int64(7), verify=np.int32(3), nprobe=np.uint8(2))
    assert (p.k, p.verify, p.nprobe) == (7, 3, 2) and all(type(v) is int for v in (p.k, p.verify, p.nprobe))


def test_a_filter_is_checked_when_built_and_copied():
    with pytest.raises(FilterError):
        SearchParams(where={"year": {"between": [1, 2]}})
    where = {"tag": {"in": ["a", "b"]}}
    p = SearchParams(where=where)
    where["tag"]["in"].append("c")  # the caller's dict changes after the check: the params do not
    assert p.where == {"tag": {"in": ["a", "b"]}}
    assert SearchParams(where={}).where is None


def test_frozen_and_replace_checks_again():
    p = SearchParams(k=5, box=(0, 0, 10, 10))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.k = 10 ** 9
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.box = None
    q = p.replace(k=6)
    assert (q.k, q.box, p.k) == (6, (0.0, 0.0, 10.0, 10.0), 5)
    with pytest.raises(ConfigError):
        p.replace(k=0)
    assert pickle.loads(pickle.dumps(p)) == p  # what travels to a shard's owner
    assert SearchParams(k=1_000, limits=SERVER_LIMITS) == SearchParams(k=1_000)  # limits are not a parameter


def test_defaults_resolve_as_documented():
    p = SearchParams()
    assert (p.k, p.mode, p.verify, p.expand, p.expansion, p.box, p.where, p.pairs) == \
        (10, None, None, None, "recursive-centred", None, None, False)
    assert (p.verify_count(), p.expand_count()) == (100, 50)
    assert (SearchParams(verify=0, expand=0).verify_count(), SearchParams(verify=0, expand=0).expand_count()) == (0, 0)


def test_exported_at_the_top_level():
    assert streamk.SearchParams is SearchParams


def test_one_count_check():
    assert check_count("n", np.int16(4), 1, 10) == 4
    with pytest.raises(ConfigError, match="n = 11 is over streamk's limit of 10 things"):
        check_count("n", 11, 1, 10, " things")
    assert check_count("n", 10 ** 12, 0) == 10 ** 12  # no maximum


# ---------------------------------------------------------------- the one box rule
EMPTY_QUERY = GeometryRecord(np.zeros(0, np.uint16), np.zeros(0, np.uint64), np.zeros((0, 2), np.float32),
                             np.zeros((0, 3), np.float32), np.zeros(0, np.float32), (400, 400), 0)
GOOD = [(0, 0, 1, 1), [10.5, 20, 300, 240.25], np.array([0.0, 0.0, 5.0, 7.0])]
BAD = [(10, 0, 10, 5), (0, 5, 3, 5), (10, 10, 5, 20), (0, 0, 1), (0, 0, np.nan, 3), (0, 0, np.inf, 3), "abcd",
       None, (0, 0, 1, 1, 1)]


@pytest.mark.parametrize("box", GOOD)
def test_a_box_with_x1_below_x2_and_y1_below_y2_is_taken_everywhere(box):
    expected = tuple(float(v) for v in box)
    assert check_box(box) == expected
    assert SearchParams(box=box).box == expected
    assert normalise_box(box) == list(expected)
    cx, cy = (expected[0] + expected[2]) / 2, (expected[1] + expected[3]) / 2
    kp = np.array([[cx, cy, 1, 0, 1, 0], [expected[2] + 1, cy, 1, 0, 1, 0]], np.float32)  # inside; right of it
    assert crop_to_box(Features(kp, np.zeros((2, 128), np.uint8), (400, 400)), box).positions.tolist() == [[cx, cy]]
    assert verify_geometry(EMPTY_QUERY, [], query_box=box) == []


@pytest.mark.parametrize("box", BAD, ids=repr)
def test_an_empty_reversed_or_malformed_box_is_refused_everywhere(box):
    with pytest.raises(ConfigError, match="box must"):
        check_box(box)
    with pytest.raises(ConfigError, match="box must"):
        SearchParams(box=box) if box is not None else check_box(None)
    if box is not None:
        with pytest.raises(ConfigError, match="box must"):
            normalise_box(box)
    with pytest.raises(ConfigError, match="box must"):
        crop_to_box(Features.empty((10, 10)), box)
    with pytest.raises(ConfigError, match="query_box must"):
        verify_geometry(EMPTY_QUERY, [], query_box=box) if box is not None else check_box(None, "query_box")


def test_a_box_past_the_image_is_clipped_to_it_and_one_outside_it_refused_with_its_size():
    """The image of 400 x 400 pixels spans [-0.5, 399.5]: a box reaching past it searches
    (and maps as its region) the part of the image inside it; one with nothing of the
    image inside is one ConfigError that says the image's size, wherever it is given."""
    assert clip_box((-50, 10, 1000, 20.5), (400, 300)) == (-0.5, 10.0, 399.5, 20.5)
    assert clip_box((1, 2, 3, 4), (400, 400)) == (1.0, 2.0, 3.0, 4.0)  # inside: as given
    kp = np.array([[0, 0, 1, 0, 1, 0], [399, 399, 1, 0, 1, 0]], np.float32)
    assert len(crop_to_box(Features(kp, np.zeros((2, 128), np.uint8), (400, 400)), (-9, -9, 1e6, 1e6))) == 2
    for outside in [(400, 0, 500, 10), (0, -20, 10, -1), (-1e6, -1e6, -1, -1)]:
        with pytest.raises(ConfigError, match="outside the image, which is 400 x 400 pixels"):
            clip_box(outside, (400, 400))
        with pytest.raises(ConfigError, match="box .* outside the image, which is 400 x 400 pixels"):
            crop_to_box(Features.empty((400, 400)), outside)
        with pytest.raises(ConfigError, match="query_box .* outside the image, which is 400 x 400 pixels"):
            verify_geometry(EMPTY_QUERY, [], query_box=outside)


# ---------------------------------------------------------------- search takes it whole
@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    path = tmp_path_factory.mktemp("params") / "ix"
    idx = StreamingIndex.create(path, make_encoder(), vector_dtype="float32")
    idx.add_many([{"id": f"v{i}", "vector": v, "metadata": {"half": i % 2}} for i, v in enumerate(vectors(5, 60))])
    idx.index_field("half")
    yield idx
    idx.close()


def test_search_with_params_is_search_with_keywords(small_index):
    V = vectors(5, 60)
    p = SearchParams(k=7, mode="exact", where={"half": 1})
    by_params = small_index.search(V[3], params=p)
    assert by_params == small_index.search(V[3], k=7, mode="exact", where={"half": 1})
    ref = [f"v{i}" for i in np.argsort(-(V @ V[3]), kind="stable") if i % 2 == 1][:7]  # brute force
    assert [h.id for h in by_params] == ref
    scores, ids = small_index.search(V[:2], params=p.replace(where=None))
    assert ids.shape == (2, 7) and list(ids[:, 0]) == ["v0", "v1"]


def test_search_refuses_params_and_keywords_at_once(small_index):
    V = vectors(5, 60)
    with pytest.raises(ConfigError, match="not both"):
        small_index.search(V[0], k=3, params=SearchParams(k=5))
    with pytest.raises(ConfigError, match="params must be"):
        small_index.search(V[0], params={"k": 5})


def test_nprobe_or_rerank_on_an_exact_search_is_said_not_dropped(small_index):
    """An index without a codec searches exactly: nprobe / rerank given to it have no effect,
    and the search says so (IgnoredSearchParameterWarning) while answering as without them."""
    import warnings

    from streamk.errors import IgnoredSearchParameterWarning

    V = vectors(5, 60)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing said when nothing is ignored
        plain = small_index.search(V[3], k=5)
    with pytest.warns(IgnoredSearchParameterWarning, match=r"nprobe=32 has no effect: this index has no trained codec"):
        assert small_index.search(V[3], k=5, nprobe=32) == plain
    with pytest.warns(IgnoredSearchParameterWarning, match=r"rerank=10 has no effect"):
        assert small_index.search(V[3], k=5, mode="exact", rerank=10) == plain


def test_params_of_the_same_keywords_are_equal_and_still_checked():
    """SearchParams.of keeps the last one built from the same keywords: equal keywords give
    an equal object, and keywords equal in value but not in type (True == 1) are checked."""
    kw = dict(k=1, mode="pq", nprobe=4, rerank=0, box=None, verify=None, expand=None, expansion="aqe",
              pairs=False, where=None)
    first = SearchParams.of(None, **kw)
    assert SearchParams.of(None, **kw) == first == SearchParams(**kw)
    with pytest.raises(ConfigError):
        SearchParams.of(None, **dict(kw, k=True))
    assert SearchParams.of(None, **dict(kw, k=2)).k == 2 and SearchParams.of(None, **kw).k == 1
    assert SearchParams.of(None, **dict(kw, where={"year": 2020})).where == {"year": 2020}

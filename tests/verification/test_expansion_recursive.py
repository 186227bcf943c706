"""Recursive AQE (streamk.verification.recursive_expansion) against vectors computed by
hand and a plain numpy reference, and its bounds on work."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamk.errors import ConfigError
from streamk.verification import recursive_expansion

E = np.eye(5)


def unit(v):
    return v / np.linalg.norm(v)


# a small index: q = e0; row 3 lies between e1 and e2
D = np.stack([E[0], E[1], E[2], unit(E[1] + 2 * E[2]), E[3]])
ORACLE = {3: 25, 2: 15}  # the rows the query verifies, with their inliers


def exact_search(v):
    s = D @ v
    return [(int(i), float(s[i])) for i in np.argsort(-s, kind="stable")]


def oracle_verify(calls):
    def verify(ids):
        calls.append(list(ids))
        return [(ORACLE.get(i, 3), i in ORACLE) for i in ids]
    return verify


def test_the_expanded_vector_by_hand():
    # round 1: q + e1 = (1, 1, 0, 0, 0)/sqrt 2: rows 0 and 1 (0.707), 3 (0.316), 2 (0); row 0 was
    # checked by the first stage, row 1 is verified: rows 3 (25 inliers) and 2 (15) are verified now.
    # round 2 adds row 3 (the most inliers): q + e1 + (e1 + 2 e2)/sqrt 5; round 3 adds row 2.
    calls = []
    rx = recursive_expansion(E[0], [(1, 20)], lambda ids: D[ids], exact_search, oracle_verify(calls), step=1,
                             checked=[0], window=4)
    by_hand = np.array([1, 1 + 1 / np.sqrt(5), 1 + 2 / np.sqrt(5), 0, 0])
    assert np.allclose(rx.vector, by_hand / np.linalg.norm(by_hand))
    assert calls == [[3, 2]]
    assert rx.averaged == [1, 3, 2] and rx.verified == [(3, 25), (1, 20), (2, 15)]
    assert (rx.searches, rx.verifications) == (3, 2)
    assert [i for i, _ in rx.results][:4] == np.argsort(-(D @ rx.vector), kind="stable")[:4].tolist()


def test_a_window_of_three_stops_before_row_two():
    rx = recursive_expansion(E[0], [(1, 20)], lambda ids: D[ids], exact_search, oracle_verify([]), step=1,
                             checked=[0], window=3)
    by_hand = np.array([1, 1 + 1 / np.sqrt(5), 2 / np.sqrt(5), 0, 0])  # q + e1 + row 3
    assert np.allclose(rx.vector, by_hand / np.linalg.norm(by_hand))
    assert (rx.searches, rx.verifications, rx.averaged) == (2, 1, [1, 3])


def test_the_bounds_stop_it():
    # two rounds: row 2 is verified but never averaged
    rx = recursive_expansion(E[0], [(1, 20)], lambda ids: D[ids], exact_search, oracle_verify([]), step=1,
                             checked=[0], window=4, rounds=2)
    assert rx.searches == 2 and rx.averaged == [1, 3] and (2, 15) in rx.verified
    # one new verification in all: row 2 is never checked
    calls = []
    rx = recursive_expansion(E[0], [(1, 20)], lambda ids: D[ids], exact_search, oracle_verify(calls), step=1,
                             checked=[0], window=4, max_verifications=1)
    assert calls == [[3]] and rx.verifications == 1 and rx.averaged == [1, 3]
    # top 1: AQE over the first verified, once (the step is larger than what is left)
    rx = recursive_expansion(E[0], [(1, 20)], lambda ids: D[ids], exact_search, oracle_verify([]), step=5,
                             checked=[0], window=4, top=1)
    assert rx.searches == 1 and rx.averaged == [1] and np.allclose(rx.vector, unit(E[0] + E[1]))
    # nothing verified: no search
    rx = recursive_expansion(E[0], [], lambda ids: D[ids], exact_search, oracle_verify([]))
    assert rx.searches == 0 and rx.vector is None and rx.results == []
    for bad in ({"step": 0}, {"rounds": 0}, {"top": True}, {"max_verifications": -1}):
        with pytest.raises(ConfigError):
            recursive_expansion(E[0], [(1, 20)], lambda ids: D[ids], exact_search, **bad)


def reference(q, V, verified0, checked, positives, step, top, window, budget, rounds):
    """Plain numpy: rounds of AQE, every verified image so far by inliers, the new results verified."""
    averaged, seen = [], set(checked) | {i for i, _ in verified0}
    pending = sorted(verified0, key=lambda v: -v[1])
    spent, searches, vec, found = 0, 0, None, dict(verified0)
    while searches < rounds and pending and len(averaged) < top:
        take, pending = pending[:min(step, top - len(averaged))], pending[min(step, top - len(averaged)):]
        averaged += [i for i, _ in take]
        vec = q + V[averaged].sum(axis=0)
        vec = vec / np.linalg.norm(vec)
        searches += 1
        order = np.argsort(-(V @ vec), kind="stable")[:window]
        new = [int(i) for i in order if int(i) not in seen][:budget - spent]
        seen.update(new)
        spent += len(new)
        hits = [(i, positives[i]) for i in new if i in positives]
        found.update(hits)
        pending = sorted(pending + hits, key=lambda v: -v[1])
    return vec, averaged, searches, spent, found


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(5, 40), step=st.integers(1, 6), top=st.integers(1, 12),
       window=st.integers(0, 15), budget=st.integers(0, 20), rounds=st.integers(1, 5))
def test_equals_a_numpy_reference_and_keeps_its_bounds(seed, n, step, top, window, budget, rounds):
    rng = np.random.default_rng(seed)
    V = rng.normal(size=(n, 6))
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    q = unit(rng.normal(size=6))
    inliers = rng.permutation(np.arange(10, 10 + n))  # distinct: the order by inliers is one
    positives = {i: int(inliers[i]) for i in range(n) if rng.random() < 0.5}
    first = np.argsort(-(V @ q), kind="stable")[:min(5, n)].tolist()
    verified0 = sorted([(i, positives[i]) for i in first if i in positives], key=lambda v: -v[1])
    calls, searched = [], []

    def search(v):
        s = V @ v
        out = [(int(i), float(s[i])) for i in np.argsort(-s, kind="stable")]
        searched.append([i for i, _ in out[:window]])
        return out

    def verify(ids):
        assert set(ids) <= set(searched[-1])  # only the last search's window
        calls.extend(ids)
        return [(positives.get(i, 3), i in positives) for i in ids]

    rx = recursive_expansion(q, verified0, lambda ids: V[ids], search, verify, step=step, checked=first, top=top,
                             window=window, max_verifications=budget, rounds=rounds)
    vec, averaged, searches, spent, found = reference(q, V, verified0, first, positives, step, top, window, budget,
                                                      rounds)
    assert rx.averaged == averaged and rx.searches == searches == len(searched) and rx.verifications == spent
    if vec is None:
        assert rx.vector is None
    else:
        assert np.allclose(rx.vector, vec)
    assert sorted(rx.verified) == sorted(found.items())
    assert [c for _, c in rx.verified] == sorted((c for _, c in rx.verified), reverse=True)
    # bounded work
    assert rx.searches <= rounds and len(rx.averaged) <= top and len(calls) == len(set(calls)) <= budget
    assert not set(calls) & (set(first) | {i for i, _ in verified0})


@pytest.fixture(scope="module")
def photo_index(paris6k_subset_photos, small_vocabulary, tmp_path_factory):
    """24 Paris photos (every landmark) in an index with local geometry, and a half-size view of one."""
    Image = pytest.importorskip("PIL.Image")
    from streamk.config import default_cache_dir
    from streamk.encoding import Encoder
    from streamk.features import HessianAffineSift, stored_pixels, extract
    from streamk.index import StreamingIndex

    photos = paris6k_subset_photos[::10][:24]
    ex = stored_pixels(HessianAffineSift())  # the benchmark photos as `streamk eval` reads them: its cached features
    feats = [extract(p, ex, cache=default_cache_dir()) for p in photos]
    encoder = Encoder(embedding="temb", k=8, aggregation="gmp").fit([f.descriptors for f in feats])
    tmp = tmp_path_factory.mktemp("recursive")
    img = Image.open(photos[5]).convert("L")
    view = tmp / "view.png"
    img.resize((img.size[0] // 2, img.size[1] // 2), Image.Resampling.LANCZOS).save(view)
    idx = StreamingIndex.create(tmp / "ix", encoder, vector_dtype="float32", extractor=ex, vocabulary=small_vocabulary)
    for p in photos:
        idx.add(p.stem, image_path=str(p))
    yield idx, view, ex, small_vocabulary, encoder, photos
    idx.close()


@pytest.mark.parametrize("expand", [1, 2, 50])
def test_an_index_search_equals_the_expansion_over_numpy_searches(photo_index, expand):
    """The index's expansion='recursive' against the same recursion over exact numpy searches
    and verify_geometry on the stored records."""
    from streamk.features import image_features
    from streamk.index.second_stage import recursive_budget
    from streamk.verification import make_query_record, verify_geometry

    idx, view, ex, voc, _, _ = photo_index
    R, k = 6, 10
    _, f = image_features(str(view), ex)
    qrec = make_query_record(voc, f.keypoints, f.descriptors, f.image_size)
    q = idx.query_vector(str(view))
    ids = idx.ids()
    V = np.stack([idx.vector(i) for i in ids]).astype(np.float64)

    def verify(rows):
        return [(c.inliers, c.verified) for c in verify_geometry(qrec, [idx.geometry(ids[j]) for j in rows])]

    def search(v):
        s = V @ v
        return [(int(j), float(s[j])) for j in np.argsort(-s, kind="stable")]
    first = [j for j, _ in search(q)]
    head = sorted([(j, c) for j, (c, ok) in zip(first[:R], verify(first[:R])) if ok], key=lambda v: -v[1])
    rx = recursive_expansion(q, head, lambda rows: V[rows], search, verify, step=expand, checked=first[:R],
                             window=R, max_verifications=recursive_budget(R))
    found = [j for j, _ in rx.verified]
    expected = found + [j for j, _ in rx.results if j not in set(found)]
    got = idx.search(str(view), k=k, verify=R, expand=expand, expansion="recursive", mode="exact")
    assert len(head) >= 1
    assert [h.id for h in got] == [ids[j] for j in expected[:k]]
    assert [h.verified for h in got[:len(found)]] == [True] * min(k, len(found))
    assert [h.inliers for h in got[:len(found)]] == [c for _, c in rx.verified][:k]


@pytest.mark.parametrize("expand", [1, 50])
def test_a_sharded_index_runs_it_as_one_index_does(photo_index, tmp_path, expand):
    """The same photos in 2 shards: expansion='recursive' verifies each expanded search's new
    results on the shard that holds them, and gives the one index's results (ids, scores,
    inliers, stages); the one index's equal the numpy recursion (the test above)."""
    from streamk.index import ShardedIndex
    from streamk.pipeline import Ingester

    idx, view, ex, voc, encoder, photos = photo_index
    sharded = ShardedIndex.create(tmp_path / "sh", encoder, 2, vector_dtype="float32", extractor=ex, vocabulary=voc)
    try:
        with Ingester(sharded, workers=1, progress=False) as ing:
            assert ing.ingest([str(p) for p in photos]).added == len(photos)
        params = {"k": 10, "verify": 6, "expand": expand, "expansion": "recursive", "mode": "exact"}
        one, many = idx.search(str(view), **params), sharded.search(str(view), **params)
        assert sum(h.verified for h in one) >= 2
        assert [(h.id.rsplit(".", 1)[0], round(h.score, 5), h.inliers, h.verified, h.stage) for h in many] == \
            [(h.id, round(h.score, 5), h.inliers, h.verified, h.stage) for h in one]  # ingestion ids: file names
    finally:
        sharded.close()


def test_the_centred_recursion_subtracts_the_mean_of_the_rest_per_vector_averaged():
    """Centred recursive AQE (Rocchio, the rest of the collection as the non-relevant set):
    each searched vector is normalise(q + sum of the n averaged - (n + 1) mu'), mu' the mean of
    the N - n rows not averaged, computed here in plain numpy from the ids the recursion
    reports averaging."""
    searched = []

    def search(v):
        searched.append(np.array(v))
        return exact_search(v)
    rx = recursive_expansion(E[0], [(1, 20)], lambda ids: D[ids], search, oracle_verify([]), step=1, checked=[0],
                             window=4, centre=(D.mean(axis=0), len(D)))
    assert len(searched) == 3
    for n, v in enumerate(searched, start=1):  # round n averages the first n ids
        rest = np.delete(D, rx.averaged[:n], axis=0).mean(axis=0)
        ref = E[0] + D[rx.averaged[:n]].sum(axis=0) - (1 + n) * rest
        assert np.allclose(v, ref / np.linalg.norm(ref))
    assert np.allclose(rx.vector, searched[-1])


def test_nothing_is_subtracted_when_nothing_is_left_or_nothing_would_remain():
    plain = recursive_expansion(E[0], [(1, 20)], lambda ids: D[ids], exact_search, oracle_verify([]), step=1,
                                checked=[0], window=4)
    zero = recursive_expansion(E[0], [(1, 20)], lambda ids: D[ids], exact_search, oracle_verify([]), step=1,
                               checked=[0], window=4, centre=(np.zeros(5), len(D) + 100))
    assert plain.averaged == zero.averaged
    # a collection of one image, the query's own, averaged: no rest to subtract
    one = recursive_expansion(E[0], [(0, 99)], lambda ids: E[[0]], lambda v: [(0, 1.0)], None, centre=(E[0], 1))
    assert np.allclose(one.vector, E[0])
    # a query and one averaged image that are the collection's two images alike: the plain average
    two = recursive_expansion(E[0], [(0, 99)], lambda ids: E[[0]], lambda v: [(0, 1.0)], None, centre=(E[0], 2))
    assert np.allclose(two.vector, E[0])


def test_a_centre_of_another_dimension_is_refused():
    from streamk.errors import DimensionError
    with pytest.raises(DimensionError):
        recursive_expansion(E[0], [(1, 20)], lambda ids: D[ids], exact_search, None, centre=(np.zeros(4), 5))

"""The +SP+QE row of ``streamk eval`` (streamk.evaluation.second_stage_rows): the query
expansion a search makes by default, by the index's own second stage, named in its label.

Synthetic data (a second): one scene of random keypoints seen in 3 views (a scale and a
shift of the same features) and 12 images of other random keypoints; vectors on an
orthonormal basis so that every score is known by hand."""

import numpy as np
import pytest

from streamk.features import Features
from streamk.index import SearchParams
from streamk.verification import verify_geometry

N_FEATURES, SIZE, DIM, N_OTHERS = 120, (400, 300), 16, 12


def features(rng, f=1.0, shift=0.0, xy=None, desc=None):
    xy = rng.uniform((20, 20), (380, 280), (N_FEATURES, 2)) if xy is None else xy
    desc = rng.integers(0, 120, (N_FEATURES, 128)).astype(np.uint8) if desc is None else desc
    scale = np.full(N_FEATURES, 5.0)
    kp = np.column_stack([xy * f + shift, scale * f, np.zeros(N_FEATURES), scale * f, np.zeros(N_FEATURES)])
    return Features(kp.astype(np.float32), desc, SIZE)


def unit(v):
    return (v / np.linalg.norm(v)).astype(np.float32)


@pytest.fixture(scope="module")
def scene():
    """(database features, query features, D (N, DIM), q): database 0-2 the views of the
    query's scene, 3.. other images. On the basis e: q = e0; view 0 = e0 + e1 (score 0.71,
    first); the others e0 + (1.2 + 0.05 j) e_(2+j) (0.64 .. 0.50); views 1, 2 = 0.3 e0 + e1
    (+ 0.1 e14 / e15) (0.29: ranks 14, 15). AQE over view 0, q2 = 0.92 e0 + 0.38 e1, puts
    views 1 and 2 second and third (0.63 against at most 0.59)."""
    rng = np.random.default_rng(5)
    xy = rng.uniform((20, 20), (380, 280), (N_FEATURES, 2))
    desc = rng.integers(0, 120, (N_FEATURES, 128)).astype(np.uint8)
    db = [features(rng, 1 / (1 + v / 2), 10 * v, xy, desc) for v in range(3)]
    db += [features(rng) for _ in range(N_OTHERS)]
    e = np.eye(DIM)
    D = [e[0] + e[1], 0.3 * e[0] + e[1] + 0.1 * e[14], 0.3 * e[0] + e[1] + 0.1 * e[15]]
    D += [e[0] + (1.2 + 0.05 * j) * e[2 + j] for j in range(N_OTHERS)]
    return db, [features(rng, 1.0, 0.0, xy, desc)], np.stack([unit(v) for v in D]), unit(e[0])


def rows_of(scene, vocabulary, R, expand, **kwargs):
    from streamk.evaluation.second_stage_rows import SecondStageRows

    db, queries, _, _ = scene
    rows = SecondStageRows(vocabulary, db, queries, [None], R, expand, **kwargs)
    seen = []
    checks = rows.checks

    def spy(i, ids, qrec):  # every database index verified, in order
        seen.extend(int(j) for j in ids)
        return checks(i, ids, qrec)
    rows.checks = spy
    return rows, seen


def plus_sp_qe(rows, scene):
    _, _, D, q = scene
    ranking = np.argsort(-(D @ q), kind="stable")
    qrec = rows.query_record(0)
    return rows.expanded(0, q, D, ranking, rows.checks(0, ranking[:rows.verify_r], qrec), qrec), ranking


def test_the_row_is_a_searchs_default_expansion_and_says_so(scene, random_vocabulary):
    rows, _ = rows_of(scene, random_vocabulary, 11, 1)
    assert rows.expansion == SearchParams().expansion == "recursive-centred"
    assert rows.sp_qe_suffix() == " +SP+QE(recursive-centred)"
    _, _, D, q = scene
    mv = type("Method", (), {"database": D, "queries": q[None, :], "ranks": lambda self: np.argsort(-(q @ D.T))[None]})
    assert set(rows.rankings(mv())) == {" +QE", " +SP", " +SP+QE(recursive-centred)"}


def test_aqe_is_numpy_aqe_over_the_verified_top_r(scene, random_vocabulary):
    """expansion="aqe": the verified of the top R by inliers, then the order of
    normalise(q + their first ``expand`` vectors) (numpy), nothing verified beyond R."""
    _, _, D, q = scene
    for R, expand in ((11, 1), (11, 50), (2, 0)):
        rows, seen = rows_of(scene, random_vocabulary, R, expand, expansion="aqe")
        got, ranking = plus_sp_qe(rows, scene)
        checks = verify_geometry(rows.query_record(0), [rows.records[j] for j in ranking[:R]])
        head = [j for _, j in sorted((-c.inliers, p) for p, c in enumerate(checks) if c.verified)]
        head = [int(ranking[p]) for p in head]
        assert head[:1] == [0]
        if expand:
            q2 = q + D[head[:expand]].sum(axis=0)
            after = np.argsort(-(D @ (q2 / np.linalg.norm(q2))), kind="stable")
        else:
            after = ranking
        assert got.tolist() == head + [j for j in after.tolist() if j not in head]
        assert seen == ranking[:R].tolist()  # the top R, nothing more


def test_recursive_verifies_what_its_search_finds(scene, random_vocabulary):
    """expansion="recursive-centred" (the default), R = 11: views 1 and 2, ranks 14 and 15 in the
    first stage, come second and third in the expanded search, are verified (the R / 10 =
    2 new verifications allowed) and join the verified at the head of the ranking; AQE
    leaves them unverified."""
    rows, seen = rows_of(scene, random_vocabulary, 11, 1)
    got, ranking = plus_sp_qe(rows, scene)
    assert {1, 2}.isdisjoint(ranking[:11].tolist())
    assert seen[:11] == ranking[:11].tolist() and seen[11:] == [1, 2]  # beyond the top R: the two views
    assert sorted(got[:3].tolist()) == [0, 1, 2] and sorted(got.tolist()) == list(range(len(ranking)))
    rows, seen = rows_of(scene, random_vocabulary, 11, 1, expansion="aqe")
    plus_sp_qe(rows, scene)
    assert len(seen) == 11

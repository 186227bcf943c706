"""Inliers are counted one-to-one through the whole second stage (records with multiple
assignment, the per-word cap, RANSAC): each query feature and each database feature
takes part in one inlier at most, against a brute-force reference in plain numpy over
every tentative match."""

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching

from streamk.verification import make_query_record, make_record, verify_geometry

HAMMING = 24
CAP = 32
ERROR = 0.02  # VerificationParams' default, a fraction of the longer side


def brute_force_tentative(q, c, ht=HAMMING, cap=CAP):
    """matching.py's rule written plainly: for each shared word, the pairs within ``ht``
    bits, the ``cap`` closest by (distance, i, j); in the order (word, distance, i, j)."""
    rows = []
    for w in np.intersect1d(q.words, c.words):
        I, J = np.flatnonzero(q.words == w), np.flatnonzero(c.words == w)
        pairs = []
        for i in I:
            for j in J:
                d = bin(int(q.signatures[i]) ^ int(c.signatures[j])).count("1")
                if d <= ht:
                    pairs.append((d, i, j))
        rows += [(w, d, i, j) for d, i, j in sorted(pairs)[:cap]]
    return np.array(rows, np.int64).reshape(-1, 4)


def consistent(q, c, rows, affine):
    """The tentative matches whose symmetric transfer errors are within each side's threshold."""
    P1 = q.xy[rows[:, 2]].astype(np.float64)
    P2 = c.xy[rows[:, 3]].astype(np.float64)
    M, t = affine[:, :2], affine[:, 2]
    fwd = np.sum((P1 @ M.T + t - P2) ** 2, axis=1)
    bwd = np.sum(((P2 - t) @ np.linalg.inv(M).T - P1) ** 2, axis=1)
    tq, tc = ERROR * max(q.image_size), ERROR * max(c.image_size)
    return (fwd <= tc * tc) & (bwd <= tq * tq)


def greedy_one_to_one(qf, cf):
    used_q, used_c, n = set(), set(), 0
    for a, b in zip(qf, cf):
        if a not in used_q and b not in used_c:
            used_q.add(a)
            used_c.add(b)
            n += 1
    return n


def burst_scene(rng, n=60, copies=4, size=(800, 600)):
    """n query features (several sharing one descriptor: bursts that fill a word past the
    cap), and a candidate that holds each of them ``copies`` times, a few pixels apart
    (within the threshold), moved by a similarity: every copy is a tentative match of its
    feature, so counting matches instead of features would find n * copies inliers."""
    desc = rng.integers(0, 120, (n, 128)).astype(np.uint8)
    desc[n // 2:] = desc[0]  # half the features share one descriptor: one word, one signature
    kp = np.zeros((n, 6))
    kp[:, :2] = rng.uniform(50, 550, (n, 2))
    kp[:, 2] = kp[:, 4] = rng.uniform(4, 12, n)
    s, a = 1.1, np.deg2rad(5.0)
    M = s * np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    t = np.array([40.0, -10.0])
    kp2 = np.repeat(kp, copies, axis=0)
    kp2[:, :2] = kp2[:, :2] @ M.T + t + rng.uniform(-3, 3, (n * copies, 2))
    kp2[:, 2] *= s
    kp2[:, 4] *= s
    return kp, desc, kp2, np.repeat(desc, copies, axis=0), size


@pytest.mark.parametrize("seed", range(4))
def test_inliers_are_one_to_one_against_a_brute_force_reference(seed, random_vocabulary):
    rng = np.random.default_rng(seed)
    kp, desc, kp2, desc2, size = burst_scene(rng)
    q = make_query_record(random_vocabulary, kp, desc, size)  # 3 words per feature
    c = make_record(random_vocabulary, kp2, desc2, size)
    v, = verify_geometry(q, [c], return_pairs=True)
    assert np.isfinite(v.affine).all()
    rows = brute_force_tentative(q, c)
    assert v.tentative == len(rows)
    ok = consistent(q, c, rows, v.affine)
    qf, cf = q.ids[rows[ok, 2]], rows[ok, 3]
    # the count is the greedy one-to-one count over the tentative matches, in their order
    assert v.inliers == greedy_one_to_one(qf.tolist(), cf.tolist())
    # never more than a maximum matching of features, nor than the query's features
    graph = csr_matrix((np.ones(len(qf)), (qf, cf)), shape=(q.n_features, len(c)))
    maximum = int((maximum_bipartite_matching(graph, perm_type="column") >= 0).sum())
    assert v.inliers <= maximum <= len(kp)
    assert maximum >= 20 and v.inliers >= 0.8 * maximum  # the planted map is found
    assert int(ok.sum()) > v.inliers  # several matches per feature were consistent: one-to-one mattered
    # the reported pairs: each query position and each candidate position once
    assert len(v.pairs) == v.inliers
    assert len(np.unique(v.pairs[:, :2], axis=0)) == v.inliers
    assert len(np.unique(v.pairs[:, 2:], axis=0)) == v.inliers

"""Evaluation: APs computed by hand (arithmetic in the comments), the revisited
protocols and mP@k on a tiny hand-made ground truth, UKBench N-S by hand, and a
literal transcription of the official compute_ap.cpp as a cross-check on
random rankings (where hand arithmetic is impractical)."""

import json
import math

import numpy as np
import pytest

from streamk.datasets import Dataset, Query, holidays_from_ids, ukbench_from_ids
from streamk.errors import RankingError, StreamkError
from streamk.evaluation.metrics import (average_precision, compute_map, evaluate, ns_scores, positive_positions,
                                precision_at_k, precision_recall, query_precision_recall)


def idx(*values):
    return np.array(values, dtype=np.int64)


# ------------------------------------------------------------------- reference


def compute_ap_cpp(pos, amb, ranked_list):
    """Line-by-line transcription of the official Oxford compute_ap.cpp."""
    old_recall, old_precision, ap = 0.0, 1.0, 0.0
    intersect_size, j = 0, 0
    for item in ranked_list:
        if item in amb:
            continue
        if item in pos:
            intersect_size += 1
        recall = intersect_size / float(len(pos))
        precision = intersect_size / (j + 1.0)
        ap += (recall - old_recall) * ((old_precision + precision) / 2.0)
        old_recall, old_precision = recall, precision
        j += 1
    return ap


# ------------------------------------------------------------- AP by hand


def test_ap_no_junk_by_hand():
    # ranking 5 3 7 1 2, positives {3, 2}, n_pos = 2, recall step 1/2
    #   3 at j=1, 0 found before: p0 = 0/1 = 0,   p1 = 1/2 -> (0 + 1/2)/2 * 1/2   = 1/8
    #   2 at j=4, 1 found before: p0 = 1/4,       p1 = 2/5 -> (1/4 + 2/5)/2 * 1/2 = 13/80
    # AP = 1/8 + 13/80 = 23/80
    assert average_precision(idx(5, 3, 7, 1, 2), idx(3, 2)) == pytest.approx(23 / 80)


def test_ap_positive_at_rank_zero_by_hand():
    # ranking 3 5 2, positives {3, 2}
    #   3 at j=0: p0 = 1 (j = 0), p1 = 1/1 -> 1 * 1/2             = 1/2
    #   2 at j=2: p0 = 1/2,       p1 = 2/3 -> (1/2 + 2/3)/2 * 1/2 = 7/24
    # AP = 1/2 + 7/24 = 19/24
    assert average_precision(idx(3, 5, 2), idx(3, 2)) == pytest.approx(19 / 24)
    # both at the top: 1/2 + (1/1 + 2/2)/2 * 1/2 = 1
    assert average_precision(idx(2, 3, 5), idx(3, 2)) == pytest.approx(1.0)


def test_junk_at_start_is_skipped_not_ranked():
    # junk 9 first: the list becomes 3 5 2 -> 19/24 (above)
    assert average_precision(idx(9, 3, 5, 2), idx(3, 2), junk=idx(9)) == pytest.approx(19 / 24)
    # had 9 been a plain negative: 3 at j=1 -> (0 + 1/2)/2/2 = 1/8; 2 at j=3 -> (1/3 + 2/4)/2/2 = 5/24
    # AP = 1/8 + 5/24 = 1/3, so junk does change the number
    assert average_precision(idx(9, 3, 5, 2), idx(3, 2)) == pytest.approx(1 / 3)


def test_junk_in_middle_and_end():
    # middle: 3 9 8 2 5 with junk {9, 8} -> 3 2 5: both positives at the top -> AP = 1
    assert average_precision(idx(3, 9, 8, 2, 5), idx(3, 2), junk=idx(9, 8)) == pytest.approx(1.0)
    # end: 3 5 2 9 with junk {9} -> 3 5 2 -> 19/24
    assert average_precision(idx(3, 5, 2, 9), idx(3, 2), junk=idx(9)) == pytest.approx(19 / 24)
    # several positions: 9 3 8 5 2 7 with junk {9, 8, 7} -> 3 5 2 -> 19/24
    assert average_precision(idx(9, 3, 8, 5, 2, 7), idx(3, 2), junk=idx(9, 8, 7)) == pytest.approx(19 / 24)


def test_three_positives_with_junk_by_hand():
    # ranking 4 0 9 1 6 2 8, positives {0, 1, 2}, junk {9, 8} -> 4 0 1 6 2; recall step 1/3
    #   0 at j=1, 0 before: (0/1 + 1/2)/2 / 3 = 1/12
    #   1 at j=2, 1 before: (1/2 + 2/3)/2 / 3 = 7/36
    #   2 at j=4, 2 before: (2/4 + 3/5)/2 / 3 = 11/60
    # AP = 15/180 + 35/180 + 33/180 = 83/180
    ap = average_precision(idx(4, 0, 9, 1, 6, 2, 8), idx(0, 1, 2), junk=idx(9, 8))
    assert ap == pytest.approx(83 / 180)
    assert positive_positions(idx(4, 0, 9, 1, 6, 2, 8), idx(0, 1, 2), idx(9, 8)).tolist() == [1, 2, 4]


def test_no_positive_found_and_partial_ranking():
    # none of {3, 2} retrieved: AP = 0
    assert average_precision(idx(5, 7, 1), idx(3, 2)) == 0.0
    # a shortlist holding only 3 (first): 1 * 1/2 = 1/2; the missing positive adds nothing
    assert average_precision(idx(3), idx(3, 2)) == pytest.approx(0.5)
    # no positives at all: undefined
    assert math.isnan(average_precision(idx(3, 2), idx()))


def test_junk_wins_over_positive():
    # 2 is both positive and junk: skipped (compute_ap.cpp tests junk first) but still counted in n_pos
    # list 3 2 -> 3 : 1 * 1/2 = 1/2
    assert average_precision(idx(3, 2), idx(3, 2), junk=idx(2)) == pytest.approx(0.5)


def test_matches_transcription_of_compute_ap_cpp():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        ranking = rng.permutation(n)[: int(rng.integers(0, n + 1))]
        labels = rng.integers(0, 3, size=n)          # 0 negative, 1 positive, 2 junk
        pos, junk = np.flatnonzero(labels == 1), np.flatnonzero(labels == 2)
        if pos.size == 0:
            continue
        ref = compute_ap_cpp(set(pos.tolist()), set(junk.tolist()), ranking.tolist())
        assert average_precision(ranking, pos, junk) == pytest.approx(ref, abs=1e-12)


# ------------------------------------------------------ precision-recall curve


def test_precision_recall_points_by_hand():
    # 3 5 2, positives {3, 2}: after 3 -> (1/2, 1/1); after 5 -> (1/2, 1/2); after 2 -> (2/2, 2/3)
    recall, precision = precision_recall(idx(3, 5, 9, 2), idx(3, 2), junk=idx(9))
    np.testing.assert_allclose(recall, [0, 0.5, 0.5, 1.0])
    np.testing.assert_allclose(precision, [1, 1, 0.5, 2 / 3])
    # the trapezoid area under these points is the AP, 19/24
    area = float(np.sum(np.diff(recall) * (precision[1:] + precision[:-1]) / 2))
    assert area == pytest.approx(19 / 24)


def test_query_precision_recall_uses_the_protocol():
    ds = holidays_from_ids(["100000", "100001", "100002", "100100"])
    # query 100000 is junk in its own ranking: 0 3 1 2 -> 3 1 2
    #   after 3: (0/2, 0/1); after 1: (1/2, 1/2); after 2: (2/2, 2/3)
    recall, precision = query_precision_recall(idx(0, 3, 1, 2), ds, "100000")
    np.testing.assert_allclose(recall, [0, 0, 0.5, 1.0])
    np.testing.assert_allclose(precision, [1, 0, 0.5, 2 / 3])
    rds = revisited_toy()
    # query A, hard protocol: positives {2}, junk {0, 1, 3}: 2 3 0 4 -> 2 4 -> (1, 1), (1, 1/2)
    recall, precision = query_precision_recall(idx(2, 3, 0, 4), rds, 0, protocol="hard")
    np.testing.assert_allclose(recall, [0, 1, 1])
    np.testing.assert_allclose(precision, [1, 1, 0.5])


# ------------------------------------------------------------------- mAP


def test_map_skips_query_without_positives():
    gt = [(idx(3, 2), idx()), (idx(), idx(1)), (idx(0), idx())]
    ranks = np.array([[3, 5, 2, 0, 1, 4], [0, 1, 2, 3, 4, 5], [1, 0, 2, 3, 4, 5]])
    res = compute_map(ranks, gt)
    # q0: 19/24 (above); q1: skipped; q2: 0 at j=1 -> (0 + 1/2)/2 = 1/4
    assert res.n_skipped == 1
    assert math.isnan(res.aps[1])
    assert res.aps[0] == pytest.approx(19 / 24) and res.aps[2] == pytest.approx(1 / 4)
    assert res.map == pytest.approx((19 / 24 + 1 / 4) / 2)


def test_evaluate_oxford_style_dataset():
    q0 = Query("a_1", "img0", 0, (0, 0, 10, 10), idx(0, 2), idx(4))
    q1 = Query("a_2", "img3", 3, None, idx(3), idx())
    ds = Dataset("toy", [f"img{i}" for i in range(6)], [q0, q1], protocol="oxford", crop_query=True)
    ranks = [idx(0, 4, 1, 2, 3, 5), idx(0, 3)]          # the second one is a shortlist
    res = evaluate(ranks, ds)
    # q0: 0 4 1 2 3 5, junk 4 -> 0 1 2 3 5: 0 at j=0 -> 1/2; 2 at j=2 -> (1/2 + 2/3)/2/2 = 7/24 -> 19/24
    # q1: 0 3: 3 at j=1 -> (0 + 1/2)/2 = 1/4
    assert res.aps.tolist() == pytest.approx([19 / 24, 1 / 4])
    assert res.map == pytest.approx((19 / 24 + 1 / 4) / 2)
    assert res.n_skipped == 0 and res.ns_score is None
    json.dumps(res.to_dict())
    assert "mAP" in res.summary()


def test_holidays_removes_query_from_its_ranking():
    ds = holidays_from_ids(["100000", "100001", "100002", "100100", "100101"])
    # q 100000 (index 0): positives {1, 2}; ranking 0 3 1 4 2 -> query removed -> 3 1 4 2
    #   1 at j=1: (0 + 1/2)/2/2 = 1/8;  2 at j=3: (1/3 + 2/4)/2/2 = 5/24  -> AP = 1/3
    # q 100100 (index 3): positive {4}; ranking 3 4 0 1 2 -> 4 0 1 2 -> AP = 1
    ranks = np.array([[0, 3, 1, 4, 2], [3, 4, 0, 1, 2]])
    res = evaluate(ranks, ds)
    assert res.aps.tolist() == pytest.approx([1 / 3, 1.0])
    assert res.map == pytest.approx(2 / 3)
    # the query's own position does not matter: at rank 2 instead of 0 gives the same APs
    ranks2 = np.array([[3, 1, 0, 4, 2], [4, 0, 3, 1, 2]])
    assert evaluate(ranks2, ds).aps.tolist() == pytest.approx([1 / 3, 1.0])


def test_exclude_query_flag_alone_by_hand():
    q = Query("100000", "100000", 0, None, idx(1, 2), idx())
    ds = Dataset("holidays", ["100000", "100001", "100002", "100100"], [q], protocol="holidays",
                 exclude_query=True)
    # 0 3 1 2 -> 3 1 2: 1 at j=1 -> (0 + 1/2)/2/2 = 1/8; 2 at j=2 -> (1/2 + 2/3)/2/2 = 7/24 -> 5/12
    assert evaluate([idx(0, 3, 1, 2)], ds).aps[0] == pytest.approx(5 / 12)
    ds_no_flag = Dataset("x", ds.image_ids, [q], protocol="oxford", exclude_query=False)
    # without the flag 0 counts as a negative: 1 at j=2 -> (0 + 1/3)/4 = 1/12; 2 at j=3 -> (1/3+2/4)/4 = 5/24
    assert evaluate([idx(0, 3, 1, 2)], ds_no_flag).aps[0] == pytest.approx(1 / 12 + 5 / 24)


# -------------------------------------------------------------- revisited


def revisited_toy():
    # A: easy {0, 1}, hard {2}, junk {3};  B: easy {5}, hard {}, junk {} (no Hard positives)
    qa = Query("A", "qa", None, (0, 0, 5, 5), idx(0, 1, 2), idx(3), easy=idx(0, 1), hard=idx(2))
    qb = Query("B", "qb", None, (0, 0, 5, 5), idx(5), idx(), easy=idx(5), hard=idx())
    return Dataset("rtoy", [f"i{k}" for k in range(8)], [qa, qb], protocol="revisited", crop_query=True)


def test_revisited_protocol_ground_truth():
    qa = revisited_toy().queries[0]
    pos, junk = qa.ground_truth("easy")
    assert pos.tolist() == [0, 1] and junk.tolist() == [2, 3]
    pos, junk = qa.ground_truth("medium")
    assert pos.tolist() == [0, 1, 2] and junk.tolist() == [3]
    pos, junk = qa.ground_truth("hard")
    assert pos.tolist() == [2] and junk.tolist() == [0, 1, 3]


def test_revisited_map_and_mpk_by_hand():
    ds = revisited_toy()
    ranks = np.array([[2, 3, 0, 4, 1, 5, 6, 7],
                      [5, 0, 1, 2, 3, 4, 6, 7]])
    res = evaluate(ranks, ds, ks=(1, 5, 10))
    easy, medium, hard = res.protocols["easy"], res.protocols["medium"], res.protocols["hard"]
    # A easy: pos {0,1}, junk {2,3}: 0 4 1 5 6 7 -> 0 at j=0: 1/2; 1 at j=2: (1/2+2/3)/4 = 7/24 -> 19/24
    #   P@k on 1-based ranks [1, 3]: P@1: kq=min(3,1)=1 -> 1/1; P@5: kq=min(3,5)=3 -> 2/3; P@10: 2/3
    # B easy: 5 first -> AP 1, ranks [1]: P@k = 1 for all k (kq = 1)
    assert easy.aps.tolist() == pytest.approx([19 / 24, 1.0])
    assert easy.map == pytest.approx((19 / 24 + 1) / 2)
    assert easy.mp_at_k == pytest.approx({1: 1.0, 5: (2 / 3 + 1) / 2, 10: (2 / 3 + 1) / 2})
    # A medium: pos {0,1,2}, junk {3}: 2 0 4 1 5 6 7 -> 2 at 0: 1/3; 0 at 1: (1/1+2/2)/2/3 = 1/3;
    #   1 at 3: (2/3 + 3/4)/2/3 = 17/72 -> AP = 65/72;  ranks [1,2,4]: P@1 = 1, P@5: kq = 4 -> 3/4
    assert medium.aps.tolist() == pytest.approx([65 / 72, 1.0])
    assert medium.map == pytest.approx((65 / 72 + 1) / 2)
    assert medium.mp_at_k == pytest.approx({1: 1.0, 5: (3 / 4 + 1) / 2, 10: (3 / 4 + 1) / 2})
    # A hard: pos {2}, junk {0,1,3}: 2 first -> AP 1; B has no hard positive: skipped
    assert hard.aps[0] == pytest.approx(1.0) and math.isnan(hard.aps[1])
    assert hard.n_skipped == 1 and hard.map == pytest.approx(1.0)
    assert hard.mp_at_k == pytest.approx({1: 1.0, 5: 1.0, 10: 1.0})
    # the headline numbers are the Medium protocol
    assert res.map == pytest.approx(medium.map)
    out = res.to_dict()
    assert out["protocols"]["hard"]["aps"]["B"] is None
    json.dumps(out)
    assert "hard" in res.summary()


def test_precision_at_k_revisitop_quirk():
    # positions 0-based [0, 2] -> 1-based [1, 3]
    assert precision_at_k(idx(0, 2), 1) == 1.0       # kq = 1
    assert precision_at_k(idx(0, 2), 2) == 0.5       # kq = 2: one of the two within 2
    assert precision_at_k(idx(0, 2), 10) == 2 / 3    # kq = min(3, 10) = 3, not 10
    assert precision_at_k(idx(), 5) == 0.0           # nothing found


# ---------------------------------------------------------------- UKBench


def test_ukbench_ns_score_by_hand():
    ds = ukbench_from_ids([f"ukbench{i:05d}" for i in range(8)])     # groups {0,1,2,3}, {4,5,6,7}
    tops = [[0, 1, 2, 3],   # 4 of group 0
            [1, 4, 0, 5],   # 1, 0        -> 2
            [4, 5, 6, 7],   # none        -> 0
            [3, 2, 7, 1],   # 3, 2, 1     -> 3
            [4, 5, 6, 7],   # 4
            [0, 1, 2, 3],   # 0
            [6, 7, 0, 4],   # 6, 7, 4     -> 3
            [7, 6, 5, 3]]   # 7, 6, 5     -> 3
    ranks = np.array([t + [i for i in range(8) if i not in t] for t in tops])
    res = evaluate(ranks, ds)
    assert res.ns_per_query.tolist() == [4, 2, 0, 3, 4, 0, 3, 3]
    assert res.ns_score == pytest.approx(19 / 8)
    assert ns_scores(ranks, ds.ground_truth()).sum() == 19
    assert "N-S" in res.summary()


def test_ukbench_default_ids_groups():
    ds = ukbench_from_ids()
    assert ds.n_images == 10200 and ds.n_queries == 10200
    assert ds.queries[5].positives.tolist() == [4, 5, 6, 7]
    assert ds.queries[10199].positives.tolist() == [10196, 10197, 10198, 10199]


# -------------------------------------------------------------- bad input


@pytest.mark.parametrize("ranks, message", [
    (np.array([[0, 1, 2, 3, 4, 5]]), "rankings for"),                     # 1 ranking, 2 queries
    (np.array([[0, 1, 2, 3, 4, 6], [0, 1, 2, 3, 4, 5]]), "outside"),       # 6 >= n_db
    (np.array([[0, 1, 2, 3, 4, -1], [0, 1, 2, 3, 4, 5]]), "negative"),
    (np.array([[0, 1, 1, 3, 4, 5], [0, 1, 2, 3, 4, 5]]), "more than once"),
    (np.array([[0.0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]]), "integers"),    # scores, not ranks
    (np.zeros((2, 2, 2), dtype=int), "2-D"),
])
def test_malformed_rankings_raise(ranks, message):
    q = Query("a", "img0", 0, None, idx(0), idx())
    ds = Dataset("toy", [f"img{i}" for i in range(6)], [q, q])
    with pytest.raises(RankingError, match=message) as info:
        evaluate(ranks, ds)
    assert isinstance(info.value, StreamkError) and isinstance(info.value, ValueError)

"""Tentative matching against a brute-force reference of the same rule."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamk.verification import tentative_matches
from streamk.verification.records import GeometryRecord
from streamk.errors import ConfigError, DimensionError


def popcount(x):
    return bin(int(x)).count("1")


def brute_force(qw, qs, dw, ds, ht, cap):
    """All n_q x n_c pairs, the rule written plainly: same word, Hamming <= ht, at most
    cap per word (closest first, ties by query then candidate index); ordered by
    (word, distance, i, j)."""
    rows = sorted((int(qw[i]), popcount(qs[i] ^ ds[j]), i, j)
                  for i in range(len(qw)) for j in range(len(dw))
                  if qw[i] == dw[j] and popcount(qs[i] ^ ds[j]) <= ht)
    kept, per_word = [], Counter()
    for w, h, i, j in rows:
        if per_word[w] < cap:
            kept.append((i, j, h))
            per_word[w] += 1
    return kept


def record(words, sigs):
    n = len(words)
    o = np.argsort(words, kind="stable")
    return GeometryRecord(np.asarray(words, np.uint16)[o], np.asarray(sigs, np.uint64)[o],
                          np.zeros((n, 2), np.float32), np.ones((n, 3), np.float32), np.zeros(n, np.float32),
                          (100, 100), 0)


def random_pair(rng, nq, nd, n_words, flips):
    base = rng.integers(0, 2**63, size=n_words, dtype=np.uint64) * np.uint64(2) \
        + rng.integers(0, 2, n_words).astype(np.uint64)
    def side(n):
        w = rng.integers(0, n_words, n)
        s = base[w].copy()
        for k in range(n):  # flip a few random bits: Hamming distances spread around the threshold
            for b in rng.choice(64, rng.integers(0, flips + 1), replace=False):
                s[k] ^= np.uint64(1) << np.uint64(int(b))
        return record(w, s)
    return side(nq), side(nd)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), nq=st.integers(0, 40), nd=st.integers(0, 40),
       n_words=st.integers(1, 8), ht=st.integers(0, 40), cap=st.integers(1, 12), flips=st.integers(0, 30))
def test_equals_brute_force(seed, nq, nd, n_words, ht, cap, flips):
    rng = np.random.default_rng(seed)
    q, d = random_pair(rng, nq, nd, n_words, flips)
    cq, cd, ch = tentative_matches(q, d, ht, cap)
    got = list(zip(cq.tolist(), cd.tolist(), ch.tolist()))
    assert got == brute_force(q.words, q.signatures, d.words, d.signatures, ht, cap)


def test_bursts_are_capped_to_the_closest_pairs():
    # one word, 5 x 5 features; the query's feature 0 equals candidate features 0..4 at distances 0..4
    sigs_q = np.array([0, 2**40, 2**41, 2**42, 2**43], np.uint64)
    sigs_d = np.array([0, 1, 3, 7, 15], np.uint64)
    q, d = record(np.zeros(5), sigs_q), record(np.zeros(5), sigs_d)
    cq, cd, ch = tentative_matches(q, d, 64, 3)
    assert list(zip(cq, cd, ch)) == [(0, 0, 0), (0, 1, 1), (1, 0, 1)]


def test_no_shared_word_no_match_and_bad_inputs():
    q, d = record([1, 2], [0, 0]), record([3, 4], [0, 0])
    assert len(tentative_matches(q, d)[0]) == 0
    with pytest.raises(ConfigError):
        tentative_matches(q, d, hamming_threshold=65)
    with pytest.raises(ConfigError):
        tentative_matches(q, d, max_pairs_per_word=0)
    unsorted = GeometryRecord(np.array([2, 1], np.uint16), np.zeros(2, np.uint64), np.zeros((2, 2), np.float32),
                              np.ones((2, 3), np.float32), np.zeros(2, np.float32), (10, 10), 0)
    with pytest.raises(DimensionError):
        tentative_matches(unsorted, d)

"""Vocabulary: assignment and signatures against numpy references, save / load."""

import numpy as np
import pytest

from streamk.verification import Vocabulary
from streamk.encoding import rootsift
from streamk.errors import ConfigError, DimensionError, NotFittedError, VocabularyFileError


def test_words_are_nearest_children_and_signatures_are_median_bits(random_vocabulary):
    voc = random_vocabulary
    X = np.random.default_rng(9).integers(0, 120, (200, 128)).astype(np.uint8)
    R = rootsift(X).astype(np.float64)
    cells = np.argmin(((R[:, None, :] - voc.coarse_[None].astype(np.float64)) ** 2).sum(-1), axis=1)
    words, sigs = voc.encode(X)
    for i in range(len(X)):
        ch = np.arange(voc.offsets_[cells[i]], voc.offsets_[cells[i] + 1])
        d = ((R[i] - voc.fine_[ch].astype(np.float64)) ** 2).sum(1)
        assert words[i] == ch[np.argmin(d)] or np.isclose(d.min(), d[words[i] - ch[0]], rtol=1e-5)
        z = voc.projection_.astype(np.float64) @ R[i]
        bits = z > voc.medians_[words[i]]
        assert int(sigs[i]) == sum(1 << b for b in range(64) if bits[b]) or \
            np.abs(z - voc.medians_[words[i]]).min() < 1e-5


def test_multiple_assignment_against_numpy(random_vocabulary):
    voc = random_vocabulary
    X = np.random.default_rng(10).integers(0, 120, (100, 128)).astype(np.uint8)
    R = rootsift(X).astype(np.float64)
    ids, words, sigs = voc.encode_multiple(X, 3)
    dc = ((R[:, None, :] - voc.coarse_[None]) ** 2).sum(-1)
    cell_of = np.repeat(np.arange(len(voc.coarse_)), np.diff(voc.offsets_))
    for i in range(len(X)):
        cells = np.argsort(dc[i])[:3]
        cand = np.flatnonzero(np.isin(cell_of, cells))
        d = ((R[i] - voc.fine_[cand]) ** 2).sum(1)
        w1 = voc.encode(X[i:i + 1])[0][0]
        got = words[ids == i].tolist()
        assert got[0] == w1 and len(got) == 3
        dist = dict(zip(cand.tolist(), d))
        others = sorted(dist[w] for w in cand.tolist() if w != w1)
        # the two others are the nearest (up to float32 rounding of near ties)
        assert np.allclose(sorted(dist[w] for w in got[1:]), others[:2], rtol=1e-5, atol=1e-6)
    # one entry per (feature, word); single assignment is the first of them
    w1, s1 = voc.encode(X)
    first = np.array([words[ids == i][0] for i in range(len(X))])
    assert np.array_equal(first, w1)


def test_save_load_round_trip_and_damage(random_vocabulary):
    data = random_vocabulary.to_bytes()
    voc = Vocabulary.from_bytes(data)
    X = np.random.default_rng(11).integers(0, 120, (50, 128)).astype(np.uint8)
    assert all(np.array_equal(a, b) for a, b in zip(voc.encode(X), random_vocabulary.encode(X)))
    assert voc.fingerprint_ == random_vocabulary.fingerprint_
    assert b"pickle" not in data[:0] and not data.startswith(b"\x80")  # npz (zip), never a pickle
    for bad in (data[:100], b"", b"not an npz", data[:-10]):
        with pytest.raises(VocabularyFileError):
            Vocabulary.from_bytes(bad)


def test_errors():
    with pytest.raises(NotFittedError):
        Vocabulary().encode(np.zeros((3, 128), np.uint8))
    with pytest.raises(ConfigError):
        Vocabulary(n_coarse=512, n_fine=256)  # over 65,536 words
    with pytest.raises(DimensionError):
        Vocabulary(n_coarse=2, n_fine=2).fit(np.zeros((10, 64)))
    with pytest.raises(DimensionError):
        Vocabulary(n_coarse=2, n_fine=2).fit(-np.ones((10, 128)))

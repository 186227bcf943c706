"""Geometry records: the bytes round trip, the size, and damaged bytes as named errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamk.verification import make_record, pack, record_size, unpack, verify_geometry
from streamk.verification.records import DEFAULT_MAX_RECORD_FEATURES, unpack_many
from streamk.errors import ConfigError, DimensionError, EncoderMismatchError, GeometryRecordError


def random_features(rng, n, size=(1024, 768), theta=False):
    w, h = size
    kp = np.zeros((n, 6), np.float32)
    kp[:, 0] = rng.uniform(-0.5, w - 0.5, n)
    kp[:, 1] = rng.uniform(-0.5, h - 0.5, n)
    kp[:, 2] = np.exp2(rng.uniform(1.5, 9, n))
    kp[:, 4] = np.exp2(rng.uniform(1.5, 9, n))
    kp[:, 3] = rng.uniform(-2, 2, n) * np.sqrt(kp[:, 2] * kp[:, 4])
    if theta:
        kp[:, 5] = rng.uniform(-np.pi, np.pi, n)
    desc = rng.integers(0, 120, (n, 128)).astype(np.uint8)
    return kp, desc


@pytest.fixture(scope="module")
def rec_bytes(random_vocabulary):
    kp, desc = random_features(np.random.default_rng(1), 300)
    rec = make_record(random_vocabulary, kp, desc, (1024, 768))
    return rec, pack(rec)


@pytest.mark.parametrize("theta", [False, True])
def test_round_trip_and_quantisation_error(random_vocabulary, theta):
    rng = np.random.default_rng(2)
    kp, desc = random_features(rng, 500, theta=theta)
    rec = make_record(random_vocabulary, kp, desc, (1024, 768))
    data = pack(rec)
    assert len(data) == record_size(500, theta) == 32 + 500 * (16 + theta)
    back = unpack(data)
    for name in ("words", "signatures", "xy", "frames", "theta"):
        assert np.array_equal(getattr(back, name), getattr(rec, name)), name
    assert back.image_size == (1024, 768) and back.vocabulary == random_vocabulary.fingerprint_
    assert pack(back) == data  # quantisation is idempotent
    # errors against the original keypoints (rows sorted by word, stably)
    words, sigs = random_vocabulary.encode(desc)
    o = np.argsort(words, kind="stable")
    assert np.array_equal(rec.words, words[o]) and np.array_equal(rec.signatures, sigs[o])
    assert np.abs(rec.xy - kp[o, :2]).max() <= 1024 / 8192 + 1e-3
    rel = np.abs(rec.frames[:, [0, 2]] / kp[o][:, [2, 4]] - 1).max()
    assert rel < 0.015
    shear = rec.frames[:, 1] / np.sqrt(rec.frames[:, 0] * rec.frames[:, 2]) - kp[o, 3] / np.sqrt(kp[o, 2] * kp[o, 4])
    assert np.abs(shear).max() < 0.013
    if theta:
        d = np.angle(np.exp(1j * (rec.theta - kp[o, 5])))
        assert np.abs(d).max() <= np.pi / 256 + 1e-5


def test_default_cap_fits_24_kb(random_vocabulary):
    kp, desc = random_features(np.random.default_rng(3), 5000)
    data = pack(make_record(random_vocabulary, kp, desc, (1024, 768)))
    assert len(data) == 32 + DEFAULT_MAX_RECORD_FEATURES * 16 <= 24 * 1024
    # the cap keeps the first (strongest) features
    first = make_record(random_vocabulary, kp[:DEFAULT_MAX_RECORD_FEATURES], desc[:DEFAULT_MAX_RECORD_FEATURES],
                        (1024, 768))
    assert pack(first) == data


def test_empty_record(random_vocabulary):
    rec = make_record(random_vocabulary, np.zeros((0, 6)), np.zeros((0, 128), np.uint8), (640, 480))
    back = unpack(pack(rec))
    assert len(back) == 0 and back.image_size == (640, 480)


def test_batch_decoder_equals_unpack(random_vocabulary):
    rng = np.random.default_rng(4)
    datas = [pack(make_record(random_vocabulary, *random_features(rng, n, size, th), size))
             for n, size, th in [(10, (100, 50), False), (0, (3, 3), False), (400, (1024, 900), True),
                                 (7, (5000, 4000), False)]]
    offsets, words, sigs, xy, frames, theta, sizes, vocs = unpack_many(datas)
    for i, d in enumerate(datas):
        r = unpack(d)
        sl = slice(offsets[i], offsets[i + 1])
        assert np.array_equal(words[sl], r.words) and np.array_equal(sigs[sl], r.signatures)
        assert np.array_equal(xy[sl], r.xy) and np.array_equal(frames[sl], r.frames)
        assert np.array_equal(theta[sl], r.theta) and tuple(sizes[i]) == r.image_size


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_damaged_byte_is_an_error(rec_bytes, data):
    _, good = rec_bytes
    pos = data.draw(st.integers(0, len(good) - 1))
    flip = data.draw(st.integers(1, 255))
    bad = bytearray(good)
    bad[pos] ^= flip
    with pytest.raises(GeometryRecordError):
        unpack(bytes(bad))
    with pytest.raises(GeometryRecordError):
        unpack_many([good, bytes(bad)])


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_truncated_or_extended_is_an_error(rec_bytes, data):
    _, good = rec_bytes
    cut = data.draw(st.integers(0, len(good) - 1))
    with pytest.raises(GeometryRecordError):
        unpack(good[:cut])
    with pytest.raises(GeometryRecordError):
        unpack(good + b"\0" * data.draw(st.integers(1, 40)))


def test_unknown_version_and_not_bytes(rec_bytes):
    _, good = rec_bytes
    bad = bytearray(good)
    bad[3] = 2
    with pytest.raises(GeometryRecordError, match="version"):
        unpack(bytes(bad))
    with pytest.raises(GeometryRecordError):
        unpack("not bytes")
    with pytest.raises(GeometryRecordError):
        verify_geometry(unpack(good), [good, b"garbage"])


def test_records_of_another_vocabulary_are_refused(rec_bytes, random_vocabulary):
    rec, good = rec_bytes
    other = unpack(good)
    other = type(other)(other.words, other.signatures, other.xy, other.frames, other.theta, other.image_size,
                        other.vocabulary ^ 1)
    with pytest.raises(EncoderMismatchError):
        verify_geometry(rec, [pack(other)])


def test_bad_inputs(random_vocabulary):
    kp, desc = random_features(np.random.default_rng(5), 20)
    with pytest.raises(DimensionError):
        make_record(random_vocabulary, kp[:, :5], desc, (100, 100))
    with pytest.raises(DimensionError):
        make_record(random_vocabulary, kp, desc[:10], (100, 100))
    with pytest.raises(DimensionError):
        make_record(random_vocabulary, kp, desc, (0, 100))
    bad = kp.copy()
    bad[0, 2] = -1
    with pytest.raises(DimensionError):
        make_record(random_vocabulary, bad, desc, (100, 100))
    with pytest.raises(ConfigError):  # a multiple-assignment record is a query record, not stored
        pack(make_record(random_vocabulary, kp, desc, (100, 100), multiple_assignment=3))

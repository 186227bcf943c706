"""Descriptor files: byte layouts checked against struct-packed files made by hand,
writer -> reader round trips, the named error for every malformed file, and
fuzzing (random and mutated bytes parse or raise DescriptorFileError, nothing else)."""

import io
import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamk.features import descriptor_files as dfiles
from streamk.errors import DescriptorFileError, DimensionError, StreamkError

READERS = {
    ".siftgeo": dfiles.read_siftgeo, ".fvecs": dfiles.read_fvecs, ".bvecs": dfiles.read_bvecs,
    ".ivecs": dfiles.read_ivecs, ".npy": dfiles.read_npy,
}


def xvecs_bytes(rows, fmt):
    return b"".join(struct.pack(f"<i{len(r)}{fmt}", len(r), *r) for r in rows)


def siftgeo_record(geom, desc, dim=128):
    return struct.pack("<9fi", *geom, dim) + bytes(desc)


# --------------------------------------------------------------------------- layouts by hand
def test_siftgeo_reads_a_hand_packed_file(tmp_path):
    g0 = (10.5, 20.25, 3.0, 0.5, 1.0, 0.0, 0.25, 1.0, 7.0)
    g1 = (1.0, 2.0, 4.0, -1.0, 2.0, 0.5, 0.0, 0.5, 0.0)
    d0, d1 = list(range(128)), [255 - i for i in range(128)]
    path = tmp_path / "a.siftgeo"
    path.write_bytes(siftgeo_record(g0, d0) + siftgeo_record(g1, d1))
    assert os.path.getsize(path) == 2 * 168 == 2 * dfiles.SIFTGEO_RECORD_BYTES
    geom, desc = dfiles.read_siftgeo(path)
    assert geom.dtype == np.float32 and geom.shape == (2, 9)
    assert desc.dtype == np.uint8 and desc.shape == (2, 128)
    assert geom.tolist() == [list(g0), list(g1)]
    assert desc.tolist() == [d0, d1]


def test_siftgeo_writer_produces_the_documented_bytes(tmp_path):
    geom = np.array([[1.5, 2.5, 3.0, 0.0, 1.0, 0.0, 0.0, 1.0, 9.0]], np.float32)
    desc = np.arange(128, dtype=np.uint8)[None]
    dfiles.write_siftgeo(tmp_path / "w.siftgeo", desc, geom)
    raw = (tmp_path / "w.siftgeo").read_bytes()
    assert raw == siftgeo_record(geom[0].tolist(), desc[0].tolist())
    dfiles.write_siftgeo(tmp_path / "z.siftgeo", desc)  # no geometry: zeros
    assert (tmp_path / "z.siftgeo").read_bytes()[:36] == b"\0" * 36


@pytest.mark.parametrize("ext,fmt,dtype", [(".fvecs", "f", np.float32), (".bvecs", "B", np.uint8),
                                           (".ivecs", "i", np.int32)])
def test_xvecs_read_hand_packed_files_and_writers_match(tmp_path, ext, fmt, dtype):
    rows = [[1, 2, 3], [4, 5, 6]]
    path = tmp_path / f"a{ext}"
    path.write_bytes(xvecs_bytes(rows, fmt))
    X = READERS[ext](path)
    assert X.dtype == dtype and X.tolist() == rows
    dfiles.write_descriptors(tmp_path / f"b{ext}", np.array(rows))
    assert (tmp_path / f"b{ext}").read_bytes() == path.read_bytes()


def test_npy_reads_numpy_files_including_fortran_order_and_big_endian(tmp_path):
    X = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "c.npy", X)
    np.save(tmp_path / "f.npy", np.asfortranarray(X))
    np.save(tmp_path / "be.npy", X.astype(">f8"))
    for name in ("c", "f", "be"):
        Y = dfiles.read_npy(tmp_path / f"{name}.npy")
        assert np.array_equal(Y, X) and Y.flags.c_contiguous and Y.dtype.isnative
    M = dfiles.read_npy(tmp_path / "c.npy", mmap=True)
    assert np.array_equal(M, X)


# --------------------------------------------------------------------------- round trips
@st.composite
def arrays(draw, kind):
    n = draw(st.integers(0, 12))
    d = 128 if kind == ".siftgeo" else draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    if kind in (".siftgeo", ".bvecs"):
        return rng.integers(0, 256, (n, d)).astype(np.uint8)
    if kind == ".ivecs":
        return rng.integers(-(2 ** 31), 2 ** 31, (n, d)).astype(np.int32)
    if kind == ".npy":
        dtype = draw(st.sampled_from([np.float32, np.float64, np.uint8, np.int16]))
        return (rng.standard_normal((n, d)) * 50).astype(dtype)
    return (rng.standard_normal((n, d)) * 10 ** draw(st.integers(-30, 30))).astype(np.float32)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.parametrize("kind", sorted(READERS))
def test_round_trip(kind, fuzz_dir):
    @settings(max_examples=40, deadline=None, database=None)
    @given(X=arrays(kind), with_geometry=st.booleans())
    def check(X, with_geometry):
        path = fuzz_dir / f"rt{kind}"
        geometry = None
        if kind == ".siftgeo" and with_geometry:
            geometry = np.random.default_rng(len(X)).standard_normal((len(X), 9)).astype(np.float32)
        dfiles.write_descriptors(path, X, geometry)
        options = {} if kind in (".siftgeo", ".npy") else {"dim": X.shape[1]}
        Y, G = dfiles.read_descriptors(path, **options)
        assert Y.dtype == X.dtype or kind == ".npy" and Y.dtype == X.dtype.newbyteorder("=")
        assert Y.shape == X.shape or (kind == ".npy" and len(X) == 0 and Y.shape == X.shape)
        assert np.array_equal(Y, X)
        if kind == ".siftgeo":
            assert np.array_equal(G, geometry if geometry is not None else np.zeros((len(X), 9)))
        else:
            assert G is None

    check()


def test_empty_files_hold_zero_vectors(tmp_path):
    for ext, reader in READERS.items():
        path = tmp_path / f"e{ext}"
        path.write_bytes(b"")
        out = reader(path)
        X = out[1] if ext == ".siftgeo" else out
        assert len(X) == 0
    (tmp_path / "e.fvecs").write_bytes(b"")
    assert dfiles.read_fvecs(tmp_path / "e.fvecs", dim=16).shape == (0, 16)
    geom, desc = dfiles.read_siftgeo(tmp_path / "e.siftgeo")
    assert geom.shape == (0, 9) and desc.shape == (0, 128)


def test_count_and_mmap(tmp_path):
    X = np.arange(50, dtype=np.float32).reshape(10, 5)
    dfiles.write_fvecs(tmp_path / "a.fvecs", X)
    assert np.array_equal(dfiles.read_fvecs(tmp_path / "a.fvecs", count=3), X[:3])
    assert np.array_equal(dfiles.read_fvecs(tmp_path / "a.fvecs", count=30, mmap=True), X)
    assert dfiles.read_fvecs(tmp_path / "a.fvecs", count=0).shape == (0, 5)
    D = np.arange(3 * 128, dtype=np.int64).reshape(3, 128) % 256
    dfiles.write_siftgeo(tmp_path / "a.siftgeo", D)
    g, d = dfiles.read_siftgeo(tmp_path / "a.siftgeo", count=2, mmap=True)
    assert np.array_equal(d, D[:2]) and g.shape == (2, 9)
    with pytest.raises(DimensionError):
        dfiles.read_fvecs(tmp_path / "a.fvecs", count=-1)


# --------------------------------------------------------------------------- malformed files
def _malformed(tmp_path):
    rec = siftgeo_record([0.0] * 9, [1] * 128)
    cases = {
        "truncated.siftgeo": (rec * 2)[:-1],
        "wrongdim.siftgeo": rec + siftgeo_record([0.0] * 9, [1] * 128, dim=127),
        "nan.siftgeo": siftgeo_record([float("nan")] + [0.0] * 8, [1] * 128),
        "truncated.fvecs": xvecs_bytes([[1.0, 2.0], [3.0, 4.0]], "f")[:-2],
        "inconsistent.fvecs": xvecs_bytes([[1.0, 2.0]], "f") + struct.pack("<i2f", 3, 1.0, 2.0),
        "inconsistent_size.bvecs": xvecs_bytes([[1, 2, 3], [4, 5]], "B"),
        "negative.fvecs": struct.pack("<i2f", -2, 1.0, 2.0),
        "zero.ivecs": struct.pack("<i", 0),
        "absurd.bvecs": struct.pack("<i", 2 ** 30) + b"\0" * 8,
        "short.ivecs": b"\x01\x00",
        "inf.fvecs": xvecs_bytes([[1.0, float("inf")]], "f"),
        "text.fvecs": b"this is not a vector file at all",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    # .npy: pickled objects, wrong rank, structured dtype, truncated, lying header, not npy
    np.save(tmp_path / "object.npy", np.array([[{"a": 1}]], dtype=object), allow_pickle=True)
    np.save(tmp_path / "rank3.npy", np.zeros((2, 2, 2), np.float32))
    np.save(tmp_path / "rank1.npy", np.zeros(4, np.float32))
    np.save(tmp_path / "structured.npy", np.zeros((2, 2), dtype=[("a", "<i4"), ("b", "<f4")]))
    np.save(tmp_path / "strings.npy", np.array([["ab", "cd"]]))
    np.save(tmp_path / "nan.npy", np.array([[1.0, np.nan]]))
    good = io.BytesIO()
    np.save(good, np.zeros((100, 100), np.float32))
    (tmp_path / "truncated.npy").write_bytes(good.getvalue()[:-10])
    (tmp_path / "trailing.npy").write_bytes(good.getvalue() + b"junk")
    lying = good.getvalue().replace(b"(100, 100)", b"(9999, 99)")
    assert lying != good.getvalue()
    (tmp_path / "lying_header.npy").write_bytes(lying)
    huge = io.BytesIO()  # a header asking for 4 PB: refused before any allocation
    np.lib.format.write_array_header_1_0(
        huge, {"descr": "<f4", "fortran_order": False, "shape": (10 ** 12, 10 ** 3)})
    (tmp_path / "huge_header.npy").write_bytes(huge.getvalue() + b"\0" * 64)
    (tmp_path / "text.npy").write_bytes(b"hello world, not numpy")
    return sorted(p.name for p in tmp_path.iterdir() if p.suffix in READERS)


def test_malformed_files_raise_descriptor_file_error(tmp_path):
    names = _malformed(tmp_path)
    assert len(names) >= 20
    for name in names:
        path = tmp_path / name
        with pytest.raises(DescriptorFileError) as info:
            dfiles.read_descriptors(path)
        assert str(path) in str(info.value), name
        assert isinstance(info.value, StreamkError) and isinstance(info.value, ValueError)


def test_object_npy_is_never_unpickled(tmp_path, monkeypatch):
    import pickle

    np.save(tmp_path / "object.npy", np.array([[1, 2]], dtype=object), allow_pickle=True)

    def boom(*args, **kwargs):
        raise AssertionError("unpickling attempted")

    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    with pytest.raises(DescriptorFileError):
        dfiles.read_npy(tmp_path / "object.npy")


def test_expected_dimension_is_checked(tmp_path):
    dfiles.write_fvecs(tmp_path / "a.fvecs", np.ones((2, 8)))
    with pytest.raises(DescriptorFileError, match="expected 16"):
        dfiles.read_fvecs(tmp_path / "a.fvecs", dim=16)


def test_unreadable_paths(tmp_path):
    (tmp_path / "dir.fvecs").mkdir()
    for path, reason in ((tmp_path / "dir.fvecs", "is a directory"),
                         (tmp_path / "missing.fvecs", "no such file")):
        with pytest.raises(DescriptorFileError, match=reason):
            dfiles.read_fvecs(path)
    with pytest.raises(DescriptorFileError, match="unknown descriptor file type"):
        dfiles.read_descriptors(tmp_path / "x.txt")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.fvecs")  # must not block
        with pytest.raises(DescriptorFileError, match="not a regular file"):
            dfiles.read_fvecs(tmp_path / "fifo.fvecs")


# --------------------------------------------------------------------------- writers refuse
def test_writers_refuse_what_the_format_cannot_hold(tmp_path):
    with pytest.raises(DescriptorFileError):
        dfiles.write_bvecs(tmp_path / "a.bvecs", np.array([[0, 256]]))
    with pytest.raises(DescriptorFileError):
        dfiles.write_bvecs(tmp_path / "a.bvecs", np.array([[0.5, 1.0]]))
    with pytest.raises(DescriptorFileError):
        dfiles.write_siftgeo(tmp_path / "a.siftgeo", np.full((1, 128), 0.25))  # RootSIFT floats
    with pytest.raises(DescriptorFileError):
        dfiles.write_fvecs(tmp_path / "a.fvecs", np.array([[np.nan]]))
    with pytest.raises(DescriptorFileError):
        dfiles.write_fvecs(tmp_path / "a.fvecs", np.array([[1e300]]))  # float32 overflow
    with pytest.raises(DescriptorFileError):
        dfiles.write_ivecs(tmp_path / "a.ivecs", np.array([[2 ** 31]]))
    with pytest.raises(DimensionError):
        dfiles.write_siftgeo(tmp_path / "a.siftgeo", np.zeros((2, 64), np.uint8))
    with pytest.raises(DimensionError):
        dfiles.write_siftgeo(tmp_path / "a.siftgeo", np.zeros((2, 128), np.uint8), np.zeros((3, 9)))
    with pytest.raises(DimensionError):
        dfiles.write_fvecs(tmp_path / "a.fvecs", np.zeros(5))
    with pytest.raises(DimensionError):
        dfiles.write_fvecs(tmp_path / "a.fvecs", np.array([["a"]]))
    with pytest.raises(DescriptorFileError):
        dfiles.write_descriptors(tmp_path / "a.fvecs", np.zeros((1, 2)), np.zeros((1, 9)))
    assert not list(tmp_path.iterdir())  # nothing written, no temporary files left


def test_a_failed_write_leaves_the_old_file_unchanged(tmp_path):
    path = tmp_path / "a.fvecs"
    dfiles.write_fvecs(path, np.ones((3, 4)))
    before = path.read_bytes()

    def half_then_fail(fh):
        fh.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        dfiles.atomic_write(path, half_then_fail)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.fvecs"]


# --------------------------------------------------------------------------- geometry conversion
def test_keypoints_to_siftgeo_by_hand_and_back():
    kp = np.array([[10, 20, 3, 1, 2, 0.5]], np.float32)  # A = [[3, 0], [1, 2]], det 6
    g = dfiles.keypoints_to_siftgeo(kp)[0]
    s = np.sqrt(6.0)
    assert g.tolist() == pytest.approx([10, 20, s, 0.5, 3 / s, 0, 1 / s, 2 / s, 0], rel=1e-6)
    assert dfiles.siftgeo_to_keypoints(g[None])[0].tolist() == pytest.approx(kp[0].tolist(), rel=1e-6)


def test_siftgeo_to_keypoints_keeps_the_ellipse_of_a_general_matrix():
    c, s = np.cos(0.5), np.sin(0.5)
    A = np.array([[c, -s], [s, c]]) @ np.diag([4.0, 1.0])  # rotated ellipse, mi12 != 0
    scale = np.sqrt(abs(np.linalg.det(A)))
    mi = A / scale
    g = np.array([[5, 6, scale, 0.1, mi[0, 0], mi[0, 1], mi[1, 0], mi[1, 1], 0]])
    x, y, a11, a21, a22, theta = dfiles.siftgeo_to_keypoints(g)[0]
    L = np.array([[a11, 0], [a21, a22]])
    assert a11 > 0 and a22 > 0
    assert L @ L.T == pytest.approx(A @ A.T, rel=1e-5, abs=1e-5)  # same ellipse
    assert (x, y, theta) == pytest.approx((5, 6, 0.1))
    # no shape information: the circle of radius `scale`
    k = dfiles.siftgeo_to_keypoints(np.array([[1, 2, 3, 0, 0, 0, 0, 0, 0]]))[0]
    assert k.tolist() == pytest.approx([1, 2, 3, 0, 3, 0])


# --------------------------------------------------------------------------- fuzzing
def _check_parse_or_named_error(path, reader):
    try:
        out = reader(path)
    except DescriptorFileError:
        return
    arrays = out if isinstance(out, tuple) else (out,)
    for a in arrays:
        assert isinstance(a, np.ndarray) and a.ndim == 2


FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("ext", sorted(READERS))
def test_fuzz_random_bytes(ext, fuzz_dir):
    @FUZZ
    @given(data=st.binary(max_size=2000) | st.binary(min_size=160, max_size=400).map(
        lambda b: struct.pack("<i", 4) + b))
    def check(data):
        path = fuzz_dir / f"rand{ext}"
        path.write_bytes(data)
        _check_parse_or_named_error(path, READERS[ext])

    check()


def _valid_bytes(ext):
    rng = np.random.default_rng(0)
    path = io.BytesIO()
    if ext == ".siftgeo":
        return b"".join(siftgeo_record(rng.random(9).tolist(), rng.integers(0, 256, 128).tolist())
                        for _ in range(3))
    if ext == ".npy":
        np.save(path, rng.random((3, 5)).astype(np.float32))
        return path.getvalue()
    fmt = {".fvecs": "f", ".bvecs": "B", ".ivecs": "i"}[ext]
    return xvecs_bytes(rng.integers(0, 100, (4, 6)).tolist(), fmt)


@pytest.mark.parametrize("ext", sorted(READERS))
def test_fuzz_mutated_valid_files(ext, fuzz_dir):
    valid = _valid_bytes(ext)
    edit = st.tuples(st.sampled_from(["set", "insert", "delete"]), st.integers(0, 10 ** 6),
                     st.integers(0, 255), st.integers(1, 8))

    @FUZZ
    @given(edits=st.lists(edit, min_size=1, max_size=6), cut=st.none() | st.integers(0, 10 ** 6))
    def check(edits, cut):
        data = bytearray(valid)
        for op, pos, val, width in edits:
            pos = pos % (len(data) + 1)
            if op == "set" and data:
                data[pos % len(data)] = val
            elif op == "insert":
                data[pos:pos] = bytes([val]) * width
            else:
                del data[pos:pos + width]
        if cut is not None:
            data = data[: cut % (len(data) + 1)]
        path = fuzz_dir / f"mut{ext}"
        path.write_bytes(bytes(data))
        _check_parse_or_named_error(path, READERS[ext])

    check()

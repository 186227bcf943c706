"""The streaming index: add / update / remove, exact and PQ search, errors that leave
the store unchanged, and a reader that sees another process's writes."""

import hashlib
import json
import os
import shutil
import subprocess
import textwrap

import lmdb
import numpy as np
import pytest

from streamk import Encoder
from streamk.errors import (ConfigError, DimensionError, DuplicateError, EmptyDescriptorSetError,
                            EncoderMismatchError, IdExistsError, ImageReadError, IndexExistsError,
                            IndexFormatError, InvalidIdError, NonFiniteError, NotAnIndexError,
                            NotFittedError, ReadOnlyIndexError, StreamkError, TooFewImagesError,
                            UnknownIdError, ZeroVectorError)
from streamk.index import StreamingIndex
from streamk.index.store import FORMAT_VERSION, row_key

from helpers.images import blobs  # noqa: E402
from helpers.index import sift_sets, unit, vlad_encoder  # noqa: E402
from helpers.processes import run_python, start_python, stop  # noqa: E402


@pytest.fixture(scope="module")
def encoder():
    return vlad_encoder(12, 50)


@pytest.fixture
def index(tmp_path, encoder):
    idx = StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32")
    yield idx
    idx.close()


# ------------------------------------------------------------------ create / open / durability
@pytest.mark.parametrize("dtype,tol", [("float32", 1e-7), ("float16", 2e-3)])
def test_round_trip_and_durability(tmp_path, encoder, dtype, tol):
    rng = np.random.default_rng(1)
    V = unit(rng, 5, encoder.dim)
    X = sift_sets(2, 1)[0]
    idx = StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype=dtype)
    for i, v in enumerate(V):
        assert idx.add(f"v{i}", vector=3.0 * v) == f"v{i}"  # normalised on the way in
    idx.add("d", descriptors=X)
    idx.close()
    idx = StreamingIndex.open(tmp_path / "ix")
    assert idx.encoder.fingerprint == encoder.fingerprint
    assert idx.vector_dtype == np.dtype(dtype)
    assert len(idx) == 6 and sorted(idx.ids()) == ["d", "v0", "v1", "v2", "v3", "v4"]
    for i, v in enumerate(V):
        np.testing.assert_allclose(idx.vector(f"v{i}"), v, atol=tol)
    np.testing.assert_allclose(idx.vector("d"), encoder.encode(X), atol=tol)
    info = idx.info("d")
    assert info["kind"] == "descriptors" and info["n_descriptors"] == 50
    assert info["sha256"] == hashlib.sha256(X.astype(np.float32).tobytes()).hexdigest()
    assert idx.extras("d")["weights"].shape == (50,)
    assert idx.search(X, k=1)[0][0] == "d"
    idx.close()


def test_create_refuses(tmp_path, encoder):
    with pytest.raises(NotFittedError):
        StreamingIndex.create(tmp_path / "a", Encoder(embedding="vlad", k=4))
    with pytest.raises(ConfigError):
        StreamingIndex.create(tmp_path / "b", encoder, vector_dtype="int8")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "keep.txt").write_text("x")
    with pytest.raises(IndexExistsError):
        StreamingIndex.create(tmp_path / "c", encoder)
    assert os.listdir(tmp_path / "c") == ["keep.txt"]
    with pytest.raises(NotAnIndexError):
        StreamingIndex.open(tmp_path / "c")
    with pytest.raises(NotAnIndexError):
        StreamingIndex.open(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()


def test_format_version_mismatch(tmp_path, encoder):
    StreamingIndex.create(tmp_path / "ix", encoder).close()
    env = lmdb.open(str(tmp_path / "ix"), max_dbs=16)
    with env.begin(write=True) as txn:
        txn.put(b"format", json.dumps({"format": "streamk-index", "version": FORMAT_VERSION + 1}).encode(),
                db=env.open_db(b"meta", txn=txn))
    env.close()
    with pytest.raises(IndexFormatError):
        StreamingIndex.open(tmp_path / "ix")


def test_map_grows_over_many_adds(tmp_path, encoder):
    rng = np.random.default_rng(3)
    V = unit(rng, 120, encoder.dim)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32", map_size=64 << 10)
    start = idx.store.map_size
    for i, v in enumerate(V):  # 120 separate transactions, ~250 KB of vectors
        idx.add(f"v{i}", vector=v)
    assert idx.store.map_size >= 4 * start
    idx.close()
    idx = StreamingIndex.open(tmp_path / "ix", readonly=True)
    assert len(idx) == 120
    np.testing.assert_allclose(idx.vector("v119"), V[119], atol=1e-6)
    idx.close()


# ------------------------------------------------------------------ ids, duplicates, update, remove
@pytest.mark.parametrize("bad", ["../x", "a/b", "a\\b", "", "a\x01b", "tab\there", "x" * 300, ".", "..", 7])
def test_bad_ids_change_nothing_anywhere(tmp_path, index, encoder, bad):
    v = unit(np.random.default_rng(4), 1, encoder.dim)[0]
    index.add("ok", vector=v)
    before, inside = index.store.dump(), sorted(os.listdir(index.path))
    with pytest.raises(InvalidIdError):
        index.add(bad, vector=-v)
    with pytest.raises(InvalidIdError):
        index.remove(bad)
    assert index.store.dump() == before
    assert sorted(os.listdir(tmp_path)) == ["ix"]
    assert sorted(os.listdir(index.path)) == inside


def test_duplicates(index, encoder):
    rng = np.random.default_rng(5)
    v, w = unit(rng, 2, encoder.dim)
    X = sift_sets(6, 1)[0]
    index.add("a", vector=v)
    index.add("x", descriptors=X)
    before = index.store.dump()
    assert index.add("a", vector=v) == "a"  # same id, same content: nothing written
    assert index.add("x", descriptors=X.astype(np.uint8).astype(np.float64)) == "x"
    with pytest.raises(DuplicateError) as e:
        index.add("b", vector=v)
    assert e.value.existing_id == "a" and e.value.id == "b"
    with pytest.raises(DuplicateError):
        index.add("y", descriptors=X)
    with pytest.raises(IdExistsError):
        index.add("a", vector=w)
    assert index.store.dump() == before
    assert len(index) == 2


def test_update_and_remove(index, encoder):
    rng = np.random.default_rng(7)
    v, w, u = unit(rng, 3, encoder.dim)
    index.add("a", vector=v)
    index.add("b", vector=w)
    assert index.search(v, k=1)[0][0] == "a"
    index.update("a", vector=u)
    np.testing.assert_allclose(index.vector("a"), u, atol=1e-6)
    assert index.search(u, k=1)[0][0] == "a"
    assert index.search(v, k=1)[0][1] < 0.5  # the old vector is gone
    index.add("c", vector=v)  # the old content is free again
    with pytest.raises(DuplicateError):
        index.update("c", vector=w)  # would duplicate b
    with pytest.raises(UnknownIdError):
        index.update("zzz", vector=rng.standard_normal(encoder.dim))
    index.remove("b")
    assert "b" not in index and len(index) == 2
    assert "b" not in [i for i, _ in index.search(w, k=5)]
    with pytest.raises(UnknownIdError):
        index.remove("b")
    index.add("b2", vector=w)  # content of a removed image can come back under a new id
    assert index.search(w, k=1)[0][0] == "b2"
    # the log replays to the same state a fresh reader loads
    replayed = sorted(index.search(w, k=10))
    assert [i for i, _ in replayed] == ["a", "b2", "c"]
    index.close()
    again = StreamingIndex.open(index.path)
    loaded = sorted(again.search(w, k=10))
    assert [i for i, _ in loaded] == [i for i, _ in replayed]
    np.testing.assert_allclose([x for _, x in loaded], [x for _, x in replayed], atol=1e-6)


# ------------------------------------------------------------------ bad inputs leave the store unchanged
def test_bad_inputs_leave_store_unchanged(tmp_path, index, encoder):
    rng = np.random.default_rng(8)
    index.add("a", vector=unit(rng, 1, encoder.dim)[0])
    index.add("d", descriptors=sift_sets(9, 1)[0])
    (tmp_path / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg" * 10)
    (tmp_path / "empty.png").write_bytes(b"")
    X = sift_sets(10, 1)[0]
    Xnan = X.copy()
    Xnan[3, 5] = np.nan
    vnan = rng.standard_normal(encoder.dim)
    vnan[0] = np.inf
    cases = [
        (EmptyDescriptorSetError, dict(descriptors=np.zeros((0, 128)))),
        (NonFiniteError, dict(descriptors=Xnan)),
        (DimensionError, dict(descriptors=X[:, :64])),
        (DimensionError, dict(descriptors=X[0])),
        (DimensionError, dict(vector=rng.standard_normal(encoder.dim + 1))),
        (NonFiniteError, dict(vector=vnan)),
        (ZeroVectorError, dict(vector=np.zeros(encoder.dim))),
        (ImageReadError, dict(image_path=tmp_path / "missing.jpg")),
        (ImageReadError, dict(image_path=tmp_path / "corrupt.jpg")),
        (ImageReadError, dict(image_path=tmp_path / "empty.png")),
        (ImageReadError, dict(image_path=tmp_path)),
        (ConfigError, dict()),
        (ConfigError, dict(vector=rng.standard_normal(encoder.dim), descriptors=X)),
        (ConfigError, dict(vector=rng.standard_normal(encoder.dim), box=(0, 0, 5, 5))),
    ]
    before = index.store.dump()
    for exc, kw in cases:
        with pytest.raises(exc):
            index.add("new", **kw)
        with pytest.raises(exc):
            index.update("a", **kw)
        assert issubclass(exc, StreamkError)
    assert index.store.dump() == before
    assert sorted(index.ids()) == ["a", "d"]


def test_encoder_mismatch(index, encoder):
    index.check_encoder(Encoder.from_bytes(encoder.to_bytes()))  # same encoder: fine
    other = Encoder(embedding="vlad", k=4, aggregation="gmp").fit(sift_sets(11, 12))
    with pytest.raises(EncoderMismatchError):
        index.check_encoder(other)
    bigger = Encoder(embedding="vlad", k=8, aggregation="gmp").fit(sift_sets(11, 12))
    before = index.store.dump()
    with pytest.raises(DimensionError):  # a vector of another encoder's dimension
        index.add("x", vector=bigger.encode(sift_sets(12, 1)[0]))
    with pytest.raises(DimensionError):
        index.search(bigger.encode(sift_sets(12, 1)[0]))
    assert index.store.dump() == before


def test_readonly_index_refuses_writes(tmp_path, encoder):
    StreamingIndex.create(tmp_path / "ix", encoder).close()
    idx = StreamingIndex.open(tmp_path / "ix", readonly=True)
    with pytest.raises(ReadOnlyIndexError):
        idx.add("a", vector=np.ones(encoder.dim))
    assert idx.search(np.ones(encoder.dim)) == []
    idx.close()


# ------------------------------------------------------------------ search
def test_exact_search_matches_numpy(index, encoder):
    rng = np.random.default_rng(13)
    V = unit(rng, 40, encoder.dim)
    res = index.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V)], batch_size=16)
    assert [r.status for r in res] == ["added"] * 40
    for i in (0, 17, 39):
        hits = index.search(V[i], k=5)
        assert hits[0][0] == f"v{i}" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
        ref = V @ V[i]  # reference from the original vectors, in plain numpy
        order = np.argsort(-ref)[:5]
        assert [h[0] for h in hits] == [f"v{j}" for j in order]
        np.testing.assert_allclose([h[1] for h in hits], ref[order], atol=1e-5)
    assert len(index.search(V[0], k=100)) == 40
    with pytest.raises(ConfigError):
        index.search(V[0], k=0)
    with pytest.raises(ConfigError):
        index.search(V[0], mode="ivf")
    with pytest.raises(NotFittedError):
        index.search(V[0], mode="pq")
    with pytest.raises(TooFewImagesError):
        index.train_pq(M=16)


def test_add_many_reports_each_item(index, encoder):
    rng = np.random.default_rng(14)
    V = unit(rng, 6, encoder.dim)
    items = [{"id": "a", "vector": V[0]}, {"id": "a/b", "vector": V[1]}, {"id": "b", "vector": V[0]},
             ("c", {"vector": V[2]}), {"id": "d", "vector": V[3][:10]}, {"id": "c", "vector": V[2]},
             {"id": "e", "descriptors": sift_sets(15, 1)[0]}, {"vector": V[4]}]
    res = index.add_many(items, batch_size=3)
    assert [r.status for r in res] == ["added", "error", "error", "added", "error", "exists", "added", "error"]
    assert isinstance(res[1].error, InvalidIdError)
    assert isinstance(res[2].error, DuplicateError) and res[2].error.existing_id == "a"
    assert isinstance(res[4].error, DimensionError)
    assert isinstance(res[7].error, ConfigError)
    assert sorted(index.ids()) == ["a", "c", "e"]


def test_pq_search_agrees_with_exact(tmp_path, encoder):
    rng = np.random.default_rng(16)
    V = unit(rng, 300, encoder.dim)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float16")
    idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V)])
    idx.train_pq(M=16)
    extra = unit(rng, 1, encoder.dim)[0]
    idx.add("late", vector=extra)  # added after training: gets a code too
    assert len(stored_codes(idx)) == idx.store.count("images") == 301
    Q = V[:60] + 0.05 * rng.standard_normal((60, encoder.dim))  # noisy copies
    agree = 0
    for q in Q:
        exact = idx.search(q, k=1)
        pq = idx.search(q, k=1, mode="pq", rerank=5)
        agree += exact[0][0] == pq[0][0]
        assert pq[0][1] == pytest.approx(exact[0][1], abs=1e-6) or pq[0][0] != exact[0][0]
    assert agree >= 0.9 * len(Q)
    assert idx.search(extra, k=1, mode="pq")[0][0] == "late"
    hits = idx.search(V[3], k=10, mode="pq")  # re-ranked scores are exact, sorted
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    # (a float16 vector against itself: 1.000007, shown as the cosine it approximates, 1)
    np.testing.assert_allclose(scores[0], min(1, idx.vector(hits[0][0]) @ (V[3] / np.linalg.norm(V[3]))), atol=1e-6)
    idx.close()
    idx = StreamingIndex.open(tmp_path / "ix")  # codes and codebooks persist
    assert idx.search(V[7], k=1, mode="pq")[0][0] == "v7"
    idx.close()


def stored_codes(idx):
    """{id: (list, code)} of every image, as a fresh reader loads them from the store."""
    from streamk.index.reader import SearchView

    view = SearchView(idx.store, idx.dim, idx.vector_dtype)
    out = {}
    with idx.store.read() as txn:
        view.refresh(txn)
        lists = view.lists
        for lst in range(lists.nlist):
            for i in range(lists.start[lst], lists.start[lst] + lists.size[lst]):
                r = int(lists.rows[i])
                if not view.dead[r]:
                    out[bytes(txn.get(row_key(r), db=idx.store.row_ids_db)).decode()] = \
                        (lst, lists.codes[i].copy())
    return out


def assert_codes_match(idx, codec):
    """Every image has the list and code of its stored vector under ``codec``, and
    nothing else has one."""
    codes = stored_codes(idx)
    assert sorted(codes) == sorted(idx.ids())
    for i, (lst, c) in codes.items():
        want_list, want_code = codec.encode(idx.vector(i)[None, :])
        assert lst == want_list[0], i
        np.testing.assert_array_equal(c, want_code[0], err_msg=i)


def test_pq_retrain_swaps_in_what_changed_during_training(tmp_path, encoder, monkeypatch):
    from streamk.quantization.ivfpq import IVFPQ

    rng = np.random.default_rng(18)
    V = unit(rng, 300, encoder.dim)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32")
    idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V)])
    idx.train_pq(M=16, seed=0)
    old = idx.codec()
    late, new5 = unit(rng, 2, encoder.dim)
    real_fit = IVFPQ.fit
    seen = {}

    def fit_while_others_write(self, X):
        out = real_fit(self, X)
        # between the snapshot and the swap: writes go through, readers use the old codes
        idx.add("late", vector=late)
        idx.remove("v3")
        idx.update("v5", vector=new5)
        seen["hit"] = idx.search(V[7], k=1, mode="pq")[0][0]
        assert_codes_match(idx, old)
        return out
    monkeypatch.setattr(IVFPQ, "fit", fit_while_others_write)
    new = idx.train(M=16, seed=1)
    assert seen["hit"] == "v7"
    assert not np.array_equal(new.pq_.codebooks_, old.pq_.codebooks_)
    assert_codes_match(idx, new)  # "late" and the new v5 re-encoded in the swap, v3 gone
    assert idx.search(late, k=1, mode="pq")[0][0] == "late"
    assert idx.search(new5, k=1, mode="pq")[0][0] == "v5"
    idx.close()


TRAINER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from streamk.index import StreamingIndex
    from streamk.quantization.ivfpq import IVFPQ

    path, flags = sys.argv[1], Path(sys.argv[2])
    real_fit = IVFPQ.fit

    def fit_and_wait(self, X):
        out = real_fit(self, X)
        (flags / "snapshot").write_text(str(len(X)))
        sys.stdin.readline()  # hold the training open until the test has written (or closed stdin)
        return out
    IVFPQ.fit = fit_and_wait
    idx = StreamingIndex.open(path)
    idx.train_pq(M=16, seed=2)
    idx.close()
""")


def test_pq_training_in_another_process_does_not_block_ingestion(tmp_path, encoder, wait_until):
    rng = np.random.default_rng(19)
    V, W = unit(rng, 300, encoder.dim), unit(rng, 30, encoder.dim)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32")
    idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V)])
    (tmp_path / "trainer.py").write_text(TRAINER)
    proc = start_python(tmp_path / "trainer.py", tmp_path / "ix", tmp_path, stdin=subprocess.PIPE, text=False)
    try:
        wait_until(lambda: (tmp_path / "snapshot").exists() or proc.poll() is not None, 120,
                   "the trainer's snapshot")  # it is now training
        assert (tmp_path / "snapshot").read_text() == "300"
        for i, w in enumerate(W):  # each add commits while the training is still open
            assert idx.add(f"w{i}", vector=w) == f"w{i}"
        idx.remove("v0")
        assert idx.search(W[4], k=1)[0][0] == "w4"
        proc.communicate(b"go\n", timeout=120)  # let the trainer swap
        assert proc.returncode == 0
    finally:
        stop(proc)
    idx.refresh()
    assert_codes_match(idx, idx.codec())  # the swapped-in codec covers the 30 late images too
    assert idx.search(W[9], k=1, mode="pq")[0][0] == "w9"
    assert len(idx) == 329
    idx.close()


# ------------------------------------------------------------------ images
def textured(w=200, h=160, seed=0, n_blobs=40):
    return blobs(w, h, seed, n_blobs, margin=10, max_sigma=6, checkerboard=False)


def test_images(tmp_path, encoder):
    Image = pytest.importorskip("PIL.Image")
    pytest.importorskip("cv2")
    from streamk.features import make_extractor

    paths = []
    for seed in range(3):
        p = tmp_path / f"img{seed}.png"
        Image.fromarray(textured(seed=seed)).save(p)
        paths.append(p)
    ex = make_extractor("sift")
    idx = StreamingIndex.create(tmp_path / "ix", encoder, extractor=ex)
    for i, p in enumerate(paths):
        idx.add(f"img{i}", image_path=p)
    info = idx.info("img1")
    assert info["sha256"] == hashlib.sha256(paths[1].read_bytes()).hexdigest()
    assert info["source"] == str(paths[1].resolve()) or info["source"] == os.path.abspath(paths[1])
    assert idx.extras("img1")["keypoints"].shape == (info["n_descriptors"], 6)
    assert idx.search(paths[1], k=1)[0] == ("img1", pytest.approx(1.0, abs=2e-3))
    shutil.copy(paths[2], tmp_path / "copy.png")
    with pytest.raises(DuplicateError):
        idx.add("copy", image_path=tmp_path / "copy.png")
    idx.add("img0-box", image_path=paths[0], box=(0, 0, 120, 100))  # a crop is other content
    assert idx.search(paths[0], k=1, box=(0, 0, 120, 100))[0][0] == "img0-box"
    with pytest.raises(EmptyDescriptorSetError):
        idx.add("nobox", image_path=paths[0], box=(0, 0, 0.5, 0.5))
    idx.close()
    idx = StreamingIndex.open(tmp_path / "ix")
    assert idx.extractor().params() == ex.params()
    idx.close()


# ------------------------------------------------------------------ another process writes
WRITER = textwrap.dedent("""
    import sys, numpy as np
    from streamk.index import StreamingIndex
    idx = StreamingIndex.open(sys.argv[1])
    V = np.load(sys.argv[2])
    for i, v in enumerate(V[:5]):
        idx.add(f"w{i}", vector=v)
    res = idx.add_many([{"id": f"w{i}", "vector": V[i]} for i in range(5, len(V))], batch_size=100)
    assert all(r.status == "added" for r in res)
    idx.remove("p0")
    idx.close()
""")


def test_reader_sees_another_process_writes(tmp_path, encoder):
    rng = np.random.default_rng(17)
    P, W = unit(rng, 3, encoder.dim), unit(rng, 700, encoder.dim)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32", map_size=64 << 10)
    for i, v in enumerate(P):
        idx.add(f"p{i}", vector=v)
    idx.close()
    reader = StreamingIndex.open(tmp_path / "ix", readonly=True)
    size_before = reader.store.map_size
    assert reader.search(P[0], k=1)[0][0] == "p0"
    assert reader.search(W[5], k=1)[0][0] != "w5"
    np.save(tmp_path / "w.npy", W)
    (tmp_path / "writer.py").write_text(WRITER)
    run_python(tmp_path / "writer.py", tmp_path / "ix", tmp_path / "w.npy", check=True, timeout=120)
    # same reader object, not reopened; the writer also grew the map past the reader's size
    assert reader.search(W[5], k=1)[0] == ("w5", pytest.approx(1.0, abs=1e-6))
    assert reader.search(W[699], k=1)[0][0] == "w699"
    assert "p0" not in [i for i, _ in reader.search(P[0], k=50)]
    assert len(reader) == 702
    assert reader.store.map_size > size_before  # adopted the map the writer grew
    assert reader.refresh() == 0  # nothing new: no reload
    reader.close()


# ------------------------------------------------------------------ format 1 -> 2
def make_format1_index(path, encoder, V, M=None):
    """An index as streamk 0.1 wrote it: everything keyed by id, a log of ids, flat PQ."""
    from streamk.quantization.pq import ProductQuantizer

    env = lmdb.open(str(path), map_size=64 << 20, subdir=True, max_dbs=9)
    dbs = {n: env.open_db(n.encode(), create=True)
           for n in ("meta", "images", "extras", "vectors", "codes", "hashes", "log")}
    pq = ProductQuantizer(M=M, seed=0).fit(V) if M else None
    with env.begin(write=True) as txn:
        meta = {b"format": json.dumps({"format": "streamk-index", "version": 1}).encode(),
                b"encoder": encoder.to_bytes(), b"encoder_fingerprint": encoder.fingerprint.encode(),
                b"vector_dtype": b"float32", b"extractor": b"null", b"created": b"0",
                b"seq": len(V).to_bytes(8, "big"), b"pq_epoch": b"1" if pq else b"0"}
        if pq:
            meta[b"pq"] = pq.to_bytes()
        for k, v in meta.items():
            txn.put(k, v, db=dbs["meta"])
        for i, v in enumerate(V):
            key = f"v{i}".encode()
            v = (v / np.linalg.norm(v)).astype(np.float32)
            sha = hashlib.sha256(v.tobytes()).hexdigest()
            ck = hashlib.sha256(b"vector\0" + bytes.fromhex(sha)).digest()
            record = {"kind": "vector", "source": None, "box": None, "n_descriptors": None, "sha256": sha,
                      "added": 0.0, "seq": i + 1, "content_key": ck.hex()}
            txn.put(key, json.dumps(record).encode(), db=dbs["images"])
            txn.put(key, v.tobytes(), db=dbs["vectors"])
            txn.put(ck, key, db=dbs["hashes"])
            txn.put((i + 1).to_bytes(8, "big"), b"+" + key, db=dbs["log"])
            if pq:
                txn.put(key, pq.encode(v[None, :])[0].tobytes(), db=dbs["codes"])
    env.close()
    return pq


@pytest.mark.parametrize("M", [None, 8])
def test_format1_index_is_upgraded_in_place(tmp_path, encoder, M):
    from streamk.cli import main

    rng = np.random.default_rng(31)
    V = unit(rng, 300, encoder.dim)
    path = tmp_path / "old"
    pq = make_format1_index(path, encoder, V, M)
    with pytest.raises(IndexFormatError, match="streamk index upgrade"):
        StreamingIndex.open(path)
    assert main(["index", "upgrade", str(path)]) == 0
    with StreamingIndex.open(path) as idx:
        assert len(idx) == 300 and idx.dim == encoder.dim
        assert idx.search(V[17], k=1, mode="exact")[0][0] == "v17"
        np.testing.assert_allclose(idx.vector("v5"), V[5], atol=1e-6)
        if M:  # the old codes, now those of a flat codec
            assert idx.codec().nlist == 1
            np.testing.assert_array_equal(idx.codec().pq_.codebooks_, pq.codebooks_)
            assert_codes_match(idx, idx.codec())
            assert idx.search(V[17], k=1, mode="pq")[0][0] == "v17"
        else:
            assert idx.codec() is None
        idx.add("new", vector=unit(rng, 1, encoder.dim)[0])  # and it goes on
        assert idx.info("new")["row"] == 300
        with pytest.raises(Exception):
            idx.add("dup", vector=V[3])  # content keys kept: still de-duplicated
    assert main(["index", "upgrade", str(path)]) == 4  # already format 2 (IndexFormatError)


def test_index_without_display_extras(tmp_path, encoder):
    X = sift_sets(40, 1)[0]
    with StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32", store_extras=False) as idx:
        idx.add("d", descriptors=X)
        assert idx.extras("d") == {}  # nothing kept for display
        assert idx.store.count("extras") == 0
        assert idx.search(X, k=1)[0][0] == "d"
    with StreamingIndex.create(tmp_path / "with", encoder, vector_dtype="float32") as idx:
        idx.add("d", descriptors=X)
        assert idx.extras("d")["weights"].shape == (len(X),)


def test_vectors_are_stored_in_blocks_that_fill_lmdb_pages(tmp_path):
    """1,024 float16 (2,048 bytes) alone would take a 4 KiB overflow page each in LMDB;
    31 per value fill 16 pages."""
    from streamk.index.vector_store import VectorStore, rows_per_block

    rng = np.random.default_rng(0)
    sets = [rng.integers(0, 256, (200, 128)).astype(np.float32) for _ in range(3)]
    enc = Encoder(embedding="vlad", k=8, aggregation="sum").fit(sets)  # 1,024-dim vectors
    assert rows_per_block(1024, "float16") == 31
    V = unit(rng, 1000, 1024).astype(np.float32)
    with StreamingIndex.create(tmp_path / "ix", enc, vector_dtype="float16") as idx:
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V)], batch_size=250)
        with idx.store.read() as txn:
            st = txn.stat(idx.store.vectors_db)
        pages = st["overflow_pages"] + st["leaf_pages"] + st["branch_pages"]
        assert pages <= 33 * 16 + 2, st  # 33 blocks of 16 pages (one vector a value: 1,000 pages)
        idx.remove([f"v{i}" for i in range(0, 1000, 3)])
        vs = VectorStore(idx.store, 1024, "float16")
        with idx.store.read() as txn:
            rows = np.array([idx.info(f"v{i}")["row"] for i in range(1, 1000, 3)])
            np.testing.assert_allclose(vs.get(txn, rows), V[1::3], atol=2e-3)
            dead = set(range(0, 1000, 3))
            got = [(r, v) for rows_, Vs in vs.scan(txn, 100, 700, live=lambda r: np.array([x not in dead for x in r]))
                   for r, v in zip(rows_, Vs)]
        assert [r for r, _ in got] == [r for r in range(100, 700) if r not in dead]
        np.testing.assert_allclose(np.stack([v for _, v in got]), V[[r for r, _ in got]], atol=2e-3)
        _, ids = idx.search(V[:6].astype(np.float32), k=1, mode="exact")
        for i in range(6):  # a kept image finds itself; a removed one is never found
            assert (ids[i, 0] == f"v{i}") == (i % 3 != 0) and int(ids[i, 0][1:]) % 3 != 0


def test_the_collection_mean_is_the_live_vectors_mean_from_a_bounded_sample(tmp_path):
    """The centred expansion's mean (StreamingIndex.mean_vector): every live vector of a small
    index (removed rows left out, numpy's mean); on a larger one, MEAN_SAMPLE_BLOCKS whole blocks
    spread over the rows, never more, whatever it holds."""
    from streamk.index.reader import MEAN_SAMPLE_BLOCKS
    from streamk.index.vector_store import rows_per_block

    rng = np.random.default_rng(3)
    sets = [rng.integers(0, 256, (200, 128)).astype(np.float32) for _ in range(3)]
    enc = Encoder(embedding="vlad", k=2, aggregation="sum").fit(sets)  # 256-dim vectors
    B = rows_per_block(enc.dim, "float32")
    n = (MEAN_SAMPLE_BLOCKS + 8) * B + 5  # past the sample: the last block part-filled
    V = unit(rng, n, enc.dim).astype(np.float32)
    with StreamingIndex.create(tmp_path / "ix", enc, vector_dtype="float32") as idx:
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V[:40])], batch_size=40)
        total, count, images = idx.mean_vector()
        assert count == images == 40
        np.testing.assert_allclose(total / count, V[:40].astype(np.float64).mean(axis=0), atol=1e-6)
        idx.remove([f"v{i}" for i in range(0, 40, 4)])
        total, count, images = idx.mean_vector()
        kept = [i for i in range(40) if i % 4]
        assert count == images == len(kept)
        np.testing.assert_allclose(total / count, V[kept].astype(np.float64).mean(axis=0), atol=1e-6)
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V[40:], start=40)], batch_size=500)
        total, count, images = idx.mean_vector()
        assert images == len(kept) + n - 40
        rows = np.array([idx.info(f"v{i}")["row"] for i in range(40, n)] + [idx.info(f"v{i}")["row"] for i in kept])
        order = dict(zip(rows.tolist(), list(range(40, n)) + kept))
        n_blocks = -(-(int(rows.max()) + 1) // B)
        picked = np.arange(MEAN_SAMPLE_BLOCKS) * n_blocks // MEAN_SAMPLE_BLOCKS
        in_sample = [order[r] for r in sorted(order) if r // B in set(picked.tolist())]
        assert count == len(in_sample) <= MEAN_SAMPLE_BLOCKS * B
        np.testing.assert_allclose(total, V[in_sample].astype(np.float64).sum(axis=0), atol=1e-4)


def test_the_parts_means_are_weighted_by_their_images():
    """collection_mean (a sharded index's shards): each part's sample mean counts by the images
    it holds, not by its sample's size; parts whose samples are empty say nothing."""
    from streamk.index.second_stage import collection_mean

    a, b = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    mean, images = collection_mean([(10 * a, 10, 300), (10 * b, 10, 100), (np.zeros(2), 0, 50)])
    assert images == 400 and np.allclose(mean, [0.75, 0.25])
    mean, images = collection_mean([(np.zeros(2), 0, 5)])
    assert images == 0 and np.allclose(mean, 0)

"""The LMDB store under the streaming index: metadata, map growth, ids, format checks."""

import json
import os

import lmdb
import numpy as np
import pytest

from streamk.errors import (IndexCorruptError, IndexExistsError, IndexFormatError, InvalidIdError, NotAnIndexError,
                            ReadOnlyIndexError, StreamkError)
from streamk.index.store import (FORMAT_VERSION, OPTIONAL_SUBDBS, SUBDBS, Store, id_key, seq_from_key, seq_key,
                                 validate_id)
from streamk.index.integrity import seal


def test_create_open_round_trip(tmp_path):
    s = Store.create(tmp_path / "ix", {"encoder": b"blob", "vector_dtype": b"float16"})
    assert s.get_meta("encoder") == b"blob"
    s.close()
    s = Store.open(tmp_path / "ix")
    assert s.get_meta("vector_dtype") == b"float16"
    assert json.loads(s.get_meta("format")) == {"format": "streamk-index", "version": FORMAT_VERSION}
    assert set(s.dump()) == set(SUBDBS + OPTIONAL_SUBDBS)
    assert s.seq() == 0
    s.close()


def test_refuses_non_empty_dir_and_file(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("mine")
    with pytest.raises(IndexExistsError):
        Store.create(tmp_path / "full", {})
    assert os.listdir(tmp_path / "full") == ["x.txt"]
    (tmp_path / "f").write_text("x")
    with pytest.raises(IndexExistsError):
        Store.create(tmp_path / "f", {})
    s = Store.create(tmp_path / "ix", {})
    s.close()
    with pytest.raises(IndexExistsError):  # an existing index is not overwritten
        Store.create(tmp_path / "ix", {})


@pytest.mark.parametrize("make", ["missing", "empty", "other_files"])
def test_open_non_index_raises_and_creates_nothing(tmp_path, make):
    p = tmp_path / "p"
    if make != "missing":
        p.mkdir()
    if make == "other_files":
        (p / "a.txt").write_text("x")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(NotAnIndexError):
        Store.open(p)
    assert sorted(os.listdir(tmp_path)) == before
    if p.exists():
        assert "data.mdb" not in os.listdir(p)


def test_open_foreign_lmdb_is_not_an_index_and_is_left_alone(tmp_path):
    env = lmdb.open(str(tmp_path / "db"), max_dbs=4)
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v")
    env.close()
    with pytest.raises(NotAnIndexError):
        Store.open(tmp_path / "db")
    env = lmdb.open(str(tmp_path / "db"), max_dbs=4)
    with env.begin() as txn:
        assert list(txn.cursor()) == [(b"k", b"v")]  # no sub-database was created in it
    env.close()


def test_format_version_mismatch(tmp_path):
    Store.create(tmp_path / "ix", {}).close()
    env = lmdb.open(str(tmp_path / "ix"), max_dbs=16)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"format", json.dumps({"format": "streamk-index", "version": FORMAT_VERSION + 1}).encode(),
                db=meta)
    env.close()
    with pytest.raises(IndexFormatError, match="version"):
        Store.open(tmp_path / "ix")
    with pytest.raises(IndexFormatError):
        Store.open(tmp_path / "ix", readonly=True)


def test_map_grows_transparently_and_reruns_the_whole_transaction(tmp_path):
    s = Store.create(tmp_path / "ix", {}, map_size=64 << 10)
    start = s.map_size
    calls = []

    def fill(txn):
        calls.append(1)
        for i in range(300):
            txn.put(b"%05d" % i, bytes([i % 256]) * 3000, db=s.vectors_db)
        s.bump(txn, b"+", 7)
        return "done"

    assert s.write(fill) == "done"  # ~900 KB into a 64 KiB map
    assert s.map_size >= 8 * start  # several doublings
    assert len(calls) >= 3  # each growth reruns fill from scratch
    assert s.seq() == 1  # ...and the aborted attempts left nothing behind
    assert s.count("vectors") == 300
    s.close()
    s = Store.open(tmp_path / "ix")
    with s.read() as txn:
        assert txn.get(b"00299", db=s.vectors_db) == bytes([299 % 256]) * 3000
    s.close()


def test_failed_write_leaves_nothing(tmp_path):
    s = Store.create(tmp_path / "ix", {})
    before = s.dump()

    def bad(txn):
        txn.put(b"a", b"b", db=s.images_db)
        s.bump(txn, b"+", 0)
        raise InvalidIdError("stop")

    with pytest.raises(InvalidIdError):
        s.write(bad)
    assert s.dump() == before
    s.close()


def test_readonly_refuses_writes(tmp_path):
    Store.create(tmp_path / "ix", {}).close()
    s = Store.open(tmp_path / "ix", readonly=True)
    with pytest.raises(ReadOnlyIndexError):
        s.write(lambda txn: None)
    s.close()


def test_change_log(tmp_path):
    s = Store.create(tmp_path / "ix", {})
    s.write(lambda txn: (s.bump(txn, b"+", 0), s.bump(txn, b"+", 1)))
    s.write(lambda txn: s.bump(txn, b"-", 0))
    with s.read() as txn:
        assert s.seq(txn) == 3
        assert s.changes_since(txn, 0) == [(1, b"+", 0), (2, b"+", 1), (3, b"-", 0)]
        assert s.changes_since(txn, 2) == [(3, b"-", 0)]
        assert s.changes_since(txn, 3) == []
    assert seq_key(1) < seq_key(256)  # big-endian keys sort by number
    s.close()


def test_change_log_is_trimmed_and_a_reader_too_far_behind_is_told(tmp_path, monkeypatch):
    import streamk.index.store as store_module

    monkeypatch.setattr(store_module, "LOG_KEEP", 8)
    monkeypatch.setattr(store_module, "LOG_TRIM_EVERY", 4)
    s = Store.create(tmp_path / "ix", {})
    for row in range(30):
        s.write(lambda txn, row=row: s.bump(txn, b"+", row))
    with s.read() as txn:
        kept = [seq_from_key(k) for k, _ in txn.cursor(db=s.log_db)]
        assert kept == list(range(20, 31))  # trimmed at seq 28 below 28 - 8; never more than 8 + 4 - 1 kept
        assert s.changes_since(txn, 19) == [(q, b"+", q - 1) for q in range(20, 31)]
        assert s.changes_since(txn, 18) is None  # entry 19 is gone: load everything
        assert s.changes_since(txn, 0) is None
        assert s.changes_since(txn, 30) == []
    s.close()


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "a\\b", ".", "..", "x" * 201, "a\x00b", "a\nb",
                                 "\x7f", "a\u0085b", "\ud800", "\U0001F600" * 200, None, 3, b"abc"])
def test_invalid_ids(bad):
    with pytest.raises(InvalidIdError):
        validate_id(bad)
    assert issubclass(InvalidIdError, (StreamkError, ValueError))


@pytest.mark.parametrize("good", ["a", "x" * 200, "photo 1.jpg", "..x", "über-Ω", "é" * 200, "日本" * 50, "a.b"])
def test_valid_ids(good):
    assert validate_id(good) == good
    assert id_key(good) == good.encode("utf-8")


# ------------------------------------------------------------ the image record, decoded once
@pytest.mark.parametrize("raw, why", [
    (b"\xff{not json", "not JSON"),
    (b"[1, 2]", "not an object"),
    (b'{"kind": "vector", "sha256": "ab"}', "no row"),
    (b'{"row": "7"}', "a row that is not an integer"),
    (b'{"row": 2.5}', "a fractional row"),
    (b'{"row": -1}', "a negative row"),
    (b'{"row": true}', "a boolean row"),
    (b'{"row": 3, "content_key": "zz"}', "a content key that is not hex"),
    (b'{"row": 3, "content_key": "abcd"}', "a content key of 2 bytes"),
])
def test_a_damaged_or_incomplete_image_record_is_a_named_error(tmp_path, raw, why):
    from streamk.errors import IndexCorruptError
    from streamk.index import ImageRecord

    with pytest.raises(IndexCorruptError, match="the record of id 'img-7' is unreadable") as err:
        ImageRecord.decode(raw, tmp_path, "img-7")
    assert str(err.value.path) == str(tmp_path), why


def test_an_image_record_holds_what_its_json_holds(tmp_path):
    from streamk.index import ImageRecord

    fields = {"kind": "image_path", "source": "/p/a.jpg", "box": [1.0, 2.0, 30.0, 40.0], "n_descriptors": 812,
              "sha256": "ab" * 32, "image_size": [640, 480], "added": 1.7e9, "seq": 9, "row": 4,
              "content_key": "cd" * 32, "filename": "a.jpg"}
    raw = json.dumps(fields).encode()
    rec = ImageRecord.decode(seal(raw), tmp_path, id_key("a"))  # stored with its CRC32C; the id as its key
    assert rec.image_id == "a" and rec.row == 4 and rec.content_key == bytes.fromhex("cd" * 32)
    assert (rec.kind, rec.source, rec.box, rec.n_descriptors, rec.sha256, rec.image_size, rec.added, rec.seq) == \
        ("image_path", "/p/a.jpg", [1.0, 2.0, 30.0, 40.0], 812, "ab" * 32, [640, 480], 1.7e9, 9)
    assert rec.to_dict() == json.loads(raw) and rec.get("filename") == "a.jpg" and rec.get("absent") is None
    old = ImageRecord.decode(seal(b'{"row": 0, "kind": "vector"}'), tmp_path, "b")  # before content keys
    assert old.content_key is None and old.source is None
    for stored in (raw, seal(raw)[:-1] + bytes([seal(raw)[-1] ^ 1]), seal(raw.replace(b"812", b"813"))[1:]):
        with pytest.raises(IndexCorruptError, match="the record of id 'a' is unreadable"):
            ImageRecord.decode(stored, tmp_path, "a")  # unsealed, a flipped CRC, a lost byte


def test_a_damaged_record_in_an_index_is_named_by_every_reader(tmp_path):
    from helpers.index import make_encoder, vectors
    from streamk.errors import IndexCorruptError
    from streamk.index import StreamingIndex

    idx = StreamingIndex.create(tmp_path / "ix", make_encoder())
    V = vectors(1, 3)
    for i in range(3):
        idx.add(f"v{i}", vector=V[i])
    idx.store.overwrite_value("images", id_key("v1"), lambda raw: seal(b'{"kind": "vector"}'))  # no row
    for read in (idx.info, idx.metadata, idx.vector, lambda i: idx.metadata_many([i]), lambda i: idx.remove(i)):
        with pytest.raises(IndexCorruptError, match="the record of id 'v1' is unreadable"):
            read("v1")
    assert idx.info("v0")["row"] == 0
    idx.close()


# ------------------------------------------------------------ removing an image leaves nothing of it
def _every_subdb(env):
    """{name: {key: value}} of every named sub-database of ``env``, found by walking LMDB's
    main database (not the store's list of names)."""
    out = {}
    with env.begin() as txn:
        names = [bytes(k) for k, _ in txn.cursor()]
        for name in names:
            db = env.open_db(name, txn=txn, create=False)
            with txn.cursor(db=db) as cur:  # every (key, value), each duplicate of a dupsort one too
                out[name.decode()] = {(bytes(k), bytes(v)) for k, v in cur}
    return out


def _everything_of_an_image(idx, image_id, vector, content, geometry, thumbnail, metadata):
    """Write ``image_id`` owning an entry in every sub-database an image can own."""
    import dataclasses

    from streamk.index import encoded_vector, npz_bytes

    enc = encoded_vector(image_id, vector, idx.dim, metadata=metadata)
    enc = enc._replace(content=content, extras=npz_bytes(weights=np.ones(3, np.float32)), geometry=geometry,
                       thumbnail=thumbnail)
    assert not dataclasses.is_dataclass(enc)
    assert idx.write_encoded([enc]) == ["added"]


def test_delete_image_leaves_no_trace_in_any_subdb(tmp_path):
    """Adding an image that owns an entry in every sub-database, then removing it, leaves
    each sub-database as it was, save the removal's own marks: the change counters, the log,
    the removed row's bit. Checked by brute force over every sub-database LMDB holds."""
    from helpers.index import make_encoder, vectors
    from streamk.index import StreamingIndex
    from streamk.index.store import IMAGE_BY_ID, IMAGE_BY_ROW, IMAGE_DERIVED, row_key

    idx = StreamingIndex.create(tmp_path / "ix", make_encoder(), indexed_fields=("folder", "n"))
    idx.store.write(lambda txn: idx.store.put_int(txn, b"local_features", 1))  # geometry is kept
    V = vectors(2, 6)
    for i in range(5):
        _everything_of_an_image(idx, f"k{i}", V[i], bytes([i]) * 32, b"geom%d" % i, b"jpeg%d" % i,
                                {"folder": f"f{i % 2}", "n": i})
    before = _every_subdb(idx.store.env)
    owned = set(IMAGE_BY_ID) | set(IMAGE_BY_ROW) | set(IMAGE_DERIVED)
    assert owned <= set(before), "every sub-database an image owns exists"
    # its values sort last in their range columns: the chunks keep their first records (their keys)
    _everything_of_an_image(idx, "gone", V[5], b"\xee" * 32, b"geom-gone", b"jpeg-gone",
                            {"folder": "fz-gone", "n": 99.5})
    row = idx.info("gone")["row"]
    during = _every_subdb(idx.store.env)
    touched = {name for name in during if during[name] != before[name]}
    assert owned - {"dead"} <= touched, "the image owns something in each"
    assert touched <= owned | {"meta"}, "what an image writes is listed as what it owns (IMAGE_BY_ID, ...)"
    assert idx.remove("gone") == 1
    after = _every_subdb(idx.store.env)
    assert set(after) == set(before)
    for name in sorted(before):
        if name in ("meta", "log", "dead"):
            continue
        assert after[name] == before[name], f"{name}: the removed image left a trace"
    changed_meta = {k for k, v in after["meta"] ^ before["meta"]}
    assert changed_meta <= {b"seq", b"next_row"}
    assert len(after["log"] - before["log"]) == 2  # its addition and its removal
    (block, bits), = after["dead"] - before["dead"]
    assert block == row_key(row // idx.store.block_rows)
    assert np.flatnonzero(np.unpackbits(np.frombuffer(bits, np.uint8), bitorder="little")).tolist() == [row]
    for name, entries in after.items():  # its id, its content key, its values: nowhere
        if name not in ("meta", "log", "dead"):
            assert not any(b"gone" in k or b"gone" in v or b"\xee" * 32 in k for k, v in entries), name
    idx.close()


def test_a_read_only_search_builds_no_writer(tmp_path, monkeypatch):
    from helpers.index import make_encoder, vectors
    from streamk.index import StreamingIndex
    from streamk.index import writer as writer_module

    idx = StreamingIndex.create(tmp_path / "ix", make_encoder())
    V = vectors(3, 20)
    idx.add_many([{"id": f"r{i}", "vector": v} for i, v in enumerate(V)])
    idx.close()

    def refuse(*args, **kwargs):
        raise AssertionError("a read-only search built an IndexWriter")
    monkeypatch.setattr(writer_module.IndexWriter, "__init__", refuse)
    ro = StreamingIndex.open(tmp_path / "ix", readonly=True)
    assert ro.search(V[4], k=3)[0][0] == "r4"
    assert ro.info("r4")["row"] == 4 and ro.codec() is None and "r4" in ro and len(ro) == 20
    ro.close()


def test_the_old_names_still_answer_with_a_warning(tmp_path):
    """Store.dbs and second_stage.records_of, kept for 0.3 (CHANGELOG), say what replaced them."""
    from streamk.index import second_stage

    s = Store.create(tmp_path / "ix", {})
    with pytest.warns(DeprecationWarning, match="sub-database accessors"):
        handles = s.dbs
    assert set(handles) == set(SUBDBS + OPTIONAL_SUBDBS) and handles["images"] is s.images_db
    s.write(lambda txn: txn.put((3).to_bytes(8, "big"), b"geometry of row 3", db=s.geometry_db))
    with s.read() as txn, pytest.warns(DeprecationWarning, match="geometry_records"):
        assert second_stage.records_of(s, txn, [3, 4]) == [b"geometry of row 3", None]
    s.close()


OPEN_WHILE_WRITING = """
import sys, threading, time
from streamk.index.store import Store

path = sys.argv[1]
writer = Store.open(path)  # this process's writable environment, shared by every Store on the file
steps, holding = [], threading.Event()

def work(seconds):  # Python work, which needs the GIL now and then (no sleep: it would not)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

def write():
    with writer.env.begin(write=True):  # the write lock held while Python work goes on
        holding.set()
        for i in range(20):
            steps.append(i)
            work(0.01)

t = threading.Thread(target=write)
t.start()
holding.wait(10)
reader = Store.open(path, readonly=True)  # opens its sub-databases while the lock is held
t.join(30)
print(len(steps), t.is_alive())
"""


def test_a_store_opens_while_another_thread_of_the_process_holds_the_write_lock(tmp_path):
    """py-lmdb's open_db without a transaction waits for the write lock holding the GIL: a
    server's backup opening the index while its writer thread held a write transaction hung
    both for good. The open must wait for the lock with the GIL released (or not need it)."""
    from helpers.processes import run_python

    path = tmp_path / "ix"
    Store.create(path, {"encoder": b"blob", "vector_dtype": b"float16"}).close()
    out = run_python("-c", OPEN_WHILE_WRITING, path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["20", "False"]

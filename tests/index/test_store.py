"""The LMDB store under the streaming index: metadata, map growth, ids, format checks."""

import json
import os

import lmdb
import pytest

from streamk.errors import (IndexExistsError, IndexFormatError, InvalidIdError, NotAnIndexError,
                            ReadOnlyIndexError, StreamkError)
from streamk.index.store import FORMAT_VERSION, OPTIONAL_SUBDBS, SUBDBS, Store, id_key, seq_from_key, seq_key, validate_id


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
            txn.put(b"%05d" % i, bytes([i % 256]) * 3000, db=s.dbs["vectors"])
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
        assert txn.get(b"00299", db=s.dbs["vectors"]) == bytes([299 % 256]) * 3000
    s.close()


def test_failed_write_leaves_nothing(tmp_path):
    s = Store.create(tmp_path / "ix", {})
    before = s.dump()

    def bad(txn):
        txn.put(b"a", b"b", db=s.dbs["images"])
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
        kept = [seq_from_key(k) for k, _ in txn.cursor(db=s.dbs["log"])]
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

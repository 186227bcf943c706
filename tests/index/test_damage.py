"""Damaged and truncated indexes (issue 17, failures 2 and 3): a named error or a verify
report, never a signal, never a silent wrong answer; a full disk (failure 4) is a
DiskFullError with nothing half-written."""

import json
import os
import shutil
import signal
import sys

import numpy as np
import pytest

from helpers.disks import remount_read_only, tmpfs
from helpers.index import make_encoder, vectors
from helpers.processes import run_python
from streamk.errors import DiskFullError, IndexCorruptError
from streamk.index import ShardedIndex, StreamingIndex, check_index
from streamk.index.integrity import read_lmdb_meta
from streamk.index.store import epoch_key

N_IMAGES = 1200


@pytest.fixture(scope="module")
def encoder():
    return make_encoder()


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder):
    """A real small index: vectors, a trained flat-PQ codec (sealed code blocks and an open
    block), then more images; (path, vectors)."""
    path = tmp_path_factory.mktemp("built") / "ix"
    V = vectors(1, N_IMAGES)
    with StreamingIndex.create(path, encoder, vector_dtype="float32", block_rows=256) as idx:
        idx.add_many([{"id": f"i{i:05d}", "vector": v} for i, v in enumerate(V[:1000])], batch_size=500)
        idx.train(nlist=1, M=8, progress=False)
        idx.add_many([{"id": f"i{i:05d}", "vector": v} for i, v in enumerate(V[1000:], 1000)], batch_size=500)
    return path, V


def copy_of(src, dst):
    shutil.copytree(src, dst)
    os.remove(dst / "lock.mdb") if (dst / "lock.mdb").exists() else None
    return dst


SEARCH = """
import sys
import numpy as np
from streamk.errors import StreamkError
from streamk.index import open_index
try:
    with open_index(sys.argv[1], readonly=True) as idx:
        q = np.load(sys.argv[2])
        scores, ids = idx.search(q[None, :], k=5, mode=sys.argv[3])
        print(ids[0][0])
except StreamkError as exc:
    print(type(exc).__name__, exc)
    sys.exit(getattr(exc, "exit_code", 2))
"""


def search_in_child(tmp_path, path, q, mode="pq"):
    np.save(tmp_path / "q.npy", q)
    (tmp_path / "search.py").write_text(SEARCH)
    return run_python(tmp_path / "search.py", path, tmp_path / "q.npy", mode, timeout=120)


def test_the_header_reader_agrees_with_lmdb(built):
    import lmdb

    path, _ = built
    env = lmdb.open(str(path), readonly=True, max_dbs=32, lock=False)
    try:
        info, psize = env.info(), env.stat()["psize"]
    finally:
        env.close()
    assert read_lmdb_meta(path / "data.mdb") == (psize, info["last_pgno"], info["last_txnid"])


@pytest.mark.parametrize("keep", ["0", "100", "1page", "2pages+7", "half", "all-4096", "all-1"])
def test_a_truncated_data_file_is_a_named_error_never_a_signal(tmp_path, built, keep):
    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    size = (ix / "data.mdb").stat().st_size
    n = {"0": 0, "100": 100, "1page": 4096, "2pages+7": 8199, "half": size // 2, "all-4096": size - 4096,
         "all-1": size - 1}[keep]
    os.truncate(ix / "data.mdb", n)
    proc = search_in_child(tmp_path, ix, V[7])
    assert proc.returncode == IndexCorruptError.exit_code == 5, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.returncode not in (-signal.SIGBUS, 128 + signal.SIGBUS)
    assert "IndexCorruptError" in proc.stdout and str(ix) in proc.stdout
    assert "truncated" in proc.stdout or "meta page" in proc.stdout
    # a repair cannot make the missing pages again: the error says to restore a copy, and offers no repair
    assert "restore a copy" in proc.stdout and "run `streamk index verify --repair" not in proc.stdout
    with pytest.raises(IndexCorruptError, match="damaged"):
        StreamingIndex.open(ix, readonly=True)


def test_the_cli_says_truncated_in_one_line(tmp_path, built):
    path, _ = built
    ix = copy_of(path, tmp_path / "ix")
    os.truncate(ix / "data.mdb", (ix / "data.mdb").stat().st_size // 2)
    proc = run_python("-m", "streamk.cli", "index", "info", ix, timeout=120)
    assert proc.returncode == 5, proc
    assert "truncated" in proc.stderr and "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_the_untouched_copy_searches_right(tmp_path, built):
    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    proc = search_in_child(tmp_path, ix, V[7])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["i00007"]


def test_a_truncated_shard_is_named(tmp_path, encoder):
    V = vectors(2, 200)
    with ShardedIndex.create(tmp_path / "sh", encoder, shards=2, vector_dtype="float32") as idx:
        idx.add_many([{"id": f"s{i}", "vector": v} for i, v in enumerate(V)])
    shard = tmp_path / "sh" / "shard-001"
    os.truncate(shard / "data.mdb", (shard / "data.mdb").stat().st_size - 4096)
    with pytest.raises(IndexCorruptError, match="shard-001.*truncated"):
        ShardedIndex.open(tmp_path / "sh", readonly=True)
    proc = search_in_child(tmp_path, tmp_path / "sh", V[0], mode="exact")
    assert proc.returncode == 5, (proc.stdout, proc.stderr)
    assert "shard-001" in proc.stdout


# ------------------------------------------------------------ one byte of LMDB's header, and what to do about damage
def flip_file_byte(data_file, at, mask=0xFF):
    """Flip one byte of a file in place (read, modify, write)."""
    with open(data_file, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ mask]))


# the meta pages' flags (P_META), magic and data version; the second meta page is one page on (4096 bytes)
@pytest.mark.parametrize("at", [10, 16, 20, 4096 + 16, 4096 + 20])
def test_one_flipped_byte_of_the_lmdb_header_is_damage_to_restore(tmp_path, built, at):
    """LMDB refuses a file with either meta page damaged (MDB_INVALID, or py-lmdb's "data format v254 is not
    supported"): that was exit 4 "cannot open as an LMDB index"; it is damage (exit 5), to restore."""
    path, _ = built
    ix = copy_of(path, tmp_path / "ix")
    flip_file_byte(ix / "data.mdb", at)
    with pytest.raises(IndexCorruptError) as info:
        StreamingIndex.open(ix, readonly=True)
    message = str(info.value)
    assert message.startswith(f"{ix}: the index is damaged: data.mdb is not a valid LMDB file: meta page")
    assert "(LMDB: " in message and "restore a copy" in message and "streamk index backup" in message
    assert "run `streamk index verify --repair" not in message
    proc = run_python("-m", "streamk.cli", "index", "info", ix, timeout=120)
    assert proc.returncode == 5 and len(proc.stderr.splitlines()) == 1, proc
    assert proc.stderr.startswith("streamk: error: ") and "not a valid LMDB file" in proc.stderr
    report = check_index(ix, repair=True, progress=False)
    assert not report.ok and report.unrepairable == ["the LMDB file itself"]


def rename_subdb(data_file, name, new_name):
    """Rename the sub-database ``name`` in the main B-tree's leaves of ``data_file`` in place
    (same length, same sort order: LMDB's lookup of ``name`` finds nothing). Its node: flags
    F_SUBDATA (2) and the key's size (little-endian u16) just before the key; every copy of the
    leaf (the live one and those of earlier transactions, free pages) is changed."""
    data = bytearray(data_file.read_bytes())
    node = (2).to_bytes(2, "little") + len(name).to_bytes(2, "little") + name
    at = data.find(node)
    assert at > 0
    while at >= 0:
        data[at + 4:at + 4 + len(name)] = new_name
        at = data.find(node, at + 1)
    data_file.write_bytes(bytes(data))


def main_leaf(data_file):
    """The offset in ``data_file`` of its main B-tree's root page, as its current LMDB meta names
    it (the meta with the larger txnid: mm_txnid at 144, the main DB's md_root at 128 of a meta
    page); a leaf (P_LEAF) in a small index: the one page that names the sub-databases."""
    import struct

    data = data_file.read_bytes()
    txnid, root = max(struct.unpack_from("<QQ", data, at + 136)[1:] + struct.unpack_from("<Q", data, at + 128)
                      for at in (0, 4096))
    assert struct.unpack_from("<H", data, root * 4096 + 10)[0] == 0x02  # P_LEAF
    return root * 4096


# the main B-tree's leaf, which names the sub-databases, damaged: one sub-database or meta renamed, the
# page's flags, its bound of the node pointers (mp_lower), the last byte of the page (meta's record, the
# first node written)
@pytest.mark.parametrize("damage", ["vectors-renamed", "meta-renamed", "flags", "lower", "last-byte"])
def test_a_damaged_main_b_tree_is_damage_to_restore_not_another_database(tmp_path, built, damage):
    """A flipped byte in the main B-tree said "IX is not a streamk index (mdb_dbi_open: MDB_NOTFOUND ...)",
    "IX is an LMDB database but not a streamk index" or "... (mdb_get: MDB_BAD_TXN ...)", exit 4, in search
    and in verify (an operator told to give another folder), or offered `verify --repair`, which cannot
    rebuild it; it is damage (exit 5), to restore."""
    path, _ = built
    ix = copy_of(path, tmp_path / "ix")
    if damage.endswith("-renamed"):
        name = damage.split("-")[0].encode()
        rename_subdb(ix / "data.mdb", name, {b"vectors": b"vectorz", b"meta": b"meSa"}[name])
    else:
        at = {"flags": 10, "lower": 12, "last-byte": 4095}[damage]
        flip_file_byte(ix / "data.mdb", main_leaf(ix / "data.mdb") + at)
    with pytest.raises(IndexCorruptError, match="the index is damaged: .*restore a copy") as info:
        StreamingIndex.open(ix, readonly=True)
    assert "run `streamk index verify --repair" not in str(info.value)
    proc = run_python("-m", "streamk.cli", "index", "info", ix, timeout=120)
    assert proc.returncode == 5 and len(proc.stderr.splitlines()) == 1, proc
    report = check_index(ix, repair=True, progress=False)
    assert not report.ok and report.unrepairable == ["the LMDB file itself"]
    with pytest.raises(IndexCorruptError):  # writable too: nothing made in its place
        StreamingIndex.open(ix)


def test_repair_is_offered_only_for_damage_it_repairs(tmp_path, built):
    """One place (integrity.advice) says what to do: a damaged encoder or a truncated file said "... or run
    `streamk index verify --repair`", which then said "cannot repair in place"."""
    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    blob = stored(ix, "meta", b"encoder")
    damage(ix, blob[len(blob) // 2:len(blob) // 2 + 64], nbytes=4)
    with StreamingIndex.open(ix, readonly=True) as idx:
        with pytest.raises(IndexCorruptError, match="encoder fails its checksum") as info:
            idx.search(np.random.default_rng(0).integers(0, 256, (40, 128)).astype(np.float32), k=3)
    assert "restore a copy" in str(info.value) and "run `streamk index verify --repair" not in str(info.value)
    report = check_index(ix, repair=True, progress=False)
    assert report.unrepairable == ["the encoder"] and not any("run `streamk index verify" in x for x in report.lines())
    ix2 = copy_of(path, tmp_path / "ix2")
    damage(ix2, V[300].astype(np.float32).tobytes(), nbytes=64)
    with StreamingIndex.open(ix2, readonly=True) as idx:
        with pytest.raises(IndexCorruptError, match=f"run `streamk index verify --repair {ix2}`"):
            idx.vector("i00300")  # a vector block: the repair rewrites it
    assert check_index(ix2, repair=True, progress=False).ok


def test_the_verify_report_of_a_truncated_file_says_each_thing_once(tmp_path, built):
    path, _ = built
    ix = copy_of(path, tmp_path / "ix")
    os.truncate(ix / "data.mdb", 8192)
    lines = check_index(ix, progress=False).lines()
    assert lines[0] == f"{ix}: DAMAGED (1 finding(s))"  # was "...finding(s)); " with nothing after
    assert lines[1].startswith("  damaged: data.mdb is truncated")  # was "damaged: ix: the index is damaged: ..."
    assert "  cannot repair in place: the LMDB file itself" in lines and "restore a copy" in lines[-1]
    assert not any("verify --repair" in x for x in lines)


def test_a_path_that_is_not_an_index_says_what_is_there(tmp_path):
    from streamk.errors import NotAnIndexError

    with pytest.raises(NotAnIndexError, match="nothere does not exist"):
        StreamingIndex.open(tmp_path / "nothere")
    with pytest.raises(NotAnIndexError, match="nothere does not exist"):
        check_index(tmp_path / "nothere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotAnIndexError, match="is not a streamk index .no LMDB data there"):
        StreamingIndex.open(tmp_path / "empty")


def test_a_missing_shard_and_a_damaged_shard_list_are_damage_to_restore(tmp_path, encoder):
    """A missing shard folder said "/.../shard-001 is not a streamk index"; a broken shards.json said
    "unreadable (Expecting property name ...)" with nothing to do."""
    V = vectors(2, 40)
    with ShardedIndex.create(tmp_path / "sh", encoder, shards=2, vector_dtype="float32") as idx:
        idx.add_many([{"id": f"s{i}", "vector": v} for i, v in enumerate(V)])
    shutil.copytree(tmp_path / "sh", tmp_path / "gone")
    shutil.rmtree(tmp_path / "gone" / "shard-001")
    with pytest.raises(IndexCorruptError, match="shard 1 is missing .*restore a copy") as info:
        ShardedIndex.open(tmp_path / "gone", readonly=True)
    assert "verify --repair`" not in str(info.value).split("restore a copy")[0]
    report = check_index(tmp_path / "gone", progress=False)
    assert not report.ok and report.shards[0].ok and report.shards[1].unrepairable
    manifest = tmp_path / "sh" / "shards.json"
    manifest.write_text(manifest.read_text()[:20])
    with pytest.raises(IndexCorruptError, match="shards.json is unreadable .*restore a copy"):
        ShardedIndex.open(tmp_path / "sh", readonly=True)
    proc = run_python("-m", "streamk.cli", "index", "info", tmp_path / "sh", timeout=120)
    assert proc.returncode == 5 and "shards.json" in proc.stderr and len(proc.stderr.splitlines()) == 1, proc


# ------------------------------------------------------------ a folder that cannot be written
@pytest.mark.parametrize("exc", ["lmdb-erofs", "lmdb-eacces", "oserror-eacces"])
def test_an_index_folder_that_cannot_be_written_says_what_still_works(tmp_path, exc):
    """LMDB's "ix: Read-only file system" (or "Permission denied") on a writable open was "cannot open as an
    LMDB index (...)", exit 4, no advice. (As root, chmod stops no write: the mapping is tested here, a real
    read-only file system below.)"""
    import errno

    import lmdb

    from streamk.errors import ReadOnlyIndexError
    from streamk.index.integrity import open_error

    ix = tmp_path / "ix"
    error = {"lmdb-erofs": lmdb.Error(f"{ix}: {os.strerror(errno.EROFS)}"),
             "lmdb-eacces": lmdb.Error(f"{ix}: {os.strerror(errno.EACCES)}"),
             "oserror-eacces": PermissionError(errno.EACCES, os.strerror(errno.EACCES))}[exc]
    mapped = open_error(ix, error, readonly=False)
    assert isinstance(mapped, ReadOnlyIndexError) and mapped.exit_code == 4
    assert str(mapped).startswith(f"{ix}: the index's folder cannot be written (")
    assert "searches still work" in str(mapped) and f"streamk index backup {ix} COPY" in str(mapped)
    reading = open_error(ix, error, readonly=True)  # LMDB's readers need lock.mdb too (but on a read-only fs)
    assert isinstance(reading, ReadOnlyIndexError) and "lock.mdb" in str(reading)


@pytest.fixture
def read_only_disk(tmp_path, built):
    """A copy of ``built`` on a tmpfs remounted read-only."""
    with tmpfs(tmp_path / "ro", "64m") as disk:
        copy_of(built[0], disk / "ix")
        remount_read_only(disk)
        yield disk / "ix"


def test_an_index_on_a_read_only_file_system_is_searched_and_says_so_when_written(read_only_disk, built):
    from streamk.errors import ReadOnlyIndexError

    ix, V = read_only_disk, built[1]
    with StreamingIndex.open(ix, readonly=True) as idx:
        assert top1(idx, V[[7]], "exact") == ["i00007"]
    with pytest.raises(ReadOnlyIndexError, match="folder cannot be written .*Read-only file system.*searches still"):
        StreamingIndex.open(ix)
    proc = run_python("-m", "streamk.cli", "index", "verify", "--repair", ix, timeout=120)
    assert proc.returncode == 4 and "cannot be written" in proc.stderr and len(proc.stderr.splitlines()) == 1, proc




# ------------------------------------------------------------ failure 4: disk full
def add_batches(idx, V, start, batch=200):
    """Add V[start:] in batches until one fails; (rows added, the error or None)."""
    n = start
    try:
        while n < len(V):
            idx.add_many([{"id": f"d{i:05d}", "vector": v} for i, v in enumerate(V[n:n + batch], n)],
                         batch_size=batch)
            n = min(n + batch, len(V))
    except DiskFullError as exc:
        return n, exc
    return n, None


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs."""
    with tmpfs(tmp_path / "disk", "4m") as disk:
        yield disk


def test_a_full_disk_is_a_disk_full_error_and_a_rerun_completes(small_disk, encoder):
    ballast = small_disk / "ballast"
    ballast.write_bytes(os.urandom(1 << 20))  # room freed later
    V = vectors(3, 40000)
    idx = StreamingIndex.create(small_disk / "ix", encoder, vector_dtype="float32")
    try:
        n, err = add_batches(idx, V, 0)
        assert err is not None, "the disk never filled"
        assert isinstance(err, OSError) and err.exit_code == 6 and err.needed > 0
        assert str(small_disk / "ix") in str(err) and "no space left" in str(err) and "needs about" in str(err)
        assert len(idx) == n  # the failed batch left nothing behind
        assert f"d{n:05d}" not in idx and f"d{n - 1:05d}" in idx
        np.testing.assert_allclose(idx.vector(f"d{n - 1:05d}"), V[n - 1], atol=1e-6)
        ballast.unlink()
        n2, err2 = add_batches(idx, V[:n + 200], n)  # the same batch again, now that there is room
        assert err2 is None and n2 == n + 200 and len(idx) == n + 200
    finally:
        idx.close()
    with StreamingIndex.open(small_disk / "ix", readonly=True) as idx:
        scores, ids = idx.search(V[[0, n - 1, n + 199]], k=1, mode="exact")
        assert ids[:, 0].tolist() == [f"d{0:05d}", f"d{n - 1:05d}", f"d{n + 199:05d}"]


def test_creating_an_index_on_a_full_disk_leaves_nothing(small_disk, encoder, tmp_path):
    (small_disk / "ballast").write_bytes(b"\0" * ((4 << 20) - (300 << 10)))
    with pytest.raises(DiskFullError, match="no space left") as info:
        StreamingIndex.create(small_disk / "new" / "ix", encoder)
    assert info.value.path == str(small_disk) and info.value.needed > 0
    assert sorted(os.listdir(small_disk)) == ["ballast"]
    encoder.save(tmp_path / "encoder.npz")
    proc = run_python("-m", "streamk.cli", "index", "create", small_disk / "cli-ix", "--encoder",
                      tmp_path / "encoder.npz", timeout=120)
    assert proc.returncode == 6 and "no space left" in proc.stderr and "Traceback" not in proc.stderr, proc
    assert sorted(os.listdir(small_disk)) == ["ballast"]


def test_a_map_that_may_not_grow_is_a_disk_full_error(tmp_path, encoder):
    V = vectors(4, 20000)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32", map_size=1 << 20,
                                max_map_size=2 << 20)
    try:
        n, err = add_batches(idx, V, 0)
        assert err is not None and "max_map_size" in str(err) and str(tmp_path / "ix") in str(err)
        assert len(idx) == n and f"d{n:05d}" not in idx
    finally:
        idx.close()
    with StreamingIndex.open(tmp_path / "ix", max_map_size=64 << 20) as idx:  # the limit raised: it completes
        n2, err2 = add_batches(idx, V[:n + 1000], n)
        assert err2 is None and len(idx) == n + 1000
        scores, ids = idx.search(V[[5, n + 999]], k=1, mode="exact")
        assert ids[:, 0].tolist() == ["d00005", f"d{n + 999:05d}"]


FILE_LIMIT = """
import resource, signal, sys
import numpy as np
from helpers.index import make_encoder, vectors
from streamk.errors import DiskFullError
from streamk.index import StreamingIndex
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
idx = StreamingIndex.create(sys.argv[1], make_encoder(), vector_dtype="float32")
resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, resource.RLIM_INFINITY))
V = vectors(5, 20000)
n = 0
try:
    while n < len(V):
        idx.add_many([{"id": f"d{i:05d}", "vector": v} for i, v in enumerate(V[n:n + 200], n)], batch_size=200)
        n += 200
except DiskFullError as exc:
    print(n, len(idx), exc)
    sys.exit(exc.exit_code)
"""


def test_the_file_size_limit_is_a_disk_full_error(tmp_path):
    """Without root: the file size limit (ulimit -f) stops the file as a full disk would."""
    (tmp_path / "child.py").write_text(FILE_LIMIT)
    proc = run_python(tmp_path / "child.py", tmp_path / "ix", timeout=300)
    assert proc.returncode == 6, (proc.stdout, proc.stderr)
    n, count, message = proc.stdout.split(" ", 2)
    assert n == count and "file size limit" in message and "Traceback" not in proc.stderr
    with StreamingIndex.open(tmp_path / "ix") as idx:  # no limit here: the rerun completes
        assert len(idx) == int(n)
        V = vectors(5, 20000)
        n2, err = add_batches(idx, V[:int(n) + 400], int(n))
        assert err is None and len(idx) == int(n) + 400


# ------------------------------------------------------------ failure 3: damage detected, never served
def damage(path, needle, offset=0, nbytes=None, seed=0):
    """Overwrite ``nbytes`` (default: len(needle)) random bytes at ``offset`` from every place
    ``needle`` is found in data.mdb (LMDB keeps older copies of a page too: all are hit).
    Returns the number of places."""
    data_file = path / "data.mdb"
    data = bytearray(data_file.read_bytes())
    rng = np.random.default_rng(seed)
    nbytes = len(needle) if nbytes is None else nbytes
    places = []
    i = data.find(needle)
    while i >= 0:
        places.append(i)
        i = data.find(needle, i + 1)
    assert places, "the bytes to damage are not in the file"
    for i in places:
        data[i + offset:i + offset + nbytes] = rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    data_file.write_bytes(bytes(data))
    return len(places)


def stored(path, name, key):
    with StreamingIndex.open(path, readonly=True) as idx:
        return idx.store.stored_value(name, key)


def flip_byte(idx, name, key, at, mask=0xFF):
    """Damage one byte of a stored value (the owner's test-facing overwrite: no check, no log)."""
    def change(raw):
        raw = bytearray(raw)
        raw[at] ^= mask
        return bytes(raw)
    idx.store.overwrite_value(name, key, change)


def top1(idx, Q, mode):
    return idx.search(Q, k=1, mode=mode)[1][:, 0].tolist()


def test_a_damaged_vector_block_is_named_then_repaired(tmp_path, built):
    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    damage(ix, V[300].astype(np.float32).tobytes(), nbytes=4096)  # rows 300..315 of their block
    with StreamingIndex.open(ix, readonly=True) as idx:
        for mode in ("exact", "pq"):
            with pytest.raises(IndexCorruptError, match="fails its checksum") as info:
                idx.search(V[300], k=5, mode=mode)
            assert 300 in info.value.rows and str(ix) in str(info.value)
        with pytest.raises(IndexCorruptError, match=r"row 300\b"):
            idx.vector("i00300")
    proc = search_in_child(tmp_path, ix, V[300], mode="exact")
    assert proc.returncode == 5, (proc.stdout, proc.stderr)
    report = check_index(ix, progress=False)
    assert not report.ok and any("vector block" in d for d in report.damaged)
    proc = run_python("-m", "streamk.cli", "index", "verify", ix, timeout=120)
    assert proc.returncode == 5 and "DAMAGED" in proc.stdout and "--repair" in proc.stdout, proc

    report = check_index(ix, repair=True, progress=False)
    assert report.ok, report.lines()
    lost = set(report.lost)
    assert "i00300" in lost and len(lost) <= 17 and all(300 <= int(i[1:]) < 317 for i in lost)
    assert check_index(ix, progress=False).ok
    with StreamingIndex.open(ix, readonly=True) as idx:
        assert len(idx) == N_IMAGES - len(lost) and not any(i in idx for i in lost)
        kept = [j for j in range(0, N_IMAGES, 7) if f"i{j:05d}" not in lost]
        for mode in ("exact", "pq"):
            assert top1(idx, V[kept], mode) == [f"i{j:05d}" for j in kept]


def test_a_damaged_code_block_is_named_then_rebuilt_from_the_vectors(tmp_path, built):
    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    with StreamingIndex.open(ix, readonly=True) as idx:
        epoch = idx.store.get_int(b"codec_epoch")
        expected = idx.search(V[:N_IMAGES:5], k=3)[1].tolist()
    value = stored(ix, "code_blocks", epoch_key(epoch, 1))
    damage(ix, value[1000:1064], nbytes=8)
    with StreamingIndex.open(ix, readonly=True) as idx:
        with pytest.raises(IndexCorruptError, match="code block of rows 256..511") as info:
            idx.search(V[3], k=5, mode="pq")
        assert info.value.rows == list(range(256, 512))
    report = check_index(ix, repair=True, progress=False)
    assert any("code block" in d for d in report.damaged) and report.ok and report.lost == []
    with StreamingIndex.open(ix, readonly=True) as idx:
        assert idx.search(V[:N_IMAGES:5], k=3)[1].tolist() == expected


def test_a_damaged_row_code_is_named_then_rebuilt(tmp_path, built):
    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    with StreamingIndex.open(ix, readonly=True) as idx:
        epoch = idx.store.get_int(b"codec_epoch")
    value = stored(ix, "codes", epoch_key(epoch, 1100))
    damage(ix, value, offset=6, nbytes=2)
    with StreamingIndex.open(ix, readonly=True) as idx:
        with pytest.raises(IndexCorruptError, match=r"PQ code of row 1100\b"):
            idx.search(V[3], k=5, mode="pq")
    report = check_index(ix, repair=True, progress=False)
    assert report.ok and report.lost == [] and any("row 1100" in d for d in report.damaged)
    with StreamingIndex.open(ix, readonly=True) as idx:
        assert top1(idx, V[[1100, 3]], "pq") == ["i01100", "i00003"]


def test_a_damaged_encoder_is_named_and_cannot_be_repaired(tmp_path, built):
    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    blob = stored(ix, "meta", b"encoder")
    damage(ix, blob[len(blob) // 2:len(blob) // 2 + 64], nbytes=4)
    with StreamingIndex.open(ix, readonly=True) as idx:
        with pytest.raises(IndexCorruptError, match="encoder fails its checksum"):
            idx.search(np.random.default_rng(0).integers(0, 256, (40, 128)).astype(np.float32), k=3)
        assert top1(idx, V[[9]], "exact") == ["i00009"]  # vector queries do not need it
    report = check_index(ix, repair=True, progress=False)
    assert not report.ok and "the encoder" in report.unrepairable


def test_a_damaged_meta_page_is_named(tmp_path, built):
    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    data = bytearray((ix / "data.mdb").read_bytes())
    data[16:4096] = np.random.default_rng(1).integers(0, 256, 4080, dtype=np.uint8).tobytes()
    (ix / "data.mdb").write_bytes(bytes(data))
    proc = search_in_child(tmp_path, ix, V[7])
    assert proc.returncode == 5 and "meta page" in proc.stdout, (proc.stdout, proc.stderr)
    report = check_index(ix, progress=False)
    assert not report.ok and report.unrepairable


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_damaged_btree_page_is_an_error_or_a_right_answer_never_a_signal(tmp_path, built, seed):
    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    data = bytearray((ix / "data.mdb").read_bytes())
    rng = np.random.default_rng(seed)
    key = f"i{rng.integers(0, N_IMAGES):05d}".encode()
    pages = sorted({i // 4096 for i in range(len(data)) if data.startswith(key, i)})
    for p in pages:  # the leaf pages holding the key (images) or naming it (row_ids), header kept
        data[p * 4096 + 16:(p + 1) * 4096] = rng.integers(0, 256, 4080, dtype=np.uint8).tobytes()
    (ix / "data.mdb").write_bytes(bytes(data))
    row = int(key[1:])
    for mode in ("pq", "exact"):
        proc = search_in_child(tmp_path, ix, V[row], mode=mode)
        assert proc.returncode in (0, 5), (proc.returncode, proc.stdout, proc.stderr)
        if proc.returncode == 0:
            assert proc.stdout.split() == [key.decode()]
        else:
            assert "IndexCorruptError" in proc.stdout
    with StreamingIndex.open(ix, readonly=True) as idx:
        with pytest.raises(IndexCorruptError):
            idx.ids()
        try:
            assert np.allclose(idx.vector(key.decode()), V[row], atol=1e-6)
        except IndexCorruptError as exc:
            assert "damaged" in str(exc)
    report = check_index(ix, progress=False)
    assert not report.ok and any("B-tree" in d for d in report.damaged)


def test_a_damaged_thumbnail_is_named(tmp_path, encoder):
    from streamk.index import encoded_vector

    V = vectors(6, 3)
    with StreamingIndex.create(tmp_path / "ix", encoder) as idx:
        idx.write_encoded([encoded_vector(f"t{i}", V[i], idx.dim)._replace(thumbnail=b"JPEG" * 300 + bytes([i]))
                           for i in range(3)])
        assert idx.thumbnail("t1") == b"JPEG" * 300 + b"\x01"

        flip_byte(idx, "thumbnails", b"t1", 10)
        with pytest.raises(IndexCorruptError, match="thumbnails entry of id 't1'"):
            idx.thumbnail("t1")
    found = check_index(tmp_path / "ix", progress=False)
    assert "  damaged: the thumbnails entry of id 't1' fails its checksum" in found.lines()  # the id as text
    report = check_index(tmp_path / "ix", repair=True, progress=False)
    assert report.ok and report.lost == [] and any("thumbnails" in d for d in report.damaged)
    with StreamingIndex.open(tmp_path / "ix") as idx:
        assert idx.thumbnail("t1") is None and idx.thumbnail("t2") == b"JPEG" * 300 + b"\x02" and len(idx) == 3


def downgrade_to_format_2(path):
    """What streamk 0.2 before checksums wrote: vector blocks without CRCs, codes and blobs
    without their trailers, no crc32c: keys (the test's stand-in for an old index)."""
    import json

    import lmdb

    with StreamingIndex.open(path) as idx:
        s = idx.store
        vs = s.vector_store()
        for name, cut in (("vectors", None), ("code_blocks", 4), ("codes", 4), ("thumbnails", 4), ("metadata", 4),
                          ("images", 4), ("extras", 4)):
            for k, _ in s.stored_items(name):
                s.overwrite_value(name, k, lambda v, cut=cut: v[vs.data_offset:] if cut is None else v[:-cut])
        for key in (b"encoder", b"codec", b"vocabulary"):
            s.overwrite_value("meta", b"crc32c:" + key, lambda v: None)
        s.overwrite_value("meta", b"format", lambda v: json.dumps({"format": "streamk-index", "version": 2}).encode())
    assert lmdb  # (imported for the reader of this helper: LMDB values, nothing else)


def test_a_format_2_index_says_upgrade_and_upgrades_with_checksums(tmp_path, built):
    from streamk.errors import IndexFormatError

    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    with StreamingIndex.open(ix, readonly=True) as idx:
        expected = idx.search(V[::9], k=3)[1].tolist()
    downgrade_to_format_2(ix)
    with pytest.raises(IndexFormatError, match=f"streamk index upgrade {ix}"):
        StreamingIndex.open(ix, readonly=True)
    proc = run_python("-m", "streamk.cli", "index", "upgrade", ix, timeout=120)
    assert proc.returncode == 0 and "format 4" in proc.stdout, proc
    assert check_index(ix, progress=False).ok
    with StreamingIndex.open(ix) as idx:
        assert idx.search(V[::9], k=3)[1].tolist() == expected
        idx.add("late", vector=V[4] + 0.01)
        assert top1(idx, V[[4, 1199]], "exact") == ["i00004", "i01199"]


def test_verify_of_a_clean_and_a_sharded_index(tmp_path, built, encoder):
    path, _ = built
    report = check_index(path, progress=False)
    assert report.ok and report.counts["images"] == report.counts["live_rows"] == N_IMAGES
    assert report.counts["coded_rows"] == N_IMAGES
    V = vectors(7, 60)
    with ShardedIndex.create(tmp_path / "sh", encoder, shards=2) as idx:
        idx.add_many([{"id": f"s{i}", "vector": v} for i, v in enumerate(V)])
    proc = run_python("-m", "streamk.cli", "index", "verify", tmp_path / "sh", timeout=120)
    assert proc.returncode == 0 and proc.stdout.count(": clean;") == 2, proc


def test_an_unreadable_record_says_damaged_not_unknown(tmp_path, built):
    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    with StreamingIndex.open(ix) as idx:
        idx.store.overwrite_value("images", b"i00042", lambda raw: b"\xff{not json")
        for call in (idx.vector, idx.info):
            with pytest.raises(IndexCorruptError, match="record of id 'i00042' is unreadable"):
                call("i00042")
        with pytest.raises(IndexCorruptError):
            idx.remove("i00042")
    report = check_index(ix, repair=True, progress=False)
    assert report.ok and report.lost == ["i00042"], report.lines()
    with StreamingIndex.open(ix, readonly=True) as idx:
        assert "i00042" not in idx and len(idx) == N_IMAGES - 1
        assert top1(idx, V[[41, 43]], "pq") == ["i00041", "i00043"]
        assert idx.search(V[42], k=1, mode="exact")[0].id != "i00042"


def test_damaged_metadata_is_named_and_dropped_by_a_repair(tmp_path, encoder):
    V = vectors(8, 4)
    with StreamingIndex.create(tmp_path / "ix", encoder) as idx:
        idx.index_field("year")
        for i in range(4):
            idx.add(f"m{i}", vector=V[i], metadata={"place": f"city {i}", "year": 2000 + i})
        row = idx.info("m2")["row"]

        flip_byte(idx, "metadata", row.to_bytes(8, "big"), 3, 0x20)
        with pytest.raises(IndexCorruptError, match=f"metadata entry of row {row}\\b"):
            idx.metadata("m2")
        assert idx.metadata("m1") == {"place": "city 1", "year": 2001}
    report = check_index(tmp_path / "ix", repair=True, progress=False)
    assert report.ok and report.lost == [] and any("metadata" in d for d in report.damaged), report.lines()
    with StreamingIndex.open(tmp_path / "ix") as idx:
        assert idx.metadata("m2") == {} and idx.metadata("m3") == {"place": "city 3", "year": 2003}
        assert len(idx) == 4
        # its filter postings went with it: m2's year is no longer known
        assert sorted(h.id for h in idx.search(V[2], k=4, where={"year": {"gte": 2001}})) == ["m1", "m3"]


@pytest.mark.parametrize("damage", ["drop a record", "truncate", "swap two records"])
def test_a_damaged_range_column_is_named_then_rebuilt(tmp_path, encoder, damage):
    """A range column that disagrees with its posting lists (a record lost, a chunk cut,
    records out of order) is named by verify and rebuilt from the posting lists; the
    range filter then selects what the metadata says."""
    V = vectors(9, 40)
    with StreamingIndex.create(tmp_path / "ix", encoder, indexed_fields=["year"]) as idx:
        for i in range(40):
            idx.add(f"y{i}", vector=V[i], metadata={"year": 1990 + i})

        def hurt(raw):
            if damage == "drop a record":
                return raw[:24] + raw[48:]
            if damage == "truncate":
                return raw[:-5]
            return raw[:24] + raw[48:72] + raw[24:48] + raw[72:]
        idx.store.overwrite_value("columns", idx.store.stored_items("columns")[0][0], hurt)
    report = check_index(tmp_path / "ix", progress=False)
    assert not report.ok and any("range column of field 'year' (numbers)" in d for d in report.damaged), report.lines()
    report = check_index(tmp_path / "ix", repair=True, progress=False)
    assert report.ok and report.lost == [] and any("range column" in r for r in report.repaired), report.lines()
    with StreamingIndex.open(tmp_path / "ix") as idx:
        assert sorted(idx.allowed({"year": {"gte": 1990, "lt": 2030}}).rows.tolist()) == list(range(40))


def test_a_write_into_a_damaged_block_is_refused_and_writes_nothing(tmp_path, encoder):
    """A write re-seals the block it changes: over damage it would hide it (a fresh block CRC)."""
    V = vectors(9, 12)
    with StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32") as idx:
        idx.add_many([{"id": f"w{i}", "vector": v} for i, v in enumerate(V[:10])])

        flip_byte(idx, "vectors", (0).to_bytes(8, "big"), -7, 0x01)
        for write in (lambda: idx.add("w10", vector=V[10]), lambda: idx.remove("w3")):
            with pytest.raises(IndexCorruptError, match="vector block of rows 0.."):
                write()
        assert len(idx) == 10 and "w10" not in idx and "w3" in idx
        with pytest.raises(IndexCorruptError):
            idx.search(V[0], k=1, mode="exact")
    report = check_index(tmp_path / "ix", progress=False)
    assert not report.ok and any("vector block" in d for d in report.damaged)


# ------------------------------------------------------------ issue 25 item 4: one random byte in every kind of value
def downgrade_to_format_3(path):
    """What streamk wrote before format 4: image records and extras without their CRC32C."""
    import json

    with StreamingIndex.open(path) as idx:
        for name in ("images", "extras"):
            for k, _ in idx.store.stored_items(name):
                idx.store.overwrite_value(name, k, lambda v: v[:-4])
        idx.store.overwrite_value("meta", b"format",
                                  lambda v: json.dumps({"format": "streamk-index", "version": 3}).encode())


def test_a_format_3_index_says_upgrade_and_upgrades_with_record_checksums(tmp_path, built):
    from streamk.errors import IndexFormatError
    from streamk.index.store import FORMAT_VERSION

    path, V = built
    ix = copy_of(path, tmp_path / "ix")
    with StreamingIndex.open(ix, readonly=True) as idx:
        expected = idx.search(V[::9], k=3)[1].tolist()
        info = idx.info("i00007")
    downgrade_to_format_3(ix)
    with pytest.raises(IndexFormatError, match=f"version 3 .*streamk index upgrade {ix}"):
        StreamingIndex.open(ix, readonly=True)
    proc = run_python("-m", "streamk.cli", "index", "upgrade", ix, timeout=120)
    assert proc.returncode == 0 and f"format {FORMAT_VERSION}" in proc.stdout, proc
    assert check_index(ix, progress=False).ok
    with StreamingIndex.open(ix) as idx:
        assert idx.search(V[::9], k=3)[1].tolist() == expected and idx.info("i00007") == info
        raw = idx.store.stored_value("images", b"i00007")
    assert raw[:-4] == json.dumps(info).encode()  # the same JSON, now followed by its CRC32C


@pytest.fixture(scope="module")
def varied(tmp_path_factory, encoder):
    """An index holding one of every kind of stored value: vectors, sealed code blocks and row
    codes, records, extras (images added as descriptors), thumbnails, metadata with an indexed
    field (postings, a range column), a removed image (dead), content keys, the log."""
    from helpers.index import sift_sets
    from streamk.index import encoded_vector

    path = tmp_path_factory.mktemp("varied") / "ix"
    V = vectors(8, 400)
    with StreamingIndex.create(path, encoder, vector_dtype="float32", block_rows=64) as idx:
        idx.index_field("n")
        idx.add_many([{"id": f"v{i:03d}", "vector": v, "metadata": {"n": i}} for i, v in enumerate(V[:300])],
                     batch_size=100)
        idx.train(nlist=1, M=8, progress=False)
        idx.add_many([{"id": f"v{i:03d}", "vector": v, "metadata": {"n": i}} for i, v in enumerate(V[300:], 300)],
                     batch_size=100)
        for i, d in enumerate(sift_sets(3, 4)):
            idx.add(f"d{i}", descriptors=d)
        idx.write_encoded([encoded_vector(f"t{i}", V[i] + 0.1, idx.dim)._replace(thumbnail=b"JPEG" * 50 + bytes([i]))
                           for i in range(3)])
        idx.remove(["v005", "v150"])
    return path


# the sub-databases an image's damage is found through, and what is damaged: every one written above
FLIPPED = ("images", "extras", "vectors", "row_ids", "hashes", "codes", "code_blocks", "dead", "thumbnails",
           "metadata", "postings", "columns", "meta:codec", "meta:encoder")


def _flip_one(path, name, rng):
    """Flip one random byte of one random value of sub-database ``name`` (for ``dead``, a byte
    of live rows; for ``postings``, a stored row); returns the key."""
    with StreamingIndex.open(path) as idx:
        s = idx.store
        if name.startswith("meta:"):
            key = name[5:].encode()
            name = "meta"
        else:
            items = s.stored_items(name)
            key = items[int(rng.integers(len(items)))][0]
        raw = s.stored_value(name, key)
        if name == "postings":  # dupsort: the value is one of the key's rows; replace that one
            def swap(txn):
                old = txn.get(key, db=s.postings_db)
                new = bytearray(old)
                new[7] ^= 0x01  # another row (the same B-tree position class; a wrong row posted)
                txn.delete(key, old, db=s.postings_db)
                txn.put(key, bytes(new), db=s.postings_db, dupdata=True)
            s.write(swap)
            return key
        at = int(rng.integers(min(len(raw), 8) if name == "dead" else len(raw)))
        mask = int(rng.integers(1, 256))
        idx.store.overwrite_value(name, key, lambda v: v[:at] + bytes([v[at] ^ mask]) + v[at + 1:])
    return key


@pytest.mark.parametrize("name", FLIPPED)
def test_one_random_byte_in_any_stored_value_is_named_and_repaired(tmp_path, varied, name):
    rng = np.random.default_rng(list(FLIPPED).index(name))
    ix = copy_of(varied, tmp_path / "ix")
    before = check_index(ix, progress=False)
    assert before.ok, before.lines()
    key = _flip_one(ix, name, rng)
    report = check_index(ix, progress=False)
    assert not report.ok, (name, key)
    repaired = check_index(ix, repair=True, progress=False)
    if name == "meta:encoder":  # the one thing only a copy restores
        assert not repaired.ok and "the encoder" in repaired.unrepairable
        return
    assert repaired.ok, repaired.lines()
    after = check_index(ix, progress=False)
    assert after.ok, after.lines()
    with StreamingIndex.open(ix, readonly=True) as idx:
        ids = set(idx.ids())
        assert len(idx) == len(ids) == after.counts["live_rows"]
    if name == "images":  # the damaged record's image is lost, and listed
        assert report.damaged and key.decode() in " ".join(report.damaged)
        assert repaired.lost == [key.decode()] and key.decode() not in ids
    else:
        assert repaired.lost == [] or name == "vectors", repaired.lost
        assert len(ids) + len(repaired.lost) == before.counts["images"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))

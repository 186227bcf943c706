"""Damaged and truncated indexes (issue 17, failures 2 and 3): a named error or a verify
report, never a signal, never a silent wrong answer; a full disk (failure 4) is a
DiskFullError with nothing half-written."""

import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from helpers.index import make_encoder, vectors
from helpers.processes import run_python
from streamk.errors import DiskFullError, IndexCorruptError
from streamk.index import ShardedIndex, StreamingIndex
from streamk.index.integrity import read_lmdb_meta

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
    assert ("truncated" in proc.stdout or "meta page" in proc.stdout) and "verify --repair" in proc.stdout
    with pytest.raises(IndexCorruptError, match="damaged"):
        StreamingIndex.open(ix, readonly=True)


def test_the_cli_says_truncated_in_one_line(tmp_path, built):
    path, _ = built
    ix = copy_of(path, tmp_path / "ix")
    os.truncate(ix / "data.mdb", (ix / "data.mdb").stat().st_size // 2)
    proc = run_python("-m", "streamk.cli", "index", "info", ix, timeout=120)
    assert proc.returncode > 0 and proc.returncode != 128 + signal.SIGBUS, proc
    assert "truncated" in proc.stderr and "Traceback" not in proc.stderr


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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


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
    """A 4 MiB tmpfs (root only: skipped with the reason otherwise), unmounted after."""
    disk = tmp_path / "disk"
    disk.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.strip() or proc.returncode}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


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
    assert proc.returncode != 0 and "no space left" in proc.stderr and "Traceback" not in proc.stderr, proc
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

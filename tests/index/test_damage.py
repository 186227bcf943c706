"""Damaged and truncated indexes (issue 17, failures 2 and 3): a named error or a verify
report, never a signal, never a silent wrong answer; a full disk (failure 4) is a
DiskFullError with nothing half-written."""

import os
import shutil
import signal
import sys

import numpy as np
import pytest

from helpers.index import make_encoder, vectors
from helpers.processes import run_python
from streamk.errors import IndexCorruptError
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

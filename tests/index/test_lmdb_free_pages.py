"""LMDB can leave a valid data.mdb shorter than (last page + 1) x page size: the last
transaction's loose pages (allocated and freed in it) are never written. The open check
must accept such a file (every missing page is on the free list) and still refuse one that
misses a page in use. The files here are LMDB's own, made by random transactions; the
reference for "free" is LMDB itself: overwriting every page the reader calls free changes
no value LMDB reads back."""

import os

import lmdb
import numpy as np
import pytest

from streamk.errors import IndexCorruptError
from streamk.index.integrity import _lmdb_meta, check_lmdb_file
from streamk.index.lmdb_pages import free_db_root, free_pages


def short_files(root, n_txns=150, seed=0):
    """Yield (path, {key: value}) after each transaction that left data.mdb shorter than its
    header's last page: values of up to 90 KB (overflow pages) put, replaced and deleted
    within one transaction."""
    rng = np.random.default_rng(seed)
    model = {}
    env = lmdb.open(str(root), map_size=1 << 30)
    try:
        for _ in range(n_txns):
            with env.begin(write=True) as txn:
                for _ in range(int(rng.integers(1, 40))):
                    key = int(rng.integers(0, 150)).to_bytes(4, "big")
                    r = rng.random()
                    if r >= 0.3:
                        for _ in range(1 + (r < 0.6)):
                            value = rng.bytes(int(rng.integers(10, 90_000)))
                            txn.put(key, value)
                            model[key] = value
                    if r < 0.5:
                        txn.delete(key)
                        model.pop(key, None)
            need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
            if os.path.getsize(root / "data.mdb") < need:
                yield dict(model)
    finally:
        env.close()


def free_list(path):
    data_file = path / "data.mdb"
    psize, last_pg, _, free_db = _lmdb_meta(data_file)
    with open(data_file, "rb") as f:
        return psize, last_pg, free_pages(f, psize, free_db_root(free_db), data_file.stat().st_size // psize, 10**6)


def read_all(path):
    env = lmdb.open(str(path), readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return {bytes(k): bytes(v) for k, v in txn.cursor()}
    finally:
        env.close()


@pytest.fixture(scope="module")
def short_copies(tmp_path_factory):
    """Copies of data.mdb taken at each short moment (the first 6), with LMDB's contents then."""
    root = tmp_path_factory.mktemp("lmdb") / "env"
    root.mkdir()
    copies = []
    for i, model in enumerate(short_files(root)):
        dst = root.parent / f"copy{i}"
        dst.mkdir()
        (dst / "data.mdb").write_bytes((root / "data.mdb").read_bytes())
        copies.append((dst, model))
        if len(copies) == 6:
            break
    assert len(copies) == 6, "LMDB left no short file in 150 transactions: the premise of these tests"
    return copies


def test_lmdb_leaves_short_files_and_the_check_accepts_them(short_copies):
    for path, model in short_copies:
        psize, last_pg = check_lmdb_file(path)
        assert (path / "data.mdb").stat().st_size < (last_pg + 1) * psize
        assert read_all(path) == model


def test_the_pages_called_free_hold_nothing_lmdb_reads(short_copies, tmp_path):
    """Overwrite every free page inside the file with noise: LMDB reads back the same values."""
    rng = np.random.default_rng(1)
    for i, (path, model) in enumerate(short_copies):
        psize, last_pg, free = free_list(path)
        file_pages = (path / "data.mdb").stat().st_size // psize
        assert set(range(file_pages, last_pg + 1)) <= free  # what the check relies on
        noisy = tmp_path / f"noisy{i}"
        noisy.mkdir()
        data = bytearray((path / "data.mdb").read_bytes())
        inside = [p for p in free if p < file_pages]
        for p in inside:
            data[p * psize:(p + 1) * psize] = rng.bytes(psize)
        (noisy / "data.mdb").write_bytes(bytes(data))
        assert read_all(noisy) == model


def test_a_cut_into_pages_in_use_is_still_refused(short_copies, tmp_path):
    cut = 0
    for i, (path, _) in enumerate(short_copies):
        psize, _, free = free_list(path)
        file_pages = (path / "data.mdb").stat().st_size // psize
        used = [p for p in range(2, file_pages) if p not in free]
        for keep in (used[-1], used[len(used) // 2]):  # the last page in use, and half the file
            dst = tmp_path / f"cut{i}-{keep}"
            dst.mkdir()
            (dst / "data.mdb").write_bytes((path / "data.mdb").read_bytes()[:keep * psize])
            with pytest.raises(IndexCorruptError, match="truncated"):
                check_lmdb_file(dst)
            cut += 1
    assert cut == 2 * len(short_copies)

"""The list-ordered runs of the sealed codes (streamk.index.blocks), as a reader reads them:
only the lists a search probes, each list's bytes checked when read; the answers those of
a reader that reads every code block (an index written before runs), and the entries those
the codec gives the stored vectors, after adds, removals, updates, retraining and reopening;
an index without runs opens as before and `upgrade` adds them."""

import sys

import numpy as np
import pytest

from helpers.index import make_encoder, vectors
from streamk.errors import IndexCorruptError, IndexFormatError
from streamk.index import StreamingIndex, upgrade
from streamk.index.reader import SearchView
from streamk.index.store import epoch_key

B = 16  # rows per sealed block: a run (16 blocks) every 256 rows
RUN_ROWS = 16 * B
QUERIES = vectors(777, 6)


@pytest.fixture(scope="module")
def encoder():
    return make_encoder()


def build(path, encoder, n=3 * RUN_ROWS + 40, nlist=8, M=8):
    idx = StreamingIndex.create(path, encoder, vector_dtype="float32", block_rows=B)
    idx.add_many([{"id": f"a{i}", "vector": v} for i, v in enumerate(vectors(1, 300))], batch_size=50)
    idx.train(nlist=nlist, M=M, seed=0, progress=False)
    idx.add_many([{"id": f"b{i}", "vector": v} for i, v in enumerate(vectors(2, n - 300))], batch_size=64)
    return idx


def fresh_view(idx, txn, runs=True):
    """A view loaded from scratch; runs=False: as a reader of an index without runs."""
    view = SearchView(idx.store, idx.dim, idx.vector_dtype)
    if not runs:
        import streamk.index.reader as reader
        kept, reader.run_directories = reader.run_directories, lambda *args: {}
        try:
            view.refresh(txn)
        finally:
            reader.run_directories = kept
    else:
        view.refresh(txn)
    return view


def entries(view):
    """{row: (list, code bytes)} of the live entries of a view's lists."""
    L, out = view.lists, {}
    for lst in range(L.nlist):
        for p in range(L.start[lst], L.start[lst] + L.size[lst]):
            r = int(L.rows[p])
            if view.dead[r] == 0:
                assert r not in out, f"row {r} twice"
                out[r] = (lst, L.codes[p].tobytes())
    return out


def expected_entries(idx):
    """The same, computed independently: the codec applied to every live stored vector."""
    codec = idx.codec()
    rows = np.array([idx.info(i)["row"] for i in idx.ids()], np.int64)
    V = np.stack([idx.vector(i) for i in idx.ids()])
    lists, codes = codec.encode(V)
    return {int(r): (int(lst), c.tobytes()) for r, lst, c in zip(rows, lists, codes)}


def assert_lazy_equals_full(idx, nprobes=(1, 3, 8)):
    with idx.store.read(buffers=True) as txn:
        lazy, full = fresh_view(idx, txn), fresh_view(idx, txn, runs=False)
        assert lazy.runs, "no run was written"
        assert full.lists.deferred is None
        for nprobe in nprobes:  # read list by list as probed, against every code read at the load
            a = lazy.search(txn, QUERIES, 12, nprobe=nprobe, rerank=0)
            b = full.search(txn, QUERIES, 12, nprobe=nprobe, rerank=0)
            np.testing.assert_array_equal(a[1], b[1])
            np.testing.assert_array_equal(a[0], b[0])
        lazy.read_all_lists(txn)
        assert lazy.lists.deferred is None
        assert entries(lazy) == entries(full) == expected_entries(idx)


def test_a_reader_reads_only_the_lists_it_probes(tmp_path, encoder):
    with build(tmp_path / "ix", encoder) as idx, idx.store.read(buffers=True) as txn:
        view = fresh_view(idx, txn)
        assert sorted(view.runs) == [0, 16, 32]
        assert view.lists.deferred.all() and view.lists.n_entries < RUN_ROWS  # the tail only
        view.search(txn, QUERIES[:1], 5, nprobe=2, rerank=0)
        assert (~view.lists.deferred).sum() == 2
        read = view.lists.n_entries
        view.search(txn, QUERIES[:1], 5, nprobe=2, rerank=0)  # the same lists: nothing read again
        assert view.lists.n_entries == read


def test_runs_answer_as_every_block_after_changes_and_reopening(tmp_path, encoder):
    path = tmp_path / "ix"
    idx = build(path, encoder)
    assert_lazy_equals_full(idx)
    idx.remove([f"b{i}" for i in range(0, 500, 3)])  # rows inside runs
    idx.update("b10", vector=vectors(5, 1)[0])
    idx.update("a7", vector=vectors(6, 1)[0])
    idx.add_many([{"id": f"c{i}", "vector": v} for i, v in enumerate(vectors(3, RUN_ROWS + 20))],
                 batch_size=40)  # one more run
    assert_lazy_equals_full(idx)
    with idx.store.read(buffers=True) as txn:  # a long-lived view that kept up, then read everything
        idx.view.refresh(txn)
        idx.view.read_all_lists(txn)
        assert entries(idx.view) == expected_entries(idx)
    idx.close()
    with StreamingIndex.open(path) as idx:
        assert_lazy_equals_full(idx)
        idx.train(nlist=4, M=8, seed=1, progress=False)  # a new epoch: its own runs, the old ones gone
        epoch = idx.store.get_int(b"codec_epoch")
        keys = [k for k, _ in idx.store.stored_items("code_runs")]
        assert keys and all(k[:4] == epoch_key(epoch, 0)[:4] for k in keys)
        assert_lazy_equals_full(idx)


def test_a_long_lived_reader_keeps_up_with_unread_lists(tmp_path, encoder):
    """Changes to lists the reader has not read yet: appended, and their removed rows hidden."""
    with build(tmp_path / "ix", encoder) as idx:
        with idx.store.read(buffers=True) as txn:
            idx.view.refresh(txn)  # the view as of now: every run's lists deferred
            assert idx.view.lists.deferred is not None
        idx.remove([f"b{i}" for i in range(1, 300, 4)])
        idx.add_many([{"id": f"c{i}", "vector": v} for i, v in enumerate(vectors(4, 30))])
        with idx.store.read(buffers=True) as txn:
            idx.view.refresh(txn)
            full = fresh_view(idx, txn, runs=False)
            for nprobe in (1, 8):
                a = idx.view.search(txn, QUERIES, 9, nprobe=nprobe, rerank=0)
                b = full.search(txn, QUERIES, 9, nprobe=nprobe, rerank=0)
                np.testing.assert_array_equal(a[1], b[1])
            assert entries(idx.view) == entries(full) == expected_entries(idx)


def _list_bytes(idx, first_block, lst):
    """(key, offset of list ``lst``'s entries in the run's value, their length)."""
    with idx.store.read(buffers=True) as txn:
        view = fresh_view(idx, txn)
        d, M = view.runs[first_block], idx.codec().M
        a, b = int(d.starts[lst]), int(d.starts[lst + 1])
        return epoch_key(view.epoch, first_block), d.entries_at + a * (4 + M), (b - a) * (4 + M)


def test_a_damaged_list_is_named_when_a_search_reads_it(tmp_path, encoder):
    path = tmp_path / "ix"
    with build(path, encoder, nlist=4) as idx:
        coarse = idx.codec().centroids_ @ QUERIES[0]
        nearest, farthest = int(np.argmax(coarse)), int(np.argmin(coarse))
        assert nearest != farthest
        key, at, n = _list_bytes(idx, 16, farthest)
        assert n > 0
        last = at + n - 1  # the last code byte of the farthest list in the second run
        idx.store.overwrite_value("code_runs", key, lambda v: v[:last] + bytes([v[last] ^ 0x5A]) + v[last + 1:])
    with StreamingIndex.open(path, readonly=True) as idx, idx.store.read(buffers=True) as txn:
        view = fresh_view(idx, txn)
        full = fresh_view(idx, txn, runs=False)  # the blocks are intact
        a = view.search(txn, QUERIES[:1], 3, nprobe=1, rerank=0)  # the damaged list is not read
        np.testing.assert_array_equal(a[1], full.search(txn, QUERIES[:1], 3, nprobe=1, rerank=0)[1])
        with pytest.raises(IndexCorruptError, match=f"list {farthest} fails its checksum") as info:
            view.search(txn, QUERIES[:1], 3, nprobe=4, rerank=0)
        assert info.value.rows == list(range(16 * B, 32 * B))
        with pytest.raises(IndexCorruptError, match=f"list {farthest} fails its checksum"):
            idx.search(QUERIES[:1], k=3, nprobe=4, rerank=0)


def test_a_damaged_run_header_is_named_at_the_load(tmp_path, encoder):
    path = tmp_path / "ix"
    with build(path, encoder) as idx:
        key = epoch_key(idx.store.get_int(b"codec_epoch"), 0)
        idx.store.overwrite_value("code_runs", key, lambda v: v[:20] + bytes([v[20] ^ 1]) + v[21:])
    with StreamingIndex.open(path, readonly=True) as idx:
        with pytest.raises(IndexCorruptError, match="header fails its checksum"):
            idx.search(QUERIES[:1], k=3, mode="pq")


def test_an_index_without_runs_opens_and_upgrade_adds_them(tmp_path, encoder):
    """An index written before runs (its runs removed here) reads every block, as before;
    `upgrade` writes its runs, and a second one says there is nothing to do."""
    path = tmp_path / "ix"
    n = 3 * RUN_ROWS + 40
    with build(path, encoder, n=n) as idx:
        expected = idx.search(QUERIES, k=8, nprobe=3, rerank=0)[1].tolist()
        for key, _ in idx.store.stored_items("code_runs"):
            idx.store.overwrite_value("code_runs", key, lambda v: None)
    with StreamingIndex.open(path, readonly=True) as idx:
        assert idx.search(QUERIES, k=8, nprobe=3, rerank=0)[1].tolist() == expected
        assert idx.view.runs == {} and idx.view.lists.deferred is None
    assert upgrade(path, progress=False) == n
    with StreamingIndex.open(path) as idx:
        assert_lazy_equals_full(idx)
        assert idx.search(QUERIES, k=8, nprobe=3, rerank=0)[1].tolist() == expected
    with pytest.raises(IndexFormatError, match="already"):
        upgrade(path, progress=False)


def test_verify_names_a_damaged_run_and_repair_makes_it_again(tmp_path, encoder):
    from streamk.index import check_index

    path = tmp_path / "ix"
    with build(path, encoder) as idx:
        key, at, n = _list_bytes(idx, 0, 1)
        idx.store.overwrite_value("code_runs", key, lambda v: v[:at] + bytes([v[at] ^ 0x10]) + v[at + 1:])
    report = check_index(path, progress=False)
    assert not report.ok and any("run(s) of codes" in d for d in report.damaged), report.lines()
    repaired = check_index(path, repair=True, progress=False)
    assert repaired.ok and repaired.lost == [], repaired.lines()
    assert check_index(path, progress=False).ok
    with StreamingIndex.open(path) as idx:
        assert_lazy_equals_full(idx)


def _recorded_advice(monkeypatch):
    """[(address, length, advice)] of every madvise lmdb_pages asks for (a recorder: nothing
    is asked of the kernel)."""
    import streamk.index.lmdb_pages as pages

    asked = []
    monkeypatch.setattr(pages, "_MADVISE", lambda at, n, advice: asked.append((at, n, advice)) or 0)
    return asked


def _covered(asked, lo, hi):
    """Whether addresses lo:hi lie inside the spans asked for."""
    reach = lo
    for a, b in sorted((at, at + n) for at, n, _ in asked):
        if a <= reach < b:
            reach = max(reach, b)
    return reach >= hi


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/maps: Linux")
def test_the_codec_and_the_run_headers_are_asked_for_at_once_and_nothing_else(tmp_path, encoder, monkeypatch):
    """Before a full load reads the codec (py-lmdb reads a value page by page) and the runs'
    headers, the reads of their pages are asked for (MADV_WILLNEED), found by walking the
    B-trees in the map; the spans are checked against the addresses py-lmdb gives for those
    values, and reach no further."""
    with build(tmp_path / "ix", encoder, M=64) as idx, idx.store.read(buffers=True) as txn:
        asked = _recorded_advice(monkeypatch)
        view = fresh_view(idx, txn)
        assert asked and all(advice == 3 for _, _, advice in asked)  # MADV_WILLNEED
        codec = txn.get(b"codec", db=idx.store.meta_db)
        at, n = np.frombuffer(codec, np.uint8).ctypes.data, len(codec)
        assert n > 4096 and _covered(asked, at, at + n)
        nlist = idx.codec().nlist
        heads = [(np.frombuffer(v, np.uint8).ctypes.data, (2 * nlist + 4) * 4) for v in
                 (txn.get(epoch_key(view.epoch, first), db=idx.store.code_runs_db) for first in view.runs)]
        for h, m in heads:
            assert _covered(asked, h, h + m)
        for a, m, _ in asked:  # each span lies in the codec or in a run's header (from its page)
            assert any(b - b % 4096 <= a and a + m <= b + k for b, k in [(at, n)] + heads), (a, m)


def _resident_pages(view):
    """(pages in the page cache, pages) of a view of the map (mincore)."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    at = np.frombuffer(view, np.uint8).ctypes.data
    lo = at - at % 4096
    n = (at + len(view) - lo + 4095) // 4096
    pages = (ctypes.c_ubyte * n)()
    assert libc.mincore(ctypes.c_void_p(lo), n * 4096, pages) == 0
    return sum(p & 1 for p in pages), n


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="posix_fadvise, mincore, /proc/self/maps: Linux")
def test_a_first_search_reads_the_runs_headers_and_probed_lists_only(tmp_path, encoder):
    """The runs are read in place in the map (not through py-lmdb, which reads every page of a
    value): with the index dropped from the page cache, a first search leaves in it a part
    of each run (its header's and the probed list's pages), and its answer is the one of a
    reader of every code block."""
    import os

    path = tmp_path / "ix"
    build(path, encoder, nlist=32, M=64).close()  # runs of 17 KB: 5 pages, 32 lists
    with StreamingIndex.open(path, readonly=True) as idx, idx.store.read(buffers=True) as txn:
        fd = os.open(path / "data.mdb", os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        view = fresh_view(idx, txn)
        got = view.search(txn, QUERIES[:1], 5, nprobe=1, rerank=0)
        runs = idx.store.values_in_map(txn, "code_runs", b"")
        assert len(runs) == 3
        for value in runs.values():
            resident, pages = _resident_pages(value)
            assert 1 <= resident < pages, (resident, pages)
        full = fresh_view(idx, txn, runs=False)
        np.testing.assert_array_equal(got[1], full.search(txn, QUERIES[:1], 5, nprobe=1, rerank=0)[1])


def test_the_walk_of_a_damaged_tree_stops(tmp_path, encoder):
    """big_values stops at a page that is not the tree's (its header names another page, or
    it lies past the file) and returns what it found: advice only, never an error."""
    from streamk.index.lmdb_pages import big_values, free_db_root, map_base

    with build(tmp_path / "ix", encoder, M=64) as idx, idx.store.read(buffers=True) as txn:
        path = idx.store.path / "data.mdb"
        base, size = map_base(path), path.stat().st_size
        root = free_db_root(bytes(txn.get(b"code_runs")))
        found = big_values(base, size, 4096, root)
        assert len(found) == len(fresh_view(idx, txn).runs)
        assert big_values(base, size, 4096, size // 4096 + 5) == {}  # past the file
        assert big_values(base, size, 4096, root, lambda key: False) == {}
        runs = sorted(found.values())
        first_overflow = (runs[0][0] - base) // 4096  # an overflow page: not a tree page
        assert big_values(base, size, 4096, first_overflow) == {}


def test_readahead_is_advice_only(tmp_path, encoder, monkeypatch):
    """The answers with readahead asked for, and without any (no madvise), are the same."""
    with build(tmp_path / "ix", encoder) as idx, idx.store.read(buffers=True) as txn:
        with_advice = fresh_view(idx, txn).search(txn, QUERIES, 7, nprobe=3, rerank=20)
        import streamk.index.lmdb_pages as pages
        monkeypatch.setattr(pages, "_MADVISE", None)
        without = fresh_view(idx, txn).search(txn, QUERIES, 7, nprobe=3, rerank=20)
        np.testing.assert_array_equal(with_advice[1], without[1])
        np.testing.assert_array_equal(with_advice[0], without[0])


def test_a_damaged_codec_is_named_when_read(tmp_path, encoder):
    """The codec is read with readahead, and still checked whole against its CRC32C."""
    path = tmp_path / "ix"
    with build(path, encoder) as idx:
        idx.store.overwrite_value("meta", b"codec", lambda v: v[:-9] + bytes([v[-9] ^ 0x01]) + v[-8:])
    with StreamingIndex.open(path, readonly=True) as idx:
        with pytest.raises(IndexCorruptError, match="codec fails its checksum"):
            idx.search(QUERIES[:1], k=3, mode="pq")


def test_a_first_reranking_reads_its_blocks_side_by_side_and_leaves_no_thread(tmp_path, encoder, monkeypatch):
    """The first vectors a view reads after a full load have their blocks' pages brought in
    by threads (each in a transaction of its own), all ended before the read returns; the
    vectors are those read without them, and those the index stores."""
    import threading

    import streamk.index.vector_store as vector_store
    from streamk.index.vector_store import VectorStore

    with build(tmp_path / "ix", encoder, n=1100) as idx, idx.store.read(buffers=True) as txn:
        view = fresh_view(idx, txn)
        assert 1090 // view.vectors.block_rows >= 4
        monkeypatch.setattr(vector_store, "WARM_THREADS", 2)  # a small index: few blocks
        warmed = []
        kept = VectorStore.warm_blocks
        monkeypatch.setattr(VectorStore, "warm_blocks", lambda self, blocks: warmed.append(len(blocks)) or
                            kept(self, blocks))
        rows = np.arange(0, 1090, 7)
        before = threading.active_count()
        first = view.vectors_of(txn, rows)
        assert warmed and threading.active_count() == before
        again = view.vectors_of(txn, rows)  # the pages are cached: read as always
        assert len(warmed) == 1
        np.testing.assert_array_equal(first, again)
        ids = idx.ids()
        stored = {idx.info(i)["row"]: idx.vector(i) for i in ids}
        np.testing.assert_array_equal(first, np.stack([stored[int(r)] for r in rows]))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/maps: Linux")
def test_after_the_first_answer_the_runs_are_asked_for_whole_once(tmp_path, encoder, monkeypatch):
    """The first lists read ask for their own pages; the next read asks for every run whole
    (read by the kernel while searches go on); later reads ask for nothing. The answers are
    those of a reader of every code block."""
    with build(tmp_path / "ix", encoder, nlist=16, M=64) as idx, idx.store.read(buffers=True) as txn:
        view = fresh_view(idx, txn)
        full = fresh_view(idx, txn, runs=False)
        runs = idx.store.values_in_map(txn, "code_runs", b"")
        whole = [(np.frombuffer(v, np.uint8).ctypes.data, len(v)) for v in runs.values()]
        asked = _recorded_advice(monkeypatch)
        probes = np.argsort(-(idx.codec().centroids_ @ QUERIES.T), axis=0)  # lists by closeness, per query
        rounds = []
        for q in range(3):  # each search probes 2 lists no earlier one did
            Q = QUERIES[q:q + 1]
            assert view.lists.deferred[probes[:2, q]].all()
            np.testing.assert_array_equal(view.search(txn, Q, 4, nprobe=2, rerank=0)[1],
                                          full.search(txn, Q, 4, nprobe=2, rerank=0)[1])
            rounds.append(list(asked))
            asked.clear()
        first, second, third = rounds
        assert first and not any(_covered(first, at, at + n) for at, n in whole)  # parts of runs only
        assert all(_covered(second, at, at + n) for at, n in whole)
        assert third == []


def test_without_a_map_to_walk_the_runs_come_from_py_lmdb(tmp_path, encoder, monkeypatch):
    """Where the map cannot be walked (no /proc/self/maps: not Linux), the runs are py-lmdb's
    values, and the answers and entries are the same."""
    import streamk.index.store as store

    monkeypatch.setattr(store, "map_base", lambda path: None)
    with build(tmp_path / "ix", encoder) as idx:
        with idx.store.read(buffers=True) as txn:
            assert idx.store.values_in_map(txn, "code_runs", b"") is None
        idx.remove([f"b{i}" for i in range(0, 400, 5)])
        assert_lazy_equals_full(idx)

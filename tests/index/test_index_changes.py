"""A reader that keeps up with changes incrementally holds exactly what a fresh full
load holds, in this process and in another, after any sequence of add / update /
remove / (re)train; and a writer killed mid-batch loses nothing it committed."""

import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import settings, strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule  # noqa: E402

from helpers.index import DIM, make_encoder, vectors  # noqa: E402,F401
from helpers.processes import kill_and_collect, run_python, start_python  # noqa: E402
from streamk import Encoder  # noqa: E402
from streamk.index import StreamingIndex  # noqa: E402
from streamk.index.reader import SearchView  # noqa: E402

QUERIES = vectors(12345, 5)


def view_entries(view):
    """(rows, lists, codes) of the live entries of a view's lists, sorted by row."""
    L = view.lists
    pos = np.concatenate([np.arange(s, s + n) for s, n in zip(L.start, L.size)])
    lists = np.repeat(np.arange(L.nlist), L.size)
    rows = L.rows[pos]
    live = view.dead[rows] == 0
    order = np.argsort(rows[live])
    return rows[live][order], lists[live][order], L.codes[pos][live][order]


def view_digest(view):
    """sha256 of the live (row, list, code) entries, sorted by row (None: no codes)."""
    if view.lists is None:
        return None
    h = hashlib.sha256()
    for a in view_entries(view):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def search_digest(view, txn):
    """The ids and scores a view finds for QUERIES, exact and by codes (no re-ranking)."""
    out = []
    for mode in ("exact", "pq"):
        try:
            s, rows = view.search(txn, QUERIES, 7, mode=mode, rerank=0)
        except Exception as exc:  # no codec yet
            out.append(type(exc).__name__)
            continue
        out.append([list(r) for r in view.ids_of(txn, rows)])
        out.append(np.round(s.astype(np.float64), 5).tolist())
    return json.dumps(out)


def state(idx):
    """(view digest, search digest) of idx's own (incremental) view, brought up to date:
    searched first (with the lists its searches have not read yet still unread), then with
    every list read."""
    with idx.store.read(buffers=True) as txn:
        idx.view.refresh(txn)
        searches = search_digest(idx.view, txn)
        idx.view.read_all_lists(txn)
        return view_digest(idx.view), searches


def fresh_state(idx):
    """The same of a new view loaded from scratch from idx's store (LMDB allows one
    environment per path and process, so a fresh reader here shares idx's)."""
    view = SearchView(idx.store, idx.dim, idx.vector_dtype)
    with idx.store.read(buffers=True) as txn:
        view.refresh(txn)
        searches = search_digest(view, txn)
        view.read_all_lists(txn)
        return view_digest(view), searches


OTHER_READER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from test_index_changes import state
    from streamk.index import StreamingIndex

    idx = StreamingIndex.open(sys.argv[1], readonly=True)
    for line in sys.stdin:
        print(*state(idx), sep="\\t", flush=True)
""")


class IndexChanges(RuleBasedStateMachine):
    """Random adds, updates, removals and trainings; after each, the long-lived reader
    (the writer's own view) and, at some steps, the one of another process equal a
    fresh full load."""

    def __init__(self):
        super().__init__()
        import tempfile
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "ix")
        self.writer = StreamingIndex.create(self.path, ENCODER, vector_dtype="float32", block_rows=16)
        self.live = []
        self.next_id = 0
        self.seed = 0
        self.other = None

    @initialize(n=st.integers(260, 320))
    def start(self, n):
        self._add(n)

    def _add(self, n):
        self.seed += 1
        V = vectors(self.seed, n)
        ids = [f"i{self.next_id + j}" for j in range(n)]
        self.next_id += n
        res = self.writer.add_many([{"id": i, "vector": v} for i, v in zip(ids, V)], batch_size=7)
        assert [r.status for r in res] == ["added"] * n
        self.live += ids

    @rule(n=st.integers(1, 40))
    def add(self, n):
        self._add(n)

    @precondition(lambda self: len(self.live) > 280)
    @rule(data=st.data())
    def remove(self, data):
        k = data.draw(st.integers(1, min(30, len(self.live) - 270)))
        gone = data.draw(st.lists(st.sampled_from(self.live), min_size=k, max_size=k, unique=True))
        assert self.writer.remove(gone) == len(gone)
        self.live = [i for i in self.live if i not in set(gone)]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def update(self, data):
        i = data.draw(st.sampled_from(self.live))
        self.seed += 1
        self.writer.update(i, vector=vectors(self.seed, 1)[0])

    @precondition(lambda self: len(self.live) >= 256)
    @rule(nlist=st.sampled_from([1, 2, 4]), M=st.sampled_from([4, 8]))
    def train(self, nlist, M):
        self.writer.train(nlist=nlist, M=M, seed=self.seed, progress=False)

    @rule()
    def check_other_process(self):
        if self.other is None:
            self.other = start_python("-c", OTHER_READER, self.path, os.path.dirname(os.path.abspath(__file__)),
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.other.stdin.write("check\n")
        self.other.stdin.flush()
        line = self.other.stdout.readline().rstrip("\n")
        assert line, "the other reader died"
        digest, searches = line.split("\t")
        fresh_view, fresh_searches = fresh_state(self.writer)
        assert digest == str(fresh_view)
        assert searches == fresh_searches

    @invariant()
    def incremental_equals_full_load(self):
        assert state(self.writer) == fresh_state(self.writer)
        assert len(self.writer) == len(self.live)

    def teardown(self):
        if self.other is not None:
            self.other.stdin.close()
            self.other.wait(timeout=60)
        self.writer.close()
        self.tmp.cleanup()


ENCODER = make_encoder()
IndexChanges.TestCase.settings = settings(max_examples=8, stateful_step_count=14, deadline=None)
test_index_changes = IndexChanges.TestCase


def test_a_reader_further_behind_than_the_log_reloads(tmp_path, monkeypatch):
    import streamk.index.store as store_module

    monkeypatch.setattr(store_module, "LOG_KEEP", 8)
    monkeypatch.setattr(store_module, "LOG_TRIM_EVERY", 4)
    V = vectors(1, 300)
    with StreamingIndex.create(tmp_path / "ix", ENCODER, vector_dtype="float32", block_rows=16) as w:
        w.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V[:260])])
        w.train(nlist=2, M=4)
        w.refresh()
        w.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V[260:], 260)])  # 40 > LOG_KEEP
        w.remove(["v3"])
        assert w.refresh() == w.store.get_int(b"next_row")  # a full load
        assert state(w) == fresh_state(w)
        w.add("late", vector=vectors(2, 1)[0])
        assert w.refresh() == 1  # back to incremental
        assert state(w) == fresh_state(w)


# ------------------------------------------------------------------ SIGKILL mid-batch
BATCH_WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, sys.argv[3])
    from test_index_changes import vectors
    from streamk.index import StreamingIndex

    path, n = sys.argv[1], int(sys.argv[2])
    V = vectors(7, n)
    idx = StreamingIndex.open(path)
    for lo in range(0, n, 13):
        res = idx.add_many([{"id": f"v{i}", "vector": V[i]} for i in range(lo, min(n, lo + 13))], batch_size=13)
        print(" ".join(r.id for r in res), flush=True)  # committed: the batch's transaction returned
    idx.close()
    print("done", flush=True)
""")


def test_sigkill_of_a_writer_mid_batch_loses_nothing_committed(tmp_path):
    path = tmp_path / "ix"
    n = 900
    V = vectors(7, n)
    with StreamingIndex.create(path, ENCODER, vector_dtype="float32", block_rows=32) as idx:
        idx.add_many([{"id": f"v{i}", "vector": V[i]} for i in range(300)])
        idx.train(nlist=4, M=8)
    script = tmp_path / "writer.py"
    script.write_text(BATCH_WRITER)
    here = os.path.dirname(os.path.abspath(__file__))
    rng = random.Random(5)
    committed = set(f"v{i}" for i in range(300))
    for _ in range(4):
        proc = start_python(script, path, n, here, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            first = proc.stdout.readline()
            assert first, proc.stderr.read()
            # a random moment among the batches (each is ~1 ms: the kill lands mid-batch often)
            for _ in range(rng.randint(0, 12)):
                proc.stdout.readline()
        finally:
            lines = kill_and_collect(proc, first)
        committed.update(i for ln in lines if ln != "done" for i in ln.split())
        with StreamingIndex.open(path, readonly=True) as idx:
            stored = set(idx.ids())
            assert committed <= stored
            # every stored image has its vector and the code of its vector; a fresh reader agrees
            codec = idx.codec()
            ids = sorted(stored)
            got = np.stack([idx.vector(i) for i in ids])
            np.testing.assert_allclose(got, V[[int(i[1:]) for i in ids]], atol=1e-6)
            _, found = idx.search(got, k=1, mode="exact")
            assert list(found[:, 0]) == ids
            rows, lists, codes = view_entries(idx.view)
            np.testing.assert_array_equal(rows, sorted(idx.info(i)["row"] for i in ids))
            by_row = np.argsort([idx.info(i)["row"] for i in ids])
            want_lists, want_codes = codec.encode(got[by_row])
            np.testing.assert_array_equal(lists, want_lists)
            np.testing.assert_array_equal(codes, want_codes)
            _, pq_found = idx.search(got, k=1, mode="pq", nprobe=4, rerank=0)
            assert (pq_found[:, 0] == np.array(ids, dtype=object)).mean() > 0.9
            assert state(idx) == fresh_state(idx)
    done = run_python(script, path, n, here, timeout=300)
    assert done.returncode == 0, done.stderr
    with StreamingIndex.open(path) as idx:
        assert len(idx) == n
        assert view_digest(idx.view) is None  # nothing loaded before the first search
        assert state(idx) == fresh_state(idx)
        assert idx.view.lists.n_entries - idx.view.lists.n_removed == n


# ------------------------------------------------------------------ memory
READER_MEMORY = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from streamk.index import StreamingIndex

    def memory():
        # private (anonymous) pages, and the pages of the big index's files mapped in (the LMDB
        # map; the kernel maps up to 64 KiB of cached file around each page touched). Other
        # files' pages (a library's code first run by this search) are not the reader's memory
        out = {"file": 0}
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    out["anon"] = int(line.split()[1]) * 1024
        mapping = ""
        with open("/proc/self/smaps") as fh:
            for line in fh:
                head = line.split()
                if head and not head[0].endswith(":"):  # a mapping's first line: address range ... path
                    mapping = head[5] if len(head) > 5 else ""
                elif head and head[0] == "Rss:" and mapping.startswith(os.path.realpath(sys.argv[2]) + "/"):
                    out["file"] += int(head[1]) * 1024
        return out

    q = np.random.default_rng(0).standard_normal((1, int(sys.argv[3]))).astype(np.float32)
    with StreamingIndex.open(sys.argv[1], readonly=True) as empty:  # same codec, no images
        empty.search(q, k=10)  # the kernels compiled / loaded: not counted below
    for name in os.listdir(sys.argv[2]):  # the writer's pages leave the page cache: the kernel maps
        fd = os.open(os.path.join(sys.argv[2], name), os.O_RDONLY)  # cached pages around each one touched
        try:  # (fault-around), so with them cached a reader would show more than it reads
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    before = memory()
    with StreamingIndex.open(sys.argv[2], readonly=True) as idx:
        s, ids = idx.search(q, k=10)
        after = memory()
        print(json.dumps({"anon": after["anon"] - before["anon"], "file": after["file"] - before["file"],
                          "view": idx.view.memory_bytes(), "found": ids[0, 0]}))
""")


def test_reader_memory_is_bounded_by_the_codes(tmp_path):
    """200k images of dimension 128 (float16 vectors: 51 MB; float32 in memory: 102 MB);
    a reader (a fresh process) holds the codes and rows, ~N (M + 9) bytes, not the vectors."""
    from streamk.index import EncodedImage
    from streamk.quantization.ivfpq import IVFPQ

    n, dim, M = 200_000, 128, 16
    rng = np.random.default_rng(0)
    sets = [rng.integers(0, 256, (50, 128)).astype(np.float32) for _ in range(3)]
    encoder = Encoder(embedding="vlad", k=1, aggregation="sum").fit(sets)
    C = rng.standard_normal((64, dim)).astype(np.float32)
    codec = IVFPQ(nlist=64, M=M, seed=0).fit(C[rng.integers(0, 64, 4096)] + rng.standard_normal((4096, dim),
                                                                                                dtype=np.float32))
    for name in ("empty", "big"):
        with StreamingIndex.create(tmp_path / name, encoder, vector_dtype="float16") as idx:
            idx.train(codec=codec, progress=False)
            if name == "big":
                for lo in range(0, n, 20_000):  # straight to the writer: the reader is what is measured
                    V = C[rng.integers(0, 64, 20_000)] + rng.standard_normal((20_000, dim), dtype=np.float32)
                    V /= np.linalg.norm(V, axis=1, keepdims=True)
                    idx.write_encoded([EncodedImage(f"i{lo + j}".encode(), v, hashlib.sha256(b"%d" % (lo + j)).digest(),
                                                    {"kind": "vector"}, None) for j, v in enumerate(V)])
                assert len(idx) == n
    out = run_python("-c", READER_MEMORY, tmp_path / "empty", tmp_path / "big", dim, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    codes = n * (M + 9)  # codes, rows and removal marks
    assert got["view"] <= 1.25 * codes + (1 << 20)  # + a little room in each list
    assert got["anon"] <= 1.5 * codes + (8 << 20), got  # + allocator slack
    assert got["anon"] + got["file"] <= 2 * codes + (32 << 20), got  # + the map's pages read
    assert got["found"] is not None


def test_one_training_at_a_time_and_a_dead_trainers_leftovers_are_cleared(tmp_path):
    import socket

    from streamk.errors import TrainingInProgressError
    from streamk.index.store import epoch_key

    V = vectors(8, 300)
    with StreamingIndex.create(tmp_path / "ix", ENCODER, vector_dtype="float32", block_rows=16) as idx:
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V)])
        s = idx.store

        def put_training(pid, epoch):
            def run(txn):
                txn.put(b"training", json.dumps({"pid": pid, "host": socket.gethostname(), "epoch": epoch,
                                                 "started": 0}).encode(), db=s.meta_db)
                txn.put(epoch_key(epoch, 5), b"leftover", db=s.codes_db)  # its half-written codes
            s.write(run)
        put_training(os.getpid(), 7)  # a live process is training
        with pytest.raises(TrainingInProgressError, match=str(os.getpid())) as info:
            idx.train(M=4)
        assert "wait for it to finish, then run this again" in str(info.value)  # what to do, not only what is
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        put_training(dead.pid, 7)  # it died mid-training: taken over, its codes dropped
        codec = idx.train(M=4)
        assert s.get_meta(b"training") is None
        with s.read() as txn:
            assert txn.get(epoch_key(7, 5), db=s.codes_db) is None
        assert idx.codec().M == codec.M == 4
        assert idx.search(V[3], k=1)[0][0] == "v3"

"""Bounded requests: k, rerank, verify, expand and a batch's size are checked against
streamk's documented maxima before anything is allocated, and capped at the number of
images in the index. A huge k once allocated (nq, k) arrays (7.45 GiB at k = 10^9, or the
kernel's OOM killer): here it is refused in a child process whose address space is
limited to 3 GB over what it had."""

import textwrap

import numpy as np
import pytest

from streamk.errors import ConfigError
from streamk.index import MAX_BATCH, MAX_EXPAND, MAX_K, MAX_RERANK, MAX_VERIFY, ShardedIndex, StreamingIndex

from helpers.index import make_encoder, vectors  # noqa: E402
from helpers.processes import run_python  # noqa: E402

N = 300  # enough to train flat PQ (256 centroids)


@pytest.fixture(scope="module")
def index_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("limits") / "ix"
    V = vectors(3, N)
    with StreamingIndex.create(path, make_encoder(), vector_dtype="float32") as idx:
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V)])
        idx.train(nlist=1, M=8, seed=0)
    return path


def test_the_maxima_are_consistent():
    assert MAX_RERANK >= MAX_K  # a PQ search re-ranks at least k candidates
    assert MAX_EXPAND <= MAX_VERIFY  # only verified results are averaged
    assert MAX_BATCH * MAX_K <= 10 ** 7


def test_over_the_maxima_is_a_config_error_naming_the_limit(index_path):
    V = vectors(3, N)
    with StreamingIndex.open(index_path, readonly=True) as idx:
        for kwargs, limit in (({"k": 10 ** 9}, MAX_K), ({"k": MAX_K + 1}, MAX_K),
                              ({"k": 10, "rerank": 10 ** 12}, MAX_RERANK), ({"k": 10, "verify": 10 ** 9}, MAX_VERIFY),
                              ({"k": 10, "expand": 10 ** 9}, MAX_EXPAND)):
            with pytest.raises(ConfigError, match=f"limit of {limit:,}"):
                idx.search(V[0], **kwargs)
        with pytest.raises(ConfigError, match=f"limit of {MAX_BATCH:,}"):
            idx.search(np.repeat(V[:1], MAX_BATCH + 1, axis=0), k=1)
        for bad in (0, -1, 2.5, True, "3"):
            with pytest.raises(ConfigError):
                idx.search(V[0], k=bad)


@pytest.mark.parametrize("mode", ["exact", "pq"])
def test_k_above_the_images_is_capped(index_path, mode):
    V = vectors(3, N)
    with StreamingIndex.open(index_path, readonly=True) as idx:
        hits = idx.search(V[7], k=MAX_K, mode=mode)
        assert len(hits) == N and hits[0][0] == "v7"
        assert len({h.id for h in hits}) == N
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        # the same order as an exact numpy ranking, in exact mode
        if mode == "exact":
            ref = np.argsort(-(V @ V[7]), kind="stable")
            assert [h.id for h in hits[:20]] == [f"v{i}" for i in ref[:20]]
        scores, ids = idx.search(V[:5], k=MAX_K, mode=mode, rerank=MAX_RERANK if mode == "pq" else None)
        assert scores.shape == ids.shape == (5, N)
        assert list(ids[:, 0]) == ["v0", "v1", "v2", "v3", "v4"]


def test_sharded_index_caps_and_refuses_the_same(tmp_path):
    V = vectors(4, 40)
    with ShardedIndex.create(tmp_path / "sh", make_encoder(), shards=3, vector_dtype="float32") as idx:
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V)])
        hits = idx.search(V[3], k=MAX_K)
        assert len(hits) == 40 and hits[0][0] == "v3"
        scores, ids = idx.search(V[:2], k=MAX_K)
        assert ids.shape[0] == 2 and ids.shape[1] >= 40
        assert sorted(i for i in ids[0] if i is not None) == sorted(f"v{i}" for i in range(40))
        with pytest.raises(ConfigError, match=f"limit of {MAX_K:,}"):
            idx.search(V[3], k=10 ** 9)


CHILD = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from streamk.errors import ConfigError
    from streamk.index import MAX_K, StreamingIndex

    idx = StreamingIndex.open(sys.argv[1], readonly=True)
    v = idx.vector("v7")
    idx.search(v, k=3, mode="exact"), idx.search(v, k=3, mode="pq")  # compiled before the limit
    vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (3 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))
    for mode in ("exact", "pq"):
        for k in (10 ** 9, 10 ** 7):
            try:
                idx.search(v, k=k, mode=mode)
                print("no error", k)
            except ConfigError as exc:
                print("ConfigError", "limit of" in str(exc))
        print("found", len(idx.search(v, k=MAX_K, mode=mode)))
        print("batch", idx.search(np.stack([v] * 50), k=MAX_K, mode=mode)[1].shape)
""")


def test_huge_k_under_a_memory_limit(index_path):
    res = run_python("-c", CHILD, index_path, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "MemoryError" not in res.stderr
    assert res.stdout.split("\n")[:8] == ["ConfigError True", "ConfigError True", f"found {N}", f"batch (50, {N})"] * 2

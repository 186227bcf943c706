"""IVF-ADC: the codec and the inverted lists against a plain-numpy IVFADC written
here from the paper's definitions (Jegou, Douze, Schmid, TPAMI 2011), with the
codec's own centroids and codebooks."""

import numpy as np
import pytest

from streamk import Encoder
from streamk.errors import ConfigError, DimensionError, NonFiniteError, NotFittedError, TooFewImagesError
from streamk.index import StreamingIndex
from streamk.quantization.inverted_lists import InvertedLists
from streamk.quantization.ivfpq import IVFPQ


def clustered(rng, n, d, n_clusters=20, noise=0.3):
    """Unit vectors around a few centres (structure for the coarse quantiser)."""
    centres = rng.standard_normal((n_clusters, d))
    V = centres[rng.integers(0, n_clusters, n)] + noise * rng.standard_normal((n, d))
    return (V / np.linalg.norm(V, axis=1, keepdims=True)).astype(np.float32)


# ------------------------------------------------------------------ plain-numpy IVFADC
def ref_encode(codec, V):
    """l(x) = argmin_l |x - c_l|^2; code_m = argmin_j |r_m - b_mj|^2 of the residual r = x - c_l."""
    C = codec.centroids_.astype(np.float64)
    V = V.astype(np.float64)
    d2 = ((V[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    lists = d2.argmin(1)
    R = V - C[lists]
    M, _, ds = codec.pq_.codebooks_.shape
    codes = np.empty((len(V), M), np.uint8)
    for m in range(M):
        B = codec.pq_.codebooks_[m].astype(np.float64)
        codes[:, m] = ((R[:, None, m * ds:(m + 1) * ds] - B[None]) ** 2).sum(-1).argmin(1)
    return lists, codes


def ref_search(codec, lists, codes, rows, dead_rows, Q, nprobe, k):
    """Visit the nprobe lists nearest to q; score <q, c_l> + sum_m <q_m, b_m,code_m>,
    the sum in float32 in the order m = 0..M-1, the list's term added last; k best
    by decreasing score, ties by increasing row."""
    C = codec.centroids_.astype(np.float64)
    M, _, ds = codec.pq_.codebooks_.shape
    out_s, out_r = [], []
    for q in Q:
        q64 = q.astype(np.float64)
        d2 = ((q64[None, :] - C) ** 2).sum(1)
        probe = np.argsort(d2, kind="stable")[:nprobe]
        table = np.stack([(codec.pq_.codebooks_[m].astype(np.float64) @ q64[m * ds:(m + 1) * ds])
                          for m in range(M)]).astype(np.float32)
        coarse = (codec.centroids_ @ q).astype(np.float32)
        mask = np.isin(lists, probe) & ~np.isin(rows, dead_rows)
        s = np.zeros(mask.sum(), np.float32)
        for m in range(M):
            s += table[m, codes[mask, m]]
        s += coarse[lists[mask]]
        r = rows[mask]
        order = np.lexsort((r, -s))[:k]
        out_s.append(s[order])
        out_r.append(r[order])
    return out_s, out_r


def assert_same_ranking(s, r, ref_s, ref_r, tol=1e-6):
    """Equal rows, except that rows whose scores are within rounding may swap."""
    np.testing.assert_allclose(s, ref_s, atol=tol)
    for i in np.flatnonzero(r != ref_r):
        assert np.isclose(s[i], ref_s[i], atol=tol), (i, r[i], ref_r[i])


@pytest.fixture(scope="module")
def trained():
    rng = np.random.default_rng(0)
    V = clustered(rng, 3000, 64)
    codec = IVFPQ(nlist=16, M=8, seed=0, nprobe=4).fit(V)
    return V, codec


def test_codec_encodes_as_the_definition(trained):
    V, codec = trained
    lists, codes = codec.encode(V[:500])
    ref_lists, ref_codes = ref_encode(codec, V[:500])
    np.testing.assert_array_equal(lists, ref_lists)
    np.testing.assert_array_equal(codes, ref_codes)
    assert lists.dtype == np.uint32 and codes.dtype == np.uint8
    # the reconstruction c_l + PQ(r) is closer to x than the centroid alone
    err = np.linalg.norm(codec.decode(lists, codes) - V[:500], axis=1)
    coarse_err = np.linalg.norm(codec.centroids_[lists] - V[:500], axis=1)
    assert np.mean(err) < 0.7 * np.mean(coarse_err)


def test_codec_round_trip_and_errors(trained):
    V, codec = trained
    again = IVFPQ.from_bytes(codec.to_bytes())
    np.testing.assert_array_equal(again.centroids_, codec.centroids_)
    np.testing.assert_array_equal(again.pq_.codebooks_, codec.pq_.codebooks_)
    assert (again.nlist, again.M, again.nprobe) == (16, 8, 4)
    for a, b in zip(again.encode(V[:50]), codec.encode(V[:50])):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(NotFittedError):
        IVFPQ(nlist=4, M=8).encode(V[:3])
    with pytest.raises(DimensionError):
        codec.encode(V[:3, :32])
    with pytest.raises(ConfigError):
        IVFPQ(nlist=0)
    with pytest.raises(ConfigError):
        IVFPQ(nlist=4, M=7).fit(V)  # 64 is not a multiple of 7
    with pytest.raises(TooFewImagesError):
        IVFPQ(nlist=128, M=8).fit(V[:300])  # fewer than 4 per list
    nan = V[:3].copy()
    nan[1, 5] = np.nan
    with pytest.raises(Exception, match="NaN"):
        codec.encode(nan)


def test_flat_codec_is_plain_pq(trained):
    V, _ = trained
    flat = IVFPQ(nlist=1, M=8, seed=3).fit(V)
    lists, codes = flat.encode(V[:100])
    assert not lists.any()
    np.testing.assert_array_equal(codes, flat.pq_.encode(V[:100]))
    np.testing.assert_array_equal(flat.centroids_, 0)


@pytest.mark.parametrize("nprobe,k", [(1, 5), (4, 10), (16, 50), (4, 3000)])
def test_inverted_lists_search_equals_reference(trained, nprobe, k):
    V, codec = trained
    rng = np.random.default_rng(nprobe + k)
    lists, codes = codec.encode(V)
    rows = np.arange(len(V), dtype=np.int64) * 3 + 7  # rows need not be 0..N-1
    dead = np.zeros(rows.max() + 1, np.uint8)
    dead_rows = rng.choice(rows, 200, replace=False)
    dead[dead_rows] = 1
    # built from two parts, then more appended one by one (list moves), then compacted
    first = 2000
    parts = lambda: iter([(lists[:1000], codes[:1000], rows[:1000]), (lists[1000:first], codes[1000:first],
                                                                        rows[1000:first])])
    il = InvertedLists.build(codec.nlist, codec.M, parts, dead, 0xFFFFFFFF)
    for i in range(first, len(V), 97):
        il.append(lists[i:i + 97], codes[i:i + 97], rows[i:i + 97])
    Q = clustered(rng, 7, 64)
    probes, coarse = codec.probe(Q, nprobe)
    tables = codec.tables(Q)
    ref_s, ref_r = ref_search(codec, lists, codes, rows, dead_rows, Q, nprobe, k)
    for stage in ("appended", "compacted"):
        s, r = il.search(probes, coarse, tables, dead, k)
        for a in range(len(Q)):
            n = len(ref_r[a])
            assert (r[a, n:] == -1).all() and np.isneginf(s[a, n:]).all()
            assert_same_ranking(s[a, :n], r[a, :n], ref_s[a], ref_r[a])
        il.compact(dead)
        assert il.garbage == 0 and il.n_entries == len(V) - len(dead_rows)


@pytest.mark.parametrize("nprobe,k", [(1, 5), (4, 10), (16, 50), (4, 3000)])
def test_codec_search_equals_reference(trained, nprobe, k, monkeypatch):
    """codec.search (probes, tables and scan of a query in one kernel call on one thread)
    against the plain-numpy IVFADC, removed rows left out; bit for bit the lists' own
    search with the codec's probes and tables (cut into parts for several threads)."""
    V, codec = trained
    rng = np.random.default_rng(100 + nprobe + k)
    lists, codes = codec.encode(V)
    rows = np.arange(len(V), dtype=np.int64) * 2 + 1
    dead = np.zeros(rows.max() + 1, np.uint8)
    dead_rows = rng.choice(rows, 150, replace=False)
    dead[dead_rows] = 1
    il = InvertedLists.build(codec.nlist, codec.M, lambda: iter([(lists, codes, rows)]), dead, 0xFFFFFFFF)
    Q = clustered(rng, 6, 64)
    ref_s, ref_r = ref_search(codec, lists, codes, rows, dead_rows, Q, nprobe, k)
    s, r = codec.search(il, Q, k, nprobe, dead)
    for a in range(len(Q)):
        n = len(ref_r[a])
        assert (r[a, n:] == -1).all() and np.isneginf(s[a, n:]).all()
        assert_same_ranking(s[a, :n], r[a, :n], ref_s[a], ref_r[a])
    # the lists' own search with the codec's probes and tables, cut into parts where there are threads
    monkeypatch.setattr("streamk.quantization.inverted_lists.PARALLEL_MIN", 1)
    s2, r2 = il.search(*codec.probe(Q, nprobe), codec.tables(Q), dead, k)
    np.testing.assert_array_equal(r2, r)
    np.testing.assert_array_equal(s2, s)


def test_codec_search_of_deferred_lists_equals_reference(trained):
    """Lists not read yet (a reader's lists that come in as probed, through ``fetch``):
    the probed ones are brought in once, the search equals the plain-numpy IVFADC."""
    V, codec = trained
    rng = np.random.default_rng(7)
    lists, codes = codec.encode(V)
    rows = np.arange(len(V), dtype=np.int64)
    dead = np.zeros(len(V), np.uint8)
    later = np.zeros(codec.nlist, bool)
    later[rng.choice(codec.nlist, codec.nlist // 2, replace=False)] = True
    now = ~later[lists]
    il = InvertedLists.build(codec.nlist, codec.M, lambda: iter([(lists[now], codes[now], rows[now])]), dead,
                             0xFFFFFFFF, reserve=np.bincount(lists[~now], minlength=codec.nlist))
    il.defer(later)
    fetched = []

    def fetch(wanted):
        fetched.append(wanted.copy())
        sel = np.isin(lists, wanted)
        return lists[sel], codes[sel], rows[sel]
    il.fetch = fetch
    Q = clustered(rng, 8, 64)
    for nprobe, k in ((2, 10), (4, 40), (16, 20)):
        ref_s, ref_r = ref_search(codec, lists, codes, rows, [], Q, nprobe, k)
        s, r = codec.search(il, Q, k, nprobe, dead)
        for a in range(len(Q)):
            assert_same_ranking(s[a], r[a], ref_s[a], ref_r[a])
    assert il.deferred is None  # nprobe 16 probed every list
    seen = np.concatenate(fetched)
    assert len(seen) == len(np.unique(seen)) and set(seen) == set(np.flatnonzero(later))  # each fetched once


def test_lists_split_between_threads_give_the_same_result(trained, monkeypatch):
    import streamk.quantization.inverted_lists as il_module

    V, codec = trained
    lists, codes = codec.encode(V)
    rows = np.arange(len(V), dtype=np.int64)
    dead = np.zeros(len(V), np.uint8)
    il = InvertedLists.build(1, codec.M, lambda: iter([(np.zeros(len(V), np.uint32), codes, rows)]), dead,
                             0xFFFFFFFF)
    Q = clustered(np.random.default_rng(5), 1, 64)
    flat_probe = (np.zeros((1, 1), np.int64), np.zeros((1, 1), np.float32))
    tables = codec.tables(Q)
    whole = il.search(*flat_probe, tables, dead, 40)
    monkeypatch.setattr(il_module, "PARALLEL_MIN", 100)  # now cut into parts scanned in parallel
    from streamk.quantization import _ivf_kernels as ivf_kernels
    from streamk.quantization import merge_topk
    for n_chunks in (2, 3, 7):
        s, r = ivf_kernels.ivf_topk_chunks(il.codes, il.rows, il.start, il.size, dead, False,
                                           np.zeros(0, np.uint64), *flat_probe, tables, 40, n_chunks)
        s, r = merge_topk(s.reshape(1, -1), r.reshape(1, -1), 40)
        np.testing.assert_array_equal(r, whole[1])
        np.testing.assert_array_equal(s, whole[0])


# ------------------------------------------------------------------ through the index
@pytest.fixture(scope="module")
def encoder():
    rng = np.random.default_rng(0)
    sets = [rng.integers(0, 256, (40, 128)).astype(np.float32) for _ in range(6)]
    return Encoder(embedding="bow", k=64, aggregation="sum").fit(sets)  # 64-dim vectors


def test_index_ivf_search_equals_reference(tmp_path, encoder, trained):
    V, codec = trained
    idx = StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32", block_rows=64)
    idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V[:1500])], batch_size=100)
    idx.train(codec=codec)  # the given codec, as is
    idx.add_many([{"id": f"v{i}", "vector": V[i]} for i in range(1500, 2000)], batch_size=33)
    gone = [f"v{i}" for i in range(0, 2000, 9)]
    idx.remove(gone)
    idx.update("v1", vector=V[2500])
    stored = np.stack([idx.vector(f"v{i}") for i in range(2000) if i % 9])
    rows = np.array([idx.info(f"v{i}")["row"] for i in range(2000) if i % 9])
    lists, codes = ref_encode(codec, stored)
    Q = clustered(np.random.default_rng(9), 6, 64)
    for nprobe in (1, 3):
        s, ids = idx.search(Q, k=20, mode="pq", nprobe=nprobe, rerank=0)
        ref_s, ref_r = ref_search(codec, lists, codes, rows, [], Q, nprobe, 20)
        row_of = {f"v{i}": idx.info(f"v{i}")["row"] for i in range(2000) if i % 9}
        for a in range(len(Q)):
            got_rows = np.array([row_of[i] for i in ids[a]])
            assert_same_ranking(s[a], got_rows, ref_s[a], ref_r[a])
    # re-ranked: exact scores of the candidates, sorted
    s, ids = idx.search(Q, k=5, mode="pq", nprobe=16, rerank=200)
    exact_s, exact_ids = idx.search(Q, k=5, mode="exact")
    assert (ids == exact_ids).mean() > 0.9
    np.testing.assert_allclose(s[ids == exact_ids], exact_s[ids == exact_ids], atol=1e-6)
    idx.close()


def test_batched_search_api(tmp_path, encoder):
    rng = np.random.default_rng(3)
    V = clustered(rng, 300, 64)
    with StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32") as idx:
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V)])
        s, ids = idx.search(V[:4], k=3)
        assert s.shape == ids.shape == (4, 3) and s.dtype == np.float32 and ids.dtype == object
        assert list(ids[:, 0]) == ["v0", "v1", "v2", "v3"]
        one = idx.search(V[:1], k=2)  # a (1, D) array is a batch of one vector, not a descriptor set
        assert isinstance(one, tuple) and one[1][0, 0] == "v0"
        assert idx.search(V[0], k=2)[0][0] == "v0"  # a (D,) vector: the list form
        # more than the index holds: capped at the live count, nothing allocated for k
        s, ids = idx.search(V[:2], k=400)
        assert s.shape == ids.shape == (2, 300) and all(i is not None for i in ids[0]) and np.isfinite(s).all()
        with pytest.raises(DimensionError):
            idx.search(np.zeros((2, 63)), k=1)
        with pytest.raises(Exception, match="zero norm"):
            idx.search(np.zeros((2, 64)), k=1)
        for bad in (np.nan, np.inf):
            Qbad = V[:3].astype(np.float64)
            Qbad[1, 7] = bad
            with pytest.raises(NonFiniteError):
                idx.search(Qbad, k=1)
        Q = V[:3] * np.array([[2.0], [0.5], [1e-30]])  # the query rows are made unit vectors
        np.testing.assert_allclose(idx.query_vectors(Q), V[:3] / np.linalg.norm(V[:3], axis=1, keepdims=True),
                                   rtol=1e-6)
        with pytest.raises(NotFittedError):
            idx.search(V[:2], k=1, mode="pq")
        assert idx.remove(["v0", "v1"]) == 2
        with pytest.raises(Exception, match="nothing removed"):
            idx.remove(["v2", "nope"])
        assert "v2" in idx and len(idx) == 298


def test_probes_and_tables_of_a_batch_are_those_of_its_queries(trained):
    V, codec = trained
    Q = clustered(np.random.default_rng(11), 9, 64)
    one = [codec.probe(Q[i:i + 1], 5) for i in range(9)]  # one at a time first, then batches
    for batch in (Q[:3], Q, Q[2:7]):
        lo = {3: 0, 9: 0, 5: 2}[len(batch)]
        probes, coarse = codec.probe(batch, 5)
        np.testing.assert_array_equal(probes, np.concatenate([p for p, _ in one[lo:lo + len(batch)]]))
        # <q, c_l> by one GEMM over the batch: the last bit may depend on the batch (BLAS)
        np.testing.assert_allclose(coarse, np.concatenate([c for _, c in one[lo:lo + len(batch)]]), rtol=1e-6,
                                   atol=1e-7)
        np.testing.assert_array_equal(codec.tables(batch), np.concatenate([codec.tables(q[None]) for q in batch]))
    # the probes are the nearest centroids, nearest first
    d2 = ((Q[:, None, :].astype(np.float64) - codec.centroids_[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(codec.probe(Q, 5)[0], np.argsort(d2, axis=1, kind="stable")[:, :5])


def test_probe_ties_go_to_the_smaller_list(trained):
    """Equal centroids give equal criteria: the probes are a stable sort by distance
    (ties by list number). Entries in multiples of 1/8: every sum below is exact in float32."""
    _, codec = trained
    tied = IVFPQ.from_bytes(codec.to_bytes())
    rng = np.random.default_rng(3)
    C = rng.integers(-2, 3, (16, 64)).astype(np.float32) / 8
    C[[5, 9, 12]] = C[2]
    C[[7, 14]] = C[0]
    tied.centroids_ = C
    Q = rng.integers(-2, 3, (24, 64)).astype(np.float32) / 8
    Q[:4] = C[2]
    Q[4:8] = C[0] + C[2]
    C64 = C.astype(np.float64)
    crit = Q.astype(np.float64) @ C64.T - 0.5 * (C64 ** 2).sum(1)  # argmax of this is argmin |q - c|^2
    for P in (1, 2, 3, 4, 7, 16):
        np.testing.assert_array_equal(tied.probe(Q, P)[0], np.argsort(-crit, axis=1, kind="stable")[:, :P])
        # a few queries at once take the 8-bit step where P x CHECKED_MAX_SHARE <= 16 (P 1 and 2)
        np.testing.assert_array_equal(tied.probe(Q[:5], P)[0], np.argsort(-crit[:5], axis=1, kind="stable")[:, :P])


@pytest.mark.parametrize("M", [3, 8, 12, 16, 64])
@pytest.mark.parametrize("k", [1, 10, 100])
def test_scan_scores_are_the_float32_sums_in_order(M, k):
    """Whatever M (the scan takes four codes at a time, the rest one by one), a list's
    scores are sum_m table[m, code_m] in float32, m = 0..M-1, plus the list's term: a
    numpy loop in that order gives the same top k, bit for bit (ties by row), removed
    rows left out."""
    rng = np.random.default_rng(M * 1000 + k)
    n, nlist = 3001, 5
    codes = rng.integers(0, 256, (n, M), dtype=np.uint8)
    lists = rng.integers(0, nlist, n).astype(np.uint32)
    rows = rng.permutation(n).astype(np.int64)
    dead = np.zeros(n, np.uint8)
    dead[rng.choice(n, 50, replace=False)] = 1
    il = InvertedLists.build(nlist, M, lambda: iter([(lists, codes, rows)]), dead, 0xFFFFFFFF)
    tables = (rng.standard_normal((1, M, 256)) * 0.1).astype(np.float32)
    tables[0, :, :8] = 0.25  # equal scores: ties go to the smaller row
    probes = np.array([[3, 0, 4]], np.int64)
    coarse = rng.standard_normal((1, 3)).astype(np.float32)
    s, r = il.search(probes, coarse, tables, dead, k)
    want_s, want_r = [], []
    for p, lst in enumerate(probes[0]):
        sel = (lists == lst) & (dead[rows] == 0)
        acc = np.zeros(int(sel.sum()), np.float32)
        for m in range(M):
            acc += tables[0, m, codes[sel, m]]
        want_s.append(acc + coarse[0, p])
        want_r.append(rows[sel])
    want_s, want_r = np.concatenate(want_s), np.concatenate(want_r)
    order = np.lexsort((want_r, -want_s))[:k]
    np.testing.assert_array_equal(r[0], want_r[order])
    np.testing.assert_array_equal(s[0], want_s[order])


def _nearest_by_float64(C, Q, P):
    """The P nearest centroids of each query, by |q - c|^2 in float64 (a stable sort: ties by list)."""
    C64 = C.astype(np.float64)
    crit = Q.astype(np.float64) @ C64.T - 0.5 * (C64 ** 2).sum(1)
    return np.argsort(-crit, axis=1, kind="stable")[:, :P], Q.astype(np.float64) @ C64.T


def test_the_8bit_coarse_step_keeps_the_exact_probes_on_near_ties(trained):
    """One query's coarse step sums an 8-bit copy of the centroids, then only the lists that can
    be among the nearest exactly: centroids 1e-6 apart (far below the 8-bit copy's resolution)
    still come in the order of their exact distances, as a float64 brute force ranks them."""
    _, codec = trained
    near = IVFPQ.from_bytes(codec.to_bytes())
    rng = np.random.default_rng(5)
    base = rng.standard_normal((8, 64)).astype(np.float32)
    C = np.repeat(base, 8, axis=0) + (rng.standard_normal((64, 64)) * 1e-6).astype(np.float32)
    near.centroids_ = np.ascontiguousarray(C)
    near.nlist = len(C)
    Q = (base[rng.integers(0, 8, 12)] + rng.standard_normal((12, 64)) * 0.3).astype(np.float32)
    for P in (1, 3, 8):
        want, G = _nearest_by_float64(C, Q, P)
        for part in (Q, Q[:4]) + tuple(Q[a:a + 1] for a in range(len(Q))):  # a batch (BLAS), few, one (8-bit)
            probes, coarse = near.probe(part, P)
            rows = [a for a in range(len(Q)) if any((part == Q[a]).all(axis=1))]
            np.testing.assert_array_equal(probes, want[rows])
            np.testing.assert_array_equal(coarse, np.take_along_axis(G[rows], want[rows], axis=1).astype(np.float32))


def test_the_8bit_inner_products_stay_within_their_bound(trained):
    """|A - <q, c_l>| within the bound the exact re-check relies on, for every list and query,
    on centroids of very different scales and queries of any length."""
    from streamk.quantization import _ivf_kernels

    _, codec = trained
    c = IVFPQ.from_bytes(codec.to_bytes())
    rng = np.random.default_rng(8)
    c.centroids_ = np.ascontiguousarray((rng.standard_normal((40, 64)) * rng.choice([1e-3, 1.0, 1e3], (40, 1)))
                                        .astype(np.float32))
    c.nlist = 40
    C8, scale, e1, e2, n8, gamma, _, blas = c._coarse_8bit()  # a CoarseCopy
    assert c.memory_bytes() == c.centroids_.nbytes + c.pq_.codebooks_.nbytes + 40 * 64  # the copy is counted
    Q = (rng.standard_normal((30, 64)) * rng.choice([1e-2, 1.0, 1e2], (30, 1))).astype(np.float32)
    Qs = Q * scale
    A = np.empty((30, 40), np.float32)
    _ivf_kernels.int8_inner_products(C8, Qs, A)
    exact = Q.astype(np.float64) @ c.centroids_.astype(np.float64).T
    err = np.abs(A.astype(np.float64) - exact)
    qn = np.linalg.norm(Q.astype(np.float64), axis=1)[:, None]
    qsn = np.linalg.norm(Qs.astype(np.float64), axis=1)[:, None]
    assert (err <= np.minimum(qn * e1, qsn * e2) + gamma * qsn * n8).all()
    _, _, norms, gamma_blas = blas  # a batch's BLAS GEMM: within gamma_D |q| |c_l|
    assert (np.abs((Q @ c.centroids_.T).astype(np.float64) - exact) <= gamma_blas * qn * norms).all()
    assert err.max() > 0  # the copy is not exact: the bound is doing work


def test_a_large_batch_probes_as_its_queries_do_one_at_a_time(trained):
    """Batches past CHECKED_MAX_QUERIES take BLAS's float32 GEMM, then the same exact re-check:
    the probes the 8-bit step gives the queries one at a time, and the float64 brute force's."""
    from streamk.quantization.ivfpq import CHECKED_MAX_QUERIES

    _, codec = trained
    Q = clustered(np.random.default_rng(21), CHECKED_MAX_QUERIES + 5, 64)
    probes, coarse = codec.probe(Q, 2)  # 2 x CHECKED_MAX_SHARE <= 16 lists: one query takes the 8-bit step
    for a in range(len(Q)):
        p1, c1 = codec.probe(Q[a:a + 1], 2)
        np.testing.assert_array_equal(probes[a], p1[0])
        np.testing.assert_allclose(coarse[a], c1[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(probes, _nearest_by_float64(codec.centroids_, Q, 2)[0])

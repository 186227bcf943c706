"""Product quantisation: codes, reconstruction and ADC scores against plain numpy."""

import numpy as np
import pytest

from streamk.errors import ConfigError, NotFittedError
from streamk.quantization import ProductQuantizer, merge_topk


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    # clustered data, so that 256 centroids per sub-space quantise it well
    centres = rng.normal(size=(40, 32))
    V = centres[rng.integers(40, size=3000)] + 0.05 * rng.normal(size=(3000, 32))
    return V.astype(np.float32)


@pytest.fixture(scope="module")
def pq(data):
    return ProductQuantizer(M=4, seed=0).fit(data[:2000])


def test_codes_are_nearest_centroids(pq, data):
    codes = pq.encode(data[:50])
    assert codes.dtype == np.uint8 and codes.shape == (50, 4)
    for i in range(50):
        for m in range(4):
            sub = data[i, m * 8:(m + 1) * 8]
            assert codes[i, m] == np.argmin(((pq.codebooks_[m] - sub) ** 2).sum(axis=1))


def test_reconstruction_is_close_on_clustered_data(pq, data):
    rec = pq.decode(pq.encode(data[2000:]))
    rel = np.linalg.norm(rec - data[2000:], axis=1) / np.linalg.norm(data[2000:], axis=1)
    assert np.median(rel) < 0.1


def test_adc_equals_inner_product_with_reconstruction(pq, data):
    codes = pq.encode(data)
    queries = data[:3] + 0.01
    ref = queries.astype(np.float64) @ pq.decode(codes).T.astype(np.float64)
    np.testing.assert_allclose(pq.scores(queries[:1], codes)[0], ref[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(pq.scores(queries, codes), ref, rtol=1e-4, atol=1e-4)


def test_round_trip_and_errors(pq, data):
    again = ProductQuantizer.from_bytes(pq.to_bytes())
    np.testing.assert_array_equal(again.encode(data[:100]), pq.encode(data[:100]))
    with pytest.raises(NotFittedError):
        ProductQuantizer(4).encode(data)
    with pytest.raises(ConfigError):
        ProductQuantizer(5).fit(data)  # 32 is not a multiple of 5
    with pytest.raises(ConfigError):
        ProductQuantizer(4).fit(data[:100])  # fewer vectors than centroids


# ---------------------------------------------------------------- top-k search kernels

def reference_scores(tables, codes):
    """ADC scores summed in float32 in the order m = 0..M-1 (the kernels' order)."""
    s = np.zeros((tables.shape[0], codes.shape[0]), np.float32)
    for m in range(codes.shape[1]):
        s += tables[:, m, codes[:, m]]
    return s


def reference_topk(scores, k):
    """k best by decreasing score, ties by increasing row (a stable sort)."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


def test_adc_scores_are_the_float32_sum_in_order(pq, data):
    from streamk.quantization import _pq_kernels as pq_kernels

    codes = pq.encode(data[:1003])  # not a multiple of the 4-code unrolling
    tables = pq.tables(data[:3] + 0.01)
    ref = reference_scores(tables, codes)
    np.testing.assert_array_equal(pq_kernels.adc_scores(codes, tables[0]), ref[0])
    np.testing.assert_array_equal(pq_kernels.adc_scores_batch(codes, tables), ref)


@pytest.mark.parametrize("n", [1, 3, 7, 100, 2048, 2049, 5000, 9001])
@pytest.mark.parametrize("k", [1, 5, 64, 10000])
def test_search_equals_a_stable_sort_of_the_scores(n, k):
    from streamk.quantization import _pq_kernels as pq_kernels

    rng = np.random.default_rng(n * 7 + k)
    M = 8
    pq = ProductQuantizer(M=M)
    pq.codebooks_ = rng.normal(size=(M, 256, 2)).astype(np.float32)
    codes = rng.integers(0, 256, size=(n, M), dtype=np.uint8)
    queries = rng.normal(size=(4, 2 * M))
    ref_s, ref_r = reference_topk(reference_scores(pq.tables(queries), codes), min(k, n))
    for threads_hint in (1, 3, 64):  # 1 chunk, uneven chunks, more chunks than blocks
        n_chunks = max(1, min(threads_hint, -(-n // pq_kernels.BLOCK)))
        s, r = pq_kernels.adc_topk_chunks(codes, pq.tables(queries), min(k, n), n_chunks)
        s, r = merge_topk(s.reshape(4, -1), r.reshape(4, -1), min(k, n))
        np.testing.assert_array_equal(r, ref_r)
        np.testing.assert_array_equal(s, ref_s)
    s, r = pq.search(queries, codes, k)
    assert s.shape == r.shape == (4, min(k, n)) and r.dtype == np.int64
    np.testing.assert_array_equal(r, ref_r)
    np.testing.assert_array_equal(s, ref_s)
    s1, r1 = pq.search(queries[2], codes, k)  # one query (1-D)
    np.testing.assert_array_equal(r1[0], ref_r[2])


def test_search_ties_go_to_the_smaller_row():
    M = 4
    pq = ProductQuantizer(M=M)
    # every centroid of sub-space 0 scores 1 or 0, the others score 0: many exact ties
    cb = np.zeros((M, 256, 1), np.float32)
    cb[0, ::2, 0] = 1.0
    pq.codebooks_ = cb
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 256, size=(7000, M), dtype=np.uint8)  # > 3 blocks: ties across chunks
    q = np.array([[1.0, 0.5, 0.5, 0.5]])
    for k in (1, 10, 3000, 7000):
        s, r = pq.search(q, codes, k)
        ref_s, ref_r = reference_topk(reference_scores(pq.tables(q), codes), k)
        np.testing.assert_array_equal(r, ref_r)
        np.testing.assert_array_equal(s, ref_s)
    even = np.flatnonzero(codes[:, 0] % 2 == 0)
    np.testing.assert_array_equal(pq.search(q, codes, 10)[1][0], even[:10])


def test_search_with_several_threads_gives_the_same_answer(pq, data):
    import numba

    codes = np.tile(pq.encode(data), (3, 1))  # 9000 codes, each repeated: ties across chunks
    queries = data[:5] + 0.01
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = pq.search(queries, codes, 50)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        many = pq.search(queries, codes, 50)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one[1], many[1])
    np.testing.assert_array_equal(one[0], many[0])
    ref_s, ref_r = reference_topk(reference_scores(pq.tables(queries), codes), 50)
    np.testing.assert_array_equal(one[1], ref_r)


def test_search_errors(pq, data):
    codes = pq.encode(data[:10])
    with pytest.raises(ConfigError):
        pq.search(data[:1], codes, 0)
    with pytest.raises(ConfigError):
        pq.search(data[:1], codes, True)
    from streamk.errors import DimensionError
    with pytest.raises(DimensionError):
        pq.search(data[:1], codes[:, :3], 5)
    with pytest.raises(DimensionError):
        pq.search(data[:1, :16], codes, 5)


def test_encode_in_chunks_equals_one_chunk_and_checks_input(pq, data):
    from streamk.errors import DimensionError, NonFiniteError

    def assert_same_codes(a, b, X):
        # BLAS may round a GEMM differently for other shapes: codes may differ only
        # where two centroids are at the same distance up to the rounding of the
        # float32 <x, c> - |c|^2/2, whose error scales with |x|^2 + |c|^2, not the distance
        for i, m in np.argwhere(a != b):
            sub = X[i, m * 8:(m + 1) * 8].astype(np.float64)
            cs = [pq.codebooks_[m, c].astype(np.float64) for c in (a[i, m], b[i, m])]
            da, db = (((c - sub) ** 2).sum() for c in cs)
            scale = sub @ sub + max(c @ c for c in cs)
            assert abs(da - db) <= 1e-5 * scale

    whole = pq.encode(data, chunk=10 ** 6)
    assert_same_codes(pq.encode(data, chunk=7), whole, data)
    assert_same_codes(pq.encode(data.astype(np.float64)), whole, data)
    assert_same_codes(pq.encode(np.asfortranarray(data)), whole, data)
    assert_same_codes(pq.encode(data[5]), whole[5:6], data[5:6])  # one vector
    bad = data[:20].copy()
    bad[13, 3] = np.nan
    with pytest.raises(NonFiniteError):
        pq.encode(bad, chunk=8)
    with pytest.raises(DimensionError):
        pq.encode(data[:, :16])
    with pytest.raises(DimensionError):
        pq.encode(np.zeros((0, 32), np.float32))


def test_importing_the_index_loads_neither_scipy_linalg_nor_sklearn():
    """Start-up of a second process that searches: scipy.linalg (0.2-0.3 s to import) and
    scikit-learn are imported where they are used (encoding, training), not by
    ``import streamk.index``; an exact search by vector never loads them. (Numba's
    first kernel call, even from its cache, imports scipy.linalg itself.)"""
    import subprocess
    import sys

    code = ("import sys, streamk.index, streamk.quantization.pq, streamk.pipeline.ingest\n"
            "print(sorted(m for m in ('scipy.linalg', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tables_are_the_inner_products_with_the_centroids(pq, data):
    """Entry (m, j) of a query's table is <q_m, c_mj> (float64 reference, float32 rounding:
    d products of unit-scale numbers, each sum within a few ulps of the exact one)."""
    Q = data[:5] + 0.01
    d = pq.codebooks_.shape[2]
    ref = np.einsum("qmd,mjd->qmj", Q.reshape(5, pq.M, d).astype(np.float64), pq.codebooks_.astype(np.float64))
    tables = pq.tables(Q)
    assert tables.shape == (5, pq.M, 256) and tables.dtype == np.float32
    scale = np.abs(Q).max() * np.abs(pq.codebooks_).max() * d
    np.testing.assert_allclose(tables, ref, rtol=0, atol=d * np.finfo(np.float32).eps * scale)

"""Query expansion and re-ranking against plain numpy / Python references."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamk.verification import alpha_query_expansion, average_query_expansion, expand_query, expansion_rows, rerank
from streamk.errors import ConfigError, DimensionError


def unit(v):
    return v / np.linalg.norm(v)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 10), d=st.integers(1, 20), alpha=st.floats(0, 5))
def test_qe_equals_numpy_reference(seed, n, d, alpha):
    rng = np.random.default_rng(seed)
    q = unit(rng.normal(size=d))
    N = np.array([unit(rng.normal(size=d)) for _ in range(n)]).reshape(n, d)
    ref_aqe = q + sum((N[i] for i in range(n)), np.zeros(d))
    if np.linalg.norm(ref_aqe) > 1e-9:
        assert np.allclose(average_query_expansion(q, N), unit(ref_aqe))
    ref_a = q + sum((max(float(q @ N[i]), 0.0) ** alpha * N[i] for i in range(n)), np.zeros(d))
    if np.linalg.norm(ref_a) > 1e-9:
        assert np.allclose(alpha_query_expansion(q, N, alpha), unit(ref_a))


def test_alpha_zero_is_aqe_over_positive_neighbours_and_methods():
    rng = np.random.default_rng(0)
    q = unit(rng.normal(size=8))
    N = np.stack([unit(q + 0.1 * rng.normal(size=8)) for _ in range(4)])
    assert np.allclose(alpha_query_expansion(q, N, 0.0), average_query_expansion(q, N))
    assert np.allclose(expand_query(q, N, "alpha", 3.0), alpha_query_expansion(q, N, 3.0))
    with pytest.raises(ConfigError):
        expand_query(q, N, "dqe")
    with pytest.raises(DimensionError):
        average_query_expansion(q, N[:, :4])


def reference_rerank(ids, inliers, m):
    ver = sorted([(-inliers[k], k) for k in range(len(ids)) if inliers[k] >= m])
    rest = [k for k in range(len(ids)) if inliers[k] < m]
    return [ids[k] for _, k in ver] + [ids[k] for k in rest], len(ver)


@settings(max_examples=60, deadline=None)
@given(inl=st.lists(st.integers(0, 40), max_size=30), m=st.integers(1, 30))
def test_rerank_equals_reference(inl, m):
    ids = np.arange(100, 100 + len(inl))[::-1].copy()
    ranking, n_ver = rerank(ids, np.array(inl, np.int64), m)
    ref, ref_n = reference_rerank(ids.tolist(), inl, m)
    assert ranking.tolist() == ref and n_ver == ref_n
    # QE never takes unverified images unless asked
    rows = expansion_rows(ranking, n_ver, top=5)
    assert len(rows) == min(5, ref_n) and set(rows.tolist()) <= set(ref[:ref_n])
    assert len(expansion_rows(ranking, n_ver, top=5, include_unverified=True)) == min(5, len(inl))

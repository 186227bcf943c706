"""ASMK / ASMK* (Tolias et al., ICCV 2013) against a slow plain-numpy reference of the
paper's formulas, and the kernel's properties: selectivity, aggregation (burstiness),
self-similarity 1, rotation invariance of the real-valued kernel."""

import math

import numpy as np
import pytest

from streamk.evaluation.asmk import (AggregatedSet, ASMKCodebook, ASMKIndex, aggregate_residuals, pack_signs,
                          scaled_vocabulary_size)
from streamk.evaluation._asmk_kernels import popcount64
from streamk.errors import ConfigError, DimensionError, EmptyDescriptorSetError, NonFiniteError, NotFittedError

D = 128


MODES = np.random.default_rng(7).gamma(0.6, 30.0, size=(48, D))


def sift_sets(rng, n_images, n_range=(40, 90), modes_per_image=6):
    """SIFT-like non-negative descriptor sets, each drawn around a few of 48 shared modes
    (so that words are in some images and not others: idf > 0), with bursts."""
    sets = []
    for _ in range(n_images):
        n = int(rng.integers(*n_range))
        mine = rng.choice(len(MODES), modes_per_image, replace=False)
        X = MODES[mine[rng.integers(0, modes_per_image, n)]] + rng.gamma(0.6, 8.0, size=(n, D))
        X[: n // 5] = X[0] + rng.normal(0, 0.5, size=(n // 5, D))   # a burst of near-duplicates
        sets.append(np.abs(X).astype(np.float32))
    return sets


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    learn = sift_sets(rng, 12)
    database = sift_sets(rng, 10)
    # views of database images 0, 4, 7 (half their descriptors, jittered), and an unrelated image
    queries = [np.abs(database[j][::2] + rng.normal(0, 2.0, size=database[j][::2].shape)).astype(np.float32)
               for j in (0, 4, 7)] + sift_sets(rng, 1)
    codebook = ASMKCodebook(n_words=16, seed=0, max_iter=10).fit(learn)
    return codebook, database, queries


# --------------------------------------------------------------- slow reference, straight from the paper
def ref_rootsift_rotated(codebook, S):
    S = np.asarray(S, np.float64)
    X = np.sqrt(S / S.sum(axis=1, keepdims=True))
    return (X - codebook.mean_) @ codebook.rotation_.astype(np.float64)


def ref_words(codebook, X, m):
    C = codebook.centroids_.astype(np.float64)
    out = []
    for x in X:
        dist = [float(np.sum((x - c) ** 2)) for c in C]
        out.append(list(np.argsort(dist, kind="stable")[:m]))
    return out


def ref_aggregate(codebook, S, m=1):
    """{word: V(X_c)} with V = sum of residuals x - c, one plain loop per descriptor."""
    X = ref_rootsift_rotated(codebook, S)
    C = codebook.centroids_.astype(np.float64)
    V = {}
    for x, ws in zip(X, ref_words(codebook, X, m)):
        for c in ws:
            V[int(c)] = V.get(int(c), 0.0) + (x - C[c])
    return V


def ref_sigma(u, alpha, tau):
    return math.copysign(abs(u) ** alpha, u) if u > tau else 0.0


def ref_similarity(a, b, binary):
    if binary:   # sign bits, u = 1 - 2 h / d
        h = sum(1 for s, t in zip(a > 0, b > 0) if s != t)
        return 1.0 - 2.0 * h / len(a)
    return float(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))


def ref_kernel(codebook, database, query, binary, alpha, tau, m=1):
    db = [ref_aggregate(codebook, S) for S in database]
    q = ref_aggregate(codebook, query, m)
    N = len(database)
    n_c = {c: sum(1 for V in db if c in V) for c in range(codebook.n_words)}
    w = {c: math.log(N / max(n_c[c], 1)) ** 2 for c in n_c}
    def gamma(V):   # an image whose every word is in every database image (idf 0) matches nothing
        self_similarity = sum(w[c] * ref_sigma(1.0, alpha, tau) for c in V)
        return 1.0 / math.sqrt(self_similarity) if self_similarity > 0 else 0.0
    out = []
    for V in db:
        k = sum(w[c] * ref_sigma(ref_similarity(q[c], V[c], binary), alpha, tau) for c in q if c in V)
        out.append(gamma(q) * gamma(V) * k)
    return np.array(out)


# --------------------------------------------------------------- tests
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("alpha, tau, m", [(3.0, 0.0, 1), (3.0, 0.0, 3), (1.0, -0.2, 1), (2.0, 0.25, 2)])
def test_scores_equal_the_papers_kernel(data, binary, alpha, tau, m):
    codebook, database, queries = data
    index = ASMKIndex(codebook, [codebook.aggregate(S) for S in database], binary=binary, alpha=alpha, tau=tau)
    nonzero = 0
    for S in queries:
        got = index.scores(codebook.aggregate(S, multiple_assignment=m))
        want = ref_kernel(codebook, database, S, binary, alpha, tau, m)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-9)
        nonzero += np.count_nonzero(want)
    assert nonzero >= len(queries)      # not only 0 = 0


@pytest.mark.parametrize("binary", [False, True])
def test_self_similarity_is_one_and_the_image_itself_ranks_first(data, binary):
    codebook, database, _ = data
    index = ASMKIndex(codebook, [codebook.aggregate(S) for S in database], binary=binary)
    for i, S in enumerate(database):
        s = index.scores(codebook.aggregate(S))
        assert s[i] == pytest.approx(1.0, abs=1e-5)
        assert index.ranks(codebook.aggregate(S))[0] == i


def test_aggregation_makes_repeated_descriptors_count_once(data):
    """Burstiness: repeating an image's whole descriptor set leaves every V^ unchanged."""
    codebook, database, queries = data
    index = ASMKIndex(codebook, [codebook.aggregate(S) for S in database])
    q = queries[0]
    once = index.scores(codebook.aggregate(q))
    thrice = index.scores(codebook.aggregate(np.concatenate([q, q, q])))
    np.testing.assert_allclose(once, thrice, rtol=1e-5, atol=1e-7)


def test_selectivity_drops_weak_matches(data):
    """With tau near 1 only near-identical residuals count: an unrelated image matches nothing,
    while without a threshold every shared word adds its (weak) similarity."""
    codebook, database, queries = data
    agg = [codebook.aggregate(S) for S in database]
    q = codebook.aggregate(queries[3])
    loose = ASMKIndex(codebook, agg, alpha=1.0, tau=-1.0).scores(q)
    strict = ASMKIndex(codebook, agg, alpha=1.0, tau=0.999).scores(q)
    assert np.count_nonzero(loose) >= 3 and np.all(strict == 0)


def test_real_kernel_does_not_depend_on_the_rotation(data):
    """ASMK's residuals, norms and cosines are rotation invariant: the PCA rotation (streamk's
    choice, for ASMK*'s bits) must not change ASMK's scores."""
    codebook, database, queries = data
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.normal(size=(D, D)))
    turned = ASMKCodebook(n_words=codebook.n_words)
    turned.mean_ = codebook.mean_
    turned.rotation_ = (codebook.rotation_.astype(np.float64) @ Q).astype(np.float32)
    turned.centroids_ = (codebook.centroids_.astype(np.float64) @ Q).astype(np.float32)
    a = ASMKIndex(codebook, [codebook.aggregate(S) for S in database]).scores(codebook.aggregate(queries[2]))
    b = ASMKIndex(turned, [turned.aggregate(S) for S in database]).scores(turned.aggregate(queries[2]))
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_aggregate_residuals_and_sign_codes_by_hand():
    C = np.array([[0.0, 0.0], [10.0, 0.0]], np.float32)
    X = np.array([[1.0, 0.0], [0.0, 2.0], [11.0, -1.0]], np.float32)
    agg = aggregate_residuals(X, np.array([[0], [0], [1]]), C)
    assert agg.words.tolist() == [0, 1]
    np.testing.assert_allclose(agg.vectors, [[1 / 5 ** 0.5, 2 / 5 ** 0.5], [1 / 2 ** 0.5, -1 / 2 ** 0.5]],
                               rtol=1e-6)
    V = np.zeros((2, 130), np.float32)
    V[0, [0, 64, 129]] = 1.0
    V[1, [1, 2]] = 0.5
    V[1, 3] = -1.0
    codes = pack_signs(V)
    assert codes.shape == (2, 3) and codes.dtype == np.uint64
    assert codes[0].tolist() == [1, 1, 2] and codes[1].tolist() == [6, 0, 0]


def test_popcount():
    rng = np.random.default_rng(1)
    for x in rng.integers(0, 2 ** 63, 50, dtype=np.uint64).tolist() + [0, 2 ** 64 - 1]:
        assert int(popcount64(np.uint64(x))) == bin(x).count("1")


def test_index_memory_is_what_search_reads(data):
    codebook, database, _ = data
    agg = [codebook.aggregate(S) for S in database]
    full, binary = ASMKIndex(codebook, agg), ASMKIndex(codebook, agg, binary=True)
    n_entries = sum(len(a) for a in agg)
    assert full.n_entries == binary.n_entries == n_entries
    shared = n_entries * 4 + (codebook.n_words + 1) * 8 + codebook.n_words * 8 + len(database) * 8
    assert full.nbytes == shared + n_entries * D * 4       # float32 residuals
    assert binary.nbytes == shared + n_entries * D // 8    # 128 bits


def test_scaled_vocabulary_size():
    assert scaled_vocabulary_size(5063 * 3300) == 65536     # the paper's Oxford5k
    assert scaled_vocabulary_size(250 * 2258) == 2048       # paris6k-subset
    assert scaled_vocabulary_size(100) == 16


def test_bad_input_raises_named_errors(data):
    codebook, database, _ = data
    with pytest.raises(NotFittedError):
        ASMKCodebook(n_words=4).aggregate(database[0])
    with pytest.raises(ConfigError):
        ASMKCodebook(n_words=1)
    with pytest.raises(ConfigError):
        ASMKCodebook(n_words=10 ** 6).fit(database)
    with pytest.raises(EmptyDescriptorSetError):
        codebook.aggregate(np.zeros((0, D), np.float32))
    with pytest.raises(DimensionError):
        codebook.aggregate(np.ones((5, 64), np.float32))
    bad = database[0].copy()
    bad[0, 0] = np.nan
    with pytest.raises(NonFiniteError):
        codebook.aggregate(bad)
    with pytest.raises(ConfigError):
        codebook.aggregate(database[0], multiple_assignment=0)
    agg = [codebook.aggregate(S) for S in database]
    with pytest.raises(ConfigError):
        ASMKIndex(codebook, agg, tau=1.0)
    with pytest.raises(ConfigError):
        ASMKIndex(codebook, [])
    index = ASMKIndex(codebook, agg)
    with pytest.raises(DimensionError):
        index.scores(AggregatedSet(np.array([0]), np.ones((1, 64), np.float32)))


# --------------------------------------------------------------- real photos
def test_eval_asmk_on_paris_subset_cli(shared_data, capsys):
    """`streamk eval --method asmk` end to end on the 250 photos (a small codebook: cheap)."""
    import json

    from helpers.data import data_required

    from streamk.cli import main

    if not data_required():
        pytest.importorskip("pyhesaff")
    assert main(["eval", "--dataset", "paris6k-subset", "--method", "asmk", "--asmk-words", "256",
                 "--asmk-ma", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n_words"] == 256 and report["n_images"] == 250 and report["n_queries"] == 12
    rows = {r["method"]: r for r in report["rows"]}
    # each ASMK row has its second stage beside it (the top 100 spatially verified)
    assert list(rows) == ["ASMK 256 words", "ASMK 256 words +SP", "ASMK 256 words + MA3", "ASMK 256 words + MA3 +SP",
                          "ASMK* 256 words", "ASMK* 256 words +SP", "ASMK* 256 words + MA3",
                          "ASMK* 256 words + MA3 +SP"]
    for r in rows.values():
        # 11 queries with 32-48 positives among 250 images, one with 3: a random ranking scores about 0.16
        assert 0.5 <= r["map"] <= 1.0 and r["n_skipped"] == 0
        assert r["query_aggregate_ms"] > 0 and r["query_search_ms"] > 0
    full, binary = rows["ASMK 256 words"], rows["ASMK* 256 words"]
    assert full["entries_per_image"] == binary["entries_per_image"] > 50
    assert binary["bytes_per_image"] < full["bytes_per_image"] / 10      # 16 bytes against 512 per entry

"""Re-aggregation of an index under other settings, against per-image Encoder.encode."""

import numpy as np
import pytest

from streamk.pipeline import extract_many  # noqa: E402
from streamk.errors import ConfigError, DatasetImageError, NotFittedError
from streamk.demo.examples import open_example
from streamk.config import default_cache_dir
from streamk.quantization.ivfpq import IVFPQ
from streamk.pipeline.reaggregation import Reaggregator, Settings


@pytest.fixture(scope="module")
def example(small_example_dir):
    ex = open_example(directory=small_example_dir)
    yield ex
    ex.close()


def _reference(ex, s):
    """Database vectors by the plain path: an Encoder with these settings, one image at a time."""
    enc = ex.index.encoder.derive(aggregation=s.method, gamma=s.gamma, lam=s.lam, power=s.power)
    ids = ex.index.ids()
    paths = [ex.index.info(i)["source"] for i in ids]
    found, _ = extract_many(paths, ex.index.extractor(), default_cache_dir(), workers=1, progress=False)
    return ids, np.stack([enc.encode(found[p].descriptors) for p in paths])


@pytest.mark.parametrize("s", [Settings("democratic", 0.3, 1.0, 0.2), Settings("gmp", 0.5, 10.0, 0.5),
                               Settings("sum", 0.5, 1.0, 1.0)])
def test_database_vectors_match_per_image_encoding(example, s):
    ids, V = Reaggregator(example.index).database(s)
    ref_ids, ref = _reference(example, s)
    assert ids == ref_ids
    np.testing.assert_allclose(V, ref, atol=2e-5)


def test_search_ranks_by_inner_product(example):
    s = Settings("democratic", 0.5, 1.0, 0.5)
    r = Reaggregator(example.index)
    ext = example.index.extractor()
    X = ext.extract(example.dataset.query_image_path(0)).descriptors
    q, alpha = r.encode_query(X, s)
    assert alpha.shape == (len(X),)
    ids, V = _reference(example, s)
    enc = example.index.encoder.derive(aggregation="democratic")
    np.testing.assert_allclose(q, enc.encode(X), atol=2e-5)
    order = np.argsort(-(V @ q), kind="stable")
    hits = r.search(q, s, k=5)
    assert [h.id for h in hits] == [ids[i] for i in order[:5]]


def test_index_settings_use_the_stored_vectors(example):
    r = Reaggregator(example.index)
    s = r.index_settings()
    assert r.is_index_settings(s) and r.work_needed(s) == 0
    q = example.index.vector(example.index.ids()[0])
    assert [h.id for h in r.search(q, s, k=3)] == [i for i, _ in example.index.search(q, k=3)]
    assert r.passes == 0


def test_one_pass_serves_all_methods_and_exponents(example):
    r = Reaggregator(example.index)
    calls = []
    r.database(Settings("democratic", 0.5, 1.0, 0.5), progress=lambda *a: calls.append(a))
    assert r.passes == 1 and calls[-1][:2] == (2 * len(example.index), 2 * len(example.index))
    for s in (Settings("sum", 0.5, 1.0, 0.5), Settings("gmp", 0.5, 1.0, 0.2), Settings("democratic", 0.5, 1.0, 1.0)):
        assert r.work_needed(s) == 0
        r.database(s)
    assert r.passes == 1
    assert r.work_needed(Settings("democratic", 0.3, 1.0, 0.5)) == len(example.index)  # descriptors kept


def test_pq_mode_with_full_rerank_equals_exact(example, monkeypatch):
    r = Reaggregator(example.index)
    s = Settings("sum", 0.5, 1.0, 0.5)
    with pytest.raises(NotFittedError):
        r.search(np.ones(example.index.encoder.dim, np.float32), s, mode="pq")
    rng = np.random.default_rng(0)
    codec = IVFPQ(nlist=1, M=8, seed=0).fit(rng.standard_normal((300, example.index.encoder.dim)).astype(np.float32))
    monkeypatch.setattr(example.index, "codec", lambda: codec)
    ids, V = r.database(s)
    q = V[4]
    exact = r.search(q, s, k=4)
    assert [h.id for h in r.search(q, s, k=4, mode="pq", rerank=len(ids))] == [h.id for h in exact]
    assert exact[0].id == ids[4]


def test_missing_source_is_a_named_error(small_example_dir, tmp_path):
    import shutil

    copy = tmp_path / "ex"
    shutil.copytree(small_example_dir, copy)
    ex = open_example(directory=copy)
    try:
        # sources point into the original folder: remove one file of a copy of it
        src = ex.index.info(ex.index.ids()[0])["source"]
        moved = tmp_path / "moved.png"
        shutil.move(src, moved)
        try:
            with pytest.raises(DatasetImageError, match="cannot be read again"):
                Reaggregator(ex.index, cache_dir=str(tmp_path / "cache")).database(Settings("sum", 0.5, 1, 0.5))
        finally:
            shutil.move(moved, src)
    finally:
        ex.close()


def test_descriptor_images_cannot_be_reaggregated(tmp_path, example):
    from streamk.index import StreamingIndex

    idx = StreamingIndex.create(tmp_path / "i", example.index.encoder)
    try:
        X = example.index.extractor().extract(example.dataset.image_path(0)).descriptors
        idx.add("a", descriptors=X)
        with pytest.raises(ConfigError, match="added as descriptors"):
            Reaggregator(idx).database(Settings("sum", 0.5, 1, 0.5))
        with pytest.raises(ConfigError, match="offered up to 0 images"):
            Reaggregator(idx, max_images=0).database(Settings("sum", 0.5, 1, 0.5))
    finally:
        idx.close()

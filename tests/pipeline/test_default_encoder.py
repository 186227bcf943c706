"""``streamk index create my-index`` with neither --encoder nor --train: streamk's
default encoder (streamk.pipeline.bundled_encoder), learned on the shipped sample of
scikit-image's public-domain photos, then ingest and search a handful of images."""

import json

import pytest

from streamk import Encoder
from streamk.cli import main
from streamk.index import StreamingIndex
import streamk.pipeline.bundled_encoder as default_module

PIL = pytest.importorskip("PIL")
pytest.importorskip("pyhesaff")
from helpers.images import blobs  # noqa: E402
from PIL import Image  # noqa: E402


def test_shipped_sample_says_where_it_came_from():
    sets, meta = default_module.learning_sample()
    assert len(sets) == len(meta["photos"]) == 13
    assert [len(s) for s in sets] == [p["kept"] for p in meta["photos"]]
    assert all(p["terms"] and len(p["sha256"]) == 64 for p in meta["photos"])
    assert all(s.shape[1] == 128 and s.min() >= 0 and s.max() <= 255 for s in sets)  # SIFT, uint8 on disk


@pytest.fixture
def small_default(monkeypatch, tmp_path):
    """The default path with a smaller configuration (k = 4, fewer words), cached under
    tmp_path: the same code, seconds instead of a minute on a loaded machine."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(default_module, "DEFAULT_CONFIG", {"embedding": "temb", "k": 4, "aggregation": "gmp"})
    monkeypatch.setattr(default_module, "VOCABULARY_OPTIONS", {"seed": 0, "n_coarse": 8, "n_fine": 8})
    return tmp_path / "cache" / "streamk" / "default-encoder"


def test_index_create_without_encoder_uses_the_default(small_default, tmp_path, capsys):
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(4):
        Image.fromarray(blobs(seed=i)).save(photos / f"p{i}.png")
    ix = tmp_path / "my-index"
    assert main(["index", "create", str(ix)]) == 0
    out = capsys.readouterr()
    assert "default encoder" in out.out and "--train" in out.out
    cached = list(small_default.glob("*/encoder.npz"))
    assert len(cached) == 1  # fitted once, then read from the cache
    assert main(["index", "create", str(tmp_path / "second")]) == 0
    assert "fitting streamk's default encoder" not in capsys.readouterr().out
    with StreamingIndex.open(ix, readonly=True) as idx, StreamingIndex.open(tmp_path / "second", readonly=True) as b:
        assert idx.encoder.fingerprint == b.encoder.fingerprint
        assert idx.encoder.config.k == 4 and idx.encoder.config.embedding == "temb"
    assert main(["ingest", str(ix), str(photos), "--workers", "1"]) == 0
    capsys.readouterr()
    assert main(["search", str(ix), str(photos / "p2.png"), "-k", "2", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    hits = answer["results"] if isinstance(answer, dict) else answer
    assert str(hits[0]["id"]).endswith("p2.png")  # a photo finds itself first


def test_damaged_cache_is_fitted_again(small_default):
    folder = small_default / default_module._cache_key(default_module.sample_bytes())
    folder.mkdir(parents=True)
    (folder / "encoder.npz").write_bytes(b"not an npz")
    (folder / "vocabulary.npz").write_bytes(b"not an npz either")
    enc, voc = default_module.default_encoder()
    assert enc.fitted and enc.config.k == 4 and voc.n_words > 1
    assert Encoder.load(folder / "encoder.npz").fingerprint == enc.fingerprint  # rewritten

"""The Encoder: the whole pipeline, determinism, save/load, and the named
errors for bad input, bad config and bad files."""

import io
import json

import numpy as np
import pytest

from streamk.encoding.encoder import FORMAT, FORMAT_VERSION, Encoder, EncoderConfig
from streamk.errors import (ConfigError, DimensionError, EmptyDescriptorSetError, EncoderFileError,
                            NonFiniteError, NotFittedError, StreamkError)

D_IN = 16


def sift_like(rng, n, d=D_IN, centres=None):
    if centres is None:
        V = rng.gamma(0.6, 1.0, size=(n, d)) * (rng.random((n, d)) < 0.6)
    else:
        V = centres[rng.integers(len(centres), size=n)] + rng.gamma(0.3, 0.3, size=(n, d))
    return (V / (V.max(axis=1, keepdims=True) + 1e-9) * 255).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    centres = rng.gamma(0.6, 1.0, size=(6, D_IN))
    learning = [sift_like(rng, 80, centres=centres) for _ in range(12)]
    queries = [sift_like(rng, n, centres=centres) for n in (1, 5, 40)]
    # a bursty set: 30 near-copies of one descriptor among 20 others
    bursty = np.concatenate([np.repeat(queries[2][:1], 30, axis=0) + rng.uniform(0, 1, (30, D_IN)),
                             queries[2][:20]]).astype(np.float32)
    return learning, queries + [bursty]


CONFIGS = {
    "temb-gmp": dict(embedding="temb", k=4, aggregation="gmp"),
    "temb-dem": dict(embedding="temb", k=4, aggregation="democratic"),
    "temb-sum": dict(embedding="temb", k=4, aggregation="sum"),
    "fv-dem": dict(embedding="fv", k=3, aggregation="democratic"),
    "fvhard-gmp": dict(embedding="fv", k=3, embedding_params={"hard": True}, aggregation="gmp"),
    "vlad-dem": dict(embedding="vlad", k=4, aggregation="democratic", gamma=0.3),
    "bow-gmp": dict(embedding="bow", k=5, aggregation="gmp", rootsift=False),
    "temb-rn": dict(embedding="temb", k=3, aggregation="gmp", rn=True, rn_components=6, dim=20),
    "vlad-rn": dict(embedding="vlad", k=4, aggregation="democratic", rn=True),
}

DIMS = {"temb-gmp": 3 * D_IN, "temb-dem": 3 * D_IN, "temb-sum": 3 * D_IN, "fv-dem": 2 * 3 * D_IN,
        "fvhard-gmp": 2 * 3 * D_IN, "vlad-dem": 4 * D_IN, "bow-gmp": 5, "temb-rn": 20, "vlad-rn": 4 * D_IN}


@pytest.fixture(scope="module")
def encoders(data):
    learning, _ = data
    return {name: Encoder(**cfg).fit(learning) for name, cfg in CONFIGS.items()}


# ---------------------------------------------------------------- encoding


@pytest.mark.parametrize("name", list(CONFIGS))
def test_encode_unit_norm_float32_of_the_right_dim(encoders, data, name):
    enc = encoders[name]
    assert enc.dim == DIMS[name]
    for X in data[1]:
        v = enc.encode(X)
        assert v.dtype == np.float32 and v.shape == (DIMS[name],)
        assert np.linalg.norm(v.astype(np.float64)) == pytest.approx(1.0, abs=1e-5)
        v2, alpha = enc.encode(X, return_weights=True)
        np.testing.assert_array_equal(v2, v)
        assert alpha.shape == (len(X),)
    many = enc.encode_many(data[1])
    assert many.shape == (len(data[1]), DIMS[name])
    for i, X in enumerate(data[1]):
        np.testing.assert_array_equal(many[i], enc.encode(X))


def numpy_rootsift(X):
    X = np.asarray(X, dtype=np.float64)
    return np.sqrt(X / X.sum(axis=1, keepdims=True))


def numpy_sinkhorn(K, gamma, n_iter):
    Kp = np.maximum(K, 0.0)
    alpha = np.ones(len(K))
    for _ in range(n_iter):
        alpha = alpha / (alpha * (Kp @ alpha)) ** gamma
    return alpha


def test_encode_is_the_paper_pipeline(encoders, data):
    """RootSIFT -> phi -> democratic weights -> xi = Phi^T alpha -> power-law -> L2,
    with everything but the learned embedding written out in numpy."""
    enc = encoders["temb-dem"]
    X = data[1][3]
    Phi = enc.embedding.transform(numpy_rootsift(X).astype(np.float32)).astype(np.float64)
    alpha = numpy_sinkhorn(Phi @ Phi.T, enc.config.gamma, enc.config.n_iter)
    xi = Phi.T @ alpha
    v = np.sign(xi) * np.sqrt(np.abs(xi))
    v /= np.linalg.norm(v)
    v_enc, alpha_enc = enc.encode(X, return_weights=True)
    np.testing.assert_allclose(alpha_enc, alpha, rtol=1e-4)
    np.testing.assert_allclose(v_enc, v, atol=1e-5)


def test_encode_gmp_pipeline(encoders, data):
    enc = encoders["temb-gmp"]
    X = data[1][3]
    Phi = enc.embedding.transform(numpy_rootsift(X).astype(np.float32)).astype(np.float64)
    alpha = np.linalg.solve(Phi @ Phi.T + enc.config.lam * np.eye(len(X)), np.ones(len(X)))
    xi = Phi.T @ alpha
    v = np.sign(xi) * np.sqrt(np.abs(xi))
    v /= np.linalg.norm(v)
    v_enc, alpha_enc = enc.encode(X, return_weights=True)
    np.testing.assert_allclose(alpha_enc, alpha, rtol=1e-3, atol=1e-5 * np.abs(alpha).max())
    np.testing.assert_allclose(v_enc, v, atol=1e-4)


def test_rootsift_option(encoders, data):
    """rootsift=False feeds the raw descriptors: BOW counts of the raw SIFT."""
    enc = encoders["bow-gmp"]
    X = data[1][2]
    C = enc.embedding.centroids_.astype(np.float64)
    a = np.argmin(((X[:, None, :].astype(np.float64) - C[None]) ** 2).sum(-1), axis=1)
    counts = np.bincount(a, minlength=5)
    assert len(set(counts)) > 2  # counts differ: presence and counts tell apart
    # GMP with lambda = 1 on BOW: alpha = 1 / (n_j + 1), xi_j = n_j / (n_j + 1); then sqrt, L2
    v = np.sqrt(counts / (counts + 1.0))
    np.testing.assert_allclose(enc.encode(X), v / np.linalg.norm(v), atol=1e-5)
    # lambda -> 0: max pooling (presence); power-law keeps a binary vector binary
    presence = counts > 0
    np.testing.assert_allclose(enc.derive(lam=1e-6).encode(X), presence / np.sqrt(presence.sum()), atol=1e-5)


def test_on_empty_zero(data):
    enc = Encoder(embedding="vlad", k=4, aggregation="gmp", on_empty="zero").fit(data[0])
    for empty in (np.zeros((0, D_IN), np.float32), np.zeros((0, D_IN)), []):
        v = enc.encode(empty)
        assert v.dtype == np.float32 and v.shape == (enc.dim,)
        np.testing.assert_array_equal(v, 0.0)
        v, alpha = enc.encode(empty, return_weights=True)
        assert alpha.shape == (0,)
    assert np.linalg.norm(enc.encode(data[1][0])) == pytest.approx(1.0, abs=1e-5)


# ---------------------------------------------------------------- determinism, derive


@pytest.mark.parametrize("name", ["temb-gmp", "fv-dem", "vlad-rn"])
def test_fit_is_deterministic(encoders, data, name):
    enc2 = Encoder(**CONFIGS[name]).fit(data[0])
    assert enc2.fingerprint == encoders[name].fingerprint
    for X in data[1]:
        np.testing.assert_array_equal(enc2.encode(X), encoders[name].encode(X))


def test_seed_changes_the_fit(encoders, data):
    enc = Encoder(**CONFIGS["vlad-dem"], embedding_params={"seed": 7}).fit(data[0])
    assert enc.fingerprint != encoders["vlad-dem"].fingerprint


def test_derive_equals_a_fresh_fit(encoders, data):
    _, queries = data
    derived = encoders["temb-gmp"].derive(aggregation="democratic")
    assert derived.fingerprint == encoders["temb-dem"].fingerprint
    for X in queries:
        np.testing.assert_array_equal(derived.encode(X), encoders["temb-dem"].encode(X))
    with pytest.raises(ConfigError):
        encoders["temb-gmp"].derive(k=5)
    with pytest.raises(ConfigError):
        encoders["temb-gmp"].derive(rn=True)  # RN must be learned on learning sets


# ---------------------------------------------------------------- save / load


@pytest.mark.parametrize("name", ["temb-gmp", "fvhard-gmp", "bow-gmp", "temb-rn"])
def test_save_load_round_trip(encoders, data, tmp_path, name):
    enc = encoders[name]
    path = tmp_path / "enc.npz"
    enc.save(path)
    for loaded in (Encoder.from_bytes(enc.to_bytes()), Encoder.load(path)):
        assert loaded.fitted
        assert loaded.fingerprint == enc.fingerprint
        assert loaded.config == enc.config
        assert loaded.dim == enc.dim
        for X in data[1]:
            np.testing.assert_array_equal(loaded.encode(X), enc.encode(X))
    # plain .npz, readable without unpickling
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["__meta__"]))
    assert meta["format"] == FORMAT and meta["version"] == FORMAT_VERSION
    assert all(a.dtype != object for a in arrays.values())


def test_fingerprint_differs_between_configs(encoders):
    prints = {enc.fingerprint for enc in encoders.values()}
    assert len(prints) == len(encoders)


def _npz_bytes(**arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _rewrite(enc, meta_change=None, drop=None, meta_raw=None):
    with np.load(io.BytesIO(enc.to_bytes()), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["__meta__"]))
    if meta_change:
        meta_change(meta)
    arrays["__meta__"] = np.array(meta_raw if meta_raw is not None else json.dumps(meta))
    for name in drop or ():
        del arrays[name]
    return _npz_bytes(**arrays)


def test_bad_files_raise_encoder_file_error(encoders, tmp_path):
    enc = encoders["temb-gmp"]
    good = enc.to_bytes()

    def set_version(m):
        m["version"] = FORMAT_VERSION + 1

    def set_format(m):
        m["format"] = "something-else"

    def bad_config(m):
        m["config"]["no_such_option"] = 1

    def bad_embedding(m):
        m["config"]["embedding"] = "sift"

    npy = io.BytesIO()
    np.save(npy, np.arange(3))
    pickled = io.BytesIO()
    np.savez(pickled, __meta__=np.array([{"format": FORMAT}], dtype=object))
    bad = {
        "empty": b"",
        "garbage": b"not a zip file at all" * 10,
        "truncated": good[: len(good) // 2],
        "truncated-end": good[:-10],
        "foreign npz": _npz_bytes(x=np.arange(4)),
        "npy": npy.getvalue(),
        "pickled meta": pickled.getvalue(),
        "wrong version": _rewrite(enc, set_version),
        "wrong format tag": _rewrite(enc, set_format),
        "meta not json": _rewrite(enc, meta_raw="{not json"),
        "meta not a dict": _rewrite(enc, meta_raw="[1, 2]"),
        "unknown config key": _rewrite(enc, bad_config),
        "bad config value": _rewrite(enc, bad_embedding),
        "missing array": _rewrite(enc, drop=["embedding.projection_"]),
    }
    for what, blob in bad.items():
        with pytest.raises(EncoderFileError):
            Encoder.from_bytes(blob)
        path = tmp_path / "bad.npz"
        path.write_bytes(blob)
        with pytest.raises(EncoderFileError):
            Encoder.load(path)
    with pytest.raises(EncoderFileError):
        Encoder.load(tmp_path / "does-not-exist.npz")
    # the good bytes still load
    assert Encoder.from_bytes(good).fingerprint == enc.fingerprint


# ---------------------------------------------------------------- errors


def test_bad_descriptor_sets_raise_named_errors(encoders):
    enc = encoders["temb-gmp"]
    with pytest.raises(EmptyDescriptorSetError):
        enc.encode(np.zeros((0, D_IN), np.float32))
    with pytest.raises(EmptyDescriptorSetError):
        enc.encode([])
    for bad in (np.nan, np.inf, -np.inf):
        X = np.ones((4, D_IN), np.float32)
        X[2, 3] = bad
        with pytest.raises(NonFiniteError):
            enc.encode(X)
    with pytest.raises(DimensionError):
        enc.encode(np.ones((4, D_IN + 1), np.float32))
    with pytest.raises(DimensionError):
        enc.encode(np.ones(D_IN, np.float32))
    with pytest.raises(DimensionError):
        enc.encode(np.array([["a"] * D_IN]))
    with pytest.raises(DimensionError):
        enc.encode([[1.0] * D_IN, [1.0] * (D_IN - 1)])  # ragged
    # all are StreamkErrors and ValueErrors
    with pytest.raises(StreamkError):
        enc.encode(np.ones((4, 3)))
    with pytest.raises(ValueError):
        enc.encode(np.ones((4, 3)))


def test_unfitted_encoder_raises():
    enc = Encoder(embedding="vlad", k=4)
    assert not enc.fitted
    X = np.ones((3, D_IN), np.float32)
    for call in (lambda: enc.encode(X), lambda: enc.encode_many([X]), lambda: enc.dim, enc.to_bytes,
                 lambda: enc.fingerprint, lambda: enc.aggregate_methods(X), lambda: enc.derive(aggregation="sum")):
        with pytest.raises(NotFittedError):
            call()


def test_fit_errors(data):
    with pytest.raises(EmptyDescriptorSetError):
        Encoder(embedding="vlad", k=4).fit([])
    with pytest.raises(EmptyDescriptorSetError):
        Encoder(embedding="vlad", k=4).fit([np.zeros((0, D_IN))])
    with pytest.raises(NonFiniteError):
        Encoder(embedding="vlad", k=4).fit([np.full((10, D_IN), np.nan)])
    with pytest.raises(ConfigError):
        Encoder(embedding="vlad", k=4).fit([np.ones((10, D_IN)), np.ones((10, D_IN + 2))])
    with pytest.raises(ConfigError):
        Encoder(embedding="temb", k=1).fit(data[0])


@pytest.mark.parametrize("bad", [
    {"embedding": "sift"}, {"aggregation": "max"}, {"gamma": 0.0}, {"gamma": 2.0}, {"n_iter": 0},
    {"lam": 0.0}, {"lam": -1.0}, {"power": -0.5}, {"power": float("nan")}, {"dim": 10},
    {"on_empty": "skip"}, {"k": 0}, {"rn": True, "rn_components": 0}, {"rn": True, "dim": 0},
    {"no_such_option": 1}, {"embedding_params": {"clamp_quantile": 1.5}},
])
def test_bad_config_raises_config_error(bad):
    with pytest.raises(ConfigError):
        Encoder(**bad)


def test_config_object_and_dict_are_accepted():
    cfg = EncoderConfig(embedding="vlad", k=4, aggregation="democratic")
    assert Encoder(cfg).config == cfg
    assert Encoder({"embedding": "vlad", "k": 4, "aggregation": "democratic"}).config == cfg
    assert Encoder(cfg, gamma=0.25).config.gamma == 0.25


def test_an_encoder_says_what_it_is():
    """Its repr was `<streamk.encoding.encoder.Encoder object at 0x...>`."""
    import numpy as np

    from streamk import Encoder

    enc = Encoder(embedding="vlad", k=4, aggregation="gmp")
    assert repr(enc) == "Encoder(embedding='vlad', k=4, aggregation='gmp', power=0.5, rn=False, not fitted)"
    enc.fit([np.random.default_rng(0).integers(0, 120, (80, 128)).astype(np.float32)])
    assert repr(enc) == (f"Encoder(embedding='vlad', k=4, aggregation='gmp', power=0.5, rn=False, dim={enc.dim}, "
                         f"fingerprint={enc.fingerprint[:12]!r})")

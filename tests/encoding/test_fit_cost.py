"""A fit's cost stated before it is paid (streamk.encoding.fit_cost), float16 storage of
the encoder's big matrices, and the warning for RN learned on too few images."""

import io
import warnings

import numpy as np
import pytest

from streamk import Encoder
from streamk.encoding import fit_cost
from streamk.errors import ConfigError, FewRNImagesWarning


def scenes(n_scenes=6, per_image=120, views=2, seed=0):
    """Synthetic SIFT-like sets: each scene's descriptors are noisy copies of its own 128-d
    patterns, so that the views of one scene match each other and nothing else."""
    rng = np.random.default_rng(seed)
    sets, labels = [], []
    for s in range(n_scenes):
        patterns = rng.gamma(0.6, 30.0, (per_image, 128))
        for _ in range(views):
            sets.append(np.clip(patterns + rng.normal(0, 3.0, patterns.shape), 0, None).astype(np.float32))
            labels.append(s)
    return sets, np.array(labels)


# ---------------------------------------------------------------- the flop count
def test_flop_count_follows_the_shapes():
    n, k, d = 50_000, 16, 128
    kd, D = k * d, (k - 1) * d
    cost = Encoder(embedding="temb", k=k, rn=True).fit_cost(n, n_images=20, d=d)
    assert cost.covariance_flops == 2 * n * kd ** 2  # R^T R on every row (n < max_whiten_descriptors)
    assert cost.eigh_order == kd and cost.eigh_flops == fit_cost.EIGH_FLOPS_PER_N3 * kd ** 3
    assert cost.kmeans_flops == 2 * n * k * d * fit_cost.KMEANS_ITERATIONS
    assert cost.rn_flops == 2 * n * kd * D  # every learning image embedded once
    # the subsamples: k-means on max_fit_descriptors, the covariance on max_whiten_descriptors rows
    big = Encoder(embedding="temb", k=k).fit_cost(10 ** 6, d=d)
    assert big.kmeans_flops == 2 * 200_000 * k * d * fit_cost.KMEANS_ITERATIONS
    assert big.covariance_flops == 2 * 100_000 * kd ** 2
    assert big.rn_flops == 0
    # the figures of issue 26: k = 64 on 40,667 descriptors, a 8,192 x 8,064 float32 whitening
    k64 = Encoder(embedding="temb", k=64).fit_cost(40_667)
    assert k64.eigh_order == 8192 and k64.covariance_flops == 2 * 40_667 * 8192 ** 2
    assert abs(k64.encoder_bytes - 4 * 8192 * 8064) < 0.001 * k64.encoder_bytes  # ~265 MB
    assert abs(k64.encoder_bytes_float16 - 2 * 8192 * 8064) < 0.002 * k64.encoder_bytes_float16


def test_seconds_scale_the_measured_rates():
    rates = fit_cost.MachineRates(gemm64=1e10, gemm32=2e10, eigh=5e9, eigh_order=512)
    cost = fit_cost.FitCost("x", kmeans_flops=1e10, covariance_flops=3e10, eigh_order=1000, rn_flops=4e10)
    stages = cost.stage_seconds(rates)
    assert stages == pytest.approx({"k-means": 1.0, "covariance": 3.0, "eigh": 9e9 / 5e9, "RN vectors": 2.0})
    assert cost.seconds(rates) == pytest.approx(7.8)
    assert "8 s" in cost.describe(rates)


@pytest.mark.parametrize("config", [dict(embedding="temb", k=4), dict(embedding="temb", k=3, rn=True),
                                    dict(embedding="vlad", k=4), dict(embedding="fv", k=3)])
def test_stated_size_is_the_file_size(config):
    sets, _ = scenes(n_scenes=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewRNImagesWarning)
        enc = Encoder(**config).fit(sets, verbose=False)
    n = sum(len(s) for s in sets)
    stated = enc.fit_cost(n, n_images=len(sets)).encoder_bytes
    assert abs(stated - len(enc.to_bytes())) <= 4096  # the npz's headers
    assert abs(enc.stored_bytes() - len(enc.to_bytes())) <= 4096
    assert abs(enc.stored_bytes("float16") - len(enc.to_bytes("float16"))) <= 4096


# ---------------------------------------------------------------- progress
def test_long_fit_states_its_cost_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    sets, _ = scenes(n_scenes=2)
    monkeypatch.setattr(fit_cost, "LONG_FIT_SECONDS", 0.0)  # every fit is "long"
    monkeypatch.setattr(fit_cost, "_NEVER_LONG_FLOPS", 0.0)  # even this small one
    enc = Encoder(embedding="temb", k=3).fit(sets)  # verbose=None: shown when long
    err = capsys.readouterr().err  # captured: not a terminal
    assert "streamk: fitting T-emb k=3 on 480 descriptors" in err and "estimated" in err
    assert "GFLOP" in err and "eigendecomposition 384 x 384" in err
    assert f"the encoder takes {enc.stored_bytes() / 1024:.1f} KiB on disk" in err  # binary units, as the CLI's
    Encoder(embedding="temb", k=3).fit(sets, verbose=False)
    assert capsys.readouterr().err == ""


def test_short_fit_is_silent(capsys):
    sets, _ = scenes(n_scenes=2)
    Encoder(embedding="temb", k=3).fit(sets)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- float16 storage
def test_float16_storage_round_trip_and_ranking():
    sets, labels = scenes()
    enc = Encoder(embedding="temb", k=4, aggregation="gmp").fit(sets[::2], verbose=False)
    data32, data16 = enc.to_bytes(), enc.to_bytes("float16")
    P = enc.embedding.projection_
    assert len(data32) - len(data16) == pytest.approx(P.nbytes / 2, abs=4096)
    with np.load(io.BytesIO(data16)) as npz:
        assert npz["embedding.projection_"].dtype == np.float16
        assert npz["embedding.centroids_"].dtype == np.float32  # only the big matrices
    back = Encoder.from_bytes(data16)
    assert back.embedding.projection_.dtype == np.float32
    np.testing.assert_array_equal(back.embedding.projection_, P.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(Encoder.from_bytes(data32).embedding.projection_, P)
    # the float32 file is the encoder as fitted; the float16 one gives nearly the same vectors
    # (component-wise they may differ more: the power-law's square root magnifies changes near 0)
    V32 = enc.encode_many(sets)
    V16 = back.encode_many(sets)
    assert (np.einsum("ij,ij->i", V32, V16) > 0.99).all()
    rank32 = np.argsort(-(V32 @ V32.T), axis=1, kind="stable")
    rank16 = np.argsort(-(V16 @ V16.T), axis=1, kind="stable")
    np.testing.assert_array_equal(rank32[:, :2], rank16[:, :2])  # itself, then the scene's other view
    assert (labels[rank16[:, 1]] == labels).all()


def test_storage_name_is_checked(tmp_path):
    enc = Encoder(embedding="vlad", k=2).fit(scenes(n_scenes=1)[0], verbose=False)
    with pytest.raises(ConfigError, match="storage"):
        enc.save(tmp_path / "e.npz", storage="int8")


# ---------------------------------------------------------------- RN on too few images
def test_rn_on_few_images_warns_with_the_number():
    sets, _ = scenes(n_scenes=3)  # 6 images
    # D = (3 - 1) 128 = 256 components asked for
    with pytest.warns(FewRNImagesWarning, match=r"RN learned on 6 image vectors: .* at most 5 of the 256 "):
        Encoder(embedding="temb", k=3, rn=True).fit(sets, verbose=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FewRNImagesWarning)
        Encoder(embedding="temb", k=3, rn=True, rn_components=5).fit(sets, verbose=False)  # 5 of 5: no warning


def test_machine_rates_are_measured_again_when_old(monkeypatch):
    """A long-lived process does not keep a rate measured at a bad moment for good."""
    measured = []

    def measure(*sizes):
        measured.append(sizes)
        return fit_cost.MachineRates(gemm64=float(len(measured)), gemm32=1.0, eigh=1.0, eigh_order=sizes[2])

    monkeypatch.setattr(fit_cost, "_measure_rates", measure)
    monkeypatch.setattr(fit_cost, "_last_rates", None)
    monkeypatch.setattr(fit_cost, "RATES_MAX_AGE_SECONDS", 3600.0)
    first = fit_cost.machine_rates()
    assert fit_cost.machine_rates() is first and len(measured) == 1  # fresh: reused
    monkeypatch.setattr(fit_cost, "RATES_MAX_AGE_SECONDS", 0.0)
    again = fit_cost.machine_rates()
    assert len(measured) == 2 and again.gemm64 == 2.0  # old: measured again
    small = fit_cost.machine_rates(64, 32, 16)
    assert measured[-1] == (64, 32, 16) and small.eigh_order == 16


def test_machine_rates_measure_this_machine():
    r = fit_cost._measure_rates(256, 64, 32)
    assert r.eigh_order == 32 and all(v > 0 and np.isfinite(v) for v in (r.gemm64, r.gemm32, r.eigh))


def test_a_fit_that_cannot_fit_in_memory_is_refused_before_it_starts(monkeypatch):
    """A T-emb's whitening holds float64 (k d)^2 arrays: k = 256 asks for some 50 GB and was
    killed by the system (or swapped) hours into its covariance. The peak is counted from
    the shapes (WHITENING_PEAK_ARRAYS covariances) and checked against this machine's memory
    before anything is allocated for it or the estimate is shown."""
    cost = Encoder(embedding="temb", k=64).fit_cost(40_000)
    assert cost.eigh_order == 64 * 128
    assert cost.peak_bytes == fit_cost.WHITENING_PEAK_ARRAYS * 8 * (64 * 128) ** 2
    assert "of memory" in cost.describe(fit_cost.MachineRates(1e11, 1e11, 1e9, 512))
    fit_cost.check_fits_in_memory(cost, limit=cost.peak_bytes)  # exactly enough: fits
    with pytest.raises(ConfigError, match=r"needs about 3\.0 GiB of memory .* than the 953\.7 MiB here.* k <= 35 fits"):
        fit_cost.check_fits_in_memory(cost, limit=10**9)
    peak = [Encoder(embedding="temb", k=k).fit_cost(40_000).peak_bytes for k in (35, 36)]
    assert peak[0] <= 10**9 < peak[1]  # the k it names is the largest that fits
    assert Encoder(embedding="vlad", k=64).fit_cost(40_000).peak_bytes == 0  # no whitening: nothing to check
    limit = fit_cost.memory_limit_bytes()
    assert limit is None or limit > 10**8
    rng = np.random.default_rng(0)
    sets = [rng.random((200, 128)).astype(np.float32) for _ in range(3)]
    monkeypatch.setattr(fit_cost, "memory_limit_bytes", lambda: 10**6)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    with pytest.raises(ConfigError, match="more than the 976.6 KiB here"):
        Encoder(embedding="temb", k=8).fit(sets, verbose=True)
    assert err.getvalue() == ""  # refused before the estimate and the progress bar


def test_too_few_descriptors_for_k_is_said_before_the_estimate(monkeypatch):
    rng = np.random.default_rng(1)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    with pytest.raises(ConfigError, match="need at least k=50 learning descriptors, got 30"):
        Encoder(embedding="temb", k=50).fit([rng.random((30, 128))], verbose=True)
    assert err.getvalue() == ""

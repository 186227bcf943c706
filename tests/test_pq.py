"""Product quantisation: codes, reconstruction and ADC scores against plain numpy."""

import numpy as np
import pytest

from streamk.errors import ConfigError, NotFittedError
from streamk.pq import ProductQuantizer


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

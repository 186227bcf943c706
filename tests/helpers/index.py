"""Small encoders, descriptor sets and clustered unit vectors shared by the index tests."""

import numpy as np

from streamk.encoding import Encoder

DIM = 64


def make_encoder():
    """A BOW encoder of DIM dimensions (the tests add vectors, never descriptors)."""
    rng = np.random.default_rng(0)
    sets = [rng.integers(0, 256, (40, 128)).astype(np.float32) for _ in range(6)]
    return Encoder(embedding="bow", k=DIM, aggregation="sum").fit(sets)


def vectors(seed, n):
    """n unit vectors drawn around 8 fixed centres (near neighbours exist, as in images)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((8, DIM))
    V = centres[rng.integers(0, 8, n)] + 0.4 * rng.standard_normal((n, DIM))
    return (V / np.linalg.norm(V, axis=1, keepdims=True)).astype(np.float32)


def sift_sets(seed, count, n=50):
    """``count`` random SIFT-like descriptor sets of ``n`` rows (float32)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (n, 128)).astype(np.float32) for _ in range(count)]


def vlad_encoder(n_sets=12, n=50):
    """A small VLAD k=4 GMP encoder (the tests that add descriptor sets)."""
    return Encoder(embedding="vlad", k=4, aggregation="gmp").fit(sift_sets(0, n_sets, n))


def unit(rng, n, d):
    """n random unit vectors of dimension d."""
    V = rng.standard_normal((n, d))
    return V / np.linalg.norm(V, axis=1, keepdims=True)

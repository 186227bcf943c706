"""Synthetic SIFT-like descriptor sets with bursts, for demos, tests and benchmarks.

A "scene" is a set of distinctive object descriptors plus a burst: many
near-duplicates of one repeated texture (windows, foliage...).  Textures are
shared across unrelated scenes, so sum pooling is drawn to the texture while
democratic and GMP aggregation keep the object descriptors audible.
"""

from dataclasses import dataclass

import numpy as np


def sift_like(rng, n, d=128):
    """Non-negative, sparse-ish vectors with SIFT's scale (components 0..255)."""
    V = rng.gamma(0.6, 1.0, size=(n, d)) * (rng.random((n, d)) < 0.6)
    return V / (V.max(axis=1, keepdims=True) + 1e-9) * 255


def jitter(rng, V, noise):
    """Perturbed copies of V (same scale, stays non-negative)."""
    return np.clip(V + rng.normal(0.0, noise * 255, size=V.shape), 0.0, 255.0)


@dataclass
class SyntheticCollection:
    database: list  # descriptor sets (n_i x d, float32)
    queries: list
    positives: list  # for each query, database indices of the same scene
    learning: list  # a distinct learning set of descriptor sets


def make_collection(n_scenes=40, views=3, n_queries=20, n_object=80, burst_size=150, n_textures=8,
                    d=128, noise=0.08, n_learning=60, seed=0):
    """Scenes viewed ``views`` times in the database; each query is another view
    of one scene, with a burst of a texture drawn at random (usually foreign)."""
    rng = np.random.default_rng(seed)
    textures = sift_like(rng, n_textures, d)

    def view(objects, keep=0.7):
        idx = rng.random(len(objects)) < keep
        texture = textures[rng.integers(n_textures)]
        burst = jitter(rng, np.repeat(texture[None], rng.integers(burst_size // 2, burst_size), 0), noise / 6)
        return np.concatenate([jitter(rng, objects[idx], noise), burst]).astype(np.float32)

    scenes = [sift_like(rng, n_object, d) for _ in range(n_scenes)]
    database, scene_of = [], []
    for s, objects in enumerate(scenes):
        for _ in range(views):
            database.append(view(objects))
            scene_of.append(s)
    scene_of = np.array(scene_of)
    query_scenes = rng.choice(n_scenes, size=n_queries, replace=n_queries > n_scenes)
    queries = [view(scenes[s]) for s in query_scenes]
    positives = [np.flatnonzero(scene_of == s) for s in query_scenes]
    learning = [view(sift_like(rng, n_object, d)) for _ in range(n_learning)]
    return SyntheticCollection(database, queries, positives, learning)

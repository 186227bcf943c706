"""The second stage's kernels compiled (or loaded from Numba's cache) ahead of a first search.

Numba compiles a kernel for the machine's CPU the first time it runs and caches it on disk.
The second stage's are the largest of streamk (``verify_batch`` inlines the matching, the
search, the local optimisation and the clump check): ~30 s of a first verified search on a
2-core Xeon, every later one loading them in milliseconds. :func:`warm_kernels` runs them
once on a small synthetic pair, through the same public functions and with the same array
types as a search (tests/verification/test_warm.py checks that a search then compiles
nothing), so that the compilation can happen where nobody waits for it
(:class:`streamk.pipeline.KernelWarmUp` runs it in a child process beside other work).
"""

import numpy as np

N_FEATURES = 64  # features of each synthetic image: enough tentative matches to run every step
IMAGE_SIZE = (200, 160)


def warm_kernels(seed=0):
    """Compile (or load) the kernels of a verified search: the vocabulary's learning and
    assignment, the records, the batch verification and the inliers' positions. Returns the
    synthetic pair's :class:`~streamk.verification.Verification` (it verifies: the candidate
    is the query's features moved by a similarity)."""
    from .records import make_query_record, stored_record
    from .spatial import verify_geometry
    from .vocabulary import Vocabulary

    rng = np.random.default_rng(seed)
    descriptors = rng.integers(0, 64, (N_FEATURES, 128)).astype(np.uint8)
    vocabulary = Vocabulary(n_coarse=2, n_fine=4, min_per_word=1, max_iter=2, min_he_samples=1, seed=seed)
    vocabulary.fit(descriptors)
    w, h = IMAGE_SIZE
    kp = np.zeros((N_FEATURES, 6), np.float32)
    kp[:, 0] = rng.uniform(10, w - 10, N_FEATURES)
    kp[:, 1] = rng.uniform(10, h - 10, N_FEATURES)
    kp[:, 2] = kp[:, 4] = rng.uniform(2.0, 6.0, N_FEATURES)
    moved = kp.copy()
    moved[:, :2] = 0.9 * kp[:, :2] + 5.0  # the same scene, a little smaller and shifted
    moved[:, 2] *= 0.9
    moved[:, 4] *= 0.9
    query = make_query_record(vocabulary, kp, descriptors, IMAGE_SIZE)
    candidate = stored_record(vocabulary, moved, descriptors, IMAGE_SIZE)
    return verify_geometry(query, [candidate], return_pairs=True)[0]


__all__ = ["warm_kernels"]

"""warm_kernels: the second stage compiled ahead of a first search, with the search's own types."""

import numpy as np

from streamk.demo.examples import open_example
from streamk.verification import warm_kernels


def _dispatchers():
    """Every Numba dispatcher of the second stage's kernel modules, by name."""
    from streamk.verification import (_matching_kernels, _ransac_kernels, _records_kernels,  # noqa: PLC2701
                                      _vocabulary_kernels)

    found = {}
    for module in (_matching_kernels, _ransac_kernels, _records_kernels, _vocabulary_kernels):
        for name, value in vars(module).items():
            if hasattr(value, "signatures") and hasattr(value, "py_func"):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_the_synthetic_pair_verifies():
    v = warm_kernels()
    assert v.verified and v.why is None
    assert v.inliers >= 32  # of 64 features moved by one similarity: most agree one-to-one
    assert v.pairs is not None and len(v.pairs) == v.inliers
    np.testing.assert_allclose(v.affine[:, :2], 0.9 * np.eye(2), atol=0.05)


def test_a_verified_search_after_it_compiles_no_other_kernel(small_example_dir):
    warm_kernels()
    before = {name: len(d.signatures) for name, d in _dispatchers().items()}
    ex = open_example(directory=small_example_dir, progress=False)
    try:
        first = ex.index.ids()[0]
        results = ex.index.search(ex.index.info(first)["source"], k=3)
        assert results[0].id == first and results[0].verified  # the second stage ran
    finally:
        ex.close()
    after = {name: len(d.signatures) for name, d in _dispatchers().items()}
    grown = sorted(name for name in after if after[name] > before.get(name, 0))
    assert not grown, f"a search compiled kernels that warm_kernels did not: {grown}"

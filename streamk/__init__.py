"""streamk: image retrieval with democratic and generalised-max-pooling match
kernels (Murray, Jegou, Perronnin, Zisserman, "Interferences in match kernels",
TPAMI 2016), as a streaming index searched from Python, the command line, a
notebook or a browser.

The names a user needs are here; everything else is in its stage's package:
``streamk.features``, ``streamk.encoding``, ``streamk.quantization``,
``streamk.datasets``, ``streamk.parallel``, ``streamk.index``,
``streamk.pipeline``, ``streamk.evaluation``, ``streamk.widgets``,
``streamk.demo``. Importing streamk loads none of them: each name is imported on
first use, so ``import streamk`` is instant.
"""

import importlib
import os
import warnings
from typing import TYPE_CHECKING

# Per-image work alternates BLAS calls (OpenBLAS threads) and Numba parallel
# kernels (OpenMP threads).  Threads of either pool that spin-wait after their
# work steal the cores the other pool needs: 20x slower on small images with 2
# cores.  Sleeping idle threads cost microseconds instead.  Set before numpy
# and Numba load their thread pools; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from . import errors  # noqa: E402  (after the thread policies)

__version__ = "0.2.0"

# name -> the package that defines it
_PUBLIC = {
    "Encoder": "streamk.encoding",
    "StreamingIndex": "streamk.index",
    "ShardedIndex": "streamk.index",
    "open_index": "streamk.index",
    "SearchParams": "streamk.index",
    "Index": "streamk.index",
    "Ingester": "streamk.pipeline",
    "train_encoder": "streamk.pipeline",
    "create_index": "streamk.pipeline",
    "extract": "streamk.features",
    "make_extractor": "streamk.features",
    "load_dataset": "streamk.datasets",
    "evaluate": "streamk.evaluation",
}

# streamk 0.1's top-level names, kept for one release (0.2) with a DeprecationWarning
_DEPRECATED = {name: "streamk.encoding" for name in (
    "aggregate", "democratic_weights", "gmp_primal", "gmp_weights", "BagOfWords", "BlockEmbedding",
    "FisherVector", "TriangulationEmbedding", "VLAD", "rootsift", "EncoderConfig", "RotationNormalisation",
    "l2_normalize", "postprocess", "power_law")}
_DEPRECATED.update({name: "streamk.errors" for name in (
    "ConfigError", "DimensionError", "EmptyDescriptorSetError", "EncoderFileError", "EncoderMismatchError",
    "NonFiniteError", "NotFittedError", "StreamkError")})

__all__ = sorted(_PUBLIC) + ["errors", "__version__"]

# What a type checker sees of the lazy names above (streamk ships py.typed). From the
# packages' TYPE_CHECKING blocks (streamk.exports).
if TYPE_CHECKING:
    from .datasets import load_dataset as load_dataset
    from .encoding import Encoder as Encoder
    from .evaluation import evaluate as evaluate
    from .features import extract as extract, make_extractor as make_extractor
    from .index import (Index as Index, SearchParams as SearchParams, ShardedIndex as ShardedIndex,
                        StreamingIndex as StreamingIndex, open_index as open_index)
    from .pipeline import Ingester as Ingester, create_index as create_index, train_encoder as train_encoder


def __getattr__(name):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # the next look-up is a plain attribute
        return value
    if name in _DEPRECATED:
        where = _DEPRECATED[name]
        warnings.warn(f"streamk.{name} is deprecated and will be removed after streamk 0.2: use "
                      f"{where}.{name}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where), name)
    raise AttributeError(f"module 'streamk' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))

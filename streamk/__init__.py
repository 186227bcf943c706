"""streamk: image retrieval with democratic and generalised-max-pooling match
kernels (Murray, Jegou, Perronnin, Zisserman, "Interferences in match kernels",
TPAMI 2016)."""

import os

# Per-image work alternates BLAS calls (OpenBLAS threads) and Numba parallel
# kernels (OpenMP threads).  Threads of either pool that spin-wait after their
# work steal the cores the other pool needs: 20x slower on small images with 2
# cores.  Sleeping idle threads cost microseconds instead.  Set before numpy
# and Numba load their thread pools; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from .encoding.aggregation import aggregate, democratic_weights, gmp_primal, gmp_weights
from .encoding.embeddings import BagOfWords, BlockEmbedding, FisherVector, TriangulationEmbedding, VLAD, rootsift
from .encoding.encoder import Encoder, EncoderConfig
from .errors import (ConfigError, DimensionError, EmptyDescriptorSetError, EncoderFileError,
                     EncoderMismatchError, NonFiniteError, NotFittedError, StreamkError)
from .encoding.postprocessing import RotationNormalisation, l2_normalize, postprocess, power_law

__version__ = "0.1.0"

__all__ = [
    "aggregate", "democratic_weights", "gmp_primal", "gmp_weights",
    "BagOfWords", "BlockEmbedding", "FisherVector", "TriangulationEmbedding", "VLAD", "rootsift",
    "Encoder", "EncoderConfig",
    "ConfigError", "DimensionError", "EmptyDescriptorSetError", "EncoderFileError",
    "EncoderMismatchError", "NonFiniteError", "NotFittedError", "StreamkError",
    "RotationNormalisation", "l2_normalize", "postprocess", "power_law",
]

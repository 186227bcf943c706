"""What a type checker sees of streamk.encoding: the names its ``__init__`` exports lazily,
from the modules that define them (the package's lazy ``__getattr__`` would give it Any).
tests/test_packaging.py checks that this stub and ``__all__`` list the same names."""

from .aggregation import (
    aggregate as aggregate, aggregate_many as aggregate_many, check_params as check_params,
    contributions as contributions, ConvergenceWarning as ConvergenceWarning, DEFAULT_GAMMA as DEFAULT_GAMMA,
    DEFAULT_LAMBDA as DEFAULT_LAMBDA, DEFAULT_N_ITER as DEFAULT_N_ITER,
    democratic_weights as democratic_weights, gmp_primal as gmp_primal, gmp_weights as gmp_weights,
    gram as gram, METHODS as METHODS,
)
from .embeddings import (
    BagOfWords as BagOfWords, BlockEmbedding as BlockEmbedding, Embedding as Embedding,
    embedding_spec as embedding_spec, EMBEDDINGS as EMBEDDINGS, FisherVector as FisherVector,
    make_embedding as make_embedding, rootsift as rootsift, subsample_rows as subsample_rows,
    TriangulationEmbedding as TriangulationEmbedding, VLAD as VLAD,
)
from .encoder import (
    Encoder as Encoder, EncoderConfig as EncoderConfig,
)
from .postprocessing import (
    DEFAULT_POWER as DEFAULT_POWER, l2_normalize as l2_normalize, postprocess as postprocess,
    power_law as power_law, RotationNormalisation as RotationNormalisation,
)

__all__: list[str]

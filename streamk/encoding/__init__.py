"""The paper's encoding: a descriptor set -> one image vector. RootSIFT, an embedding
(T-emb, Fisher vector, VLAD, BOW), weights (sum, democratic, GMP), power-law, RN, L2.

    enc = Encoder(embedding="temb", k=64, aggregation="gmp").fit(learning_sets)
    v = enc.encode(sift)
"""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
    from .aggregation import (
        DEFAULT_GAMMA as DEFAULT_GAMMA, DEFAULT_LAMBDA as DEFAULT_LAMBDA, DEFAULT_N_ITER as DEFAULT_N_ITER,
        METHODS as METHODS, ConvergenceWarning as ConvergenceWarning, aggregate as aggregate,
        aggregate_many as aggregate_many, check_params as check_params, contributions as contributions,
        democratic_weights as democratic_weights, gmp_primal as gmp_primal, gmp_weights as gmp_weights,
        gram as gram,
    )
    from .embeddings import (
        EMBEDDINGS as EMBEDDINGS, BagOfWords as BagOfWords, BlockEmbedding as BlockEmbedding,
        Embedding as Embedding, FisherVector as FisherVector, TriangulationEmbedding as TriangulationEmbedding,
        VLAD as VLAD, check_reduced_dim as check_reduced_dim, embedding_spec as embedding_spec,
        make_embedding as make_embedding, rootsift as rootsift,
        subsample_rows as subsample_rows,
    )
    from .encoder import Encoder as Encoder, EncoderConfig as EncoderConfig
    from .fit_cost import (
        FitCost as FitCost, check_fits_in_memory as check_fits_in_memory, machine_rates as machine_rates,
        whitening_k_limit as whitening_k_limit,
    )
    from .postprocessing import (
        DEFAULT_POWER as DEFAULT_POWER, RotationNormalisation as RotationNormalisation,
        l2_normalize as l2_normalize, postprocess as postprocess, power_law as power_law,
    )

__all__, __getattr__, __dir__ = lazy_exports(__name__)

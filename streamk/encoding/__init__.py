"""The paper's encoding: a descriptor set -> one image vector. RootSIFT, an embedding
(T-emb, Fisher vector, VLAD, BOW), weights (sum, democratic, GMP), power-law, RN, L2.

    enc = Encoder(embedding="temb", k=64, aggregation="gmp").fit(learning_sets)
    v = enc.encode(sift)
"""

from .aggregation import (DEFAULT_GAMMA, DEFAULT_LAMBDA, DEFAULT_N_ITER, METHODS, ConvergenceWarning, aggregate,
                          aggregate_many, check_params, contributions, democratic_weights, gmp_primal, gmp_weights,
                          gram)
from .embeddings import (EMBEDDINGS, BagOfWords, BlockEmbedding, Embedding, FisherVector, TriangulationEmbedding,
                         VLAD, embedding_spec, make_embedding, rootsift, subsample_rows)
from .encoder import Encoder, EncoderConfig
from .postprocessing import DEFAULT_POWER, RotationNormalisation, l2_normalize, postprocess, power_law

__all__ = [
    "DEFAULT_GAMMA", "DEFAULT_LAMBDA", "DEFAULT_N_ITER", "DEFAULT_POWER", "EMBEDDINGS", "METHODS",
    "BagOfWords", "BlockEmbedding", "ConvergenceWarning", "Embedding", "Encoder", "EncoderConfig", "FisherVector",
    "RotationNormalisation", "TriangulationEmbedding", "VLAD",
    "aggregate", "aggregate_many", "check_params", "contributions", "democratic_weights", "embedding_spec",
    "gmp_primal",
    "gmp_weights", "gram", "l2_normalize", "make_embedding", "postprocess", "power_law", "rootsift",
    "subsample_rows",
]

"""The paper's encoding: a descriptor set -> one image vector. RootSIFT, an embedding
(T-emb, Fisher vector, VLAD, BOW), weights (sum, democratic, GMP), power-law, RN, L2.

    enc = Encoder(embedding="temb", k=64, aggregation="gmp").fit(learning_sets)
    v = enc.encode(sift)
"""

from ..exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".aggregation": ("DEFAULT_GAMMA", "DEFAULT_LAMBDA", "DEFAULT_N_ITER", "METHODS", "ConvergenceWarning",
        "aggregate", "aggregate_many", "check_params", "contributions", "democratic_weights", "gmp_primal",
        "gmp_weights", "gram"),
    ".embeddings": ("EMBEDDINGS", "BagOfWords", "BlockEmbedding", "Embedding", "FisherVector",
        "TriangulationEmbedding", "VLAD", "embedding_spec", "make_embedding", "rootsift", "subsample_rows"),
    ".encoder": ("Encoder", "EncoderConfig"),
    ".postprocessing": ("DEFAULT_POWER", "RotationNormalisation", "l2_normalize", "postprocess", "power_law"),
})

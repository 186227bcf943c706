"""Short codes of image vectors and their search: product quantisation (ADC) and IVF-ADC,
the in-memory inverted lists a reader scans, and the top-k heap every scan shares.

Nothing here knows of storage: the index (:mod:`streamk.index`) stores the codes.
"""

from ..exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "._heap": ("merge_topk",),
    ".inverted_lists": ("NO_LIST", "InvertedLists", "row_bitmap"),
    ".ivfpq": ("IVFPQ", "default_nprobe", "default_train_size"),
    ".pq": ("N_CENTROIDS", "ProductQuantizer", "blas_threads"),
})

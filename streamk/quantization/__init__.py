"""Short codes of image vectors and their search: product quantisation (ADC) and IVF-ADC,
the in-memory inverted lists a reader scans, and the top-k heap every scan shares.

Nothing here knows of storage: the index (:mod:`streamk.index`) stores the codes.
"""

from ._heap import merge_topk
from .inverted_lists import NO_LIST, InvertedLists, row_bitmap
from .ivfpq import IVFPQ, default_nprobe, default_train_size
from .pq import N_CENTROIDS, ProductQuantizer, blas_threads

__all__ = ["IVFPQ", "NO_LIST", "N_CENTROIDS", "InvertedLists", "ProductQuantizer", "blas_threads",
           "default_nprobe", "default_train_size", "merge_topk", "row_bitmap"]

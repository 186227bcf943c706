"""Short codes of image vectors and their search: product quantisation (ADC) and IVF-ADC,
the in-memory inverted lists a reader scans, and the top-k heap every scan shares.

Nothing here knows of storage: the index (:mod:`streamk.index`) stores the codes.
"""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
    from ._heap import merge_topk as merge_topk
    from .inverted_lists import NO_LIST as NO_LIST, InvertedLists as InvertedLists, row_bitmap as row_bitmap
    from .ivfpq import IVFPQ as IVFPQ, default_nprobe as default_nprobe, default_train_size as default_train_size
    from .pq import N_CENTROIDS as N_CENTROIDS, ProductQuantizer as ProductQuantizer, blas_threads as blas_threads

__all__, __getattr__, __dir__ = lazy_exports(__name__)

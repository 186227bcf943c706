"""Retrieval benchmarks: image lists, queries (with boxes), official ground truth, their
safe download; and synthetic bursty descriptor sets for tests and benchmarks."""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
    from .benchmarks import (
        DATASETS as DATASETS, Dataset as Dataset, Query as Query, dataset_key as dataset_key,
        default_data_dir as default_data_dir, holidays_from_ids as holidays_from_ids,
        load_dataset as load_dataset, load_mat_ground_truth as load_mat_ground_truth,
        load_paris6k_subset as load_paris6k_subset, load_revisited as load_revisited,
        load_text_ground_truth as load_text_ground_truth, ukbench_from_ids as ukbench_from_ids,
    )
    from .download import (
        REMOTES as REMOTES, Remote as Remote, download as download, extract_archive as extract_archive,
        fetch as fetch,
    )
    from .safe_pickle import RestrictedUnpickler as RestrictedUnpickler, safe_load_pickle as safe_load_pickle

__all__, __getattr__, __dir__ = lazy_exports(__name__)

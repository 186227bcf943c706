"""Retrieval benchmarks: image lists, queries (with boxes), official ground truth, their
safe download; and synthetic bursty descriptor sets for tests and benchmarks."""

from .benchmarks import (DATASETS, Dataset, Query, dataset_key, default_data_dir, holidays_from_ids,
                         load_dataset, load_mat_ground_truth, load_paris6k_subset, load_revisited,
                         load_text_ground_truth, ukbench_from_ids)
from .download import REMOTES, Remote, download, extract_archive, fetch
from .safe_pickle import RestrictedUnpickler, safe_load_pickle

__all__ = ["DATASETS", "REMOTES", "Dataset", "Query", "Remote", "RestrictedUnpickler", "dataset_key",
           "default_data_dir", "download", "extract_archive", "fetch", "holidays_from_ids", "load_dataset",
           "load_mat_ground_truth", "load_paris6k_subset", "load_revisited", "load_text_ground_truth",
           "safe_load_pickle", "ukbench_from_ids"]

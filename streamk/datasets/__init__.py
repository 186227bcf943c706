"""Retrieval benchmarks: image lists, queries (with boxes), official ground truth, their
safe download; and synthetic bursty descriptor sets for tests and benchmarks."""

from ..exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".benchmarks": ("DATASETS", "Dataset", "Query", "dataset_key", "default_data_dir", "holidays_from_ids",
        "load_dataset", "load_mat_ground_truth", "load_paris6k_subset", "load_revisited",
        "load_text_ground_truth", "ukbench_from_ids"),
    ".download": ("REMOTES", "Remote", "download", "extract_archive", "fetch"),
    ".safe_pickle": ("RestrictedUnpickler", "safe_load_pickle"),
})

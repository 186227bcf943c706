"""Features of many image files on an executor (all cores, or a Dask cluster), with a
progress bar and the feature cache; a bad file is reported, never raised mid-run."""

import os
from typing import NamedTuple

from ..errors import ConfigError
from ..features import Extractor, FeatureCache, check_positive_int, default_extractor
from ..parallel import default_workers, make_executor
from .tasks import extract_task, results, task_context


class ExtractionResult(NamedTuple):
    path: object
    features: object  # Features, or None on failure
    error: object  # None, or "ErrorType: reason"
    cached: bool  # True when read from the cache


def iter_extract(paths, extractor=None, cache_dir=None, workers=None, progress=False, executor=None):
    """Extract features of many images; yield an :class:`ExtractionResult` per distinct path.

    Results come in completion order. workers: number of processes (None: all
    cores this process may use; 1: in this process, no pool). executor: a
    :mod:`streamk.parallel` executor to run on instead (e.g. a Dask cluster's).
    Each file is read once, in the worker, which serves cache hits too.
    Failures are yielded as results with ``error`` set, never raised; an image
    that crashes a worker process is isolated and reported as ``WorkerCrashedError``.
    With workers > 1 the processes are *spawned*: a script calling this must
    guard its entry point with ``if __name__ == "__main__":``.
    """
    from tqdm.auto import tqdm

    extractor = default_extractor() if extractor is None else extractor
    if not isinstance(extractor, Extractor):
        raise ConfigError(f"extractor must be an Extractor, got {extractor!r}")
    paths = list(dict.fromkeys(paths))
    workers = None if workers is None else check_positive_int(workers, "workers")
    cache = None if cache_dir is None else FeatureCache(cache_dir)
    bar = tqdm(total=len(paths), disable=not progress, unit="img", desc=f"features ({extractor.name})",
               dynamic_ncols=True)
    counts = {"failed": 0, "cached": 0}
    own = executor is None
    if own:
        executor = make_executor(max(1, min(workers or default_workers(), len(paths))))
    context = task_context(None, extractor, None if cache is None else cache.directory, executor)
    try:
        items = ((p, os.path.abspath(p)) for p in paths)  # a Dask worker's working folder is not ours
        for _, r in results(executor.map_unordered(extract_task, items, context)):
            error = None if r["error"] is None else str(r["error"])  # "ErrorType: reason"
            result = ExtractionResult(r["path"], r.get("features"), error, bool(r.get("cached")))
            counts["failed"] += result.error is not None
            counts["cached"] += result.cached
            bar.update(1)
            if progress:
                bar.set_postfix(counts, refresh=False)
            yield result
    finally:
        bar.close()
        if own:
            executor.close()


def extract_many(paths, extractor=None, cache_dir=None, workers=None, progress=True, executor=None):
    """Extract features of many images on all cores, with a progress bar.

    Returns ``(features, errors)``: dicts keyed by the given paths, in input
    order; ``features[path]`` is a :class:`~streamk.features.Features`, ``errors[path]``
    a message "ErrorType: reason" for each file that failed (unreadable, corrupt, crash).
    See :func:`iter_extract` for the options and for streaming use.
    """
    paths = list(dict.fromkeys(paths))
    got = {r.path: r for r in iter_extract(paths, extractor, cache_dir, workers, progress, executor)}
    features = {p: got[p].features for p in paths if got[p].error is None}
    errors = {p: got[p].error for p in paths if got[p].error is not None}
    return features, errors


__all__ = ["ExtractionResult", "extract_many", "iter_extract"]

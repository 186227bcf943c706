"""Which executor a run gets: in this process, the local pool, or a Dask cluster.

    ex = make_executor(workers=2)                    # or make_executor(dask="local:2")
"""

import os

from ..errors import ConfigError
from .executors import InlineExecutor, LocalPoolExecutor, default_workers

MAX_WORKERS = 64  # local worker processes allowed whatever the cores (more: 4 per core)


def make_executor(workers=None, dask=None):
    """The executor for ``workers`` local processes (None: all cores; 1: in this process),
    or for a Dask cluster: ``dask`` = a scheduler address, ``"local:N"`` (a LocalCluster of
    N single-threaded worker processes started here), or a ``distributed.Client``."""
    if dask is not None:
        from .dask_executor import DaskExecutor  # loads Dask: only for a run on a cluster

        return DaskExecutor(dask)
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    if workers > max_workers():
        raise ConfigError(f"workers = {workers:,} is over streamk's limit of {max_workers():,} local processes "
                          f"(4 per core, at least {MAX_WORKERS}); a Dask cluster (--dask) spreads more")
    return InlineExecutor() if workers == 1 else LocalPoolExecutor(workers)


def max_workers():
    """The most local worker processes one executor starts: 4 per core, at least MAX_WORKERS."""
    return max(MAX_WORKERS, 4 * (os.cpu_count() or 1))


__all__ = ["MAX_WORKERS", "make_executor", "max_workers"]

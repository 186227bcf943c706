"""Executors for per-item tasks: in this process, a crash-isolating local process pool
whose workers die with their parent, or a Dask cluster; they know nothing of what a task does.

    from streamk.parallel import make_executor, TaskContext, TaskFailure

The local worker processes and their crash-and-retry are written once
(:class:`WorkerPool`, :func:`retry_alone`): the local pool executor and the server's
encoding workers are built on them. Importing this package loads no module; Dask is
loaded only with ``DaskExecutor``.
"""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
    from .dask_executor import DaskExecutor as DaskExecutor, StreamkWorkerSetup as StreamkWorkerSetup
    from .executors import (
        Executor as Executor, InlineExecutor as InlineExecutor, LocalPoolExecutor as LocalPoolExecutor,
        check_scheduler_address as check_scheduler_address, default_workers as default_workers,
        parse_dask_address as parse_dask_address,
    )
    from .make import MAX_WORKERS as MAX_WORKERS, make_executor as make_executor, max_workers as max_workers
    from .worker_pool import (
        CRASHED as CRASHED, TaskFailure as TaskFailure, WorkerPool as WorkerPool, retry_alone as retry_alone,
    )
    from .worker_process import (
        TaskContext as TaskContext, exit_with_parent as exit_with_parent, in_worker_process as in_worker_process,
        prepare_worker_process as prepare_worker_process,
    )

__all__, __getattr__, __dir__ = lazy_exports(__name__)

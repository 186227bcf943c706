"""Executors for per-item tasks: in this process, a crash-isolating local process pool
whose workers die with their parent, or a Dask cluster; they know nothing of what a task does.

    from streamk.parallel import make_executor, TaskContext, TaskFailure

The local worker processes and their crash-and-retry are written once
(:class:`WorkerPool`, :func:`retry_alone`): the local pool executor and the server's
encoding workers are built on them. Importing this package loads no module; Dask is
loaded only with ``DaskExecutor``.
"""

from ..exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".dask_executor": ("DaskExecutor", "StreamkWorkerSetup"),
    ".executors": ("Executor", "InlineExecutor", "LocalPoolExecutor", "check_scheduler_address", "default_workers",
                   "parse_dask_address"),
    ".make": ("MAX_WORKERS", "make_executor", "max_workers"),
    ".worker_pool": ("CRASHED", "TaskFailure", "WorkerPool", "retry_alone"),
    ".worker_process": ("TaskContext", "exit_with_parent", "in_worker_process", "prepare_worker_process"),
})

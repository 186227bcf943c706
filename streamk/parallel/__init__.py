"""Executors for per-item tasks: in this process, a crash-isolating local process pool
whose workers die with their parent, or a Dask cluster; they know nothing of what a task does.

    from streamk.parallel import make_executor, TaskContext, TaskFailure
"""

from .executors import (CRASHED, Executor, InlineExecutor, LocalPoolExecutor, TaskFailure, default_workers,
                        make_executor, parse_dask_address)
from .worker_process import TaskContext, exit_with_parent, in_worker_process, prepare_worker_process

__all__ = ["CRASHED", "Executor", "InlineExecutor", "LocalPoolExecutor", "TaskContext", "TaskFailure",
           "default_workers", "exit_with_parent", "in_worker_process", "make_executor", "parse_dask_address",
           "prepare_worker_process"]

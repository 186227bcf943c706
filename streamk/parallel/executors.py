"""Executors for per-image tasks: in this process, or a local crash-isolating process
pool; the Dask cluster's is :mod:`streamk.parallel.dask_executor`, and
:func:`~streamk.parallel.make_executor` picks one -- one code path for all three.

A task is a module-level function ``fn(context, item) -> result`` that never
raises for a bad input (it returns the error as its result). The *context* is
what every task of a run shares, described once by a
:class:`~streamk.parallel.TaskContext` and built once per worker.

    ex = make_executor(workers=2)                    # or make_executor(dask="local:2")
    for item, result in ex.map_unordered(fn, items, context):
        if isinstance(result, TaskFailure): ...     # the task never returned
    ex.close()

``map_unordered`` streams: it takes the next item from ``items`` (any iterable,
read lazily) only when fewer than ``max_inflight`` tasks are running
(back-pressure), and yields results in completion order. An item whose task
killed its worker process (a segfault in a C++ detector, an OOM kill, a
``kill -9``) is retried; only an item that kills a fresh worker again gets a
:class:`TaskFailure` of kind ``"crashed"`` as its result, so a killed worker
loses nothing (:mod:`streamk.parallel.worker_pool`). A task whose result could not
come back gets kind ``"failed"``.

Local pool workers die with their parent, even when the parent is killed with
SIGKILL (:func:`~streamk.parallel.exit_with_parent`).
"""

import os
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool

from ..errors import ClusterError, ConfigError
from .worker_pool import TaskFailure, WorkerPool, retry_alone
from .worker_process import run_task


# --------------------------------------------------------------------------- executors
def default_workers():
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class Executor:
    """What the executors share: ``name``, ``workers``, ``map_unordered``, ``close``."""

    name = "executor"
    workers = 1

    def map_unordered(self, fn, items, context, max_inflight=None):  # pragma: no cover
        raise NotImplementedError

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class InlineExecutor(Executor):
    """Runs each task here, one after the other (``workers=1``: no process started)."""

    name = "in-process"

    def map_unordered(self, fn, items, context, max_inflight=None):
        token = context.token()
        for item in items:
            try:
                result = run_task(token, context, fn, item)
            except Exception as exc:  # a task that raised (tasks report bad input as results)
                result = TaskFailure.of(exc)
            yield item, result


class LocalPoolExecutor(Executor):
    """``workers`` spawned processes on this machine (a :class:`WorkerPool`); see the
    module doc (crash isolation, death with the parent). A pool lives for one
    ``map_unordered``."""

    name = "local pool"

    def __init__(self, workers=None):
        workers = default_workers() if workers is None else int(workers)
        if workers < 1:
            raise ConfigError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def map_unordered(self, fn, items, context, max_inflight=None):
        """Yield ``(item, result)`` in completion order; see the module doc. An item
        that killed a worker twice (alone in a fresh process the second time,
        :func:`retry_alone`) gets ``TaskFailure("crashed", ...)``; one whose future raised
        something else (e.g. a result that cannot be sent back) ``TaskFailure("failed", ...)``."""
        items = iter(items)
        limit = max_inflight or 2 * self.workers
        pool = WorkerPool(self.workers, context)
        inflight = {}
        exhausted = False
        try:
            while True:
                while not exhausted and len(inflight) < limit:
                    try:
                        item = next(items)
                    except StopIteration:
                        exhausted = True
                        break
                    inflight[pool.submit(fn, item)[0]] = item
                if not inflight:
                    return
                done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                suspects = []
                for fut in done:
                    item = inflight.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        suspects.append(item)
                        continue
                    except Exception as exc:
                        result = TaskFailure.of(exc)
                    yield item, result
                if suspects:  # a worker died: every item in flight is a suspect, each retried alone
                    suspects.extend(inflight.values())
                    inflight.clear()
                    pool.close()  # the broken pool ends; the next task starts a fresh one
                    for item in suspects:
                        yield item, retry_alone(context, fn, item)
        finally:
            pool.close()


def parse_dask_address(text):
    """'local:N' -> ('local', N); 'tcp://host:8786' (or any scheduler address) -> ('remote', text)."""
    text = str(text).strip()
    if text.startswith("local"):
        n = text[len("local"):].lstrip(":")
        try:
            n = default_workers() if n == "" else int(n)
        except ValueError:
            raise ConfigError(f"--dask local:N needs a number of workers, got {text!r}") from None
        if n < 1:
            raise ConfigError(f"--dask local:N needs N >= 1, got {text!r}")
        from .make import MAX_WORKERS, max_workers  # (make imports this module)

        if n > max_workers():  # processes on this machine, as --workers
            raise ConfigError(f"--dask local:{n:,} is over streamk's limit of {max_workers():,} local processes "
                              f"(4 per core, at least {MAX_WORKERS}); start workers on other machines "
                              f"(dask worker tcp://HOST:8786) and give the scheduler's address")
        return "local", n
    if not text:
        raise ConfigError("--dask needs a scheduler address (tcp://host:8786) or local:N")
    return "remote", check_scheduler_address(text)


DASK_PROTOCOLS = ("tcp", "tls", "ws", "wss", "ucx")  # what distributed speaks to a scheduler


def check_scheduler_address(text):
    """``text`` if it is a scheduler address Dask can dial (``tcp://host:port``,
    ``host:port``, tls / ws / wss / ucx), else ClusterError naming it and what is wrong."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    hint = "give the scheduler's address as tcp://host:8786, or local:N for a cluster started here"
    if scheme not in DASK_PROTOCOLS:
        raise ClusterError(f"--dask {text}: unknown protocol {scheme!r} (known: {', '.join(DASK_PROTOCOLS)}); {hint}",
                           address=text)
    host, colon, port = rest.rpartition(":")
    if scheme != "ucx" and (not colon or not host or not port.isdigit() or not 0 < int(port) < 65536):
        raise ClusterError(f"--dask {text}: not a host:port address; {hint}", address=text)
    return text


__all__ = ["Executor", "InlineExecutor", "LocalPoolExecutor", "check_scheduler_address", "default_workers",
           "parse_dask_address"]

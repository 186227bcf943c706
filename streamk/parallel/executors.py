"""Executors for per-image tasks: in this process, a local crash-isolating process
pool, or a Dask cluster (:mod:`streamk.parallel.dask_executor`) -- one code path
for all three.

A task is a module-level function ``fn(context, item) -> result`` that never
raises for a bad input (it returns the error as its result). The *context* is
what every task of a run shares, described once by a
:class:`~streamk.parallel.worker_process.TaskContext` and built once per worker.

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
loses nothing. A task whose result could not come back gets kind ``"failed"``.

Local pool workers die with their parent, even when the parent is killed with
SIGKILL (:func:`~streamk.parallel.worker_process.exit_with_parent`).
"""

import os
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool
from collections import deque
from typing import NamedTuple

from ..errors import ClusterError, ConfigError
from .worker_process import pool_worker_init, run_task

CRASHED = "WorkerCrashedError: the worker process died on this item (a crash in a native library, or killed)"


class TaskFailure(NamedTuple):
    """The result of an item whose task did not return a result of its own.

    kind: "crashed" (its worker process died, twice) or "failed" (the task raised,
    or its result could not be sent back); reason: "ErrorType: message"."""

    kind: str
    reason: str

    @classmethod
    def of(cls, exc):
        from ..errors import describe

        return cls("failed", describe(exc))


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
    """``workers`` spawned processes on this machine; see the module doc (crash
    isolation, death with the parent). A pool lives for one ``map_unordered``."""

    name = "local pool"

    def __init__(self, workers=None):
        workers = default_workers() if workers is None else int(workers)
        if workers < 1:
            raise ConfigError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def _pool(self, n, token, context):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn: fork after OpenCV / OpenMP / Numba threads have run can deadlock the child
        mp = multiprocessing.get_context("spawn")
        parent_alive, keep_open = mp.Pipe(duplex=False)  # children get the read end only
        pool = ProcessPoolExecutor(max_workers=n, mp_context=mp, initializer=pool_worker_init,
                                   initargs=(parent_alive, os.getpid(), token, context))
        return pool, (parent_alive, keep_open)

    @staticmethod
    def _shutdown(pool, pipe):
        pool.shutdown(wait=True, cancel_futures=True)
        for conn in pipe:  # after the workers are gone: closing the write end ends them
            conn.close()

    def map_unordered(self, fn, items, context, max_inflight=None):
        """Yield ``(item, result)`` in completion order; see the module doc. An item
        that killed a worker twice (alone in a fresh process the second time) gets
        ``TaskFailure("crashed", ...)``; one whose future raised something else (e.g.
        a result that cannot be sent back) ``TaskFailure("failed", ...)``."""
        token = context.token()
        items = iter(items)
        limit = max_inflight or 2 * self.workers
        retry = deque()  # items whose worker died: each re-run alone in a fresh process
        exhausted = False
        while not exhausted or retry:
            while retry:
                item = retry.popleft()
                pool, pipe = self._pool(1, token, context)
                try:
                    result = pool.submit(run_task, token, None, fn, item).result()
                except BrokenProcessPool:
                    result = TaskFailure("crashed", CRASHED)
                except Exception as exc:
                    result = TaskFailure.of(exc)
                finally:
                    self._shutdown(pool, pipe)
                yield item, result
            if exhausted:
                break
            pool, pipe = self._pool(self.workers, token, context)
            try:
                inflight = {}
                while True:
                    while not exhausted and len(inflight) < limit:
                        try:
                            item = next(items)
                        except StopIteration:
                            exhausted = True
                            break
                        inflight[pool.submit(run_task, token, None, fn, item)] = item
                    if not inflight:
                        break
                    done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                    broken = False
                    for fut in done:
                        item = inflight.pop(fut)
                        try:
                            result = fut.result()
                        except BrokenProcessPool:
                            retry.append(item)
                            broken = True
                            continue
                        except Exception as exc:
                            result = TaskFailure.of(exc)
                        yield item, result
                    if broken:  # every item in flight is a suspect: retried one by one
                        retry.extend(inflight.values())
                        break
            finally:
                self._shutdown(pool, pipe)


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


def make_executor(workers=None, dask=None):
    """The executor for ``workers`` local processes (None: all cores; 1: in this process),
    or for a Dask cluster: ``dask`` = a scheduler address, ``"local:N"`` (a LocalCluster of
    N single-threaded worker processes started here), or a ``distributed.Client``."""
    if dask is not None:
        from .dask_executor import DaskExecutor

        return DaskExecutor(dask)
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    if workers > max_workers():
        raise ConfigError(f"workers = {workers:,} is over streamk's limit of {max_workers():,} local processes "
                          f"(4 per core, at least {MAX_WORKERS}); a Dask cluster (--dask) spreads more")
    return InlineExecutor() if workers == 1 else LocalPoolExecutor(workers)


MAX_WORKERS = 64  # local worker processes allowed whatever the cores (more: 4 per core)


def max_workers():
    """The most local worker processes one executor starts: 4 per core, at least MAX_WORKERS."""
    return max(MAX_WORKERS, 4 * (os.cpu_count() or 1))


__all__ = ["CRASHED", "MAX_WORKERS", "Executor", "InlineExecutor", "LocalPoolExecutor", "TaskFailure", "default_workers",
           "max_workers",
           "make_executor", "parse_dask_address"]

"""The local worker processes and their crash-and-retry, written once: the local pool
executor (:class:`~streamk.parallel.LocalPoolExecutor`) and the server's encoding workers
are both built on :class:`WorkerPool` and :func:`retry_alone`.

A :class:`WorkerPool` is ``workers`` spawned processes, each started by
:func:`~streamk.parallel.worker_process.pool_worker_init`: one thread per library, the
run's context built once, and death with the parent even when the parent is killed
with SIGKILL (:func:`~streamk.parallel.worker_process.exit_with_parent`). A worker
that dies (a segfault in a native library, an OOM kill, a ``kill -9``) breaks the
pool: every task in flight fails with ``BrokenProcessPool`` and is a suspect; each is
run again alone in a fresh process (:func:`retry_alone`), and only an item that kills
that one too gets ``TaskFailure("crashed", CRASHED)``, so a killed worker loses nothing.
"""

import gc
import multiprocessing
import os
import sys
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import NamedTuple

from ..errors import ConfigError, WorkerCrashedError
from .worker_process import pool_worker_init, run_task

CRASHED = f"{WorkerCrashedError.__name__}: the worker process died on this item (a crash in a native library, " \
          "or killed)"


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


def check_main_guard():
    """ConfigError when this call comes from the top level of a script outside ``if __name__ ==
    "__main__":``. A spawned worker starts by running the parent's main script again (as
    ``__mp_main__``; Python's rule, mirrored here: a script by its path, a ``-m`` module by its
    name, a package's ``__main__`` not at all): without the guard every worker would run the
    script's top level again (its prints, its deletes) and die starting workers of its own, and
    every image would be reported as a crash. Nothing is checked where there is no script (a
    notebook, an interactive session) or its source cannot be read."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if main is None or path is None or (name is not None and (name == "__main__" or name.endswith(".__main__"))):
        return
    if name is None and os.path.splitext(os.path.basename(path))[0] == "ipython":
        return
    if not os.path.isabs(path):  # where multiprocessing looks for it
        path = os.path.join(getattr(multiprocessing.process, "ORIGINAL_DIR", None) or os.getcwd(), path)
    if not os.path.isfile(path):  # "<stdin>": the worker cannot run it, and dies
        raise ConfigError(
            f"a script read from {os.path.basename(path)} cannot start worker processes: each worker starts by "
            f"running the parent's script again, from its file. Save the script as a file and run that (its work "
            f"under 'if __name__ == \"__main__\":'), or use workers=1 (no worker processes)")
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:  # not from the script's top level (a thread, a callback): nothing to tell
        return
    guarded = _guarded_lines(path)
    if guarded is None or frame.f_lineno in guarded:
        return
    raise ConfigError(
        f"line {frame.f_lineno} of {path} starts streamk's worker processes from the script's top level: each "
        f"worker starts by running the script again, so it would run that line too. Put the script's work under "
        f"'if __name__ == \"__main__\":' (Python's rule for scripts that start processes), or use workers=1 "
        f"(no worker processes)")


def _guarded_lines(path):
    """The set of line numbers of a script under a top-level ``if`` that tests ``__name__``
    against ``"__main__"``; None when its source cannot be read or parsed."""
    import ast

    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    lines = set()
    for node in tree.body:
        if isinstance(node, ast.If):
            names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            texts = {n.value for n in ast.walk(node.test) if isinstance(n, ast.Constant)}
            if "__name__" in names and "__main__" in texts:
                lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


class WorkerPool:
    """``workers`` spawned processes for the tasks of one TaskContext (see the module
    doc), started at the first task; thread-safe. ``submit`` runs ``fn(context, item)``
    in one of them; ``replace`` starts a fresh pool after a break; ``use_context`` one for
    another context; the old pool ends in the background, after the tasks it holds."""

    def __init__(self, workers, context):
        self.workers = int(workers)
        self.context = context
        self._token = context.token()
        self._lock = threading.Lock()
        self._pool = None
        self._pipe = None
        self._generation = 0
        self._others = set()  # (pool, pipe) still ending after a swap, and retry_alone's pools: close ends them

    def _start(self):
        """(Under the lock.) A fresh pool of processes, started as tasks come."""
        check_main_guard()
        mp = multiprocessing.get_context("spawn")  # fork after Numba / OpenMP / OpenCV threads ran can deadlock
        parent_alive, keep_open = mp.Pipe(duplex=False)  # workers hold the read end: EOF when we die
        self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=mp, initializer=pool_worker_init,
                                         initargs=(parent_alive, os.getpid(), self._token, self.context))
        self._pipe = (parent_alive, keep_open)
        self._generation += 1

    def submit(self, fn, item):
        """(future of ``fn(context, item)`` in a worker, the pool's generation). The future
        raises BrokenProcessPool when a worker of the pool died (then :meth:`replace`)."""
        with self._lock:
            if self._pool is None:
                self._start()
            pool, generation, token = self._pool, self._generation, self._token
        try:
            return pool.submit(run_task, token, None, fn, item), generation
        except BrokenProcessPool as exc:  # broke before this task was sent: one way to handle both
            future = Future()
            future.set_exception(exc)
            return future, generation

    @property
    def generation(self):
        """The generation of the pool the next task goes to (see :meth:`replace`)."""
        with self._lock:
            return self._generation

    def start(self, warm=True):
        """Start the processes now (``warm``: and wait until each has built its context)."""
        if warm:  # one no-op task per worker: each process starts and builds its context now
            futures = [self.submit(_noop, i)[0] for i in range(self.workers)]
            for f in futures:
                f.result()
        else:
            with self._lock:
                if self._pool is None:
                    self._start()
        return self

    def replace(self, generation):
        """A fresh pool after the one of ``generation`` broke (once, whoever notices first);
        the tasks queued in the broken one are cancelled."""
        with self._lock:
            if self._generation == generation and self._pool is not None:
                self._swap(cancel=True)

    def use_context(self, context):
        """Run the next tasks with ``context``: a fresh pool; the old one finishes the
        tasks it holds, then ends."""
        with self._lock:
            self.context, self._token = context, context.token()
            if self._pool is not None:
                self._swap(cancel=False)

    def _swap(self, cancel):
        """(Under the lock.) A fresh pool; the old one ends in the background, its queued
        tasks cancelled or (``cancel`` False) run first."""
        old = (self._pool, self._pipe)
        self._start()
        self._others.add(old)
        threading.Thread(target=self._end_other, args=(old, cancel), daemon=True).start()

    def _end_other(self, other, cancel):
        _shutdown(*other, cancel)
        with self._lock:
            self._others.discard(other)

    def close(self, cancel=True, timeout=None):
        """End the processes (waited for); a later task starts a fresh pool. ``timeout``
        (seconds, None: none): the running tasks have that long to finish, then every
        process of this pool (those of older pools still ending and of :func:`retry_alone`
        for it included) is made to end: closing the pipe the workers watch, then SIGKILL."""
        with self._lock:
            pool, pipe, self._pool, self._pipe = self._pool, self._pipe, None, None
            others = list(self._others) if timeout is not None else []
        ending = ([(pool, pipe)] if pool is not None else []) + others
        if timeout is None:
            for p in ending:
                _shutdown(*p, cancel)
            return
        _end_within(ending, timeout)


def retry_alone(context, fn, item, owner=None):
    """The result of ``fn(context, item)`` run again alone in a fresh worker process (its
    first one died): ``TaskFailure("crashed", CRASHED)`` when it dies again,
    ``TaskFailure.of(exc)`` when its future raised anything else. ``owner``: a WorkerPool
    whose ``close(timeout=)`` ends this process too."""
    pool = WorkerPool(1, context)
    pool.start(warm=False)
    entry = (pool._pool, pool._pipe)
    if owner is not None:
        with owner._lock:
            owner._others.add(entry)
    try:
        return pool.submit(fn, item)[0].result()
    except BrokenProcessPool:
        return TaskFailure("crashed", CRASHED)
    except Exception as exc:  # RuntimeError: the owner was closed meanwhile
        return TaskFailure.of(exc)
    finally:
        if owner is not None:
            with owner._lock:
                owner._others.discard(entry)
        pool.close()


def _noop(ctx, item):
    return item


def _shutdown(pool, pipe, cancel):
    pool.shutdown(wait=True, cancel_futures=cancel)
    _close_pipe(pipe)  # after the workers are gone: closing our end ends any straggler


_PIPE_LOCK = threading.Lock()


def _close_pipe(pipe):
    """Close our ends of a pool's parent-death pipe, once, whichever thread comes first
    (a pipe may be ended by close(timeout=) and by its own shutdown at once; closing an fd
    twice could close a file opened since under the same number)."""
    with _PIPE_LOCK:
        for conn in pipe:
            if not conn.closed:
                conn.close()


def _end_within(ending, timeout):
    """End the (pool, pipe) pairs of ``ending`` within about ``timeout`` + 3 s: queued
    tasks cancelled, running ones given ``timeout``; then the pipe the workers watch
    closed (each exits at EOF, :func:`~streamk.parallel.worker_process.exit_with_parent`),
    then SIGKILL for any left; then the pools' manager threads are let end and collected."""
    processes, managers = [], []
    for pool, _ in ending:  # both read before shutdown forgets them
        processes += list((getattr(pool, "_processes", None) or {}).values())
        managers.append(getattr(pool, "_executor_manager_thread", None))
        pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + timeout
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for _, pipe in ending:
        _close_pipe(pipe)
    deadline = time.monotonic() + 1.0
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)
    # The manager threads hold the pools' queues until they end (their workers are gone: they
    # notice at once); then collect, so that the queues' semaphores are unlinked now, not at
    # interpreter exit -- a process that ends by a signal right after (a server re-raising
    # SIGTERM) runs no finalizer, and multiprocessing's resource tracker would warn of
    # "leaked semaphore objects".
    deadline = time.monotonic() + 2.0
    for t in managers:
        if t is not None:
            t.join(max(0.0, deadline - time.monotonic()))
    del managers, processes  # the thread objects keep the queues as attributes
    gc.collect()


__all__ = ["CRASHED", "TaskFailure", "WorkerPool", "retry_alone"]

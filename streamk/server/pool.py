"""The server's encoding workers: an adapter of :class:`streamk.parallel.WorkerPool` to
the event loop, so that the loop never waits on a CPU-bound step, nor on a process.

The processes, their set-up (one thread per library, the describing context built once
per process, death with the server even when the server is killed with SIGKILL) and the
crash-and-retry are streamk.parallel's, as for ingestion: a worker that dies on an image
breaks the pool; a fresh pool is started and the image tried once more, alone in a fresh
process (:func:`streamk.parallel.retry_alone`); a second death is the image's error
(``WorkerCrashedError``), never the server's.

Nothing large crosses a pipe to start a worker: each loads the encoder and the visual
words from the index itself (:func:`~streamk.server.tasks.index_describe_context`), and
is sent the index's path, the extractor's parameters and a fingerprint (a few hundred
bytes; the encoder pickled into every start was ~16 MB, and a worker that died before
reading it all left the write, and the event loop, blocked for good). Every step that
may wait on a process -- a submit (which starts a worker), replacing a broken pool, a
retry -- runs in a thread, never on the event loop, the submit with a bounded wait.
"""

import asyncio
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial

from ..errors import ConfigError
from ..index import ImageFailure
from ..parallel import CRASHED, MAX_WORKERS, TaskFailure, WorkerPool, max_workers, retry_alone
from .tasks import index_task_context

SUBMIT_TIMEOUT = 30.0  # s: a submit (it may start a worker process) that takes longer is a crashed start
CLOSE_TIMEOUT = 10.0  # s: the running tasks' time to finish at close, before their workers are ended


class EncodingPool:
    """``workers`` processes describing images for the index at ``index_path`` (its
    encoder, of ``fingerprint``; its visual words when ``local_features``) with
    ``extractor``. ``await pool.run(fn, item)`` runs ``fn(context, item)`` in one of them."""

    def __init__(self, index_path, extractor, fingerprint, local_features=False, workers=2,
                 submit_timeout=SUBMIT_TIMEOUT):
        workers = int(workers)
        if workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {workers}")
        if workers > max_workers():  # ingestion's bound: each is a process with the encoder loaded
            raise ConfigError(f"--workers {workers:,} is over streamk's limit of {max_workers():,} local processes "
                              f"(4 per core, at least {MAX_WORKERS})")
        self.workers = workers
        self.submit_timeout = float(submit_timeout)
        self._pool = WorkerPool(workers, index_task_context(index_path, extractor, fingerprint, local_features))
        # submits and replacements (each may start a process); retries wait in the loop's default threads
        self._threads = ThreadPoolExecutor(max_workers=workers + 2, thread_name_prefix="streamk-workers")
        self._free = None  # (event loop, asyncio.Semaphore of the workers free), made in the loop that runs tasks
        self._busy = self._waiting = 0  # tasks in the workers, tasks waiting for one (:meth:`load`)

    @property
    def context(self):
        """The TaskContext the next tasks run with."""
        return self._pool.context

    def start(self, warm=True):
        """Start the processes (and, ``warm``, wait until each has built its context)."""
        self._pool.start(warm)
        return self

    def use_vocabulary(self):
        """Describe images with the index's visual words from now on (another process gave
        the index local geometry): a fresh pool of workers, which load them; the old one
        finishes the tasks it holds, then ends."""
        context = self._pool.context
        self._pool.use_context(context._replace(params=dict(context.params, local_features=True)))

    def _gate(self, loop):
        """The semaphore of the workers free, for tasks run from ``loop``."""
        if self._free is None or self._free[0] is not loop:
            self._free = (loop, asyncio.Semaphore(self.workers))
        return self._free[1]

    def load(self):
        """{"workers_busy": tasks in the workers now (one cancelled while it ran counts
        until it ends), "worker_queue": tasks waiting for a worker} (in the event loop)."""
        return {"workers_busy": self._busy, "worker_queue": self._waiting}

    def _freed(self, gate):
        self._busy -= 1
        gate.release()

    async def run(self, fn, item):
        """``fn(context, item)`` in a worker; a worker that died on it twice (or did not
        start in time) gives ``{"error": ImageFailure("WorkerCrashedError", ...)}``.
        Cancelled before a worker started it, it is never run (see the module doc)."""
        loop = asyncio.get_running_loop()
        gate = self._gate(loop)
        self._waiting += 1
        try:
            await gate.acquire()  # a worker free; a task cancelled while it waits here never reaches one
        finally:
            self._waiting -= 1
        self._busy += 1
        release = _Release(loop, partial(self._freed, gate))
        try:
            result = await self._submitted(loop, fn, item, release)
        finally:
            release.unless_held()
        if result is not _RETRY:
            return result
        result = await loop.run_in_executor(None, retry_alone, self._pool.context, fn, item, self._pool)
        return {"error": ImageFailure.of_task(result)} if isinstance(result, TaskFailure) else result

    async def _submitted(self, loop, fn, item, release):
        """The task's result from the pool, or _RETRY after a break; ``release`` frees its
        worker's place once the pool's future of it is done (cancelled included)."""
        generation = None
        submitting = loop.run_in_executor(self._threads, self._pool.submit, fn, item)
        try:
            try:
                future, generation = await asyncio.wait_for(asyncio.shield(submitting), self.submit_timeout)
            except asyncio.CancelledError:  # cancelled while submitting: the task is dropped once submitted
                release.hold()
                submitting.add_done_callback(release.cancel_submitted)
                raise
            release.when_done(future)
            return await asyncio.wrap_future(future, loop=loop)  # cancelled: cancels the future unless it runs
        except BrokenProcessPool:
            await loop.run_in_executor(self._threads, self._pool.replace, generation)
        except asyncio.TimeoutError:  # the submit is stuck starting a process: a fresh pool for the next ones
            generation = self._pool.generation
            await loop.run_in_executor(self._threads, self._pool.replace, generation)
            return {"error": ImageFailure.of_task(TaskFailure("crashed", CRASHED))}
        return _RETRY

    def close(self, timeout=CLOSE_TIMEOUT):
        """End the workers: the running tasks have ``timeout`` s to finish, then their
        processes are ended (bounded: a stop never waits on a worker for good)."""
        self._pool.close(timeout=timeout)
        self._threads.shutdown(wait=False, cancel_futures=True)


_RETRY = object()  # EncodingPool._submitted: the pool broke under the task; try it alone


class _Release:
    """A task's place among the workers, given back once (``free``, in the loop): when the
    pool's future of it is done (:meth:`when_done`: run, failed or cancelled in time), else
    when the task ends without one (:meth:`unless_held`)."""

    def __init__(self, loop, free):
        self.loop, self.free, self.held = loop, free, False

    def when_done(self, future):
        self.held = True
        future.add_done_callback(self._released)

    def hold(self):
        self.held = True

    def unless_held(self):
        if not self.held:
            self.held = True
            self.free()

    def cancel_submitted(self, submitting):
        """(``submitting`` done, in the loop.) Cancel the pool's future of a task whose
        request was cancelled while it was submitted; its place given back when that is done."""
        if submitting.cancelled() or submitting.exception() is not None:
            self.free()
            return
        future = submitting.result()[0]
        future.add_done_callback(self._released)
        future.cancel()

    def _released(self, future):  # any thread: the pool's own, or the loop's (a cancel)
        try:
            self.loop.call_soon_threadsafe(self.free)
        except RuntimeError:  # the loop is closed: nobody waits on the gate any more
            pass


__all__ = ["CLOSE_TIMEOUT", "EncodingPool", "SUBMIT_TIMEOUT"]

"""The server's encoding workers: a persistent pool of processes that extract and encode
uploaded images, so that the event loop never waits on a CPU-bound step.

The pool is a ``concurrent.futures.ProcessPoolExecutor`` of spawned processes set up by
streamk.parallel's worker initialiser: one thread per library in each, the context
(encoder, extractor, vocabulary) built once per process, and death with the server, even
when the server is killed with SIGKILL. A worker that dies on an image (a crash in a
native library) breaks the pool: a fresh pool is started and the image tried once more
alone; a second death is the image's error, never the server's.
"""

import asyncio
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ..errors import ConfigError
from ..index import describe_task_context
from ..parallel.worker_process import pool_worker_init, run_task

CRASHED = ("WorkerCrashedError", "the worker process died on this image (a crash in a native library); "
                                 "the image was not used")


class EncodingPool:
    """``workers`` processes describing images for an index's encoder, extractor and
    vocabulary. ``await pool.run(fn, item)`` runs ``fn(context, item)`` in one of them."""

    def __init__(self, encoder_bytes, extractor, vocabulary_bytes=None, workers=2):
        workers = int(workers)
        if workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {workers}")
        self.workers = workers
        self.context = describe_task_context(bytes(encoder_bytes), extractor, vocabulary=None if vocabulary_bytes
                                             is None else bytes(vocabulary_bytes))
        self._token = self.context.token()
        self._lock = threading.Lock()
        self._pool = None
        self._pipe = None
        self._generation = 0

    def _start(self):
        mp = multiprocessing.get_context("spawn")  # fork after Numba / OpenMP threads ran can deadlock
        parent_alive, keep_open = mp.Pipe(duplex=False)  # workers hold the read end: EOF when we die
        pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=mp, initializer=pool_worker_init,
                                   initargs=(parent_alive, os.getpid(), self._token, self.context))
        return pool, (parent_alive, keep_open)

    def start(self, warm=True):
        """Start the processes (and, ``warm``, wait until each has built its context)."""
        with self._lock:
            if self._pool is None:
                self._pool, self._pipe = self._start()
                self._generation += 1
        if warm:  # one no-op task per worker: each process starts and builds its context now
            futures = [self._pool.submit(run_task, self._token, None, _noop, i) for i in range(self.workers)]
            for f in futures:
                f.result()
        return self

    def _current(self):
        with self._lock:
            if self._pool is None:
                self._pool, self._pipe = self._start()
                self._generation += 1
            return self._pool, self._generation, self._token

    def use_vocabulary(self, vocabulary_bytes):
        """Describe images with these visual words from now on (the index was given local
        geometry by another process): a fresh pool of workers; the old one finishes the
        tasks it holds, then ends."""
        with self._lock:
            params = dict(self.context.params, vocabulary=bytes(vocabulary_bytes))
            self.context = self.context._replace(params=params)
            self._token = self.context.token()
            if self._pool is not None:
                self._swap(cancel=False)

    def _replace(self, generation):
        """A fresh pool after the one of ``generation`` broke (once, whoever notices first)."""
        with self._lock:
            if self._generation == generation and self._pool is not None:
                self._swap(cancel=True)

    def _swap(self, cancel):
        """(Under the lock.) Start a fresh pool; the old one ends in the background, its
        queued tasks cancelled or (``cancel`` False) run first."""
        old, pipe = self._pool, self._pipe
        self._pool, self._pipe = self._start()
        self._generation += 1
        threading.Thread(target=_shutdown, args=(old, pipe, cancel), daemon=True).start()

    async def run(self, fn, item):
        """``fn(context, item)`` in a worker; a worker that died on it twice gives
        ``{"error": CRASHED}``."""
        loop = asyncio.get_running_loop()
        for attempt in range(2):
            pool, generation, token = self._current()
            try:
                fut = pool.submit(run_task, token, None, fn, item)
                return await asyncio.wrap_future(fut, loop=loop)
            except BrokenProcessPool:
                self._replace(generation)
        return {"error": CRASHED}

    def close(self):
        with self._lock:
            pool, pipe, self._pool, self._pipe = self._pool, self._pipe, None, None
        if pool is not None:
            _shutdown(pool, pipe, cancel=True)


def _noop(ctx, item):
    return item


def _shutdown(pool, pipe, cancel):
    pool.shutdown(wait=True, cancel_futures=cancel)
    for conn in pipe:  # after the workers are gone: closing our end ends any straggler
        conn.close()


__all__ = ["CRASHED", "EncodingPool"]

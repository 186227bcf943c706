"""The server's encoding workers: an adapter of :class:`streamk.parallel.WorkerPool` to
the event loop, so that the loop never waits on a CPU-bound step.

The processes, their set-up (one thread per library, the context of
:func:`streamk.index.describe_context` built once per process, death with the server even
when the server is killed with SIGKILL) and the crash-and-retry are streamk.parallel's,
as for ingestion: a worker that dies on an image breaks the pool; a fresh pool is
started and the image tried once more, alone in a fresh process
(:func:`streamk.parallel.retry_alone`); a second death is the image's error
(``WorkerCrashedError``), never the server's.
"""

import asyncio
from concurrent.futures.process import BrokenProcessPool

from ..errors import ConfigError
from ..index import ImageFailure, describe_task_context
from ..parallel import TaskFailure, WorkerPool, retry_alone


class EncodingPool:
    """``workers`` processes describing images for an index's encoder, extractor and
    vocabulary. ``await pool.run(fn, item)`` runs ``fn(context, item)`` in one of them."""

    def __init__(self, encoder_bytes, extractor, vocabulary_bytes=None, workers=2):
        workers = int(workers)
        if workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {workers}")
        self.workers = workers
        vocabulary = None if vocabulary_bytes is None else bytes(vocabulary_bytes)
        self._pool = WorkerPool(workers, describe_task_context(bytes(encoder_bytes), extractor, vocabulary=vocabulary))

    @property
    def context(self):
        """The TaskContext the next tasks run with."""
        return self._pool.context

    def start(self, warm=True):
        """Start the processes (and, ``warm``, wait until each has built its context)."""
        self._pool.start(warm)
        return self

    def use_vocabulary(self, vocabulary_bytes):
        """Describe images with these visual words from now on (the index was given local
        geometry by another process): a fresh pool of workers; the old one finishes the
        tasks it holds, then ends."""
        context = self._pool.context
        self._pool.use_context(context._replace(params=dict(context.params, vocabulary=bytes(vocabulary_bytes))))

    async def run(self, fn, item):
        """``fn(context, item)`` in a worker; a worker that died on it twice gives
        ``{"error": ImageFailure("WorkerCrashedError", ...)}``."""
        loop = asyncio.get_running_loop()
        future, generation = self._pool.submit(fn, item)
        try:
            return await asyncio.wrap_future(future, loop=loop)
        except BrokenProcessPool:
            self._pool.replace(generation)
        result = await loop.run_in_executor(None, retry_alone, self._pool.context, fn, item)
        return {"error": ImageFailure.of_task(result)} if isinstance(result, TaskFailure) else result

    def close(self):
        self._pool.close()


__all__ = ["EncodingPool"]

"""The Dask executor: per-image tasks on a Dask distributed cluster, the same tasks
and results as the local pool (:mod:`streamk.parallel.executors`).

    streamk ingest my-index photos/ --dask tcp://scheduler:8786
    streamk ingest my-index photos/ --dask local:4       # a LocalCluster started here

Each worker is prepared once by a worker plugin (one thread per task for BLAS,
OpenMP, OpenCV and Numba); the run's context (a TaskContext: for ingestion the
encoder bytes, extractor and cache folder) is scattered to every worker once and
built there once per worker. Tasks are submitted as the input is read, at
most ``max_inflight`` at a time (default: twice the cluster's threads,
re-read as workers come and go). A task whose worker died is rescheduled by
the scheduler on another worker; after ``distributed.scheduler.allowed-failures``
deaths (default 3) the item gets ``TaskFailure("crashed", ...)``.

The image files must be readable at the same path on every worker (a shared
folder, or one machine); the index itself stays with the process that writes
it and is never sent to a worker.
"""

import asyncio
import logging
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from distributed import Client, LocalCluster, as_completed
from distributed.diagnostics.plugin import WorkerPlugin

from ..config import dask_connect_timeout
from ..errors import ClusterError
from .executors import Executor, parse_dask_address
from .worker_pool import CRASHED, TaskFailure
from .worker_process import prepare_worker_process, run_task

PLUGIN_NAME = "streamk-worker-setup"


class StreamkWorkerSetup(WorkerPlugin):
    """Runs in each worker process when it starts (and in workers that join later)."""

    idempotent = True

    def setup(self, worker):
        prepare_worker_process()


def connect(address, timeout=None):
    """A Client of the scheduler at ``address`` (checked by parse_dask_address), or a
    ClusterError naming the address and the cause within ``timeout`` seconds (default
    :func:`streamk.config.dask_connect_timeout`, 10 s): a TCP address is dialled first, so
    that a refused connection or an unknown host is said at once instead of retried until
    the timeout; then Dask's handshake, bounded by the same timeout."""
    timeout = dask_connect_timeout() if timeout is None else float(timeout)
    scheme, sep, rest = address.partition("://")
    if not sep or scheme == "tcp":
        host, _, port = (rest if sep else address).rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except socket.gaierror as exc:
            raise ClusterError(f"cannot reach the Dask scheduler at {address}: unknown host {host!r} ({exc.strerror})",
                               address=address) from None
        except TimeoutError:
            raise ClusterError(f"cannot reach the Dask scheduler at {address}: no answer within {timeout:g} s "
                               f"(STREAMK_DASK_TIMEOUT)", address=address) from None
        except OSError as exc:
            raise ClusterError(f"cannot reach the Dask scheduler at {address}: {exc.strerror or exc} (is the "
                               f"scheduler running, and its port open to this machine?)", address=address) from None
    try:
        # Dask's own handshake, bounded here (Client's timeout does not bound a port that
        # accepts and never speaks); in a thread of its own, as a notebook runs a loop already
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, _handshake(address, timeout)).result()
        return Client(address, timeout=timeout)
    except (OSError, TimeoutError, asyncio.TimeoutError, ValueError) as exc:
        cause = f"no Dask answer within {timeout:g} s (STREAMK_DASK_TIMEOUT)" if isinstance(
            exc, (TimeoutError, asyncio.TimeoutError)) or "Timed out" in str(exc) else f"{type(exc).__name__}: {exc}"
        raise ClusterError(f"cannot connect to the Dask scheduler at {address}: {cause}", address=address) from None


async def _handshake(address, timeout):
    from distributed.comm import connect as dial

    comm = await asyncio.wait_for(dial(address, timeout=timeout), timeout)
    comm.abort()


class DaskExecutor(Executor):
    """Tasks on a Dask cluster: ``target`` is a scheduler address, ``"local:N"`` or a
    ``distributed.Client``. A LocalCluster started here is closed by :meth:`close`;
    a given Client is left open."""

    name = "dask"

    def __init__(self, target):
        self._cluster = None
        self._own_client = True
        if isinstance(target, Client):
            self.client, self._own_client = target, False
            self.address = target.scheduler.address
        else:
            kind, value = parse_dask_address(target)
            if kind == "local":
                # processes: the GIL-bound parts of extraction run in parallel; one thread each
                self._cluster = LocalCluster(n_workers=value, threads_per_worker=1, processes=True,
                                             dashboard_address=None, silence_logs=logging.ERROR)
                self.client = Client(self._cluster)
            else:
                self.client = connect(value)
            self.address = self.client.scheduler.address
        self.client.register_plugin(StreamkWorkerSetup(), name=PLUGIN_NAME)
        self._nthreads_at = 0.0
        self._nthreads = 1
        self._spec = None  # (token, future of the spec scattered to every worker)

    @property
    def workers(self):
        """Threads of the cluster right now (at least 1)."""
        if time.monotonic() - self._nthreads_at > 2.0:
            self._nthreads = max(1, sum(self.client.nthreads().values()))
            self._nthreads_at = time.monotonic()
        return self._nthreads

    def map_unordered(self, fn, items, context, max_inflight=None):
        """Yield ``(item, result)`` in completion order; see the module doc."""
        from distributed.scheduler import KilledWorker

        token = context.token()
        spec_future = self._scatter(token, context)
        items = iter(items)
        inflight = {}
        queue = as_completed()
        prefix = f"streamk-{fn.__name__}-"

        def fill():
            limit = max_inflight or 2 * self.workers
            while len(inflight) < limit:
                try:
                    item = next(items)
                except StopIteration:
                    return
                fut = self.client.submit(run_task, token, spec_future, fn, item, pure=False,
                                         key=prefix + uuid.uuid4().hex)
                inflight[fut.key] = item
                queue.add(fut)

        try:
            fill()
            for fut in queue:
                item = inflight.pop(fut.key)
                try:
                    result = fut.result()
                except KilledWorker:
                    result = TaskFailure("crashed", CRASHED)
                except Exception as exc:
                    result = TaskFailure.of(exc)
                fut.release()
                yield item, result
                fill()
        finally:
            for fut in list(queue.futures):
                fut.cancel()

    def _scatter(self, token, spec):
        """The context on every worker, sent once for runs with the same one (watch mode)."""
        if self._spec is None or self._spec[0] != token:
            if self._spec is not None:
                self._spec[1].release()
            [future] = self.client.scatter([spec], broadcast=True, hash=False)  # one object, not its values
            self._spec = (token, future)
        return self._spec[1]

    def close(self):
        if self._spec is not None:
            self._spec[1].release()
            self._spec = None
        if self._own_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

__all__ = ["DaskExecutor", "StreamkWorkerSetup"]

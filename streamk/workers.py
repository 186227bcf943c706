"""Executors for per-image tasks: in this process, a local crash-isolating process
pool, or a Dask cluster (:mod:`streamk.cluster`) -- one code path for all three.

A task is a module-level function ``fn(context, item) -> result`` that never
raises for a bad input (it returns the error as its result). The *context* is
what every task of a run shares: the encoder, the extractor and the feature
cache. It is described once by a *spec* (a dict: ``encoder`` as the bytes of
:meth:`~streamk.encoder.Encoder.to_bytes` or an Encoder, ``extractor``,
``cache_dir``), sent to each worker once, built there once (decoded, Numba
kernels warmed) and kept for the next tasks of any run with the same spec.

    ex = make_executor(workers=2)                    # or make_executor(dask="local:2")
    for item, result in ex.map_unordered(fn, items, spec, crashed, failed):
        ...
    ex.close()

``map_unordered`` streams: it takes the next item from ``items`` (any iterable,
read lazily) only when fewer than ``max_inflight`` tasks are running
(back-pressure), and yields results in completion order. An item whose task
killed its worker process (a segfault in a C++ detector, an OOM kill, a
``kill -9``) is retried; only an item that kills a fresh worker again gets
``crashed(item)`` as its result, so a killed worker loses nothing.

Local pool workers die with their parent, even when the parent is killed with
SIGKILL: each worker asks the kernel for SIGKILL on its parent's death
(``prctl(PR_SET_PDEATHSIG)``, Linux), checks right after that its parent is
still the one that started it (the parent may have died before the prctl), and
watches a pipe whose only writer is the parent: the read returns (EOF) when
the parent is gone, however it died.
"""

import hashlib
import os
import pickle
import signal
import sys
import threading
from collections import OrderedDict, deque
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool

from .errors import ConfigError

# --------------------------------------------------------------------------- worker side
_CONTEXTS = OrderedDict()  # per process: spec token -> built context (a few, newest last)
_MAX_CONTEXTS = 2
_IN_WORKER = False  # True in pool and Dask worker processes (not in the parent)
_PR_SET_PDEATHSIG = 1


def spec_token(spec):
    """A digest of a spec: equal specs share their built context in a worker."""
    h = hashlib.sha256()
    for name in sorted(spec):
        value = spec[name]
        if name == "encoder" and value is not None and not isinstance(value, bytes):
            value = value.fingerprint
        h.update(name.encode() + b"\0" + (value if isinstance(value, bytes) else pickle.dumps(value)))
    return h.hexdigest()


def _exit_when_parent_dies(parent_alive, parent_pid):
    """SIGKILL on the parent's death (Linux), a check for a parent already gone, and a
    thread that exits when the pipe from the parent closes (any OS, any death).

    PR_SET_PDEATHSIG fires when the parent *thread* that started the worker ends: the
    pool starts its workers from the thread that submits (the one iterating
    ``map_unordered``), and shuts them down before that iteration returns."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the pipe still works
            pass
    if parent_pid is not None and os.getppid() != parent_pid:  # died before the prctl
        os._exit(1)

    def watch():
        try:
            parent_alive.recv()  # nothing is ever sent: returns only at EOF
        except (EOFError, OSError):
            pass
        os._exit(1)

    if parent_alive is not None:
        threading.Thread(target=watch, name="streamk-parent-watch", daemon=True).start()


def prepare_worker_process():
    """One thread per task in a worker process: BLAS, OpenMP (pyhesaff), OpenCV, Numba.

    Libraries loaded later read the environment; those already loaded are limited
    through threadpoolctl and Numba's API. Cores are shared by worker processes,
    not by threads inside them.
    """
    global _IN_WORKER
    _IN_WORKER = True
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    from . import features

    features._IN_WORKER = True  # OpenCV's own threads off
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover - a scikit-learn dependency, normally present
        pass
    _numba_one_thread()


def _numba_one_thread():
    try:
        import numba

        numba.set_num_threads(1)  # thread-local in Numba: called in each task's thread too
    except (ImportError, ValueError):  # pragma: no cover
        pass


def _build_context(spec):
    from .encoder import Encoder
    from .features import FeatureCache

    encoder = spec.get("encoder")
    if isinstance(encoder, (bytes, bytearray)):
        encoder = Encoder.from_bytes(bytes(encoder))
    cache_dir = spec.get("cache_dir")
    ctx = {"encoder": encoder, "extractor": spec.get("extractor"),
           "cache": None if cache_dir is None else FeatureCache(cache_dir)}
    if encoder is not None and _IN_WORKER:
        _warm(encoder)
    return ctx


def _warm(encoder):
    """Load (or compile once, cache=True) the Numba kernels this encoder calls, before
    the first image: a few random descriptors through the whole encoder."""
    import numpy as np

    rng = np.random.default_rng(0)
    try:
        encoder.encode(rng.integers(0, 256, (16, encoder.input_dim)).astype(np.float32))
    except Exception:  # a warm-up only: a real image reports its own errors
        pass


def context(token, spec):
    """The built context of ``spec`` in this process (built on first use)."""
    ctx = _CONTEXTS.get(token)
    if ctx is None:
        if spec is None:
            raise RuntimeError("streamk worker: task for an unknown context (no spec sent)")
        ctx = _CONTEXTS[token] = _build_context(spec)
        while len(_CONTEXTS) > _MAX_CONTEXTS:
            _CONTEXTS.popitem(last=False)
    else:
        _CONTEXTS.move_to_end(token)
    return ctx


def run_task(token, spec, fn, item):
    """What runs in a worker for one item: the context, then ``fn(context, item)``."""
    if _IN_WORKER:
        _numba_one_thread()
    return fn(context(token, spec), item)


def _pool_worker_init(parent_alive, parent_pid, token, spec):
    _exit_when_parent_dies(parent_alive, parent_pid)
    prepare_worker_process()
    context(token, spec)


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

    def map_unordered(self, fn, items, spec, crashed, failed, max_inflight=None):  # pragma: no cover
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

    def map_unordered(self, fn, items, spec, crashed=None, failed=None, max_inflight=None):
        token = spec_token(spec)
        for item in items:
            yield item, run_task(token, spec, fn, item)


class LocalPoolExecutor(Executor):
    """``workers`` spawned processes on this machine; see the module doc (crash
    isolation, death with the parent). A pool lives for one ``map_unordered``."""

    name = "local pool"

    def __init__(self, workers=None):
        workers = default_workers() if workers is None else int(workers)
        if workers < 1:
            raise ConfigError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def _pool(self, n, token, spec):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn: fork after OpenCV / OpenMP / Numba threads have run can deadlock the child
        mp = multiprocessing.get_context("spawn")
        parent_alive, keep_open = mp.Pipe(duplex=False)  # children get the read end only
        pool = ProcessPoolExecutor(max_workers=n, mp_context=mp, initializer=_pool_worker_init,
                                   initargs=(parent_alive, os.getpid(), token, spec))
        return pool, (parent_alive, keep_open)

    @staticmethod
    def _shutdown(pool, pipe):
        pool.shutdown(wait=True, cancel_futures=True)
        for conn in pipe:  # after the workers are gone: closing the write end ends them
            conn.close()

    def map_unordered(self, fn, items, spec, crashed, failed, max_inflight=None):
        """Yield ``(item, result)`` in completion order; see the module doc.

        crashed(item): the result of an item that killed a worker twice (alone in a
        fresh process the second time); failed(item, exc): the result of an item
        whose future raised something else (e.g. a result that cannot be sent back).
        """
        token = spec_token(spec)
        items = iter(items)
        limit = max_inflight or 2 * self.workers
        retry = deque()  # items whose worker died: each re-run alone in a fresh process
        exhausted = False
        while not exhausted or retry:
            while retry:
                item = retry.popleft()
                pool, pipe = self._pool(1, token, spec)
                try:
                    result = pool.submit(run_task, token, None, fn, item).result()
                except BrokenProcessPool:
                    result = crashed(item)
                except Exception as exc:
                    result = failed(item, exc)
                finally:
                    self._shutdown(pool, pipe)
                yield item, result
            if exhausted:
                break
            pool, pipe = self._pool(self.workers, token, spec)
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
                            result = failed(item, exc)
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
    return "remote", text


def make_executor(workers=None, dask=None):
    """The executor for ``workers`` local processes (None: all cores; 1: in this process),
    or for a Dask cluster: ``dask`` = a scheduler address, ``"local:N"`` (a LocalCluster of
    N single-threaded worker processes started here), or a ``distributed.Client``."""
    if dask is not None:
        from .cluster import DaskExecutor

        return DaskExecutor(dask)
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    return InlineExecutor() if workers == 1 else LocalPoolExecutor(workers)


__all__ = ["Executor", "InlineExecutor", "LocalPoolExecutor", "context", "default_workers", "make_executor",
           "parse_dask_address", "prepare_worker_process", "run_task", "spec_token"]

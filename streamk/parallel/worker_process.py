"""What runs inside a worker process: its set-up, the shared context of a run, and one task.

A worker process (of the local pool, or a Dask worker) is prepared once:
one thread per task for every library thread pool (BLAS, OpenMP, OpenCV,
Numba), since cores are shared by worker processes, not by threads inside
them. A *context* is what every task of a run shares (for ingestion: the
encoder, the extractor, the feature cache); it is described by a
:class:`TaskContext`, sent once, built once per worker process by the
context's own ``build`` function and kept for the next runs with the same
description. This module knows nothing of what a context holds.

Local pool workers die with their parent, even when the parent is killed with
SIGKILL (:func:`exit_with_parent`).
"""

import hashlib
import os
import pickle
import signal
import sys
import threading
from collections import OrderedDict
from typing import Callable, NamedTuple

_CONTEXTS = OrderedDict()  # per process: token -> built context (a few, newest last)
_MAX_CONTEXTS = 2
_in_worker = False  # True in pool and Dask worker processes (not in the parent)
_PR_SET_PDEATHSIG = 1


class TaskContext(NamedTuple):
    """What every task of a run shares, built in each worker by ``build(**params)``.

    build: a module-level function (sent by reference); params: its keyword
    arguments (sent once per worker); key: a short digest standing for ``params``
    when they are large or not picklable as they are (e.g. an in-process Encoder);
    None: the digest of the pickled params.
    """

    build: Callable
    params: dict
    key: str | None = None

    def token(self):
        h = hashlib.sha256(f"{self.build.__module__}.{self.build.__qualname__}".encode())
        if self.key is not None:
            h.update(b"\0key\0" + self.key.encode())
        else:
            for name in sorted(self.params):
                value = self.params[name]
                h.update(name.encode() + b"\0" + (value if isinstance(value, bytes) else pickle.dumps(value)))
        return h.hexdigest()


def in_worker_process():
    """True in a pool or Dask worker process prepared by :func:`prepare_worker_process`."""
    return _in_worker


def exit_with_parent(parent_alive=None, parent_pid=None):
    """End this process when its parent ends, however it ends (SIGKILL included).

    SIGKILL on the parent's death (Linux ``prctl(PR_SET_PDEATHSIG)``), a check for
    a parent already gone (``parent_pid``), and a thread that exits when the pipe
    ``parent_alive`` (a Connection whose only writer is the parent) reaches EOF.

    PR_SET_PDEATHSIG fires when the parent *thread* that started this process ends:
    the pool starts its workers from the thread that submits (the one iterating
    ``map_unordered``) and shuts them down before that iteration returns."""
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
    """One thread per task in this worker process: BLAS, OpenMP, OpenCV, Numba.

    Libraries loaded later read the environment; those already loaded are limited
    through threadpoolctl, Numba's API and OpenCV's."""
    global _in_worker
    _in_worker = True
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENCV_FOR_THREADS_NUM"):
        os.environ[var] = "1"
    if "cv2" in sys.modules:  # already loaded: its pool was sized at import
        try:
            sys.modules["cv2"].setNumThreads(1)
        except AttributeError:  # pragma: no cover
            pass
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover - a scikit-learn dependency, normally present
        pass
    numba_one_thread()


def numba_one_thread():
    try:
        import numba

        numba.set_num_threads(1)  # thread-local in Numba: called in each task's thread too
    except (ImportError, ValueError):  # pragma: no cover
        pass


def context(token, spec):
    """The built context of ``spec`` (a TaskContext) in this process (built on first use)."""
    ctx = _CONTEXTS.get(token)
    if ctx is None:
        if spec is None:
            raise RuntimeError("streamk worker: task for an unknown context (no context sent)")
        ctx = _CONTEXTS[token] = spec.build(**spec.params)
        while len(_CONTEXTS) > _MAX_CONTEXTS:
            _CONTEXTS.popitem(last=False)
    else:
        _CONTEXTS.move_to_end(token)
    return ctx


def run_task(token, spec, fn, item):
    """What runs in a worker for one item: the context, then ``fn(context, item)``."""
    if _in_worker:
        numba_one_thread()
    return fn(context(token, spec), item)


def pool_worker_init(parent_alive, parent_pid, token, spec):
    exit_with_parent(parent_alive, parent_pid)
    prepare_worker_process()
    context(token, spec)


__all__ = ["TaskContext", "context", "exit_with_parent", "in_worker_process", "numba_one_thread",
           "pool_worker_init", "prepare_worker_process", "run_task"]

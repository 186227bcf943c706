"""WorkerPool.close(timeout=): a stop never waits on a worker for good. A task that never
ends, in the pool, in a pool swapped out, or retried alone for the pool, has its
process ended (pipe closed, then SIGKILL) once the timeout has passed."""

import os
import threading

from helpers.processes import alive
from helpers.waiting import poll

from streamk.parallel import TaskContext, TaskFailure, WorkerPool, retry_alone

SPEC = TaskContext(dict, {})


def _pid_then_hang(ctx, folder):
    with open(os.path.join(folder, f"{os.getpid()}"), "w"):
        pass
    threading.Event().wait(3600)  # a task that never ends: its process must be ended


def _wait_for_pids(folder, n, timeout=120):
    poll(lambda: len(os.listdir(folder)) >= n, timeout, interval=0.02)
    return [int(p) for p in os.listdir(folder)]


def test_close_with_a_timeout_ends_hung_tasks_of_every_pool_it_started(tmp_path):
    pool = WorkerPool(1, SPEC)
    hung = pool.submit(_pid_then_hang, str(tmp_path))[0]
    _wait_for_pids(tmp_path, 1)
    pool.use_context(TaskContext(dict, {"value": 1}))  # the hung pool is swapped out: it ends "after its tasks"
    pool.submit(_pid_then_hang, str(tmp_path))
    retried = []
    thread = threading.Thread(target=lambda: retried.append(retry_alone(SPEC, _pid_then_hang, str(tmp_path), pool)))
    thread.start()
    pids = _wait_for_pids(tmp_path, 3)
    assert len(pids) == 3 and all(alive(p) for p in pids)
    pool.close(timeout=0.5)
    thread.join(timeout=30)
    assert not thread.is_alive() and isinstance(retried[0], TaskFailure)  # the retry answered, not hung
    assert not any(alive(p) for p in pids)  # all three ended by close, none left behind
    assert hung.exception(timeout=30) is not None  # its future failed (the pool broke), not left pending


_DIES_AFTER_CLOSE = """
import os, signal
from streamk.parallel import TaskContext, WorkerPool
pool = WorkerPool(1, TaskContext(dict, {}))
assert pool.submit(isinstance, dict)[0].result(timeout=60) is True  # the pool ran a task
pool.close(timeout=5.0)
os.kill(os.getpid(), signal.SIGTERM)  # as uvicorn re-raises it once the server has stopped: no finalizers run
"""


def test_a_process_killed_right_after_close_leaves_no_semaphore_to_the_resource_tracker():
    """close(timeout=) frees the pool's queues before it returns: a server that ends by its
    re-raised SIGTERM right after closing (no interpreter finalization) leaves nothing for
    multiprocessing's resource tracker to warn about ("leaked semaphore objects")."""
    from helpers.processes import run_python

    for _ in range(3):  # the manager thread's exit races the kill: a few tries
        r = run_python("-c", _DIES_AFTER_CLOSE, timeout=120)
        assert r.returncode == -15, r.stderr
        assert "leaked semaphore" not in r.stderr, r.stderr

"""WorkerPool.close(timeout=): a stop never waits on a worker for good. A task that never
ends, in the pool, in a pool swapped out, or retried alone for the pool, has its
process ended (pipe closed, then SIGKILL) once the timeout has passed."""

import os
import threading
import time

from streamk.parallel import TaskContext, TaskFailure, WorkerPool, retry_alone

SPEC = TaskContext(dict, {})


def _pid_then_hang(ctx, folder):
    with open(os.path.join(folder, f"{os.getpid()}"), "w"):
        pass
    time.sleep(3600)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for_pids(folder, n, timeout=120):
    deadline = time.monotonic() + timeout
    while len(os.listdir(folder)) < n and time.monotonic() < deadline:
        time.sleep(0.02)
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
    assert len(pids) == 3 and all(_alive(p) for p in pids)
    pool.close(timeout=0.5)
    thread.join(timeout=30)
    assert not thread.is_alive() and isinstance(retried[0], TaskFailure)  # the retry answered, not hung
    assert not any(_alive(p) for p in pids)  # all three ended by close, none left behind
    assert hung.exception(timeout=30) is not None  # its future failed (the pool broke), not left pending

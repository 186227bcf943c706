"""Workers that cannot take the server down (issue 25 item 1): the encoding workers of a
real ``streamk serve`` are killed at random moments -- as soon as one appears (while it
starts), a little later (idle or mid-task), or in their initialiser (the test hook
``STREAMK_TEST_WORKER_DIE_AT_START`` of streamk.server.tasks) -- while a client uploads
images without pause and another polls ``/health``.

Held throughout: ``/health`` answers, never hangs (its latency is recorded and the maximum
printed: 0.09 s on 2 quiet cores, 0.98 s at a load of 13 -- the issue's 1 s is a measure,
not asserted, since it depends on the machine's load; the bound asserted, HANG_LIMIT, only
tells a slow answer from the hung event loop of issue 25, which never answered); every upload
is answered, with a result or the named ``worker_crashed`` error
(a crash answered as a crash, never a hang, a 500 or a dropped connection); and SIGTERM
then ends the server, its workers with it, within a bound.

KILLS (100) kills by default: ~35 s on 2 quiet cores (a kill costs the pool a fresh worker:
a process spawned, streamk imported, the encoder loaded from the index), 136 s when the 2
cores were shared at a load of 13; the slow-marked version does 300.
"""

import os
import random
import signal
import threading
import time

import pytest
from helpers.processes import subprocess_env
from helpers.server import alive, child_pids, make_index, png_bytes
from helpers.waiting import poll

from streamk.server.tasks import DIE_AT_START_ENV

KILLS = 100
HANG_LIMIT = 15.0  # s: a /health slower than this is a hung event loop, not load
STOP_LIMIT = 45.0  # s: SIGTERM ends the server (uvicorn's graceful 30 s bound, then the pool's)


def worker_pids(server_pid):
    """The encoding workers among the server's children (not multiprocessing's resource tracker)."""
    out = []
    for pid in child_pids(server_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"spawn_main" in fh.read():
                    out.append(pid)
        except OSError:
            pass
    return out


class Background(threading.Thread):
    """``step()`` run in a loop until ``stop``; what it returns appended to ``seen``."""

    def __init__(self, step, pause=0.0):
        super().__init__(daemon=True)
        self.step, self.pause, self.stop, self.seen, self.errors = step, pause, threading.Event(), [], []

    def run(self):
        while not self.stop.is_set():
            try:
                self.seen.append(self.step())
            except Exception as exc:  # recorded (when): the test fails on one before SIGTERM
                self.errors.append((time.monotonic(), repr(exc)))
            self.stop.wait(self.pause)


def health_step(server):
    import httpx

    t0 = time.monotonic()
    httpx.get(f"{server.url}/health", timeout=HANG_LIMIT).raise_for_status()
    return time.monotonic() - t0


def upload_step(client, photo):
    r = client.post("/search", files={"image": ("p.png", photo, "image/png")})
    code = r.json()["error"]["code"] if r.status_code >= 400 else None
    return r.status_code, code


def kill_one(server_pid, marker, rng, health):
    """One worker death, at a random moment; the pid killed (None: a death at start-up by the hook).
    ``health``: the /health poller, whose answers (one every ~20 ms or more) pace the later kills."""
    mode = rng.random()
    if mode < 0.2:  # in its initialiser: the next worker to start dies there
        marker.touch()
        poll(lambda: not marker.exists(), 10, interval=0.02)
        return None
    before = set(worker_pids(server_pid))
    if mode < 0.5:  # as soon as a new one appears (it is starting)
        fresh = poll(lambda: set(worker_pids(server_pid)) - before, 5, interval=0.005)
        pids = sorted(fresh) if fresh else worker_pids(server_pid)
    else:  # a while after: idle or mid-task
        after = len(health.seen) + rng.randint(0, 10)  # after a random number of /health answers
        poll(lambda: len(health.seen) >= after, 10, interval=0.005)
        pids = worker_pids(server_pid) or poll(lambda: worker_pids(server_pid), 5, interval=0.01) or []
    if not pids:
        return None
    pid = rng.choice(pids)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return pid


def stop_while_a_worker_dies(server, marker):
    """SIGTERM while uploads go on, one worker just killed and the next to start set to die
    in its initialiser; (the workers seen, seconds to exit, when SIGTERM was sent)."""
    workers = worker_pids(server.proc.pid)
    marker.touch()
    if workers:
        os.kill(workers[0], signal.SIGKILL)
    sigterm_at = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(timeout=STOP_LIMIT)
    return workers, time.monotonic() - sigterm_at, sigterm_at


def kill_loop(make_server, photos, tmp_path, kills):
    index = make_index(tmp_path / "idx", photos, n=2)
    marker = tmp_path / "die-at-start"
    server = make_server(index, args=["--workers", "2"], env=subprocess_env(**{DIE_AT_START_ENV: str(marker)}))
    photo = png_bytes(photos["paths"][3])
    health = Background(lambda: health_step(server), pause=0.02)
    with server.client() as client:
        uploads = Background(lambda: upload_step(client, photo))
        health.start()
        uploads.start()
        rng = random.Random(25)
        t0 = time.monotonic()
        try:
            killed = [kill_one(server.proc.pid, marker, rng, health) for _ in range(kills)]
            assert poll(lambda: upload_step(client, photo)[0] == 200, 60, interval=0.1)  # the pool recovered
            loop_s = time.monotonic() - t0
            workers, stop_s, sigterm_at = stop_while_a_worker_dies(server, marker)
        finally:
            for t in (uploads, health):
                t.stop.set()
                t.join(timeout=130)
    health.errors = [e for t, e in health.errors if t < sigterm_at]  # after it, the server is gone: expected
    uploads.errors = [e for t, e in uploads.errors if t < sigterm_at]
    print(f"\n{kills} kills ({sum(k is None for k in killed)} in the initialiser or none found) in {loop_s:.1f} s; "
          f"/health: {len(health.seen)} answers, max {max(health.seen):.3f} s; uploads: {len(uploads.seen)} "
          f"({sum(s == 200 for s, _ in uploads.seen)} results); SIGTERM -> exit in {stop_s:.2f} s")
    return health, uploads, workers, server.log()


def check_kill_loop(make_server, photos, tmp_path, kills):
    health, uploads, workers, log = kill_loop(make_server, photos, tmp_path, kills)
    assert not health.errors, health.errors[:3]
    assert max(health.seen) < HANG_LIMIT
    assert not uploads.errors, uploads.errors[:3]  # every upload answered: no hang, no dropped connection
    answers = set(uploads.seen)
    assert answers <= {(200, None), (422, "worker_crashed")}, (answers, log[-3000:])
    assert (200, None) in answers
    assert poll(lambda: not any(alive(p) for p in workers), 10, interval=0.05)  # the workers ended with it


def test_workers_killed_at_random_moments_never_take_the_server_down(make_server, photos, tmp_path):
    check_kill_loop(make_server, photos, tmp_path, KILLS)


@pytest.mark.slow
def test_workers_killed_at_random_moments_many_times(make_server, photos, tmp_path):
    check_kill_loop(make_server, photos, tmp_path, 3 * KILLS)

"""The server's encoding pool: its workers run images at the same time, a worker that
dies on an image is replaced and the image reported, never the server's failure."""

import asyncio
import pickle
import threading

import pytest
from helpers.server import die, held, make_index, pid_of, rendezvous, touch, words_of
from helpers.waiting import poll

from streamk.server import EncodingPool


@pytest.fixture(scope="module")
def served(photos, tmp_path_factory):
    """An index of one photo, with visual words: what the workers load their encoder from."""
    return str(make_index(tmp_path_factory.mktemp("pool") / "idx", photos, n=1))


def encoding_pool(photos, index, workers, local_features=False):
    return EncodingPool(index, photos["extractor"], photos["encoder"].fingerprint, local_features, workers=workers)


def run(coro):
    return asyncio.run(coro)


def two_rendezvous(photos, index, folder, workers, timeout):
    """Two rendezvous tasks (each waiting up to ``timeout`` s for the other) sent at once to
    a pool of ``workers``: their (pid, whether they met)."""
    pool = encoding_pool(photos, index, workers).start()
    try:
        async def both():
            return await asyncio.gather(*(pool.run(rendezvous, (str(folder), f"t{i}", 2, timeout)) for i in range(2)))
        return run(both())
    finally:
        pool.close()


def test_two_workers_describe_two_images_at_once(photos, served, tmp_path):
    (pid0, met0), (pid1, met1) = two_rendezvous(photos, served, tmp_path, workers=2, timeout=60)
    assert met0 and met1 and pid0 != pid1  # both tasks ran at once, in two processes


def test_one_worker_runs_one_image_at_a_time(photos, served, tmp_path):
    (_, met0), (_, met1) = two_rendezvous(photos, served, tmp_path, workers=1, timeout=2)
    assert not met0  # the first waited alone: the second had not started


def test_a_worker_that_dies_is_replaced_and_the_image_reported(photos, served):
    pool = encoding_pool(photos, served, workers=1).start()
    try:
        before = run(pool.run(pid_of, None))
        out = run(pool.run(die, None))
        assert out["error"][0] == "WorkerCrashedError"
        after = run(pool.run(pid_of, None))
        assert isinstance(after, int) and after != before  # a fresh process took over
    finally:
        pool.close()


def test_new_visual_words_reach_new_tasks_and_the_running_ones_finish(photos, served, tmp_path):
    """use_vocabulary (another process gave the index local geometry): the tasks already
    running or queued finish in the old workers; the tasks after it are described with
    the words."""
    pool = encoding_pool(photos, served, workers=1).start()  # the index has words; the pool not yet
    submitted = []
    submit = pool._pool.submit
    pool._pool.submit = lambda fn, item: submitted.append(fn) or submit(fn, item)  # submits run in a thread
    try:
        async def swap_while_running():
            assert await pool.run(words_of, None) is None
            running = asyncio.ensure_future(pool.run(rendezvous, (str(tmp_path), "t0", 2, 1)))
            while not (tmp_path / "t0").exists():  # the task is in its worker (bounded by wait_for below)
                await asyncio.sleep(0.02)
            queued = [asyncio.ensure_future(pool.run(words_of, None)) for _ in range(3)]
            while len(submitted) < 5:  # each is submitted to the old pool, behind the running one
                await asyncio.sleep(0.01)
            pool.use_vocabulary()
            return await running, await asyncio.gather(*queued), await pool.run(words_of, None)
        (pid, met), old, words = asyncio.run(asyncio.wait_for(swap_while_running(), 120))
        assert isinstance(pid, int) and not met  # it ran to its end (alone) in the old worker
        assert old == [None] * 3  # the tasks queued before the swap were run, not dropped
        assert words == photos["vocabulary"].n_words
    finally:
        pool.close()


def test_a_worker_is_started_with_a_small_payload(photos, served):
    """What each worker is sent to start (the pool's initializer arguments, pickled) is a
    path and a few small values: the encoder (here ~%d KB, 16 MB for a real one) is loaded
    by the worker from the index, not sent through a pipe."""
    pool = encoding_pool(photos, served, workers=1)
    pool.start(warm=False)
    try:
        initargs = pool._pool._pool._initargs
        payload = len(pickle.dumps(initargs[2:]))  # the context (initargs[0] is the parent-death pipe)
        assert payload < 64 * 1024
        assert payload < len(photos["encoder"].to_bytes())  # not the encoder, whatever its size
        assert all(not isinstance(v, (bytes, bytearray)) or len(v) < 1024 for v in pool.context.params.values())
    finally:
        pool.close()


def test_submit_runs_off_the_event_loop_thread(photos, served, monkeypatch):
    """Starting a worker (in the submit) may wait on a process: never on the loop's thread."""
    pool = encoding_pool(photos, served, workers=1)
    threads = []
    submit = pool._pool.submit

    def recording_submit(fn, item):
        threads.append(threading.current_thread())
        return submit(fn, item)
    monkeypatch.setattr(pool._pool, "submit", recording_submit)
    try:
        async def one():
            return threading.current_thread(), await pool.run(pid_of, None)
        loop_thread, pid = run(one())
        assert isinstance(pid, int) and threads and all(t is not loop_thread for t in threads)
    finally:
        pool.close()


def test_more_workers_than_streamk_starts_anywhere_is_refused_before_one_starts(photos, served):
    """`streamk serve IDX --workers 100000` began spawning 100,000 processes (a load of 64 on two cores
    within a minute, until killed); ingestion refuses more than max_workers(), and so does the server, at
    once (exit 2)."""
    from helpers.processes import run_python

    from streamk.errors import ConfigError
    from streamk.parallel import max_workers

    with pytest.raises(ConfigError, match=f"--workers {max_workers() + 1:,} is over streamk's limit of "):
        encoding_pool(photos, served, workers=max_workers() + 1)
    encoding_pool(photos, served, workers=max_workers()).close()  # at the limit: taken (started lazily)
    proc = run_python("-m", "streamk.cli", "serve", served, "--port", "0", "--workers", "100000", timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc
    assert proc.stderr.startswith("streamk: error: --workers 100,000 is over streamk's limit of "), proc


def test_a_task_cancelled_while_it_waits_for_a_worker_never_runs(photos, served, tmp_path):
    """A search whose client hung up (streamk.server.middleware.CancelOnDisconnect) is
    cancelled: its describe, queued behind a busy worker, is dropped, never run, and its
    place given back; one cancelled while it runs ends there, and frees its worker then."""
    pool = encoding_pool(photos, served, workers=1).start()
    started, go, ran = tmp_path / "started", tmp_path / "go", tmp_path / "ran"

    async def scenario():
        loop = asyncio.get_running_loop()
        busy = asyncio.ensure_future(pool.run(held, (str(started), str(go), 60)))
        assert await loop.run_in_executor(None, poll, started.exists, 60)
        queued = asyncio.ensure_future(pool.run(touch, str(ran)))
        await asyncio.sleep(0)  # one turn of the loop: it waits for the worker
        assert pool.load() == {"workers_busy": 1, "worker_queue": 1}
        queued.cancel()
        busy.cancel()  # running in the worker: it goes on there
        await asyncio.gather(queued, busy, return_exceptions=True)
        assert pool.load() == {"workers_busy": 1, "worker_queue": 0}
        go.touch()
        after = await pool.run(pid_of, None)  # the worker free again: the pool not wedged
        return after, pool.load()
    try:
        after, load = run(scenario())
        assert isinstance(after, int) and load == {"workers_busy": 0, "worker_queue": 0}
        assert not ran.exists()  # in order: had it been sent to the worker, it would have run before pid_of
    finally:
        pool.close()

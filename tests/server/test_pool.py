"""The server's encoding pool: its workers run images at the same time, a worker that
dies on an image is replaced and the image reported, never the server's failure."""

import asyncio

from helpers.server import die, pid_of, rendezvous, words_of

from streamk.server import EncodingPool


def run(coro):
    return asyncio.run(coro)


def two_rendezvous(photos, folder, workers, timeout):
    """Two rendezvous tasks (each waiting up to ``timeout`` s for the other) sent at once to
    a pool of ``workers``: their (pid, whether they met)."""
    pool = EncodingPool(photos["encoder"].to_bytes(), photos["extractor"], None, workers=workers).start()
    try:
        async def both():
            return await asyncio.gather(*(pool.run(rendezvous, (str(folder), f"t{i}", 2, timeout)) for i in range(2)))
        return run(both())
    finally:
        pool.close()


def test_two_workers_describe_two_images_at_once(photos, tmp_path):
    (pid0, met0), (pid1, met1) = two_rendezvous(photos, tmp_path, workers=2, timeout=60)
    assert met0 and met1 and pid0 != pid1  # both tasks ran at once, in two processes


def test_one_worker_runs_one_image_at_a_time(photos, tmp_path):
    (_, met0), (_, met1) = two_rendezvous(photos, tmp_path, workers=1, timeout=2)
    assert not met0  # the first waited alone: the second had not started


def test_a_worker_that_dies_is_replaced_and_the_image_reported(photos):
    pool = EncodingPool(photos["encoder"].to_bytes(), photos["extractor"], None, workers=1).start()
    try:
        before = run(pool.run(pid_of, None))
        out = run(pool.run(die, None))
        assert out["error"][0] == "WorkerCrashedError"
        after = run(pool.run(pid_of, None))
        assert isinstance(after, int) and after != before  # a fresh process took over
    finally:
        pool.close()


def test_new_visual_words_reach_new_tasks_and_the_running_ones_finish(photos, tmp_path):
    """use_vocabulary (another process gave the index local geometry): the tasks already
    running or queued finish in the old workers; the tasks after it are described with
    the words."""
    pool = EncodingPool(photos["encoder"].to_bytes(), photos["extractor"], None, workers=1).start()
    try:
        async def swap_while_running():
            assert await pool.run(words_of, None) is None
            running = asyncio.ensure_future(pool.run(rendezvous, (str(tmp_path), "t0", 2, 1)))
            while not (tmp_path / "t0").exists():  # the task is in its worker (bounded by wait_for below)
                await asyncio.sleep(0.02)
            queued = [asyncio.ensure_future(pool.run(words_of, None)) for _ in range(3)]
            await asyncio.sleep(0)  # each is submitted to the old pool, behind the running one
            pool.use_vocabulary(photos["vocabulary"].to_bytes())
            return await running, await asyncio.gather(*queued), await pool.run(words_of, None)
        (pid, met), old, words = asyncio.run(asyncio.wait_for(swap_while_running(), 120))
        assert isinstance(pid, int) and not met  # it ran to its end (alone) in the old worker
        assert old == [None] * 3  # the tasks queued before the swap were run, not dropped
        assert words == photos["vocabulary"].n_words
    finally:
        pool.close()

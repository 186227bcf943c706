"""The server's encoding pool: its workers run images at the same time, a worker that
dies on an image is replaced and the image reported, never the server's failure."""

import asyncio

from helpers.server import die, pid_of, rendezvous

from streamk.server import EncodingPool


def run(coro):
    return asyncio.run(coro)


def test_two_workers_describe_two_images_at_once(photos, tmp_path):
    pool = EncodingPool(photos["encoder"].to_bytes(), photos["extractor"], None, workers=2).start()
    try:
        async def both():
            return await asyncio.gather(*(pool.run(rendezvous, (str(tmp_path), f"t{i}", 2, 60)) for i in range(2)))
        (pid0, met0), (pid1, met1) = run(both())
        assert met0 and met1 and pid0 != pid1  # both tasks ran at once, in two processes
    finally:
        pool.close()


def test_one_worker_runs_one_image_at_a_time(photos, tmp_path):
    pool = EncodingPool(photos["encoder"].to_bytes(), photos["extractor"], None, workers=1).start()
    try:
        async def both():
            return await asyncio.gather(*(pool.run(rendezvous, (str(tmp_path), f"t{i}", 2, 2)) for i in range(2)))
        (_, met0), (_, met1) = run(both())
        assert not met0  # the first waited alone: the second had not started
    finally:
        pool.close()


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

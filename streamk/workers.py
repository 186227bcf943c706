"""A process pool that survives a worker crash (a segfault in a C++ detector).

Used by feature extraction and by ingestion: results come back in completion
order; when a worker dies, the images that were in flight are retried one at a
time in fresh processes, so only the culprit is reported as crashed.
"""

from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool


def isolated_map(make_pool, submit, items, workers, crashed, failed):
    """Yield the result of ``submit(pool, item).result()`` for every item.

    make_pool(n) -> an executor of n processes; crashed(item) -> the result to
    yield for an item that killed its worker; failed(item, exc) -> the result
    for an item whose future raised another exception.
    """
    pending = list(reversed(items))
    while pending:
        suspects = []
        pool = make_pool(workers)
        try:
            inflight = {}
            while pending or inflight:
                while pending and len(inflight) < 2 * workers:
                    item = pending.pop()
                    inflight[submit(pool, item)] = item
                done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                broken = False
                for fut in done:
                    item = inflight.pop(fut)
                    try:
                        yield fut.result()
                    except BrokenProcessPool:
                        suspects.append(item)
                        broken = True
                    except Exception as exc:  # e.g. a result that cannot be sent back
                        yield failed(item, exc)
                if broken:
                    suspects.extend(inflight.values())
                    inflight.clear()
                    break
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        for item in suspects:  # one at a time, each in a fresh process, to find the culprit
            solo = make_pool(1)
            try:
                yield submit(solo, item).result()
            except BrokenProcessPool:
                yield crashed(item)
            finally:
                solo.shutdown(wait=True, cancel_futures=True)

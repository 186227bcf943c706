"""The executors: the same results in process, on the local pool and on Dask, the input read
lazily with a bound on the tasks in flight, and the addresses a user gives."""

import pytest

from streamk.errors import ConfigError
from streamk.parallel import InlineExecutor, LocalPoolExecutor, TaskContext, TaskFailure, parse_dask_address

SPEC = TaskContext(dict, {})  # a context of nothing: an empty dict in each worker


def _square(ctx, x):
    return x * x


@pytest.mark.parametrize("kind", ["inline", "pool", "dask"])
def test_executors_read_the_input_lazily_with_a_bound_in_flight(kind, client):
    from streamk.parallel import DaskExecutor

    executor = {"inline": InlineExecutor, "pool": lambda: LocalPoolExecutor(2),
                "dask": lambda: DaskExecutor(client)}[kind]()
    pulled = []

    def items():
        for i in range(12):
            pulled.append(i)
            yield i

    got = []
    for item, result in executor.map_unordered(_square, items(), SPEC, max_inflight=3):
        assert len(pulled) - len(got) <= 3  # back-pressure: never more than 3 sent and not back
        got.append((item, result))
    assert sorted(got) == [(i, i * i) for i in range(12)]
    executor.close()


def _fails(ctx, x):
    raise ValueError(f"no {x}")


@pytest.mark.parametrize("executor", [InlineExecutor, lambda: LocalPoolExecutor(2)])
def test_a_task_that_raises_comes_back_as_a_failure(executor):
    with executor() as ex:
        got = dict(ex.map_unordered(_fails, [1, 2], SPEC))
    assert got == {1: TaskFailure("failed", "ValueError: no 1"), 2: TaskFailure("failed", "ValueError: no 2")}


@pytest.mark.parametrize("text,expected", [("local:3", ("local", 3)), ("tcp://h:8786", ("remote", "tcp://h:8786"))])
def test_dask_addresses(text, expected):
    assert parse_dask_address(text) == expected


@pytest.mark.parametrize("text", ["local:0", "local:x", ""])
def test_bad_dask_addresses(text):
    with pytest.raises(ConfigError):
        parse_dask_address(text)


def test_a_local_cluster_is_bounded_as_the_local_pool_is():
    """`--dask local:100000` started a LocalCluster of 100,000 worker processes on this machine (until
    killed); it is refused as `--workers 100000` is, before Dask is loaded."""
    from streamk.parallel import max_workers

    assert parse_dask_address(f"local:{max_workers()}") == ("local", max_workers())
    with pytest.raises(ConfigError, match=f"local:{max_workers() + 1:,} is over streamk's limit of "):
        parse_dask_address(f"local:{max_workers() + 1}")


def _pid(ctx, item):
    import os

    return os.getpid()


def _die(ctx, item):
    import os

    os._exit(3)


def _context_value(ctx, item):
    return ctx.get("value")


def test_a_worker_pool_replaced_after_a_death_and_an_item_that_dies_twice_is_crashed():
    from concurrent.futures.process import BrokenProcessPool

    from streamk.parallel import CRASHED, WorkerPool, retry_alone

    pool = WorkerPool(1, SPEC)
    try:
        before, _ = pool.submit(_pid, None)
        before = before.result(timeout=120)
        future, generation = pool.submit(_die, None)
        with pytest.raises(BrokenProcessPool):
            future.result(timeout=120)
        pool.replace(generation)
        pool.replace(generation)  # once, whoever notices first: the fresh pool is kept
        after = pool.submit(_pid, None)[0].result(timeout=120)
        assert isinstance(after, int) and after != before
        assert retry_alone(SPEC, _die, None) == TaskFailure("crashed", CRASHED)
        assert retry_alone(SPEC, _pid, None) not in (before, after)  # alone, in a process of its own
        pool.use_context(TaskContext(dict, {"value": 7}))  # the next tasks see the new context
        assert pool.submit(_context_value, None)[0].result(timeout=120) == 7
    finally:
        pool.close()

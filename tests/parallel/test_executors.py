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
    from streamk.parallel.dask_executor import DaskExecutor

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

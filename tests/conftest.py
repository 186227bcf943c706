import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir():
    """../shared/data (or $STREAMK_SHARED_DATA); None when absent."""
    env = os.environ.get("STREAMK_SHARED_DATA")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    return path if path.is_dir() else None


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data():
    path = shared_data_dir()
    if path is None:
        pytest.skip("shared data (../shared/data) not present")
    return path


@pytest.fixture
def wait_until():
    """wait_until(condition, timeout, what): poll ``condition()`` until it is true;
    fail with ``what`` after ``timeout`` seconds (a bounded wait, never a bare sleep)."""
    import time

    def wait(condition, timeout, what):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.05)
    return wait


@pytest.fixture(scope="session")
def small_example_dir(tmp_path_factory):
    """A small demo example (3 photos x 3 views, 12 query views) built once per run; the
    widget and notebook tests open it (``STREAMK_EXAMPLE_DIR``)."""
    pytest.importorskip("skimage")
    from streamk.examples import build_example

    folder = tmp_path_factory.mktemp("example") / "demo"
    build_example("demo", folder, photos=3, max_queries=2, progress=False).close()
    return folder

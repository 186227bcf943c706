from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

from helpers.data import (PARIS6K_SUBSET_SIZE, REQUIRE_DATA_ENV, data_required,  # noqa: E402,F401
                          shared_data_dir, skip_without_data)


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
        skip_without_data("the shared data (../shared/data or $STREAMK_SHARED_DATA) is not present")
    return path


@pytest.fixture(scope="session")
def paris6k_subset_photos(shared_data):
    """The 250 photos of paris6k-subset, sorted by name."""
    photos = sorted((shared_data / "paris6k-subset" / "jpg").glob("*.jpg"))
    if len(photos) < PARIS6K_SUBSET_SIZE:
        skip_without_data(f"the Paris6k subset in {shared_data} has {len(photos)} of its "
                          f"{PARIS6K_SUBSET_SIZE} photos")
    return photos


# ---------------------------------------------------------------- a run that tested nothing fails
# pytest exits 5 when it collects no test; a run whose every test was skipped (no data,
# no browser, no extractor) is as empty, and exits 5 too, with a line that says why.
_outcomes = {"ran": 0, "skipped": 0}


def pytest_runtest_logreport(report):
    if report.skipped:
        _outcomes["skipped"] += 1
    elif report.when == "call":
        _outcomes["ran"] += 1


def _nothing_ran():
    return _outcomes["ran"] == 0 and _outcomes["skipped"] > 0


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == pytest.ExitCode.OK and _nothing_ran():
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _nothing_ran():
        terminalreporter.write_line(f"error: every one of the {_outcomes['skipped']} selected test(s) was "
                                    f"skipped: nothing was tested (exit status 5)", red=True)


@pytest.fixture
def wait_until():
    """wait_until(condition, timeout, what): poll ``condition()`` until it is true;
    fail with ``what`` after ``timeout`` seconds (a bounded wait, never a bare sleep)."""
    from helpers.waiting import poll

    def wait(condition, timeout, what):
        try:
            return poll(condition, timeout, what)
        except TimeoutError as exc:
            pytest.fail(str(exc))
    return wait


@pytest.fixture(scope="session")
def small_vocabulary(paris6k_subset_photos):
    """A small vocabulary (16 x 16 words) learned on the features of 6 Paris photos: enough
    to match a photo with its own changed views; seconds to learn."""
    from streamk.features import HessianAffineSift, extract
    from streamk.verification import Vocabulary

    ex = HessianAffineSift()
    learn = [extract(p, ex).descriptors for p in paris6k_subset_photos[3:250:45]]
    return Vocabulary(n_coarse=16, n_fine=16, min_per_word=16, max_iter=10, seed=0).fit(learn)


@pytest.fixture(scope="session")
def random_vocabulary():
    """A vocabulary learned on random non-negative 'SIFT' (for format and kernel tests)."""
    import numpy as np

    from streamk.verification import Vocabulary

    X = np.random.default_rng(0).integers(0, 120, size=(3000, 128)).astype(np.uint8)
    return Vocabulary(n_coarse=8, n_fine=8, min_per_word=8, max_iter=5, seed=0).fit(X)


@pytest.fixture(scope="module")
def client():
    """A Dask LocalCluster of 2 single-threaded worker processes, and its client."""
    distributed = pytest.importorskip("distributed")

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       silence_logs=50)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="session")
def small_example_dir(tmp_path_factory):
    """A small demo example (3 photos x 3 views, 12 query views) built once per run; the
    widget and notebook tests open it (``STREAMK_EXAMPLE_DIR``)."""
    pytest.importorskip("skimage")
    from streamk.demo.examples import build_example

    folder = tmp_path_factory.mktemp("example") / "demo"
    build_example("demo", folder, photos=3, max_queries=2, progress=False).close()
    return folder

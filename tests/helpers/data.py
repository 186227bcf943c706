"""Where the tests find ../shared/data, and how a test that needs it gives up.

Here rather than in conftest.py: tests/server/ has a conftest.py of its own, and a
``from conftest import ...`` would find whichever of the two was imported first.
"""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# CI (.ci/run) sets STREAMK_REQUIRE_DATA=1: a test that needs ../shared/data then fails
# instead of skipping when the data is missing, so that a CI run cannot pass without
# ever looking at the real photos.
REQUIRE_DATA_ENV = "STREAMK_REQUIRE_DATA"
PARIS6K_SUBSET_SIZE = 250


def shared_data_dir():
    """../shared/data (or $STREAMK_SHARED_DATA); None when absent."""
    env = os.environ.get("STREAMK_SHARED_DATA")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    return path if path.is_dir() else None


def data_required():
    return os.environ.get(REQUIRE_DATA_ENV, "") not in ("", "0")


def skip_without_data(reason):
    """The one place where a test that needs the shared data gives up: a skip, or a
    failure when $STREAMK_REQUIRE_DATA is set."""
    if data_required():
        pytest.fail(f"{REQUIRE_DATA_ENV} is set but {reason}", pytrace=False)
    pytest.skip(reason)

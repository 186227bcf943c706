"""The small demo example that the sweep and the evaluation dashboard's tests both evaluate."""

from contextlib import closing

import pytest

from streamk.demo.examples import build_example


def small_example_fixture():
    """A module-scoped fixture: the small demo both test modules evaluate (3 photos, 9 database
    images, 18 queries), built once per module; the feature cache makes a rebuild cheap."""
    @pytest.fixture(scope="module")
    def example(tmp_path_factory):
        with closing(build_example("demo", tmp_path_factory.mktemp("example") / "demo", photos=3, max_queries=4,
                                   k=4, progress=False)) as ex:
            yield ex
    return example

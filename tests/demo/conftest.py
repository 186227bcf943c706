"""The demo's tiny configuration, and one built-in run shared by the demo's test files."""

import pytest

TINY = dict(k=4, max_side=320, max_features=300, workers=1, progress=False)


@pytest.fixture(scope="session")
def builtin_run(tmp_path_factory):
    """(DemoResult, printed lines, tmp folder) of the demo on 4 of the built-in photos, 3 changes,
    one variant per photo, and the bursty scenes made of them (3: the stereo pair gives one object)."""
    pytest.importorskip("pyhesaff")
    pytest.importorskip("skimage")
    pytest.importorskip("PIL")
    from streamk.demo.main_job import PHOTOS, run_demo

    tmp = tmp_path_factory.mktemp("demo")
    photos = [p for p in PHOTOS if p[0] in ("camera.png", "coins.png", "motorcycle_left.png",
                                             "motorcycle_right.png")]
    lines = []
    result = run_demo(out_dir=tmp / "out", photos=photos, transforms=("crop", "persp", "jpeg"),
                      n_variants=1, cache_dir=tmp / "cache", out=lines.append, **TINY)
    return result, lines, tmp

"""The CI guards of tests/conftest.py, run in a pytest of their own: a test that
needs the shared data fails under STREAMK_REQUIRE_DATA=1 instead of skipping,
and a run whose every test was skipped exits 5, as an empty one does."""

import os
import subprocess
import sys
from pathlib import Path


CONFTEST = Path(__file__).with_name("conftest.py")
DATA_HELPERS = Path(__file__).with_name("helpers") / "data.py"  # conftest imports helpers.data

NEEDS_DATA = """
def test_needs_the_shared_data(shared_data):
    assert shared_data.is_dir()
"""
PASSES = """
def test_passes():
    assert True
"""


def run_pytest(tmp_path, files, **env):
    (tmp_path / "helpers").mkdir()
    for name, text in {"conftest.py": CONFTEST.read_text(), "helpers/__init__.py": "",
                       "helpers/data.py": DATA_HELPERS.read_text(), **files}.items():
        (tmp_path / name).write_text(text)
    environ = {k: v for k, v in os.environ.items() if k not in ("STREAMK_REQUIRE_DATA", "PYTEST_ADDOPTS")}
    environ["STREAMK_SHARED_DATA"] = str(tmp_path / "no-such-data")
    environ.update(env)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
                           str(tmp_path), str(tmp_path)], cwd=tmp_path, env=environ, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def test_missing_data_skips_but_a_run_of_only_skips_exits_5(tmp_path):
    rc, out = run_pytest(tmp_path, {"test_a.py": NEEDS_DATA})
    assert rc == 5, out
    assert "1 skipped" in out and "every one of the 1 selected test(s) was skipped" in out


def test_missing_data_with_other_tests_passes(tmp_path):
    rc, out = run_pytest(tmp_path, {"test_a.py": NEEDS_DATA, "test_b.py": PASSES})
    assert rc == 0, out
    assert "1 passed, 1 skipped" in out


def test_missing_data_fails_when_ci_requires_it(tmp_path):
    rc, out = run_pytest(tmp_path, {"test_a.py": NEEDS_DATA, "test_b.py": PASSES}, STREAMK_REQUIRE_DATA="1")
    assert rc == 1, out
    assert "1 passed, 1 error" in out and "STREAMK_REQUIRE_DATA is set but the shared data" in out


def test_data_present_passes_when_required(tmp_path):
    (tmp_path / "data").mkdir()
    rc, out = run_pytest(tmp_path, {"test_a.py": NEEDS_DATA}, STREAMK_REQUIRE_DATA="1",
                         STREAMK_SHARED_DATA=str(tmp_path / "data"))
    assert rc == 0, out

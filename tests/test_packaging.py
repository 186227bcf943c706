"""streamk as a package its users know: what a newcomer's first commands leave behind is
ignored by git, the browser tests say how to get their browser offline, and the API
documentation builds from the docstrings with no warning."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", ["token.txt", "streamk-demo/index.html", "sub/token.txt"])
def test_what_the_first_commands_leave_is_ignored_by_git(path):
    """``streamk serve`` writes token.txt, ``streamk demo`` the report streamk-demo/."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=REPO, timeout=60)
    assert proc.returncode == 0, f"{path} is not in .gitignore"


def test_the_browser_tests_say_how_to_get_their_browser(monkeypatch, tmp_path):
    from helpers import browser

    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "no-chromium")
    reason = browser.browser_missing_reason()
    assert "apt-get install chromium" in reason and "playwright install" in reason


def test_the_api_documentation_builds_from_the_docstrings_without_warnings(tmp_path):
    """Sphinx (autodoc + napoleon) on docs/api, warnings as errors: a docstring whose
    markup docutils cannot read fails here (about 15 s)."""
    pytest.importorskip("sphinx")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(REPO / "docs" / "api"), str(tmp_path / "html")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (tmp_path / "html" / "index.html").read_text()
    for name in ("Encoder", "StreamingIndex", "ShardedIndex", "open_index", "Ingester", "train_encoder",
                 "create_index", "extract", "make_extractor", "load_dataset", "evaluate"):
        assert f'id="streamk.{name}"' in page, f"streamk.{name} is not documented"

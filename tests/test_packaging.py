"""streamk as a package its users know: what a newcomer's first commands leave behind is
ignored by git, and the browser tests say how to get their browser offline."""

import shutil
import subprocess
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

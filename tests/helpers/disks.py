"""Small file systems a test mounts for itself: a full disk, a read-only one (root only: a
test that cannot mount one is skipped with the reason)."""

import contextlib
import subprocess

import pytest


@contextlib.contextmanager
def tmpfs(folder, size):
    """A tmpfs of ``size`` mounted on the new ``folder`` (root only: the test is skipped with
    the reason otherwise), unmounted after."""
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.strip() or proc.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def remount_read_only(folder):
    """Remount the tmpfs at ``folder`` read-only (the test is skipped when it cannot be)."""
    proc = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot remount read-only: {proc.stderr.strip()}")

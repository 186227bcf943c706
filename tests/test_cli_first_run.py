"""A command's first run after an install: the line that says Numba compiles, and the demo's
warm-up of the second stage in a child process (streamk/cli/compile_notice.py,
streamk/pipeline/warm_up.py)."""

import os
import subprocess
import textwrap

import pytest

from helpers.processes import alive, run_python, start_python, stop, subprocess_env
from helpers.waiting import poll
from streamk.cli.compile_notice import NOTICE
from streamk.pipeline import KernelWarmUp

PROBE = """
from numba import njit

@njit(cache=True)
def plus_one(x):
    return x + 1
"""


def _run_probe(tmp_path, announce):
    (tmp_path / "probe_kernel.py").write_text(PROBE)
    script = textwrap.dedent(f"""
        from streamk.cli.compile_notice import announce_compilation
        if {announce}:
            announce_compilation()
            announce_compilation()  # twice: still one listener
        import probe_kernel
        print(probe_kernel.plus_one(1))
    """)
    env = subprocess_env(NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    done = run_python("-c", script, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"
    return done.stderr


def test_the_notice_comes_once_when_numba_compiles_and_never_when_it_loads_its_cache(tmp_path):
    first = _run_probe(tmp_path, announce=True)
    assert first.count(NOTICE) == 1, first
    again = _run_probe(tmp_path, announce=True)  # the kernel is in Numba's cache now
    assert NOTICE not in again, again


def test_without_the_notice_installed_nothing_is_said(tmp_path):
    assert NOTICE not in _run_probe(tmp_path, announce=False)


def test_the_warm_up_is_killed_when_the_demo_fails():
    with pytest.raises(ValueError), KernelWarmUp() as warm:  # noqa: PT012 -- the child seen before the error
        child = warm.child
        assert child is not None and child.poll() is None
        raise ValueError("the demo failed")
    assert child.returncode is not None  # collected: not left running
    assert not alive(child.pid)


def test_the_warm_up_ends_with_its_parent_killed_by_sigkill(tmp_path):
    script = textwrap.dedent("""
        import sys, threading
        from streamk.pipeline import KernelWarmUp
        with KernelWarmUp() as warm:
            print(warm.child.pid, flush=True)
            threading.Event().wait()  # until killed
    """)
    # an empty Numba cache: the child compiles for ~30 s, so it is surely at work when its parent dies
    parent = start_python("-c", script, stdout=subprocess.PIPE,
                          env=subprocess_env(NUMBA_CACHE_DIR=str(tmp_path / "numba-cache")))
    try:
        child_pid = int(parent.stdout.readline())
        assert alive(child_pid)
        parent.kill()
        parent.wait(timeout=30)
        poll(lambda: not alive(child_pid), 30, "the warm-up child to end with its parent")
    finally:
        stop(parent)


def _environment(pid):
    """The environment of process ``pid``, once its exec has set it (empty just after)."""
    with open(f"/proc/{pid}/environ", "rb") as fh:
        entries = [e for e in fh.read().split(b"\0") if b"=" in e]
    return dict(e.decode().split("=", 1) for e in entries)


def test_the_child_imports_the_parents_streamk():
    import streamk

    with KernelWarmUp() as warm:
        env = poll(lambda: _environment(warm.child.pid), 30, "the child's environment")
        warm.child.kill()
    assert env["PYTHONPATH"].split(os.pathsep)[0] == os.path.dirname(os.path.dirname(streamk.__file__))

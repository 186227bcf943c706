"""The tests' own child processes (tests/helpers/processes.py) end with the process that started
them, even when it is killed with SIGKILL: a server a test started must not keep its port after
the test runner was killed."""

import sys

import pytest

from helpers.processes import TESTS, alive, start_python, stop

# a stand-in for the test runner: starts a child as a test does, says its pid, then waits to be killed (both wait
# on an event nothing sets, at most 300 s: neither outlives a failed test for long)
WAIT_TO_BE_KILLED = "import threading; threading.Event().wait(300)"
RUNNER = """
import os, sys
sys.path[:0] = [{tests!r}]
from helpers.processes import start_python
child = start_python("-c", {wait!r})
open({pid_file!r} + ".tmp", "w").write(str(child.pid))
os.replace({pid_file!r} + ".tmp", {pid_file!r})
""" + WAIT_TO_BE_KILLED


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_child_started_by_a_test_ends_with_a_sigkilled_runner(tmp_path, wait_until):
    pid_file = tmp_path / "child.pid"
    runner = start_python("-c", RUNNER.format(tests=str(TESTS), pid_file=str(pid_file), wait=WAIT_TO_BE_KILLED))
    try:
        wait_until(pid_file.exists, 60, "the runner's child to start")
        child = int(pid_file.read_text())
        assert alive(child)
        runner.kill()
        runner.wait(timeout=30)
        wait_until(lambda: not alive(child), 30, f"the child {child} to end with its SIGKILLed parent")
    finally:
        stop(runner)

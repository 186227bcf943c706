"""Child processes for the tests: started with what they need set explicitly (the
repository and the tests on PYTHONPATH, one thread per library, SIGINT and SIGTERM at
their default actions whatever the test runner inherited), ended with the test runner
even when it is killed with SIGKILL (a server started by a test would otherwise keep
its port), killed and collected with bounded waits.

The parent-death signal fires when the *thread* that started the child ends, so start
children from the test's own thread (every test here does), not from a worker thread."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from streamk.parallel.worker_process import exit_with_parent

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


def subprocess_env(**extra):
    """The environment of a child Python: this checkout first on its path, one thread each."""
    path = os.pathsep.join([str(REPO), str(TESTS)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", **extra)


def _child_setup(parent_pid):
    """In the child, before exec: default signal actions (a runner started in the background ignores
    SIGINT) and SIGKILL when the test runner ends (streamk's own, as its local workers have it)."""
    def setup():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        exit_with_parent(parent_pid=parent_pid)
    return setup


def start(args, env=None, **kwargs):
    """subprocess.Popen of ``args`` with the test environment and default signal actions, ended
    with this process."""
    kwargs.setdefault("text", True)
    return subprocess.Popen(args, env=subprocess_env() if env is None else env,
                            preexec_fn=_child_setup(os.getpid()), **kwargs)


def start_python(*args, **kwargs):
    return start([sys.executable, *map(str, args)], **kwargs)


def run_python(*args, timeout=300, **kwargs):
    """subprocess.run of a Python child (bounded by ``timeout``), output captured as text."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run([sys.executable, *map(str, args)], env=kwargs.pop("env", None) or subprocess_env(),
                          timeout=timeout, preexec_fn=_child_setup(os.getpid()), **kwargs)


def kill_and_collect(proc, first="", sig=signal.SIGKILL, timeout=30):
    """Send ``sig`` to ``proc``, wait for it (bounded), and return the complete lines it
    printed (``first``: what was already read): a partial last line was no completed print."""
    try:
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=timeout)
    finally:
        stop(proc)
    lines = (first + (out or "")).splitlines()
    if out and not out.endswith("\n"):
        lines = lines[:-1]
    return lines


def stop(proc):
    """Kill ``proc`` if it still runs and reap it (for ``finally`` blocks)."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def alive(pid):
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

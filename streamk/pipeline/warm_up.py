"""The second stage's kernels compiled in a child process beside other work, so that the
first search after it does not wait ~30 s for Numba (:func:`streamk.verification.warm_kernels`):
``streamk demo`` and :func:`streamk.demo.build_example` (the notebooks' collection).

A child process, since Numba compiles under one lock per process, and a thread would hold
the work's own compilations behind its ~30 s. The child runs at a lower priority and on one
thread, and ends with its parent however the parent ends (:func:`streamk.parallel.exit_with_parent`:
SIGKILL at its death, from the thread that started it). When the work is done first, the
parent waits for it, at most :data:`MAX_WAIT_S`, and says so; on an error or an interrupt the
child is killed at once. A warm-up that fails changes nothing: the first search compiles
then. Where the kernels are in Numba's cache already, the child only loads them (~1 s of CPU).

``python -m streamk.pipeline.warm_up PARENT_PID`` is the child.
"""

import os
import subprocess
import sys
import time

MAX_WAIT_S = 300  # a warm-up on a loaded 2-core machine takes ~60 s; past this the first search compiles
NICENESS = 10  # the parent's own work first
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the folder holding streamk


class KernelWarmUp:
    """:func:`warm_kernels` in a child process, started on entering; on a normal exit waited
    for (at most MAX_WAIT_S, said on stderr unless ``quiet``), else killed."""

    def __init__(self, quiet=False):
        self.quiet = quiet
        self.child = None

    def say(self, line):
        if not self.quiet:
            print(line, file=sys.stderr, flush=True)

    def __enter__(self):
        # this streamk first on the child's path: Numba's cache is kept per source file
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        try:
            self.child = subprocess.Popen(
                [sys.executable, "-m", __name__, str(os.getpid())], env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:  # no process to spare: the first search compiles instead
            self.child = None
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.child is None:
            return
        try:
            if exc_type is None:
                self.wait()
        finally:
            if self.child.poll() is None:
                self.child.kill()
            self.child.wait()

    def wait(self):
        """Wait for the child, at most MAX_WAIT_S; a line while it is still compiling."""
        if self.child.poll() is not None:
            return
        self.say("streamk: compiling the second stage's kernels for the first search, once (they are cached "
                 "for the next runs)")
        start = time.monotonic()
        try:
            self.child.wait(timeout=MAX_WAIT_S)
        except subprocess.TimeoutExpired:
            return  # killed by __exit__: the first search compiles what is left
        self.say(f"streamk: compiled ({time.monotonic() - start:.0f} s more)")


def _child(parent_pid):
    from ..parallel import exit_with_parent, prepare_worker_process
    from ..verification import warm_kernels

    exit_with_parent(parent_pid=parent_pid)
    try:
        os.nice(NICENESS)
    except OSError:  # pragma: no cover - not allowed here: at the same priority
        pass
    prepare_worker_process()  # one thread: BLAS, Numba
    warm_kernels()


__all__ = ["KernelWarmUp"]

if __name__ == "__main__":
    _child(int(sys.argv[1]))

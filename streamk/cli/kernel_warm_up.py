"""``streamk demo`` compiles the second stage's kernels beside its own work, so that the
first verified search after it (the README's next steps) does not wait ~30 s for Numba
(:func:`streamk.verification.warm_kernels`).

The compilation runs in a child process: Numba compiles under one lock per process, and a
thread would hold the demo's own compilations behind its ~30 s. The child runs at a lower
priority and on one thread, and ends with the demo however the demo ends
(:func:`streamk.parallel.exit_with_parent`: SIGKILL at its death, from the thread that
started it, the main one). When the demo is done first, it waits for the child, at most
:data:`MAX_WAIT_S`, and says so on one line; on an error or an interrupt the child is
killed at once. A warm-up that fails changes nothing: the first search compiles then (and
says so: :mod:`.compile_notice`). Where the kernels are in Numba's cache already, the child
only loads them (~1 s of CPU).

``python -m streamk.cli.kernel_warm_up PARENT_PID`` is the child.
"""

import os
import subprocess
import sys
import time

MAX_WAIT_S = 300  # a warm-up on a loaded 2-core machine takes ~60 s; past this the first search compiles
NICENESS = 10  # the demo's own work first


class KernelWarmUp:
    """The child, started on entering; on a normal exit waited for (bounded), else killed."""

    def __init__(self, say=None):
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.child = None

    def __enter__(self):
        import streamk

        # this streamk first on the child's path: Numba's cache is kept per source file
        root = os.path.dirname(os.path.dirname(os.path.abspath(streamk.__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
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


if __name__ == "__main__":
    _child(int(sys.argv[1]))

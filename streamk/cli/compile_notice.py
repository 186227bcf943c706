"""One line on stderr when a command compiles Numba kernels, so that a first run is not a
silent wait.

streamk's kernels are compiled for the machine's CPU the first time they run, and cached
on disk (``cache=True``): every later run loads them in milliseconds. The first run after
an install waits for the compiler instead: ~30 s of a first ``streamk search`` on a 2-core
Xeon (the second stage's kernels), with nothing on the screen. :func:`announce_compilation`
(called by :func:`streamk.cli.main`, so only in a command's own process) says so once, when
Numba starts compiling, and never when it loads the kernels from its cache.

It waits for Numba to be imported by the command itself (Numba's own import costs ~0.3 s,
which ``streamk --version`` or a ``--server`` search never pay): a finder on ``sys.meta_path``
that, when Numba first compiles or loads a function (it then imports ``numba.np.arraymath``,
as :mod:`.startup` relies on too), registers a listener for Numba's ``numba:compile`` event,
which Numba fires only for a real compilation, after its cache had nothing.
"""

import sys

TRIGGER = "numba.np.arraymath"  # the Numba module imported when Numba first compiles or loads a function
NOTICE = ("streamk: compiling its Numba kernels for this machine, once (they are cached for the next runs); "
          "this first run may take a minute longer")


class _ListenOnNumbaStart:
    """Finds nothing itself: registers :class:`_CompileNotice` when Numba is at work."""

    done = False

    def find_spec(self, name, path=None, target=None):
        if name == TRIGGER and not self.done:
            self.done = True  # (left on sys.meta_path: removed now, the finder after it would be skipped)
            _listen()
        return None


def _listen():
    from numba.core import event

    class _CompileNotice(event.Listener):
        """The notice, before the first compilation of the process only."""
        said = False

        def on_start(self, ev):
            if not self.said:
                self.said = True
                _say(NOTICE)

        def on_end(self, ev):
            pass

    event.register("numba:compile", _CompileNotice())


def _say(line):
    """``line`` on stderr, above any progress bar being drawn there."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)


_installed = False


def announce_compilation():
    """Install the notice, once per process (at once where Numba is already at work)."""
    global _installed
    if _installed:
        return
    _installed = True
    if TRIGGER in sys.modules:
        _listen()
    else:
        sys.meta_path.insert(0, _ListenOnNumbaStart())


__all__ = ["NOTICE", "announce_compilation"]

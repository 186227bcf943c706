"""How a command ends: every error as one line on stderr and a documented exit status
(:func:`run_command`), and the signals that end a command cleanly (SIGINT, SIGTERM)."""

import errno
import os
import sys
import traceback
import warnings
from contextlib import contextmanager

from ..errors import StreamkError, Terminated

EXIT_INTERNAL = 1  # a bug: one line, the traceback with --debug
EXIT_USAGE = 2  # argparse's own errors, and StreamkError without an exit_code of its own
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of our output went away (`| head`)
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_DISK_FULL = 6  # as DiskFullError


def run_command(command, debug=False):
    """``command()``'s exit status, every error ending as one line on stderr and a
    documented status: a StreamkError's ``exit_code`` (2 usage, 3 input file, 4 index
    state, 5 damaged index, 6 disk full, 7 cluster), 1 for anything else (a bug; an
    OSError of the environment says so instead), 130 on Ctrl-C, 141 quietly when stdout's
    reader has gone. ``debug``: print the traceback too."""
    try:
        status = command()
        sys.stdout.flush()  # a broken pipe shows here, not in the interpreter's exit
        return status
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("streamk: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        if debug:
            traceback.print_exc()
        print("streamk: terminated", file=sys.stderr)
        return Terminated.exit_code
    except StreamkError as exc:
        if debug:
            traceback.print_exc()
        print(f"streamk: error: {_one_line(exc) or type(exc).__name__}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_USAGE)
    except Exception as exc:  # noqa: BLE001 -- not a named error: a bug (or the environment, for an OSError)
        if debug:
            traceback.print_exc()
        what = _one_line(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, OSError) and exc.errno is not None:
            print(f"streamk: error: {what} (run again with --debug for the traceback)", file=sys.stderr)
            return EXIT_DISK_FULL if exc.errno == errno.ENOSPC else EXIT_INTERNAL
        print(f"streamk: internal error: {what} (this is a bug in streamk: run again with --debug and report "
              f"the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


@contextmanager
def warnings_as_lines(debug=False):
    """While inside: each warning shown as one line, ``streamk: warning: MESSAGE`` (as errors
    are), not Python's two lines of file, line and source (a fallback extractor's note, RN
    learned on few images). ``debug``: Python's own format, which says where it came from."""
    if debug:
        yield
        return
    shown = warnings.showwarning

    def one_line(message, category, filename, lineno, file=None, line=None):
        text = _one_line(str(message)) or category.__name__
        print(f"streamk: warning: {text}", file=file or sys.stderr, flush=True)

    warnings.showwarning = one_line
    try:
        yield
    finally:
        warnings.showwarning = shown


def _one_line(text):
    """``text`` on one line: its lines joined by "; " (a report of a file name escapes the
    name's own newlines already)."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def _silence_stdout():
    """After a broken pipe: point stdout at /dev/null so that the interpreter's final flush
    cannot fail again (what the Python docs advise for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (captured in tests)
        pass


class terminate_raises:
    """While inside: SIGTERM raises :class:`~streamk.errors.Terminated` in the main thread
    (the previous handler is put back on the way out). Elsewhere than the main thread:
    nothing changes."""

    def __enter__(self):
        import signal
        import threading

        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGTERM, _raise_terminated)
        return self

    def __exit__(self, *exc):
        import signal

        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


def _raise_terminated(signum, frame):
    raise Terminated()


class sigint_raises:
    """While inside: SIGINT raises KeyboardInterrupt, whatever this process inherited (a
    shell starts background jobs with SIGINT ignored, and Python then leaves it ignored)."""

    def __enter__(self):
        import signal
        import threading

        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, signal.default_int_handler)
        return self

    def __exit__(self, *exc):
        import signal

        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)

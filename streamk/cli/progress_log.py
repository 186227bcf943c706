"""Progress in a log: when stderr is not a terminal (a file, a pipe, a service's journal),
the command's progress bars become plain lines, a few of them, for long work only.

On a terminal, tqdm redraws one line in place with carriage returns. Written to a file,
those redraws are garbage (every update on one "line" of ``\\r``s); switched off, a 40 s
``streamk index create --train`` is silent. While a command runs, :func:`progress_in_logs`
puts a :class:`ProgressLog` in front of such a stderr: ordinary text goes through as it
is; a bar's state becomes a line once the bar has run ``quiet`` seconds, then at most
every ``interval`` seconds, and its final state a line when it ran that long. A bar that
ends within ``quiet`` seconds leaves nothing, so short commands print what they did.
"""

import contextlib
import sys
import time

QUIET_S = 15.0  # a bar younger than this shows nothing in a log
INTERVAL_S = 30.0  # then a line at most this often


class ProgressLog:
    """A text stream in front of ``stream`` that turns tqdm's in-place redraws into lines.

    ``isatty()`` answers True so that the progress bars that show on a terminal are drawn
    here too (streamk and tqdm decide that from it); the bars come out as lines."""

    def __init__(self, stream, quiet=None, interval=None, clock=time.monotonic):
        self.stream, self.clock = stream, clock
        self.quiet = QUIET_S if quiet is None else quiet
        self.interval = INTERVAL_S if interval is None else interval
        self.in_bar = False  # a carriage return came since the last newline
        self.segment = ""  # the text of the bar's state being drawn
        self.bar_start = self.last_line = None

    # -- the stream interface
    def write(self, text):
        if not self.in_bar and "\r" not in text:  # no bar: a log line goes through as it is
            self._text(text)
            return len(text)
        if self.in_bar and text and text[0] not in "\r\n":
            # tqdm redraws with one write that starts with "\r" and ends a bar with "\n": other
            # text (a message printed while a bar shows) ends the bar's line and goes through
            self._end_of_bar()
        start = 0
        for i, ch in enumerate(text):
            if ch == "\r":
                self._text(text[start:i])
                self._carriage_return()
                start = i + 1
            elif ch == "\n" and self.in_bar:
                self._text(text[start:i])
                self._end_of_bar()
                start = i + 1
        self._text(text[start:])
        return len(text)

    def flush(self):
        self.stream.flush()

    def isatty(self):
        return True

    def fileno(self):
        return self.stream.fileno()

    def __getattr__(self, name):  # encoding, errors, buffer, ...: the stream's
        return getattr(self.stream, name)

    # -- the state of a bar
    def _text(self, text):
        if self.in_bar:
            self.segment += text
        elif text:
            self.stream.write(text)

    def _carriage_return(self):
        now = self.clock()
        if not self.in_bar:
            self.in_bar, self.bar_start, self.segment = True, now, ""
            return
        state, self.segment = self.segment.strip(), ""
        if not state:  # a bar cleared (leave=False): it has ended
            self.in_bar = False
            return
        if now - self.bar_start >= self.quiet and (self.last_line is None or now - self.last_line >= self.interval):
            self._line(state, now)

    def _end_of_bar(self):
        now = self.clock()
        state, self.segment, self.in_bar = self.segment, "", False
        if not state.strip():
            return
        cleared_then_text = state[:1].isspace() and "|" not in state  # written after a bar was cleared
        if cleared_then_text or now - self.bar_start >= self.quiet:
            self._line(state.strip(), now)

    def _line(self, text, now):
        self.stream.write(text + "\n")
        self.stream.flush()
        self.last_line = now

    def close_bar(self):
        """At the end of a command: nothing of a bar is left half-written."""
        self.in_bar, self.segment = False, ""


@contextlib.contextmanager
def progress_in_logs():
    """While inside: when stderr is not a terminal, a :class:`ProgressLog` in front of it."""
    original = sys.stderr
    if original is None or _isatty(original) or isinstance(original, ProgressLog):
        yield
        return
    log = ProgressLog(original)
    sys.stderr = log
    try:
        yield
    finally:
        log.close_bar()
        if sys.stderr is log:
            sys.stderr = original


def _isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream: not a terminal
        return False


__all__ = ["INTERVAL_S", "QUIET_S", "ProgressLog", "progress_in_logs"]

"""A newcomer's small ones (issue 27): progress in a log as a few plain lines, for long
work only; ``streamk --help`` without reStructuredText markup; ``open_example()`` says
what it did."""

import io
import re

import pytest
from tqdm import tqdm

from streamk.cli.progress_log import ProgressLog, progress_in_logs


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_long_bar_in_a_log_is_a_few_lines_and_no_carriage_return():
    """tqdm's redraws, 100 updates over 100 s (fake clock): a line once the bar has run
    15 s, then at most every 30 s, and its final state; nothing with a carriage return."""
    out, clock = io.StringIO(), Clock()
    log = ProgressLog(out, quiet=15, interval=30, clock=clock)
    log.write("starting\n")
    with tqdm(total=100, desc="T-emb whitening", file=log, mininterval=0, miniters=1) as bar:
        for _ in range(100):
            clock.now += 1.0
            bar.update(1)
    log.write("done\n")
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[0] == "starting" and lines[-1] == "done"
    bars = lines[1:-1]
    assert all(b.startswith("T-emb whitening:") for b in bars), bars
    # at 15 s, 45 s and 75 s the state drawn just before (a state is known whole when the
    # next redraw begins), then the final state
    assert [int(re.search(r"(\d+)/100", b).group(1)) for b in bars] == [14, 44, 74, 100], bars


def test_a_short_bar_leaves_nothing_and_text_goes_through():
    out, clock = io.StringIO(), Clock()
    log = ProgressLog(out, quiet=15, interval=30, clock=clock)
    with tqdm(total=10, desc="features", file=log, mininterval=0, miniters=1) as bar:
        for _ in range(10):
            clock.now += 0.5
            bar.update(1)
    log.write("added 10, skipped 0 existing, failed 0\n")
    print("streamk: error: one line", file=log)
    assert out.getvalue() == "added 10, skipped 0 existing, failed 0\nstreamk: error: one line\n"


def test_a_cleared_bar_ends_and_the_text_after_it_is_kept():
    out, clock = io.StringIO(), Clock()
    log = ProgressLog(out, quiet=15, interval=30, clock=clock)
    with tqdm(total=5, desc="coding", file=log, mininterval=0, miniters=1, leave=False) as bar:
        for _ in range(5):
            bar.update(1)
    log.write("swapped in PQ\n")
    assert out.getvalue() == "swapped in PQ\n"


def test_a_message_printed_while_a_bar_shows_is_never_lost():
    """Ctrl-C during ingestion: the 'interrupted' line comes while the bar is drawn."""
    out, clock = io.StringIO(), Clock()
    log = ProgressLog(out, quiet=15, interval=30, clock=clock)
    bar = tqdm(total=10, desc="ingest", file=log, mininterval=0, miniters=1)
    bar.update(3)
    print("streamk: interrupted by SIGINT: added 3", file=log)
    bar.close()
    assert out.getvalue() == "streamk: interrupted by SIGINT: added 3\n"


def test_the_command_line_puts_it_in_front_of_a_non_terminal_stderr_only(monkeypatch):
    plain = io.StringIO()
    monkeypatch.setattr("sys.stderr", plain)
    import sys

    with progress_in_logs():
        assert isinstance(sys.stderr, ProgressLog) and sys.stderr.isatty()
    assert sys.stderr is plain

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    with progress_in_logs():
        assert sys.stderr is term


def test_help_has_no_restructuredtext_markup():
    """``streamk --help`` and every command's help: no double backticks, no :role:`x`."""
    from helpers.cli import every_help

    from streamk.cli import build_parser

    for text in every_help(build_parser()):
        assert "``" not in text and not re.search(r":\w+:`", text), text


def test_open_example_says_what_it_did(small_example_dir, capsys, monkeypatch):
    """Opened (the small example built by the conftest): one line naming it, its images,
    queries, encoder and folder; with progress=False, nothing."""
    pytest.importorskip("skimage")
    import json

    from streamk.demo import open_example

    info = json.loads((small_example_dir / "example.json").read_text())
    ex = open_example(directory=small_example_dir)
    ex.close()
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("streamk example 'demo' opened"), out
    assert f"{info['n_images']} images, {info['n_queries']} queries" in out[0]
    assert out[0].endswith(str(small_example_dir))
    open_example(directory=small_example_dir, progress=False).close()
    assert capsys.readouterr().out == ""

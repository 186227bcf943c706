"""The ``streamk`` command: one module per command group, each parsing its arguments
and calling one library function per command.

``experiments`` (``streamk demo``, ``streamk eval``, ``streamk datasets download``),
``index_commands`` (``streamk index ...``), ``ingest``, ``search`` (``streamk search``,
``streamk duplicates``), ``serve``, ``cache`` (``streamk cache info|trim``); ``options`` and
``defaults`` hold what they share,
``running`` how a command ends (errors, exit statuses, signals), ``startup`` Numba's start
without SciPy's linear algebra package, ``compile_notice`` the line that says a first run
compiles the kernels.

Building the parser imports none of the packages the commands drive (each command
imports what it needs when it runs), so ``streamk --help`` and ``streamk --version``
start in the time of Python itself.
"""

import argparse

from .. import __version__
from .cache import add_cache_command
from .compile_notice import announce_compilation
from .experiments import add_experiment_commands
from .index_commands import add_index_commands
from .ingest import add_ingest_command
from .options import Parser
from .progress_log import progress_in_logs
from .running import run_command, sigint_raises, warnings_as_lines
from .search import add_search_commands
from .serve import add_serve_command
from .startup import load_blas_alone

__all__ = ["build_parser", "main", "run_command"]

DESCRIPTION = ("Image retrieval with democratic and generalised-max-pooling match kernels (Murray et al., "
               "\"Interferences in match kernels\", TPAMI 2016): index your photos, search them by photo, "
               "find near-duplicates, serve them over HTTP; run the demo and the paper's evaluation.")
EPILOG = "'streamk COMMAND --help' lists a command's options; --debug (anywhere) prints the traceback of an error."


def build_parser():
    """The argument parser of every command (importing none of the packages they drive);
    a usage error is one line (:class:`.options.Parser`)."""
    parser = Parser(prog="streamk", description=DESCRIPTION, epilog=EPILOG)  # (its subparsers: Parser too)
    parser.add_argument("--version", action="version", version=f"streamk {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    add_experiment_commands(sub)
    add_index_commands(sub)
    add_ingest_command(sub)
    add_search_commands(sub)
    add_serve_command(sub)
    add_cache_command(sub)
    return parser


def _add_debug_option(parser, top):
    """``--debug`` on ``parser`` and on every subcommand below it (so that it may come
    anywhere on the line); the subcommands' copies leave the value alone unless given."""
    parser.add_argument("--debug", action="store_true", default=False if top else argparse.SUPPRESS,
                        help="print the traceback of an error (for a bug report)")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _add_debug_option(sub, top=False)


def main(argv=None):
    """Run one command; return its exit status (see :func:`run_command`). argparse's own
    errors exit 2 (it raises SystemExit); ``--debug`` (anywhere on the line) adds the
    traceback of an error."""
    parser = build_parser()
    _add_debug_option(parser, top=True)
    if argv is not None and any("\x00" in str(a) for a in argv):  # (a real command line cannot hold one)
        parser.error("an argument holds a NUL byte")
    args = parser.parse_args(argv)
    load_blas_alone()  # Numba's start without scipy.linalg (0.14 s), in a command's process only
    announce_compilation()  # a line when a first run compiles the kernels, not a silent wait
    with sigint_raises(), progress_in_logs(), warnings_as_lines(args.debug):  # progress in a log: a few lines
        return run_command(lambda: args.func(args), debug=args.debug)

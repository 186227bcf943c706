"""The command line's parsers, walked (imports nothing but argparse: a child process
that checks what building the parser loads uses it too)."""

import argparse


def every_help(parser):
    """The --help text of ``parser`` and of every subcommand below it."""
    texts = [parser.format_help()]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                texts += every_help(sub)
    return texts

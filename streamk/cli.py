"""Command line: ``streamk demo`` (more subcommands arrive with the index)."""

import argparse
import sys

from .errors import StreamkError


def _demo(args):
    from .demo import run_demo

    run_demo(seed=args.seed)
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="streamk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="encode and search a synthetic collection; print mAP per method")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except StreamkError as exc:
        print(f"streamk: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Argument types and the options several commands share (image limits, the feature
cache, the vocabulary size). Nothing here imports the packages the commands drive:
the defaults come from :mod:`.defaults`."""

import argparse
import sys

from .defaults import DEFAULT_MAX_FEATURES, DEFAULT_MAX_SIDE, MAX_FILE_SIZE, MAX_PIXELS


class Parser(argparse.ArgumentParser):
    """streamk's argument parser, every command's (subparsers are made of their parser's
    class): a usage error is one line on stderr, ``PROG: error: MESSAGE (see PROG --help)``,
    exit 2, as every other error is one line; --help is argparse's own."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and not any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
            extras = self._late_positionals(namespace, extras)
        if extras and not any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
            # a command's own leftovers: said by it (with its --help), not by `streamk` above it
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def _late_positionals(self, namespace, extras):
        """Positional arguments given after an option (``search IDX --id X q.jpg``) join the
        command's list of them (its one ``nargs="*"`` positional), as before the option:
        argparse fills a ``*`` list from the first run of positionals alone (empty here) and
        would call the later ones unrecognised. What is left (unknown options) is returned."""
        lists = [a for a in self._actions if not a.option_strings and a.nargs == argparse.ZERO_OR_MORE]
        if len(lists) != 1:
            return extras
        cut = extras.index("--") if "--" in extras else len(extras)  # after "--": positionals, whatever they hold
        late = [a for a in extras[:cut] if a == "-" or not a.startswith("-")] + extras[cut + 1:]
        setattr(namespace, lists[0].dest, list(getattr(namespace, lists[0].dest) or []) + late)
        return [a for a in extras[:cut] if a not in late]

    def error(self, message):
        text = "; ".join(line.strip() for line in str(message).splitlines() if line.strip())
        self.exit(2, f"{self.prog}: error: {text} (see {self.prog} --help)\n")


# ---------------------------------------------------------------- argument types
def csv(cast=str, choices=None):
    """A comma list: ``16,64`` -> [16, 64] (empty items dropped). ``cast``: str or an
    argument type of this module (whose ArgumentTypeError names the bad item); ``choices``:
    the names allowed. A list with no item is an error (it would run nothing), as is a
    name not in ``choices`` (``--rn maybe`` was a KeyError after the parse)."""
    def parse(text):
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"no value in {text!r}: give one or more, comma separated")
        if choices is not None:
            for x in items:
                if x not in choices:
                    raise argparse.ArgumentTypeError(f"{x!r} is not one of {', '.join(choices)}")
        return [cast(x) for x in items]
    return parse


def int_at_least(minimum):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        return v
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def int_in_range(minimum, maximum):
    def parse(text):
        v = int_at_least(minimum)(text)
        if v > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {v}")
        return v
    return parse


port_number = int_in_range(0, 65535)  # TCP's port field is 16 bits; 0: any free port


def unit_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return v


_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def byte_size(text):
    """A size in bytes: ``52428800``, ``50M``, ``1.5G`` (K, M, G, T: powers of 1024)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _SIZE_UNITS and t[-1:] else ""
    try:
        v = float(t[: len(t) - len(unit)]) * _SIZE_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 52428800, 50M, 1G)") from None
    if not (v >= 1 and v < 2**62):
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return int(v)


def existing_folder(text):
    """A folder that exists (checked when the command starts, not at its first use)."""
    import os

    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder" if os.path.exists(text)
                                         else f"no such folder: {text!r}")
    return text


def max_side(text):
    v = non_negative_int(text)
    if 0 < v < 16:
        raise argparse.ArgumentTypeError(f"must be 0 (full resolution) or >= 16, got {v}")
    return v


# ---------------------------------------------------------------- shared options
def add_limit_options(parser, extraction=False):
    """The image limits (README, "Limits and errors"): file size and pixels of every image
    read; with ``extraction`` (index create), the extractor's long side and feature cap too."""
    parser.add_argument("--max-file-size", type=byte_size, default=MAX_FILE_SIZE, metavar="BYTES",
                        help=f"refuse image files larger than this (e.g. 50M; default {MAX_FILE_SIZE // 2**20}M)")
    parser.add_argument("--max-pixels", type=positive_int, default=MAX_PIXELS, metavar="N",
                        help=f"refuse images of more pixels (width x height, read from the header before "
                             f"decoding; default {MAX_PIXELS:,})")
    if extraction:
        parser.add_argument("--max-side", type=max_side, default=DEFAULT_MAX_SIDE, metavar="PX",
                            help=f"extractor: reduce images to this long side before detection (default "
                                 f"{DEFAULT_MAX_SIDE}, the Oxford/Paris images' size; 0: full resolution); "
                                 f"stored with the index, queries are reduced alike")
        parser.add_argument("--max-features", type=non_negative_int, default=DEFAULT_MAX_FEATURES, metavar="N",
                            help=f"extractor: keep the strongest N features of an image (default "
                                 f"{DEFAULT_MAX_FEATURES}; 0: all); stored with the index")


def add_cache_options(parser):
    parser.add_argument("--cache", default=None, metavar="DIR",
                        help="feature cache folder, read and filled by the workers (default: "
                             "~/.cache/streamk/features when it exists)")
    parser.add_argument("--no-cache", action="store_true", help="no feature cache")


class DeprecatedAlias(argparse.Action):
    """An option's old name, kept for one release: stores into the new option's ``dest``
    and says on stderr that the name is deprecated (it is hidden from --help)."""

    def __init__(self, option_strings, dest, new, **kwargs):
        self.new = new
        kwargs.update(default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"streamk: warning: {option_string} is deprecated and will be removed after streamk 0.3: "
              f"use {self.new}", file=sys.stderr, flush=True)
        setattr(namespace, self.dest, values)


def add_vocab_size_option(parser, *, type, default, help, metavar="K"):
    """``--vocab-size`` (``args.vocab_size``), the encoder's vocabulary size, and its old
    name ``--k`` (streamk 0.2; deprecated: ``-k`` is the number of results of a search)."""
    parser.add_argument("--vocab-size", type=type, default=default, metavar=metavar,
                        help=f"{help} (--k: the old name, deprecated)")
    parser.add_argument("--k", dest="vocab_size", type=type, metavar=metavar, action=DeprecatedAlias,
                        new="--vocab-size")

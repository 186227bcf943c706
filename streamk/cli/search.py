"""``streamk search`` and ``streamk duplicates``: what an index holds that looks like a
query image, or like its own images."""

import json
import sys

from .defaults import DEFAULT_DUPLICATE_THRESHOLD, SEARCH_EXPANSIONS, SEARCH_MODES
from .index_commands import open_from_args, stale_note
from .options import add_limit_options, non_negative_int, positive_int, unit_float


def print_json_rows(rows):
    """``rows`` as one JSON array with one row per line (not one coordinate per line, as
    an indented dump gives): readable, greppable, and still one JSON document."""
    print("[" + ",".join(f"\n{json.dumps(row)}" for row in rows) + ("\n]" if rows else "]"))


def _search(args):
    from ..index import SearchParams

    # checked once, here, before the index is opened; the index takes it whole
    params = SearchParams(k=args.k, mode=args.mode, nprobe=args.nprobe, rerank=args.rerank, verify=args.verify,
                          expand=args.expand, expansion=args.expansion, pairs=args.pairs, where=args.where,
                          box=None if args.box is None else tuple(args.box))
    with open_from_args(args, readonly=True) as idx:
        idx.extractor().set_limits(max_file_size=args.max_file_size, max_pixels=args.max_pixels)
        with _stale_codec_noted(args.dir):
            hits = idx.search(args.image, params=params)
    if args.json:
        print_json_rows([{"rank": r, **h.to_dict(pairs=params.pairs)} for r, h in enumerate(hits, 1)])
    else:
        print(f"{'rank':>4}  {'score':>8}  {'inliers':>7}  id")
        for r, h in enumerate(hits, 1):
            inliers = "" if h.inliers is None else f"{h.inliers}{'*' if h.verified else ''}"
            print(f"{r:>4}  {h.score:8.4f}  {inliers:>7}  {h.id}")
        if any(h.inliers is not None for h in hits):
            print("(* verified: its local features agree with the query's under one affine map)")
    return 0


class _stale_codec_noted:
    """While inside: a StaleCodecWarning becomes one ``streamk: note:`` line on stderr
    (naming the index as typed); other warnings are shown as usual."""

    def __init__(self, where):
        self.where = where

    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings(record=True)
        self._caught = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        import warnings

        from ..errors import StaleCodecWarning

        self._catch.__exit__(*exc)
        stale = None
        for w in self._caught:
            if issubclass(w.category, StaleCodecWarning):
                stale = getattr(w.message, "staleness", None)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        note = stale_note(stale, self.where)
        if note:
            print(f"streamk: note: {note}", file=sys.stderr, flush=True)


def _duplicates(args):
    how = f"threshold {args.threshold:g}{', verified' if args.verify else ''}"
    with open_from_args(args, readonly=True) as idx:
        if args.id is not None:
            hits = idx.duplicates(args.id, threshold=args.threshold, verify=args.verify)
            _print_near_duplicates_of(args, hits, how)
            return 0
        groups = idx.duplicates(threshold=args.threshold, verify=args.verify, neighbours=args.neighbours,
                                progress=None if not args.no_progress else False)
    if args.json:
        print(json.dumps(groups, indent=1))
    else:
        for n, g in enumerate(groups, 1):
            print(f"group {n} ({len(g['ids'])} images): {' '.join(g['ids'])}")
        print(f"{len(groups)} group(s) of near-duplicates, {sum(len(g['ids']) for g in groups)} images ({how})")
    return 0


def _print_near_duplicates_of(args, hits, how):
    if args.json:
        print_json_rows([h.to_dict(pairs=False) for h in hits])
    elif not hits:
        print(f"no near-duplicates of {args.id} ({how})")
    else:
        for h in hits:
            inl = "" if h.inliers is None else f"  {h.inliers} inliers"
            print(f"{h.score:8.4f}  {h.id}{inl}")


def add_search_commands(sub):
    se = sub.add_parser("search", help="the k best images of an index for a query image")
    se.add_argument("dir", help="index directory")
    se.add_argument("image", help="query image file")
    se.add_argument("-k", type=positive_int, default=10, help="results (default 10)")
    se.add_argument("--box", type=float, nargs=4, metavar=("X1", "Y1", "X2", "Y2"), default=None)
    se.add_argument("--mode", choices=list(SEARCH_MODES), default=None,
                    help="default: pq once the index has a codec (index train), else exact")
    se.add_argument("--nprobe", type=positive_int, default=None, help="with an IVF codec: lists visited")
    se.add_argument("--rerank", type=non_negative_int, default=None,
                    help="with --mode pq: candidates re-scored with the stored vectors (0: none; "
                         "default max(4k, 100))")
    se.add_argument("--verify", type=non_negative_int, default=None, metavar="R",
                    help="spatially verify the first R results (default 100 when the index has local geometry; "
                         "0: off)")
    se.add_argument("--expand", type=non_negative_int, default=None, metavar="N",
                    help="query expansion with at most N verified results (default 50; 0: off)")
    se.add_argument("--expansion", choices=list(SEARCH_EXPANSIONS), default="aqe",
                    help="average query expansion (default) or alpha-QE")
    se.add_argument("--pairs", action="store_true", help="with --json: each result's inlier pairs")
    se.add_argument("--json", action="store_true", help="print JSON (one result per line) instead of a table")
    se.add_argument("--where", default=None, metavar="JSON",
                    help='a metadata filter on indexed fields, e.g. \'{"folder": "/photos/paris"}\', '
                         '\'{"date": {"gte": "2024-01-01"}}\', \'{"tag": {"in": ["a", "b"]}}\' (fields ANDed)')
    add_limit_options(se)
    se.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="a sharded index: search its shards through their owners on this Dask cluster")
    se.set_defaults(func=_search)
    _add_duplicates_command(sub)


def _add_duplicates_command(sub):
    du = sub.add_parser("duplicates", help="groups of near-duplicate images (the same photo re-encoded, resized, "
                                           "cropped a little), from the vectors, optionally verified")
    du.add_argument("dir", help="index directory")
    du.add_argument("--id", default=None, help="only this image's near-duplicates")
    du.add_argument("--threshold", type=unit_float, default=DEFAULT_DUPLICATE_THRESHOLD, metavar="T",
                    help=f"vector similarity (inner product) of a near-duplicate (default {DEFAULT_DUPLICATE_THRESHOLD}, "
                         f"measured on the demo's photo changes: bench/README.md)")
    du.add_argument("--verify", action="store_true",
                    help="keep only the pairs the second stage confirms (local geometry, RANSAC)")
    du.add_argument("--neighbours", type=positive_int, default=10,
                    help="each image's nearest images looked at (whole index; default 10)")
    du.add_argument("--json", action="store_true", help="print JSON")
    du.add_argument("--no-progress", action="store_true", help="no progress bar")
    du.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="a sharded index: its shards' owners on this Dask cluster")
    du.set_defaults(func=_duplicates)

"""``streamk ingest``: add image files and folders to an index, once or watching."""

import sys

from .defaults import DEFAULT_DUPLICATE_THRESHOLD, DUPLICATE_POLICIES
from .options import add_cache_options, add_limit_options, positive_float, positive_int, unit_float
from .running import terminate_raises


def _ingest(args):
    from ..config import feature_cache_dir
    from ..errors import IngestInterruptedError
    from ..pipeline import run_ingest

    try:
        with terminate_raises():  # SIGTERM, as SIGINT, ends a watch cleanly and a one-shot run with its account
            stats = run_ingest(args.dir, args.images, watch=args.watch, interval=args.interval,
                               max_polls=args.max_polls, workers=args.workers, dask=args.dask,
                               batch_size=args.batch_size, cache_dir=feature_cache_dir(args.cache, args.no_cache),
                               progress=None if not args.no_progress else False,
                               log=lambda line: print(line, flush=True),
                               max_file_size=args.max_file_size, max_pixels=args.max_pixels,
                               metadata=args.metadata, on_duplicate=args.on_duplicate,
                               duplicate_threshold=args.duplicate_threshold,
                               retrain_at=args.retrain_at)
    except IngestInterruptedError as exc:
        print(f"streamk: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    if args.watch:  # the poll lines said each poll's own counts: this one says the whole watch's
        print(f"total, all polls: {stats.summary(updates=True)}", flush=True)
    else:
        print(stats.summary(), flush=True)
    # a watch stopped on request (Ctrl-C, a service manager's SIGTERM) is a clean stop: its failures were said
    # per file and in the last line, and a supervisor must not take the stop for a crash
    return 1 if stats.n_failed and stats.stopped_by is None else 0


def add_ingest_command(sub):
    ing = sub.add_parser("ingest", help="add image files/folders to an index (resumable; skips known content)")
    ing.add_argument("dir", help="index directory")
    ing.add_argument("images", nargs="+", help="image files and folders (walked recursively)")
    ing.add_argument("--watch", action="store_true",
                     help="keep polling the folders for new files and files changed since (a changed file's "
                          "image is updated, also when it changed while no watch ran; a deleted file's stays); "
                          "a line for each poll that found any, with "
                          "that poll's own counts; Ctrl-C or SIGTERM ends it with exit status 0")
    ing.add_argument("--interval", type=positive_float, default=5.0, help="seconds between polls (--watch)")
    ing.add_argument("--max-polls", type=positive_int, default=None,
                     help="with --watch: stop after this many passes (default: until Ctrl-C)")
    ing.add_argument("--workers", type=positive_int, default=None, help="extraction processes (default: all cores)")
    ing.add_argument("--dask", default=None, metavar="ADDRESS",
                     help="run the workers on a Dask cluster: its scheduler's address (tcp://host:8786), "
                          "or local:N for a LocalCluster of N processes started here")
    add_cache_options(ing)
    ing.add_argument("--batch-size", type=positive_int, default=64, help="images per write transaction")
    ing.add_argument("--no-progress", action="store_true", help="no progress bar")
    ing.add_argument("--metadata", default=None, metavar="FILE.jsonl",
                     help='metadata for the images: one JSON object per line, {"id": ..., fields} or '
                          '{"path": ..., fields} (beside the path, folder, size, mtime and EXIF date stored anyway)')
    ing.add_argument("--on-duplicate", choices=list(DUPLICATE_POLICIES), default="keep",
                     help="a near-duplicate of a stored image (same photo re-encoded, resized, cropped a little): "
                          "keep it (default, not looked up), skip it, or add it and report it")
    ing.add_argument("--duplicate-threshold", type=unit_float, default=DEFAULT_DUPLICATE_THRESHOLD, metavar="T",
                     help=f"vector similarity of a near-duplicate (default {DEFAULT_DUPLICATE_THRESHOLD})")
    ing.add_argument("--retrain-at", type=positive_float, default=None, metavar="RATIO",
                     help="after the pass (each poll with --watch), retrain the PQ codec when the images added since "
                          "it was trained exceed RATIO times the images it was trained on (e.g. 1; default: never)")
    add_limit_options(ing)
    ing.set_defaults(func=_ingest)

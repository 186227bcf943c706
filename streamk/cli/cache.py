"""``streamk cache``: what the feature cache holds, and trimming it."""

from .options import non_negative_int


def _folder(args):
    from ..config import default_cache_dir

    return args.cache or default_cache_dir()


def _mb(nbytes):
    return f"{nbytes / 1e6:,.1f} MB"


def _info(args):
    import os

    from ..features import FeatureCache

    folder = _folder(args)
    if not os.path.isdir(folder):
        print(f"{folder}: no feature cache (a command makes it when given --cache, or the demo does)")
        return 0
    cache = FeatureCache(folder)
    entries, nbytes = cache.size()
    bound = f"bound {_mb(cache.max_bytes)}" if cache.max_bytes else "no bound"
    print(f"{folder}: {entries:,} images' features, {_mb(nbytes)} ({bound}; STREAMK_FEATURE_CACHE_MAX_BYTES "
          f"sets it; the least recently used go first)")
    return 0


def _trim(args):
    import os

    from ..features import FeatureCache

    folder = _folder(args)
    if not os.path.isdir(folder):
        print(f"{folder}: no feature cache")
        return 0
    cache = FeatureCache(folder)
    removed, freed = cache.trim(args.max_bytes)
    entries, nbytes = cache.size()
    print(f"removed {removed:,} images' features ({_mb(freed)}); {entries:,} left ({_mb(nbytes)})")
    return 0


def add_cache_command(sub):
    c = sub.add_parser("cache", help="the feature cache: its size, and trimming it")
    csub = c.add_subparsers(dest="cache_command", required=True)
    info = csub.add_parser("info", help="images' features held, bytes, the bound")
    trim = csub.add_parser("trim", help="remove the least recently used features down to 90 %% of a bound")
    trim.add_argument("--max-bytes", type=non_negative_int, default=None, metavar="N",
                      help="the bound to trim to (default: the cache's own, 5 GiB or "
                           "STREAMK_FEATURE_CACHE_MAX_BYTES; 0 empties it)")
    for p in (info, trim):
        p.add_argument("--cache", default=None, metavar="DIR",
                       help="the feature cache folder (default ~/.cache/streamk/features)")
    info.set_defaults(func=_info)
    trim.set_defaults(func=_trim)

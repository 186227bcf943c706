"""``streamk cache``: what the feature cache holds, and trimming it."""

from ..units import byte_size
from .options import non_negative_int


def _cache(args):
    """The FeatureCache of ``--cache`` (default ~/.cache/streamk/features), or None (said)
    when there is none: a look never makes one."""
    import os

    from ..config import default_cache_dir
    from ..features import FeatureCache

    folder = args.cache or default_cache_dir()
    if not os.path.isdir(folder):
        print(f"{folder}: no feature cache (a command makes it when given --cache, or the demo does)")
        return None
    return FeatureCache(folder)


def _info(args):
    cache = _cache(args)
    if cache is not None:
        entries, nbytes = cache.size()
        bound = f"bound {byte_size(cache.max_bytes)}" if cache.max_bytes else "no bound"
        print(f"{cache.directory}: {entries:,} images' features, {byte_size(nbytes)} ({bound}; "
              f"STREAMK_FEATURE_CACHE_MAX_BYTES sets it; the least recently used go first)")
    return 0


def _trim(args):
    cache = _cache(args)
    if cache is not None:
        removed, freed = cache.trim(args.max_bytes)
        entries, nbytes = cache.size()
        print(f"removed {removed:,} images' features ({byte_size(freed)}); {entries:,} left ({byte_size(nbytes)})")
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

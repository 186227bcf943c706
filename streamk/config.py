"""Where streamk keeps things on this machine, and the settings read from the environment.

``STREAMK_SHARED_DATA``: the shared benchmark data (default ``../shared/data``
beside a source checkout). ``XDG_CACHE_HOME`` (default ``~/.cache``): the feature cache lives in
``$XDG_CACHE_HOME/streamk/features``, the notebooks' example collections in
``$XDG_CACHE_HOME/streamk/examples``. ``STREAMK_DASK_TIMEOUT``: seconds to wait for a
Dask scheduler to answer (default 10). ``STREAMK_FEATURE_CACHE_MAX_BYTES``: the feature
cache's bound (default 5 GiB; 0: none; :class:`streamk.features.FeatureCache`).
"""

import os
from pathlib import Path


def cache_home():
    """``$XDG_CACHE_HOME/streamk`` (default ``~/.cache/streamk``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "streamk")


def default_cache_dir():
    """The shared feature cache folder (:class:`streamk.features.FeatureCache`)."""
    return os.path.join(cache_home(), "features")


def feature_cache_dir(cache=None, no_cache=False):
    """The feature cache a command uses: ``cache`` when given, none with ``no_cache``,
    else the shared cache when it exists (a command never creates it unasked)."""
    if no_cache:
        return None
    if cache is not None:
        return cache
    return default_cache_dir() if os.path.isdir(default_cache_dir()) else None


def shared_data_dir():
    """$STREAMK_SHARED_DATA, else ``../shared/data`` beside the repository (a source
    checkout); None if absent."""
    env = os.environ.get("STREAMK_SHARED_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    return path if path.is_dir() else None


DEFAULT_DASK_TIMEOUT = 10.0  # seconds to connect to a Dask scheduler


def dask_connect_timeout():
    """Seconds to wait for a Dask scheduler: $STREAMK_DASK_TIMEOUT, default 10 (a bad
    value is a ConfigError)."""
    text = os.environ.get("STREAMK_DASK_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_DASK_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        from .errors import ConfigError

        raise ConfigError(f"STREAMK_DASK_TIMEOUT must be a number of seconds > 0, got {text!r}")
    return value


__all__ = ["DEFAULT_DASK_TIMEOUT", "cache_home", "dask_connect_timeout", "default_cache_dir", "feature_cache_dir",
           "shared_data_dir"]

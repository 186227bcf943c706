"""Where streamk keeps things on this machine, and the settings read from the environment.

``XDG_CACHE_HOME`` (default ``~/.cache``): the feature cache lives in
``$XDG_CACHE_HOME/streamk/features``, the notebooks' example collections in
``$XDG_CACHE_HOME/streamk/examples``.
"""

import os


def cache_home():
    """``$XDG_CACHE_HOME/streamk`` (default ``~/.cache/streamk``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "streamk")


def default_cache_dir():
    """The shared feature cache folder (:class:`streamk.features.FeatureCache`)."""
    return os.path.join(cache_home(), "features")


__all__ = ["cache_home", "default_cache_dir"]

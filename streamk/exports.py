"""A package's public names, imported on first use.

Every package of streamk lists its public names in its ``__init__`` and imports none of
its modules there: ``from streamk.index import StreamingIndex`` loads the index's
modules, ``import streamk.features`` alone loads nothing. Other packages import only
these names (tests/test_layout.py checks it), so a package's modules are its own to
move, and an import costs only what it uses. ::

    __all__, __getattr__, __dir__ = lazy_exports(__name__, {
        ".cache": ("FeatureCache", "extract"),
        ".metadata": ("FILTER_GRAMMAR=GRAMMAR",),     # public name = the module's name
    }, renamed={"verify_index": "check_index"})       # old name -> new, for one release
"""

import importlib
import pkgutil
import sys
import warnings


def lazy_exports(package, exports, renamed=None):
    """(``__all__``, ``__getattr__``, ``__dir__``) of ``package`` from {".module": names}.

    A name equal to one of the package's submodules is bound at once (importing the
    submodule would otherwise replace it with the module)."""
    where = {}
    for module, names in exports.items():
        for entry in names:
            public, _, source = entry.partition("=")
            if public in where:
                raise ValueError(f"{package}: {public} is exported twice")
            where[public] = (module, source or public)
    renamed = dict(renamed or {})
    namespace = sys.modules[package].__dict__
    submodules = {m.name for m in pkgutil.iter_modules(namespace.get("__path__", []))}

    def load(name):
        module, source = where[name]
        value = getattr(importlib.import_module(module, package), source)
        namespace[name] = value  # the next look-up is a plain attribute
        return value

    for name in sorted(set(where) & submodules):
        load(name)

    def __getattr__(name):
        if name in where:
            return load(name)
        if name in renamed:
            warnings.warn(f"{package}.{name} is deprecated and will be removed after streamk 0.3: use "
                          f"{package}.{renamed[name]}", DeprecationWarning, stacklevel=2)
            return getattr(sys.modules[package], renamed[name])
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(namespace) | set(where))

    return sorted(where), __getattr__, __dir__


__all__ = ["lazy_exports"]

"""A package's public names, imported on first use.

Every package of streamk lists its public names in its ``__init__`` and imports none of
its modules there: ``from streamk.index import StreamingIndex`` loads the index's
modules, ``import streamk.features`` alone loads nothing. Other packages import only
these names (tests/test_layout.py checks it), so a package's modules are its own to
move, and an import costs only what it uses.

The list is written once, as the imports a type checker reads::

    from typing import TYPE_CHECKING

    from ..exports import lazy_exports

    if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
        from .cache import FeatureCache as FeatureCache, extract as extract
        from .metadata import GRAMMAR as FILTER_GRAMMAR

    __all__, __getattr__, __dir__ = lazy_exports(__name__, renamed={"verify_index": "check_index"})

``lazy_exports`` reads that block from the package's source (``X as X``: the name is
re-exported for a type checker too) and answers each name from its module on first use;
``renamed`` keeps an old name for one release, with a DeprecationWarning.
"""

import ast
import importlib
import pkgutil
import sys
import types
import warnings


def _type_checking_imports(path):
    """{public name: (relative module, name in it)} of the ``if TYPE_CHECKING:`` block."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    where = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if not (isinstance(statement, ast.ImportFrom) and statement.level):
                    raise ValueError(f"{path}: the TYPE_CHECKING block holds relative imports only")
                module = "." * statement.level + (statement.module or "")
                for alias in statement.names:
                    public = alias.asname or alias.name
                    if public in where:
                        raise ValueError(f"{path}: {public} is exported twice")
                    where[public] = (module, alias.name)
    return where


class _ShadowedSubmodules(types.ModuleType):
    """A package with public names equal to its submodules' (``streamk.index.backup``, the
    function, in ``backup.py``): the import system binds a submodule on its package when it
    imports it, and here the public name is bound instead, so that the name stays what
    ``__all__`` says whichever import comes first, without importing the submodule up front."""

    def __setattr__(self, name, value):
        shadowed = self.__dict__.get("_shadowed_by_public_names", {})
        if name in shadowed and isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}":
            value = getattr(value, shadowed[name])
        super().__setattr__(name, value)


def lazy_exports(package, renamed=None):
    """(``__all__``, ``__getattr__``, ``__dir__``) of ``package``, from its TYPE_CHECKING block.

    A name equal to one of the package's submodules is loaded on first use too: importing
    that submodule binds the public name, not the module (:class:`_ShadowedSubmodules`)."""
    namespace = sys.modules[package].__dict__
    where = _type_checking_imports(namespace["__file__"])
    renamed = dict(renamed or {})
    submodules = {m.name for m in pkgutil.iter_modules(namespace.get("__path__", []))}

    def load(name):
        module, source = where[name]
        value = getattr(importlib.import_module(module, package), source)
        namespace[name] = value  # the next look-up is a plain attribute
        return value

    shadowed = {name: where[name][1] for name in set(where) & submodules}
    if shadowed:
        namespace["_shadowed_by_public_names"] = shadowed
        sys.modules[package].__class__ = _ShadowedSubmodules

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

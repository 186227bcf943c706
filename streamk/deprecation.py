"""Names renamed in streamk 0.3, kept for one release with a DeprecationWarning.

A package whose names changed puts ``__getattr__ = renamed(__name__, {old: new})`` at
the bottom of its ``__init__``: the old name still resolves, and says what replaced it.
"""

import warnings


def renamed(module_name, old_to_new):
    """A module ``__getattr__`` that answers each old name with its new one, warning once per use."""

    def __getattr__(name):
        if name in old_to_new:
            new = old_to_new[name]
            warnings.warn(f"{module_name}.{name} is deprecated and will be removed after streamk 0.3: "
                          f"use {module_name}.{new}", DeprecationWarning, stacklevel=2)
            import sys
            return getattr(sys.modules[module_name], new)
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["renamed"]

"""Numba's start in a command's process without SciPy's linear algebra package.

When Numba first compiles or loads a function it imports ``numba.np.arraymath``, which
checks that BLAS is there with ``import scipy.linalg.cython_blas``: that imports the
whole ``scipy.linalg`` package first (with ``numpy.f2py``, ``numpy.testing`` and
``unittest`` under it), ~0.14 s of CPU on this project's 2-core Xeon (a seventh of a
typed ``streamk search``), for a module of which Numba needs only the BLAS functions'
addresses (read at run time from the module's ``__pyx_capi__``, found in ``sys.modules``).
The encoding's Gram matrix needs one more BLAS module (``scipy.linalg._fblas``: ``syrk``).

:func:`load_blas_alone` (called by :func:`streamk.cli.main`, so only in a command's own
process, never in a program that imports streamk) installs a finder that, when Numba
imports ``numba.np.arraymath``, loads these two extension modules on their own (~0.01 s).
``scipy.linalg`` stays importable as usual and reuses them: when something imports it
later, they are bound on it as an import would have. Where any of this does not hold
(another SciPy layout, ``scipy.linalg`` already imported), nothing is changed and Numba
imports SciPy as it always does.
"""

import importlib.machinery
import os
import sys

PACKAGE = "scipy.linalg"
ALONE = ("cython_blas", "_fblas")  # extension modules of PACKAGE: Numba's BLAS, and syrk (encoding.gram)
TRIGGER = "numba.np.arraymath"  # the Numba module whose import checks for BLAS


class _BlasAlone:
    """Finds nothing itself: loads the BLAS extensions alone before Numba asks for them,
    and binds them on ``scipy.linalg`` when that package is imported later. (A meta path
    finder needs only ``find_spec``: importlib.abc, 7 ms of imports, is left out.)"""

    def find_spec(self, name, path=None, target=None):
        if name == TRIGGER and PACKAGE not in sys.modules:
            for leaf in ALONE:
                _load_extension_alone(f"{PACKAGE}.{leaf}")
        elif name == PACKAGE:
            sys.meta_path.remove(self)  # its work is done once the package has its modules
            return _binding_alone(importlib.machinery.PathFinder.find_spec(name, path, target))
        return None


def _load_extension_alone(name):
    """``name`` (an extension module of a package) loaded without running its package's
    ``__init__``; None (and nothing left in ``sys.modules``) where it cannot be."""
    import importlib.util

    package, _, leaf = name.rpartition(".")
    try:
        top = importlib.util.find_spec(package.split(".")[0])  # (finding it does not import it)
        folder = os.path.join(os.path.dirname(top.origin), *package.split(".")[1:])
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, leaf + suffix)
            if os.path.exists(path):
                break
        else:
            return None
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    except Exception:  # noqa: BLE001 -- any surprise: Numba imports SciPy its own way
        sys.modules.pop(name, None)
        return None


def _binding_alone(spec):
    """``spec`` of ``scipy.linalg`` whose loading ends by binding on it the modules loaded
    alone (as importing them through the package would have)."""
    if spec is None or spec.loader is None:
        return spec
    exec_module = spec.loader.exec_module

    def exec_and_bind(module):
        exec_module(module)
        for leaf in ALONE:
            if f"{PACKAGE}.{leaf}" in sys.modules:
                setattr(module, leaf, sys.modules[f"{PACKAGE}.{leaf}"])

    spec.loader.exec_module = exec_and_bind  # (this loader serves this one module)
    return spec


def load_blas_alone():
    """Install the finder (once; nothing is loaded until Numba starts)."""
    if PACKAGE not in sys.modules and not any(isinstance(f, _BlasAlone) for f in sys.meta_path):
        sys.meta_path.insert(0, _BlasAlone())


__all__ = ["load_blas_alone"]

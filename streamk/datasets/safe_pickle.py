"""A pickle loader that refuses every global outside plain containers and numpy's array
reconstruction: the revisited benchmarks' ground truth comes as ``.pkl``, and a
pickle can otherwise run code when it is loaded."""

import io
import pickle
from pathlib import Path

import numpy as np

from ..errors import GroundTruthError, UnsafePickleError


def _safe_globals() -> dict:
    import builtins
    import _codecs

    allowed = {}
    for nm in ("dict", "list", "tuple", "set", "frozenset", "str", "bytes", "bytearray",
               "int", "float", "complex", "bool"):
        allowed[("builtins", nm)] = getattr(builtins, nm)
        allowed[("__builtin__", nm)] = getattr(builtins, nm)     # protocol 0-2 pickles made by Python 2
    # protocol <= 2 pickles of numpy arrays carry their raw bytes as
    # _codecs.encode(latin1_str, 'latin1'): a pure str -> bytes conversion
    allowed[("_codecs", "encode")] = _codecs.encode
    try:
        from numpy._core import multiarray as ma
        from numpy._core import numeric as nm_
    except ImportError:  # numpy < 2
        from numpy.core import multiarray as ma
        from numpy.core import numeric as nm_
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[(mod, "_reconstruct")] = ma._reconstruct
        allowed[(mod, "scalar")] = ma.scalar
    # protocol 5 pickles of arrays (numpy >= 1.16) rebuild from a buffer
    for mod in ("numpy.core.numeric", "numpy._core.numeric"):
        if hasattr(nm_, "_frombuffer"):
            allowed[(mod, "_frombuffer")] = nm_._frombuffer
    allowed[("numpy", "ndarray")] = np.ndarray
    allowed[("numpy", "dtype")] = np.dtype
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that admits only plain containers and numpy array reconstruction.

    Any other global (``os.system``, ``builtins.eval``, a class, ...) raises
    :class:`UnsafePickleError` before it is looked up, so nothing runs.
    """

    _allowed: dict | None = None

    def find_class(self, module, name):
        if RestrictedUnpickler._allowed is None:
            RestrictedUnpickler._allowed = _safe_globals()
        try:
            return RestrictedUnpickler._allowed[(module, name)]
        except KeyError:
            raise UnsafePickleError(f"refusing to unpickle global {module}.{name}: only plain containers "
                                    f"and numpy arrays are allowed") from None

    def persistent_load(self, pid):
        raise UnsafePickleError("refusing a pickle with persistent ids")


def safe_load_pickle(source):
    """Load a pickle (path, bytes or binary file) with :class:`RestrictedUnpickler`."""
    if isinstance(source, (bytes, bytearray)):
        f = io.BytesIO(source)
    elif hasattr(source, "read"):
        f = source
    else:
        path = Path(source)
        if not path.is_file():
            raise GroundTruthError(f"pickle file {path} does not exist")
        with open(path, "rb") as fh:
            return safe_load_pickle(fh)
    try:
        return RestrictedUnpickler(f, encoding="latin1").load()
    except UnsafePickleError:
        raise
    except Exception as exc:
        raise GroundTruthError(f"cannot read pickle: {exc}") from exc


__all__ = ["RestrictedUnpickler", "safe_load_pickle"]

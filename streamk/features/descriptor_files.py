"""Readers and writers for local-descriptor files.

Formats (all little-endian, as written by the INRIA / Oxford tools):

``.siftgeo``  records of 168 bytes: 9 float32 of geometry
              (x, y, scale, angle, mi11, mi12, mi21, mi22, cornerness), an int32
              dimension (always 128), then 128 uint8 descriptor bytes.
``.fvecs``    each vector: int32 dimension d, then d float32.
``.bvecs``    each vector: int32 dimension d, then d uint8.
``.ivecs``    each vector: int32 dimension d, then d int32.
``.npy``      a 2-D numeric numpy array, read with ``allow_pickle=False``.

Readers return C-contiguous arrays in native byte order. An empty file holds 0
vectors. A malformed file (truncated record, wrong or inconsistent dimension
field, absurd sizes, non-finite values, a header that does not describe the
data) raises :class:`~streamk.errors.DescriptorFileError`, and so does an
unreadable path (missing, a directory, no permission). Writers replace the
target atomically (temporary file in the same folder, then ``os.replace``), so
a failed write leaves an existing file unchanged.

Keypoint layout shared with :mod:`streamk.features`: ``(n, 6)`` float32 rows
``x, y, a11, a21, a22, theta`` where ``A = [[a11, 0], [a21, a22]]`` maps the unit
circle onto the keypoint's ellipse (centred at x, y) and theta is the
orientation in radians. :func:`keypoints_to_siftgeo` and
:func:`siftgeo_to_keypoints` convert to and from siftgeo geometry.
"""

import os
import stat
from pathlib import Path

import numpy as np

from ..errors import DescriptorFileError, DimensionError
from ..files import atomic_write

SIFTGEO_DIM = 128
SIFTGEO_GEOMETRY_FIELDS = ("x", "y", "scale", "angle", "mi11", "mi12", "mi21", "mi22", "cornerness")
SIFTGEO_RECORD_BYTES = 9 * 4 + 4 + SIFTGEO_DIM  # 168
#: A dimension field above this is treated as corruption, not as a real vector length.
MAX_DIM = 1 << 20

_XVECS_DTYPES = {"fvecs": np.dtype("<f4"), "bvecs": np.dtype("u1"), "ivecs": np.dtype("<i4")}
FORMATS = (".siftgeo", ".fvecs", ".bvecs", ".ivecs", ".npy")

__all__ = [
    "FORMATS", "MAX_DIM", "SIFTGEO_DIM", "SIFTGEO_GEOMETRY_FIELDS", "SIFTGEO_RECORD_BYTES",
    "atomic_write", "fvecs_bytes", "keypoints_to_siftgeo", "read_bvecs", "read_descriptors", "read_fvecs",
    "read_ivecs", "read_npy", "read_siftgeo", "siftgeo_to_keypoints", "write_bvecs",
    "write_descriptors", "write_fvecs", "write_ivecs", "write_npy", "write_siftgeo",
]


# --------------------------------------------------------------------------- reading helpers
def _os_reason(exc):
    if isinstance(exc, IsADirectoryError):
        return "is a directory"
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return exc.strerror or str(exc)


def _open(path):
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "is a directory")
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device could block or never end
            raise DescriptorFileError(f"{path}: not a regular file")
        return open(path, "rb")
    except OSError as exc:
        raise DescriptorFileError(f"cannot read descriptor file {path}: {_os_reason(exc)}") from exc


def _file_bytes(path, mmap, nbytes_fn):
    """(uint8 array of the bytes needed, total file size).

    ``nbytes_fn(fh, size)`` says how many leading bytes are needed (None: all).
    """
    with _open(path) as fh:
        try:
            size = os.fstat(fh.fileno()).st_size
            need = nbytes_fn(fh, size)
            need = size if need is None else min(need, size)
            if need == 0:
                return np.empty(0, np.uint8), size
            if mmap:
                return np.memmap(fh, dtype=np.uint8, mode="r", shape=(need,)), size
            fh.seek(0)
            data = fh.read(need)
        except OSError as exc:
            raise DescriptorFileError(f"cannot read descriptor file {path}: {_os_reason(exc)}") from exc
    if len(data) != need:
        raise DescriptorFileError(f"{path}: file changed while being read")
    return np.frombuffer(data, dtype=np.uint8), size


def _check_count(count):
    if count is None:
        return None
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer)) or count < 0:
        raise DimensionError(f"count must be a non-negative integer or None, got {count!r}")
    return int(count)


def _read_xvecs(path, kind, count=None, dim=None, mmap=False):
    dtype = _XVECS_DTYPES[kind]
    count = _check_count(count)
    state = {}

    def nbytes(fh, size):
        if size == 0:
            return 0
        head = fh.read(4)
        if len(head) < 4:
            raise DescriptorFileError(f"{path}: truncated {kind} file ({size} bytes, less than one "
                                      f"dimension field)")
        d = int(np.frombuffer(head, "<i4")[0])
        if d <= 0 or d > MAX_DIM:
            raise DescriptorFileError(f"{path}: absurd dimension field {d} in the first {kind} record "
                                      f"(expected 1..{MAX_DIM}); not a {kind} file or corrupt")
        if dim is not None and d != dim:
            raise DescriptorFileError(f"{path}: vectors have dimension {d}, expected {dim}")
        rec = 4 + d * dtype.itemsize
        if size % rec:
            raise DescriptorFileError(
                f"{path}: file size {size} is not a multiple of the record size {rec} "
                f"(4 + {d} x {dtype.itemsize} bytes): truncated record or inconsistent dimensions")
        state.update(d=d, rec=rec)
        n = size // rec
        return (n if count is None else min(n, count)) * rec

    buf, size = _file_bytes(path, mmap, nbytes)
    if size == 0 or buf.size == 0:
        d = state.get("d", dim if dim is not None else 0)
        return np.empty((0, d), dtype.newbyteorder("="))
    d, rec = state["d"], state["rec"]
    recs = buf.reshape(-1, rec)
    dims = np.ascontiguousarray(recs[:, :4]).view("<i4").ravel()
    bad = np.flatnonzero(dims != d)
    if bad.size:
        i = int(bad[0])
        raise DescriptorFileError(f"{path}: record {i} has dimension field {int(dims[i])}, the first "
                                  f"record has {d} (inconsistent dimensions or corrupt file)")
    X = np.ascontiguousarray(recs[:, 4:]).view(dtype).reshape(len(recs), d)
    X = X.astype(dtype.newbyteorder("="), copy=False)
    if kind == "fvecs" and not np.isfinite(X).all():
        raise DescriptorFileError(f"{path}: fvecs file holds NaN or infinite values")
    return X


def read_fvecs(path, count=None, dim=None, mmap=False):
    """Read an ``.fvecs`` file as an ``(n, d)`` float32 array.

    count: read only the first ``count`` vectors. dim: the expected dimension
    (also the width of the result for an empty file). mmap: map the file instead
    of reading it (for files larger than memory; the result is still a copy).
    """
    return _read_xvecs(path, "fvecs", count, dim, mmap)


def read_bvecs(path, count=None, dim=None, mmap=False):
    """Read a ``.bvecs`` file as an ``(n, d)`` uint8 array (options as :func:`read_fvecs`)."""
    return _read_xvecs(path, "bvecs", count, dim, mmap)


def read_ivecs(path, count=None, dim=None, mmap=False):
    """Read an ``.ivecs`` file as an ``(n, d)`` int32 array (options as :func:`read_fvecs`)."""
    return _read_xvecs(path, "ivecs", count, dim, mmap)


def read_siftgeo(path, count=None, mmap=False):
    """Read a ``.siftgeo`` file: ``(geometry (n, 9) float32, descriptors (n, 128) uint8)``.

    Geometry columns are :data:`SIFTGEO_GEOMETRY_FIELDS`.
    """
    count = _check_count(count)

    def nbytes(fh, size):
        if size % SIFTGEO_RECORD_BYTES:
            raise DescriptorFileError(
                f"{path}: file size {size} is not a multiple of the siftgeo record size "
                f"{SIFTGEO_RECORD_BYTES}: truncated record or not a siftgeo file")
        n = size // SIFTGEO_RECORD_BYTES
        return (n if count is None else min(n, count)) * SIFTGEO_RECORD_BYTES

    buf, _ = _file_bytes(path, mmap, nbytes)
    recs = buf.reshape(-1, SIFTGEO_RECORD_BYTES)
    n = len(recs)
    geometry = np.ascontiguousarray(recs[:, :36]).view("<f4").reshape(n, 9).astype(np.float32, copy=False)
    dims = np.ascontiguousarray(recs[:, 36:40]).view("<i4").ravel()
    bad = np.flatnonzero(dims != SIFTGEO_DIM)
    if bad.size:
        i = int(bad[0])
        raise DescriptorFileError(f"{path}: record {i} has dimension field {int(dims[i])}, "
                                  f"siftgeo descriptors have {SIFTGEO_DIM}")
    if not np.isfinite(geometry).all():
        i = int(np.flatnonzero(~np.isfinite(geometry).all(axis=1))[0])
        raise DescriptorFileError(f"{path}: record {i} has NaN or infinite geometry")
    descriptors = np.array(recs[:, 40:], dtype=np.uint8, order="C")
    return geometry, descriptors


def read_npy(path, mmap=False):
    """Read a 2-D numeric ``.npy`` array (no pickle); ``mmap=True`` returns a read-only memmap.

    The header is checked against the file size before anything is allocated,
    so a corrupt header cannot ask for absurd amounts of memory. An empty
    (0-byte) file reads as a ``(0, 0)`` float32 array.
    """
    with _open(path) as fh:
        try:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return np.empty((0, 0), np.float32)
            try:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
                else:
                    raise ValueError(f"unsupported .npy format version {version}")
            except OSError:
                raise
            except Exception as exc:  # numpy raises ValueError, EOFError, SyntaxError, ...
                raise DescriptorFileError(f"{path}: not a valid .npy file ({exc})") from exc
            offset = fh.tell()
        except OSError as exc:
            raise DescriptorFileError(f"cannot read descriptor file {path}: {_os_reason(exc)}") from exc
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in "biuf":
        raise DescriptorFileError(f"{path}: .npy holds dtype {dtype}, expected plain numbers")
    if len(shape) != 2:
        raise DescriptorFileError(f"{path}: .npy array has shape {shape}, expected (n, d)")
    expected = int(shape[0]) * int(shape[1]) * dtype.itemsize
    if size - offset != expected:
        raise DescriptorFileError(f"{path}: .npy header describes {shape} {dtype} ({expected} bytes) "
                                  f"but the file holds {size - offset} data bytes (truncated or corrupt)")
    if expected == 0:
        return np.empty(shape, dtype.newbyteorder("="))
    order = "F" if fortran else "C"
    try:
        if mmap:
            X = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)
        else:
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read(expected)
            if len(data) != expected:
                raise DescriptorFileError(f"{path}: file changed while being read")
            X = np.frombuffer(data, dtype=dtype).reshape(shape, order=order)
            X = np.ascontiguousarray(X, dtype=dtype.newbyteorder("="))
    except OSError as exc:
        raise DescriptorFileError(f"cannot read descriptor file {path}: {_os_reason(exc)}") from exc
    if dtype.kind == "f" and not np.isfinite(X).all():
        raise DescriptorFileError(f"{path}: .npy array holds NaN or infinite values")
    return X


# --------------------------------------------------------------------------- writing
def _as_2d(X, what):
    try:
        X = np.asarray(X)
    except Exception as exc:
        raise DimensionError(f"{what}: not an array ({exc})") from exc
    if X.ndim != 2:
        raise DimensionError(f"{what}: expected a 2-D (n, d) array, got shape {X.shape}")
    if X.shape[0] > 0 and X.shape[1] == 0:
        raise DimensionError(f"{what}: vectors of dimension 0 cannot be stored")
    if X.shape[1] > MAX_DIM:
        raise DimensionError(f"{what}: dimension {X.shape[1]} is above the limit {MAX_DIM}")
    if X.dtype.kind not in "biuf":
        raise DimensionError(f"{what}: expected real numbers, got dtype {X.dtype}")
    return X


def _as_integers(X, lo, hi, dtype, what):
    if X.dtype.kind == "f":
        if not np.isfinite(X).all():
            raise DescriptorFileError(f"{what}: NaN or infinite values cannot be stored")
        if X.size and not np.array_equal(X, np.round(X)):
            raise DescriptorFileError(f"{what}: stores integers, got non-integral values")
    if X.size and (X.min() < lo or X.max() > hi):
        raise DescriptorFileError(f"{what}: values must lie in [{lo}, {hi}], got "
                                  f"[{X.min()}, {X.max()}]")
    return X.astype(dtype)


def _write_xvecs(path, X, kind):
    dtype = _XVECS_DTYPES[kind]
    what = f"{kind} writer"
    X = _as_2d(X, what)
    if kind == "fvecs":
        with np.errstate(over="ignore"):
            V = X.astype(dtype)
        if not np.isfinite(V).all():
            raise DescriptorFileError(f"{what}: NaN, infinite or float32-overflowing values cannot be stored")
    elif kind == "bvecs":
        V = _as_integers(X, 0, 255, dtype, what)
    else:
        V = _as_integers(X, -(2 ** 31), 2 ** 31 - 1, dtype, what)
    data = _xvecs_records(V)
    atomic_write(path, lambda fh: fh.write(data), "the descriptor file")


def _xvecs_records(V):
    """The bytes of the rows of ``V`` (already of its file's dtype) as xvecs records: per
    row its dimension (int32) then its values."""
    n, d = V.shape
    out = np.empty((n, 4 + d * V.dtype.itemsize), np.uint8)
    if n:
        out[:, :4] = np.full(n, d, "<i4").view(np.uint8).reshape(n, 4)
        out[:, 4:] = np.ascontiguousarray(V).view(np.uint8).reshape(n, -1)
    return out.tobytes()


def write_fvecs(path, X):
    """Write an ``(n, d)`` array as ``.fvecs`` (float32; non-finite values are refused)."""
    _write_xvecs(path, X, "fvecs")


def fvecs_bytes(X):
    """The ``.fvecs`` records of the rows of an ``(n, d)`` array (the bytes
    :func:`write_fvecs` writes), for a file written a part at a time: appended one after
    another they make one ``.fvecs`` file (``streamk index export`` writes so, page by page)."""
    what = "fvecs writer"
    X = _as_2d(X, what)
    with np.errstate(over="ignore"):
        V = X.astype(_XVECS_DTYPES["fvecs"])
    if not np.isfinite(V).all():
        raise DescriptorFileError(f"{what}: NaN, infinite or float32-overflowing values cannot be stored")
    return _xvecs_records(V)


def write_bvecs(path, X):
    """Write an ``(n, d)`` array of integers in [0, 255] as ``.bvecs``."""
    _write_xvecs(path, X, "bvecs")


def write_ivecs(path, X):
    """Write an ``(n, d)`` array of int32-range integers as ``.ivecs``."""
    _write_xvecs(path, X, "ivecs")


def write_siftgeo(path, descriptors, geometry=None):
    """Write ``(n, 128)`` descriptors (integers in [0, 255]) and ``(n, 9)`` geometry as ``.siftgeo``.

    geometry None writes zeros. Use :func:`keypoints_to_siftgeo` to make the
    geometry from :class:`streamk.features.Features` keypoints.
    """
    D = _as_2d(descriptors, "siftgeo writer (descriptors)")
    if D.shape[1] != SIFTGEO_DIM and D.shape[0] > 0 or D.shape[0] == 0 and D.shape[1] not in (0, SIFTGEO_DIM):
        raise DimensionError(f"siftgeo stores {SIFTGEO_DIM}-D descriptors, got shape {D.shape}")
    D = _as_integers(D, 0, 255, np.uint8, "siftgeo writer (descriptors)")
    n = D.shape[0]
    if geometry is None:
        G = np.zeros((n, 9), "<f4")
    else:
        G = _as_2d(geometry, "siftgeo writer (geometry)")
        if G.shape != (n, 9):
            raise DimensionError(f"siftgeo geometry must have shape ({n}, 9), got {G.shape}")
        with np.errstate(over="ignore"):
            G = G.astype("<f4")
        if not np.isfinite(G).all():
            raise DescriptorFileError("siftgeo writer: geometry holds NaN, infinite or "
                                      "float32-overflowing values")
    out = np.empty((n, SIFTGEO_RECORD_BYTES), np.uint8)
    if n:
        out[:, :36] = np.ascontiguousarray(G).view(np.uint8).reshape(n, 36)
        out[:, 36:40] = np.full(n, SIFTGEO_DIM, "<i4").view(np.uint8).reshape(n, 4)
        out[:, 40:] = D.reshape(n, SIFTGEO_DIM)
    atomic_write(path, lambda fh: fh.write(out.tobytes()), "the descriptor file")


def write_npy(path, X):
    """Write a 2-D numeric array as ``.npy`` (no pickle)."""
    X = _as_2d(X, "npy writer")
    if X.dtype.kind == "f" and not np.isfinite(X).all():
        raise DescriptorFileError("npy writer: NaN or infinite values cannot be stored")
    atomic_write(path, lambda fh: np.save(fh, np.ascontiguousarray(X), allow_pickle=False), "the descriptor file")


# --------------------------------------------------------------------------- by extension
def _suffix(path):
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise DescriptorFileError(f"{path}: unknown descriptor file type {suffix!r}; "
                                  f"expected one of {', '.join(FORMATS)}")
    return suffix


def read_descriptors(path, **options):
    """Read any supported file by its extension: ``(descriptors, geometry or None)``.

    Geometry is only stored by ``.siftgeo``. ``options`` go to the reader
    (count, dim, mmap as it accepts them).
    """
    suffix = _suffix(path)
    if suffix == ".siftgeo":
        geometry, X = read_siftgeo(path, **options)
        return X, geometry
    reader = {".fvecs": read_fvecs, ".bvecs": read_bvecs, ".ivecs": read_ivecs, ".npy": read_npy}[suffix]
    return reader(path, **options), None


def write_descriptors(path, descriptors, geometry=None):
    """Write descriptors (and, for ``.siftgeo``, geometry) in the format named by the extension."""
    suffix = _suffix(path)
    if suffix == ".siftgeo":
        return write_siftgeo(path, descriptors, geometry)
    if geometry is not None:
        raise DescriptorFileError(f"{path}: {suffix} files cannot store keypoint geometry")
    writer = {".fvecs": write_fvecs, ".bvecs": write_bvecs, ".ivecs": write_ivecs, ".npy": write_npy}[suffix]
    return writer(path, descriptors)


# --------------------------------------------------------------------------- geometry
def keypoints_to_siftgeo(keypoints):
    """streamk keypoints ``(n, 6)`` -> siftgeo geometry ``(n, 9)`` float32.

    scale = sqrt(a11 * a22) (the square root of the ellipse's area over pi),
    angle = theta, the ``mi`` matrix = A / scale (determinant 1), cornerness 0.
    """
    K = np.asarray(keypoints, dtype=np.float64)
    if K.ndim != 2 or K.shape[1] != 6:
        raise DimensionError(f"keypoints must have shape (n, 6), got {K.shape}")
    x, y, a11, a21, a22, theta = K.T
    scale = np.sqrt(np.abs(a11 * a22))
    safe = np.where(scale > 0, scale, 1.0)
    G = np.zeros((len(K), 9), np.float64)
    G[:, 0], G[:, 1], G[:, 2], G[:, 3] = x, y, scale, theta
    G[:, 4], G[:, 5], G[:, 6], G[:, 7] = a11 / safe, 0.0, a21 / safe, a22 / safe
    return G.astype(np.float32)


def siftgeo_to_keypoints(geometry):
    """siftgeo geometry ``(n, 9)`` -> streamk keypoints ``(n, 6)`` float32.

    The ellipse ``A = scale * mi`` is brought to the lower-triangular form with a
    positive diagonal (Cholesky factor of ``A A^T``, the same ellipse); a
    degenerate or all-zero ``mi`` gives the circle of radius ``scale``.
    """
    G = np.asarray(geometry, dtype=np.float64)
    if G.ndim != 2 or G.shape[1] != 9:
        raise DimensionError(f"siftgeo geometry must have shape (n, 9), got {G.shape}")
    x, y, scale, angle, m11, m12, m21, m22, _ = G.T
    scale = np.abs(scale)
    degenerate = ~(np.abs(m11 * m22 - m12 * m21) > 1e-12)
    m11, m12, m21, m22 = (np.where(degenerate, d, m) for m, d in ((m11, 1.0), (m12, 0.0), (m21, 0.0), (m22, 1.0)))
    # M = A A^T with A = scale * mi
    s2 = scale * scale
    M11 = s2 * (m11 * m11 + m12 * m12)
    M21 = s2 * (m21 * m11 + m22 * m12)
    M22 = s2 * (m21 * m21 + m22 * m22)
    l11 = np.sqrt(M11)
    l21 = np.divide(M21, l11, out=np.zeros_like(M21), where=l11 > 0)
    l22 = np.sqrt(np.maximum(M22 - l21 * l21, 0.0))
    K = np.stack([x, y, l11, l21, l22, angle], axis=1)
    return K.astype(np.float32)

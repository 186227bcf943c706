"""What is written for one image, computed before any transaction: its unit vector,
content key (de-duplication), JSON record and display extras; the checks of a
user's vectors and boxes; the result of one item of a batch.

De-duplication. Each image has a content key: sha256 of the image file's bytes
(plus the box, if one is given), of the descriptor set (float32, with its
shape), or of the L2-normalised float32 vector, each tagged with its kind.
"""

import hashlib
import io
import json
import os
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from ..checks import check_box
from ..errors import ConfigError, DimensionError, NonFiniteError, StreamkError, UnknownIdError, ZeroVectorError
from .store import id_key


class AddResult(NamedTuple):
    """One item of ``add_many``: status is "added", "exists" (same id, same content:
    nothing written) or "error" (``error`` holds the exception)."""
    id: object
    status: str
    error: Exception | None = None


class EncodedImage(NamedTuple):
    """One image ready to be written: everything computed, nothing stored yet."""

    key: bytes  # validated id as bytes
    vector: np.ndarray  # (D,) float32 unit norm
    content: bytes  # 32-byte content key
    record: dict  # JSON metadata of the image
    extras: bytes | None  # .npz bytes (keypoints, weights) or None
    geometry: bytes | None = None  # local-geometry record (streamk.verification), or None
    thumbnail: bytes | None = None  # a small JPEG of the image for display (streamk.server), or None
    metadata: dict | None = None  # the image's metadata (streamk.index.metadata), or None


def npz_bytes(**arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def unit_vector(v: "np.typing.ArrayLike") -> "np.typing.NDArray[np.float32]":
    """The encoder's output as a unit float32 vector, or a named error."""
    v = np.asarray(v, np.float32)
    n = float(np.linalg.norm(v))
    if not np.isfinite(v).all():
        raise NonFiniteError("the encoded vector is not finite")
    if not n > 0:
        raise ZeroVectorError("the encoder gave a zero vector (no usable descriptors)")
    return (v / n).astype(np.float32)


def checked_vector(vector, dim, what="vector"):
    """A user's image vector as a unit float32 vector of dimension ``dim``, or a named error.
    The one check of a vector given to add and to search: numbers too large for a float
    (a 400-digit integer) are NonFiniteError; the norm is taken after scaling by the
    largest |x|, so [1e300] * D is a unit vector, not zeros; the result is checked finite
    and non-zero after its conversion to float32 (a unit vector stays finite in float16)."""
    if isinstance(vector, (str, bytes, os.PathLike)):
        raise ConfigError(f"{what}: takes an array; pass image files as image_path=")
    try:
        v = np.asarray(vector, dtype=np.float64)
    except OverflowError as exc:
        raise NonFiniteError(f"{what} holds a number too large for a float ({exc})") from None
    except (TypeError, ValueError) as exc:
        raise DimensionError(f"{what}: not a numeric array ({exc})") from exc
    if v.ndim != 1 or v.shape[0] != dim:
        raise DimensionError(f"{what}: expected shape ({dim},), got {v.shape}")
    if not np.isfinite(v).all():
        raise NonFiniteError(f"{what} contains NaN or infinite values")
    largest = float(np.abs(v).max()) if v.size else 0.0
    if not largest > 0:
        raise ZeroVectorError(f"{what} has zero norm")
    v = v / largest  # no overflow (or underflow to 0) in the norm below
    out = (v / np.linalg.norm(v)).astype(np.float32)
    if not (np.isfinite(out).all() and out.any()):  # pragma: no cover - |out| max >= 1/sqrt(dim)
        raise NonFiniteError(f"{what} is not finite once stored as float32")
    return out


def image_content_key(sha256_hex, box=None):
    """Content key of an image file: its bytes' sha256 and the box (de-duplication)."""
    return hashlib.sha256(b"image\0" + bytes.fromhex(sha256_hex) + json.dumps(box).encode()).digest()


#: the kinds of stored image described from pixels with the index's extractor (whose
#: parameters the first one pins): a file, an image held in memory, a server upload
PIXEL_KINDS = ("image_path", "image", "upload")


def encoded_image_file(image_id, path, sha256_hex, vector, keypoints, weights, image_size, box=None, geometry=None,
                       metadata=None):
    """The record ``add(image_path=...)`` writes for an image file whose bytes have this
    sha256, encoded to ``vector`` (ingestion workers build the same record); ``metadata``:
    its metadata (a dict: :func:`streamk.features.file_metadata` and the user's fields).
    path None: an image held in memory (kind "image", no source file)."""
    source = None if path is None else os.path.abspath(os.fspath(path))
    record = {"kind": "image_path" if path is not None else "image", "source": source, "box": box,
              "n_descriptors": int(len(keypoints)), "sha256": sha256_hex, "image_size": list(image_size)}
    extras = npz_bytes(keypoints=keypoints, weights=np.asarray(weights, np.float32))
    return EncodedImage(id_key(image_id), unit_vector(vector), image_content_key(sha256_hex, box), record,
                        extras, geometry, metadata=metadata)


def normalise_box(box):
    """None, or the box as a list of 4 floats checked by streamk's one box rule
    (:func:`streamk.checks.check_box`: finite, x1 < x2 and y1 < y2), or ConfigError."""
    return None if box is None else list(check_box(box))


def one_source(image_path, descriptors, vector):
    given = [name for name, v in (("image_path", image_path), ("descriptors", descriptors),
                                  ("vector", vector)) if v is not None]
    if len(given) != 1:
        raise ConfigError(f"give exactly one of image_path, descriptors, vector (got {given or 'none'})")
    return given[0]


ITEM_FIELDS = ("image_path", "descriptors", "vector", "box", "metadata")  # besides "id"


def add_items(items, encode, write_encoded, batch_size):
    """``add_many`` of every index: items (dicts with "id" and one of "image_path",
    "descriptors", "vector", and optionally "box" and "metadata"; or (id, source-dict)
    pairs) encoded one by one with ``encode(image_id, **fields)`` (outside any transaction)
    and written ``batch_size`` at a time with ``write_encoded``. One :class:`AddResult` per
    item, in order; a bad item is its own error and does not stop the others."""
    batch_size = int(batch_size)
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    results = []
    batch = []  # (position, image_id, EncodedImage)

    def flush():
        if not batch:
            return
        outcomes = write_encoded([enc for _, _, enc in batch])
        for (pos, image_id, _), out in zip(batch, outcomes):
            results[pos] = AddResult(image_id, "error", out) if isinstance(out, Exception) else AddResult(image_id, out)
        batch.clear()

    for item in items:
        pos = len(results)
        image_id = None
        try:
            if isinstance(item, Mapping):
                fields = dict(item)
                image_id = fields.pop("id")
            else:
                image_id, fields = item
                fields = dict(fields)
            unknown = set(fields) - set(ITEM_FIELDS)
            if unknown:
                raise ConfigError(f"unknown item field(s) {sorted(unknown)}; an item has \"id\" and "
                                  f"{', '.join(ITEM_FIELDS)}")
            enc = encode(image_id, **fields)
        except (StreamkError, KeyError, TypeError, ValueError) as exc:
            if not isinstance(exc, StreamkError):
                exc = ConfigError(f"bad item {pos}: {exc!r}")
            results.append(AddResult(image_id, "error", exc))
            continue
        results.append(None)
        batch.append((pos, image_id, enc))
        if len(batch) >= batch_size:
            flush()
    flush()
    return results


def not_there_to_update(image_id):
    """The UnknownIdError of an update of an id the index does not hold (every kind)."""
    return UnknownIdError(f"no image {image_id!r} in the index (use add())")


def encoded_vector(image_id, vector, dim, metadata=None):
    """The EncodedImage of an image given as a vector (``add(vector=...)``)."""
    v = checked_vector(vector, dim)
    sha = hashlib.sha256(v.tobytes()).hexdigest()
    content = hashlib.sha256(b"vector\0" + bytes.fromhex(sha)).digest()
    return EncodedImage(id_key(image_id), v, content,
                        {"kind": "vector", "source": None, "box": None, "n_descriptors": None, "sha256": sha}, None,
                        metadata=metadata)


__all__ = ["ITEM_FIELDS", "PIXEL_KINDS", "AddResult", "EncodedImage", "add_items", "checked_vector",
           "encoded_image_file", "encoded_vector", "image_content_key", "normalise_box", "not_there_to_update",
           "npz_bytes", "one_source", "unit_vector"]

"""The keys of the index's sub-databases: image ids (checked), rows, blocks and change
counters (8-byte big-endian, sorted by number), and (epoch, row) pairs of the codes.

Kept apart from :mod:`streamk.index.store` (which re-exports them) so that the modules
of stored values (vector blocks, code blocks, metadata) use them without importing the
store that calls them.
"""

import struct
import unicodedata

import numpy as np

from ..errors import InvalidIdError

MAX_ID_CHARS = 200
MAX_KEY_BYTES = 511  # LMDB's default maximum key size


def validate_id(image_id):
    """Return ``image_id`` if it is a valid image id, else raise :class:`InvalidIdError`."""
    if not isinstance(image_id, str):
        raise InvalidIdError(f"an image id must be a str, got {type(image_id).__name__}")
    if not 1 <= len(image_id) <= MAX_ID_CHARS:
        raise InvalidIdError(f"an image id must have 1..{MAX_ID_CHARS} characters, got {len(image_id)}")
    if image_id in (".", ".."):
        raise InvalidIdError(f"{image_id!r} is not a valid image id")
    if "/" in image_id or "\\" in image_id:
        raise InvalidIdError(f"an image id may not contain '/' or '\\': {image_id!r}")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in image_id):
        raise InvalidIdError(f"an image id may not contain control characters: {image_id!r}")
    try:
        key = image_id.encode("utf-8")
    except UnicodeEncodeError as exc:  # pragma: no cover - surrogates caught above
        raise InvalidIdError(f"an image id must be valid text: {image_id!r}") from exc
    if len(key) > MAX_KEY_BYTES:
        raise InvalidIdError(f"an image id may take at most {MAX_KEY_BYTES} bytes in UTF-8, "
                             f"got {len(key)}")
    return image_id


def normal_form(text):
    """``text`` in Unicode's composed form (NFC), the form of every new id: ``café.jpg``
    named by macOS (decomposed, NFD: ``e`` + U+0301) and the same name typed (composed,
    NFC: U+00E9) are one id. The one normalisation of ids (:func:`normal_id`, and
    ingestion's ids of file names before they are shortened to the store's length)."""
    return unicodedata.normalize("NFC", text)


def normal_id(image_id):
    """``image_id`` checked (:func:`validate_id`) and in its :func:`normal_form`: what every
    new id is stored as (``add``, ``update``, ingestion, the server, a shard's route)."""
    return validate_id(normal_form(validate_id(image_id)))


def id_key(image_id):
    """The key of a new id (:func:`normal_id`), as stored."""
    return normal_id(image_id).encode("utf-8")


def lookup_keys(image_id):
    """The keys a lookup of ``image_id`` (an id a user gave) tries, in order: the id as
    given, then its NFC and NFD forms (one key when they are the same, as for any ASCII id):
    an index written before ids were normalised holds them as their files named them."""
    validate_id(image_id)
    forms = (image_id, normal_form(image_id), unicodedata.normalize("NFD", image_id))
    return list(dict.fromkeys(f.encode("utf-8") for f in forms if _valid(f)))


def _valid(image_id):
    try:
        validate_id(image_id)
    except InvalidIdError:
        return False
    return True


_U64 = struct.Struct(">Q")
_EPOCH_ROW = struct.Struct(">IQ")


def seq_key(seq):
    return _U64.pack(seq)


def seq_from_key(key):
    return _U64.unpack(bytes(key))[0]


row_key = seq_key  # rows, blocks and seqs are all 8-byte big-endian keys (sorted by number)
row_from_key = seq_from_key


def epoch_key(epoch, n):
    """Key of row (or block) ``n`` of the codes of ``epoch``: sorted by epoch, then by n."""
    return _EPOCH_ROW.pack(epoch, n)


def epoch_key_split(key):
    return _EPOCH_ROW.unpack(bytes(key))


_EPOCH_ROW_DTYPE = np.dtype([("epoch", ">u4"), ("row", ">u8")])


def rows_of_epoch_keys(keys):
    """int64 rows of a list of (epoch, row) keys."""
    return np.frombuffer(b"".join(keys), dtype=_EPOCH_ROW_DTYPE)["row"].astype(np.int64)


def rows_from_keys(keys):
    """int64 rows of a list of 8-byte big-endian keys, without a Python step per key's bytes."""
    return np.frombuffer(b"".join(keys), dtype=">u8").astype(np.int64)


__all__ = ["MAX_ID_CHARS", "MAX_KEY_BYTES", "epoch_key", "epoch_key_split", "id_key", "lookup_keys", "normal_form",
           "normal_id", "row_from_key", "row_key", "rows_from_keys", "rows_of_epoch_keys", "seq_from_key", "seq_key",
           "validate_id"]

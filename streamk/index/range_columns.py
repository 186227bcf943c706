"""Sorted columns of indexed fields: what a range filter reads, in proportion to the rows it
selects however many distinct values the range spans.

The posting lists (:mod:`streamk.index.metadata`) answer equality with one bulk read per
value, but a range over many distinct values (``{"mtime": {"gte": a, "lt": b}}`` over
10,000 file times) would take one cursor step per value. Beside them, each indexed field
keeps, per value type (numbers, strings), a column: every (value, row) pair of the field
as a 24-byte record ``pad16(value[:16]) + row`` (the order-preserving encoding of the
value without its type tag, cut or padded with zeros to 16 bytes; the row 8-byte
big-endian), sorted bytewise, cut into chunks of at most :data:`CHUNK_MAX` records stored
in the ``columns`` sub-database under ``field + NUL + tag + first record``.

A range [lo, hi] reads:

- the chunks from the one holding ``pad16(lo)`` to the first whose first record reaches
  ``pad16(hi)``, one cursor step each, then keeping (numpy, once) the records whose
  prefix lies strictly between ``pad16(lo)`` and ``pad16(hi)``. Cutting and padding keep
  order (v <= w gives pad16(v) <= pad16(w)), so such a value is strictly inside the range;
- the values whose prefix equals ``pad16(lo)`` or ``pad16(hi)`` exactly, from the posting
  lists, checked against the bounds in full: a number is one value (its encoding is 8
  bytes); a string longer than 16 bytes shares its group with the strings of the same
  first 16 bytes (an EXIF date "YYYY-MM-DD HH:MM:SS": those of the same minute).

An insert or delete rewrites one chunk (at most 1.5 KB, inside its B-tree page); a chunk
past CHUNK_MAX records is split in two. Building a field's column (when it is first indexed, or rebuilt by
``streamk index verify --repair``) sorts all its records once and writes them in chunks of
:data:`CHUNK_BUILD` records.
"""

import numpy as np

from .keys import row_key

PREFIX_BYTES = 16  # of the encoded value, in each record
RECORD_BYTES = PREFIX_BYTES + 8
# A chunk stays inside its B-tree leaf page: LMDB moves a value past ~2 KB (4 KB pages) to
# overflow pages of its own, which each rewrite frees and allocates again (at 1M images
# 24 KB chunks made ingestion 40 % slower than 1.5 KB ones)
CHUNK_MAX = 64  # records in a chunk (1.5 KB, with a key of at most 126 bytes) before it is split in two
CHUNK_BUILD = 48  # records per chunk when a column is built whole: room to grow before a split
RANGE_TAGS = (b"n", b"s")  # value types a range applies to (numbers, strings)
_PAD = b"\0" * PREFIX_BYTES


def value_prefix(value):
    """The 16-byte prefix of a tag-less encoded value (cut, or padded with zeros)."""
    return (value[:PREFIX_BYTES] + _PAD)[:PREFIX_BYTES]


def column_record(enc, row):
    """(type tag, 24-byte record) of a row's encoded value (tag + value)."""
    return enc[:1], value_prefix(enc[1:]) + row_key(row)


def _triples(raw):
    """A chunk's records as an (n, 3) array of big-endian uint64 (prefix high, low, row)."""
    return np.frombuffer(raw, dtype=">u8").reshape(-1, 3)


def _key_words(record):
    return np.frombuffer(record[:PREFIX_BYTES], dtype=">u8")


def _in_column(key, kp):
    key = bytes(key)
    return key.startswith(kp) and len(key) == len(kp) + RECORD_BYTES


def _chunk_at(cur, kp, record):
    """Put the cursor on the chunk where ``record`` belongs (the last whose first record is
    <= it, else the first of the column); returns its key, or None if the column is empty."""
    target = kp + record
    found = cur.set_range(target)
    if found and bytes(cur.key()) == target:
        return target
    if (cur.prev() if found else cur.last()) and _in_column(cur.key(), kp):
        return bytes(cur.key())
    if cur.set_range(kp) and _in_column(cur.key(), kp):  # none before it: the column's first chunk
        return bytes(cur.key())
    return None


def _position(raw, record):
    """(index of the first record >= ``record``, whether it equals it) in a sorted chunk
    (bytes): a binary search over its 24-byte records."""
    lo, hi = 0, len(raw) // RECORD_BYTES
    while lo < hi:
        mid = (lo + hi) // 2
        if raw[mid * RECORD_BYTES:(mid + 1) * RECORD_BYTES] < record:
            lo = mid + 1
        else:
            hi = mid
    return lo, raw[lo * RECORD_BYTES:(lo + 1) * RECORD_BYTES] == record


def _put_chunk(txn, db, kp, old_key, raw):
    """Store a chunk's records (bytes, sorted) in place of the chunk under ``old_key``:
    under the same key while its first record stays, else re-keyed by it; split in halves
    past CHUNK_MAX; gone when empty."""
    n = len(raw) // RECORD_BYTES
    if n and n <= CHUNK_MAX and kp + raw[:RECORD_BYTES] == old_key:
        txn.put(old_key, raw, db=db)
        return
    txn.delete(old_key, db=db)
    parts = [raw] if n <= CHUNK_MAX else [raw[:n // 2 * RECORD_BYTES], raw[n // 2 * RECORD_BYTES:]]
    for part in parts:
        if part:
            txn.put(kp + part[:RECORD_BYTES], part, db=db)


def _locate(txn, db, kp, record):
    """(key, bytes, position of ``record``, whether it is there) of the chunk of the column
    ``kp`` where ``record`` belongs, or None when the column is empty."""
    with txn.cursor(db=db) as cur:
        key = _chunk_at(cur, kp, record)
        if key is None:
            return None
        raw = bytes(cur.value())
    return (key, raw, *_position(raw, record))


def insert(txn, db, kp, record):
    """Add one record to the column ``kp`` (field + NUL + tag); a record already there is kept once."""
    at = _locate(txn, db, kp, record)
    if at is None:
        txn.put(kp + record, record, db=db)
        return
    key, raw, i, found = at
    if not found:
        _put_chunk(txn, db, kp, key, raw[:i * RECORD_BYTES] + record + raw[i * RECORD_BYTES:])


def delete(txn, db, kp, record):
    """Remove one record from the column ``kp``; returns whether it was there."""
    at = _locate(txn, db, kp, record)
    if at is None or not at[3]:
        return False
    key, raw, i, _ = at
    _put_chunk(txn, db, kp, key, raw[:i * RECORD_BYTES] + raw[(i + 1) * RECORD_BYTES:])
    return True


def drop(txn, db, kp):
    """Remove the whole column ``kp``."""
    with txn.cursor(db=db) as cur:
        keys = []
        if cur.set_range(kp):
            for k in cur.iternext(keys=True, values=False):
                if not bytes(k).startswith(kp):
                    break
                keys.append(bytes(k))
    for k in keys:
        txn.delete(k, db=db)


def build(txn, db, kp, records):
    """Write the column ``kp`` from scratch from an iterable of 24-byte records (any order;
    a repeated record is kept once), replacing what was there."""
    drop(txn, db, kp)
    raw = b"".join(records)
    if not raw:
        return 0
    t = _triples(raw)
    order = np.lexsort((t[:, 2], t[:, 1], t[:, 0]))
    t = t[order]
    keep = np.ones(t.shape[0], bool)
    keep[1:] = np.any(t[1:] != t[:-1], axis=1)
    raw = t[keep].tobytes()
    step = CHUNK_BUILD * RECORD_BYTES
    for start in range(0, len(raw), step):
        part = raw[start:start + step]
        txn.put(kp + part[:RECORD_BYTES], part, db=db)
    return int(keep.sum())


def interior_rows(cur, kp, lo_prefix, hi_prefix):
    """The rows whose value prefix lies strictly between ``lo_prefix`` and ``hi_prefix``
    (16 bytes each; None: unbounded), read chunk by chunk from the first that may hold one
    to the first whose first record reaches ``hi_prefix``."""
    if lo_prefix is None:
        if not (cur.set_range(kp) and _in_column(cur.key(), kp)):
            return np.zeros(0, np.int64)
    elif _chunk_at(cur, kp, lo_prefix + b"\xff" * 8) is None:
        return np.zeros(0, np.int64)
    chunks = []
    while True:  # whole chunks, one cursor step each; the bounds are applied once, to all of them
        key = bytes(cur.key())
        if not _in_column(key, kp):
            break
        if hi_prefix is not None and key[len(kp):len(kp) + PREFIX_BYTES] >= hi_prefix:
            break
        chunks.append(bytes(cur.value()))
        if not cur.next():
            break
    if not chunks:
        return np.zeros(0, np.int64)
    t = _triples(b"".join(chunks))
    A, B = t[:, 0], t[:, 1]
    keep = np.ones(t.shape[0], bool)
    if lo_prefix is not None:
        la, lb = (int(x) for x in _key_words(lo_prefix))
        keep &= (A > la) | ((A == la) & (B > lb))
    if hi_prefix is not None:
        ha, hb = (int(x) for x in _key_words(hi_prefix))
        keep &= (A < ha) | ((A == ha) & (B < hb))
    return t[keep, 2].astype(np.int64)


def records_of(cur, kp):
    """Every (record bytes) of the column ``kp`` with the problems found reading it: for
    ``streamk index verify``. Returns (records list, problems list)."""
    out, problems = [], []
    last = None
    if cur.set_range(kp):
        for k, v in cur.iternext():
            k, v = bytes(k), bytes(v)
            if not k.startswith(kp):
                break
            if len(k) != len(kp) + RECORD_BYTES or not v or len(v) % RECORD_BYTES \
                    or v[:RECORD_BYTES] != k[len(kp):]:
                problems.append(f"a chunk of the column {kp!r} is malformed")
                continue
            recs = [v[i:i + RECORD_BYTES] for i in range(0, len(v), RECORD_BYTES)]
            if any(x >= y for x, y in zip(recs, recs[1:])) or last is not None and recs[0] <= last:
                problems.append(f"the column {kp!r} is out of order")
            last = recs[-1]
            out += recs
    return out, problems


__all__ = ["CHUNK_BUILD", "CHUNK_MAX", "PREFIX_BYTES", "RANGE_TAGS", "RECORD_BYTES", "build", "column_record",
           "delete", "drop", "insert", "interior_rows", "records_of", "value_prefix"]

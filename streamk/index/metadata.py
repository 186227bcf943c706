"""Each image's metadata (a JSON object), indexed fields, and search filters made into a
bitmap of the rows they allow.

Metadata. Any JSON object of at most :data:`MAX_METADATA_BYTES` (64 KB) once encoded:
string keys; strings, numbers, booleans, null, lists and objects as values (no NaN or
infinity). It lives under the image's row in the ``metadata`` sub-database, written and
removed in the image's own transaction; an update (new content, a new row) keeps it.
Ingestion stores ``path``, ``folder``, ``name``, ``size`` (bytes), ``mtime`` (unix time)
and, where the file has one, ``date`` (its EXIF date, ``"YYYY-MM-DD HH:MM:SS"``).

Indexed fields. A field named in :meth:`StreamingIndex.index_field` (or
``indexed_fields=`` at create) has a posting list per value in the ``postings``
sub-database (dupsort): key = field + NUL + encoded value, duplicates = the rows holding
it (8-byte big-endian, sorted). Values are encoded so that byte order is value order:
numbers (ints and floats alike, as float64: 1 == 1.0) ``b"n"`` + 8 bytes, strings
``b"s"`` + UTF-8 (at most :data:`MAX_INDEXED_VALUE_BYTES`), booleans ``b"b"`` + 1 byte.
A list value is indexed element by element (a filter matches when any element does);
null, objects and lists inside lists are not indexed. Each indexed value costs one
posting entry per image (~20 bytes) and, for numbers and strings, one column record (24 bytes).

Filters (``search(..., where=FILTER)``): a dict of up to :data:`MAX_FILTER_FIELDS` fields,
ANDed::

    {"folder": "paris"}                           equality (string, number or boolean)
    {"folder": {"in": ["paris", "oxford"]}}        one of up to MAX_IN_VALUES values
    {"mtime": {"gte": 1.7e9, "lt": 1.8e9}}         a range: gt, gte, lt, lte (numbers, or strings)

A filter uses indexed fields only: equality and ``in`` read one posting list per value
(one bulk read each); a range reads the field's sorted column
(:mod:`streamk.index.range_columns`: chunks of (value prefix, row) records) and the
posting lists of its two end values, so building the rows costs what each condition
selects, however many distinct values a range spans, never a pass over every image's
metadata.
A filter on a field that is not indexed is a :class:`~streamk.errors.FilterError` that
says how to index it. The rows become a bitmap (one bit per row, uint64 words) that the
scans (exact, PQ, IVF-PQ) test before scoring an entry: a filtered search returns k
results whenever k images match (an IVF search visits more lists until it has seen
enough allowed rows).
"""

import json
import math
import struct
from typing import NamedTuple

import numpy as np

from ..errors import FilterError, MetadataError
from ..quantization import row_bitmap
from . import range_columns
from .keys import row_from_key, row_key

MAX_METADATA_BYTES = 64 * 1024  # one image's metadata, JSON-encoded (UTF-8)
MAX_FIELD_BYTES = 100  # a field name in UTF-8 (indexed fields: it is part of an LMDB key)
MAX_INDEXED_VALUE_BYTES = 400  # a string value of an indexed field, in UTF-8 (LMDB keys: 511 bytes)
MAX_INDEXED_FIELDS = 32
MAX_FILTER_FIELDS = 16
MAX_IN_VALUES = 1024
RANGE_OPS = ("gt", "gte", "lt", "lte")
GRAMMAR = ('a filter is a JSON object of up to 16 indexed fields, all of which must match: '
           '{"field": value} (equality; a string, number or boolean), '
           '{"field": {"in": [v1, v2, ...]}} (any of up to 1024 values), '
           '{"field": {"gte": a, "lt": b}} (a range with gt, gte, lt, lte; numbers or strings)')

_F64 = struct.Struct(">d")
_U64 = struct.Struct(">Q")
_SIGN = 1 << 63
_TAGS = {"b": b"b", "n": b"n", "s": b"s"}


# ---------------------------------------------------------------- metadata values
def _numpy_json(value):
    """numpy's scalars and 1-D arrays as the JSON numbers, booleans and lists they hold
    (``{"stars": np.int64(3)}`` from a DataFrame); anything else is not JSON."""
    if isinstance(value, np.generic) and not isinstance(value, (np.datetime64, np.timedelta64, np.void)):
        return value.item()
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "biuf":
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def encode_metadata(metadata):
    """The stored bytes of one image's metadata (a dict), or MetadataError."""
    if not isinstance(metadata, dict):
        raise MetadataError(f"metadata must be a JSON object (a dict), got {type(metadata).__name__}")
    try:
        raw = json.dumps(metadata, ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                         default=_numpy_json).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise MetadataError(f"metadata must hold only JSON values (strings, numbers, booleans, null, lists, "
                            f"objects; no NaN): {exc}") from exc
    except RecursionError as exc:
        raise MetadataError("metadata is nested too deeply") from exc
    if len(raw) > MAX_METADATA_BYTES:
        raise MetadataError(f"metadata takes {len(raw):,} bytes as JSON; at most {MAX_METADATA_BYTES:,} per image")
    for key in metadata:
        if not isinstance(key, str):  # json.dumps turns 1 into "1": refuse rather than change it
            raise MetadataError(f"metadata keys must be strings, got {key!r}")
    return raw


def decode_metadata(raw):
    return {} if raw is None else json.loads(bytes(raw))


def check_field(name, what="field"):
    """A field name: a non-empty str of at most MAX_FIELD_BYTES in UTF-8, without NUL."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise FilterError(f"a {what} name must be a non-empty string without NUL characters, got {name!r}; "
                          + GRAMMAR)
    try:
        n = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise FilterError(f"a {what} name must be valid text: {name!r}") from None
    if n > MAX_FIELD_BYTES:
        raise FilterError(f"a {what} name may take at most {MAX_FIELD_BYTES} bytes in UTF-8, got {n}")
    return name


def _is_number(v):
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def encode_value(v):
    """Order-preserving bytes (tag + value) of a scalar, or None when it cannot be indexed
    (null, a list, an object, NaN, a string too long)."""
    if isinstance(v, (bool, np.bool_)):
        return b"b" + (b"\x01" if v else b"\x00")
    if _is_number(v):
        x = float(v)
        if not math.isfinite(x):
            return None
        bits = _U64.unpack(_F64.pack(x + 0.0))[0]  # + 0.0: -0.0 is 0.0
        bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits & _SIGN else bits | _SIGN
        return b"n" + _U64.pack(bits)
    if isinstance(v, str):
        raw = v.encode("utf-8", "surrogatepass")
        return b"s" + raw if len(raw) <= MAX_INDEXED_VALUE_BYTES else None
    return None


def decode_value(enc):
    """The value of :func:`encode_value`'s bytes (a float for every number)."""
    enc = bytes(enc)
    tag, body = enc[:1], enc[1:]
    if tag == b"b":
        return body == b"\x01"
    if tag == b"n":
        bits = _U64.unpack(body)[0]
        bits = bits ^ _SIGN if bits & _SIGN else bits ^ 0xFFFFFFFFFFFFFFFF
        return _F64.unpack(_U64.pack(bits))[0]
    return body.decode("utf-8", "surrogatepass")


MAX_FIELD_VALUES = 100  # values listed of one field (field_values), each one LMDB seek


def values_limit(limit):
    """``limit`` of :func:`field_values`, checked: an int in 1..MAX_FIELD_VALUES."""
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or not 1 <= limit <= MAX_FIELD_VALUES:
        raise FilterError(f"limit must be an integer in 1..{MAX_FIELD_VALUES}, got {limit!r}")
    return int(limit)


def field_values(txn, store, field, limit=10):
    """Up to ``limit`` distinct values of an indexed field, in value order (booleans,
    numbers, strings), and whether there are more: one seek per value (the posting lists'
    keys), never a pass over the images. FilterError for a field that is not indexed."""
    limit = values_limit(limit)
    fields = indexed_fields(txn, store)
    if field not in fields:
        raise not_indexed(field, fields)
    prefix = posting_prefix(field)
    out = []
    if store.postings_db is None:
        return out, False
    with txn.cursor(db=store.postings_db) as cur:
        found = cur.set_range(prefix)
        while found and bytes(cur.key()).startswith(prefix):
            if len(out) == limit:
                return out, True
            out.append(decode_value(bytes(cur.key())[len(prefix):]))
            found = cur.next_nodup()
    return out, False


def indexed_values(value, field=None):
    """The encoded values under which an image is posted for one field's value (a list is
    posted under each of its scalar elements). A string too long to index raises
    MetadataError when ``field`` is given (writing), else is skipped."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    items = list(value) if isinstance(value, (list, tuple)) else [value]  # as JSON stores them: a list
    out = []
    for v in items:
        enc = encode_value(v)
        if enc is None and field is not None and isinstance(v, str):
            raise MetadataError(f"metadata field {field!r} is indexed, and its value {v[:40]!r}... takes more "
                                f"than {MAX_INDEXED_VALUE_BYTES} bytes: too long to index")
        if enc is not None and enc not in out:
            out.append(enc)
    return out


def posting_prefix(field):
    return field.encode("utf-8") + b"\0"


# ---------------------------------------------------------------- writing (inside a write transaction)
def indexed_fields(txn, store):
    raw = store.get_meta(b"indexed_fields", txn)
    return json.loads(bytes(raw)) if raw is not None else []


def column_fields(txn, store):
    """The indexed fields that have a sorted column for ranges (:mod:`.range_columns`);
    an index written before columns existed has none until ``index_field`` builds them."""
    raw = store.get_meta(b"range_columns", txn)
    return json.loads(bytes(raw)) if raw is not None else []


def _column_records(postings, fields):
    """(column key prefix, record) of the (posting key, row) pairs of ``fields``."""
    ranged = {posting_prefix(f) for f in fields}
    for key, row in postings:
        i = key.index(b"\0") + 1
        if key[:i] in ranged and key[i:i + 1] in range_columns.RANGE_TAGS:
            tag, record = range_columns.column_record(key[i:], row)
            yield key[:i] + tag, record


def _stored_column_records(txn, store, postings):
    """_column_records for the fields of this index that have a column (none without the sub-database)."""
    return _column_records(postings, column_fields(txn, store)) if store.columns_db is not None else ()


def _columns_of(postings, fields):
    """{column key prefix: set of records} of ``fields`` (each type's column, empty ones
    too) that the (posting key, row) pairs call for."""
    out = {posting_prefix(f) + tag: set() for f in fields for tag in range_columns.RANGE_TAGS}
    for kp, record in _column_records(postings, fields):
        out[kp].add(record)
    return out


def expected_columns(txn, store, postings):
    """{column key prefix: set of records} that the columns hold when they agree with the
    (posting key, row) pairs given (``streamk index verify``)."""
    return _columns_of(postings, column_fields(txn, store))


def rebuild_columns(txn, store):
    """Build every range column again from the posting lists (``streamk index verify --repair``)."""
    with txn.cursor(db=store.postings_db) as cur:
        pairs = [(bytes(k), row_from_key(v)) for k, v in cur]
    for kp, records in expected_columns(txn, store, pairs).items():
        range_columns.build(txn, store.columns_db, kp, records)


def _postings(store, fields, metadata, check):
    for field in fields:
        if field in metadata:
            prefix = posting_prefix(field)
            for enc in indexed_values(metadata[field], field if check else None):
                yield prefix + enc


def posting_keys(fields, metadata):
    """The posting-list keys (field + encoded value) under which ``metadata`` (a dict) is
    posted for the indexed ``fields``: what verification expects to find."""
    return list(_postings(None, fields, metadata, False))


def prepare_metadata(txn, store, metadata, fields=None):
    """(JSON bytes, posting keys) of one image's metadata, checked before anything is
    written (MetadataError: not a JSON object, too large, an indexed value too long)."""
    if not metadata:
        return None
    raw = encode_metadata(metadata)
    fields = indexed_fields(txn, store) if fields is None else fields
    return raw, list(_postings(store, fields, metadata, True))


def put_metadata(txn, store, row, prepared):
    """Store prepared metadata (:func:`prepare_metadata`; None: nothing) under ``row``."""
    if prepared is None:
        return
    if store.metadata_db is None:  # pragma: no cover - a write opens the optional sub-databases
        raise MetadataError(f"{store.path}: this index cannot store metadata (opened read-only?)")
    raw, keys = prepared
    rk = row_key(row)
    for key in keys:
        txn.put(key, rk, db=store.postings_db, dupdata=True)
    for kp, record in _stored_column_records(txn, store, ((k, row) for k in keys)):
        range_columns.insert(txn, store.columns_db, kp, record)
    store.put_blob(txn, "metadata", rk, raw)  # sealed with its CRC32C


def delete_metadata(txn, store, row, fields=None):
    """Remove the metadata of ``row`` and its postings; returns the old metadata (dict)."""
    if store.metadata_db is None:
        return {}
    rk = row_key(row)
    raw = store.get_blob(txn, "metadata", rk)
    if raw is None:
        return {}
    old = decode_metadata(raw)
    fields = indexed_fields(txn, store) if fields is None else fields
    keys = list(_postings(store, fields, old, False))
    for key in keys:
        txn.delete(key, rk, db=store.postings_db)
    for kp, record in _stored_column_records(txn, store, ((k, row) for k in keys)):
        range_columns.delete(txn, store.columns_db, kp, record)
    txn.delete(rk, db=store.metadata_db)
    return old


def metadata_of_rows(txn, store, rows):
    """The metadata (dict) of each row; {} for a row without any."""
    db = store.metadata_db
    if db is None or not len(rows):
        return [{} for _ in rows]
    keys = [row_key(int(r)) for r in rows]
    with txn.cursor(db=db) as cur:
        found = {bytes(k): store.unseal_blob("metadata", k, v) for k, v in cur.getmulti(keys)}
    return [decode_metadata(found.get(k)) for k in keys]


def add_indexed_field(txn, store, field):
    """Index ``field``: record it, post every stored image's value and build its sorted
    column (one pass over the metadata: O(N), once, when a field is first indexed).
    A field indexed before columns existed gets its column. Returns False when the field
    already was indexed with its column."""
    check_field(field)
    fields = indexed_fields(txn, store)
    with_column = column_fields(txn, store)
    if field in fields and field in with_column:
        return False
    if field not in fields and len(fields) >= MAX_INDEXED_FIELDS:
        raise FilterError(f"at most {MAX_INDEXED_FIELDS} indexed fields; this index has {fields}")
    pairs = []
    with txn.cursor(db=store.metadata_db) as cur:
        for rk, raw in cur:
            meta = decode_metadata(store.unseal_blob("metadata", rk, raw))
            if field in meta:
                for key in _postings(store, [field], meta, True):
                    if field not in fields:
                        txn.put(key, bytes(rk), db=store.postings_db, dupdata=True)
                    pairs.append((key, row_from_key(rk)))
    for kp, records in _columns_of(pairs, [field]).items():
        range_columns.build(txn, store.columns_db, kp, records)
    if field not in fields:
        txn.put(b"indexed_fields", json.dumps(fields + [field]).encode(), db=store.meta_db)
    txn.put(b"range_columns", json.dumps(with_column + [field]).encode(), db=store.meta_db)
    return True


# ---------------------------------------------------------------- filters
class Clause(NamedTuple):
    """One field's condition: ``values`` (encoded, for equality / in) or a range
    (lo, lo_inclusive, hi, hi_inclusive: encoded bounds, None for open, and the tag)."""
    field: str
    values: tuple = ()
    lo: bytes | None = None
    lo_incl: bool = True
    hi: bytes | None = None
    hi_incl: bool = True
    tag: bytes | None = None


def _scalar(field, v, where):
    if not (isinstance(v, (str, bool, np.bool_)) or _is_number(v)):
        raise FilterError(f"filter on {field!r}: {v!r} ({where}) is not a string, number or boolean; " + GRAMMAR)
    enc = encode_value(v)
    if enc is None:
        raise FilterError(f"filter on {field!r}: {v!r} ({where}) cannot be matched (NaN, infinite, or a string "
                          f"over {MAX_INDEXED_VALUE_BYTES} bytes)")
    return enc


def parse_filter(where):
    """The clauses of a filter (see the module doc), or FilterError saying the grammar.
    None or {}: no filter (returns None)."""
    try:
        return _parse_filter(where)
    except FilterError as exc:
        if GRAMMAR in str(exc):
            raise
        raise FilterError(f"{exc}; {GRAMMAR}") from None


def _parse_filter(where):
    if where is None:
        return None
    if isinstance(where, (str, bytes)):
        try:
            where = json.loads(where)
        except ValueError as exc:
            raise FilterError(f"the filter is not valid JSON ({exc}); " + GRAMMAR) from exc
    if not isinstance(where, dict):
        raise FilterError(f"the filter must be a JSON object, got {type(where).__name__}; " + GRAMMAR)
    if not where:
        return None
    if len(where) > MAX_FILTER_FIELDS:
        raise FilterError(f"the filter names {len(where)} fields; at most {MAX_FILTER_FIELDS}")
    clauses = []
    for field, cond in where.items():
        check_field(field)
        if not isinstance(cond, dict):
            clauses.append(Clause(field, (_scalar(field, cond, "equality"),)))
            continue
        ops = set(cond)
        if not ops or not ops <= {"in", "eq", *RANGE_OPS} or ("in" in ops or "eq" in ops) and len(ops) > 1:
            raise FilterError(f"filter on {field!r}: {json.dumps(cond, default=repr)} is not one of the forms; "
                              + GRAMMAR)
        if "eq" in ops:
            clauses.append(Clause(field, (_scalar(field, cond["eq"], "eq"),)))
        elif "in" in ops:
            vals = cond["in"]
            if isinstance(vals, np.ndarray) and vals.ndim == 1:  # numpy's values, as a list's (each checked)
                vals = vals.tolist()
            if not isinstance(vals, (list, tuple)) or not 1 <= len(vals) <= MAX_IN_VALUES:
                raise FilterError(f"filter on {field!r}: 'in' takes a list of 1..{MAX_IN_VALUES} values; " + GRAMMAR)
            clauses.append(Clause(field, tuple(dict.fromkeys(_scalar(field, v, "in") for v in vals))))
        else:
            if "gt" in ops and "gte" in ops or "lt" in ops and "lte" in ops:
                raise FilterError(f"filter on {field!r}: give one lower bound (gt or gte) and one upper bound "
                                  f"(lt or lte) at most; " + GRAMMAR)
            bounds = {op: _scalar(field, cond[op], op) for op in ops}
            tags = {b[:1] for b in bounds.values()}
            if len(tags) != 1 or tags == {b"b"}:
                raise FilterError(f"filter on {field!r}: a range's bounds must be all numbers or all strings; "
                                  + GRAMMAR)
            lo_op = "gte" if "gte" in ops else "gt" if "gt" in ops else None
            hi_op = "lte" if "lte" in ops else "lt" if "lt" in ops else None
            clauses.append(Clause(field, (), bounds.get(lo_op), lo_op != "gt", bounds.get(hi_op), hi_op != "lt",
                                  tags.pop()))
    return clauses


def _rows_of_keys(cur, keys):
    """Sorted-per-key rows of posting keys, one bulk read per key length."""
    by_len = {}
    for k in keys:
        by_len.setdefault(len(k), []).append(k)
    parts = []
    for n, group in by_len.items():
        packed = cur.getmulti(group, dupdata=True, dupfixed_bytes=8, keyfixed=True)
        if len(packed):
            parts.append(np.frombuffer(packed, dtype=[("k", f"V{n}"), ("r", ">u8")])["r"].astype(np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _in_range(enc, clause):
    return (clause.lo is None or (enc > clause.lo if not clause.lo_incl else enc >= clause.lo)) \
        and (clause.hi is None or (enc < clause.hi if not clause.hi_incl else enc <= clause.hi))


def _walk_keys(cur, prefix, clause, start, group=None):
    """The posting keys from ``start`` on whose value lies in the clause's range: all of the
    range (group None), or only the values whose 16-byte prefix is ``group``."""
    kp = prefix + clause.tag
    end = prefix + (clause.hi if clause.hi is not None else bytes([clause.tag[0] + 1]))
    end_excluded = clause.hi is None or not clause.hi_incl
    lo = prefix + clause.lo if clause.lo is not None else None
    keys = []
    if cur.set_range(start):
        for k in cur.iternext_nodup(keys=True, values=False):
            k = bytes(k)
            if k > end or k == end and end_excluded:
                break
            if group is not None and range_columns.value_prefix(k[len(kp):]) != group:
                break
            if lo is not None and (k < lo or k == lo and not clause.lo_incl):
                continue
            keys.append(k)
    return keys


def _clause_rows(cur, clause, columns_cur=None):
    """The rows of one clause (unsorted, maybe repeated): equality and ``in`` from their
    posting lists; a range from its column (``columns_cur``: the strict interior) and the
    posting lists of its two boundary groups, or, for a field without a column, from the
    posting list of each distinct value in it."""
    prefix = posting_prefix(clause.field)
    if clause.values:
        return _rows_of_keys(cur, [prefix + v for v in clause.values])
    if columns_cur is None:
        start = prefix + (clause.lo if clause.lo is not None else clause.tag)
        return _rows_of_keys(cur, _walk_keys(cur, prefix, clause, start))
    bounds = [None if b is None else range_columns.value_prefix(b[1:]) for b in (clause.lo, clause.hi)]
    interior = range_columns.interior_rows(columns_cur, prefix + clause.tag, *bounds)
    keys = []
    for group in dict.fromkeys(b for b in bounds if b is not None):
        keys += _walk_keys(cur, prefix, clause, prefix + clause.tag + group.rstrip(b"\0"), group)
    return np.concatenate([interior, _rows_of_keys(cur, keys)])


class RowFilter(NamedTuple):
    """The rows a filter allows: ``rows`` (sorted int64) and ``bits`` (uint64 words, bit
    r % 64 of word r // 64 set for an allowed row r), for rows below ``n_rows``."""
    rows: np.ndarray
    bits: np.ndarray
    n_rows: int

    @property
    def count(self):
        return int(self.rows.shape[0])


def not_indexed(field, fields):
    """The FilterError of a filter on ``field``, which is not among the indexed ``fields``."""
    return FilterError(f"filter on {field!r}: the field is not indexed (filters use indexed fields only; index it "
                       f"with StreamingIndex.index_field({field!r}) or `streamk index field IDX {field}`); "
                       f"indexed: {', '.join(sorted(fields)) or 'none'}")


def allowed_rows(txn, store, clauses, n_rows):
    """The RowFilter of parsed ``clauses`` as ``txn`` sees the index (n_rows: the rows
    the bitmap covers, at least the next row). Reads only posting lists: the cost is the
    rows each clause selects (their intersection is what the search sees)."""
    fields = indexed_fields(txn, store)
    missing = [c.field for c in clauses if c.field not in fields]
    if missing:
        raise not_indexed(missing[0], fields)
    db = store.postings_db
    columns_db = store.columns_db
    with_column = set(column_fields(txn, store)) if columns_db is not None else set()
    rows = None
    if db is not None:
        with txn.cursor(db=db) as cur, txn.cursor(db=columns_db or db) as columns_cur:
            for clause in clauses:
                r = np.unique(_clause_rows(cur, clause, columns_cur if clause.field in with_column else None))
                rows = r if rows is None else np.intersect1d(rows, r, assume_unique=True)
                if not rows.shape[0]:
                    break
    if rows is None:
        rows = np.zeros(0, np.int64)
    rows = rows[rows < n_rows]
    return RowFilter(rows, row_bitmap(rows, n_rows), int(n_rows))


def matches(metadata, clauses):
    """Whether one image's metadata (dict) passes parsed clauses (the slow, obvious twin
    of :func:`allowed_rows`, for one image: checks and tests)."""
    for c in clauses:
        if c.field not in metadata:
            return False
        encs = indexed_values(metadata[c.field])
        if c.values:
            ok = any(e in c.values for e in encs)
        else:
            ok = any(e[:1] == c.tag and _in_range(e, c) for e in encs)
        if not ok:
            return False
    return True


__all__ = ["GRAMMAR", "MAX_FILTER_FIELDS", "MAX_INDEXED_FIELDS", "MAX_IN_VALUES", "MAX_METADATA_BYTES",
           "MAX_FIELD_VALUES", "Clause", "RowFilter", "add_indexed_field", "allowed_rows", "column_fields",
           "decode_metadata", "decode_value", "field_values", "values_limit", "delete_metadata", "encode_metadata",
           "encode_value", "expected_columns", "indexed_fields", "matches", "metadata_of_rows", "parse_filter",
           "prepare_metadata", "put_metadata", "rebuild_columns"]

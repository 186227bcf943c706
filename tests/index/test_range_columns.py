"""Range filters read sorted columns (:mod:`streamk.index.range_columns`): the rows of a
range equal plain Python comparisons on the stored metadata, whatever the values (numbers
of both signs, strings sharing long prefixes or holding NUL, lists), through adds, updates
and removals that split, re-key and empty chunks; the columns stay sorted and hold one
record per (value, row); an index written before columns ranges the slow way until
``index_field`` builds them."""


import numpy as np
import pytest

from helpers.index import make_encoder, vectors
from streamk.index import StreamingIndex
from streamk.index import range_columns
from streamk.index.metadata import encode_value

PREFIX = "2024-05-17 12:34:"  # 17 bytes: strings that share their 16-byte column prefix


@pytest.fixture(scope="module")
def encoder():
    return make_encoder()


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of at most 8 records (built 6 at a time): a few hundred images split,
    re-key and empty many of them."""
    monkeypatch.setattr(range_columns, "CHUNK_MAX", 8)
    monkeypatch.setattr(range_columns, "CHUNK_BUILD", 6)


def random_meta(rng):
    kind = rng.integers(4)
    if kind == 0:
        x = (float(rng.choice([-1e9, -2.5, -0.0, 0.0, 1, 3.25, 1e6])) if rng.random() < 0.3
             else float(rng.normal() * 100))
    elif kind == 1:
        x = int(rng.integers(-50, 50))
    elif kind == 2:
        x = [float(rng.integers(-5, 5)), float(rng.normal())]
    else:
        x = "str"  # a string in a numeric field: not in any numeric range
    s = rng.choice([PREFIX + f"{rng.integers(60):02d}", PREFIX[:int(rng.integers(0, 17))],
                    "ab\0" + "c" * int(rng.integers(0, 3)), f"é{rng.integers(1000)}", "ab"])
    return {"x": x, "s": str(s), "other": 1}


def python_range(value, lo, hi, lo_incl, hi_incl, is_str):
    """Whether a metadata value (or one element of a list) lies in the range, by Python's
    own comparisons."""
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, bool) or isinstance(v, str) != is_str:
            continue
        if (lo is None or (v >= lo if lo_incl else v > lo)) and (hi is None or (v <= hi if hi_incl else v < hi)):
            return True
    return False


def check_ranges(idx, metas, rng, n_ranges=40):
    rows_of = {i: r for i, r in zip(metas, idx_rows(idx, list(metas)))}
    for _ in range(n_ranges):
        is_str = rng.random() < 0.5
        field = "s" if is_str else "x"
        pool = [v for m in metas.values() for v in (m[field] if isinstance(m[field], list) else [m[field]])
                if isinstance(v, str) == is_str and not isinstance(v, bool)]
        lo, hi = (rng.choice(pool) if rng.random() < 0.85 else None for _ in range(2))
        if is_str and rng.random() < 0.3:
            lo = PREFIX[:int(rng.integers(17))] if lo is not None else None  # a bound inside a prefix group
        lo_incl, hi_incl = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        cond = {}
        if lo is not None:
            cond["gte" if lo_incl else "gt"] = lo if is_str else float(lo)
        if hi is not None:
            cond["lte" if hi_incl else "lt"] = hi if is_str else float(hi)
        if not cond:
            continue
        want = sorted(rows_of[i] for i, m in metas.items() if python_range(m[field], lo, hi, lo_incl, hi_incl, is_str))
        got = idx.allowed({field: cond}).rows.tolist()
        assert got == want, (field, cond)


def idx_rows(idx, ids):
    return [idx.info(i)["row"] for i in ids]


def check_columns(idx, metas):
    """Every column sorted, well formed, and holding exactly one record per (value prefix, row)."""
    rows = dict(zip(metas, idx_rows(idx, list(metas))))
    with idx.store.read() as txn, txn.cursor(db=idx.store.columns_db) as cur:
        for field in ("x", "s"):
            for tag in (b"n", b"s"):
                kp = field.encode() + b"\0" + tag
                records, problems = range_columns.records_of(cur, kp)
                assert problems == []
                want = set()
                for i, m in metas.items():
                    for v in m[field] if isinstance(m[field], list) else [m[field]]:
                        if isinstance(v, str) == (tag == b"s") and not isinstance(v, bool):
                            enc = encode_value(v)
                            want.add(range_columns.value_prefix(enc[1:]) + rows[i].to_bytes(8, "big"))
                assert sorted(records) == sorted(want) and len(records) == len(set(records))


def test_ranges_equal_python_comparisons_through_changes(tmp_path, encoder, small_chunks):
    rng = np.random.default_rng(0)
    V = vectors(5, 400)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, indexed_fields=["x", "s"])
    metas = {f"i{i}": random_meta(rng) for i in range(300)}
    idx.add_many([{"id": i, "vector": V[int(i[1:])], "metadata": m} for i, m in metas.items()], batch_size=64)
    check_columns(idx, metas)
    check_ranges(idx, metas, rng)
    for i in rng.choice(list(metas), 80, replace=False):  # new metadata: records move between chunks
        metas[i] = random_meta(rng)
        idx.set_metadata(i, metas[i])
    for i in rng.choice(list(metas), 120, replace=False):  # removals: chunks shrink, lose their first record, empty
        idx.remove(i)
        del metas[i]
    for j in range(300, 400):
        metas[f"i{j}"] = random_meta(rng)
        idx.add(f"i{j}", vector=V[j], metadata=metas[f"i{j}"])
    check_columns(idx, metas)
    check_ranges(idx, metas, rng)
    idx.close()


def test_a_field_indexed_later_builds_its_column(tmp_path, encoder, small_chunks):
    rng = np.random.default_rng(1)
    V = vectors(6, 200)
    idx = StreamingIndex.create(tmp_path / "ix", encoder)
    metas = {f"i{i}": random_meta(rng) for i in range(200)}
    idx.add_many([{"id": i, "vector": V[int(i[1:])], "metadata": m} for i, m in metas.items()])
    assert idx.index_field("x") and idx.index_field("s")
    check_columns(idx, metas)
    check_ranges(idx, metas, rng)
    idx.close()


def test_an_index_without_columns_ranges_by_its_posting_lists_until_index_field(tmp_path, encoder, small_chunks):
    """As an index written before columns existed: the fields are indexed, their columns and
    the list of fields with one absent. Ranges are right (one posting list per value);
    index_field builds the column and says so."""
    rng = np.random.default_rng(2)
    V = vectors(7, 150)
    idx = StreamingIndex.create(tmp_path / "ix", encoder, indexed_fields=["x", "s"])
    metas = {f"i{i}": random_meta(rng) for i in range(150)}
    idx.add_many([{"id": i, "vector": V[int(i[1:])], "metadata": m} for i, m in metas.items()])

    idx.store.overwrite_value("meta", b"range_columns", lambda raw: None)  # the owner's test-facing writes
    for key, _ in idx.store.stored_items("columns"):
        idx.store.overwrite_value("columns", key, lambda raw: None)
    assert idx.store.stored_items("columns") == []
    check_ranges(idx, metas, rng, n_ranges=20)
    assert idx.index_field("x") is True and idx.index_field("s") is True
    assert idx.index_field("x") is False
    check_columns(idx, metas)
    check_ranges(idx, metas, rng, n_ranges=20)
    idx.close()


def test_build_sorts_and_keeps_each_record_once():
    """build() against numpy's own sort of the byte strings: chunks in order, none larger
    than CHUNK_BUILD, the concatenation sorted and without repeats."""
    import lmdb
    rng = np.random.default_rng(3)
    recs = [bytes(rng.integers(0, 4, range_columns.RECORD_BYTES, dtype=np.uint8)) for _ in range(3000)]
    recs += recs[:500]
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        env = lmdb.open(d, max_dbs=2, map_size=1 << 26)
        db = env.open_db(b"c")
        with env.begin(write=True) as txn:
            txn.put(b"a\0n" + b"\0" * 24, b"other column", db=db)
            n = range_columns.build(txn, db, b"a\0s", recs)
            with txn.cursor(db=db) as cur:
                got, problems = range_columns.records_of(cur, b"a\0s")
                chunks = [bytes(v) for k, v in cur.iternext()] if cur.set_range(b"a\0s") else []
        env.close()
    assert problems == [] and n == len(set(recs))
    assert got == sorted(set(recs))
    assert max(len(c) for c in chunks) <= range_columns.CHUNK_BUILD * range_columns.RECORD_BYTES

"""The reader's in-memory row -> id table (:class:`streamk.index.reader.RowIds`): after
any adds, removals and updates, the ids it gives are those of the image records (the
sealed ``images`` sub-database, an independent reference), for rows read block by block
or one by one, and a search names the same images as a look-up of each row in
``row_ids`` (what the reader did before the table)."""

import random

import numpy as np
import pytest

from helpers.index import make_encoder, vectors
from streamk.index import StreamingIndex
from streamk.index.reader import RowIds, SearchView
from streamk.quantization import IVFPQ

# ids of varied lengths and scripts (UTF-8 of 1 to 4 bytes a character)
NAMES = ["a", "photo-0001.jpg", "Straße", "東京タワー", "x" * 190, "🙂 smile", "id with spaces"]


def live_ids_by_row(idx):
    """{row: id} of the stored images, from their records (not from row_ids)."""
    out = {}
    with idx.store.read() as txn, txn.cursor(db=idx.store.images_db) as cur:
        for key, _ in cur:
            image_id = bytes(key).decode()
            out[idx.store.image(txn, image_id).row] = image_id
    return out


def ids_by_lookup(store, txn, rows):
    """The ids of rows looked up one by one in row_ids (the reference)."""
    return [None if r < 0 else bytes(txn.get(int(r).to_bytes(8, "big"), db=store.row_ids_db)).decode()
            for r in rows]


@pytest.fixture
def changed_index(tmp_path):
    """An index of small blocks (16 rows) after random adds, removals and updates."""
    rng = random.Random(0)
    idx = StreamingIndex.create(tmp_path / "ix", make_encoder(), vector_dtype="float32", block_rows=16)
    live, n = [], 0
    for step in range(12):
        batch = [f"{NAMES[(n + j) % len(NAMES)]}#{n + j}" for j in range(rng.randint(5, 40))]
        n += len(batch)
        V = vectors(step, len(batch))
        assert all(r.status == "added" for r in idx.add_many([{"id": i, "vector": v} for i, v in zip(batch, V)]))
        live += batch
        gone = rng.sample(live, min(len(live) // 5, 9))
        assert idx.remove(gone) == len(gone)
        live = [i for i in live if i not in set(gone)]
        for i, v in zip(rng.sample(live, 3), vectors(1000 + step, 3)):
            idx.update(i, vector=v)
    yield idx, live
    idx.close()


def test_ids_equal_the_records_after_add_remove_update(changed_index):
    idx, live = changed_index
    truth = live_ids_by_row(idx)
    assert sorted(truth.values()) == sorted(live)
    rows = np.array(sorted(truth), np.int64)
    for order in (rows, rows[::-1], np.random.default_rng(1).permutation(rows)):  # block walks and single rows
        view = SearchView(idx.store, idx.dim, idx.vector_dtype)
        with idx.store.read(buffers=True) as txn:
            view.refresh(txn)
            for lo in range(0, len(order), 7):  # a few results at a time, as searches ask
                part = order[lo:lo + 7]
                assert list(view.ids_of(txn, part[None, :])[0]) == [truth[int(r)] for r in part]
            assert view.row_ids.loaded.any()  # complete blocks were read whole


def test_block_being_filled_and_later_rows(tmp_path):
    """Rows of the block still being filled are read one by one; rows added after a
    block walk are found too (a walk only marks blocks whose rows were all given)."""
    idx = StreamingIndex.create(tmp_path / "ix", make_encoder(), vector_dtype="float32", block_rows=16)
    V = vectors(0, 60)
    idx.add_many([{"id": f"r{i}", "vector": v} for i, v in enumerate(V[:20])])
    table = RowIds(idx.store)
    with idx.store.read(buffers=True) as txn:
        assert table.ids(txn, np.array([3, 17, 19])) == ["r3", "r17", "r19"]  # looked up: a first search
        assert not table.loaded.any()
        assert table.ids(txn, np.array([3, 17, 19])) == ["r3", "r17", "r19"]  # asked for again: walked
        assert list(np.flatnonzero(table.loaded)) == [0, 1]  # block 1: rows 16-19 of it so far
    idx.add_many([{"id": f"r{i}", "vector": v} for i, v in enumerate(V[20:], 20)])
    with idx.store.read(buffers=True) as txn:
        rows = np.arange(60)
        assert table.ids(txn, rows) == [f"r{i}" for i in rows]
        assert table.ids(txn, np.array([59, 0, 59])) == ["r59", "r0", "r59"]
    idx.close()


def test_a_block_walked_again_keeps_its_slot_and_reads_only_its_new_rows(tmp_path):
    """Images added one at a time between searches: the block being filled is walked again
    as results pass its last walk, into the same slot, reading only the rows after it; the
    table holds each id once (it grew by a block's slot and a copy of the block per walk)."""
    idx = StreamingIndex.create(tmp_path / "ix", make_encoder(), vector_dtype="float32", block_rows=64)
    V = vectors(0, 100)
    table = RowIds(idx.store)
    for i in range(100):
        idx.add_many([{"id": f"r{i}", "vector": V[i]}])
        with idx.store.read(buffers=True) as txn:
            for _ in range(RowIds.WALK_AFTER):
                assert table.ids(txn, np.array([i, 0])) == [f"r{i}", "r0"]
    assert table.n_slots == 2  # one per block
    assert table.used == sum(len(f"r{i}") + 1 for i in range(100))  # each id once, with its NUL
    idx.close()


@pytest.mark.parametrize("mode", ["exact", "pq"])
def test_search_names_the_same_images_as_row_lookups(changed_index, mode):
    idx, _ = changed_index
    if mode == "pq":
        idx.train(codec=IVFPQ(nlist=4, M=8, seed=0).fit(vectors(77, 600)), progress=False)
    Q = vectors(55, 6)
    _, ids = idx.search(Q, k=12, mode=mode, rerank=0)
    with idx.store.read(buffers=True) as txn:
        _, rows = idx.view.search(txn, Q, 12, mode=mode, rerank=0)
        for a in range(len(Q)):
            assert list(ids[a]) == ids_by_lookup(idx.store, txn, rows[a])
    assert all(i is not None for i in ids.reshape(-1))


def test_missing_row_id_is_damage(changed_index):
    """A result row whose row_ids entry is gone is an IndexCorruptError naming it."""
    from streamk.errors import IndexCorruptError
    idx, _ = changed_index
    row = max(live_ids_by_row(idx))
    idx.store.overwrite_value("row_ids", row.to_bytes(8, "big"), lambda old: None)
    view = SearchView(idx.store, idx.dim, idx.vector_dtype)
    with idx.store.read(buffers=True) as txn:
        view.refresh(txn)
        with pytest.raises(IndexCorruptError, match=str(row)):
            view.ids_of(txn, np.array([[row]]))


def test_a_stale_codec_warns_once_per_state_of_the_index(tmp_path):
    """A PQ search on a stale codec warns on the first search after the index changed (or
    was opened), not on every search; a change warns again; an exact search never warns."""
    import warnings

    from streamk.errors import StaleCodecWarning

    idx = StreamingIndex.create(tmp_path / "ix", make_encoder(), vector_dtype="float32", block_rows=16)
    idx.add_many([{"id": f"a{i}", "vector": v} for i, v in enumerate(vectors(1, 20))])
    idx.train(codec=IVFPQ(nlist=4, M=8, seed=0).fit(vectors(77, 600)), progress=False)
    idx.add_many([{"id": f"b{i}", "vector": v} for i, v in enumerate(vectors(2, 200))])
    assert idx.codec_staleness()["stale"]
    Q = vectors(55, 2)

    def warned(**kw):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            idx.search(Q, k=5, rerank=0, **kw)
        return [w for w in caught if issubclass(w.category, StaleCodecWarning)]

    assert warned(mode="exact") == []
    first = warned(mode="pq")
    assert len(first) == 1 and first[0].message.staleness["added_since"] == 200
    assert warned(mode="pq") == [] and warned(mode="pq") == []  # same state: said once
    idx.add_many([{"id": "c0", "vector": vectors(3, 1)[0]}])
    again = warned(mode="pq")
    assert len(again) == 1 and again[0].message.staleness["added_since"] == 201
    idx.close()


def test_many_rows_all_in_the_table_equal_the_one_by_one_look_up(changed_index):
    """Once every block is walked, many rows at once (more than RowIds.FEW: the vectorised
    gather), in any order, repeated, with -1 slots in ids_of, name what ``row_ids`` names
    row by row."""
    idx, _ = changed_index
    rows = np.array(sorted(live_ids_by_row(idx)), np.int64)
    assert len(rows) > 4 * RowIds.FEW
    view = SearchView(idx.store, idx.dim, idx.vector_dtype)
    rng = np.random.default_rng(2)
    with idx.store.read(buffers=True) as txn:
        view.refresh(txn)
        for _ in range(RowIds.WALK_AFTER * len(rows) // RowIds.LOAD_BLOCKS + 1):
            view.ids_of(txn, rows[None, :])  # asked for often enough: every block walked
        assert view.row_ids.loaded[:(rows.max() // idx.store.block_rows)].all()
        for order in (rows, rows[::-1], rng.permutation(rows), rng.choice(rows, 3 * len(rows))):
            assert view.row_ids.ids(txn, order) == ids_by_lookup(idx.store, txn, order)
            padded = np.concatenate([order[:50], [-1, -1]])[None, :]
            assert list(view.ids_of(txn, padded)[0]) == ids_by_lookup(idx.store, txn, padded[0])
            assert list(view.ids_of(txn, order[None, :])[0]) == ids_by_lookup(idx.store, txn, order)

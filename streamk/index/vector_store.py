"""Image vectors in the LMDB map, a block of rows per value, each checksummed.

LMDB keeps a value larger than about half a page (2,040 bytes of 4 KiB) in
overflow pages of its own, whole pages plus a 16-byte header: one vector of
1,024 float16 (2,048 bytes) alone takes 4 KiB, twice its size. A block of
``rows_per_block`` consecutive rows per value, as many as 16 pages hold
(31 such vectors), wastes 3 % instead, and an exact search reads 64 KiB at a
time. Reading one vector (re-ranking) touches only its own page of the map.

Key: the block number (8 bytes, big-endian); value (format 3): the CRC32C of
everything after it (4 bytes, LE), then the CRC32C of each row (B x 4 bytes),
then the block's rows, each ``dim`` values of the index's dtype, zeros for rows
never written (the block being filled) or removed. An exact search checks each
block's CRC, a re-ranking each row's it reads: damage is an
:class:`~streamk.errors.IndexCorruptError` naming the rows, never a vector served.
Which rows hold an image is not stored here: a row is live from its ``add``
until it is marked in the ``dead`` bitmaps.
"""

import threading

import lmdb
import numpy as np

from .integrity import CRC_BYTES, corrupt, crc32c, describe_rows
from .keys import row_from_key, row_key

BLOCK_BYTES = 16 * 4096 - 16  # 16 overflow pages less LMDB's page header
WARM_THREADS = 8  # blocks read side by side by VectorStore.warm_blocks
_CRCS = np.dtype("<u4")


def rows_per_block(dim, dtype):
    """Rows of a block that fill 16 pages: a row is its vector and its CRC, the block has one CRC more."""
    return max(1, (BLOCK_BYTES - CRC_BYTES) // (int(dim) * np.dtype(dtype).itemsize + CRC_BYTES))


class VectorStore:
    """Put, remove and read vectors by row in the ``vectors`` sub-database of ``store``."""

    def __init__(self, store, dim, dtype, txn=None):
        self.store = store
        self.dim = int(dim)
        self.dtype = np.dtype(dtype)
        self.row_bytes = self.dim * self.dtype.itemsize
        self.block_rows = store.get_int(b"vector_block_rows", txn, default=rows_per_block(dim, dtype))
        self.db = store.vectors_db
        self.data_offset = CRC_BYTES * (1 + self.block_rows)  # block CRC, row CRCs, rows
        self.value_bytes = self.data_offset + self.block_rows * self.row_bytes
        self._zero_crc = crc32c(bytes(self.row_bytes))

    # ------------------------------------------------------------ the stored form
    def empty_block(self):
        value = bytearray(self.value_bytes)
        np.frombuffer(value, _CRCS, self.block_rows, CRC_BYTES)[:] = self._zero_crc
        return value

    def _set_row(self, value, slot, data):
        o = self.data_offset + slot * self.row_bytes
        value[o:o + self.row_bytes] = data
        value[CRC_BYTES * (1 + slot):CRC_BYTES * (2 + slot)] = crc32c(data).to_bytes(4, "little")

    @staticmethod
    def _seal(value):
        value[:CRC_BYTES] = crc32c(memoryview(value)[CRC_BYTES:]).to_bytes(4, "little")
        return bytes(value)

    def pack_block(self, vectors):
        """The stored value of a block of rows (block_rows, dim) (for the upgrade and repairs)."""
        value = self.empty_block()
        for slot, v in enumerate(np.asarray(vectors, self.dtype)):
            self._set_row(value, slot, v.tobytes())
        return self._seal(value)

    def block_ok(self, value):
        """Whether a block's value has its size and its CRC."""
        return (len(value) == self.value_bytes
                and crc32c(memoryview(value)[CRC_BYTES:]) == int.from_bytes(bytes(value[:CRC_BYTES]), "little"))

    def rows_ok(self, value):
        """bool (block_rows,): the rows of a block value whose CRC matches (all False when
        the value has the wrong size)."""
        if len(value) != self.value_bytes:
            return np.zeros(self.block_rows, bool)
        crcs = np.frombuffer(value, _CRCS, self.block_rows, CRC_BYTES)
        mv = memoryview(value)
        return np.array([crc32c(mv[self.data_offset + i * self.row_bytes:self.data_offset + (i + 1) * self.row_bytes])
                         == crcs[i] for i in range(self.block_rows)], bool)

    def block_vectors(self, value):
        """(block_rows, dim) view of a block value's rows (unchecked)."""
        return np.frombuffer(value, self.dtype, self.block_rows * self.dim, self.data_offset).reshape(
            self.block_rows, self.dim)

    def _damaged_block(self, block):
        B = self.block_rows
        return corrupt(self.store.path, f"the vector block of {describe_rows(range(block * B, (block + 1) * B))} "
                       "fails its checksum", rows=list(range(block * B, (block + 1) * B)))

    # ------------------------------------------------------------ writing (in a write transaction)
    def put(self, txn, row, vector):
        """Write the vector of a row (read-modify-write of its block)."""
        block, slot = divmod(int(row), self.block_rows)
        key = row_key(block)
        raw = txn.get(key, db=self.db)
        if raw is not None and not self.block_ok(raw):  # never seal damage in with a fresh CRC
            raise self._damaged_block(block)
        value = bytearray(raw) if raw is not None else self.empty_block()
        self._set_row(value, slot, np.asarray(vector, self.dtype).tobytes())
        txn.put(key, self._seal(value), db=self.db)

    def clear(self, txn, row):
        """Zero a removed row's vector; the block goes when no row of it is left non-zero."""
        block, slot = divmod(int(row), self.block_rows)
        key = row_key(block)
        raw = txn.get(key, db=self.db)
        if raw is None:
            return
        if not self.block_ok(raw):
            raise self._damaged_block(block)
        value = bytearray(raw)
        self._set_row(value, slot, bytes(self.row_bytes))
        if any(memoryview(value)[self.data_offset:]):
            txn.put(key, self._seal(value), db=self.db)
        else:
            txn.delete(key, db=self.db)

    # ------------------------------------------------------------ reading
    def get(self, txn, rows, side_by_side=False):
        """Vectors (n, D) float32 of rows (whose blocks must exist): one read per block,
        and of each block only the rows asked for, each checked against its CRC (the
        values are zero-copy buffers of the map).

        py-lmdb reads every page of a value it returns, one by one, each waited for: the
        blocks of R candidates are R x 16 page reads. side_by_side (a reader's first
        re-ranking, its pages likely not cached): those pages are first brought into the
        page cache by :meth:`warm_blocks`, several blocks at once."""
        rows = np.asarray(rows, np.int64)
        blocks, where = np.unique(rows // self.block_rows, return_inverse=True)
        if side_by_side and len(blocks) >= 2 * WARM_THREADS:
            self.warm_blocks(blocks)
        with txn.cursor(db=self.db) as cur:
            found = cur.getmulti([row_key(b) for b in blocks.tolist()])
        if len(found) != len(blocks):
            got = set(row_from_key(k) for k, _ in found)
            lost = [int(r) for r in rows if int(r) // self.block_rows not in got]
            raise corrupt(self.store.path, f"the vector block of {describe_rows(lost)} is missing (a damaged "
                          "B-tree page)", rows=lost)
        values = [v for _, v in found]
        out = np.empty((len(rows), self.dim), np.float32)
        rb, o0, bad = self.row_bytes, self.data_offset, []
        for i, (b, r) in enumerate(zip(where.tolist(), (rows % self.block_rows).tolist())):
            value = values[b]
            if len(value) != self.value_bytes:
                raise self._damaged_block(int(blocks[b]))
            data = memoryview(value)[o0 + r * rb:o0 + (r + 1) * rb]
            if crc32c(data) != int.from_bytes(bytes(value[CRC_BYTES * (1 + r):CRC_BYTES * (2 + r)]), "little"):
                bad.append(int(rows[i]))
                continue
            out[i] = np.frombuffer(data, self.dtype, self.dim)
        if bad:
            raise corrupt(self.store.path, f"the stored vector of {describe_rows(bad)} fails its checksum", rows=bad)
        return out

    def warm_blocks(self, blocks):
        """Read the values of ``blocks`` in WARM_THREADS threads at once, each in a read
        transaction of its own, only to bring their pages into the page cache: the disk
        serves WARM_THREADS reads side by side instead of one (a first re-ranking of 100
        candidates at 100k, cold, load 8: 250 ms -> 70-90 ms). Nothing read here is used (a
        thread's snapshot may be newer than the caller's, whose own read is the one checked),
        errors are ignored (a caller's read will meet them), and every thread has ended when
        this returns."""
        keys = [row_key(b) for b in np.asarray(blocks).tolist()]

        def read(share):
            try:
                with self.store.env.begin(buffers=True) as txn:
                    for k in share:
                        txn.get(k, db=self.db)
            except lmdb.Error:  # advice only: the caller's own read meets what is wrong
                pass
        threads = [threading.Thread(target=read, args=(keys[i::WARM_THREADS],), daemon=True)
                   for i in range(WARM_THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def scan(self, txn, lo=0, hi=None, live=None, chunk_blocks=64):
        """Yield (rows, vectors (n, D) float32) of rows lo..hi-1, block by block
        (``chunk_blocks`` at a time), each block checked against its CRC;
        ``live(rows) -> bool mask`` keeps some."""
        B = self.block_rows
        with txn.cursor(db=self.db) as cur:
            if not cur.set_range(row_key(lo // B)):
                return
            items = cur.iternext(keys=True, values=True)
            while True:
                keys, values = [], []
                for k, v in items:
                    block = row_from_key(k)
                    if not self.block_ok(v):
                        raise self._damaged_block(block)
                    keys.append(block)
                    values.append(memoryview(v)[self.data_offset:])
                    if len(keys) == chunk_blocks:
                        break
                if not keys:
                    return
                V = np.frombuffer(b"".join(values), self.dtype).reshape(-1, self.dim)
                rows = (np.asarray(keys, np.int64)[:, None] * B + np.arange(B)).reshape(-1)
                keep = (rows >= lo) & (rows < (hi if hi is not None else np.iinfo(np.int64).max))
                if live is not None:
                    keep[keep] = live(rows[keep])
                if keep.any():
                    yield rows[keep], V[keep].astype(np.float32)
                if hi is not None and rows[-1] >= hi - 1:
                    return
                if len(keys) < chunk_blocks:
                    return

"""Image vectors in the LMDB map, a block of rows per value.

LMDB keeps a value larger than about half a page (2,040 bytes of 4 KiB) in
overflow pages of its own, whole pages plus a 16-byte header: one vector of
1,024 float16 (2,048 bytes) alone takes 4 KiB, twice its size. A block of
``rows_per_block`` consecutive rows per value, as many as 16 pages hold
(31 such vectors), wastes 3 % instead, and an exact search reads 64 KiB at a
time. Reading one vector (re-ranking) touches only its own page of the map.

Key: the block number (8 bytes, big-endian); value: the block's rows, each
``dim`` values of the index's dtype, zeros for rows never written (the block
being filled) or removed. Which rows hold an image is not stored here: a row
is live from its ``add`` until it is marked in the ``dead`` bitmaps.
"""

import numpy as np

from .store import row_from_key, row_key

BLOCK_BYTES = 16 * 4096 - 16  # 16 overflow pages less LMDB's page header


def rows_per_block(dim, dtype):
    return max(1, BLOCK_BYTES // (int(dim) * np.dtype(dtype).itemsize))


class VectorStore:
    """Put, remove and read vectors by row in the ``vectors`` sub-database of ``store``."""

    def __init__(self, store, dim, dtype):
        self.store = store
        self.dim = int(dim)
        self.dtype = np.dtype(dtype)
        self.row_bytes = self.dim * self.dtype.itemsize
        self.block_rows = store.get_int(b"vector_block_rows", default=rows_per_block(dim, dtype))
        self.db = store.dbs["vectors"]

    # ------------------------------------------------------------ writing (in a write transaction)
    def put(self, txn, row, vector):
        """Write the vector of a row (read-modify-write of its block)."""
        block, slot = divmod(int(row), self.block_rows)
        key = row_key(block)
        raw = txn.get(key, db=self.db)
        value = bytearray(raw) if raw is not None else bytearray(self.block_rows * self.row_bytes)
        value[slot * self.row_bytes:(slot + 1) * self.row_bytes] = np.asarray(vector, self.dtype).tobytes()
        txn.put(key, bytes(value), db=self.db)

    def clear(self, txn, row):
        """Zero a removed row's vector; the block goes when no row of it is left non-zero."""
        block, slot = divmod(int(row), self.block_rows)
        key = row_key(block)
        raw = txn.get(key, db=self.db)
        if raw is None:
            return
        value = bytearray(raw)
        value[slot * self.row_bytes:(slot + 1) * self.row_bytes] = bytes(self.row_bytes)
        if any(value):
            txn.put(key, bytes(value), db=self.db)
        else:
            txn.delete(key, db=self.db)

    # ------------------------------------------------------------ reading
    def _blocks(self, values):
        """(n, block_rows, dim) view of joined block values."""
        return np.frombuffer(b"".join(values), self.dtype).reshape(len(values), self.block_rows, self.dim)

    def get(self, txn, rows):
        """Vectors (n, D) float32 of rows (whose blocks must exist): one read per block,
        and of each block only the rows asked for (the values are zero-copy buffers of
        the map: a re-ranking of R candidates touches R vectors' pages, not R blocks)."""
        rows = np.asarray(rows, np.int64)
        blocks, where = np.unique(rows // self.block_rows, return_inverse=True)
        with txn.cursor(db=self.db) as cur:
            found = cur.getmulti([row_key(b) for b in blocks.tolist()])
        if len(found) != len(blocks):
            raise KeyError("rows without a stored vector block")
        values = [v for _, v in found]
        out = np.empty((len(rows), self.dim), np.float32)
        row_bytes = self.dim * self.dtype.itemsize
        for i, (b, r) in enumerate(zip(where.tolist(), (rows % self.block_rows).tolist())):
            out[i] = np.frombuffer(values[b], self.dtype, self.dim, r * row_bytes)
        return out

    def scan(self, txn, lo=0, hi=None, live=None, chunk_blocks=64):
        """Yield (rows, vectors (n, D) float32) of rows lo..hi-1, block by block
        (``chunk_blocks`` at a time); ``live(rows) -> bool mask`` keeps some."""
        B = self.block_rows
        with txn.cursor(db=self.db) as cur:
            if not cur.set_range(row_key(lo // B)):
                return
            items = cur.iternext(keys=True, values=True)
            while True:
                keys, values = [], []
                for k, v in items:
                    keys.append(row_from_key(k))
                    values.append(v)
                    if len(keys) == chunk_blocks:
                        break
                if not keys:
                    return
                V = self._blocks(values).reshape(-1, self.dim)
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

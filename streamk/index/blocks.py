"""The stored form of codes and removal marks, shared by the writer, the reader, the
retrainer and the upgrade: one row's code, a sealed block of rows, the bitmaps of
removed rows.

A row's code: its list number (uint32 LE) then its M code bytes, then their CRC32C
(4 bytes). A sealed block: the B list numbers then the B x M code bytes, then their
CRC32C, one LMDB value. A removal: a bit in its block's bitmap (B bits, little-endian
bit order). A code or block that fails its CRC is an IndexCorruptError naming its rows.
"""

import numpy as np

from ..quantization import NO_LIST
from .integrity import CRC_BYTES, checksum_ok, corrupt, describe_rows, seal
from .keys import epoch_key, row_key, rows_of_epoch_keys

_LIST = np.dtype("<u4")


def pack_codes(lists, codes):
    """Stored form of a row's code: list (uint32 LE) then the M code bytes, (n, 4 + M) uint8."""
    out = np.empty((len(lists), 4 + codes.shape[1]), np.uint8)
    out[:, :4] = np.asarray(lists, _LIST).reshape(-1, 1).view(np.uint8)
    out[:, 4:] = codes
    return out


def unpack_codes(packed, M):
    """(lists (n,) uint32, codes (n, M) uint8) of stored row codes (n, 4 + M) uint8."""
    packed = packed.reshape(-1, 4 + M)
    return np.ascontiguousarray(packed[:, :4]).view(_LIST).reshape(-1), packed[:, 4:]


def split_block(value, M, B):
    """(lists (B,) uint32, codes (B, M) uint8) of a sealed block value (views, no copy)."""
    lists = np.frombuffer(value, _LIST, B)
    codes = np.frombuffer(value, np.uint8, B * M, offset=4 * B).reshape(B, M)
    return lists, codes


def pack_block(lists, codes):
    """The stored value of a sealed block: B list numbers (uint32 LE), B x M code bytes, their CRC32C."""
    return seal(np.asarray(lists, _LIST).tobytes() + np.ascontiguousarray(codes, np.uint8).tobytes())


def checked_block(store, value, epoch, block, M):
    """``value`` of sealed block ``block`` when it has its size and CRC, else IndexCorruptError."""
    B = store.block_rows
    if len(value) != B * (4 + M) + CRC_BYTES or not checksum_ok(value):
        rows = range(block * B, (block + 1) * B)
        raise corrupt(store.path, f"the code block of {describe_rows(rows)} (epoch {epoch}) fails its checksum",
                      rows=list(rows))
    return value


def seal_row_codes(packed):
    """Stored values (bytes) of rows' codes (n, 4 + M) uint8: each with its CRC32C."""
    return [seal(p.tobytes()) for p in np.asarray(packed, np.uint8)]


def open_row_codes(store, values, rows, M):
    """(n, 4 + M) uint8 of stored row codes, each checked against its CRC (IndexCorruptError
    naming the rows that fail)."""
    bad = [int(r) for r, v in zip(rows, values) if len(v) != 4 + M + CRC_BYTES or not checksum_ok(v)]
    if bad:
        raise corrupt(store.path, f"the PQ code of {describe_rows(bad)} fails its checksum", rows=bad)
    if not values:
        return np.zeros((0, 4 + M), np.uint8)
    return np.frombuffer(b"".join(values), np.uint8).reshape(-1, 4 + M + CRC_BYTES)[:, :4 + M]


def mark_removed(txn, store, row):
    """Set the bit of ``row`` in its block's bitmap of removed rows."""
    block, bit = divmod(int(row), store.block_rows)
    key = row_key(block)
    raw = txn.get(key, db=store.dead_db)
    bits = bytearray(raw) if raw is not None else bytearray(store.block_rows // 8)
    bits[bit >> 3] |= 1 << (bit & 7)
    txn.put(key, bytes(bits), db=store.dead_db)


def seal_block(txn, store, epoch, block, M):
    """Pack the per-row codes of a full block into one value and delete them. Rows
    without a code (removed before they were coded) get list NO_LIST."""
    codes_db = store.codes_db
    B = store.block_rows
    lo = block * B
    keys, values = [], []
    with txn.cursor(db=codes_db) as cur:
        if cur.set_range(epoch_key(epoch, lo)):
            end = epoch_key(epoch, lo + B)
            for k, v in cur:
                if bytes(k) >= end:
                    break
                keys.append(bytes(k))
                values.append(bytes(v))
    lists = np.full(B, NO_LIST, _LIST)
    codes = np.zeros((B, M), np.uint8)
    if keys:
        rows = rows_of_epoch_keys(keys)
        got_lists, got_codes = unpack_codes(open_row_codes(store, values, rows, M), M)
        rows = rows - lo
        lists[rows] = got_lists
        codes[rows] = got_codes
    for k in keys:
        txn.delete(k, db=codes_db)
    txn.put(epoch_key(epoch, block), pack_block(lists, codes), db=store.code_blocks_db)


__all__ = ["checked_block", "mark_removed", "open_row_codes", "pack_block", "pack_codes", "seal_block",
           "seal_row_codes", "split_block", "unpack_codes"]

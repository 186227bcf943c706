"""The stored form of codes and removal marks, shared by the writer, the reader, the
retrainer and the upgrade: one row's code, a sealed block of rows, the bitmaps of
removed rows.

A row's code: its list number (uint32 LE) then its M code bytes. A sealed block:
the B list numbers then the B x M code bytes, one LMDB value. A removal: a bit
in its block's bitmap (B bits, little-endian bit order).
"""

import numpy as np

from ..quantization import NO_LIST
from .store import epoch_key, row_key, rows_of_epoch_keys

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
    """The stored value of a sealed block: B list numbers (uint32 LE) then B x M code bytes."""
    return np.asarray(lists, _LIST).tobytes() + np.ascontiguousarray(codes, np.uint8).tobytes()


def mark_removed(txn, store, row):
    """Set the bit of ``row`` in its block's bitmap of removed rows."""
    block, bit = divmod(int(row), store.block_rows)
    key = row_key(block)
    raw = txn.get(key, db=store.dbs["dead"])
    bits = bytearray(raw) if raw is not None else bytearray(store.block_rows // 8)
    bits[bit >> 3] |= 1 << (bit & 7)
    txn.put(key, bytes(bits), db=store.dbs["dead"])


def seal_block(txn, store, epoch, block, M):
    """Pack the per-row codes of a full block into one value and delete them. Rows
    without a code (removed before they were coded) get list NO_LIST."""
    codes_db = store.dbs["codes"]
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
        rows = rows_of_epoch_keys(keys) - lo
        got_lists, got_codes = unpack_codes(np.frombuffer(b"".join(values), np.uint8), M)
        lists[rows] = got_lists
        codes[rows] = got_codes
    for k in keys:
        txn.delete(k, db=codes_db)
    txn.put(epoch_key(epoch, block), pack_block(lists, codes), db=store.dbs["code_blocks"])


__all__ = ["mark_removed", "pack_block", "pack_codes", "seal_block", "split_block", "unpack_codes"]

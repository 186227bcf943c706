"""The stored form of codes and removal marks, shared by the writer, the reader, the
retrainer and the upgrade: one row's code, a sealed block of rows, the bitmaps of
removed rows.

A row's code: its list number (uint32 LE) then its M code bytes, then their CRC32C
(4 bytes). A sealed block: the B list numbers then the B x M code bytes, then their
CRC32C, one LMDB value. A removal: a bit in its block's bitmap (B bits, little-endian
bit order). A code or block that fails its CRC is an IndexCorruptError naming its rows.

A run (sub-database ``code_runs``, key (epoch, first block)): the codes of RUN_BLOCKS
sealed blocks again, in list order, so that a reader reads only the lists it probes (and
checks only their bytes). Written with the seal of the group's last block, in the same
transaction, never changed after (a new epoch's codes get their own runs; the old epoch's
go with its codes). Everything little-endian:

- header: the run's number of blocks (uint32), nlist (uint32), then ``starts``
  (nlist + 1 uint32: list l's entries are entries ``starts[l]:starts[l + 1]``), then the
  CRC32C of each list's entry bytes (nlist uint32), then the CRC32C of all the header
  before it (uint32): (2 nlist + 4) x 4 bytes, 32 KB at nlist 4,096;
- the entries, by list then by row: each the row less the run's first row (uint32) and
  the M code bytes. Rows without a code (NO_LIST) are left out; removed rows are kept
  (the reader's removal marks hide them, as in the blocks).

The blocks stay what every other reader of codes reads (repairs, retraining, the rows
sealed after a reader's open); a run is derived from them, so an index without runs (made
by an older streamk) is read from its blocks, as before.
"""

import numpy as np

from ..quantization import NO_LIST
from .integrity import CRC_BYTES, checksum_ok, corrupt, crc32c, describe_rows, seal
from .keys import epoch_key, epoch_key_split, row_key, rows_of_epoch_keys
from .lmdb_pages import address_of, will_need

_LIST = np.dtype("<u4")
RUN_BLOCKS = 16  # sealed blocks per run (65,536 rows at B = 4,096)


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


# ------------------------------------------------------------ runs: the sealed codes in list order
def pack_run(lists, codes, n_blocks, nlist):
    """The stored value of a run of ``n_blocks`` blocks: the lists (n,) uint32 and codes
    (n, M) uint8 of its rows, in row order from its first row (NO_LIST: no code)."""
    lists = np.asarray(lists, _LIST)
    keep = np.flatnonzero(lists != NO_LIST)
    order = keep[np.argsort(lists[keep], kind="stable")]  # by list, then by row
    M = codes.shape[1]
    entries = np.empty((len(order), 4 + M), np.uint8)
    entries[:, :4] = order.astype(_LIST).reshape(-1, 1).view(np.uint8)
    entries[:, 4:] = codes[order]
    starts = np.searchsorted(lists[order], np.arange(nlist + 1)).astype(_LIST)
    flat = entries.reshape(-1)
    size = 4 + M
    crcs = np.array([crc32c(flat[a * size:b * size]) for a, b in zip(starts[:-1].tolist(), starts[1:].tolist())],
                    _LIST)
    header = np.array([n_blocks, nlist], _LIST).tobytes() + starts.tobytes() + crcs.tobytes()
    return seal(header) + entries.tobytes()


class RunDirectory:
    """The header of one stored run, checked: where each list's entries lie in the value."""

    __slots__ = ("first_block", "n_blocks", "starts", "crcs", "entries_at")

    def __init__(self, store, value, epoch, first_block, nlist):
        head = 2 * 4
        n_blocks, stored_nlist = (np.frombuffer(value, _LIST, 2).tolist() if len(value) >= head else (0, -1))
        size = head + (2 * nlist + 1) * 4
        if stored_nlist != nlist or len(value) < size + CRC_BYTES or not checksum_ok(memoryview(value)[:size + 4]):
            raise _damaged_run(store, epoch, first_block, RUN_BLOCKS, "its header fails its checksum")
        self.first_block, self.n_blocks = int(first_block), int(n_blocks)
        self.starts = np.frombuffer(value, _LIST, nlist + 1, head).astype(np.int64)
        self.crcs = np.frombuffer(value, _LIST, nlist, head + 4 * (nlist + 1)).copy()
        self.entries_at = size + CRC_BYTES

    def lists_spans(self, value, wanted, M):
        """[(address, length)] of the entries of lists ``wanted`` (int64, increasing) in the
        run's ``value`` (a view of the map): what :meth:`lists_entries` reads, for readahead
        (lists next to each other make one span)."""
        size, base = 4 + M, address_of(value) + self.entries_at
        first = np.ones(len(wanted), bool)
        first[1:] = wanted[1:] != wanted[:-1] + 1
        last = np.append(np.flatnonzero(first)[1:], len(wanted)) - 1
        a, b = self.starts[wanted[first]], self.starts[wanted[last] + 1]
        return list(zip((base + a * size).tolist(), ((b - a) * size).tolist()))

    def lists_entries(self, store, value, epoch, wanted, M):
        """(lists, codes (n, M) uint8, rows (n,) int64) of the entries of lists ``wanted``
        (int64, increasing) in the run's ``value``: each list's bytes checked against its CRC
        (IndexCorruptError naming the run's rows), then one gather of them all (only their
        pages of the map are read)."""
        size, at = 4 + M, self.entries_at
        total = int(self.starts[-1])
        if at + total * size > len(value):
            raise _damaged_run(store, epoch, self.first_block, self.n_blocks, "its entries are cut short")
        a, b = self.starts[wanted], self.starts[wanted + 1]
        view = memoryview(value)
        for lst, lo, hi in zip(wanted.tolist(), (at + a * size).tolist(), (at + b * size).tolist()):
            if hi > lo and crc32c(view[lo:hi]) != self.crcs[lst]:
                raise _damaged_run(store, epoch, self.first_block, self.n_blocks, f"list {lst} fails its checksum")
        n = b - a
        picked = np.repeat(a - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))  # the lists' entry numbers
        got = np.frombuffer(value, np.uint8, total * size, at).reshape(total, size)[picked]
        rows = got[:, :4].copy().view(_LIST).reshape(-1).astype(np.int64) + self.first_block * store.block_rows
        return np.repeat(wanted, n), got[:, 4:], rows


def check_run(store, value, epoch, first_block, nlist, M):
    """Check a stored run whole (its header and every list's CRC): IndexCorruptError if not."""
    d = RunDirectory(store, value, epoch, first_block, nlist)
    if d.entries_at + int(d.starts[-1]) * (4 + M) != len(value):
        raise _damaged_run(store, epoch, first_block, d.n_blocks, "its size differs from its header's")
    d.lists_entries(store, value, epoch, np.arange(nlist, dtype=np.int64), M)


def _damaged_run(store, epoch, first_block, n_blocks, what):
    B = store.block_rows
    rows = range(first_block * B, (first_block + n_blocks) * B)
    return corrupt(store.path, f"the list-ordered codes of {describe_rows(rows)} (epoch {epoch}): {what}",
                   rows=list(rows))


def run_directories(txn, store, epoch, nlist):
    """{first block: RunDirectory} of the runs of ``epoch`` (each header checked; their pages
    asked for at once)."""
    values = run_values(txn, store, epoch)
    will_need([(address_of(v), min(len(v), (2 * nlist + 4) * 4)) for v in values.values() if len(v)])
    return {first: RunDirectory(store, value, epoch, first, nlist) for first, value in values.items()}


def run_values(txn, store, epoch):
    """{first block: value} of the runs of ``epoch``, in place in the map: only the pages a
    reader touches are read (the header, the lists it probes), not the whole run, as
    py-lmdb's values would be (it reads every page of a value it returns: 67 MB at 1M for
    a first answer). Found by :meth:`Store.values_in_map` and checked against the keys a
    cursor sees; where that cannot be, py-lmdb's values. Valid while ``txn`` is."""
    if store.code_runs_db is None:  # an index of an older streamk opened read-only: no runs
        return {}
    with txn.cursor(db=store.code_runs_db) as cur:  # keys only: py-lmdb reads no value
        keys = []
        if cur.set_range(epoch_key(epoch, 0)):
            for k in cur.iternext(keys=True, values=False):
                if epoch_key_split(k)[0] != epoch:
                    break
                keys.append(bytes(k))
    in_map = store.values_in_map(txn, "code_runs", epoch_key(epoch, 0)[:4]) if keys else {}
    if in_map is None or sorted(in_map) != keys:
        in_map = {k: txn.get(k, db=store.code_runs_db) for k in keys}
    return {epoch_key_split(k)[1]: in_map[k] for k in keys}


def write_run(txn, store, epoch, first_block, M, nlist):
    """Store the run of blocks first_block .. first_block + RUN_BLOCKS - 1; returns whether it
    was written (not when a block is not sealed, or the store has no ``code_runs``: an index
    of format 2 or 3 being upgraded)."""
    if store.code_runs_db is None:
        return False
    B = store.block_rows
    parts = []
    for b in range(first_block, first_block + RUN_BLOCKS):
        raw = txn.get(epoch_key(epoch, b), db=store.code_blocks_db)
        if raw is None:  # not all sealed: no run (a reader reads the blocks there is)
            return False
        parts.append(split_block(checked_block(store, raw, epoch, b, M), M, B))
    lists = np.concatenate([p[0] for p in parts])
    codes = np.concatenate([p[1] for p in parts])
    txn.put(epoch_key(epoch, first_block), pack_run(lists, codes, RUN_BLOCKS, nlist),
            db=store.code_runs_db)
    return True


def write_missing_runs(txn, store, epoch, M, nlist, n_sealed, since=0):
    """Store the runs of the groups of blocks from block ``since`` (rounded down to a group)
    to ``n_sealed`` (blocks 0 .. n_sealed - 1 are sealed) that have none; returns how many
    were written."""
    n = 0
    if store.code_runs_db is None:
        return n
    for first in range(since - since % RUN_BLOCKS, n_sealed - n_sealed % RUN_BLOCKS, RUN_BLOCKS):
        if txn.get(epoch_key(epoch, first), db=store.code_runs_db) is None:
            n += bool(write_run(txn, store, epoch, first, M, nlist))
    return n


__all__ = ["RUN_BLOCKS", "RunDirectory", "check_run", "checked_block", "mark_removed", "open_row_codes", "pack_block",
           "pack_codes", "pack_run", "run_directories", "run_values", "seal_block", "seal_row_codes", "split_block",
           "unpack_codes", "write_missing_runs", "write_run"]

"""LMDB's pages: the free list, read from ``data.mdb`` with plain file reads (nothing
mapped); and the values of a sub-database found in the map, so that their pages are read
at once (:func:`big_values`, :func:`will_need`).

Why: LMDB may end a transaction with its last pages never written. A page allocated and
freed in the same write transaction is "loose"; ``mdb_page_flush`` skips it and the commit
puts it on the free list, yet ``mm_last_pg`` counts it. So a whole, valid ``data.mdb`` can be
a few pages shorter than (last page + 1) x page size (tests/index/test_damage.py makes such
files with a few hundred random transactions). Those missing pages hold nothing: every one
is on the free list. A partial copy misses pages that the trees still use. This module reads
the free list so that the size check can tell the two apart.

The layout is LMDB's, on a 64-bit build (mdb.c: ``MDB_page``, ``MDB_node``, ``MDB_db``):
- a page begins with a 16-byte header: pgno (8), pad (2), flags (2), then lower and upper
  (2 + 2), or, on an overflow page, its page count (4);
- the node offsets (2 bytes each) follow, (lower - 16) / 2 of them;
- a node is lo, hi, flags, ksize (2 bytes each), then the key and the data:
  - in a branch node, lo | hi << 16 | flags << 32 is the child's page number;
  - in a leaf node, lo | hi << 16 is the data size, and with F_BIGDATA the data is the page number of
    the overflow pages that hold it.
- The free DB (``FREE_DBI`` = 0: the first ``MDB_db`` of the meta, its root at offset 40) maps a
  transaction id to an ID list: a count, then that many page numbers (8 bytes each).
"""

import ctypes
import os
import struct
import sys

import numpy as np

P_BRANCH, P_LEAF, P_OVERFLOW, P_LEAF2 = 0x01, 0x02, 0x04, 0x20
F_BIGDATA = 0x01
P_INVALID = 2 ** 64 - 1
_HEADER = struct.Struct("<QHHHH")  # pgno, pad, flags, lower, upper
_NODE = struct.Struct("<HHHH")  # lo, hi, flags, ksize
_OVERFLOW_PAGES = struct.Struct("<I")  # at offset 12 of an overflow page
_ID = struct.Struct("<Q")
_DB_ROOT = 40  # offset of md_root in an MDB_db record (pad 4, flags 2, depth 2, 4 counts of 8)


class MissingPage(Exception):
    """A page the free DB's tree needs lies past the end of the file (or is not a tree page)."""


def free_db_root(free_db_record):
    """The free DB's root page number from its 48-byte ``MDB_db`` record (P_INVALID: empty)."""
    return _ID.unpack_from(free_db_record, _DB_ROOT)[0]


def free_pages(f, psize, root, file_pages, max_pages):
    """The set of page numbers on LMDB's free list, walking the free DB from ``root`` in the
    open file ``f``; MissingPage when the walk needs a page at or past ``file_pages``.
    Reads at most ``max_pages`` pages (the free DB of a file of that many pages cannot be
    larger), so a damaged tree with a cycle still ends."""
    found = set()
    if root == P_INVALID:
        return found
    stack, read = [root], 0
    while stack:
        pgno = stack.pop()
        read += 1
        if read > max_pages:
            raise MissingPage(f"the free list's tree has more than {max_pages} pages")
        page = _read_pages(f, psize, pgno, 1, file_pages)
        _, _, flags, lower, _ = _HEADER.unpack_from(page)
        if flags & P_LEAF2 or not flags & (P_BRANCH | P_LEAF):
            raise MissingPage(f"page {pgno} of the free list's tree is not a tree page")
        for offset in struct.unpack_from(f"<{(lower - _HEADER.size) // 2}H", page, _HEADER.size):
            lo, hi, nflags, ksize = _NODE.unpack_from(page, offset)
            if flags & P_BRANCH:
                stack.append(lo | hi << 16 | nflags << 32)
                continue
            found.update(_id_list(f, psize, page, offset + _NODE.size + ksize, lo | hi << 16, nflags, file_pages))
    return found


def _id_list(f, psize, page, start, size, nflags, file_pages):
    """The page numbers of one free DB record (its data at ``start`` of ``page``, or on its
    overflow pages)."""
    if nflags & F_BIGDATA:
        first = _ID.unpack_from(page, start)[0]
        head = _read_pages(f, psize, first, 1, file_pages)
        count = _OVERFLOW_PAGES.unpack_from(head, 12)[0]
        data = _read_pages(f, psize, first, count, file_pages)[_HEADER.size:_HEADER.size + size]
    else:
        data = page[start:start + size]
    n = _ID.unpack_from(data)[0] if len(data) >= _ID.size else 0
    n = min(n, len(data) // _ID.size - 1)
    return struct.unpack_from(f"<{n}Q", data, _ID.size)


def _read_pages(f, psize, pgno, count, file_pages):
    if pgno + count > file_pages or count < 1:
        raise MissingPage(f"page {pgno} (+{count}) lies past the file's {file_pages} whole pages")
    f.seek(pgno * psize)
    return f.read(count * psize)


# ------------------------------------------------------------ readahead on the map
# The environment maps data.mdb with readahead off (py-lmdb ``readahead=False``: LMDB's
# MADV_RANDOM), so that a random read of a big index does not pull in its neighbours. But
# py-lmdb touches every page of each value it returns (its ``preload``), so a value read
# whole, or even only looked at, was read page by page: one synchronous disk read, and under
# load one wait for a core, per 4 KiB (the 16 MB codec at 1M: 4,096; the runs of
# list-ordered codes: 67 MB). Before such values are fetched, the reads of exactly their
# pages are started at once (madvise MADV_WILLNEED): the values are found on their
# overflow pages by walking the sub-database's B-tree in the map (its few branch and leaf
# pages), from the root the caller's transaction sees. Advice only: the bytes are read, and
# checked, through py-lmdb as before; a walk that meets anything unexpected stops.
MADV_WILLNEED = 3
PAGE_BYTES = 4096
# one madvise starts at most max(read_ahead_kb, max_sectors_kb) of reads (8 MB on this
# machine's disk, 128 KB on some): longer spans are asked for in pieces of this size
WILLNEED_CHUNK = 256 << 10


def _madvise():
    """libc's madvise (ctypes), or None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _madvise()


def map_base(path):
    """The address at which this process maps byte 0 of the file ``path`` (a shared map,
    matched by device and inode in /proc/self/maps), or None."""
    try:
        st = os.stat(path)
        with open("/proc/self/maps") as fh:
            lines = fh.readlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 5 or parts[4] != str(st.st_ino) or not parts[1].endswith("s"):
            continue
        major, minor = (int(x, 16) for x in parts[3].split(":"))
        if os.makedev(major, minor) == st.st_dev:
            return int(parts[0].split("-")[0], 16) - int(parts[2], 16)
    return None


def big_values(base, file_bytes, psize, root, wanted=None):
    """{key: (address, size)} of the values stored on overflow pages in the B-tree of
    ``root`` (a sub-database's root page, as a transaction sees it), in the map at ``base``
    whose first ``file_bytes`` are the file's (no page past them is read); ``wanted(key) ->
    bool`` keeps some. Reads the tree's
    branch and leaf pages only; a page out of the file, or whose header is not the page's,
    stops the walk (what was found so far is returned)."""
    found, stack, read = {}, [root], 0
    while stack and read <= file_bytes // psize:
        pgno = stack.pop()
        read += 1
        if pgno == P_INVALID or (pgno + 1) * psize > file_bytes:
            break
        page = ctypes.string_at(base + pgno * psize, psize)
        own, _, flags, lower, _ = _HEADER.unpack_from(page)
        if own != pgno or flags & P_LEAF2 or not flags & (P_BRANCH | P_LEAF) or lower > psize:
            break
        for offset in struct.unpack_from(f"<{(lower - _HEADER.size) // 2}H", page, _HEADER.size):
            if offset + _NODE.size > psize:
                return found
            lo, hi, nflags, ksize = _NODE.unpack_from(page, offset)
            if flags & P_BRANCH:
                stack.append(lo | hi << 16 | nflags << 32)
                continue
            key = page[offset + _NODE.size:offset + _NODE.size + ksize]
            if nflags & F_BIGDATA and (wanted is None or wanted(key)):
                first, size = _ID.unpack_from(page, offset + _NODE.size + ksize)[0], lo | hi << 16
                if first * psize + _HEADER.size + size > file_bytes:  # past the file: damage
                    return found
                found[key] = (base + first * psize + _HEADER.size, size)
    return found


def will_need(spans):
    """Start reading the map's pages under ``spans`` [(address, length)] in the background
    (MADV_WILLNEED); nothing on a system without madvise."""
    if _MADVISE is None:
        return
    for address, length in spans:
        lo, hi = address - address % PAGE_BYTES, address + length
        for at in range(lo, hi, WILLNEED_CHUNK):
            _MADVISE(at, min(WILLNEED_CHUNK, hi - at), MADV_WILLNEED)


def address_of(view):
    """The address of the first byte of a buffer (a view of the map)."""
    return np.frombuffer(view, np.uint8).__array_interface__["data"][0]

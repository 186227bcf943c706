"""Damage found before it is served: LMDB's own header checked against the file's size,
CRC32C checksums of the blocks and blobs the index stores, LMDB's corruption errors and
the environment's write failures (disk full) turned into named errors.

LMDB header. ``data.mdb`` begins with two meta pages (pages 0 and 1; LMDB's ``MDB_meta``
in mdb.c, after the 16-byte page header): magic 0xBEEFC0DE, data version, address, map
size, the free and main ``MDB_db`` records (48 bytes each; the free DB's ``md_pad`` holds
the page size), the last page number ``mm_last_pg``, the transaction id ``mm_txnid``.
LMDB uses the meta with the higher txnid; every page up to its last page that is in use
must be in the file (the last transaction's loose pages, on the free list, may be
missing: :mod:`.lmdb_pages`). A shorter file (a partial copy, an interrupted rsync) would
be mapped and then read past its end: a SIGBUS, no message. :func:`check_lmdb_file`
refuses it first.

Checksums. CRC32C (the ``crc32c`` wheel: SSE4.2 / ARMv8 instructions, GB/s) of each
stored unit, kept with it in the same value (:func:`seal` appends 4 bytes, :func:`unseal`
checks and strips them) or, for the metadata blobs (encoder, codec, vocabulary), under the
key ``crc32c:<name>`` of ``meta`` (:func:`put_checked_meta` / :func:`get_checked_meta`).
"""

import errno
import os
import resource
import shutil
import struct
from pathlib import Path

import lmdb

from ..errors import DiskFullError, IndexCorruptError, NotAnIndexError, ReadOnlyIndexError
from .lmdb_pages import MissingPage, free_db_root, free_pages

try:
    from crc32c import crc32c as _crc32c
except ImportError:  # pragma: no cover - the wheel is a core dependency
    import zlib

    def _crc32c(data):
        return zlib.crc32(data)

MDB_MAGIC = 0xBEEFC0DE
MDB_DATA_VERSION = 1
P_META = 0x08  # MDB_page's mp_flags (offset 10) of a meta page
PAGE_HEADER = 16  # MDB_page on a 64-bit build: pgno (8), pad (2), flags (2), lower/upper (4)
_META = struct.Struct("<IIQQ48s48sQQ")  # magic, version, address, mapsize, dbs[2], last_pg, txnid
_PSIZE = struct.Struct("<I")  # mm_dbs[FREE_DBI].md_pad: the page size
CRC = struct.Struct("<I")
CRC_BYTES = CRC.size
# lmdb errors that mean the file's pages are not what LMDB wrote
CORRUPTION = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError, lmdb.BadValsizeError)
# What `streamk index verify --repair` (integrity_check) cannot rebuild in place: besides these blobs,
# the file itself (truncated, a damaged header), a B-tree LMDB cannot walk and a missing shard.
UNREPAIRABLE_META = (b"encoder",)  # nothing else in the index holds it
RESTORE = "restore a copy of the index or run `streamk index verify --repair {path}`"
RESTORE_COPY = "restore a copy of the index (a backup: `streamk index backup` makes them)"
RESTORE_ONLY = RESTORE_COPY + "; `streamk index verify --repair` cannot rebuild this in place"


def crc32c(data):
    return _crc32c(data)


def advice(path, repairable=True):
    """What to do about damage found in the index at ``path``, the one place that says it:
    ``repairable`` when ``streamk index verify --repair`` rebuilds that damage, else restore a copy."""
    return RESTORE.format(path=path) if repairable else RESTORE_ONLY


def corrupt(path, what, rows=None, repairable=True):
    """The IndexCorruptError for damage ``what`` in the index at ``path`` (``repairable``: see
    :func:`advice`); ``what`` is kept as the error's ``what``."""
    return IndexCorruptError(f"{path}: the index is damaged: {what}; " + advice(path, repairable),
                             path=path, rows=rows, what=what)


def describe_rows(rows):
    rows = list(rows)
    if not rows:
        return "no rows"
    if len(rows) > 2 and rows[-1] - rows[0] == len(rows) - 1:
        return f"rows {rows[0]}..{rows[-1]}"
    shown = ", ".join(str(r) for r in rows[:8])
    return ("row " if len(rows) == 1 else "rows ") + shown + (" ..." if len(rows) > 8 else "")


# ------------------------------------------------------------ LMDB's header
def read_lmdb_meta(data_file):
    """(page size, last page number, txnid) of the meta LMDB would use, or raise
    IndexCorruptError when neither meta page is valid. Reads two pages, maps nothing."""
    psize, last_pg, txnid, _ = _lmdb_meta(Path(data_file))
    return psize, last_pg, txnid


def _lmdb_meta(data_file):
    """read_lmdb_meta's answer and that meta's free DB record (48 bytes)."""
    with open(data_file, "rb") as f:
        head = f.read(PAGE_HEADER + _META.size)
        metas = []
        if len(head) == PAGE_HEADER + _META.size:
            psize = _PSIZE.unpack_from(head, PAGE_HEADER + 24)[0]
            if 512 <= psize <= 65536 and psize & (psize - 1) == 0:
                f.seek(psize)
                second = f.read(PAGE_HEADER + _META.size)
                for page in (head, second):
                    if len(page) < PAGE_HEADER + _META.size:
                        continue
                    magic, version, _, _, free_db, _, last_pg, txnid = _META.unpack_from(page, PAGE_HEADER)
                    p = _PSIZE.unpack_from(page, PAGE_HEADER + 24)[0]
                    if magic == MDB_MAGIC and version == MDB_DATA_VERSION and p == psize:
                        metas.append((txnid, last_pg, free_db))
    if not metas:
        raise corrupt(data_file.parent, f"{data_file.name} has no valid LMDB meta page "
                      f"({data_file.stat().st_size} bytes; a partial copy or a damaged header)", repairable=False)
    txnid, last_pg, free_db = max(metas)
    return psize, last_pg, txnid, free_db


def check_lmdb_file(path):
    """Raise IndexCorruptError unless ``path``/data.mdb holds every page its LMDB header
    names that is in use: size >= (last page + 1) x page size, or, where the file is
    shorter, every page past its end on LMDB's free list (a valid file can end so: pages
    allocated and freed in its last transaction are never written; see lmdb_pages). The
    meta is read before the size, so a commit in between only makes the file longer than
    asked."""
    data_file = Path(path) / "data.mdb"
    psize, last_pg, _, free_db = _lmdb_meta(data_file)
    need = (last_pg + 1) * psize
    size = data_file.stat().st_size
    if size < need:
        missing = _pages_in_use_past_end(data_file, psize, last_pg, free_db, size // psize)
        if missing:
            raise corrupt(path, f"data.mdb is truncated: {size:,} bytes, its LMDB header needs "
                          f"{need:,} ({last_pg + 1:,} pages of {psize} bytes; {missing}; a partial copy or "
                          f"an interrupted transfer)", repairable=False)
    return psize, last_pg


def _pages_in_use_past_end(data_file, psize, last_pg, free_db, file_pages):
    """'' when every page from ``file_pages`` to ``last_pg`` is on LMDB's free list, else
    what is missing."""
    try:
        with open(data_file, "rb") as f:
            free = free_pages(f, psize, free_db_root(free_db), file_pages, max_pages=file_pages)
    except MissingPage as e:
        return f"its free list cannot be read: {e}"
    used = [p for p in range(file_pages, last_pg + 1) if p not in free]
    if not used:
        return ""
    return f"{len(used):,} page(s) in use past its end, from page {used[0]:,}"


def header_faults(data_file):
    """What LMDB finds wrong with ``data_file``'s header when it opens it (mdb.c's
    mdb_env_read_header checks both meta pages: the meta flag, magic, data version): '' when
    nothing; LMDB refuses a file with either page damaged, though check_lmdb_file reads one."""
    faults = []
    with open(data_file, "rb") as f:
        head = f.read(PAGE_HEADER + _META.size)
        pages = [head]
        psize = _PSIZE.unpack_from(head, PAGE_HEADER + 24)[0] if len(head) == PAGE_HEADER + _META.size else 0
        if 512 <= psize <= 65536:
            f.seek(psize)
            pages.append(f.read(PAGE_HEADER + _META.size))
        for i, page in enumerate(pages):
            if len(page) < PAGE_HEADER + _META.size:
                faults.append(f"meta page {i} is missing")
                continue
            magic, version = struct.unpack_from("<II", page, PAGE_HEADER)
            flags = struct.unpack_from("<H", page, 10)[0]
            if not flags & P_META or magic != MDB_MAGIC:
                faults.append(f"meta page {i} is not an LMDB meta page")
            elif version != MDB_DATA_VERSION:
                faults.append(f"meta page {i} names data version {version}, not {MDB_DATA_VERSION}")
    return "; ".join(faults)


# an errno LMDB fails to open with when the folder cannot be written (py-lmdb keeps its text, not its number)
_CANNOT_WRITE = (errno.EROFS, errno.EACCES, errno.EPERM)


def open_error(path, exc, readonly):
    """The named error for LMDB's refusal ``exc`` (lmdb.Error or OSError) to open the index at
    ``path`` (``readonly``: how it was opened): a damaged header is an IndexCorruptError, a
    folder that cannot be written a ReadOnlyIndexError saying what still works; anything else
    a NotAnIndexError. LMDB's own words are kept in parentheses."""
    words = str(exc)
    words = words[len(f"{path}: "):] if words.startswith(f"{path}: ") else words
    code = getattr(exc, "errno", None)
    if not isinstance(code, int):
        code = next((c for c in _CANNOT_WRITE if os.strerror(c) in words), None)
    if code in _CANNOT_WRITE:
        if readonly:  # LMDB's readers write to lock.mdb; only on a read-only file system do they go without
            return ReadOnlyIndexError(f"{path}: cannot open the index: its folder cannot be written ({words}: a "
                                      f"read-only file system or no permission) and LMDB's readers write to its "
                                      f"lock file lock.mdb; search a copy (`cp -r`) or get write permission there")
        return ReadOnlyIndexError(f"{path}: the index's folder cannot be written ({words}: a read-only file system "
                                  f"or no permission): searches still work (they open it read-only); to change it, "
                                  f"copy it where you can write (`streamk index backup {path} COPY`) and write to "
                                  f"the copy")
    try:
        faults = header_faults(Path(path) / "data.mdb")
    except OSError:
        faults = ""
    if faults or isinstance(exc, CORRUPTION + (lmdb.VersionMismatchError,)):
        return corrupt(path, f"data.mdb is not a valid LMDB file: {faults or 'its header is damaged'} (LMDB: {words})",
                       repairable=False)
    return NotAnIndexError(f"{path}: cannot open as an LMDB index ({words})")


# ------------------------------------------------------------ checksums
def seal(value):
    """``value`` (bytes-like) followed by its CRC32C (4 bytes, little-endian)."""
    return bytes(value) + CRC.pack(crc32c(value))


def checksum_ok(value):
    """Whether a sealed value's last 4 bytes are the CRC32C of the rest."""
    if len(value) < CRC_BYTES:
        return False
    body = memoryview(value)[:-CRC_BYTES]
    return crc32c(body) == CRC.unpack_from(value, len(value) - CRC_BYTES)[0]


def unseal(value, path, what, rows=None):
    """The body of a sealed value (a view, no copy), or IndexCorruptError naming ``what``."""
    if not checksum_ok(value):
        raise corrupt(path, f"{what}: checksum mismatch", rows)
    return memoryview(value)[:-CRC_BYTES]


def crc_meta_key(key):
    return b"crc32c:" + (key.encode() if isinstance(key, str) else bytes(key))


def put_checked_meta(txn, db, key, value):
    """Store a metadata blob and its CRC32C (key ``crc32c:<key>``) in ``db``."""
    key = key.encode() if isinstance(key, str) else bytes(key)
    txn.put(key, value, db=db)
    txn.put(crc_meta_key(key), CRC.pack(crc32c(value)), db=db)


def get_checked_meta(txn, db, key, path):
    """A metadata blob checked against its CRC32C (None when absent; a blob stored without
    one, by an older streamk, is returned as is)."""
    key = key.encode() if isinstance(key, str) else bytes(key)
    value = txn.get(key, db=db)
    if value is None:
        return None
    crc = txn.get(crc_meta_key(key), db=db)
    if crc is not None and (len(crc) != CRC_BYTES or CRC.unpack(bytes(crc))[0] != crc32c(value)):
        raise corrupt(path, f"the stored {key.decode()} fails its checksum", repairable=key not in UNREPAIRABLE_META)
    return value


# ------------------------------------------------------------ the environment's write failures
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def free_bytes(path):
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def disk_full(path, exc, needed):
    """A DiskFullError for a write to the index at ``path`` that failed with ``exc``, or
    None when ``exc`` is not a lack of space (ENOSPC, EDQUOT, EFBIG; or an I/O error --
    LMDB reports a short write as EIO -- while the disk, or the file size limit, has less
    room than the write needed)."""
    code = getattr(exc, "errno", None)
    text = str(exc)
    if not isinstance(code, int):
        code = next((c for c in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
                     if os.strerror(c) in text), None)
    if code not in _FULL + (errno.EIO,):
        return None
    free = free_bytes(path)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    size = _file_size(path)
    if code == errno.EIO:
        short_of_disk = free is not None and free < needed + (1 << 20)
        short_of_limit = limit != resource.RLIM_INFINITY and size + needed > limit
        if not (short_of_disk or short_of_limit):
            return None
    if code == errno.EFBIG or (limit != resource.RLIM_INFINITY and size + needed > limit
                               and (free is None or free >= needed)):
        where = f"the file size limit ({limit:,} bytes, ulimit -f) stops {path}/data.mdb at {size:,} bytes"
    else:
        where = f"no space left on the disk holding {path} ({free:,} bytes free)" if free is not None \
            else f"no space left on the disk holding {path}"
    return DiskFullError(f"{where}; this write needs about {needed:,} bytes more: nothing of it was stored; "
                         f"free some space and run it again", path=path, needed=needed)


def _file_size(path):
    try:
        return (Path(path) / "data.mdb").stat().st_size
    except OSError:
        return 0


def check_room(path, needed):
    """Raise DiskFullError when the disk holding ``path`` has less than ``needed`` bytes
    free (before creating files LMDB maps: a write into a mapped page of a full disk is a
    SIGBUS, not an error)."""
    free = free_bytes(path)
    if free is not None and free < needed:
        raise DiskFullError(f"no space left on the disk holding {path} ({free:,} bytes free, {needed:,} "
                            f"needed): free some space and run it again", path=path, needed=needed)


__all__ = ["CORRUPTION", "CRC_BYTES", "RESTORE_COPY", "UNREPAIRABLE_META", "advice", "check_lmdb_file", "check_room",
           "checksum_ok", "corrupt", "crc32c", "describe_rows", "disk_full", "get_checked_meta", "header_faults",
           "open_error", "put_checked_meta", "read_lmdb_meta", "seal", "unseal"]

"""``streamk index verify``: check every stored unit of an index against its checksum and
every record against the rest, and optionally repair what can be rebuilt.

What is checked (one read transaction, a progress bar over the entries):

- the file against LMDB's header (truncation), the B-trees as they are walked;
- the encoder, codec and vocabulary blobs (CRC32C);
- every vector block (CRC32C of the block, then of each row of a damaged one);
- every image record: its CRC32C (format 4), a valid id, readable JSON, its row live, below
  ``next_row``, named by ``row_ids``, its vector intact; every ``row_ids`` entry: an image that
  names that row; the removal marks (``dead``): a row is live exactly when a record names it;
- the codes of the codec in use: every sealed block and row code (CRC32C), one code per live row;
- the local-geometry records (their own CRC) and the blobs of SEALED_SUBDBS (CRC32C);
- the filters' posting lists (exactly the postings the live rows' metadata calls for) and range
  columns (the same records as the posting lists, in order);
- the counts: images = row ids = live rows (= coded rows, with a codec).

Repair (``repair=True``, write transactions; readers reload): images whose vector or record is
unreadable are removed and listed as lost; a damaged vector block is rewritten with its intact
rows; missing ``row_ids`` entries are restored; damaged codes are computed again from the
vectors with the stored codec (a damaged codec is dropped: search falls back to exact until
``streamk index train``); damaged geometry records and blobs are dropped (listed); stray
postings are dropped, missing ones added from the metadata, and the range columns rebuilt from
the posting lists; removal marks that disagree with the records are written again from them. Damage that
cannot be repaired in place (a truncated file, an unreadable B-tree, the encoder) is reported:
restore a copy. After a repair the index is verified again.
"""

from dataclasses import dataclass, field
from pathlib import Path

import lmdb
import numpy as np

from ..errors import GeometryRecordError, IndexCorruptError, StreamkError
from ..quantization import IVFPQ, NO_LIST
from ..verification import parse_header
from .blocks import RUN_BLOCKS, check_run, checked_block, pack_block, pack_codes, seal_row_codes, split_block, write_run
from . import range_columns
from .integrity import (CORRUPTION, CRC_BYTES, RESTORE_COPY, UNREPAIRABLE_META, check_lmdb_file, checksum_ok,
                        describe_rows)
from .metadata import decode_metadata, expected_columns, indexed_fields, posting_keys, rebuild_columns
from .store import (CHECKED_META, SEALED_SUBDBS, ImageRecord, Store, blob_entry, epoch_key, epoch_key_split,
                    not_an_index, removed_rows, row_from_key, row_key, validate_id)


@dataclass
class IntegrityReport:
    """What :func:`check_index` found (and, with repair, did)."""

    path: str
    counts: dict = field(default_factory=dict)  # images, row_ids, live_rows, coded_rows, vector_blocks, ...
    damaged: list = field(default_factory=list)  # one line per damaged unit found
    remaining: list | None = None  # with repair: the damage a second verification still finds
    unrepairable: list = field(default_factory=list)  # damage a repair cannot fix in place
    lost: list = field(default_factory=list)  # ids removed by a repair (their data was unreadable)
    repaired: list = field(default_factory=list)  # one line per repair done
    shards: list = field(default_factory=list)  # the reports of a sharded index's shards

    @property
    def ok(self):
        """No damage (after a repair: none left)."""
        left = self.damaged if self.remaining is None else self.remaining
        return not left and all(s.ok for s in self.shards)

    def lines(self):
        out = []
        for s in self.shards:
            out += s.lines()
        if self.shards:
            return out
        if not self.damaged:
            head = "clean"
        elif self.remaining is None:
            head = f"DAMAGED ({len(self.damaged)} finding(s))"
        else:
            head = "repaired" if self.ok else f"DAMAGED, {len(self.remaining)} finding(s) left after the repair"
        counts = ", ".join(f"{k} {v:,}" for k, v in self.counts.items())  # none: the file could not be opened
        out.append(f"{self.path}: {head}" + (f"; {counts}" if counts else ""))
        out += [f"  damaged: {d}" for d in self.damaged]
        out += [f"  repaired: {r}" for r in self.repaired]
        if self.lost:
            shown = ", ".join(self.lost[:20]) + (f" ... ({len(self.lost)} in all)" if len(self.lost) > 20 else "")
            out.append(f"  lost ({len(self.lost)} images): {shown}")
        out += [f"  still damaged: {d}" for d in self.remaining or []]
        out += [f"  cannot repair in place: {u}" for u in self.unrepairable]
        if self.unrepairable:
            out.append(f"  {RESTORE_COPY}")
        if self.damaged and self.remaining is None and not self.unrepairable:
            out.append(f"  run `streamk index verify --repair {self.path}` to repair it")
        return out

    def to_dict(self):
        return {"path": self.path, "ok": self.ok, "counts": self.counts, "damaged": self.damaged,
                "remaining": self.remaining,
                "unrepairable": self.unrepairable, "repaired": self.repaired, "lost": self.lost,
                "shards": [s.to_dict() for s in self.shards]}


class _Scan:
    """Everything one verification pass finds, by kind."""

    def __init__(self):
        self.bad_meta = []  # meta keys whose blob fails
        self.bad_vector_rows = set()  # rows whose stored vector fails its CRC
        self.bad_blocks = set()  # vector blocks that fail their CRC (or size)
        self.blocks = set()  # vector blocks present
        self.records = {}  # row -> id key of every readable record
        self.bad_records = []  # id keys whose record is unreadable
        self.row_ids = {}  # row -> id key
        self.bad_code_blocks = set()
        self.bad_code_rows = set()
        self.bad_code_runs = set()  # first blocks of the list-ordered runs that fail a check
        self.coded = set()  # rows with a readable code (list != NO_LIST)
        self.bad_geometry = []
        self.bad_blobs = []  # (sub-db, key)
        self.hashes = {}  # content key -> id key
        self.postings = []  # (field + value key, row) of the metadata filters' posting lists
        self.meta_rows = set()  # rows with a readable metadata object
        self.expected_postings = set()  # (field + value key, row) the readable metadata calls for
        self.columns = {}  # column key prefix -> (records, problems) of the range columns
        self.expected_columns = {}  # column key prefix -> the records its posting lists call for
        self.bad_columns = []  # column key prefixes that disagree with the posting lists
        self.unreadable = []  # sub-databases whose B-tree cannot be walked


def _walk(store, name, scan, bar):
    """(key, value) of a sub-database, in a read transaction of its own (LMDB's errors end
    a transaction); an unreadable B-tree is noted, not raised; nothing for one absent."""
    if store.subdb(name) is None:
        return
    try:
        with store.env.begin() as txn, txn.cursor(db=store.subdb(name)) as cur:
            for k, v in cur:
                bar.update(1)
                yield bytes(k), v
    except CORRUPTION as exc:
        scan.unreadable.append(f"the B-tree of '{name}' ({exc})")


def _scan_meta(store, s):
    """The checked metadata blobs, the counters, the codec's M and the entries to walk."""
    with store.read() as txn:
        for key in CHECKED_META:
            try:
                store.get_meta(key, txn)
            except IndexCorruptError:
                s.bad_meta.append(key.decode())
        s.next_row = store.get_int(b"next_row", txn)
        s.fields = indexed_fields(txn, store)
        s.epoch = store.get_int(b"codec_epoch", txn)
        s.M = s.nlist = None
        if s.epoch and "codec" not in s.bad_meta:
            try:
                codec = IVFPQ.from_bytes(store.get_meta(b"codec", txn))
                s.M, s.nlist = codec.M, codec.nlist
            except (StreamkError, ValueError, TypeError):
                s.bad_meta.append("codec")
        walked = [store.subdb(n) for n in _WALKED]
        total = sum(txn.stat(db)["entries"] for db in walked if db is not None)
    try:
        with store.read() as txn:
            s.dead = removed_rows(txn, store, s.next_row)
    except IndexCorruptError as exc:
        s.unreadable.append(f"the B-tree of 'dead' ({exc})")
        s.dead = np.zeros(s.next_row, np.uint8)
    return total


# the sub-databases a verification walks entry by entry (its progress bar counts them)
_WALKED = ("vectors", "images", "row_ids", "hashes", "codes", "code_blocks", "code_runs", "geometry", "postings",
           *SEALED_SUBDBS)


def _scan(store, progress):
    from tqdm.auto import tqdm  # (imported here: it loads asyncio, a cost to every command)

    s = _Scan()
    s.vectors = store.vector_store()
    total = _scan_meta(store, s)
    with tqdm(total=total, desc="verify", unit="entry", disable=progress is False or None) as bar:
        for k, v in _walk(store, "vectors", s, bar):
            block = row_from_key(k)
            s.blocks.add(block)
            if not s.vectors.block_ok(v):
                s.bad_blocks.add(block)
                ok = s.vectors.rows_ok(v)
                s.bad_vector_rows.update(int(block * s.vectors.block_rows + i) for i in np.flatnonzero(~ok))
        for k, v in _walk(store, "images", s, bar):
            try:
                s.records[ImageRecord.decode(v, store.path, validate_id(k.decode("utf-8"))).row] = k
            except (StreamkError, ValueError):
                s.bad_records.append(k)
        for k, v in _walk(store, "row_ids", s, bar):
            s.row_ids[row_from_key(k)] = bytes(v)
        for k, v in _walk(store, "hashes", s, bar):
            s.hashes[k] = bytes(v)
        if s.epoch and s.M is not None:
            _scan_codes(store, s, bar)
        for k, v in _walk(store, "geometry", s, bar):
            try:
                parse_header(v)
            except GeometryRecordError:
                s.bad_geometry.append(row_from_key(k))
        for name in SEALED_SUBDBS:
            for k, v in _walk(store, name, s, bar):
                if not checksum_ok(v):
                    s.bad_blobs.append((name, k))
                elif name == "metadata":
                    _expect_postings(s, row_from_key(k), v, name, k)
        for k, v in _walk(store, "postings", s, bar):
            s.postings.append((k, row_from_key(v)))
        if store.columns_db is not None and store.postings_db is not None:
            _scan_columns(store, s)
    return s


def _expect_postings(s, row, sealed, name, key):
    """Note the postings the metadata of ``row`` (a sealed value, checksum checked) calls for."""
    try:
        metadata = decode_metadata(sealed[:-CRC_BYTES])
        keys = posting_keys(s.fields, metadata) if isinstance(metadata, dict) else None
    except ValueError:
        keys = None
    if keys is None:
        s.bad_blobs.append((name, key))
        return
    s.meta_rows.add(row)
    s.expected_postings.update((k, row) for k in keys)


def _scan_codes(store, s, bar):
    """The sealed blocks and row codes of the codec in use: their CRC32C and the rows coded."""
    B, M, epoch = store.block_rows, s.M, s.epoch
    for k, v in _walk(store, "code_blocks", s, bar):
        e, block = epoch_key_split(k)
        if e != epoch:
            continue
        try:
            lists, _ = split_block(checked_block(store, v, e, block, M), M, B)
            s.coded.update((block * B + np.flatnonzero(lists != NO_LIST)).tolist())
        except IndexCorruptError:
            s.bad_code_blocks.add(block)
    for k, v in _walk(store, "codes", s, bar):
        e, row = epoch_key_split(k)
        if e != epoch:
            continue
        if len(v) != 4 + M + CRC_BYTES or not checksum_ok(v):
            s.bad_code_rows.add(row)
        elif int.from_bytes(bytes(v[:4]), "little") != NO_LIST:
            s.coded.add(row)
    for k, v in _walk(store, "code_runs", s, bar):  # the same codes in list order: checked whole
        e, first = epoch_key_split(k)
        if e != epoch:
            continue
        try:
            check_run(store, v, e, first, s.nlist, M)
        except IndexCorruptError:
            s.bad_code_runs.add(first)


def _scan_columns(store, s):
    """Read the range columns and what the posting lists call for (in a read transaction of its own)."""
    try:
        with store.read() as txn, txn.cursor(db=store.columns_db) as cur:
            s.expected_columns = expected_columns(txn, store, s.postings)
            for kp in s.expected_columns:
                s.columns[kp] = range_columns.records_of(cur, kp)
    except CORRUPTION as exc:
        s.unreadable.append(f"the B-tree of 'columns' ({exc})")


def _report(store, s, report):
    live = np.flatnonzero(s.dead[:s.next_row] == 0) if s.next_row else np.zeros(0, np.int64)
    live_set = set(live.tolist())
    report.counts = {"images": len(s.records) + len(s.bad_records), "row_ids": len(s.row_ids),
                     "live_rows": len(live_set), "vector_blocks": len(s.blocks)}
    if s.epoch:
        report.counts["coded_rows"] = len(s.coded & live_set)
    d = report.damaged
    d += [f"the stored {m} fails its checksum" for m in s.bad_meta]
    d += [f"the B-tree is unreadable: {u}" for u in s.unreadable]
    report.unrepairable += s.unreadable
    report.unrepairable += [f"the {m}" for m in s.bad_meta if m.encode() in UNREPAIRABLE_META]
    if s.bad_blocks:
        rows = sorted(s.bad_vector_rows & live_set)
        d.append(f"{len(s.bad_blocks)} vector block(s) fail their checksum"
                 + (f"; unreadable vectors of live {describe_rows(rows)}" if rows else "; no live row lost"))
    d += [f"the record of id {k.decode('utf-8', 'replace')!r} is unreadable" for k in s.bad_records]
    missing_vec = sorted(r for r in s.records if r in live_set and s.vectors.block_rows and
                         r // s.vectors.block_rows not in s.blocks)
    if missing_vec:
        d.append(f"no vector block for {describe_rows(missing_vec)}")
    walked = not any(f"'{name}'" in u for u in s.unreadable for name in ("images", "row_ids", "hashes", "dead"))
    for row, key in sorted(s.records.items()) if walked else ():
        if row not in live_set:
            d.append(f"the record of {key.decode()!r} names row {row}, which is removed or past next_row")
        elif s.row_ids.get(row) != key:
            d.append(f"row_ids of row {row} does not name {key.decode()!r}")
    orphans = sorted(r for r, k in s.row_ids.items() if s.records.get(r) != k and k not in s.bad_records)
    if orphans and walked:
        d.append(f"row_ids of {describe_rows(orphans)} name no image record")
    # the removal marks against the records: a row is live exactly when a record names it
    record_rows = {r for r in s.records if r < s.next_row} | {r for r, k in s.row_ids.items() if k in s.bad_records}
    s.wrong_dead = walked and not s.unreadable and record_rows != live_set
    if s.wrong_dead:
        d.append(f"the removal marks disagree with the records: {describe_rows(sorted(record_rows - live_set))} "
                 f"marked removed, {describe_rows(sorted(live_set - record_rows))} live without a record"
                 .replace("no rows", "none"))
    ids = set(s.records.values())
    s.orphan_hashes = [k for k, v in s.hashes.items() if v not in ids] if walked else []
    live_rows = record_rows if s.wrong_dead else live_set  # what the repair makes live
    s.orphan_postings = [(k, r) for k, r in s.postings if r not in live_rows or (k, r) not in s.expected_postings] \
        if walked else []
    if s.orphan_postings:
        d.append(f"{len(s.orphan_postings)} filter posting(s) name rows without that metadata (of "
                 f"{describe_rows(sorted({r for _, r in s.orphan_postings}))})")
    posted = set(s.postings)
    s.missing_postings = sorted(p for p in s.expected_postings if p[1] in live_rows and p not in posted) \
        if walked else []
    if s.missing_postings:
        d.append(f"{len(s.missing_postings)} filter posting(s) missing for the metadata of "
                 f"{describe_rows(sorted({r for _, r in s.missing_postings}))}")
    for kp, want in s.expected_columns.items():
        records, problems = s.columns.get(kp, ([], []))
        got = set(records)
        if problems or got != want or len(records) != len(got):
            s.bad_columns.append(kp)
            field, tag = kp[:-2].decode("utf-8", "replace"), {b"n": "numbers", b"s": "strings"}[kp[-1:]]
            d.append(f"the range column of field {field!r} ({tag}) disagrees with its posting lists: "
                     f"{len(want - got)} record(s) missing, {len(got - want)} extra"
                     + "".join(f"; {p}" for p in dict.fromkeys(problems)))
    if s.orphan_hashes:
        d.append(f"{len(s.orphan_hashes)} content key(s) name no readable image (de-duplication would refuse them)")
    if s.bad_code_blocks:
        d.append(f"{len(s.bad_code_blocks)} code block(s) fail their checksum (blocks "
                 f"{', '.join(map(str, sorted(s.bad_code_blocks)[:8]))})")
    if s.bad_code_rows:
        d.append(f"the PQ codes of {describe_rows(sorted(s.bad_code_rows))} fail their checksum")
    d += [f"{len(s.bad_code_runs)} list-ordered run(s) of codes fail their checksum"] if s.bad_code_runs else []
    if s.epoch and "codec" not in s.bad_meta:
        uncoded = sorted(live_set - s.coded - _rows_of_blocks(s.bad_code_blocks, store.block_rows) - s.bad_code_rows)
        if uncoded:
            d.append(f"no PQ code for live {describe_rows(uncoded)}")
    if s.bad_geometry:
        d.append(f"the local-geometry records of {store.images_of_rows(sorted(s.bad_geometry))} fail their checks")
    d += [f"{blob_entry(name, k)} fails its checksum" for name, k in s.bad_blobs]
    if len(s.records) + len(s.bad_records) != len(live_set) and not s.unreadable:
        d.append(f"counts differ: {len(s.records) + len(s.bad_records)} image records, {len(live_set)} live rows")
    return live_set


def _rows_of_blocks(blocks, B):
    return set(r for b in blocks for r in range(b * B, (b + 1) * B))


def _repair(store, s, live_set, report, progress):
    """Repair what ``s`` found (see the module doc); fills report.repaired and report.lost."""
    B = s.vectors.block_rows
    lost_rows = sorted((s.bad_vector_rows & live_set)
                       | {r for r in s.records if r in live_set and r // B not in s.blocks})
    lost_keys = {s.records.get(r) or s.row_ids.get(r) for r in lost_rows} | set(s.bad_records)
    lost_keys.discard(None)
    bad_record_rows = sorted(r for r, k in s.row_ids.items() if k in s.bad_records)
    drop_rows = sorted(set(lost_rows) | set(bad_record_rows))

    def remove_lost(txn):
        if s.wrong_dead:
            _rebuild_removal_marks(txn, store, s)
        for key in lost_keys:  # the image's data is damaged: nothing of it is read but its content key
            store.delete_id(txn, key, _content_key(txn, store, key))
        for row in drop_rows:
            store.delete_row(txn, row, salvage=True)
        _rewrite_vector_blocks(txn, store, s)
        _restore_row_ids(txn, store, s, live_set, set(drop_rows), lost_keys)
        _drop_damaged(txn, store, s, set(drop_rows))
    if s.wrong_dead or s.bad_columns or s.orphan_postings or s.missing_postings or lost_keys or drop_rows \
            or s.bad_blocks or s.bad_geometry or s.bad_blobs or s.orphan_hashes \
            or any("row_ids" in d for d in report.damaged):
        store.write(remove_lost)
        report.lost = sorted(k.decode("utf-8", "replace") for k in lost_keys)
        report.repaired += [line for ok, line in (
            (s.bad_blocks, f"{len(s.bad_blocks)} vector block(s) rewritten with their intact rows"),
            (drop_rows, f"{len(drop_rows)} image(s) with unreadable data removed (listed as lost)"),
            (s.bad_geometry, f"{len(s.bad_geometry)} damaged geometry record(s) dropped (those images are "
                             "no longer spatially verified; `streamk index add-local-features` adds them)"),
            (s.bad_blobs, f"{len(s.bad_blobs)} damaged blob(s) dropped"),
            (s.wrong_dead, "the removal marks rewritten from the records"),
            (s.bad_columns, f"{len(s.bad_columns)} range column(s) rebuilt from the posting lists")) if ok]
    if "vocabulary" in s.bad_meta:
        def drop_vocabulary(txn):
            for key in (b"vocabulary", b"crc32c:vocabulary"):
                txn.delete(key, db=store.meta_db)
            store.put_int(txn, b"local_features", 0)
        store.write(drop_vocabulary)
        report.repaired.append("the damaged vocabulary dropped: the second stage is off until "
                               "`streamk index add-local-features`")
    if s.epoch:
        _repair_codes(store, s, live_set - set(drop_rows), report, progress)


def _content_key(txn, store, key):
    """The content key of the record under ``key``, None when it has none or is unreadable."""
    try:
        record = store.image(txn, key)
    except StreamkError:
        return None
    return None if record is None else record.content_key


def _rewrite_vector_blocks(txn, store, s):
    """Each damaged vector block rewritten with its intact rows, zeros elsewhere (dropped when none is left)."""
    vectors, B = s.vectors, s.vectors.block_rows
    for block in sorted(s.bad_blocks):
        raw = txn.get(row_key(block), db=store.vectors_db)
        ok = vectors.rows_ok(raw) if raw is not None else np.zeros(B, bool)
        V = vectors.block_vectors(raw).copy() if raw is not None and len(raw) == vectors.value_bytes \
            else np.zeros((B, vectors.dim), vectors.dtype)
        V[~ok] = 0
        if V.any():
            txn.put(row_key(block), vectors.pack_block(V), db=store.vectors_db)
        else:
            txn.delete(row_key(block), db=store.vectors_db)


def _restore_row_ids(txn, store, s, live_set, dropped, lost_keys):
    """row_ids named again for intact images, dropped where they name no record."""
    restored = set()
    for row, key in s.records.items():
        if (row in live_set or s.wrong_dead) and row < s.next_row and row not in dropped \
                and s.row_ids.get(row) != key:
            txn.put(row_key(row), key, db=store.row_ids_db)
            restored.add(row)
    for row, key in s.row_ids.items():
        if row not in restored and s.records.get(row) != key and key not in s.bad_records and key not in lost_keys:
            txn.delete(row_key(row), db=store.row_ids_db)


def _rebuild_removal_marks(txn, store, s):
    """The ``dead`` bitmaps written again from the records: a row below next_row is removed
    unless a readable record names it (an image with an unreadable record is removed after)."""
    B = store.block_rows
    live = np.zeros(max(s.next_row, 1), bool)
    live[[r for r in s.records if r < s.next_row]] = True
    for block in range((s.next_row + B - 1) // B):
        removed = ~live[block * B:(block + 1) * B]
        bits = np.zeros(B, np.uint8)
        bits[:len(removed)] = removed
        packed = np.packbits(bits, bitorder="little").tobytes()
        if packed.strip(b"\0"):
            txn.put(row_key(block), packed, db=store.dead_db)
        else:
            txn.delete(row_key(block), db=store.dead_db)
    store.bump(txn, b"*", 0)  # readers load everything again


def _drop_damaged(txn, store, s, dropped):
    """Orphan content keys, damaged geometry records and blobs dropped; the posting lists
    keep only live rows with metadata, and the range columns follow them."""
    for ck in s.orphan_hashes:
        txn.delete(ck, db=store.hashes_db)
    for row in s.bad_geometry:
        txn.delete(row_key(row), db=store.geometry_db)
    for name, key in s.bad_blobs:
        txn.delete(key, db=store.subdb(name))
    gone = dropped | {row_from_key(k) for name, k in s.bad_blobs if name == "metadata"}
    orphans = set(s.orphan_postings)
    for key, row in s.postings:
        if row in gone or (key, row) in orphans:
            txn.delete(key, row_key(row), db=store.postings_db)
    for key, row in s.missing_postings:
        if row not in gone:
            txn.put(key, row_key(row), db=store.postings_db, dupdata=True)
    if s.bad_columns or s.expected_columns and (orphans or gone or s.missing_postings):
        rebuild_columns(txn, store)


def _repair_codes(store, s, live_set, report, progress):
    B = store.block_rows
    if "codec" in s.bad_meta:
        from .retraining import Trainer

        def drop(txn):
            for key in (b"codec", b"crc32c:codec"):
                txn.delete(key, db=store.meta_db)
            store.put_int(txn, b"codec_epoch", 0)
            store.bump(txn, b"*", 0)
        store.write(drop)
        Trainer(store, s.vectors.dim, s.vectors.dtype, progress=False).drop_epoch(s.epoch)
        report.repaired.append("the damaged codec dropped: searches are exact until `streamk index train`")
        return
    uncoded = live_set - s.coded - _rows_of_blocks(s.bad_code_blocks, B) - s.bad_code_rows
    if not (s.bad_code_blocks or s.bad_code_rows or uncoded or s.bad_code_runs):
        return
    with store.read() as txn:
        codec = IVFPQ.from_bytes(store.get_meta(b"codec", txn))
    epoch = s.epoch

    def codes_of(txn, rows):
        rows = np.asarray(sorted(rows), np.int64)
        if not len(rows):
            return rows, np.zeros(0, np.uint32), np.zeros((0, codec.M), np.uint8)
        lists, codes = codec.encode(s.vectors.get(txn, rows))
        return rows, lists, codes

    def rewrite(txn):
        for block in sorted(s.bad_code_blocks):
            rows = [r for r in range(block * B, (block + 1) * B) if r in live_set]
            rows, lists, codes = codes_of(txn, rows)
            block_lists = np.full(B, NO_LIST, np.uint32)
            block_codes = np.zeros((B, codec.M), np.uint8)
            block_lists[rows - block * B], block_codes[rows - block * B] = lists, codes
            txn.put(epoch_key(epoch, block), pack_block(block_lists, block_codes), db=store.code_blocks_db)
        redo = sorted((s.bad_code_rows | uncoded) - _rows_of_blocks(s.bad_code_blocks, B))
        sealed = {r for r in redo if txn.get(epoch_key(epoch, r // B), db=store.code_blocks_db) is not None}
        rows, lists, codes = codes_of(txn, [r for r in redo if r not in sealed])
        for r, value in zip(rows.tolist(), seal_row_codes(pack_codes(lists, codes))):
            txn.put(epoch_key(epoch, r), value, db=store.codes_db)
        for b in sorted({r // B for r in sealed}):  # a live row missing from a sealed block
            raw = checked_block(store, txn.get(epoch_key(epoch, b), db=store.code_blocks_db), epoch, b, codec.M)
            bl, bc = split_block(raw, codec.M, B)
            bl, bc = bl.copy(), bc.copy()
            rows, lists, codes = codes_of(txn, [r for r in sealed if r // B == b])
            bl[rows - b * B], bc[rows - b * B] = lists, codes
            txn.put(epoch_key(epoch, b), pack_block(bl, bc), db=store.code_blocks_db)
        changed = s.bad_code_blocks | {r // B for r in sealed}
        for first in sorted({b - b % RUN_BLOCKS for b in changed} | s.bad_code_runs):  # runs made again
            if not write_run(txn, store, epoch, first, codec.M, codec.nlist) and store.code_runs_db is not None:
                txn.delete(epoch_key(epoch, first), db=store.code_runs_db)
        store.bump(txn, b"*", 0)  # readers load the codes again
    store.write(rewrite)
    report.repaired.append(f"PQ codes computed again from the vectors: {len(s.bad_code_blocks)} block(s), "
                           f"{len(s.bad_code_rows | uncoded)} row(s)"
                           + (f"; {len(s.bad_code_runs)} run(s) made again" if s.bad_code_runs else ""))


def check_index(path, repair=False, progress=None):
    """Check the index at ``path`` (a sharded one: each shard); with ``repair``, rebuild what
    can be rebuilt and verify again. Returns a :class:`IntegrityReport` (``report.ok``)."""
    from .sharded import is_sharded, missing_shard, read_manifest

    path = Path(path)
    if is_sharded(path):
        report = IntegrityReport(str(path))
        for n, d in enumerate(read_manifest(path)["dirs"]):
            if (path / d).is_dir():
                report.shards.append(check_index(path / d, repair=repair, progress=progress))
            else:  # damage too, and nothing here holds what it held
                missing = IntegrityReport(str(path / d), damaged=[missing_shard(path, n, d)])
                missing.unrepairable.append(f"shard {n}, missing")
                report.shards.append(missing)
        return report
    if not (path / "data.mdb").is_file():  # before reading its header: nothing there is no damage
        raise not_an_index(path)
    report = IntegrityReport(str(path))
    try:
        check_lmdb_file(path)
        store = Store.open(path, readonly=not repair)
    except IndexCorruptError as exc:
        report.damaged.append(exc.what or str(exc))
        report.unrepairable.append("the LMDB file itself")
        return report
    try:
        s = _scan(store, progress)
        live_set = _report(store, s, report)
        if repair and report.damaged and not s.unreadable and not report.unrepairable:
            _repair(store, s, live_set, report, progress)
            after = IntegrityReport(str(path))
            _report(store, _scan(store, False), after)
            report.counts, report.remaining = after.counts, after.damaged
    except lmdb.Error as exc:  # pragma: no cover - what the walks above did not catch
        report.damaged.append(f"LMDB: {exc}")
        report.unrepairable.append("the LMDB file")
    finally:
        store.close()
    return report


__all__ = ["IntegrityReport", "check_index"]

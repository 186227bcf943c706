"""Older index formats to the current one (4), in place.

Format 4 without runs (written before streamk 0.3 wrote them): the list-ordered runs of
its sealed codes (:mod:`streamk.index.blocks`) are written, so that a reader's first search
reads only the lists it probes (without them it reads every code, as before). The format's
tag stays 4: runs are derived data that an older streamk ignores. Every older format gets
them too, after its conversion.

Format 3 -> 4 (checksums on what format 3 left unsealed): every image record and display
extra is rewritten followed by its CRC32C.

Format 2 -> 4 (checksums): every vector block is rewritten with its CRC32C and its rows'
(:mod:`streamk.index.vector_store`), every code block and row code gains its CRC32C
(:mod:`streamk.index.blocks`), the encoder, codec and vocabulary blobs their
``crc32c:`` keys, the image records and the blobs of SEALED_SUBDBS their CRC32C. Format 1 -> 4 converts
everything as below, writing the checksums as it goes.

One write transaction: a crash or an error leaves the index as it was. What
changes from format 1 (streamk 0.1: everything keyed by image id): each image gets a row (in
id order); its vector and id move under
that row; the flat-PQ codes become the codes of an nlist = 1 codec (epoch 1),
sealed in blocks; the old change log (of ids) is replaced by one reload mark;
the metadata gains the dimension, the row counter and the codec. The image
records, extras and content keys stay. Row keys (8 bytes, first byte 0) and
epoch keys never collide with ids (no id starts with a control character), so
keys move within their sub-database.
"""

import json
import struct

import lmdb
import numpy as np
from tqdm.auto import tqdm

from ..encoding import Encoder
from ..errors import ConfigError, IndexFormatError, NotAnIndexError
from .blocks import pack_codes, seal_block, seal_row_codes, write_missing_runs
from .integrity import CORRUPTION, check_lmdb_file, corrupt, disk_full, open_error, put_checked_meta, seal
from ..quantization import IVFPQ
from ..quantization import ProductQuantizer
from .store import (BLOCK_ROWS, CHECKED_META, FORMAT, FORMAT_VERSION, OPTIONAL_SUBDBS, SEALED_SUBDBS, SUBDBS,
                    Store, epoch_key, not_an_index, row_key, seq_key, unnumbered_image_fields)
from .vector_store import VectorStore

V1_SUBDBS = ("meta", "images", "extras", "vectors", "codes", "hashes", "log")


def upgrade(path, progress=None):
    """Upgrade the index of format 1, 2 or 3 at ``path`` to format 4 (checksums on every
    stored record and blob), with the list-ordered runs of its codes; an index of format
    4 written before runs gets its runs (IndexFormatError when it has them all: already
    upgraded). Returns its number of images. One write transaction, with a progress bar
    (``progress=False``: none). A sharded index is refused (ConfigError): each of its shards
    is an index folder to upgrade."""
    from pathlib import Path

    path = Path(path)
    if not (path / "data.mdb").is_file() and (path / "shards.json").is_file():
        from .sharded import read_manifest  # (here only: the upgrade of one folder needs none of it)

        dirs = [str(path / d) for d in read_manifest(path)["dirs"]]
        raise ConfigError(f"{path} is a sharded index ({len(dirs)} shards): `streamk index upgrade` works on a single "
                          f"index; each shard is one, upgrade each shard's folder in place on the machine that holds "
                          f"it ({', '.join(dirs[:3])}{', ...' if len(dirs) > 3 else ''})")
    if not (path / "data.mdb").is_file():
        raise not_an_index(path)
    check_lmdb_file(path)  # before mapping it: a truncated file would be a SIGBUS
    size = (path / "data.mdb").stat().st_size
    try:
        env = lmdb.open(str(path), map_size=max(4 * size, 64 << 20), subdir=True,
                        max_dbs=len(SUBDBS) + len(OPTIONAL_SUBDBS) + 4, create=False, lock=True, readahead=False)
    except lmdb.Error as exc:
        raise open_error(path, exc, readonly=False) from exc
    try:
        try:
            for name in V1_SUBDBS:  # what every index of format 1 or 2 has
                env.open_db(name.encode(), create=False)
        except lmdb.NotFoundError as exc:
            raise NotAnIndexError(f"{path} is not a streamk index of format 1 or 2 ({exc})") from exc
        with env.begin() as txn:
            info = json.loads(txn.get(b"format", db=env.open_db(b"meta", create=False)) or b"null")
        if not isinstance(info, dict) or info.get("format") != FORMAT:
            raise NotAnIndexError(f"{path} is an LMDB database but not a streamk index")
        version = info.get("version")
        if version not in (1, 2, 3, FORMAT_VERSION):
            raise IndexFormatError(f"{path}: index format {version!r}; this streamk upgrades formats 1, 2 and 3")
        for name in SUBDBS + ("code_runs",):  # format 1 lacks some; every format before runs, code_runs
            env.open_db(name.encode(), create=True)
        store = Store(path, env, readonly=False, create_optional=version == 1)
        while True:
            txn = env.begin(write=True)
            try:
                if version == FORMAT_VERSION:
                    n = _add_runs(txn, store, path)
                else:
                    n = {1: _convert, 2: _add_checksums, 3: _seal_records}[version](txn, store, progress)
                    _write_runs(txn, store)
                txn.commit()
                return n
            except lmdb.MapFullError:
                txn.abort()
                env.set_mapsize(2 * env.info()["map_size"])
            except CORRUPTION as exc:
                txn.abort()
                raise corrupt(path, f"LMDB: {exc}") from exc
            except (lmdb.Error, OSError) as exc:
                txn.abort()
                full = disk_full(path, exc, size // 8 + (1 << 20))
                if full is not None:
                    raise full from exc
                raise
            except BaseException:
                txn.abort()
                raise
    finally:
        env.close()


def _write_runs(txn, store):
    """The list-ordered runs (:mod:`streamk.index.blocks`) of the codes in use that have none
    (an index written before runs, or just converted); returns how many were written."""
    meta = store.meta_db
    epoch = int(bytes(txn.get(b"codec_epoch", db=meta) or b"0"))
    blob = txn.get(b"codec", db=meta)
    if not epoch or blob is None:
        return 0
    codec = IVFPQ.from_bytes(bytes(blob))
    store.block_rows = int(bytes(txn.get(b"block_rows", db=meta) or str(BLOCK_ROWS).encode()))
    n_sealed = 0  # the sealed blocks from block 0 on, without a gap
    with txn.cursor(db=store.code_blocks_db) as cur:
        if cur.set_range(epoch_key(epoch, 0)):
            for k in cur.iternext(keys=True, values=False):
                if bytes(k) != epoch_key(epoch, n_sealed):
                    break
                n_sealed += 1
    return write_missing_runs(txn, store, epoch, codec.M, codec.nlist, n_sealed)


def _add_runs(txn, store, path):
    """An index of the current format written before runs: its runs added (the format's
    tag unchanged: an older streamk reads the index as before); returns the number of
    images, or IndexFormatError when there is nothing to add."""
    if not _write_runs(txn, store):
        raise IndexFormatError(f"{path} is already of format {FORMAT_VERSION}")
    seq = struct.unpack(">Q", bytes(txn.get(b"seq", db=store.meta_db) or seq_key(0)))[0] + 1
    txn.put(seq_key(seq), b"*" + row_key(0), db=store.log_db)  # readers load again, now from the runs
    txn.put(b"seq", seq_key(seq), db=store.meta_db)
    return txn.stat(store.images_db)["entries"]


def _rewrite(txn, db, fn, bar):
    """Replace every value of ``db`` by ``fn(key, value)``."""
    with txn.cursor(db=db) as cur:
        keys = [bytes(k) for k in cur.iternext(keys=True, values=False)]
    for key in keys:
        txn.put(key, fn(key, bytes(txn.get(key, db=db))), db=db)
        bar.update(1)


def _seal_records(txn, store, progress):
    """Format 3 -> 4 in ``txn``: the image records and extras sealed; returns the number of images."""
    rewritten = [store.images_db] + ([store.extras_db] if store.extras_db is not None else [])
    total = sum(txn.stat(db)["entries"] for db in rewritten)
    with tqdm(total=total, desc="checksums", unit="record", disable=progress is False or None) as bar:
        for db in rewritten:
            _rewrite(txn, db, lambda key, value: seal(value), bar)
    _mark_upgraded(txn, store)
    return txn.stat(store.images_db)["entries"]


def _mark_upgraded(txn, store):
    """The current format tag, and one reload mark in the log (readers load everything again)."""
    meta = store.meta_db
    seq = struct.unpack(">Q", bytes(txn.get(b"seq", db=meta) or seq_key(0)))[0] + 1
    txn.put(seq_key(seq), b"*" + row_key(0), db=store.log_db)
    txn.put(b"seq", seq_key(seq), db=meta)
    txn.put(b"format", json.dumps({"format": FORMAT, "version": FORMAT_VERSION}).encode(), db=meta)


def _add_checksums(txn, store, progress):
    """Format 2 -> 4 in ``txn``; returns the number of images."""
    path, meta = store.path, store.meta_db
    dim = int(bytes(txn.get(b"dim", db=meta)))
    dtype = np.dtype(bytes(txn.get(b"vector_dtype", db=meta)).decode())
    vectors = VectorStore(store, dim, dtype, txn)  # vector_block_rows as stored: the blocks keep their rows
    old_bytes = vectors.block_rows * vectors.row_bytes
    rewritten = [store.subdb(name) for name in ("code_blocks", "codes", "images", *SEALED_SUBDBS)
                 if store.subdb(name) is not None]
    total = sum(txn.stat(db)["entries"] for db in (store.vectors_db, *rewritten))

    def vector_block(key, value):
        if len(value) != old_bytes:
            raise corrupt(path, f"vector block {int.from_bytes(key, 'big')} has {len(value)} bytes, "
                          f"format 2 stores {old_bytes}")
        return vectors.pack_block(np.frombuffer(value, dtype).reshape(vectors.block_rows, dim))
    with tqdm(total=total, desc="checksums", unit="value", disable=progress is False or None) as bar:
        _rewrite(txn, store.vectors_db, vector_block, bar)
        for db in rewritten:
            _rewrite(txn, db, lambda key, value: seal(value), bar)
    for key in CHECKED_META:
        value = txn.get(key, db=meta)
        if value is not None:
            put_checked_meta(txn, meta, key, bytes(value))
    _mark_upgraded(txn, store)
    return txn.stat(store.images_db)["entries"]


def _convert(txn, store, progress):
    """Format 1 -> 4 in ``txn``; returns the number of images (put_image seals each record,
    and the extras are sealed at the end)."""
    meta = store.meta_db
    encoder = Encoder.from_bytes(bytes(txn.get(b"encoder", db=meta)))
    dtype = np.dtype(bytes(txn.get(b"vector_dtype", db=meta)).decode())
    pq_blob = txn.get(b"pq", db=meta)
    codec = IVFPQ.from_pq(ProductQuantizer.from_bytes(bytes(pq_blob))) if pq_blob is not None else None
    with txn.cursor(db=store.images_db) as cur:
        ids = [bytes(k) for k in cur.iternext(keys=True, values=False)]
    vectors = VectorStore(store, encoder.dim, dtype, txn)  # format 1 has no vector_block_rows: 16 pages' worth
    for row, key in enumerate(tqdm(ids, desc="upgrade", unit="img", disable=progress is False or None)):
        store.put_image(txn, key, dict(unnumbered_image_fields(txn.get(key, db=store.images_db), store.path, key),
                                       row=row))
        rk = row_key(row)
        vector = txn.get(key, db=store.vectors_db)
        if vector is None:
            raise IndexFormatError(f"image {key.decode()!r} has no vector: the index is damaged")
        vector = bytes(vector)
        txn.delete(key, db=store.vectors_db)
        vectors.put(txn, row, np.frombuffer(vector, dtype))
        txn.put(rk, key, db=store.row_ids_db)
        code = txn.get(key, db=store.codes_db)
        if code is not None:
            txn.delete(key, db=store.codes_db)
        if codec is not None:
            if code is None or len(code) != codec.M:  # never written: compute it
                v = np.frombuffer(vector, dtype).astype(np.float32)[None, :]
                code = codec.encode(v)[1][0].tobytes()
            packed = seal_row_codes(pack_codes([0], np.frombuffer(code, np.uint8)[None, :]))[0]
            txn.put(epoch_key(1, row), packed, db=store.codes_db)
            if (row + 1) % BLOCK_ROWS == 0:
                seal_block(txn, store, 1, row // BLOCK_ROWS, codec.M)
    with txn.cursor(db=store.log_db) as cur:  # a log of ids: replaced by one reload mark
        positioned = cur.first()
        while positioned:
            cur.delete()
            positioned = bool(cur.key())
    seq = struct.unpack(">Q", bytes(txn.get(b"seq", db=meta) or seq_key(0)))[0] + 1
    txn.put(seq_key(seq), b"*" + row_key(0), db=store.log_db)
    put = {b"format": json.dumps({"format": FORMAT, "version": FORMAT_VERSION}).encode(), b"seq": seq_key(seq),
           b"dim": str(encoder.dim).encode(), b"input_dim": str(encoder.input_dim).encode(),
           b"next_row": str(len(ids)).encode(), b"block_rows": str(BLOCK_ROWS).encode(),
           b"vector_block_rows": str(vectors.block_rows).encode(),
           b"codec_epoch": b"1" if codec is not None else b"0", b"next_epoch": b"2"}
    if codec is not None:
        put[b"codec"] = codec.to_bytes()
    for k, v in put.items():
        txn.put(k, v, db=meta)
    for key in CHECKED_META:
        value = txn.get(key, db=meta)
        if value is not None:
            put_checked_meta(txn, meta, key, bytes(value))
    for k in (b"pq", b"pq_epoch"):
        txn.delete(k, db=meta)
    with tqdm(disable=True) as bar:  # format 1 kept the extras as they came
        _rewrite(txn, store.extras_db, lambda key, value: seal(value), bar)
    return len(ids)


"""Index format 1 (streamk 0.1: everything keyed by image id) to format 2 (rows), in place.

One write transaction: a crash or an error leaves the index as it was. What
changes: each image gets a row (in id order); its vector and id move under
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
from ..errors import IndexFormatError, NotAnIndexError
from .blocks import pack_codes, seal_block
from .integrity import check_lmdb_file
from ..quantization import IVFPQ
from ..quantization import ProductQuantizer
from .store import BLOCK_ROWS, FORMAT, FORMAT_VERSION, SUBDBS, epoch_key, row_key, seq_key
from .vector_store import VectorStore

V1_SUBDBS = ("meta", "images", "extras", "vectors", "codes", "hashes", "log")


def upgrade(path, progress=None):
    """Upgrade the format-1 index at ``path`` to format 2; returns its number of images."""
    from pathlib import Path

    path = Path(path)
    if not (path / "data.mdb").is_file():
        raise NotAnIndexError(f"{path} is not a streamk index (no LMDB data there)")
    check_lmdb_file(path)  # before mapping it: a truncated file would be a SIGBUS
    size = (path / "data.mdb").stat().st_size
    env = lmdb.open(str(path), map_size=max(4 * size, 64 << 20), subdir=True, max_dbs=len(SUBDBS) + 2,
                    create=False, lock=True, readahead=False)
    try:
        try:
            dbs = {name: env.open_db(name.encode(), create=False) for name in V1_SUBDBS}
        except lmdb.NotFoundError as exc:
            raise NotAnIndexError(f"{path} is not a streamk index of format 1 ({exc})") from exc
        with env.begin() as txn:
            info = json.loads(txn.get(b"format", db=dbs["meta"]) or b"null")
        if not isinstance(info, dict) or info.get("format") != FORMAT:
            raise NotAnIndexError(f"{path} is an LMDB database but not a streamk index")
        if info.get("version") == FORMAT_VERSION:
            raise IndexFormatError(f"{path} is already of format {FORMAT_VERSION}")
        if info.get("version") != 1:
            raise IndexFormatError(f"{path}: index format {info.get('version')!r}; this streamk upgrades format 1")
        for name in SUBDBS:
            dbs[name] = env.open_db(name.encode(), create=True)
        with env.begin(write=True) as txn:
            n = _convert(txn, dbs, progress)
        return n
    finally:
        env.close()


class _TxnStore:
    """What seal_block and VectorStore need of a Store, over raw sub-databases."""

    def __init__(self, dbs):
        self.dbs = dbs
        self.block_rows = BLOCK_ROWS

    def get_int(self, key, txn=None, default=0):
        return default


def _convert(txn, dbs, progress):
    meta = dbs["meta"]
    encoder = Encoder.from_bytes(bytes(txn.get(b"encoder", db=meta)))
    dtype = np.dtype(bytes(txn.get(b"vector_dtype", db=meta)).decode())
    pq_blob = txn.get(b"pq", db=meta)
    codec = IVFPQ.from_pq(ProductQuantizer.from_bytes(bytes(pq_blob))) if pq_blob is not None else None
    with txn.cursor(db=dbs["images"]) as cur:
        ids = [bytes(k) for k in cur.iternext(keys=True, values=False)]
    store = _TxnStore(dbs)
    vectors = VectorStore(store, encoder.dim, dtype)
    for row, key in enumerate(tqdm(ids, desc="upgrade", unit="img", disable=progress is False or None)):
        record = json.loads(txn.get(key, db=dbs["images"]))
        record["row"] = row
        txn.put(key, json.dumps(record).encode(), db=dbs["images"])
        rk = row_key(row)
        vector = txn.get(key, db=dbs["vectors"])
        if vector is None:
            raise IndexFormatError(f"image {key.decode()!r} has no vector: the index is damaged")
        vector = bytes(vector)
        txn.delete(key, db=dbs["vectors"])
        vectors.put(txn, row, np.frombuffer(vector, dtype))
        txn.put(rk, key, db=dbs["row_ids"])
        code = txn.get(key, db=dbs["codes"])
        if code is not None:
            txn.delete(key, db=dbs["codes"])
        if codec is not None:
            if code is None or len(code) != codec.M:  # never written: compute it
                v = np.frombuffer(vector, dtype).astype(np.float32)[None, :]
                code = codec.encode(v)[1][0].tobytes()
            packed = pack_codes([0], np.frombuffer(code, np.uint8)[None, :])
            txn.put(epoch_key(1, row), packed.tobytes(), db=dbs["codes"])
            if (row + 1) % BLOCK_ROWS == 0:
                seal_block(txn, store, 1, row // BLOCK_ROWS, codec.M)
    with txn.cursor(db=dbs["log"]) as cur:  # a log of ids: replaced by one reload mark
        positioned = cur.first()
        while positioned:
            cur.delete()
            positioned = bool(cur.key())
    seq = struct.unpack(">Q", bytes(txn.get(b"seq", db=meta) or seq_key(0)))[0] + 1
    txn.put(seq_key(seq), b"*" + row_key(0), db=dbs["log"])
    put = {b"format": json.dumps({"format": FORMAT, "version": FORMAT_VERSION}).encode(), b"seq": seq_key(seq),
           b"dim": str(encoder.dim).encode(), b"input_dim": str(encoder.input_dim).encode(),
           b"next_row": str(len(ids)).encode(), b"block_rows": str(BLOCK_ROWS).encode(),
           b"vector_block_rows": str(vectors.block_rows).encode(),
           b"codec_epoch": b"1" if codec is not None else b"0", b"next_epoch": b"2"}
    if codec is not None:
        put[b"codec"] = codec.to_bytes()
    for k, v in put.items():
        txn.put(k, v, db=meta)
    for k in (b"pq", b"pq_epoch"):
        txn.delete(k, db=meta)
    return len(ids)


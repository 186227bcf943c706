"""(Re)training an index's PQ / IVF-PQ codec without downtime.

Ingestion and searches go on while this runs; readers keep the codes in use
until one short transaction swaps in the new ones:

1. claim: a ``training`` record in the meta (one training at a time; the record
   of a process that died is taken over) and a new *epoch* for the new codes;
2. snapshot: the rows stored now; the codec is fitted on a random sample of
   their vectors (``train_size``, never all of them in memory), or given;
3. codes of every row of the snapshot, computed and written (as sealed blocks,
   the open block row by row) in short transactions of CHUNK_BLOCKS blocks of rows, under
   the new epoch, which no reader looks at yet;
4. catch-up: rows added meanwhile are coded the same way, again and again,
   until fewer than SWAP_ROWS remain;
5. swap: one write transaction codes those last rows, stores the codec, makes
   its epoch the one in use and logs ``*`` (readers load the new codes);
6. the previous epoch's codes are deleted in short transactions.

Removals need nothing here: they are marked per row, whatever the epoch.

What the codec was fitted on is recorded with it (meta ``codec_trained``: the live
images of the snapshot, the rows then, the sample drawn, the time), so that
:func:`codec_staleness` can tell how many images were added since: a codec fitted
long before most images were added misses more of them (a PQ search of an image's
own vector: 796 of 1,820 added later not found first, none after retraining), and
past :data:`STALE_CODEC_RATIO` searches warn (``StaleCodecWarning``), ``index info``
says so, and ``streamk ingest --retrain-at RATIO`` retrains by itself.
"""

import json
import os
import socket
import time

import numpy as np

from ..errors import ConfigError, DimensionError, TooFewImagesError, TrainingInProgressError
from .blocks import pack_block, pack_codes, seal_block, seal_row_codes, write_missing_runs
from ..quantization import IVFPQ, default_train_size
from ..quantization import NO_LIST
from .store import epoch_key, epoch_key_split, removed_rows
from .vector_store import VectorStore

#: A codec is stale once the images added since it was fitted outnumber this many times
#: the images it was fitted on (1.0: most of the index was never seen by it).
STALE_CODEC_RATIO = 1.0
CHUNK_BLOCKS = 4  # blocks of rows coded per transaction
SWAP_ROWS = 1024  # rows left to code inside the swap transaction, at most
DELETE_BATCH = 4096  # keys deleted per transaction when dropping an epoch's codes


def codec_staleness(txn, store):
    """How far the codec in use lags the index: None before any codec; else
    ``{"trained_on": live images it was fitted on, "added_since": rows written since
    (images added or updated), "ratio": added_since / trained_on, "stale": ratio >
    STALE_CODEC_RATIO}`` (the first three None for a codec trained before streamk
    recorded them). Two small reads: O(1)."""
    if not store.get_int(b"codec_epoch", txn):
        return None
    raw = store.get_meta(b"codec_trained", txn)
    if raw is None:
        return staleness_of(None, None)
    rec = json.loads(bytes(raw))
    return staleness_of(int(rec["images"]), max(0, store.get_int(b"next_row", txn) - int(rec["next_row"])))


def staleness_of(trained_on, added_since):
    """The staleness record of a codec fitted on ``trained_on`` images, ``added_since`` added
    after it (None, None: not recorded, never stale): one index's or a sharded index's sums."""
    if trained_on is None or added_since is None:
        return {"trained_on": None, "added_since": None, "ratio": None, "stale": False}
    ratio = added_since / max(trained_on, 1)
    return {"trained_on": trained_on, "added_since": added_since, "ratio": ratio, "stale": ratio > STALE_CODEC_RATIO}


def check_trainable(codec, images, dim):
    """``codec`` (an untrained IVFPQ), once an index of ``images`` vectors of ``dim`` can
    train it: ConfigError when M does not divide dim, TooFewImagesError below its minimum."""
    if dim % codec.M:
        raise ConfigError(f"vector dimension {dim} is not a multiple of M={codec.M}")
    if images < codec.min_train():
        raise TooFewImagesError(f"{codec.describe()} training needs at least {codec.min_train()} "
                                f"images, the index has {images}")
    return codec


def stale_codec_note(staleness, where="INDEX"):
    """The line a user is told about a stale codec (None when it is not stale)."""
    if not staleness or not staleness.get("stale"):
        return None
    return (f"{staleness['added_since']:,} images were added since the PQ codec was trained on "
            f"{staleness['trained_on']:,}: PQ searches may miss them; retrain it with "
            f"`streamk index train {where}` (searches and ingestion go on)")


def _alive(record):
    """Whether the process of a training record still runs (on this host)."""
    if record.get("host") != socket.gethostname():
        return True  # another machine's process: cannot tell, assume it runs
    try:
        os.kill(int(record["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Trainer:
    """One training run on ``store`` (see the module doc)."""

    def __init__(self, store, dim, vector_dtype, progress=None):
        self.store = store
        self.dim = int(dim)
        self.vector_dtype = np.dtype(vector_dtype)
        self.progress = progress
        self.vectors = VectorStore(store, dim, vector_dtype)

    # ------------------------------------------------------------ 1. claim
    def _claim(self):
        s = self.store

        def claim(txn):
            raw = s.get_meta(b"training", txn)
            stale = None
            if raw is not None:
                record = json.loads(bytes(raw))
                if _alive(record):
                    raise TrainingInProgressError(
                        f"{s.path}: a training is already running (pid {record.get('pid')} on "
                        f"{record.get('host')}, since {time.ctime(record.get('started', 0))}): wait for it to "
                        f"finish, then run this again (searches go on meanwhile; a training whose process has "
                        f"died on this machine is taken over by the next)")
                stale = int(record["epoch"])
            in_use = s.get_int(b"codec_epoch", txn)
            epoch = max(s.get_int(b"next_epoch", txn, default=1), in_use + 1)
            s.put_int(txn, b"next_epoch", epoch + 1)
            record = {"pid": os.getpid(), "host": socket.gethostname(), "epoch": epoch, "started": time.time()}
            txn.put(b"training", json.dumps(record).encode(), db=s.meta_db)
            return epoch, in_use, stale
        epoch, in_use, stale = s.write(claim)
        if stale is not None and stale != in_use:
            self.drop_epoch(stale)  # left by a training that died
        return epoch, in_use

    def _release(self, epoch):
        s = self.store

        def release(txn):
            raw = s.get_meta(b"training", txn)
            if raw is not None and json.loads(bytes(raw)).get("epoch") == epoch:
                txn.delete(b"training", db=s.meta_db)
        s.write(release)

    # ------------------------------------------------------------ 2. snapshot and fit
    def _live(self, txn):
        """(next_row, uint8 removal marks of rows 0..next_row-1) as ``txn`` sees them."""
        next_row = self.store.get_int(b"next_row", txn)
        return next_row, removed_rows(txn, self.store, next_row)[:next_row]

    def _stored_rows(self):
        with self.store.read() as txn:
            next_row, dead = self._live(txn)
        return next_row, np.flatnonzero(dead == 0).astype(np.int64)

    def _vectors(self, rows):
        """(rows, stored vectors (n, D) float32) of rows; rows removed meanwhile are left out."""
        with self.store.read() as txn:
            next_row, dead = self._live(txn)
            rows = np.asarray(rows, np.int64)
            rows = rows[dead[rows] == 0]
            return rows, self.vectors.get(txn, rows) if len(rows) else np.zeros((0, self.dim), np.float32)

    def _fit(self, rows, nlist, M, seed, train_size, nprobe):
        codec = check_trainable(IVFPQ(nlist=nlist, M=M, seed=seed, nprobe=nprobe), len(rows), self.dim)
        n = min(len(rows), default_train_size(nlist) if train_size is None else int(train_size))
        self.sample_size = n
        if n < codec.min_train():
            raise ConfigError(f"train_size {n} is below the {codec.min_train()} vectors this codec needs")
        return codec.fit(self.sample(rows, n, seed))

    def sample(self, rows, n, seed):
        """Stored vectors (<= n, D) float32 of n of ``rows`` drawn at random (without the
        ones removed meanwhile)."""
        sample = np.sort(np.random.default_rng(seed).choice(rows, min(int(n), len(rows)), replace=False))
        step = CHUNK_BLOCKS * self.store.block_rows
        parts = [self._vectors(sample[i:i + step])[1] for i in range(0, len(sample), step)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), np.float32)

    # ------------------------------------------------------------ 3-4. codes under the new epoch
    def _read_rows(self, txn, lo, hi):
        """(rows, vectors (n, D) float32) of the live rows in [lo, hi)."""
        next_row, dead = self._live(txn)
        parts = list(self.vectors.scan(txn, lo, min(hi, next_row), live=lambda rows: dead[rows] == 0))
        if not parts:
            return np.zeros(0, np.int64), np.zeros((0, self.dim), np.float32)
        return np.concatenate([r for r, _ in parts]), np.concatenate([v for _, v in parts])

    def _write_codes(self, txn, codec, epoch, lo, hi, rows, lists, codes, sealed):
        """Store the codes of rows [lo, hi): blocks lying entirely in the range as block
        values, the other rows one by one; then seal the blocks these rows complete.
        Returns the number of blocks sealed from the start."""
        s = self.store
        M = codec.M
        B = s.block_rows
        full = range(-(-lo // B), hi // B)
        in_full = (rows >= full.start * B) & (rows < full.stop * B)
        for b in full:
            block_lists = np.full(B, NO_LIST, np.uint32)
            block_codes = np.zeros((B, M), np.uint8)
            sel = in_full & (rows // B == b)
            block_lists[rows[sel] % B] = lists[sel]
            block_codes[rows[sel] % B] = codes[sel]
            txn.put(epoch_key(epoch, b), pack_block(block_lists, block_codes), db=s.code_blocks_db)
        rest = np.flatnonzero(~in_full)
        packed = seal_row_codes(pack_codes(lists[rest], codes[rest]))
        for r, value in zip(rows[rest].tolist(), packed):
            txn.put(epoch_key(epoch, r), value, db=s.codes_db)
        done = max(sealed, full.stop) if len(full) else sealed
        for b in range(done, hi // B):  # blocks that rows coded one by one completed
            seal_block(txn, s, epoch, b, M)
        write_missing_runs(txn, s, epoch, M, codec.nlist, max(done, hi // B), since=sealed)
        return max(done, hi // B)

    def _code_range(self, codec, epoch, lo, hi, sealed):
        """Code rows [lo, hi): read (one read transaction), encode (none), write (one
        short write transaction). Returns the new count of sealed blocks."""
        with self.store.read() as txn:
            rows, V = self._read_rows(txn, lo, hi)
        lists, codes = codec.encode(V) if len(rows) else (np.zeros(0, np.uint32), np.zeros((0, codec.M), np.uint8))
        return self.store.write(lambda txn: self._write_codes(txn, codec, epoch, lo, hi, rows, lists, codes,
                                                              sealed))

    # ------------------------------------------------------------ 6. dropping an epoch
    def drop_epoch(self, epoch):
        """Delete every code of ``epoch`` (short transactions)."""
        s = self.store
        for name in ("codes", "code_blocks", "code_runs"):
            while True:
                def delete_some(txn, name=name):
                    n = 0
                    with txn.cursor(db=s.subdb(name)) as cur:
                        positioned = cur.set_range(epoch_key(epoch, 0))
                        while positioned and n < DELETE_BATCH and epoch_key_split(cur.key())[0] == epoch:
                            cur.delete()
                            n += 1
                            positioned = bool(cur.key())
                    return n
                if s.write(delete_some) < DELETE_BATCH:
                    break

    # ------------------------------------------------------------ the whole run
    def run(self, nlist=1, M=16, seed=0, train_size=None, codec=None, nprobe=None):
        from tqdm.auto import tqdm  # (imported here: it loads asyncio, a cost to every command)

        if codec is not None:
            if not isinstance(codec, IVFPQ) or not codec.fitted:
                raise ConfigError("codec must be a trained streamk.quantization.ivfpq.IVFPQ")
            if codec.dim != self.dim:
                raise DimensionError(f"codec dimension {codec.dim} differs from the index's {self.dim}")
            if nprobe is not None:
                codec.nprobe = int(nprobe)
        epoch, previous = self._claim()
        swapped = False
        self.sample_size = None
        try:
            next_row, rows = self._stored_rows()
            if codec is None:
                codec = self._fit(rows, nlist, M, seed, train_size, nprobe)
            s = self.store
            sealed = 0
            with tqdm(total=next_row, unit="row", desc="coding", disable=self.progress is False or None,
                      leave=False) as bar:
                lo = 0
                while lo < next_row:  # 3. the snapshot, block-aligned chunks
                    hi = min(next_row, lo + CHUNK_BLOCKS * s.block_rows)
                    sealed = self._code_range(codec, epoch, lo, hi, sealed)
                    bar.update(hi - lo)
                    lo = hi
                while True:  # 4. catch up with what was added meanwhile
                    now = s.get_int(b"next_row")
                    if now - lo <= SWAP_ROWS:
                        break
                    sealed = self._code_range(codec, epoch, lo, now, sealed)
                    bar.total = now
                    bar.update(now - lo)
                    lo = now
            blob = codec.to_bytes()
            trained = json.dumps({"images": int(len(rows)), "next_row": int(next_row), "sample": self.sample_size,
                                  "at": time.time()}).encode()

            def swap(txn):  # 5. the last rows and the switch, in one transaction
                raw = s.get_meta(b"training", txn)
                if raw is None or json.loads(bytes(raw)).get("epoch") != epoch:
                    raise TrainingInProgressError(f"{s.path}: this training was taken over by another")
                now = s.get_int(b"next_row", txn)
                rows, V = self._read_rows(txn, lo, now)
                lists, codes = codec.encode(V) if len(rows) else (np.zeros(0, np.uint32),
                                                                  np.zeros((0, codec.M), np.uint8))
                self._write_codes(txn, codec, epoch, lo, now, rows, lists, codes, sealed)
                s.put_meta(txn, b"codec", blob)
                txn.put(b"codec_trained", trained, db=s.meta_db)
                s.put_int(txn, b"codec_epoch", epoch)
                txn.delete(b"training", db=s.meta_db)
                s.bump(txn, b"*", 0)
            s.write(swap)
            swapped = True
        finally:
            if not swapped:
                self._release(epoch)
                self.drop_epoch(epoch)
        if previous:
            self.drop_epoch(previous)  # 6.
        return codec

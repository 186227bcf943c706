"""The reading side of a streaming index: what a reader keeps in memory, and search.

A reader holds only what its search scans: the inverted lists of PQ codes and
integer rows (:class:`~streamk.quantization.inverted_lists.InvertedLists`, M + 8 bytes per
image), one byte per row marking removals, and the codec. Float vectors stay
in the LMDB map and are read for the R candidates a search re-ranks (or
streamed block by block by an exact search); string ids are read for the k
results only.

Keeping up with writers (this process or others): each search reads the
change counter; when it moved, the reader applies the logged changes, O(c)
amortised for c changes (appends into the lists, removal marks, a compaction
once the waste passes a quarter). It loads everything again only when the
codes were retrained (a new epoch) or it fell further behind than the log
keeps. A full load reads the headers of the runs (the sealed codes again in list
order, RUN_BLOCKS blocks each: :mod:`streamk.index.blocks`), the sealed blocks no run
holds yet (4,096 rows per read, zero-copy views of the map) and the open block's rows;
a list of the runs is read (and its bytes checked) at the first search that probes it,
into room reserved at the load. So the first answer reads the probed lists, the
removal bitmaps and at most RUN_BLOCKS blocks, not every code.

Reading cold (the index not in the page cache): py-lmdb reads every page of a value it
returns, one by one, each waited for, and the map is read without readahead. So the runs
are read in place in the map (:func:`~streamk.index.blocks.run_values`: only the pages of
their headers and of the probed lists), and the pages of what is read whole or in many
pieces are asked for at once first (:mod:`~streamk.index.lmdb_pages`): the codec, the
loose blocks, the runs' headers, the probed lists; after the first answer, every run whole,
once (:meth:`SearchView._ask_for_runs`); the first re-ranking's vector blocks are brought in
by a few threads side by side (:meth:`~streamk.index.vector_store.VectorStore.warm_blocks`).
At 1M (IVF4096, PQ64), the index dropped from the page cache, open -> first answer took
2.3 s and now 0.6 s (load 5, 2-core Xeon; bench/scale.py --open-only).
"""

import numpy as np

from ..errors import ConfigError, NotFittedError
from ..quantization import IVFPQ, NO_LIST, InvertedLists, merge_topk
from .blocks import checked_block, open_row_codes, run_directories, run_values, split_block, unpack_codes
from .integrity import corrupt, describe_rows
from .lmdb_pages import address_of, will_need
from .queries import MAX_RERANK
from .store import epoch_key, epoch_key_split, removed_rows, row_key, rows_from_keys, rows_of_epoch_keys
from .vector_store import VectorStore


def no_codec_error():
    """The NotFittedError of a PQ search on an index without a codec, in a Python caller's
    words; ``needs = "codec"`` lets each front end say its own way to train one (as a
    StaleCodecWarning's ``staleness``): the CLI its command, the server its mode."""
    err = NotFittedError("PQ search needs a trained codec, and this index has none: train one with "
                         "index.train() (256 images at least), or search with mode='exact'")
    err.needs = "codec"
    return err


RERANK_BYTES = 256 << 20  # stored vectors read at once by a batch's re-ranking (float32)
EXACT_BY_ROW_FRACTION = 16  # a filtered exact search reads its rows one by one when they are <= 1/16 of all
EXACT_CHUNK_ROWS = 4096  # rows scored per GEMM by a filtered exact search
MEAN_SAMPLE_BLOCKS = 32  # blocks of stored vectors the collection's mean is taken over (~1,000 rows)


class SearchView:
    """A reader's in-memory view of one index; see the module doc. Not thread-safe."""

    def __init__(self, store, dim, vector_dtype):
        self.store = store
        self.dim = int(dim)
        self.vector_dtype = np.dtype(vector_dtype)
        self.seq = -1
        self.epoch = 0
        self.codec = None
        self._codec_seen = (-1, None)  # (epoch, codec) decoded by codec_in_use without a full load
        self.lists = None  # InvertedLists, with a codec
        self.runs = {}  # {first block: RunDirectory} of the runs whose lists are read as probed
        self.dead = np.zeros(0, np.uint8)  # 1 for removed rows (rows past the end: alive)
        self.vectors = VectorStore(store, dim, vector_dtype)
        self._vectors_read = False  # since the last full load
        self._runs_asked = 0
        self.row_ids = RowIds(store)
        self._mean = None  # (store sequence number, mean_vector's answer)

    def codec_in_use(self, txn):
        """The IVFPQ codec in use as ``txn`` sees it (None before training), without loading
        any code: the view's own when it is of that epoch, else decoded (and kept) once."""
        epoch = self.store.get_int(b"codec_epoch", txn)
        if epoch == self.epoch and self.codec is not None:
            return self.codec
        if self._codec_seen[0] != epoch:
            blob = self.store.get_meta(b"codec", txn) if epoch else None
            self._codec_seen = (epoch, IVFPQ.from_bytes(blob) if blob is not None else None)
        return self._codec_seen[1]

    # ------------------------------------------------------------ keeping up
    def refresh(self, txn):
        """Apply what changed since the last refresh; returns the number of changes."""
        s = self.store
        seq = s.seq(txn)
        if seq == self.seq:
            return 0
        epoch = s.get_int(b"codec_epoch", txn)
        changes = s.changes_since(txn, self.seq) if self.seq >= 0 else None
        if changes is None or epoch != self.epoch or any(op == b"*" for _, op, _ in changes):
            self._full_load(txn, epoch)
            n = len(changes) if changes is not None else s.get_int(b"next_row", txn)
        else:
            self._apply(txn, changes)
            n = len(changes)
        self.seq = seq
        return n

    def _grow_dead(self, n_rows):
        if n_rows > self.dead.shape[0]:
            dead = np.zeros(max(n_rows, 2 * self.dead.shape[0], self.store.block_rows), np.uint8)
            dead[:self.dead.shape[0]] = self.dead
            self.dead = dead

    def _full_load(self, txn, epoch):
        s = self.store
        B = s.block_rows
        self.dead = removed_rows(txn, s, s.get_int(b"next_row", txn))
        self.row_ids = RowIds(s)  # a repair may have named rows again: read afresh, as they are needed
        self._vectors_read = False
        self._runs_asked = 0  # reads of lists from the runs since (SearchView._ask_for_runs)
        if epoch != self.epoch or self.codec is None:
            if epoch:  # read whole (16 MB at 1M): its pages asked for at once
                s.will_need(txn, "meta", lambda key: key == b"codec")
            blob = s.get_meta(b"codec", txn) if epoch else None
            self.codec = IVFPQ.from_bytes(blob) if blob is not None else None
            self.epoch = epoch
        self.lists, self.runs = None, {}
        if self.codec is None:
            return
        M, nlist = self.codec.M, self.codec.nlist
        tail = self._open_block_codes(txn, epoch, M)
        self.runs = run_directories(txn, s, epoch, nlist)
        covered = {b for d in self.runs.values() for b in range(d.first_block, d.first_block + d.n_blocks)}
        with txn.cursor(db=s.code_blocks_db) as cur:  # the sealed blocks no run holds (keys only)
            blocks = [block for e, block in (epoch_key_split(k) for k in self._epoch_keys(cur, epoch))
                      if block not in covered]

        keys = {epoch_key(epoch, block) for block in blocks}
        if keys:  # read whole: their pages asked for at once
            s.will_need(txn, "code_blocks", keys.__contains__)
        values = [txn.get(epoch_key(epoch, block), db=s.code_blocks_db) for block in blocks]

        def parts():
            for block, value in zip(blocks, values):
                lists, codes = split_block(checked_block(s, value, epoch, block, M), M, B)
                yield lists, codes, np.arange(block * B, (block + 1) * B)
            yield tail
        reserve = np.zeros(nlist, np.int64)  # room for the runs' entries, read list by list as probed
        for d in self.runs.values():
            reserve += np.diff(d.starts)
        self.lists = InvertedLists.build(nlist, M, parts, self.dead, NO_LIST, reserve=reserve)
        self.lists.defer(reserve > 0)

    def read_all_lists(self, txn):
        """Bring in every list not read yet (as searches probing them all would)."""
        if self.lists is not None and self.lists.deferred is not None:
            self.lists.fetch = lambda wanted: self._run_entries(txn, wanted)
            try:
                self.lists.bring_in(np.arange(self.lists.nlist, dtype=np.int64), self.dead)
            finally:
                self.lists.fetch = None

    @staticmethod
    def _epoch_keys(cur, epoch):
        """The keys of ``epoch`` under a cursor of a sub-database keyed by (epoch, n)."""
        if cur.set_range(epoch_key(epoch, 0)):
            for k in cur.iternext(keys=True, values=False):
                if epoch_key_split(k)[0] != epoch:
                    return
                yield k

    def _run_entries(self, txn, wanted):
        """(lists, codes, rows) of the entries of lists ``wanted`` in the runs read at the last
        full load (each list's bytes checked)."""
        M, s = self.codec.M, self.store
        parts = []
        values = run_values(txn, s, self.epoch)  # in place: only the wanted lists' pages are read
        self._ask_for_runs(values, wanted, M)
        for first, d in self.runs.items():
            value = values.get(first)
            if value is None:  # runs change only with the epoch, which reloads everything
                raise corrupt(s.path, f"the list-ordered codes of blocks {first}.. (epoch {self.epoch}) are missing")
            parts.append(d.lists_entries(s, value, self.epoch, wanted, M))
        if not parts:
            return np.zeros(0, np.int64), np.zeros((0, M), np.uint8), np.zeros(0, np.int64)
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))

    def _ask_for_runs(self, values, wanted, M):
        """Readahead for the runs' pages (views of the map ``values``), asked for at once rather
        than read page by page: at the first read after a full load (a first answer), the
        lists ``wanted`` only; at the second, the rest of every run, whole (the kernel reads
        them while searches go on: the lists later searches probe are then in the page
        cache); after that, nothing (one madvise per list and run would cost more than it
        saves once the runs are cached)."""
        views = [(d, values[first]) for first, d in self.runs.items() if first in values]
        if self._runs_asked == 0:
            will_need([span for d, v in views for span in d.lists_spans(v, wanted, M)])
        elif self._runs_asked == 1:
            will_need([(address_of(v), len(v)) for _, v in views])
        self._runs_asked += 1

    def _open_block_codes(self, txn, epoch, M):
        """(lists, codes, rows) of the rows of ``epoch`` not yet sealed into a block."""
        keys, values = [], []
        with txn.cursor(db=self.store.codes_db) as cur:
            if cur.set_range(epoch_key(epoch, 0)):
                for k, v in cur:
                    if epoch_key_split(k)[0] != epoch:
                        break
                    keys.append(bytes(k))
                    values.append(bytes(v))
        if not keys:
            return np.zeros(0, np.uint32), np.zeros((0, M), np.uint8), np.zeros(0, np.int64)
        rows = rows_of_epoch_keys(keys)
        lists, codes = unpack_codes(open_row_codes(self.store, values, rows, M), M)
        return lists, np.ascontiguousarray(codes), rows

    def _apply(self, txn, changes):
        added = [row for _, op, row in changes if op == b"+"]
        removed = [row for _, op, row in changes if op == b"-"]
        if added:
            self._grow_dead(max(added) + 1)
        if self.lists is not None and added:
            lists, codes, rows = self._codes_of(txn, added)
            self.lists.append(lists, codes, rows)
        if removed:
            removed = np.asarray(removed, np.int64)
            self._grow_dead(int(removed.max()) + 1)
            self.dead[removed] = 1
            if self.lists is not None:
                self.lists.note_removed(len(removed))
                self.lists.maybe_compact(self.dead)

    def _codes_of(self, txn, rows):
        """(lists, codes, rows) of added rows (increasing): their own entries, or, for
        rows sealed into a block since, the block's."""
        M = self.codec.M
        rows = np.asarray(rows, np.int64)
        with txn.cursor(db=self.store.codes_db) as cur:
            found = cur.getmulti([epoch_key(self.epoch, int(r)) for r in rows])
        got_rows = rows_of_epoch_keys([bytes(k) for k, _ in found]) if found else np.zeros(0, np.int64)
        packed = open_row_codes(self.store, [bytes(v) for _, v in found], got_rows, M)
        if len(found) == len(rows):  # the usual case: none sealed since
            lists, codes = unpack_codes(packed, M)
            keep = lists != NO_LIST
            return lists[keep], codes[keep], rows[keep]
        lists = np.full(len(rows), NO_LIST, np.uint32)
        codes = np.zeros((len(rows), M), np.uint8)
        if found:
            lists[np.searchsorted(rows, got_rows)], codes[np.searchsorted(rows, got_rows)] = unpack_codes(packed, M)
        sealed = ~np.isin(rows, got_rows)
        B = self.store.block_rows
        for b in np.unique(rows[sealed] // B):  # one read per block, not per row
            raw = txn.get(epoch_key(self.epoch, int(b)), db=self.store.code_blocks_db)
            if raw is None:
                continue
            block_lists, block_codes = split_block(checked_block(self.store, raw, self.epoch, int(b), M), M, B)
            sel = np.flatnonzero(sealed & (rows // B == b))
            lists[sel] = block_lists[rows[sel] % B]
            codes[sel] = block_codes[rows[sel] % B]
        keep = lists != NO_LIST
        return lists[keep], codes[keep], rows[keep]

    # ------------------------------------------------------------ search
    def search(self, txn, Q, k, mode="pq", nprobe=None, rerank=None, allow=None):
        """(scores (nq, k) float32, rows (nq, k) int64) of the k best images of each
        query (unit vectors Q (nq, D) float32), best first, ties by row; missing
        slots (-inf, -1). mode "exact": every stored vector. mode "pq": the codes
        of the probed lists, then the ``rerank`` best re-scored with their vectors
        (default max(4k, 100), at most MAX_RERANK; 0: no re-ranking).

        Bounded: k and R are capped at the number of images in the index before anything
        is allocated (the caller checked them against MAX_K / MAX_RERANK), so the arrays
        have min(k, images) columns.

        allow: a :class:`~streamk.index.metadata.RowFilter` (a search filter's rows and
        bitmap): only its rows are scanned. The exact scan reads only their vectors; the
        PQ / IVF scans test each entry's bit before scoring it (an IVF scan visits more
        lists until it has seen enough allowed rows). When no more rows are allowed than
        the PQ search would re-rank, they are all scored with their vectors (the same
        result as scanning their codes and re-ranking them all, at a cost of what the
        filter selects)."""
        n = max(1, txn.stat(self.store.images_db)["entries"])
        k = min(int(k), n)
        if allow is not None and allow.count == 0:
            return np.full((Q.shape[0], k), -np.inf, np.float32), np.full((Q.shape[0], k), -1, np.int64)
        if mode == "exact":
            return self.exact_search(txn, Q, k, allow)
        if mode != "pq":
            raise ConfigError(f"mode must be 'exact' or 'pq', got {mode!r}")
        if self.codec is None or self.lists is None:
            raise no_codec_error()
        R = min(max(4 * k, 100), MAX_RERANK) if rerank is None else int(rerank)
        R = min(R, n)
        if R and R < k:
            raise ConfigError(f"rerank ({R}) must be 0 or >= k ({k})")
        if allow is not None and R and allow.count <= R:
            return self.exact_search(txn, Q, k, allow)
        bits = None
        if allow is not None:
            bits = allow.bits
            if bits.shape[0] * 64 < self.dead.shape[0]:  # rows the view knows past the filter's: none allowed
                bits = np.concatenate([bits, np.zeros((self.dead.shape[0] + 63) // 64 - bits.shape[0], np.uint64)])
        if self.lists.deferred is not None:  # lists not read yet come from the runs, in this transaction
            self.lists.fetch = lambda wanted: self._run_entries(txn, wanted)
        try:
            scores, rows = self.codec.search(self.lists, Q, max(k, R), nprobe, self.dead, allow=bits)
        finally:
            self.lists.fetch = None
        if not R:
            return scores[:, :k], rows[:, :k]
        return self.rerank(txn, Q, rows, k)

    def mean_vector(self, txn):
        """(sum (D,) float64, count, images) of the live stored vectors of MEAN_SAMPLE_BLOCKS
        blocks spread evenly over the rows (all of them for an index of at most that many
        blocks: ~1,000 rows), and the number of images: the collection's mean vector that the
        centred expansion subtracts (streamk.verification.expansion), at a bounded cost (that
        many reads of 64 KiB, whatever the index holds). Kept until the store changes
        (``txn``'s sequence number)."""
        seq = self.store.seq(txn)
        if self._mean is not None and self._mean[0] == seq:
            return self._mean[1]
        next_row, B = self.store.get_int(b"next_row", txn), self.vectors.block_rows
        n_blocks = -(-next_row // B)
        m = min(n_blocks, MEAN_SAMPLE_BLOCKS)
        blocks = np.arange(m) * n_blocks // max(m, 1)  # evenly spread, distinct
        live = self._live(next_row)
        total, count = np.zeros(self.dim, np.float64), 0
        for b in blocks.tolist():
            for _, V in self.vectors.scan(txn, lo=b * B, hi=(b + 1) * B, live=live, chunk_blocks=1):
                total += V.sum(axis=0, dtype=np.float64)
                count += V.shape[0]
        self._mean = (seq, (total, count, txn.stat(self.store.images_db)["entries"]))
        return self._mean[1]

    def _live(self, next_row, bits=None):
        """live(rows) -> bool mask: the rows below next_row not marked removed (the view is up
        to date with the reading transaction) and, with ``bits`` (a RowFilter's), set there."""
        dead = self.dead

        def live(rows):
            ok = rows < next_row
            inside = rows < dead.shape[0]
            ok[inside] &= dead[rows[inside]] == 0
            if bits is not None:
                inside = rows < bits.shape[0] * 64
                ok &= inside
                r = rows[inside]
                ok[inside] &= (bits[r >> 6] >> (r & 63).astype(np.uint64)) & np.uint64(1) != 0
            return ok
        return live

    def vectors_of(self, txn, rows):
        """Stored vectors (n, D) float32 of rows (each must exist); the first read after a
        full load brings their pages in side by side (:meth:`VectorStore.get`): its pages are
        likely not cached (a reader's first answer)."""
        first, self._vectors_read = not self._vectors_read, True
        return self.vectors.get(txn, rows, side_by_side=first)

    def rerank(self, txn, Q, cand, k):
        """The k best of each query's candidate rows (nq, R) by the stored vectors, read
        for a few queries at a time (at most max(R, 256 MiB of vectors) in memory)."""
        nq, R = cand.shape
        step = max(1, max(R, RERANK_BYTES // (4 * self.dim)) // max(R, 1))  # queries per read
        parts = [self._rerank(txn, Q[a:a + step], cand[a:a + step], k) for a in range(0, nq, step)]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _rerank(self, txn, Q, cand, k):
        nq = cand.shape[0]
        uniq, inv = np.unique(cand[cand >= 0], return_inverse=True)
        V = self.vectors_of(txn, uniq) if len(uniq) else np.zeros((0, self.dim), np.float32)
        scores = np.full(cand.shape, -np.inf, np.float32)
        pos = np.full(cand.shape, -1, np.int64)
        pos[cand >= 0] = inv
        for a in range(nq):  # one small GEMV per query, over its own candidates only
            ok = pos[a] >= 0
            scores[a, ok] = V[pos[a, ok]] @ Q[a]
        return merge_topk(scores, np.where(np.isfinite(scores), cand, -1), k)

    def exact_search(self, txn, Q, k, allow=None):
        """Every stored vector, read block by block from the map (never all in memory).
        allow: a RowFilter: only its rows' vectors are read (by row when it selects few,
        else the blocks, keeping the rows whose bit is set)."""
        nq = Q.shape[0]
        best_s = np.full((nq, k), -np.inf, np.float32)
        best_r = np.full((nq, k), -1, np.int64)
        next_row = self.store.get_int(b"next_row", txn)
        if allow is not None and allow.count * EXACT_BY_ROW_FRACTION <= next_row:
            rows = allow.rows
            for lo in range(0, rows.shape[0], EXACT_CHUNK_ROWS):
                part = rows[lo:lo + EXACT_CHUNK_ROWS]
                S = Q @ self.vectors_of(txn, part).T
                best_s, best_r = merge_topk(np.concatenate([best_s, S], axis=1),
                                            np.concatenate([best_r, np.broadcast_to(part, S.shape)], axis=1), k)
            return best_s, best_r
        for rows, V in self.vectors.scan(txn, live=self._live(next_row, None if allow is None else allow.bits)):
            S = Q @ V.T
            best_s, best_r = merge_topk(np.concatenate([best_s, S], axis=1),
                                        np.concatenate([best_r, np.broadcast_to(rows, S.shape)], axis=1), k)
        return best_s, best_r

    def ids_of(self, txn, rows):
        """Object array of the ids of rows (None for -1), from the in-memory id table
        (:class:`RowIds`: rows it has not seen yet are read from ``row_ids`` first)."""
        flat = rows.reshape(-1)
        if len(flat) and flat.min() >= 0:  # every slot a row (the usual case): no mask
            out = np.empty(len(flat), dtype=object)
            out[:] = self.row_ids.ids(txn, flat)
            return out.reshape(rows.shape)
        have = flat >= 0
        out = np.full(len(flat), None, dtype=object)
        if have.any():
            out[have] = self.row_ids.ids(txn, flat[have])
        return out.reshape(rows.shape)

    # ------------------------------------------------------------ facts
    def memory_bytes(self):
        n = self.dead.nbytes
        if self.lists is not None:
            n += self.lists.memory_bytes()
        if self.codec is not None:
            n += self.codec.memory_bytes()
        return n + self.row_ids.memory_bytes()


class RowIds:
    """The row -> id map of a reader, in memory, filled as results need it: the ids of a
    search's k results are a gather from arrays and one decode, not k look-ups in
    ``row_ids`` (~15 us instead of ~60-110 us of CPU for k = 100; numpy, not a Numba
    kernel: one more kernel to load would cost a one-query command more than it saves).

    Filled by blocks of BLOCK_ROWS rows: a block asked for WALK_AFTER times (searches
    with results in it that were not in the table) is brought in, one cursor walk of
    ``row_ids`` over its rows given so far (O(block)), at most LOAD_BLOCKS blocks per
    search (none pays for many; a block is walked once per reader, the block being filled
    again from where its last walk ended when a result lies past it); the other rows are looked up in
    ``row_ids`` one by one, as before the table. So a reader's first answer reads what it
    read before (a walk maps ~100 KB of ``row_ids``, and the kernel maps cached pages
    around each page touched), and a reader that answers many searches soon has every
    block. A walked block has a
    slot: row i of it has its id at ``start[slot, i]`` in one byte buffer, ``length[slot,
    i]`` bytes (-1: no id there, or past the walk), each id followed by a NUL (ids hold no
    control character). A row's id never changes (an update gives the image a new row;
    a removed row is never a result again), so what was read stays valid; the view drops
    the table at its full loads (a repair may have named rows again). Nothing is read at
    open. Memory: 10 bytes per row of the blocks walked plus their ids and NULs (~18 MB
    for 1M rows of ~7-character ids once every block was needed)."""

    LOAD_BLOCKS = 2
    WALK_AFTER = 2
    FEW = 24  # up to this many rows, read one by one in Python (fewer steps than the numpy gather's ~25)

    def __init__(self, store):
        self.store = store
        self.block_rows = store.block_rows
        self.slot_of_block = np.full(0, -1, np.int64)  # -1: not walked
        self.asked = np.zeros(0, np.int32)  # searches that wanted rows of the block not in the table
        self.start = np.zeros((0, self.block_rows), np.int64)
        self.length = np.zeros((0, self.block_rows), np.int16)  # ids take at most 511 bytes
        self.n_slots = 0
        self.buf = np.zeros(0, np.uint8)
        self.used = 0

    @property
    def loaded(self):
        """bool per block: walked."""
        return self.slot_of_block >= 0

    def memory_bytes(self):
        return self.slot_of_block.nbytes + self.asked.nbytes + self.start.nbytes + self.length.nbytes + self.buf.nbytes

    def ids(self, txn, rows):
        """List of the ids (str) of rows (int64 >= 0, each a row whose image is stored as
        ``txn`` sees it); IndexCorruptError when ``row_ids`` lacks one."""
        if len(rows) <= self.FEW:
            found = self._few(rows)
            if found is not None:
                return found
        start, length = self._find(rows)
        if len(rows) and length.min() >= 0:  # every row in the table (the usual case): no masks
            return self._gathered(start, length)
        missing = length < 0
        if missing.any():
            self._walk(txn, rows[missing])
            start, length = self._find(rows)
            missing = length < 0
        found = ~missing
        lens = length[found].astype(np.int64) + 1  # with its NUL
        ends = np.cumsum(lens)
        pos = np.arange(ends[-1] if len(ends) else 0) + np.repeat(start[found] - ends + lens, lens)
        parts = self.buf[pos].tobytes().decode("utf-8").split("\0")
        if len(parts) != len(lens) + 1:  # a NUL inside an id: damage
            raise corrupt(self.store.path, "row_ids holds an id with a NUL character (damaged)")
        if not missing.any():
            return parts[:-1]
        looked_up = iter(self._look_up(txn, rows[missing]))
        it = iter(parts)
        return [next(looked_up) if m else next(it) for m in missing.tolist()]

    def _gathered(self, start, length):
        """The ids at ``start`` (``length`` bytes each, all >= 0) in the buffer: one gather
        of their bytes with their NULs, one decode, one split (~10 numpy calls)."""
        lens = length.astype(np.int64)
        lens += 1  # with its NUL
        ends = lens.cumsum()
        first = start - ends
        first += lens  # each id's first byte minus its place in the gathered bytes
        pos = np.repeat(first, lens)
        pos += np.arange(len(pos))
        parts = self.buf[pos].tobytes().decode("utf-8").split("\0")
        if len(parts) != len(lens) + 1:  # a NUL inside an id: damage
            raise corrupt(self.store.path, "row_ids holds an id with a NUL character (damaged)")
        return parts[:-1]

    def _few(self, rows):
        """The ids of a few rows read one by one from the table, or None when one is not in it."""
        B, n_blocks, out = self.block_rows, self.slot_of_block.shape[0], []
        for r in rows.tolist():
            b = r // B
            slot = int(self.slot_of_block[b]) if b < n_blocks else -1
            if slot < 0:
                return None
            n = int(self.length[slot, r - b * B])
            if n < 0:
                return None
            at = int(self.start[slot, r - b * B])
            out.append(self.buf[at:at + n].tobytes().decode("utf-8"))
        return out

    def _find(self, rows):
        """(start, length) of each row's id in the buffer; length -1: not in the table."""
        B = self.block_rows
        blocks = rows // B
        if len(rows) and blocks.max() >= self.slot_of_block.shape[0]:
            self._grow_blocks(int(blocks.max()) + 1)
        slot = self.slot_of_block[blocks]
        i = rows - blocks * B
        if slot.min() >= 0:  # all walked: one flat gather each
            at = slot * B
            at += i
            return self.start.reshape(-1)[at], self.length.reshape(-1)[at]
        walked = slot >= 0
        start = np.zeros(len(rows), np.int64)
        length = np.full(len(rows), -1, np.int16)
        start[walked] = self.start[slot[walked], i[walked]]
        length[walked] = self.length[slot[walked], i[walked]]
        return start, length

    def _grow_blocks(self, n_blocks):
        n = max(n_blocks, 2 * self.slot_of_block.shape[0])
        grown = np.full(n, -1, np.int64)
        grown[:self.slot_of_block.shape[0]] = self.slot_of_block
        asked = np.zeros(n, np.int32)
        asked[:self.asked.shape[0]] = self.asked
        self.slot_of_block, self.asked = grown, asked

    def _walk(self, txn, rows):
        """Count a search asking for the blocks of rows (not found; stored rows, so below
        next_row); walk those asked for WALK_AFTER times, the most asked for first, at most
        LOAD_BLOCKS."""
        blocks = np.unique(rows // self.block_rows)
        self.asked[blocks] += 1
        due = blocks[self.asked[blocks] >= self.WALK_AFTER]
        for b in due[np.argsort(-self.asked[due], kind="stable")][:self.LOAD_BLOCKS].tolist():
            self._walk_block(txn, b)

    def _walk_block(self, txn, block):
        """Read the ids of block's rows into its slot: all of them the first time; after
        the last row already there when the block (the one being filled) is walked again."""
        B = self.block_rows
        slot = int(self.slot_of_block[block])
        if slot < 0:
            slot = self._new_slot()
            self.slot_of_block[block] = slot
        seen = np.flatnonzero(self.length[slot] >= 0)
        first = block * B + (int(seen[-1]) + 1 if len(seen) else 0)
        keys, values = [], []
        with txn.cursor(db=self.store.row_ids_db) as cur:
            if cur.set_range(row_key(first)):
                end = row_key((block + 1) * B)
                for k, v in cur:
                    if bytes(k) >= end:
                        break
                    keys.append(bytes(k))
                    values.append(bytes(v))
        if not keys:
            return
        data = b"\0".join(values) + b"\0"
        self._make_room(len(data))
        lens = np.array([len(v) for v in values], np.int64)
        at = rows_from_keys(keys) - block * B
        self.start[slot, at] = self.used + np.cumsum(lens + 1) - (lens + 1)
        self.length[slot, at] = lens
        self.buf[self.used:self.used + len(data)] = np.frombuffer(data, np.uint8)
        self.used += len(data)

    def _new_slot(self):
        if self.n_slots == self.start.shape[0]:
            extra = max(4, self.n_slots)
            self.start = np.concatenate([self.start, np.zeros((extra, self.block_rows), np.int64)])
            self.length = np.concatenate([self.length, np.full((extra, self.block_rows), -1, np.int16)])
        self.n_slots += 1
        return self.n_slots - 1

    def _make_room(self, n_bytes):
        if self.used + n_bytes > self.buf.shape[0]:
            buf = np.zeros(max(self.used + n_bytes, 2 * self.buf.shape[0], 1 << 16), np.uint8)
            buf[:self.used] = self.buf[:self.used]
            self.buf = buf

    def _look_up(self, txn, rows):
        """The ids of rows looked up one by one in ``row_ids`` (one getmulti)."""
        keys = rows.astype(">u8").tobytes()
        with txn.cursor(db=self.store.row_ids_db) as cur:
            found = dict((bytes(k), v) for k, v in cur.getmulti([keys[i:i + 8] for i in range(0, len(keys), 8)]))
        lost = [int(r) for r in rows if row_key(int(r)) not in found]
        if lost:  # the view is refreshed in this transaction: damage
            raise corrupt(self.store.path, f"the ids of {describe_rows(lost)} are missing from row_ids "
                          "(a damaged B-tree page)", rows=lost)
        return [bytes(found[row_key(int(r))]).decode() for r in rows]

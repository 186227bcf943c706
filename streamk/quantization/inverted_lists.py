"""In-memory inverted lists of (row, PQ code): what a reader scans to search.

One arena of codes (cap, M) uint8 and rows (cap,) int64 holds every list
(:mod:`streamk.quantization._ivf_kernels` says how); per list three int64 numbers. Nothing
here is a Python object per image. Costs, for N entries:

- built from N entries in O(N) (counting sort), with 1/8 spare room per list;
- c appends cost O(c) amortised (a full list moves to the end of the arena with
  1.5x room; the arena grows by 1.5x);
- a removal is a mark in ``dead`` (O(1)); the entries of removed rows and the
  space left by moved lists are dropped by a compaction, O(N), once they exceed
  a quarter of the live entries: O(1) amortised per change;
- lists may be *deferred* (:meth:`InvertedLists.defer`): their entries are brought in by
  the owner's ``fetch`` at the first search that probes them, into room reserved when
  the arena was made (so a reader answers its first search after reading only the lists
  it probes; the arena's untouched zero pages cost no memory until then).
"""

import numba
import numpy as np

from . import _ivf_kernels
from ._heap import merge_topk

NO_LIST = 0xFFFFFFFF  # the list number of an entry without a code (left out of the lists)
SPARE = 8  # 1/SPARE spare room per list when built
MIN_SPARE = 4
COMPACT_FRACTION = 0.25  # compact when garbage + removed entries exceed this share of live ones
COMPACT_MIN = 4096
PARALLEL_MIN = 16384  # entries per query below which one query is not split between threads
_NO_FILTER = np.zeros(0, np.uint64)  # the row bitmap the scans take when there is no filter (unread)


def row_bitmap(rows, n_rows):
    """The bitmap of ``rows`` (int64, each < n_rows) that the filtered scans take: uint64
    words, bit r % 64 of word r // 64 set for each row r (n_rows / 8 bytes, zeroed, then
    one step per row)."""
    words = np.zeros((int(n_rows) + 63) // 64, np.uint64)
    _ivf_kernels.set_bits(np.ascontiguousarray(rows, np.int64), words)
    return words


def _room(counts):
    return counts + counts // SPARE + MIN_SPARE


class InvertedLists:
    def __init__(self, nlist, M, counts=None):
        self.nlist = int(nlist)
        self.M = int(M)
        counts = np.zeros(self.nlist, np.int64) if counts is None else np.asarray(counts, np.int64)
        self.cap = _room(counts)
        self.start = np.zeros(self.nlist, np.int64)
        np.cumsum(self.cap[:-1], out=self.start[1:])
        self.size = np.zeros(self.nlist, np.int64)
        self.end = int(self.start[-1] + self.cap[-1])
        self.codes = np.zeros((self.end, self.M), np.uint8)
        self.rows = np.full(self.end, -1, np.int64)
        self.garbage = 0  # arena entries left behind by moved lists
        self.n_removed = 0  # entries of removed rows still in the arena
        self.deferred = None  # bool (nlist,): lists whose entries are not in yet (None: none)
        # callable(lists int64 (n,)) -> (lists, codes, rows) of their entries, set by the owner
        # around a search that may probe deferred lists
        self.fetch = None

    # ------------------------------------------------------------ building
    @classmethod
    def build(cls, nlist, M, parts, dead, no_list, reserve=None):
        """Lists of the entries ``parts()`` yields as (lists, codes, rows) arrays (called
        twice: the same entries each time); entries whose list is ``no_list`` or whose
        row is marked in ``dead`` are left out. Two passes, count then place, so the
        entries are never all copied in between (they may be views of the LMDB map).
        reserve: (nlist,) more room per list (for the entries of deferred lists)."""
        counts = np.zeros(nlist, np.int64)
        for lists, _, rows in parts():
            keep = lists != no_list
            r = rows[keep]
            inside = r < dead.shape[0]
            keep_rows = np.ones(r.shape[0], bool)
            keep_rows[inside] = dead[r[inside]] == 0
            counts += np.bincount(lists[keep][keep_rows], minlength=nlist)
        out = cls(nlist, M, counts if reserve is None else counts + reserve)
        pos = out.start.copy()
        for lists, codes, rows in parts():
            _ivf_kernels.scatter_entries(lists, codes, rows, dead, no_list, pos, out.codes, out.rows)
        out.size = pos - out.start
        return out

    # ------------------------------------------------------------ deferred lists
    def defer(self, lists):
        """Mark lists (bool (nlist,)) as deferred: the first search that probes one calls
        ``fetch`` for its entries first."""
        lists = np.asarray(lists, bool)
        self.deferred = lists.copy() if lists.any() else None

    def bring_in(self, probes, dead):
        """Fetch the entries of the deferred lists among ``probes`` (int64, -1: none) and
        append those of rows not marked in ``dead``."""
        wanted = np.unique(probes[probes >= 0])
        wanted = wanted[self.deferred[wanted]]
        if not len(wanted):
            return
        if self.fetch is None:
            raise RuntimeError("a search probes lists not read yet, and nothing was given to read them")
        lists, codes, rows = self.fetch(wanted)
        inside = rows < dead.shape[0]
        live = np.ones(len(rows), bool)
        live[inside] = dead[rows[inside]] == 0
        self.append(lists[live], codes[live], rows[live])
        self.deferred[wanted] = False
        if not self.deferred.any():
            self.deferred = None

    # ------------------------------------------------------------ changes
    @property
    def n_entries(self):
        return int(self.size.sum())

    def append(self, lists, codes, rows):
        """Append entries (lists (c,) uint32, codes (c, M) uint8, rows (c,) int64)."""
        lists = np.ascontiguousarray(lists, np.int64)
        codes = np.ascontiguousarray(codes, np.uint8)
        rows = np.ascontiguousarray(rows, np.int64)
        done = 0
        while done < len(lists):
            n, self.end, garbage = _ivf_kernels.append_entries(
                lists[done:], codes[done:], rows[done:], self.start, self.size, self.cap,
                self.codes, self.rows, self.end)
            self.garbage += int(garbage)
            done += int(n)
            if done < len(lists):  # no room for a move: grow the arena by 1.5x
                need = self.end + int(self.cap.max()) * 2 + 16
                self._resize(max(need, self.rows.shape[0] * 3 // 2))

    def _resize(self, capacity):
        codes = np.zeros((capacity, self.M), np.uint8)
        rows = np.full(capacity, -1, np.int64)
        codes[:self.end] = self.codes[:self.end]
        rows[:self.end] = self.rows[:self.end]
        self.codes, self.rows = codes, rows

    def note_removed(self, n):
        self.n_removed += int(n)

    def maybe_compact(self, dead):
        """Compact when what is wasted passes COMPACT_FRACTION of the live entries."""
        waste = self.garbage + self.n_removed
        if waste > max(COMPACT_MIN, COMPACT_FRACTION * (self.n_entries - self.n_removed)):
            self.compact(dead)
            return True
        return False

    def compact(self, dead):
        counts = _ivf_kernels.live_counts(self.start, self.size, self.rows, dead)
        fresh = InvertedLists(self.nlist, self.M, counts)
        _ivf_kernels.compact_into(self.start, self.size, self.codes, self.rows, dead,
                                 fresh.start, fresh.codes, fresh.rows)
        fresh.size = counts
        fresh.deferred, fresh.fetch = self.deferred, self.fetch  # deferred lists stay so (room made as they come)
        self.__dict__.update(fresh.__dict__)

    # ------------------------------------------------------------ search
    def search(self, probes, coarse, tables, dead, k, allow=None, min_probe=None):
        """(scores (nq, k) float32, rows (nq, k) int64) of the k best entries of the
        probed lists, best first, ties by row; missing slots (-inf, -1).

        allow: a row bitmap (:func:`row_bitmap`) of the rows a filter allows (None: all);
        only those are scored. With it, each query visits its first ``min_probe`` probes
        (default: all), then more, in order, until k allowed entries were among them."""
        nq, n_probe = probes.shape
        if self.deferred is not None:
            self.bring_in(probes, dead)
        filtered = allow is not None
        if filtered and min_probe is not None and min_probe < n_probe:
            counts, _ = _ivf_kernels.probes_needed(self.rows, self.start, self.size, dead, allow, probes,
                                                  int(min_probe), int(k))
            probes = np.where(np.arange(n_probe)[None, :] < counts[:, None], probes, -1)
        if not filtered:
            allow = _NO_FILTER
        per_query = np.where(probes >= 0, self.size[np.maximum(probes, 0)], 0).sum(axis=1)
        threads = numba.get_num_threads()
        if threads == 1 or int(per_query.sum()) < PARALLEL_MIN:  # too little to wake the thread pool for
            s, r = _ivf_kernels.ivf_topk_serial(self.codes, self.rows, self.start, self.size, dead, filtered, allow,
                                               probes, coarse, tables, k)
        else:  # split each query between threads only when it has enough to scan
            n_chunks = 1 if nq >= threads else int(max(1, min(threads, per_query.max(initial=0) // PARALLEL_MIN)))
            s, r = _ivf_kernels.ivf_topk_chunks(self.codes, self.rows, self.start, self.size, dead, filtered, allow,
                                               probes, coarse, tables, k, n_chunks)
        return merge_topk(s.reshape(nq, -1), r.reshape(nq, -1), k)

    def memory_bytes(self):
        return (self.codes.nbytes + self.rows.nbytes + self.start.nbytes + self.size.nbytes
                + self.cap.nbytes)

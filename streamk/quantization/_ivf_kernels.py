"""Numba kernels of the inverted lists and their IVF-ADC scan: plain array code, no checks.

The lists live in one arena: list l holds ``size[l]`` entries (a row number and
its M code bytes) at ``start[l] ..``, with room for ``cap[l]``. Appending to a
full list moves it to the end of the arena with 1.5x the room (grown in place
when it is already last), so n appends cost O(n) amortised; the space left
behind is garbage until the next compaction. Removed rows stay in place and
are skipped by the scan (``dead[row] != 0``).

Scores are summed in float32 in the order m = 0, 1, ..., M-1, then the
list's term <q, c_l> is added: a plain numpy loop in that order reproduces
them bit for bit. The k best of a query are kept in a heap whose root is the
worst (lowest score; among equal scores, the larger row), so ties go to the
smaller row whatever the scan order: the result does not depend on how the
lists are laid out or split between threads.
"""

import math

import numpy as np
from numba import njit, prange

from ._heap import drain, offer, push, replace_root
from ._pq_kernels import fill_table, four_scores, one_score


@njit
def _offer(hs, hr, k, dead, s, r):
    """Keep (s, r) if it beats the heap's root and row r is not removed; returns the
    root's score. Kept out of line: the scan loop stays small and its threshold stays
    in a register (3x faster than checking the heap inline for every entry)."""
    if (s > hs[0] or (s == hs[0] and r < hr[0])) and dead[r] == 0:
        replace_root(hs, hr, k, s, r)
    return hs[0]


@njit(inline="always")
def _scan_range(codes, rows, dead, t, lo, hi, cterm, hs, hr, k):
    thr = hs[0]  # only a score >= the root's can enter (an equal one by a smaller row)
    i = lo
    while i + 4 <= hi:
        s0, s1, s2, s3 = four_scores(codes, t, i)
        if s0 + cterm >= thr:
            thr = _offer(hs, hr, k, dead, s0 + cterm, rows[i])
        if s1 + cterm >= thr:
            thr = _offer(hs, hr, k, dead, s1 + cterm, rows[i + 1])
        if s2 + cterm >= thr:
            thr = _offer(hs, hr, k, dead, s2 + cterm, rows[i + 2])
        if s3 + cterm >= thr:
            thr = _offer(hs, hr, k, dead, s3 + cterm, rows[i + 3])
        i += 4
    while i < hi:
        s = one_score(codes, t, i) + cterm
        if s >= thr:
            thr = _offer(hs, hr, k, dead, s, rows[i])
        i += 1


@njit(inline="always")
def _scan_part(codes, rows, start, size, dead, filtered, allow, probes, coarse, tables, k, n_chunks, u, out_s, out_r):
    """Part u % n_chunks of query u // n_chunks: its probed entries, taken list after
    list, cut into n_chunks equal parts. ``filtered``: test each entry's row against the
    bitmap ``allow`` before scoring it (the choice is made once per list, outside the
    entry loops; unfiltered, ``allow`` is not read)."""
    n_probe = probes.shape[1]
    a = u // n_chunks
    c = u % n_chunks
    total = 0
    for p in range(n_probe):
        if probes[a, p] >= 0:
            total += size[probes[a, p]]
    lo = total * c // n_chunks
    hi = total * (c + 1) // n_chunks
    hs = out_s[a, c]
    hr = out_r[a, c]
    t = tables[a]
    off = 0  # position of list p's first entry among the query's probed entries
    for p in range(n_probe):
        if off >= hi:
            break
        lst = probes[a, p]
        if lst < 0:
            continue
        n_l = size[lst]
        b = max(lo, off)
        e = min(hi, off + n_l)
        if b < e:
            base = start[lst] - off
            if filtered:
                _scan_range_allowed(codes, rows, dead, allow, t, base + b, base + e, coarse[a, p], hs, hr, k)
            else:
                _scan_range(codes, rows, dead, t, base + b, base + e, coarse[a, p], hs, hr, k)
        off += n_l


@njit(parallel=True, cache=True)
def ivf_topk_chunks(codes, rows, start, size, dead, filtered, allow, probes, coarse, tables, k, n_chunks):
    """The k best rows of each query among the lists it probes, in ``n_chunks`` parts.

    codes (cap, M) uint8 and rows (cap,) int64: the arena; start, size (nlist,) int64;
    dead (>= max row + 1,) uint8; filtered: whether only the rows of the bitmap ``allow``
    (uint64, see the filtered scans below; unread when not filtered) count; probes
    (nq, P) int64 lists to visit (-1: none); coarse (nq, P) float32 the term <q, c_l> of
    each; tables (nq, M, 256) float32. Each query's probed entries, taken list after
    list, are cut into n_chunks equal parts scanned in parallel. Returns (nq, n_chunks,
    k) scores and rows, each part's k in heap order, unused slots (-inf, -1): merge
    with ``_heap.merge_topk``.
    """
    nq = probes.shape[0]
    out_s = np.full((nq, n_chunks, k), -np.inf, dtype=np.float32)
    out_r = np.full((nq, n_chunks, k), -1, dtype=np.int64)
    for u in prange(nq * n_chunks):
        _scan_part(codes, rows, start, size, dead, filtered, allow, probes, coarse, tables, k, n_chunks, u,
                   out_s, out_r)
    return out_s, out_r


@njit(cache=True)
def ivf_topk_serial(codes, rows, start, size, dead, filtered, allow, probes, coarse, tables, k):
    """``ivf_topk_chunks`` with one part per query, on the calling thread: waking the
    thread pool costs more than a small scan (~0.1-0.3 ms)."""
    nq = probes.shape[0]
    out_s = np.full((nq, 1, k), -np.inf, dtype=np.float32)
    out_r = np.full((nq, 1, k), -1, dtype=np.int64)
    for u in range(nq):
        _scan_part(codes, rows, start, size, dead, filtered, allow, probes, coarse, tables, k, 1, u, out_s, out_r)
    return out_s, out_r


@njit(cache=True)
def nearest_lists(G, half_norms, n_probe, size):
    """The ``n_probe`` lists each query visits: those of the largest G[a, l] - half_norms[l]
    (float32: the nearest centroids, as |q - c_l|^2 = |q|^2 - 2 (<q, c_l> - |c_l|^2 / 2)),
    nearest first, ties by list number, kept in a heap of n_probe (no sort of nlist
    numbers; 1 <= n_probe <= nlist). G (nq, nlist) float32: <q, c_l>; size (nlist,) int64:
    the lists' entries. Returns (probes (nq, n_probe) int64, coarse (nq, n_probe) float32:
    G at the probes, entries (the probed lists' entries, all queries))."""
    nq, nlist = G.shape
    probes = np.empty((nq, n_probe), np.int64)
    coarse = np.empty((nq, n_probe), np.float32)
    hs = np.empty(n_probe, np.float32)
    hr = np.empty(n_probe, np.int64)
    crit = np.empty(n_probe, np.float32)
    entries = 0
    for a in range(nq):
        g = G[a]
        for lst in range(n_probe):
            push(hs, hr, lst, g[lst] - half_norms[lst], lst)
        # lists come in increasing order, so a later one never wins a tie: one comparison
        # with the root, kept in a register (10x faster than offer() for every list)
        thr = hs[0]
        for lst in range(n_probe, nlist):
            s = g[lst] - half_norms[lst]
            if s > thr:
                replace_root(hs, hr, n_probe, s, lst)
                thr = hs[0]
        drain(hs, hr, n_probe, crit, probes[a])
        for p in range(n_probe):
            coarse[a, p] = g[probes[a, p]]
            entries += size[probes[a, p]]
    return probes, coarse, entries


@njit(cache=True, fastmath=True)
def int8_inner_products(C8, Qs, out):
    """out[a, l] = sum_j C8[l, j] Qs[a, j] in float32, in any order (fastmath lets the sum be
    vectorised; its error is bounded whatever the order: :func:`nearest_lists_checked`).
    C8 (nlist, D) int8, Qs (nq, D) float32, out (nq, nlist) float32. A quarter of the bytes
    of the float32 centroids: the coarse step of one query is memory-bound."""
    nq, d = Qs.shape
    for lst in range(C8.shape[0]):  # each row read once for all the queries (it stays in L1)
        row = C8[lst]
        for a in range(nq):
            q = Qs[a]
            s = np.float32(0.0)
            for j in range(d):
                s += np.float32(row[j]) * q[j]
            out[a, lst] = s


@njit(inline="always")
def _dot64(row, q):
    """sum_j row[j] q[j] in float64, in a fixed order: 4 running sums (j mod 4), then added
    in order; the same number for the same vectors, and 4 chains at once instead of one."""
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    d = q.shape[0]
    whole = d - d % 4
    for j in range(0, whole, 4):
        a0 += np.float64(row[j]) * np.float64(q[j])
        a1 += np.float64(row[j + 1]) * np.float64(q[j + 1])
        a2 += np.float64(row[j + 2]) * np.float64(q[j + 2])
        a3 += np.float64(row[j + 3]) * np.float64(q[j + 3])
    for j in range(whole, d):
        a0 += np.float64(row[j]) * np.float64(q[j])
    return ((a0 + a1) + a2) + a3


@njit(cache=True)
def nearest_lists_checked(A, Q, Qs, err, err_scaled, norm8, gamma, half, C, n_probe, size):
    """:func:`nearest_lists` decided by the exact criteria <q, c_l> - |c_l|^2 / 2 (float64
    sums of the float32 vectors; ties by list number), from A = :func:`int8_inner_products`
    of C8 and Qs = Q s (the centroids c_l ~ s C8_l, s a scale per dimension). A[a, l] is
    within

        delta_l = min(|q| err_l, |q s| err_scaled_l) + gamma |q s| norm8_l

    of <q, c_l> (err_l = |c_l - s C8_l|, err_scaled_l = |(c_l - s C8_l) / s|: Cauchy-Schwarz
    twice; norm8_l = |C8_l|, gamma: the float32 sums' rounding, Higham's gamma_(D+1)), and
    within delta, the largest delta_l, of them all. The n_probe largest approximate criteria
    less delta set a threshold (each of those lists is at least that near); the lists whose
    approximate criterion plus delta_l reaches it are summed exactly, the largest first, until
    the next cannot beat the n_probe-th exact criterion found (n_probe and a few more lists for
    a query). half (nlist,) float64: |c_l|^2 / 2. Returns (probes, coarse: float32 of the
    exact <q, c_l>, entries), as :func:`nearest_lists`."""
    nq, nlist = A.shape
    d = Q.shape[1]
    probes = np.empty((nq, n_probe), np.int64)
    coarse = np.empty((nq, n_probe), np.float32)
    hs = np.empty(n_probe, np.float64)
    hr = np.empty(n_probe, np.int64)
    best = np.empty(n_probe, np.float64)
    upper = np.empty(nlist, np.float64)
    cand = np.empty(nlist, np.int64)
    e1 = 0.0
    e2 = 0.0
    e3 = 0.0
    h = 0.0
    for lst in range(nlist):
        e1 = max(e1, err[lst])
        e2 = max(e2, err_scaled[lst])
        e3 = max(e3, norm8[lst])
        h = max(h, half[lst])
    entries = 0
    for a in range(nq):
        q = Q[a]
        qn = 0.0
        qsn = 0.0
        for j in range(d):
            qn += np.float64(q[j]) * np.float64(q[j])
            qsn += np.float64(Qs[a, j]) * np.float64(Qs[a, j])
        qn = math.sqrt(qn) * (1.0 + 1e-9)  # the norms' own rounding, with room to spare
        qsn = math.sqrt(qsn) * (1.0 + 1e-9)
        # the float64 arithmetic of the criteria themselves: far below any bound above
        tiny = 1e-14 * (h + qn * math.sqrt(2.0 * h)) + 1e-300
        delta = min(qn * e1, qsn * e2) + gamma * qsn * e3 + tiny
        g = A[a]
        for lst in range(n_probe):  # the n_probe largest approximate criteria, as nearest_lists
            push(hs, hr, lst, np.float64(g[lst]) - half[lst], lst)
        root = hs[0]
        for lst in range(n_probe, nlist):
            v = np.float64(g[lst]) - half[lst]
            if v > root:
                replace_root(hs, hr, n_probe, v, lst)
                root = hs[0]
        thr = root - delta
        m = 0
        for lst in range(nlist):
            v = np.float64(g[lst]) - half[lst]
            if v + delta >= thr:  # else even its largest error keeps it out
                hi = v + min(qn * err[lst], qsn * err_scaled[lst]) + gamma * qsn * norm8[lst] + tiny
                if hi >= thr:
                    cand[m] = lst
                    upper[m] = -hi
                    m += 1
        order = np.argsort(upper[:m], kind="mergesort")  # largest upper bound first
        filled = 0
        for t in range(m):
            lst = cand[order[t]]
            if filled == n_probe and -upper[order[t]] < hs[0]:
                break  # neither this list nor any after it can be among the nearest
            filled = offer(hs, hr, n_probe, filled, _dot64(C[lst], q) - half[lst], lst)
        drain(hs, hr, filled, best, probes[a])
        for p in range(n_probe):
            lst = probes[a, p]
            coarse[a, p] = np.float32(best[p] + half[lst])
            entries += size[lst]
    return probes, coarse, entries


@njit(cache=True)
def ivf_topk_sorted(codes, rows, start, size, dead, probes, coarse, cb_t, Q, k):
    """``ivf_topk_serial`` then ``merge_topk``, unfiltered, in one call, each query's table
    built here (``_pq_kernels.fill_table`` of Q[a] with the codebooks cb_t (M, d, 256)): the
    k best rows of each query among the lists it probes, (nq, k) scores and rows, best
    first, ties by row, unused slots (-inf, -1). The same numbers as those kernels given
    ``adc_tables(cb_t, Q)``: one scan, one heap drained in order."""
    nq = probes.shape[0]
    out_s = np.empty((nq, k), np.float32)
    out_r = np.empty((nq, k), np.int64)
    table = np.empty((1, cb_t.shape[0], cb_t.shape[2]), np.float32)
    hs = np.empty((1, 1, k), np.float32)
    hr = np.empty((1, 1, k), np.int64)
    no_filter = np.zeros(0, np.uint64)
    for a in range(nq):
        fill_table(cb_t, Q[a], table[0])
        hs[:] = -np.inf
        hr[:] = -1
        _scan_part(codes, rows, start, size, dead, False, no_filter, probes[a:a + 1], coarse[a:a + 1], table, k, 1,
                   0, hs, hr)
        drain(hs[0, 0], hr[0, 0], k, out_s[a], out_r[a])
    return out_s, out_r


@njit(cache=True)
def scatter_entries(lists, codes, rows, dead, no_list, pos, arena_codes, arena_rows):
    """Put each live entry (list != no_list, row not dead) at pos[list] and advance it."""
    m = codes.shape[1]
    for i in range(lists.shape[0]):
        lst = lists[i]
        r = rows[i]
        if lst == no_list or (r < dead.shape[0] and dead[r] != 0):
            continue
        p = pos[lst]
        for j in range(m):
            arena_codes[p, j] = codes[i, j]
        arena_rows[p] = r
        pos[lst] = p + 1


@njit(cache=True)
def append_entries(lists, codes, rows, start, size, cap, arena_codes, arena_rows, end):
    """Append entries in order, moving a full list to the end of the arena with 1.5x room.

    Returns (entries done, new end, garbage made); stops early when the arena has no
    room for a move (the caller grows it and calls again with the rest)."""
    m = codes.shape[1]
    total = arena_rows.shape[0]
    garbage = 0
    for i in range(lists.shape[0]):
        lst = lists[i]
        if size[lst] == cap[lst]:
            new_cap = cap[lst] + max(cap[lst] // 2, 8)
            if start[lst] + cap[lst] == end:  # the last list: grow in place
                if start[lst] + new_cap > total:
                    return i, end, garbage
                end = start[lst] + new_cap
            else:
                if end + new_cap > total:
                    return i, end, garbage
                s0 = start[lst]
                for q in range(size[lst]):
                    for j in range(m):
                        arena_codes[end + q, j] = arena_codes[s0 + q, j]
                    arena_rows[end + q] = arena_rows[s0 + q]
                garbage += cap[lst]
                start[lst] = end
                end += new_cap
            cap[lst] = new_cap
        p = start[lst] + size[lst]
        for j in range(m):
            arena_codes[p, j] = codes[i, j]
        arena_rows[p] = rows[i]
        size[lst] += 1
    return lists.shape[0], end, garbage


@njit(cache=True)
def live_counts(start, size, arena_rows, dead):
    """Entries of each list whose row is not removed."""
    nlist = start.shape[0]
    out = np.zeros(nlist, np.int64)
    for lst in range(nlist):
        c = 0
        for i in range(start[lst], start[lst] + size[lst]):
            r = arena_rows[i]
            if r >= dead.shape[0] or dead[r] == 0:
                c += 1
        out[lst] = c
    return out


@njit(cache=True)
def compact_into(start, size, arena_codes, arena_rows, dead, new_start, new_codes, new_rows):
    """Copy each list's live entries, in order, to new_start[l] in the new arena."""
    m = arena_codes.shape[1]
    for lst in range(start.shape[0]):
        p = new_start[lst]
        for i in range(start[lst], start[lst] + size[lst]):
            r = arena_rows[i]
            if r < dead.shape[0] and dead[r] != 0:
                continue
            for j in range(m):
                new_codes[p, j] = arena_codes[i, j]
            new_rows[p] = r
            p += 1


# ---------------------------------------------------------------- filtered scans
# ``allow`` is a bitmap of the rows a filter allows: bit r % 64 of word r // 64 (uint64),
# covering every row in the lists. An entry is tested against it before it is scored,
# so a selective filter costs one bit test per entry it does not allow.

@njit(inline="always")
def _allowed(allow, dead, r):
    return (allow[r >> 6] >> np.uint64(r & 63)) & np.uint64(1) != 0 and dead[r] == 0


@njit(cache=True)
def set_bits(rows, words):
    """Set the bit of each row in ``words`` (uint64)."""
    for i in range(rows.shape[0]):
        r = rows[i]
        words[r >> 6] |= np.uint64(1) << np.uint64(r & 63)


@njit(inline="always")
def _scan_range_allowed(codes, rows, dead, allow, t, lo, hi, cterm, hs, hr, k):
    for i in range(lo, hi):
        r = rows[i]
        if (allow[r >> 6] >> np.uint64(r & 63)) & np.uint64(1) == 0:
            continue
        s = one_score(codes, t, i) + cterm
        # removed rows are tested only for an entry that would enter the heap (as _offer
        # does): a test per allowed entry made the filtered scan 4x slower
        if (s > hs[0] or (s == hs[0] and r < hr[0])) and dead[r] == 0:
            replace_root(hs, hr, k, s, r)


@njit(cache=True)
def probes_needed(rows, start, size, dead, allow, probes, min_probe, need):
    """For each query, how many of its probes (in order) to visit: at least ``min_probe``,
    and more until ``need`` allowed, live entries are among them (or every probe). One
    bit test per entry of the lists it counts; no scoring. Returns (counts (nq,), entries
    seen (nq,))."""
    nq, n_probe = probes.shape
    out = np.empty(nq, np.int64)
    seen_out = np.empty(nq, np.int64)
    for a in range(nq):
        seen = 0
        p = 0
        while p < n_probe and (p < min_probe or seen < need):
            lst = probes[a, p]
            if lst >= 0:
                for i in range(start[lst], start[lst] + size[lst]):
                    if _allowed(allow, dead, rows[i]):
                        seen += 1
            p += 1
        out[a] = p
        seen_out[a] = seen
    return out, seen_out

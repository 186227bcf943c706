"""Numba kernel of records.py: decode many checked records at once (array code only).

The caller has validated every record's header, length and CRC (records.parse_header);
this kernel only turns bytes into the arrays, with the same lookup tables and the same
float64 position arithmetic as records._dequantise (so both decoders agree bit for bit).
"""

import numpy as np
from numba import njit


@njit(cache=True)
def decode_many(buf, starts, ns, thetas, ws, hs, levels, log_tab, shear_tab, theta_tab, out_starts,
                words, sigs, xy, frames, theta):
    """Record r (bytes from starts[r], ns[r] features) into rows out_starts[r] onwards.
    Returns False when a record's words are not sorted (an inconsistent record)."""
    ok = True
    for r in range(starts.shape[0]):
        n = ns[r]
        o = starts[r] + 32
        row = out_starts[r]
        sx = ws[r] / levels
        sy = hs[r] / levels
        for i in range(n):
            v = np.uint64(0)
            for b in range(8):
                v |= np.uint64(buf[o + 8 * i + b]) << np.uint64(8 * b)
            sigs[row + i] = v
        o += 8 * n
        for i in range(n):
            words[row + i] = np.int64(buf[o + 2 * i]) | (np.int64(buf[o + 2 * i + 1]) << 8)
        o += 2 * n
        for i in range(1, n):
            if words[row + i] < words[row + i - 1]:
                ok = False
        for i in range(n):
            p0 = np.int64(buf[o + 3 * i])
            p1 = np.int64(buf[o + 3 * i + 1])
            p2 = np.int64(buf[o + 3 * i + 2])
            x = p0 | ((p1 & 0xF) << 8)
            y = (p1 >> 4) | (p2 << 4)
            xy[row + i, 0] = np.float32((x + 0.5) * sx - 0.5)
            xy[row + i, 1] = np.float32((y + 0.5) * sy - 0.5)
        o += 3 * n
        for i in range(n):
            a11 = log_tab[buf[o + 3 * i]]
            a22 = log_tab[buf[o + 3 * i + 1]]
            frames[row + i, 0] = a11
            frames[row + i, 1] = shear_tab[buf[o + 3 * i + 2]] * np.sqrt(a11 * a22)
            frames[row + i, 2] = a22
        o += 3 * n
        for i in range(n):
            theta[row + i] = theta_tab[buf[o + i]] if thetas[r] else np.float32(0.0)
    return ok

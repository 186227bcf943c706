"""Tentative correspondences between two geometry records: shared visual word and
signatures within a Hamming distance (Jégou, Douze, Schmid, ECCV 2008).

Both records are sorted by word, so the pairs come from one merge of the two
lists (O(n_q + n_c) plus the pairs inside shared words), not from all n_q x n_c
pairs. Burstiness (Jégou, Douze, Schmid, CVPR 2009: repeated structures put many
features of one image in the same word) is tamed by a cap: at most
``max_pairs_per_word`` pairs per shared word, those with the smallest Hamming
distances (ties by query index, then candidate index). Inlier counting downstream
is one-to-one, so the pairs a burst does keep cannot inflate a score either.

The rule, exactly (what the brute-force reference in the tests computes): for each
word w in both records, the pairs (i, j) with words_q[i] = words_c[j] = w and
popcount(sig_q[i] ^ sig_c[j]) <= hamming_threshold, sorted by (distance, i, j), the
first ``max_pairs_per_word`` kept; output ordered by (w, distance, i, j).
"""

from __future__ import annotations

import numpy as np

from . import _matching_kernels as _k
from ..errors import ConfigError, DimensionError

DEFAULT_HAMMING_THRESHOLD = 24  # of 64 bits: Jégou et al. 2008 (h_t = 22-24)
DEFAULT_MAX_PAIRS_PER_WORD = 32

__all__ = ["DEFAULT_HAMMING_THRESHOLD", "DEFAULT_MAX_PAIRS_PER_WORD", "tentative_matches"]


def check_match_params(hamming_threshold, max_pairs_per_word):
    if isinstance(hamming_threshold, bool) or not isinstance(hamming_threshold, (int, np.integer)) \
            or not 0 <= hamming_threshold <= 64:
        raise ConfigError(f"hamming_threshold must be an integer in [0, 64], got {hamming_threshold!r}")
    if isinstance(max_pairs_per_word, bool) or not isinstance(max_pairs_per_word, (int, np.integer)) \
            or not 1 <= max_pairs_per_word <= 1 << 20:
        raise ConfigError(f"max_pairs_per_word must be an integer in [1, 2^20], got {max_pairs_per_word!r}")


def _sorted_words(words, what):
    words = np.asarray(words)
    if words.ndim != 1 or words.dtype.kind not in "iu":
        raise DimensionError(f"{what} words must be a 1-D integer array, got {words.shape} {words.dtype}")
    words = words.astype(np.int64)
    if len(words) and np.any(words[1:] < words[:-1]):
        raise DimensionError(f"{what} words must be sorted (geometry records are)")
    if len(words) >= 1 << 21:
        raise DimensionError(f"{what}: at most 2^21 features")
    return words


def _sigs(sigs, n, what):
    sigs = np.asarray(sigs)
    if sigs.shape != (n,) or sigs.dtype != np.uint64:
        raise DimensionError(f"{what} signatures must be ({n},) uint64, got {sigs.shape} {sigs.dtype}")
    return np.ascontiguousarray(sigs)


def match_arrays(qw, qs, dw, ds, ht, cap):
    """The kernel pair on validated arrays: (query idx, candidate idx, distance), int64 each."""
    bound, block = _k.match_bound(qw, dw, cap)
    out_q = np.empty(bound, np.int64)
    out_d = np.empty(bound, np.int64)
    out_h = np.empty(bound, np.int64)
    scratch = np.empty(max(block, 1), np.int64)
    m = _k.match_into(qw, qs, dw, ds, ht, cap, out_q, out_d, out_h, scratch)
    return out_q[:m], out_d[:m], out_h[:m]


def tentative_matches(query, candidate, hamming_threshold=DEFAULT_HAMMING_THRESHOLD,
                      max_pairs_per_word=DEFAULT_MAX_PAIRS_PER_WORD):
    """Tentative correspondences of two records (GeometryRecord, or anything with sorted
    ``words`` and uint64 ``signatures``): (query indices, candidate indices, Hamming
    distances), int64 arrays in the order (word, distance, query index, candidate index)."""
    check_match_params(hamming_threshold, max_pairs_per_word)
    qw = _sorted_words(query.words, "query")
    dw = _sorted_words(candidate.words, "candidate")
    qs = _sigs(query.signatures, len(qw), "query")
    ds = _sigs(candidate.signatures, len(dw), "candidate")
    return match_arrays(qw, qs, dw, ds, int(hamming_threshold), int(max_pairs_per_word))

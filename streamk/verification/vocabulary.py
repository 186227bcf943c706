"""Visual words and Hamming-embedding signatures: the compact per-feature code that
finds tentative correspondences for spatial verification.

    raw SIFT --RootSIFT--> x (128-d)
      -> coarse word c = nearest of ``n_coarse`` centroids        (one BLAS product)
      -> word w = nearest child of c (at most ``n_fine`` per c)   (Numba kernel)
      -> signature b_i = [ (P x)_i > tau_{w,i} ],  i < 64         (Jégou, Douze, Schmid, ECCV 2008)

Two-level (hierarchical) k-means rather than a flat vocabulary: a flat 65k-word
k-means costs ~5e12 flops per Lloyd iteration on a realistic learning set and
assigns 2,000 query descriptors in ~0.3 s; the two-level tree assigns them with
256 + (at most 256) distances each (a few ms) and trains as 1 + n_coarse small
k-means. Nearest-child assignment is not the flat nearest word (a descriptor near
a coarse boundary may pick a child of the other cell); for tentative matching that
only has to be the same function on both sides, which it is.

The default tree is 64 x 64 = 4,096 words, and the number of children of a coarse
cell adapts to the learning data: at most ``n_fine``, and at least ``min_per_word``
learning descriptors per word on average (so that each word's 64 HE medians are
estimated from enough samples: the median of n Gaussian samples has a standard
deviation of about 1.25 sigma / sqrt(n), 0.22 sigma at n = 32). 4,096 words rather
than the tens of thousands of a BOW system: with Hamming embedding the signature does
the fine matching (Jégou et al. 2008 match a 200k-word BOW with 20k words + HE), the
learning sets streamk ships are small (paris6k-subset: 565k descriptors, ~140 per word
at 4,096), and the words only need to be the same function on both sides. Larger
trees (up to 256 x 256) are a parameter for paper-size learning sets (~16M descriptors).

HE, as in Jégou et al. 2008: P is a random orthogonal projection (64 x 128, rows of
the Q factor of a seeded Gaussian matrix), tau_w the per-word medians of the projected
learning descriptors (words with fewer than ``min_he_samples`` learning descriptors use
their coarse cell's medians). Signatures are 64-bit integers, bit i = component i.

Saved as .npz bytes with a JSON header (``to_bytes`` / ``from_bytes``), never pickle.
``fingerprint_`` (CRC-32 of the learned arrays) goes into every geometry record so that
records of different vocabularies are never compared.
"""

from __future__ import annotations

import io
import json
import zlib

import numpy as np

from ..encoding import rootsift
from ..files import atomic_write
from . import _vocabulary_kernels as _k
from ..errors import (ConfigError, DimensionError, EmptyDescriptorSetError, NonFiniteError, NotFittedError,
                      VocabularyFileError)

FORMAT = "streamk-vocabulary"
FORMAT_VERSION = 1
DESCRIPTOR_DIM = 128
SIGNATURE_BITS = 64
MAX_WORDS = 65_536  # word ids are uint16 in the geometry records

__all__ = ["Vocabulary"]


def _as_sift(X, what="SIFT descriptors", allow_empty=False):
    """(n, 128) raw SIFT (uint8 or real) as float32 RootSIFT, or a named error."""
    try:
        X = np.asarray(X)
    except Exception as exc:  # ragged input
        raise DimensionError(f"{what}: not an array ({exc})") from exc
    if X.ndim != 2 or X.shape[1] != DESCRIPTOR_DIM:
        if X.size == 0 and allow_empty:
            return np.zeros((0, DESCRIPTOR_DIM), np.float32)
        raise DimensionError(f"{what}: expected an (n, {DESCRIPTOR_DIM}) array, got shape {X.shape}")
    if X.shape[0] == 0 and not allow_empty:
        raise EmptyDescriptorSetError(f"{what} is empty")
    if not np.issubdtype(X.dtype, np.number) or np.iscomplexobj(X):
        raise DimensionError(f"{what}: expected real numbers, got dtype {X.dtype}")
    if X.dtype.kind == "f" and not np.isfinite(X).all():
        raise NonFiniteError(f"{what} contain NaN or infinite values")
    if (X < 0).any():
        raise DimensionError(f"{what}: raw SIFT is non-negative")
    return np.ascontiguousarray(rootsift(X))


def _seed_for(seed, *parts):
    return int(np.random.SeedSequence([int(seed), *[int(p) for p in parts]]).generate_state(1)[0])


def _kmeans(X, k, seed, max_iter):
    from sklearn.cluster import KMeans

    k = int(min(k, len(X)))
    if k <= 1:
        return X.mean(axis=0, keepdims=True).astype(np.float32)
    km = KMeans(n_clusters=k, n_init=1, max_iter=max_iter, random_state=seed, algorithm="lloyd").fit(X)
    return np.ascontiguousarray(km.cluster_centers_, dtype=np.float32)


def _sqnorms(C):
    return (C.astype(np.float64) ** 2).sum(axis=1).astype(np.float32)


class Vocabulary:
    """Two-level visual vocabulary + 64-bit Hamming embedding, learned on RootSIFT.

    Parameters
    ----------
    n_coarse, n_fine : the tree's branching (at most n_coarse * n_fine <= 65,536 words).
    min_per_word : learning descriptors per word (on average, per coarse cell) below
        which a cell gets fewer children (see the module docstring).
    max_coarse_fit : learning descriptors (a seeded subsample) for the coarse k-means.
    max_iter : Lloyd iterations of each k-means.
    min_he_samples : words with fewer learning descriptors take their cell's HE medians.
    seed : seeds every learned part (subsample, k-means, projection).

    Learned attributes: ``coarse_`` (C, 128), ``fine_`` (W, 128), ``offsets_`` (C + 1,)
    (children of cell c are words offsets_[c] .. offsets_[c + 1] - 1), ``projection_``
    (64, 128), ``medians_`` (W, 64), ``fingerprint_`` (uint32).
    """

    def __init__(self, n_coarse=64, n_fine=64, min_per_word=32, max_coarse_fit=200_000, max_iter=20,
                 min_he_samples=8, seed=0):
        for name, value, low in (("n_coarse", n_coarse, 1), ("n_fine", n_fine, 1), ("min_per_word", min_per_word, 1),
                                 ("max_coarse_fit", max_coarse_fit, 1), ("max_iter", max_iter, 1),
                                 ("min_he_samples", min_he_samples, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        if n_coarse * n_fine > MAX_WORDS:
            raise ConfigError(f"n_coarse * n_fine = {n_coarse * n_fine} words exceeds {MAX_WORDS} (uint16 word ids)")
        self.n_coarse, self.n_fine, self.min_per_word = int(n_coarse), int(n_fine), int(min_per_word)
        self.max_coarse_fit, self.max_iter = int(max_coarse_fit), int(max_iter)
        self.min_he_samples = int(min_he_samples)
        self.seed = int(seed)

    # ------------------------------------------------------------------ learning
    @property
    def fitted(self):
        return hasattr(self, "fine_")

    @property
    def full_learning_size(self):
        """Learning descriptors it takes for every coarse cell to grow ``n_fine`` words (with
        ``min_per_word`` each, on average): fewer make fewer, coarser words."""
        return self.n_coarse * self.n_fine * self.min_per_word

    @property
    def n_words(self):
        self._check_fitted()
        return int(self.fine_.shape[0])

    def _check_fitted(self):
        if not self.fitted:
            raise NotFittedError("this Vocabulary is not fitted yet: call fit(learning descriptors)")

    def fit(self, X):
        """Learn the tree and the HE parameters on raw SIFT (an (n, 128) array or a list of them)."""
        if isinstance(X, (list, tuple)):
            if not X:
                raise EmptyDescriptorSetError("no learning descriptor sets")
            parts = [np.asarray(x) for x in X]
            for i, x in enumerate(parts):
                if x.size and (x.ndim != 2 or x.shape[1] != DESCRIPTOR_DIM):
                    raise DimensionError(f"learning set {i}: expected (n, {DESCRIPTOR_DIM}), got shape {x.shape}")
            X = np.concatenate([x if x.size else np.zeros((0, DESCRIPTOR_DIM), np.uint8) for x in parts])
        R = _as_sift(X, "learning descriptors")
        n = len(R)
        if n < self.n_coarse:
            raise ConfigError(f"{n} learning descriptors for {self.n_coarse} coarse words")
        rng = np.random.default_rng(_seed_for(self.seed, 1))
        sub = R if n <= self.max_coarse_fit else R[np.sort(rng.choice(n, self.max_coarse_fit, replace=False))]
        self.coarse_ = _kmeans(sub, self.n_coarse, _seed_for(self.seed, 2), self.max_iter)
        self.coarse_sqnorms_ = _sqnorms(self.coarse_)
        cells = self._coarse(R)
        order = np.argsort(cells, kind="stable")
        bounds = np.searchsorted(cells[order], np.arange(len(self.coarse_) + 1))
        fine, counts = [], []
        for c in range(len(self.coarse_)):  # one small k-means per coarse cell
            Xc = R[order[bounds[c]:bounds[c + 1]]]
            if len(Xc) == 0:  # an empty cell keeps one word: its centroid
                fine.append(self.coarse_[c:c + 1])
            else:
                k = max(1, min(self.n_fine, len(Xc) // self.min_per_word))
                fine.append(_kmeans(Xc, k, _seed_for(self.seed, 3, c), self.max_iter))
            counts.append(len(fine[-1]))
        self.fine_ = np.ascontiguousarray(np.concatenate(fine), dtype=np.float32)
        self.offsets_ = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.fine_sqnorms_ = _sqnorms(self.fine_)
        # HE: random orthogonal projection, per-word medians of the projected learning set
        G = np.random.default_rng(_seed_for(self.seed, 4)).standard_normal((DESCRIPTOR_DIM, DESCRIPTOR_DIM))
        Q, _ = np.linalg.qr(G)
        self.projection_ = np.ascontiguousarray(Q[:SIGNATURE_BITS], dtype=np.float32)
        words = self._fine(R, cells)
        Z = R @ self.projection_.T
        self.medians_ = self._medians(Z, words, cells)
        self._finish()
        return self

    def _medians(self, Z, words, cells):
        W = len(self.fine_)
        med = np.zeros((W, SIGNATURE_BITS), np.float32)
        order = np.argsort(words, kind="stable")
        bounds = np.searchsorted(words[order], np.arange(W + 1))
        corder = np.argsort(cells, kind="stable")
        cbounds = np.searchsorted(cells[corder], np.arange(len(self.coarse_) + 1))
        cell_med = np.zeros((len(self.coarse_), SIGNATURE_BITS), np.float32)
        for c in range(len(self.coarse_)):
            rows = corder[cbounds[c]:cbounds[c + 1]]
            if len(rows):
                cell_med[c] = np.median(Z[rows], axis=0)
        word_cell = np.repeat(np.arange(len(self.coarse_)), np.diff(self.offsets_))
        for w in range(W):
            rows = order[bounds[w]:bounds[w + 1]]
            med[w] = np.median(Z[rows], axis=0) if len(rows) >= self.min_he_samples else cell_med[word_cell[w]]
        return med

    def _finish(self):
        self.fine_sqnorms_ = _sqnorms(self.fine_)
        self.coarse_sqnorms_ = _sqnorms(self.coarse_)
        crc = 0
        for a in (self.coarse_, self.fine_, self.offsets_, self.projection_, self.medians_):
            crc = zlib.crc32(np.ascontiguousarray(a).tobytes(), crc)
        self.fingerprint_ = int(crc) & 0xFFFFFFFF

    # ------------------------------------------------------------------ assignment
    def _coarse(self, R):
        d2 = self.coarse_sqnorms_[None, :] - 2.0 * (R @ self.coarse_.T)
        return np.argmin(d2, axis=1).astype(np.int64)

    def _fine(self, R, cells):
        out = np.empty(len(R), np.int64)
        _k.nearest_child(R, cells, self.fine_, self.fine_sqnorms_, self.offsets_, out)
        return out

    def assign(self, X):
        """Word id (uint16) of each raw SIFT descriptor (RootSIFT is applied here)."""
        return self.encode(X)[0]

    def encode(self, X):
        """(words uint16 (n,), signatures uint64 (n,)) of raw SIFT descriptors (n may be 0)."""
        self._check_fitted()
        R = _as_sift(X, allow_empty=True)
        if len(R) == 0:
            return np.zeros(0, np.uint16), np.zeros(0, np.uint64)
        words = self._fine(R, self._coarse(R))
        return words.astype(np.uint16), self._signatures(R, words)

    def encode_multiple(self, X, m):
        """Multiple assignment (query side; Jégou et al. 2010, Tolias et al. 2013): each raw SIFT
        descriptor to its single-assignment word (the one a database image stores) and its
        ``m - 1`` nearest other words among the children of its ``m`` nearest coarse cells.
        Returns (feature index (k,), words uint16 (k,), signatures uint64 (k,)), k <= n m, each
        signature taken against its own word's medians."""
        self._check_fitted()
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 1 <= m <= 64:
            raise ConfigError(f"multiple assignment m must be an integer in [1, 64], got {m!r}")
        R = _as_sift(X, allow_empty=True)
        if len(R) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.uint16), np.zeros(0, np.uint64)
        if m == 1:
            words = self._fine(R, self._coarse(R))
            return np.arange(len(R), dtype=np.int64), words.astype(np.uint16), self._signatures(R, words)
        d2 = self.coarse_sqnorms_[None, :] - 2.0 * (R @ self.coarse_.T)
        mc = min(m, len(self.coarse_))
        # the m nearest cells, the nearest first (argmin: the cell single assignment picks)
        cells = np.empty((len(R), mc), np.int64)
        cells[:, 0] = np.argmin(d2, axis=1)
        if mc > 1:
            d2[np.arange(len(R)), cells[:, 0]] = np.inf
            cells[:, 1:] = np.argpartition(d2, mc - 2, axis=1)[:, :mc - 1]
        out = np.empty((len(R), m), np.int64)
        out_d = np.empty((len(R), m), np.float32)
        single = np.empty(len(R), np.int64)
        _k.nearest_children_ma(R, cells, self.fine_, self.fine_sqnorms_, self.offsets_, out, out_d, single)
        # the single-assignment word (the database side's) always comes first, then the others by distance
        dup = out == single[:, None]  # the single word is among the m nearest at most once
        if (out >= 0).all():  # the usual case: drop it there (or drop the m-th word), keep the order
            dup[~dup.any(axis=1), m - 1] = True
            words = np.concatenate([single[:, None], out[~dup].reshape(len(R), m - 1)], axis=1)
        else:  # cells with fewer than m words in all: skip the empty slots
            both = np.concatenate([single[:, None], np.where(dup, -1, out)], axis=1)
            words = np.take_along_axis(both, np.argsort(both < 0, axis=1, kind="stable")[:, :m], axis=1)
        ids = np.repeat(np.arange(len(R), dtype=np.int64), m)
        words = words.reshape(-1)
        keep = words >= 0
        ids, words = ids[keep], words[keep]
        Z = R @ self.projection_.T  # once per feature, then one signature per (feature, word)
        return ids, words.astype(np.uint16), self._pack_bits(Z[ids] > self.medians_[words])

    def signatures(self, X, words):
        """64-bit HE signatures of raw SIFT descriptors X given their word ids."""
        self._check_fitted()
        R = _as_sift(X, allow_empty=True)
        words = np.asarray(words)
        if words.shape != (len(R),) or words.dtype.kind not in "iu":
            raise DimensionError(f"words must be {len(R)} integers, got shape {words.shape}, dtype {words.dtype}")
        if len(words) and (words.min() < 0 or words.max() >= self.n_words):
            raise DimensionError(f"word ids must lie in [0, {self.n_words})")
        return self._signatures(R, words.astype(np.int64))

    def _signatures(self, R, words):
        return self._pack_bits((R @ self.projection_.T) > self.medians_[words])

    @staticmethod
    def _pack_bits(bits):
        """(n, 64) booleans -> (n,) uint64, bit i = column i."""
        return np.packbits(bits, axis=1, bitorder="little").view("<u8").reshape(-1).astype(np.uint64)

    # ------------------------------------------------------------------ (de)serialisation
    def to_bytes(self):
        """.npz bytes with a JSON header: no pickle."""
        self._check_fitted()
        meta = {"format": FORMAT, "version": FORMAT_VERSION, "n_coarse": self.n_coarse, "n_fine": self.n_fine,
                "min_per_word": self.min_per_word, "max_coarse_fit": self.max_coarse_fit,
                "max_iter": self.max_iter, "min_he_samples": self.min_he_samples, "seed": self.seed,
                "fingerprint": self.fingerprint_}
        buf = io.BytesIO()
        np.savez(buf, __meta__=np.array(json.dumps(meta)), coarse=self.coarse_, fine=self.fine_,
                 offsets=self.offsets_, projection=self.projection_, medians=self.medians_)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data):
        """A Vocabulary from :meth:`to_bytes` output; VocabularyFileError for anything else."""
        try:
            with np.load(io.BytesIO(bytes(data)), allow_pickle=False) as npz:
                meta = json.loads(str(npz["__meta__"]))
                arrays = {k: npz[k] for k in ("coarse", "fine", "offsets", "projection", "medians")}
        except Exception as exc:  # zip, npz, JSON or missing-key errors
            raise VocabularyFileError(f"not a saved vocabulary ({type(exc).__name__}: {exc})") from exc
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
            raise VocabularyFileError(f"not a vocabulary of format version {FORMAT_VERSION}: {meta!r}")
        try:
            voc = cls(meta["n_coarse"], meta["n_fine"], meta["min_per_word"], meta["max_coarse_fit"],
                      meta["max_iter"], meta["min_he_samples"], meta["seed"])
        except (KeyError, ConfigError) as exc:
            raise VocabularyFileError(f"bad vocabulary header {meta!r}") from exc
        C, W = arrays["coarse"], arrays["fine"]
        offs = arrays["offsets"]
        ok = (C.ndim == 2 and C.shape[1] == DESCRIPTOR_DIM and W.ndim == 2 and W.shape[1] == DESCRIPTOR_DIM
              and 1 <= len(W) <= MAX_WORDS and offs.shape == (len(C) + 1,) and offs.dtype.kind in "iu"
              and arrays["projection"].shape == (SIGNATURE_BITS, DESCRIPTOR_DIM)
              and arrays["medians"].shape == (len(W), SIGNATURE_BITS))
        if ok:
            offs = offs.astype(np.int64)
            ok = offs[0] == 0 and offs[-1] == len(W) and bool(np.all(np.diff(offs) >= 1))
        if not ok or not all(np.isfinite(a).all() for a in arrays.values()):
            raise VocabularyFileError("inconsistent vocabulary arrays (shapes, offsets or non-finite values)")
        voc.coarse_ = np.ascontiguousarray(C, dtype=np.float32)
        voc.fine_ = np.ascontiguousarray(W, dtype=np.float32)
        voc.offsets_ = offs
        voc.projection_ = np.ascontiguousarray(arrays["projection"], dtype=np.float32)
        voc.medians_ = np.ascontiguousarray(arrays["medians"], dtype=np.float32)
        voc._finish()
        if voc.fingerprint_ != meta.get("fingerprint"):
            raise VocabularyFileError("vocabulary arrays do not match their recorded fingerprint (damaged)")
        return voc

    def save(self, path):
        """Write :meth:`to_bytes` to ``path`` (.npz with a JSON header; no pickle), whole or
        not at all (:func:`streamk.files.atomic_write`)."""
        data = self.to_bytes()
        atomic_write(path, lambda fh: fh.write(data), "the vocabulary")

    @classmethod
    def load(cls, path):
        """A Vocabulary saved by :meth:`save`; VocabularyFileError for a missing or bad file."""
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise VocabularyFileError(f"cannot read vocabulary file {path}: {exc.strerror or exc}") from exc
        return cls.from_bytes(data)

    def __repr__(self):
        state = f"{self.n_words} words" if self.fitted else "not fitted"
        return f"Vocabulary(n_coarse={self.n_coarse}, n_fine={self.n_fine}, seed={self.seed}; {state})"

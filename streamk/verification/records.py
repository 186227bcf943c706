"""One image's local-geometry record: what spatial verification needs, and no more.

Per feature: its visual word, its 64-bit Hamming-embedding signature, its position
and its affine frame (Hessian-affine's ellipse, and an orientation when the
extractor gives one). Packed into one bytes value per image, which the index stores
beside the image's vector (and wraps in its own checksum).

Layout, version 1 (little-endian; n features, sorted by word id, stable):

    offset  size  field
    0       3     magic b"SKG"
    3       1     format version (1)
    4       1     flags: bit 0 = orientations stored (any theta != 0); other bits 0
    5       1     signature bytes (8)
    6       2     reserved, 0
    8       4     n, number of features (<= MAX_FEATURES_STORED)
    12      4     image width  w (pixels, >= 1)
    16      4     image height h (pixels, >= 1)
    20      4     vocabulary fingerprint (Vocabulary.fingerprint_)
    24      4     CRC-32 of bytes 0..23 and of the payload
    28      4     reserved, 0
    32      8n    signatures, uint64
    32+8n   2n    word ids, uint16, non-decreasing
    32+10n  3n    position: x, y as 12-bit fractions of w, h (x_q = floor((x + .5) / w * 4096))
    32+13n  3n    frame: log2 a11, log2 a22 on [1, 11] and a21 / sqrt(a11 a22) on [-3, 3], 8 bits each
    32+16n  n     (flag bit 0 only) theta as 8 bits of a turn

So 16 bytes per feature (17 with orientations) plus a 32-byte header; with the default
cap of 1,500 features, at most 24,032 bytes per image. Quantisation errors: position
w / 8192 (0.125 px at 1,024 px), frame axes 1.4 %, shear 0.012 (dequantised values are
what verification uses, on both sides).

Sorting by word makes tentative matching a merge of two sorted lists (no sort at query
time). The cap keeps the first ``max_features`` features in the extractor's order
(streamk: strongest first, i.e. largest scale for Hessian-affine).

Any truncated, damaged or unknown record raises GeometryRecordError; a record is never
decoded into a wrong answer (the CRC covers header and payload).
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from . import _records_kernels as _rk
from ..errors import ConfigError, DimensionError, GeometryRecordError, NonFiniteError

MAGIC = b"SKG"
RECORD_VERSION = 1
HEADER = struct.Struct("<3sBBBHIIIIII")
HEADER_SIZE = HEADER.size  # 32
SIGNATURE_BYTES = 8
FLAG_THETA = 1
BYTES_PER_FEATURE = SIGNATURE_BYTES + 2 + 3 + 3  # 16 (+1 with orientations)
DEFAULT_MAX_RECORD_FEATURES = 1500  # 32 + 1,500 * 16 = 24,032 bytes <= 24 KiB
DEFAULT_QUERY_ASSIGNMENT = 3  # words per query feature (the database side keeps one)
MAX_FEATURES_STORED = 1 << 20
POS_LEVELS = 4096
LOG_RANGE = (1.0, 11.0)  # log2 of the ellipse's axes a11, a22: 2 .. 2,048 px
SHEAR_RANGE = (-3.0, 3.0)  # a21 / sqrt(a11 a22)
KEYPOINT_COLUMNS = ("x", "y", "a11", "a21", "a22", "theta")

__all__ = ["stored_record", "BYTES_PER_FEATURE", "DEFAULT_MAX_RECORD_FEATURES", "HEADER_SIZE", "RECORD_VERSION",
           "GeometryRecord", "make_query_record", "make_record", "pack", "parse_header", "record_size", "unpack",
           "unpack_many"]


@dataclass(frozen=True, eq=False)
class GeometryRecord:
    """Decoded local geometry of one image (features sorted by word).

    words (n,) uint16; signatures (n,) uint64; xy (n, 2) float32; frames (n, 3) float32
    (a11, a21, a22); theta (n,) float32; image_size (w, h); vocabulary (fingerprint);
    feature_ids (n,) int64: the image feature of each entry. Stored records have one entry
    per feature (feature_ids None); a query record with multiple assignment has up to m
    entries per feature (one per word), and inliers are counted per feature.
    """

    words: np.ndarray
    signatures: np.ndarray
    xy: np.ndarray
    frames: np.ndarray
    theta: np.ndarray
    image_size: tuple
    vocabulary: int
    feature_ids: np.ndarray | None = None

    @property
    def ids(self):
        """The feature of each entry (int64)."""
        if self.feature_ids is None:
            return np.arange(len(self.words), dtype=np.int64)
        return self.feature_ids

    @property
    def n_features(self):
        if self.feature_ids is None:
            return len(self.words)
        return int(self.feature_ids.max()) + 1 if len(self.words) else 0

    def __len__(self):
        return len(self.words)

    @property
    def has_theta(self):
        return bool(np.any(self.theta != 0))


def record_size(n, with_theta=False):
    """Bytes of a record of n features."""
    return HEADER_SIZE + n * (BYTES_PER_FEATURE + (1 if with_theta else 0))


# ------------------------------------------------------------------ quantisers (one place for both ways)
def _q8(v, lo, hi):
    return np.clip(np.rint((v - lo) / (hi - lo) * 255.0), 0, 255).astype(np.uint8)


def _levels(lo, hi):
    return (np.float32(lo) + np.arange(256, dtype=np.float32) * np.float32((hi - lo) / 255.0)).astype(np.float32)


# dequantisation tables (both decoders use them, so they agree bit for bit)
LOG_TABLE = np.exp2(_levels(*LOG_RANGE).astype(np.float64)).astype(np.float32)  # a11 or a22 of each level
SHEAR_TABLE = _levels(*SHEAR_RANGE)  # a21 / sqrt(a11 a22) of each level
THETA_TABLE = (np.arange(256) * (2 * math.pi / 256)).astype(np.float32)


def _quantise(xy, frames, theta, w, h):
    """uint8 (n, 3) position bytes, (n, 3) frame bytes and (n,) theta bytes."""
    x = np.clip(np.floor((xy[:, 0].astype(np.float64) + 0.5) / w * POS_LEVELS), 0, POS_LEVELS - 1).astype(np.uint32)
    y = np.clip(np.floor((xy[:, 1].astype(np.float64) + 0.5) / h * POS_LEVELS), 0, POS_LEVELS - 1).astype(np.uint32)
    pos = np.stack([x & 0xFF, (x >> 8) | ((y & 0xF) << 4), y >> 4], axis=1).astype(np.uint8)
    a11, a21, a22 = (frames[:, i].astype(np.float64) for i in range(3))
    fr = np.stack([_q8(np.log2(a11), *LOG_RANGE), _q8(np.log2(a22), *LOG_RANGE),
                   _q8(a21 / np.sqrt(a11 * a22), *SHEAR_RANGE)], axis=1)
    th = (np.rint(np.mod(theta.astype(np.float64), 2 * math.pi) / (2 * math.pi) * 256) % 256).astype(np.uint8)
    return np.ascontiguousarray(pos), np.ascontiguousarray(fr), th


def _dequantise(pos, fr, th, w, h):
    p = pos.astype(np.int64)
    x = p[:, 0] | ((p[:, 1] & 0xF) << 8)
    y = (p[:, 1] >> 4) | (p[:, 2] << 4)
    xy = np.empty((len(pos), 2), np.float32)
    xy[:, 0] = (x + 0.5) * (w / POS_LEVELS) - 0.5
    xy[:, 1] = (y + 0.5) * (h / POS_LEVELS) - 0.5
    a11 = LOG_TABLE[fr[:, 0]]
    a22 = LOG_TABLE[fr[:, 1]]
    frames = np.empty((len(pos), 3), np.float32)
    frames[:, 0] = a11
    frames[:, 1] = SHEAR_TABLE[fr[:, 2]] * np.sqrt(a11 * a22)
    frames[:, 2] = a22
    theta = THETA_TABLE[th] if th is not None else np.zeros(len(pos), np.float32)
    return xy, frames, theta


# ------------------------------------------------------------------ building
def _check_image_size(image_size):
    try:
        w, h = (int(v) for v in image_size)
    except (TypeError, ValueError) as exc:
        raise DimensionError(f"image_size must be (width, height), got {image_size!r}") from exc
    if not (1 <= w < 2**31 and 1 <= h < 2**31):
        raise DimensionError(f"image_size must be positive, got {(w, h)}")
    return w, h


def make_record(vocabulary, keypoints, descriptors, image_size, max_features=DEFAULT_MAX_RECORD_FEATURES,
                multiple_assignment=1):
    """The geometry record of one image's features (a :class:`GeometryRecord`, already
    quantised exactly as :func:`pack` stores it, so a query record built here and a
    database record read back from bytes are treated alike).

    keypoints: (n, 6) x, y, a11, a21, a22, theta (streamk.features convention);
    descriptors: (n, 128) raw SIFT; the first ``max_features`` rows are kept (None: all).
    multiple_assignment: m > 1 gives each feature its m nearest words (a query record: it
    cannot be packed; stored records have one word per feature).
    """
    vocabulary._check_fitted()
    kp = np.asarray(keypoints)
    if kp.ndim != 2 or kp.shape[1] != len(KEYPOINT_COLUMNS):
        if not (kp.size == 0 and kp.ndim >= 1):
            raise DimensionError(f"keypoints must have shape (n, 6), got {kp.shape}")
        kp = np.zeros((0, 6), np.float32)
    kp = kp.astype(np.float64)
    desc = np.asarray(descriptors)
    if desc.size == 0:
        desc = np.zeros((0, 128), np.uint8)
    if len(desc) != len(kp):
        raise DimensionError(f"{len(kp)} keypoints but {len(desc)} descriptors")
    if not np.isfinite(kp).all():
        raise NonFiniteError("keypoints contain NaN or infinite values")
    if len(kp) and ((kp[:, 2] <= 0).any() or (kp[:, 4] <= 0).any()):
        raise DimensionError("keypoint frames need a11 > 0 and a22 > 0")
    w, h = _check_image_size(image_size)
    if max_features is not None:
        if isinstance(max_features, bool) or not isinstance(max_features, (int, np.integer)) or max_features < 0:
            raise ConfigError(f"max_features must be a non-negative integer or None, got {max_features!r}")
        kp, desc = kp[:max_features], desc[:max_features]
    if len(kp) > MAX_FEATURES_STORED:
        raise ConfigError(f"{len(kp)} features exceed the record limit {MAX_FEATURES_STORED}")
    ids, words, sigs = vocabulary.encode_multiple(desc, multiple_assignment)
    order = np.argsort(words, kind="stable")
    ids, words, sigs = ids[order], words[order], sigs[order]
    kp = kp[ids]
    pos, fr, th = _quantise(kp[:, :2], kp[:, 2:5], kp[:, 5], w, h)
    xy, frames, theta = _dequantise(pos, fr, th, w, h)
    return GeometryRecord(np.ascontiguousarray(words), np.ascontiguousarray(sigs), xy, frames, theta, (w, h),
                          int(vocabulary.fingerprint_), None if multiple_assignment == 1 else ids)


def make_query_record(vocabulary, keypoints, descriptors, image_size,
                      multiple_assignment=DEFAULT_QUERY_ASSIGNMENT):
    """A query's record: every feature (no cap: it is not stored), each with its
    ``multiple_assignment`` nearest words (3; bench/README.md section 8 measures 2 to 5)."""
    return make_record(vocabulary, keypoints, descriptors, image_size, None, multiple_assignment)


def stored_record(vocabulary, keypoints, descriptors, image_size, max_features=DEFAULT_MAX_RECORD_FEATURES):
    """The bytes an index stores for one image: :func:`pack` of :func:`make_record`."""
    return pack(make_record(vocabulary, keypoints, descriptors, image_size, max_features))


# ------------------------------------------------------------------ bytes
def pack(record):
    """The bytes of a :class:`GeometryRecord` (format version 1)."""
    if not isinstance(record, GeometryRecord):
        raise ConfigError(f"pack takes a GeometryRecord, got {type(record).__name__}")
    n = len(record.words)
    if record.feature_ids is not None:
        raise ConfigError("a multiple-assignment (query) record is not stored: pack takes one word per feature")
    w, h = _check_image_size(record.image_size)
    if n > MAX_FEATURES_STORED:
        raise ConfigError(f"{n} features exceed the record limit {MAX_FEATURES_STORED}")
    words = np.asarray(record.words)
    if n and np.any(np.diff(words.astype(np.int64)) < 0):
        raise ConfigError("record words must be sorted (build records with make_record)")
    pos, fr, th = _quantise(record.xy, record.frames, record.theta, w, h)
    flags = FLAG_THETA if record.has_theta else 0
    payload = b"".join([np.ascontiguousarray(record.signatures, dtype="<u8").tobytes(),
                        np.ascontiguousarray(words, dtype="<u2").tobytes(), pos.tobytes(), fr.tobytes(),
                        th.tobytes() if flags else b""])
    head = HEADER.pack(MAGIC, RECORD_VERSION, flags, SIGNATURE_BYTES, 0, n, w, h, int(record.vocabulary), 0, 0)
    crc = zlib.crc32(payload, zlib.crc32(head[:24]))
    return head[:24] + struct.pack("<II", crc, 0) + payload


def parse_header(data):
    """(n, flags, w, h, vocabulary) of record bytes after every check on the bytes (CRC included)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise GeometryRecordError(f"a geometry record is bytes, got {type(data).__name__}")
    mv = memoryview(data)
    if mv.nbytes < HEADER_SIZE:
        raise GeometryRecordError(f"truncated geometry record: {mv.nbytes} bytes, header needs {HEADER_SIZE}")
    magic, version, flags, sig_bytes, res0, n, w, h, voc, crc, res1 = HEADER.unpack_from(mv, 0)
    if magic != MAGIC:
        raise GeometryRecordError(f"not a geometry record (magic {bytes(magic)!r})")
    if version != RECORD_VERSION:
        raise GeometryRecordError(f"geometry record format version {version}; this code reads {RECORD_VERSION}")
    if flags & ~FLAG_THETA or sig_bytes != SIGNATURE_BYTES or res0 or res1:
        raise GeometryRecordError("geometry record header has unknown flags or fields")
    if n > MAX_FEATURES_STORED or not (1 <= w < 2**31 and 1 <= h < 2**31):
        raise GeometryRecordError(f"geometry record header out of range (n={n}, size={w}x{h})")
    expected = record_size(n, bool(flags & FLAG_THETA))
    if mv.nbytes != expected:
        raise GeometryRecordError(f"geometry record of {n} features must be {expected} bytes, got {mv.nbytes}"
                                  + (" (truncated)" if mv.nbytes < expected else ""))
    if zlib.crc32(mv[HEADER_SIZE:], zlib.crc32(mv[:24])) != crc:
        raise GeometryRecordError("geometry record checksum mismatch (damaged bytes)")
    return n, flags, w, h, voc


def unpack(data):
    """The :class:`GeometryRecord` of bytes written by :func:`pack`; GeometryRecordError otherwise."""
    n, flags, w, h, voc = parse_header(data)
    buf = np.frombuffer(data, np.uint8)
    o = HEADER_SIZE
    sigs = buf[o:o + 8 * n].view("<u8").astype(np.uint64)
    o += 8 * n
    words = buf[o:o + 2 * n].view("<u2").astype(np.uint16)
    o += 2 * n
    pos = buf[o:o + 3 * n].reshape(n, 3)
    o += 3 * n
    fr = buf[o:o + 3 * n].reshape(n, 3)
    o += 3 * n
    th = buf[o:o + n] if flags & FLAG_THETA else None
    if n and np.any(words[1:] < words[:-1]):
        raise GeometryRecordError("geometry record words are not sorted (inconsistent record)")
    xy, frames, theta = _dequantise(pos, fr, th, w, h)
    return GeometryRecord(words, sigs, xy, frames, theta, (w, h), int(voc))


def unpack_many(records):
    """Decode a sequence of record bytes into one set of concatenated arrays (one Numba
    call): (offsets (R + 1,), words int64, signatures uint64, xy, frames, theta, image
    sizes (R, 2), vocabulary fingerprints (R,)). Each record is checked as by :func:`unpack`."""
    R = len(records)
    ns = np.zeros(R, np.int64)
    thetas = np.zeros(R, np.bool_)
    sizes = np.zeros((R, 2), np.int64)
    vocs = np.zeros(R, np.int64)
    for i, data in enumerate(records):
        n, flags, w, h, voc = parse_header(data)
        ns[i], thetas[i], sizes[i], vocs[i] = n, bool(flags & FLAG_THETA), (w, h), voc
    buf = np.frombuffer(b"".join(bytes(d) if not isinstance(d, bytes) else d for d in records), np.uint8)
    starts = np.zeros(R, np.int64)
    if R > 1:
        starts[1:] = np.cumsum([HEADER_SIZE + n * (BYTES_PER_FEATURE + int(t)) for n, t in zip(ns[:-1], thetas[:-1])])
    offsets = np.zeros(R + 1, np.int64)
    np.cumsum(ns, out=offsets[1:])
    total = int(offsets[-1])
    words = np.empty(total, np.int64)
    sigs = np.empty(total, np.uint64)
    xy = np.empty((total, 2), np.float32)
    frames = np.empty((total, 3), np.float32)
    theta = np.empty(total, np.float32)
    if R and not _rk.decode_many(buf, starts, ns, thetas, sizes[:, 0].astype(np.float64),
                                 sizes[:, 1].astype(np.float64), float(POS_LEVELS), LOG_TABLE, SHEAR_TABLE,
                                 THETA_TABLE, offsets[:-1].copy(), words, sigs, xy, frames, theta):
        raise GeometryRecordError("geometry record words are not sorted (inconsistent record)")
    return offsets, words, sigs, xy, frames, theta, sizes, vocs

"""Features on disk, keyed by image content and extractor parameters, shared by
processes; and the features of one image file through it."""

import hashlib
import json
import os
import random
import time
import warnings
from pathlib import Path

from ..errors import ConfigError
from ..files import atomic_write
from .extractors import Extractor, default_extractor
from .images import MAX_PIXELS, check_pixels
from .local_features import Features, crop_to_box, features_from_npz, save_features

#: the feature cache's default size bound (ccache's default): an image's features take ~250 kB
#: (1024 px, Hessian-affine), so ~20,000 images; an index of a million would otherwise leave
#: ~250 GB in the home folder
DEFAULT_MAX_BYTES = 5 * 2 ** 30
#: the environment variable that sets the bound for every process (bytes; 0: no bound)
MAX_BYTES_ENV = "STREAMK_FEATURE_CACHE_MAX_BYTES"
#: a trim leaves the cache at this share of its bound (the next trims are not back to back)
TRIM_TO = 0.9
_TRIM_EVERY = 1 / 32  # of the bound written, on average, between two size checks
_STALE_TMP_SECONDS = 3600.0  # a temporary file this old was left by a killed process


def max_bytes_from_env():
    """The bound :data:`MAX_BYTES_ENV` sets (bytes, 0: none), else :data:`DEFAULT_MAX_BYTES`."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{MAX_BYTES_ENV} must be a number of bytes (0: no bound), got {raw!r}")
    return value


class FeatureCache:
    """Features on disk, keyed by the image's content (sha256 of the file bytes) and the
    extractor's :meth:`~Extractor.params` (name, options, library versions).

    Layout: ``<dir>/<params-digest[:16]>/params.json`` and
    ``<dir>/<params-digest[:16]>/<sha[:2]>/<sha>.npz``. Entries are written
    atomically (temporary file + ``os.replace``) as plain .npz (no pickle), so
    several processes may share one cache. A corrupt or mismatched entry is a
    miss and is overwritten. ``hits`` and ``misses`` count lookups in this process.

    Bounded: ``max_bytes`` (default :data:`DEFAULT_MAX_BYTES`, or the environment's
    :data:`MAX_BYTES_ENV`; 0: no bound). The entries least recently used (a hit renews
    an entry's time) are removed down to :data:`TRIM_TO` of the bound by :meth:`trim`,
    which a put runs with the probability of its bytes over 1/32 of the bound: a size
    check per 1/32 of the bound written, on average, by all the processes that share the
    folder, however short-lived, and each check reads the entries of a cache that is
    itself bounded. Between checks the cache may pass its bound by about that much.
    """

    def __init__(self, directory, max_bytes=None):
        self.directory = Path(directory)
        if max_bytes is None:
            max_bytes = max_bytes_from_env()
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ConfigError(f"max_bytes must be a number of bytes >= 0 (0: no bound), got {max_bytes!r}")
        self.max_bytes = max_bytes
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the feature cache directory {self.directory}: {exc}") from exc
        self.hits = 0
        self.misses = 0

    @staticmethod
    def params_digest(extractor):
        """SHA-256 of the extractor's canonical JSON parameters (the cache's second key)."""
        blob = json.dumps(extractor.params(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def _key(self, content_sha256, extractor):
        """(params digest, params folder, entry path), recomputed on every call so that
        changing an extractor's attributes can never reuse stale entries."""
        if not (isinstance(content_sha256, str) and len(content_sha256) == 64
                and all(c in "0123456789abcdef" for c in content_sha256)):
            raise ConfigError(f"not a sha256 hex digest: {content_sha256!r}")
        digest = self.params_digest(extractor)
        folder = self.directory / digest[:16]
        return digest, folder, folder / content_sha256[:2] / f"{content_sha256}.npz"

    def entry_path(self, content_sha256, extractor):
        """Where the features of an image with this content hash are stored."""
        return self._key(content_sha256, extractor)[2]

    def get(self, content_sha256, extractor):
        """The cached features, or None (a miss)."""
        digest, _, path = self._key(content_sha256, extractor)
        try:
            features, meta = features_from_npz(path)
            if meta.get("sha256") != content_sha256 or meta.get("params_digest") != digest:
                raise ValueError("entry for other content or parameters")
        except Exception:  # absent, corrupt or foreign entry: a miss (recomputed and overwritten)
            self.misses += 1
            return None
        self.hits += 1
        try:
            os.utime(path)  # recently used: the last to be trimmed
        except OSError:
            pass
        return features

    def put(self, content_sha256, extractor, features):
        """Store features (atomically); also writes the folder's params.json the first time."""
        digest, folder, path = self._key(content_sha256, extractor)
        pfile = folder / "params.json"
        if not pfile.exists():
            folder.mkdir(parents=True, exist_ok=True)
            text = json.dumps(extractor.params(), sort_keys=True, indent=1).encode()
            atomic_write(pfile, lambda fh: fh.write(text))
        path.parent.mkdir(parents=True, exist_ok=True)
        save_features(path, features, {"sha256": content_sha256, "params_digest": digest})
        if self.max_bytes:
            try:
                nbytes = path.stat().st_size
            except OSError:  # trimmed already by another process
                return
            if random.random() < nbytes / (_TRIM_EVERY * self.max_bytes):
                self.trim()

    def _files(self):
        """[(mtime, bytes, path)] of the entries and of temporary files left by killed
        processes (``<digest>/<sha[:2]>/``), and the bytes of the fresh temporary files."""
        found, busy, stale = [], 0, time.time() - _STALE_TMP_SECONDS
        for top in _subdirs(self.directory):
            for sub in _subdirs(top):
                try:
                    it = list(os.scandir(sub))
                except OSError:
                    continue
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:  # removed meanwhile
                        continue
                    if e.name.endswith(".npz") or (e.name.endswith(".tmp") and st.st_mtime < stale):
                        found.append((st.st_mtime, st.st_size, e.path))
                    elif e.name.endswith(".tmp"):
                        busy += st.st_size
        return found, busy

    def size(self):
        """(entries, bytes) the cache holds now."""
        found, busy = self._files()
        return len(found), sum(f[1] for f in found) + busy

    def trim(self, max_bytes=None):
        """Remove the least recently used entries until the cache holds at most
        :data:`TRIM_TO` of ``max_bytes`` (default: its bound, and nothing when it has none;
        0 empties it) when it holds more than ``max_bytes``. Returns (entries, bytes)
        removed. Safe while other processes read and write: an entry removed under a
        reader is a miss."""
        if max_bytes is None and not self.max_bytes:
            return 0, 0  # no bound: nothing is over it
        bound = self.max_bytes if max_bytes is None else int(max_bytes)
        found, busy = self._files()
        total = sum(f[1] for f in found) + busy
        if bound and total <= bound:
            return 0, 0
        goal = int(TRIM_TO * bound)
        removed = freed = 0
        for _, nbytes, path in sorted(found):
            if total - freed <= goal:
                break
            try:
                os.remove(path)
            except OSError:  # removed by another process, or not ours to remove
                continue
            removed += 1
            freed += nbytes
        return removed, freed


def _subdirs(path):
    try:
        return [e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _as_cache(cache):
    if cache is None or isinstance(cache, FeatureCache):
        return cache
    return FeatureCache(cache)


def features_of_bytes(data, path, extractor, cache, sha256_hex=None):
    """(Features, cache hit?) of an image file's bytes: the cache entry when there is
    one, else extracted (and stored in the cache). ``sha256_hex``: the bytes' digest,
    when the caller has it already."""
    if cache is not None:
        sha256_hex = sha256_hex or hashlib.sha256(data).hexdigest()
        cached = cache.get(sha256_hex, extractor)
        if cached is not None:
            check_pixels(cached.image_size, path, getattr(extractor, "max_pixels", MAX_PIXELS))
            return cached, True  # the same answer as a miss: within the limits, or refused
    features = extractor.extract_bytes(data, path)
    if cache is not None:
        try:
            cache.put(sha256_hex, extractor, features)
        except OSError as exc:
            warnings.warn(f"could not write the feature cache entry for {path}: {exc}",
                          RuntimeWarning, stacklevel=3)
    return features, False




def extract(path: str | os.PathLike[str], extractor: Extractor | None = None,
            cache: FeatureCache | str | os.PathLike[str] | None = None) -> Features:
    """Features of one image file.

    extractor: an :class:`Extractor` (None: :func:`default_extractor`).
    cache: None, a directory, or a :class:`FeatureCache`; features are then
    computed once per (file content, extractor parameters).
    Raises :class:`~streamk.errors.ImageReadError` for an unreadable image
    (:class:`~streamk.errors.ImageTooLargeError` for one over the extractor's limits).
    An image without features gives an empty set (0 x 128), not an error.
    """
    extractor = default_extractor() if extractor is None else extractor
    return features_of_bytes(extractor.read(path), path, extractor, _as_cache(cache))[0]



def image_features(path, extractor, box=None, cache=None):
    """(the file's bytes, its Features) of one image file, read once; ``box`` =
    (x1, y1, x2, y2) keeps the features whose centre lies inside it."""
    data = extractor.read(path)
    f, _ = features_of_bytes(data, path, extractor, _as_cache(cache))
    if box is not None:
        f = crop_to_box(f, box)
    return data, f


__all__ = ["DEFAULT_MAX_BYTES", "MAX_BYTES_ENV", "FeatureCache", "extract", "features_of_bytes", "image_features",
           "max_bytes_from_env"]

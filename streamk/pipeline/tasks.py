"""The per-image tasks that run on the executors (:mod:`streamk.parallel`), and the
context they share: the encoder, the extractor, the feature cache.

Each task is a module-level function ``task(context, item) -> dict`` that reads
its image once and never raises: a bad file comes back as ``{"path": ...,
"error": "ErrorType: reason"}``. :func:`results` turns what an executor yields
into those dicts, a task that never returned (a crashed worker) included, so
that every caller handles one kind of result.

    context = task_context(encoder, extractor, cache_dir, executor)
    for r in results(executor.map_unordered(ingest_task, items, context)): ...
"""

import hashlib

import numpy as np

from ..errors import EmptyDescriptorSetError, ImageReadError, describe
from ..features import FeatureCache, crop_to_box, features_of_bytes, file_metadata
from ..parallel import TaskContext, TaskFailure, in_worker_process
from ..verification import stored_record


# ---------------------------------------------------------------- the shared context
def build_context(encoder=None, extractor=None, cache_dir=None, vocabulary=None):
    """Built once per worker process: the encoder decoded (and its Numba kernels
    loaded, in a worker, before the first image), the extractor, the cache, and the
    vocabulary of local geometry (None: no geometry records)."""
    from ..encoding import Encoder
    from ..verification import Vocabulary

    if isinstance(encoder, (bytes, bytearray)):
        encoder = Encoder.from_bytes(bytes(encoder))
    if isinstance(vocabulary, (bytes, bytearray)):
        vocabulary = Vocabulary.from_bytes(bytes(vocabulary))
    ctx = {"encoder": encoder, "extractor": extractor, "vocabulary": vocabulary,
           "cache": None if cache_dir is None else FeatureCache(cache_dir)}
    if encoder is not None and in_worker_process():
        warm(encoder)
    return ctx


def warm(encoder):
    """Load (or compile once, cache=True) the Numba kernels this encoder calls, before
    the first image: a few random descriptors through the whole encoder."""
    rng = np.random.default_rng(0)
    try:
        encoder.encode(rng.integers(0, 256, (16, encoder.input_dim)).astype(np.float32))
    except Exception:  # a warm-up only: a real image reports its own errors
        pass


def task_context(encoder=None, extractor=None, cache_dir=None, executor=None, vocabulary=None):
    """The TaskContext of a run. In this process (``executor.name == "in-process"``)
    the Encoder and Vocabulary themselves are used; elsewhere their bytes travel, once
    per worker."""
    in_process = executor is not None and executor.name == "in-process"
    key = None
    if in_process and (encoder is not None or vocabulary is not None):
        key = f"{getattr(encoder, 'fingerprint', None)}:{id(encoder)}:{id(vocabulary)}"
    else:
        if encoder is not None and not isinstance(encoder, (bytes, bytearray)):
            encoder = encoder.to_bytes()
        if vocabulary is not None and not isinstance(vocabulary, (bytes, bytearray)):
            vocabulary = vocabulary.to_bytes()
    params = {"encoder": encoder, "extractor": extractor, "vocabulary": vocabulary,
              "cache_dir": None if cache_dir is None else str(cache_dir)}
    if key is not None:  # the in-process objects stand for themselves; the rest is small
        key += ":" + hashlib.sha256(repr((extractor, params["cache_dir"])).encode()).hexdigest()
    return TaskContext(build_context, params, key)


def results(pairs):
    """(item, result dict) for the (item, result) pairs of ``map_unordered``: a
    TaskFailure becomes ``{"path": <the item's path>, "error": reason}``."""
    for item, r in pairs:
        if isinstance(r, TaskFailure):
            r = {"path": item_path(item), "error": r.reason}
        yield item, r


def item_path(item):
    """The path (as given) of a task's item: the item itself or its first element."""
    return item[0] if isinstance(item, tuple) else item


# ---------------------------------------------------------------- the tasks
def image_features(ctx, path, sha256_hex=None, data=None):
    """(Features, sha256 hex of the file, cache hit?) of one image file: read once,
    hashed, features from the cache or extracted."""
    data = ctx["extractor"].read(path) if data is None else data
    sha = sha256_hex or hashlib.sha256(data).hexdigest()
    f, hit = features_of_bytes(data, path, ctx["extractor"], ctx["cache"], sha)
    return f, sha, hit


def extract_task(ctx, item):
    """Features of one image ``(path as given, absolute path)``."""
    path, read_path = item
    try:  # hashed only when a cache is used
        features, hit = features_of_bytes(ctx["extractor"].read(read_path), read_path, ctx["extractor"],
                                          ctx["cache"])
        return {"path": path, "error": None, "features": features, "cached": hit}
    except Exception as exc:  # reported per file, never raised mid-run
        return {"path": path, "error": describe(exc)}


def ingest_task(ctx, task):
    """Read, hash, extract (or take from the cache) and encode one image file.

    ``task`` = (path, id, stored sha256 or None, absolute path); with a stored
    sha256 (the id is already in the index), only read and hash."""
    path, image_id, stored_sha, read_path = task
    out = {"path": path, "id": image_id, "error": None, "stored_sha256": stored_sha}
    try:
        data = ctx["extractor"].read(read_path)  # within the extractor's max_file_size
        sha = out["sha256"] = hashlib.sha256(data).hexdigest()
        if stored_sha is not None:
            return out
        f, _, _ = image_features(ctx, path, sha, data)
        if len(f) == 0:
            raise EmptyDescriptorSetError("no local features")
        v, alpha = ctx["encoder"].encode(f.descriptors, return_weights=True)
        out.update(vector=np.asarray(v, np.float32), weights=np.asarray(alpha, np.float32),
                   keypoints=f.keypoints, n=len(f), image_size=[int(x) for x in f.image_size],
                   geometry=geometry_of(ctx, f), metadata=file_metadata(read_path, data))
    except Exception as exc:  # reported per file
        out["error"] = describe(exc)
    return out


def geometry_of(ctx, features):
    """The stored local-geometry record (bytes) of an image's features, or None when the
    run keeps none."""
    if ctx.get("vocabulary") is None:
        return None
    return stored_record(ctx["vocabulary"], features.keypoints, features.descriptors, features.image_size)


def geometry_task(ctx, task):
    """The local-geometry record of one stored image file: ``task`` = (id, path, stored
    sha256, box or None); the file must still hold the stored content."""
    image_id, path, stored_sha, box = task
    out = {"path": path, "id": image_id, "error": None}
    try:
        f, sha, _ = image_features(ctx, path)
        if sha != stored_sha:
            raise ImageReadError(path, "the file changed since it was indexed (its sha256 differs)")
        out["sha256"] = sha
        out["geometry"] = geometry_of(ctx, f if box is None else crop_to_box(f, box))
    except Exception as exc:
        out["error"] = describe(exc)
    return out


def _nonempty_features(ctx, path):
    f, sha, _ = image_features(ctx, path)
    if len(f) == 0:
        raise EmptyDescriptorSetError("no local features")
    return f, sha


def sample_task(ctx, task):
    """A seeded sample of one image's raw descriptors (uint8): ``task`` = (path,
    descriptors per image or None, seed)."""
    path, per_image, seed = task
    try:
        f, sha = _nonempty_features(ctx, path)
        return {"path": path, "error": None, "n": len(f),
                "descriptors": f.descriptors[sample_rows(len(f), per_image, seed, sha)]}
    except Exception as exc:
        return {"path": path, "error": describe(exc)}


def aggregate_task(ctx, path):
    """The aggregated vector xi (before post-processing) of one image's whole
    descriptor set, with the context's encoder."""
    try:
        f, _ = _nonempty_features(ctx, path)
        enc = ctx["encoder"]
        method = enc.config.aggregation
        return {"path": path, "error": None, "xi": enc.aggregate_methods(f.descriptors, (method,))[method][0]}
    except Exception as exc:
        return {"path": path, "error": describe(exc)}


def sample_rows(n, k, seed, sha256_hex):
    """Indices of at most ``k`` of ``n`` rows (sorted), seeded by ``seed`` and the content."""
    if k is None or n <= k:
        return np.arange(n)
    rng = np.random.default_rng([int(seed), int(sha256_hex[:16], 16)])
    return np.sort(rng.choice(n, int(k), replace=False))


__all__ = ["aggregate_task", "build_context", "extract_task", "geometry_of", "geometry_task", "image_features",
           "ingest_task", "item_path",
           "results", "sample_rows", "sample_task", "task_context", "warm"]

"""The per-image tasks that run on the executors (:mod:`streamk.parallel`), with the
context of :func:`streamk.index.describe_context` (the encoder, the extractor, the visual
words, the feature cache), built once per worker.

Each task is a module-level function ``task(context, item) -> dict`` that reads
its image once and never raises: a bad file comes back as ``{"path": ...,
"error": ImageFailure}`` (:class:`streamk.index.ImageFailure`, whose ``str()`` is
"ErrorType: reason"). :func:`results` turns what an executor yields into those dicts,
a task that never returned (a crashed worker) included, so that every caller handles
one kind of result.

    context = task_context(encoder, extractor, cache_dir, executor)
    for r in results(executor.map_unordered(ingest_task, items, context)): ...
"""

import hashlib

import numpy as np

from ..errors import EmptyDescriptorSetError, ImageReadError
from ..features import crop_to_box, features_of_bytes, file_metadata
from ..index import ImageFailure, describe_image, describe_task_context, geometry_record
from ..parallel import TaskFailure

task_context = describe_task_context  # the context of every task below


def results(pairs):
    """(item, result dict) for the (item, result) pairs of ``map_unordered``: a
    TaskFailure becomes ``{"path": <the item's path>, "error": ImageFailure}``."""
    for item, r in pairs:
        if isinstance(r, TaskFailure):
            r = {"path": item_path(item), "error": ImageFailure.of_task(r)}
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
        return {"path": path, "error": ImageFailure.of(exc, path)}


def ingest_task(ctx, task):
    """Read, hash and describe (:func:`streamk.index.describe_image`) one image file.

    ``task`` = (path, id, stored sha256 or None, absolute path[, describe changed]); with a
    stored sha256 (the id is already in the index), only read and hash -- and, when
    ``describe changed`` (a watched file overwritten), describe it too if its bytes differ, else
    send back its size and mtime (``file_stat``: a file only touched). The result holds the
    ImageDescription (its features not sent back) and the file's metadata."""
    path, image_id, stored_sha, read_path, *changed = task
    out = {"path": path, "id": image_id, "error": None, "stored_sha256": stored_sha}
    try:
        data = ctx["extractor"].read(read_path)  # within the extractor's max_file_size
        sha = out["sha256"] = hashlib.sha256(data).hexdigest()
        if stored_sha is not None and not (changed and changed[0] and sha != stored_sha):
            if changed and changed[0]:  # touched only: its new size and mtime, stored, end the re-reads
                meta = file_metadata(read_path, data)
                out["file_stat"] = {k: meta[k] for k in ("size", "mtime") if k in meta}
            return out
        out["description"] = describe_image(ctx, data, path, sha256=sha)
        out["metadata"] = file_metadata(read_path, data)
    except Exception as exc:  # reported per file
        out["error"] = ImageFailure.of(exc, path)
    return out


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
        out["geometry"] = geometry_record(ctx, f if box is None else crop_to_box(f, box))
    except Exception as exc:
        out["error"] = ImageFailure.of(exc, path)
    return out


def _nonempty_features(ctx, path):
    f, sha, _ = image_features(ctx, path)
    if len(f) == 0:
        raise EmptyDescriptorSetError("no local features")
    return f, sha


def sample_task(ctx, task):
    """A seeded sample of one image's raw descriptors (uint8): ``task`` = (path,
    descriptors per image or None, seed[, descriptors per image for the visual words]);
    the last, when given, adds ``vocabulary_descriptors``, a sample of that size drawn apart."""
    path, per_image, seed, *vocabulary_per_image = task
    try:
        f, sha = _nonempty_features(ctx, path)
        out = {"path": path, "error": None, "n": len(f),
               "descriptors": f.descriptors[sample_rows(len(f), per_image, seed, sha)]}
        if vocabulary_per_image:
            out["vocabulary_descriptors"] = f.descriptors[sample_rows(len(f), vocabulary_per_image[0], seed, sha)]
        return out
    except Exception as exc:
        return {"path": path, "error": ImageFailure.of(exc, path)}


def aggregate_task(ctx, path):
    """The aggregated vector xi (before post-processing) of one image's whole
    descriptor set, with the context's encoder."""
    try:
        f, _ = _nonempty_features(ctx, path)
        enc = ctx["encoder"]
        method = enc.config.aggregation
        return {"path": path, "error": None, "xi": enc.aggregate_methods(f.descriptors, (method,))[method][0]}
    except Exception as exc:
        return {"path": path, "error": ImageFailure.of(exc, path)}


def sample_rows(n, k, seed, sha256_hex):
    """Indices of at most ``k`` of ``n`` rows (sorted), seeded by ``seed`` and the content."""
    if k is None or n <= k:
        return np.arange(n)
    rng = np.random.default_rng([int(seed), int(sha256_hex[:16], 16)])
    return np.sort(rng.choice(n, int(k), replace=False))


__all__ = ["aggregate_task", "extract_task", "geometry_task", "image_features", "ingest_task", "item_path", "results",
           "sample_rows", "sample_task", "task_context"]

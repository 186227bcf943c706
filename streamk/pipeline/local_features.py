"""``streamk index add-local-features`` as a library call: the second stage for an index
built without it. The visual words are learned on a seeded sample of the index's own
images (or given), stored, and every image added from a file gets its local-geometry
record, from the feature cache or extracted again, on the local pool or a Dask cluster.

Resumable: an image that already has its record is skipped; a file that changed since it
was indexed (another sha256) is reported and left without one (it keeps its first-stage
rank). Images added as vectors or descriptor sets have no keypoints: they stay
first-stage only.
"""

import sys
from itertools import islice

from ..errors import ConfigError
from ..index import ImageRecord, StreamingIndex
from ..parallel import make_executor
from ..verification import Vocabulary
from .encoder_training import DEFAULT_DESCRIPTORS_PER_IMAGE, DEFAULT_MAX_IMAGES, learning_descriptors
from .tasks import geometry_task, results, task_context

CHUNK = 256  # images looked up per read transaction

# not "run it on each shard": each shard would learn its own words, and the queries' (the
# sharded index's vocabulary.npz, written at its creation only) would match none of them
SHARDED_REFUSAL = ("{index} is a sharded index: add-local-features works on a single index (each shard would learn "
                   "its own visual words); a sharded index has local geometry when it is created with it (the "
                   "default of `streamk index create --shards N`, without --no-local-features): create one so and "
                   "ingest the images into it")


def _stderr_report(path, reason):
    print(f"streamk: skipped {path}: {reason}", file=sys.stderr)


def _file_images(index):
    """Yield (id, source path, sha256, box) of the images added from files that lack a record."""
    ids = iter(index.ids())
    while True:
        chunk = list(islice(ids, CHUNK))
        if not chunk:
            return
        for image_id, raw in zip(chunk, index.records(chunk)):
            if raw is None:
                continue
            rec = ImageRecord.from_json(raw, index.path, image_id)
            if rec.kind == "image_path" and rec.source and index.geometry(image_id) is None:
                yield image_id, rec.source, rec.sha256, rec.box


def add_local_features(index, vocabulary=None, train_images=DEFAULT_MAX_IMAGES,
                       train_descriptors=DEFAULT_DESCRIPTORS_PER_IMAGE, seed=0, workers=None, dask=None,
                       cache_dir=None, batch_size=64, report=_stderr_report, progress=None, log=print):
    """Give ``index`` (a writable StreamingIndex) its second stage; returns (records added,
    failures). ``vocabulary``: a fitted Vocabulary or a saved one's path; None: learned on
    ``train_images`` of the index's images (``train_descriptors`` descriptors each)."""
    if not isinstance(index, StreamingIndex):
        raise ConfigError(SHARDED_REFUSAL.format(index=getattr(index, "path", "this index")))
    if dask is not None and workers is not None:
        raise ConfigError("--workers is for the local pool, --dask for a cluster: give one of them")
    progress = sys.stderr.isatty() if progress is None else progress
    extractor = index.extractor()
    with make_executor(workers, dask) as executor:
        if index.vocabulary is None:
            if vocabulary is None:
                paths = [src for _, src, _, _ in _file_images(index)]
                if not paths:
                    raise ConfigError(f"{index.path} holds no image added from a file: nothing to learn visual "
                                      "words on (pass a saved vocabulary)")
                sets, info = learning_descriptors(paths, extractor, executor, train_images, train_descriptors, seed,
                                                  cache_dir, report, progress, vocabulary=True)
                vocabulary = Vocabulary(seed=seed).fit(sets)
                log(f"learned {vocabulary.n_words} visual words on {info.descriptors} descriptors of "
                    f"{info.images} images")
            elif not isinstance(vocabulary, Vocabulary):
                vocabulary = Vocabulary.load(vocabulary)
            index.add_local_features(vocabulary)
        context = task_context(None, extractor, cache_dir, executor, vocabulary=index.vocabulary)
        from tqdm.auto import tqdm

        added, failed, pending = 0, {}, []
        with tqdm(desc="local geometry", unit="img", disable=not progress) as bar:
            for _, r in results(executor.map_unordered(geometry_task, _file_images(index), context)):
                bar.update(1)
                if r["error"] is not None:
                    failed[r["path"]] = str(r["error"])
                    report(r["path"], str(r["error"]))
                    continue
                pending.append((r["id"], r["sha256"], r["geometry"]))
                if len(pending) >= batch_size:
                    added += _flush(index, pending)
            added += _flush(index, pending)
    log(f"local geometry of {added} images stored, {len(failed)} failed")
    return added, failed


def _flush(index, pending):
    items = list(pending)
    pending.clear()
    return index.writer.put_geometry(items) if items else 0


__all__ = ["add_local_features"]

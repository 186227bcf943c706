"""``streamk index create`` as a library call: an encoder loaded or trained on a sample
of images (on the local pool or a Dask cluster), then an empty index, or S shards."""

import os
import shutil
import sys
from pathlib import Path

from ..encoding import Encoder, embedding_spec
from ..errors import ConfigError, EmptyDescriptorSetError, IndexExistsError
from ..features import DEFAULT_MAX_FEATURES, DEFAULT_MAX_SIDE, MAX_FILE_SIZE, MAX_PIXELS, make_extractor
from ..index import VECTOR_DTYPES, ShardedIndex, StreamingIndex
from ..parallel import make_executor
from ..verification import Vocabulary
from .bundled_encoder import QUALITY_NOTE, default_encoder
from .encoder_training import DEFAULT_DESCRIPTORS_PER_IMAGE, DEFAULT_MAX_IMAGES, train_encoder
from .ingest import collect_images


def _stderr_report(path, reason):
    print(f"streamk: skipped {path}: {reason}", file=sys.stderr)


def create_index(path, encoder=None, train=None, *, vector_dtype="float16", extractor=None,
                 max_side=DEFAULT_MAX_SIDE, max_features=DEFAULT_MAX_FEATURES, max_file_size=MAX_FILE_SIZE,
                 max_pixels=MAX_PIXELS, embedding="temb", fv_pca=64, k=64, aggregation="gmp", workers=None, dask=None,
                 train_images=DEFAULT_MAX_IMAGES, train_descriptors=DEFAULT_DESCRIPTORS_PER_IMAGE, seed=0,
                 cache_dir=None, save_encoder=None, shards=None, store_extras=True, local_features=True,
                 vocabulary=None, log=print, report=_stderr_report, progress=None, indexed_fields=()):
    """Create an index at ``path`` (new or empty) with the saved encoder at ``encoder``, or
    one trained on the images under ``train`` (files and folders), or with neither,
    streamk's default encoder and visual words (:mod:`streamk.pipeline.bundled_encoder`).
    Every check runs before anything is written; on failure nothing is left behind.
    Returns the path.

    local_features: keep each image's local geometry for the second stage (spatial
    verification, query expansion); its vocabulary is ``vocabulary`` (a saved one's path),
    or learned on the training sample with the encoder (a given encoder and ``train``
    images: the vocabulary alone is learned on them). With neither, the index is
    created without it (``streamk index add-local-features`` adds it later).

    max_side, max_features: the extractor's (stored with the index, so that its queries
    are described alike; None: full resolution, every feature). max_file_size,
    max_pixels: the limits of the files read to train (not stored)."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise IndexExistsError(f"{path} exists and is not an empty directory: refusing to create an index there")
    if vector_dtype not in VECTOR_DTYPES:
        raise ConfigError(f"vector dtype must be one of {VECTOR_DTYPES}, got {vector_dtype!r}")
    if dask is not None and workers is not None:
        raise ConfigError("--workers is for the local pool, --dask for a cluster: give one of them")
    extractor = make_extractor(extractor, max_side=max_side, max_features=max_features,
                               max_file_size=max_file_size, max_pixels=max_pixels)
    if vocabulary is not None:
        vocabulary = Vocabulary.load(vocabulary) if local_features else None
    if encoder is None and train is None:
        encoder, default_words = default_encoder(log=log)
        vocabulary = default_words if local_features and vocabulary is None else vocabulary
        log(f"no --encoder or --train: streamk's default encoder (T-emb k=16, GMP; learned on scikit-image's "
            f"public-domain photos, not yours). {QUALITY_NOTE}")
    elif encoder is not None:
        encoder = Encoder.load(encoder)
        if local_features and vocabulary is None and train is not None:
            vocabulary = _train_vocabulary(train, extractor, workers, dask, train_images, train_descriptors, seed,
                                           cache_dir, report, progress, log)
    else:
        paths, bad = collect_images(train)
        for p, reason in bad:
            report(p, reason)
        if not paths:
            raise EmptyDescriptorSetError("no image files found to train the encoder on")
        name, params = embedding_spec(embedding, fv_pca)
        config = {"embedding": name, "k": k, "embedding_params": params, "aggregation": aggregation}
        with make_executor(workers, dask) as executor:
            encoder, info = train_encoder(
                paths, config, extractor, executor, max_images=train_images, descriptors_per_image=train_descriptors,
                seed=seed, cache_dir=cache_dir, report=report,
                progress=sys.stderr.isatty() if progress is None else progress,
                vocabulary=local_features and vocabulary is None)
        vocabulary = vocabulary or info.vocabulary
        log(f"trained {embedding} k={k} ({aggregation}) on {info.descriptors} descriptors of {info.images} images "
            f"(a sample of {len(paths)}; {executor.name})")
        if save_encoder:
            encoder.save(save_encoder)
    _create_empty(path, encoder, shards, dask, vector_dtype=vector_dtype, extractor=extractor,
                  store_extras=store_extras, vocabulary=vocabulary, indexed_fields=indexed_fields)
    where = f" in {shards} shards" if shards is not None else ""
    second = (f"local geometry for spatial verification ({vocabulary.n_words} visual words)" if vocabulary is not None
              else "no local geometry (first stage only; streamk index add-local-features adds it)")
    log(f"created index {path}{where}: {encoder.config.embedding} k={encoder.config.k} "
        f"({encoder.config.aggregation}), dim {encoder.dim}, {vector_dtype} vectors, extractor {extractor.name}; "
        f"{second}")
    return path


def _create_empty(path, encoder, shards, dask, **options):
    """The empty index (S shards, on ``dask`` when given) at ``path``; on failure nothing
    is left behind (a folder made here removed, a given empty one emptied)."""
    existed = path.exists()
    try:
        if shards is not None:
            with make_executor(dask=dask) if dask else _Nothing() as executor:
                ShardedIndex.create(path, encoder, shards, dask=getattr(executor, "client", None), **options).close()
        else:
            StreamingIndex.create(path, encoder, **options).close()
    except BaseException:
        if not existed and path.is_dir():  # ours: leave nothing behind
            shutil.rmtree(path, ignore_errors=True)
        elif existed:
            for child in path.iterdir():
                shutil.rmtree(child) if child.is_dir() else os.unlink(child)
        raise


def _train_vocabulary(train, extractor, workers, dask, train_images, train_descriptors, seed, cache_dir, report,
                      progress, log):
    """The visual words of local geometry, learned on a sample of the images under ``train``."""
    from .encoder_training import learning_descriptors

    paths, bad = collect_images(train)
    for p, reason in bad:
        report(p, reason)
    with make_executor(workers, dask) as executor:
        sets, info = learning_descriptors(paths, extractor, executor, train_images, train_descriptors, seed, cache_dir,
                                          report, sys.stderr.isatty() if progress is None else progress)
    vocabulary = Vocabulary(seed=seed).fit(sets)
    log(f"learned {vocabulary.n_words} visual words on {info.descriptors} descriptors of {info.images} images")
    return vocabulary


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


__all__ = ["create_index"]

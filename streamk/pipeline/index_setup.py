"""``streamk index create`` as a library call: an encoder loaded or trained on a sample
of images (on the local pool or a Dask cluster), then an empty index, or S shards."""

import os
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..encoding import Encoder, EncoderConfig, check_reduced_dim, embedding_spec
from ..errors import ConfigError, EmptyDescriptorSetError, IndexExistsError
from ..files import check_output_file, check_output_folder
from ..features import DEFAULT_MAX_FEATURES, DEFAULT_MAX_SIDE, MAX_FILE_SIZE, MAX_PIXELS, make_extractor
from ..index import VECTOR_DTYPES, ShardedIndex, StreamingIndex, check_shards
from ..parallel import make_executor
from ..verification import Vocabulary
from .bundled_encoder import QUALITY_NOTE, default_encoder
from .encoder_training import AUTO_VOCAB_SIZE, DEFAULT_DESCRIPTORS_PER_IMAGE, DEFAULT_MAX_IMAGES, train_encoder
from .ingest import collect_images


PathArg = str | os.PathLike[str]


def _stderr_report(path: str, reason: str) -> None:
    print(f"streamk: skipped {path}: {reason}", file=sys.stderr)


def create_index(path: PathArg, encoder: PathArg | None = None, train: PathArg | Iterable[PathArg] | None = None,
                 *, vector_dtype: str = "float16", extractor: str | None = None,
                 max_side: int | None = DEFAULT_MAX_SIDE, max_features: int | None = DEFAULT_MAX_FEATURES,
                 max_file_size: int | None = MAX_FILE_SIZE, max_pixels: int | None = MAX_PIXELS,
                 embedding: str = "temb", fv_pca: int = 64, k: int | None = None, aggregation: str = "gmp",
                 workers: int | None = None, dask: str | None = None, train_images: int | None = DEFAULT_MAX_IMAGES,
                 train_descriptors: int | None = DEFAULT_DESCRIPTORS_PER_IMAGE, seed: int = 0,
                 cache_dir: PathArg | None = None, save_encoder: PathArg | None = None, shards: int | None = None,
                 store_extras: bool = True, local_features: bool = True, vocabulary: PathArg | None = None,
                 log: Callable[[str], object] = print, report: Callable[[str, str], object] = _stderr_report,
                 progress: bool | None = None, indexed_fields: Iterable[str] = (), rn: bool | None = None,
                 dim: int | None = None, power: float | None = None, gamma: float | None = None,
                 lam: float | None = None) -> Path:
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

    k: the encoder's vocabulary size when it is trained; None: 64 (AUTO_VOCAB_SIZE), and
    for T-emb at most what the learning sample can fill
    (:func:`streamk.pipeline.encoder_training.auto_vocab_size`: a few photos get a small one).

    rn, dim, power, gamma, lam: the trained encoder's options (:class:`EncoderConfig`; None:
    its default): RN learned on the learning images' aggregated vectors, D' components kept
    after it, the power-law exponent, democratic's gamma, GMP's lambda. Only with ``train``
    and no ``encoder``; gamma only for the democratic aggregation, lam only for gmp.

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
    if save_encoder is not None:
        if train is None or encoder is not None:
            raise ConfigError("--save-encoder saves the encoder trained with --train: give --train IMAGES without "
                              "--encoder (a given encoder is already a file)")
        check_output_file(save_encoder, "the encoder")  # before the fit, not after it
    if shards is not None:
        check_shards(shards)
    options = {name: value for name, value in (("rn", rn), ("dim", dim), ("power", power), ("gamma", gamma),
                                                ("lam", lam)) if value is not None}
    config = _encoder_config(options, train is not None and encoder is None, embedding, fv_pca, k, aggregation)
    check_output_folder(path, "the index")  # before the encoder is loaded or fitted, and its note printed
    ex = make_extractor(extractor, max_side=max_side, max_features=max_features,
                        max_file_size=max_file_size, max_pixels=max_pixels)
    words = Vocabulary.load(vocabulary) if vocabulary is not None and local_features else None
    training: dict[str, Any] = {  # how the encoder or the visual words are learned, when they are
        "workers": workers, "dask": dask, "train_images": train_images, "train_descriptors": train_descriptors,
        "seed": seed, "cache_dir": cache_dir, "report": report,
        "progress": sys.stderr.isatty() if progress is None else progress, "log": log}
    if encoder is None and train is None:
        enc, default_words = default_encoder(log=log)
        words = default_words if local_features and words is None else words
        log(f"no --encoder or --train: streamk's default encoder ({enc.config.embedding} k={enc.config.k}, "
            f"{enc.config.aggregation}; learned on scikit-image's public-domain photos, not yours). {QUALITY_NOTE}")
    elif encoder is not None:
        enc = Encoder.load(encoder)
        if local_features and words is None and train is not None:
            words = _train_vocabulary(train, ex, **training)
    else:
        assert train is not None
        enc, learned = _train_encoder(train, config, embedding, ex, local_features and words is None,
                                      auto_k=k is None, **training)
        words = words or learned
        if save_encoder is not None:
            enc.save(save_encoder)
    _create_empty(path, enc, shards, dask, vector_dtype=vector_dtype, extractor=ex,
                  store_extras=store_extras, vocabulary=words, indexed_fields=indexed_fields)
    where = f" in {shards} shards" if shards is not None else ""
    second = (f"local geometry for spatial verification ({words.n_words} visual words)" if words is not None
              else "no local geometry (first stage only; streamk index add-local-features adds it)")
    log(f"created index {path}{where}: {enc.config.embedding} k={enc.config.k} "
        f"({', '.join([enc.config.aggregation, *_non_default_options(enc.config)])}), dim {enc.dim}, "
        f"{vector_dtype} vectors, extractor {ex.name}; "
        f"{second}")
    return path


def _encoder_config(options: dict[str, Any], training: bool, embedding: str, fv_pca: int, k: int | None,
                    aggregation: str) -> dict[str, Any]:
    """The config dict of the encoder trained with --train, its ``options`` (rn, dim, power,
    gamma, lam: those given) checked with the rest before any feature is extracted; {} when
    nothing is trained (then no option may be given)."""
    flags = ", ".join(f"--{name}" for name in options)
    if not training:
        if options:
            raise ConfigError(f"{flags} set{'s' if len(options) == 1 else ''} the encoder trained with --train: "
                              f"give --train IMAGES without --encoder (a given encoder, or the default one, keeps "
                              f"its own)")
        return {}
    for name, method, what in (("gamma", "democratic", "democratic aggregation's damping exponent"),
                               ("lam", "gmp", "generalised max pooling's ridge regulariser lambda")):
        if name in options and aggregation != method:
            raise ConfigError(f"--{name} is {what}: it needs --aggregation {method} (this encoder's is "
                              f"{aggregation})")
    if options.get("dim") is not None and not options.get("rn"):
        raise ConfigError("--dim D' keeps the first D' components after RN: add --rn on")
    name, params = embedding_spec(embedding, fv_pca)
    config = {"embedding": name, "k": AUTO_VOCAB_SIZE if k is None else k, "embedding_params": params,
              "aggregation": aggregation, **options}
    EncoderConfig(**config).validate()  # the aggregation, gamma, lambda, power: now, not after the extraction
    check_reduced_dim(embedding, config["k"], fv_pca, options.get("dim"))
    return config


def _non_default_options(config: EncoderConfig) -> list[str]:
    """The encoder options of ``config`` that differ from :class:`EncoderConfig`'s defaults
    (RN, D', the power-law exponent, its aggregation's gamma or lambda), as the
    ``created index`` line names them: ``rn, D'=512``."""
    default, out = EncoderConfig(), []
    if config.rn:
        out.append("rn" if config.dim is None else f"rn, D'={config.dim}")
    if config.power != default.power:
        out.append(f"power {config.power:g}")
    if config.aggregation == "democratic" and config.gamma != default.gamma:
        out.append(f"gamma {config.gamma:g}")
    if config.aggregation == "gmp" and config.lam != default.lam:
        out.append(f"lambda {config.lam:g}")
    return out


def _train_encoder(train: Any, config: dict[str, Any], embedding: str, extractor: Any, learn_words: bool, *,
                   auto_k: bool, workers: int | None, dask: str | None, train_images: int | None,
                   train_descriptors: int | None, seed: int, cache_dir: Any, report: Callable[[str, str], object],
                   progress: bool, log: Callable[[str], object]) -> tuple[Encoder, Any]:
    """(the encoder, the visual words or None when not ``learn_words``) learned on a sample of
    the images under ``train``; ``auto_k``: config's k is an upper bound (see create_index)."""
    paths, bad = collect_images(train)
    for p, reason in bad:
        report(p, reason)
    if not paths:
        raise EmptyDescriptorSetError("no image files found to train the encoder on")
    with make_executor(workers, dask) as executor:
        enc, info = train_encoder(
            paths, config, extractor, executor, max_images=train_images, descriptors_per_image=train_descriptors,
            seed=seed, cache_dir=cache_dir, report=report, progress=progress, vocabulary=learn_words,
            auto_k=auto_k)
    k = enc.config.k
    why = (f"; vocabulary size {k}, the most these descriptors can whiten (k x 128 <= descriptors) and this "
           f"machine's memory can fit (--vocab-size sets it)" if auto_k and k < config["k"] else "")
    log(f"trained {embedding} k={k} ({enc.config.aggregation}) on {info.descriptors:,} descriptors of {info.images} "
        f"image{'' if info.images == 1 else 's'} (a sample of {len(paths)}; {executor.name}){why}")
    return enc, info.vocabulary


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


def _train_vocabulary(train: Any, extractor: Any, *, workers: int | None, dask: str | None,
                      train_images: int | None, train_descriptors: int | None, seed: int, cache_dir: Any,
                      report: Callable[[str, str], object], progress: bool, log: Callable[[str], object]) -> Vocabulary:
    """The visual words of local geometry, learned on a sample of the images under ``train``."""
    from .encoder_training import learning_descriptors

    paths, bad = collect_images(train)
    for p, reason in bad:
        report(p, reason)
    with make_executor(workers, dask) as executor:
        sets, info = learning_descriptors(paths, extractor, executor, train_images, train_descriptors, seed, cache_dir,
                                          report, progress, vocabulary=True)
    vocabulary = Vocabulary(seed=seed).fit(sets)
    log(f"learned {vocabulary.n_words} visual words on {info.descriptors} descriptors of {info.images} images")
    return vocabulary


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


__all__ = ["create_index"]

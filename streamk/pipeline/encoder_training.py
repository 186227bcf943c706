"""Training an encoder at scale: k-means / GMM, whitening and RN learned from a
bounded, seeded sample of the learning images, extracted on the same executors
as ingestion (in this process, the local pool, or a Dask cluster).

    enc, info = train_encoder(paths, {"embedding": "temb", "k": 64, "rn": True},
                              extractor, executor=make_executor(dask="tcp://host:8786"))

1. **Images.** At most ``max_images`` of the given files, drawn uniformly
   without replacement (``seed``), in their given order.
2. **Descriptors** (workers). Each sampled image is read and its features taken
   from the feature cache or extracted; the worker returns at most
   ``descriptors_per_image`` of them, drawn uniformly without replacement with
   a generator seeded by ``seed`` and the file's content (the same file gives
   the same rows wherever it runs), in their stored order. Only this sample
   travels: at most ``max_images * descriptors_per_image * 128`` bytes.
   With the visual words of local geometry (``vocabulary=True``), each worker also
   returns a second sample for them, of :func:`vocabulary_descriptors_per_image`
   rows: a small collection's words learn on enough descriptors to reach the
   vocabulary's full size (the false-verification rate is measured with such words).
   It is drawn only where that is more than ``descriptors_per_image``, so it adds at
   most about 131,072 rows (16.8 MB) in all.
3. **Embedding** (here). :meth:`Encoder.fit` on the sample, in the sampled
   images' order: k-means or the GMM (seeded by ``seed`` too, unless the config's
   ``embedding_params`` name their own), and for T-emb the whitening, exactly as
   for descriptors gathered in one process (they subsample further to their
   ``max_fit_descriptors``).
4. **RN** (workers, then here), when the config asks for it: RN is learned on
   aggregated image vectors, so each sampled image's *whole* descriptor set is
   embedded and aggregated in a worker with the fitted embedding (features
   again from the cache, or extracted again: extraction is a fraction of the
   encoding cost), and only the aggregated vector comes back; the rotation is
   then fitted here (:meth:`Encoder.fit_rn_vectors`).

With every image and every descriptor (``max_images=None``,
``descriptors_per_image=None``) this is ``Encoder(config).fit(sets)`` on the
images' descriptor sets.
"""

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..encoding import Encoder, EncoderConfig, check_fits_in_memory, whitening_k_limit
from ..errors import ConfigError, EmptyDescriptorSetError
from ..features import default_extractor
from ..parallel import default_workers, make_executor
from ..verification import Vocabulary
from .ingest import as_roots
from .tasks import aggregate_task, results, sample_task, task_context

DEFAULT_MAX_IMAGES = 1000
DEFAULT_DESCRIPTORS_PER_IMAGE = 500


@dataclass
class TrainingInfo:
    images: int = 0  # sampled images with features (the learning set)
    descriptors: int = 0  # descriptors the embedding was fitted on
    rn_images: int = 0  # images whose aggregated vectors RN was fitted on
    failed: dict = field(default_factory=dict)  # path -> "ErrorType: reason"
    seconds: float = 0.0
    vocabulary: object = None  # the Vocabulary of local geometry, when asked for

    def summary(self):
        rn = f", RN on {self.rn_images} image vectors" if self.rn_images else ""
        return (f"{self.descriptors} descriptors of {self.images} images{rn}, "
                f"{len(self.failed)} failed ({self.seconds:.1f} s)")


def sample_images(paths, max_images, seed=0):
    """At most ``max_images`` of ``paths`` (distinct), uniformly without replacement, in
    their given order; all of them when max_images is None or not smaller."""
    paths = list(dict.fromkeys(paths))
    if max_images is None or len(paths) <= int(max_images):
        return paths
    if int(max_images) < 1:
        raise ConfigError(f"max_images must be >= 1 or None, got {max_images}")
    rows = np.sort(np.random.default_rng(seed).choice(len(paths), int(max_images), replace=False))
    return [paths[i] for i in rows]


def _run(executor, fn, items, spec, info, report, bar):
    out = {}
    for _, r in results(executor.map_unordered(fn, items, spec)):
        bar.update(1)
        if r["error"] is not None:
            info.failed[r["path"]] = str(r["error"])
            report(r["path"], str(r["error"]))
        else:
            out[r["path"]] = r
    return out


def vocabulary_descriptors_per_image(n_images, descriptors_per_image):
    """Descriptors per image that the visual words learn on: ``descriptors_per_image``, raised
    so that ``n_images`` images give the default vocabulary's full learning size
    (:attr:`Vocabulary.full_learning_size`, 131,072) where they hold that many; None: all.

    The encoder's 500 an image leave a 50-photo collection 25,000 descriptors and 741 words
    where every descriptor gives 2,887: coarser words pass more tentative matches of repeated
    structure, and held-out queries of such indexes found a false verification in 5 of 1,222 top
    10s, with finer words in 2 (bench/README.md section 8), for about 1 point of their mAP. Every
    false-verification figure of the README is measured with words learned on every descriptor."""
    if descriptors_per_image is None:
        return None
    need = -(-Vocabulary().full_learning_size // max(1, int(n_images)))
    return max(int(descriptors_per_image), need)


#: the vocabulary size an index's T-emb encoder gets when none is asked for, with enough
#: learning descriptors (the paper's)
AUTO_VOCAB_SIZE = 64


def auto_vocab_size(n_descriptors, d=128, largest=AUTO_VOCAB_SIZE):
    """The vocabulary size k of a T-emb encoder learned on ``n_descriptors`` of dimension
    ``d`` when the user named none: the largest power of two up to ``largest`` whose
    whitening the sample can estimate, k d <= n (the covariance of the k d-dimensional
    residuals has rank at most n: below that its missing directions are the clamp's floor,
    and the encoder grows as (k d)^2 for nothing: 264 MB at k = 64 from 3 photos' 1,398
    descriptors); at least 2 (T-emb's dimension is (k - 1) d)."""
    k = int(largest)
    while k > 2 and k * int(d) > int(n_descriptors):
        k //= 2
    return k


def _sample_descriptors(executor, sample, extractor, descriptors_per_image, seed, cache_dir, info, report, progress,
                        vocabulary_per_image=None):
    """(learning paths, their descriptor samples, the samples for the visual words): step 2 of
    the module doc, on ``executor``; without ``vocabulary_per_image`` the last is the second."""
    from tqdm.auto import tqdm

    spec = task_context(None, extractor, cache_dir, executor)
    # a second sample only where the words ask for more rows than the encoder's
    larger = vocabulary_per_image is not None and descriptors_per_image is not None \
        and vocabulary_per_image > descriptors_per_image
    extra = (vocabulary_per_image,) if larger else ()
    with tqdm(total=len(sample), desc="learning sample", unit="img", disable=not progress) as bar:
        got = _run(executor, sample_task, ((p, descriptors_per_image, seed, *extra) for p in sample), spec, info,
                   report, bar)
    learning = [p for p in sample if p in got]  # the sample's order: a reproducible fit
    if not learning:
        raise EmptyDescriptorSetError("no local features in the learning images")
    sets = [got[p]["descriptors"] for p in learning]
    vocabulary_sets = [got[p].get("vocabulary_descriptors", got[p]["descriptors"]) for p in learning]
    info.images, info.descriptors = len(sets), int(sum(len(s) for s in sets))
    return learning, sets, vocabulary_sets


def learning_descriptors(paths, extractor=None, executor=None, max_images=DEFAULT_MAX_IMAGES,
                         descriptors_per_image=DEFAULT_DESCRIPTORS_PER_IMAGE, seed=0, cache_dir=None, report=None,
                         progress=False, vocabulary=False):
    """(descriptor sets, TrainingInfo): the seeded learning sample of :func:`train_encoder`
    (steps 1 and 2 of the module doc); ``vocabulary``: the sample its visual words learn on
    (:func:`vocabulary_descriptors_per_image` an image), to learn a vocabulary alone."""
    t0 = time.monotonic()
    extractor = default_extractor() if extractor is None else extractor
    sample = [os.path.abspath(p) for p in sample_images(as_roots(paths), max_images, seed)]
    if not sample:
        raise EmptyDescriptorSetError("no learning images given")
    info = TrainingInfo()
    own = executor is None
    if own:
        executor = make_executor(max(1, min(default_workers(), len(sample))))
    if vocabulary:
        descriptors_per_image = vocabulary_descriptors_per_image(len(sample), descriptors_per_image)
    try:
        _, sets, _ = _sample_descriptors(executor, sample, extractor, descriptors_per_image, seed, cache_dir, info,
                                         report or (lambda path, reason: None), progress)
        return sets, info
    finally:
        if own:
            executor.close()
        info.seconds = time.monotonic() - t0


def train_encoder(paths: Iterable[str | os.PathLike[str]], config: Any = None,
                  extractor: Any = None, executor: Any = None, workers: int | None = None,
                  max_images: int | None = DEFAULT_MAX_IMAGES,
                  descriptors_per_image: int | None = DEFAULT_DESCRIPTORS_PER_IMAGE, seed: int = 0,
                  cache_dir: str | os.PathLike[str] | None = None,
                  report: Callable[[str, str], object] | None = None, progress: bool = False,
                  vocabulary: bool = False, auto_k: bool = False) -> tuple[Encoder, TrainingInfo]:
    """(fitted :class:`Encoder`, :class:`TrainingInfo`) from a sample of the images at
    ``paths``; see the module doc.

    config: an :class:`EncoderConfig` or a dict of its options. extractor: None
    (the default extractor). executor: a :mod:`streamk.parallel` executor (kept
    open); None: ``make_executor(workers)``, closed at the end. report(path,
    reason): each image that failed (default: ignored, see ``info.failed``).
    vocabulary: also learn the visual words of local geometry (spatial verification)
    on the same learning descriptors: ``info.vocabulary``. auto_k: a T-emb config's k is
    an upper bound, lowered to :func:`auto_vocab_size` of the learning sample once it is
    drawn (``streamk index create --train`` without ``--vocab-size``).
    """
    from tqdm.auto import tqdm

    t0 = time.monotonic()
    config = EncoderConfig(**config) if isinstance(config, dict) else (config or EncoderConfig())
    if int(seed) != 0 and "seed" not in config.embedding_params:
        # one seed for the whole fit: the samples, the words and the k-means (the embedding's default is 0:
        # seed 0 leaves the config as given, and its fingerprint with it)
        config = replace(config, embedding_params={**config.embedding_params, "seed": int(seed)})
    if not (auto_k and config.embedding == "temb"):  # a k the user chose: said before minutes of extraction
        check_fits_in_memory(Encoder(config).fit_cost(config.k))
    if descriptors_per_image is not None and int(descriptors_per_image) < 1:
        raise ConfigError(f"descriptors_per_image must be >= 1 or None, got {descriptors_per_image}")
    extractor = default_extractor() if extractor is None else extractor
    report = report or (lambda path, reason: None)
    # absolute paths: a Dask worker's working folder is not ours
    sample = [os.path.abspath(p) for p in sample_images(as_roots(paths), max_images, seed)]
    if not sample:
        raise EmptyDescriptorSetError("no learning images given")
    info = TrainingInfo()
    own = executor is None
    if own:
        executor = make_executor(max(1, min(workers or default_workers(), len(sample))))
    try:
        vocabulary_per_image = (vocabulary_descriptors_per_image(len(sample), descriptors_per_image) if vocabulary
                                else None)
        learning, sets, vocabulary_sets = _sample_descriptors(executor, sample, extractor, descriptors_per_image, seed,
                                                              cache_dir, info, report, progress, vocabulary_per_image)
        if auto_k and config.embedding == "temb":  # what the sample can whiten, and the memory too
            fits = whitening_k_limit()
            largest = config.k if fits is None else min(config.k, 1 << max(1, fits.bit_length() - 1))
            config = replace(config, k=auto_vocab_size(info.descriptors, largest=largest))
            full = Encoder(config).embedding.output_dim()
            if config.rn and config.dim is not None and config.dim > full:
                raise ConfigError(f"D' = {config.dim} exceeds the dimension of temb with k = {config.k} ({full}), the "
                                  f"vocabulary size that these {info.descriptors:,} learning descriptors can whiten: "
                                  f"choose D' <= {full}, or learn on more descriptors (more images, "
                                  f"--train-descriptors) with --vocab-size")
        if info.descriptors < config.k:
            raise ConfigError(f"{info.descriptors} learning descriptors in {len(sets)} images, "
                              f"fewer than k={config.k}")
        if vocabulary:
            info.vocabulary = Vocabulary(seed=seed).fit(vocabulary_sets)
        fit_verbose = True if progress else None  # a long fit states its cost even without progress bars
        if not config.rn:
            return Encoder(config).fit(sets, verbose=fit_verbose), info
        base = Encoder(config, rn=False, dim=None).fit(sets, verbose=fit_verbose)  # the embedding only
        spec = task_context(base, extractor, cache_dir, executor)
        with tqdm(total=len(learning), desc="RN learning vectors", unit="img", disable=not progress) as bar:
            xis = _run(executor, aggregate_task, learning, spec, info, report, bar)
        rn_paths = [p for p in learning if p in xis]
        info.rn_images = len(rn_paths)
        enc = base.derive(aggregated=[xis[p]["xi"] for p in rn_paths], rn=True, dim=config.dim,
                          rn_components=config.rn_components)
        return enc, info
    finally:
        if own:
            executor.close()
        info.seconds = time.monotonic() - t0


__all__ = ["AUTO_VOCAB_SIZE", "DEFAULT_DESCRIPTORS_PER_IMAGE", "DEFAULT_MAX_IMAGES", "TrainingInfo", "auto_vocab_size",
           "learning_descriptors", "sample_images",
           "train_encoder", "vocabulary_descriptors_per_image"]

"""Example collections for the notebooks: a built index and its ground truth, in one folder.

    ex = open_example()                    # "demo": scikit-image's photos, built once, then reopened
    ex = open_example("paris6k-subset")    # the 250 Paris6k photos of the shared data
    ex.index      # a StreamingIndex (T-emb, GMP by default) of the database images
    ex.dataset    # a streamk.datasets.Dataset: image paths, queries, positives / junk

``"demo"`` is the collection of ``streamk demo``: each bundled photograph with two
milder views in the database, and for a sample of them one query view per
real-world change (crop, rotation, scale, perspective, JPEG, lighting); positives
are the database images of the query's scene. ``"paris6k-subset"`` uses the
official Paris6k ground truth restricted to the 250 photos, queries described by
the features inside their box.

The encoder is learned on the database images' own descriptors (unsupervised: no
distinct learning collection comes with either), as ``streamk demo`` and
``streamk eval --dataset paris6k-subset`` do.

The folder (``directory``, else ``$STREAMK_EXAMPLE_DIR``, else
``~/.cache/streamk/examples/<name>``) holds ``example.json`` (what was built,
written last), ``index/`` and, for the demo, ``database/`` and ``queries/``.
"""

import json
import os
import shutil
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from . import main_job as demo
from .. import features as feat
from . import transforms as tf
from ..config import cache_home
from ..datasets import Dataset, Query, load_paris6k_subset
from ..encoding import Encoder
from ..errors import ConfigError, DatasetImageError, IndexFormatError, TooFewImagesError
from ..index import StreamingIndex, upgrade
from ..pipeline import KernelWarmUp
from ..verification import Vocabulary

FORMAT = "streamk-example"
FORMAT_VERSION = 1
EXAMPLES = ("demo", "paris6k-subset")
_MARKER = ".streamk-example"  # a folder we may clear to rebuild


class Example(NamedTuple):
    name: str
    directory: Path
    index: StreamingIndex
    dataset: Dataset
    info: dict  # what was built, with which options

    def close(self):
        self.index.close()


def default_directory(name):
    env = os.environ.get("STREAMK_EXAMPLE_DIR")
    if env:
        return Path(env)
    return Path(cache_home()) / "examples" / name


def open_example(name="demo", directory=None, progress=True, **build_options):
    """The example in ``directory``, built there first if it is not (see the module doc).

    An example already built in the folder is opened whatever ``name`` and options
    it was built with (``info`` says which), so that a notebook opens the collection
    prepared for it; build_options (see :func:`build_example`) apply to a new build.
    """
    directory = Path(directory) if directory is not None else default_directory(name)
    t0 = time.perf_counter()
    built = not (directory / "example.json").exists()
    example = build_example(name, directory, progress=progress, **build_options) if built else _load(directory)
    if progress:  # what it did, where, and how long it took
        print(example_summary(example, built, time.perf_counter() - t0))
    return example


def example_summary(example, built, seconds):
    """One line: the example built (in how long) or opened, its images, queries, encoder and folder."""
    info = example.info
    what = f"built in {seconds:.0f} s" if built else "opened (built earlier; delete the folder to rebuild)"
    return (f"streamk example {example.name!r} {what}: {info['n_images']} images, {info['n_queries']} queries, "
            f"T-emb k={info['k']} {info['aggregation']}, in {example.directory}")


def _prepare(directory):
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory} exists and is not a folder")
    if directory.is_dir() and any(directory.iterdir()):
        if not (directory / _MARKER).exists():
            raise ConfigError(f"{directory} is not empty and holds no streamk example: choose another folder")
        shutil.rmtree(directory)  # an interrupted build of ours
    directory.mkdir(parents=True, exist_ok=True)
    (directory / _MARKER).write_text("a streamk example collection; rebuilt when incomplete\n")


def build_example(name="demo", directory=None, k=16, aggregation="gmp", photos=None, max_queries=20,
                  transforms=tuple(tf.TRANSFORMS), max_side=640, max_features=1000, cache_dir=None,
                  workers=None, seed=0, progress=True):
    """Build an example collection (replacing an incomplete one) and return it opened.

    k, aggregation: the index's encoder (T-emb). photos: for "demo", how many of
    scikit-image's photographs (None: all 17). max_queries, transforms: demo queries.
    max_side, max_features: the demo's extractor (paris6k-subset uses the default
    extractor, as ``streamk eval``). cache_dir: the feature cache (None: the default).
    """
    from ..config import default_cache_dir

    if name not in EXAMPLES:
        raise ConfigError(f"unknown example {name!r}; choose one of {EXAMPLES}")
    directory = Path(directory) if directory is not None else default_directory(name)
    cache = default_cache_dir() if cache_dir is None else cache_dir
    if name == "demo":
        extractor = feat.make_extractor(None, max_side=max_side, max_features=max_features)
        dataset, records = _demo_collection(directory, photos, max_queries, transforms, seed)
        options = {"photos": photos, "max_queries": max_queries, "transforms": list(transforms),
                   "max_side": max_side, "max_features": max_features}
    else:
        extractor = feat.make_extractor(None)
        dataset = load_paris6k_subset()  # before clearing anything: the shared data must be there
        _prepare(directory)
        records = [demo.DbImage(i, str(dataset.image_path(n)), i, True) for n, i in enumerate(dataset.image_ids)]
        options = {}
    # the first verified search (the notebook's first cell) finds the second stage compiled
    with KernelWarmUp(quiet=not progress):
        kept, fs, shas = demo.extract_database(records, extractor, cache, workers, progress, _refuse)
        if len(kept) < 2:
            raise TooFewImagesError(f"example {name!r}: {len(kept)} usable image(s); at least 2 are needed")
        encoder = Encoder(embedding="temb", k=int(k), aggregation=aggregation).fit(
            [f.descriptors for f in fs], verbose=progress)
        encoded = demo.encode_database({aggregation: encoder}, fs, progress)[aggregation]
        # the second stage (spatial verification) learns its visual words on the same images
        vocabulary = Vocabulary(seed=0).fit([f.descriptors for f in fs])
        demo.build_index(directory / "index", encoder, extractor, kept, fs, shas, encoded,
                         vocabulary=vocabulary).close()
    info = {"format": FORMAT, "version": FORMAT_VERSION, "name": name, "k": int(k),
            "aggregation": aggregation, "options": options, "n_images": len(kept),
            "n_queries": dataset.n_queries, "dataset": _dataset_to_json(dataset)}
    tmp = directory / "example.json.tmp"
    tmp.write_text(json.dumps(info, indent=1))
    os.replace(tmp, directory / "example.json")  # last: its presence means "built"
    return _load(directory)


def _refuse(path, reason):
    # every image of an example is needed by its ground truth
    raise DatasetImageError(f"{path}: {reason}")


def _demo_collection(directory, photos, max_queries, transforms, seed):
    """Write the demo's database and query images under ``directory``; (Dataset, [DbImage])."""
    chosen = demo.PHOTOS if photos is None else demo.PHOTOS[:int(photos)]
    if not chosen:
        raise ConfigError("photos must be >= 1")
    demo.skimage_photo_dir()  # a clear error before anything is written, if scikit-image is missing
    _prepare(directory)
    for sub in ("database", "queries"):
        (directory / sub).mkdir()
    database = demo.builtin_collection(directory, chosen, 2, seed, _refuse)
    # the originals are copied beside their views: one folder holds the whole database
    database = [im if not im.original else
                im._replace(path=shutil.copyfile(im.path, directory / "database" / im.id))
                for im in database]
    queries = demo.make_queries(database, directory, tf.check_names(transforms), int(max_queries), seed, _refuse)
    rows = {}
    for row, im in enumerate(database):
        rows.setdefault(im.scene, []).append(row)
    qs = [Query(name=Path(q.path).stem, image_id=Path(q.path).name, index=None, box=None,
                positives=np.array(rows[q.scene]), junk=np.zeros(0, np.int64)) for q in queries]
    dataset = Dataset(name="demo", image_ids=tuple(im.id for im in database), queries=tuple(qs),
                      protocol="demo", image_dir=directory / "database", image_ext="",
                      query_image_dir=directory / "queries")
    return dataset, [im._replace(path=str(im.path)) for im in database]


def _dataset_to_json(d):
    return {"name": d.name, "image_ids": list(d.image_ids), "protocol": d.protocol,
            "crop_query": d.crop_query, "exclude_query": d.exclude_query,
            "image_dir": str(d.image_dir), "image_ext": d.image_ext,
            "query_image_dir": None if d.query_image_dir is None else str(d.query_image_dir),
            "queries": [{"name": q.name, "image_id": q.image_id, "index": q.index,
                         "box": None if q.box is None else [float(v) for v in q.box],
                         "positives": q.positives.tolist(), "junk": q.junk.tolist()} for q in d.queries]}


def _dataset_from_json(j):
    qs = [Query(q["name"], q["image_id"], q["index"], None if q["box"] is None else tuple(q["box"]),
                np.array(q["positives"], np.int64), np.array(q["junk"], np.int64)) for q in j["queries"]]
    return Dataset(name=j["name"], image_ids=tuple(j["image_ids"]), queries=tuple(qs), protocol=j["protocol"],
                   crop_query=j["crop_query"], exclude_query=j["exclude_query"], image_dir=j["image_dir"],
                   image_ext=j["image_ext"], query_image_dir=j["query_image_dir"])


def _load(directory):
    try:
        info = json.loads((directory / "example.json").read_text())
        if info.get("format") != FORMAT or info.get("version") != FORMAT_VERSION:
            raise ValueError(f"format {info.get('format')!r} version {info.get('version')!r}")
        dataset = _dataset_from_json(info["dataset"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{directory}: not a readable streamk example ({exc}); delete the folder to rebuild") from exc
    try:
        index = StreamingIndex.open(directory / "index")
    except IndexFormatError:  # built by an earlier streamk (our own cache): upgraded in place, once
        upgrade(directory / "index", progress=False)
        index = StreamingIndex.open(directory / "index")
    return Example(info["name"], directory, index, dataset, {k: v for k, v in info.items() if k != "dataset"})

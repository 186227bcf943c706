"""The main job: ``streamk demo`` -- retrieval on real photographs, end to end.

1. **Photos.** The real photographs that ship inside scikit-image's wheel
   (``skimage/data``: no download), or the images under ``--images DIR``.
   Built-in set: each photo is in the database with two milder variants
   (:data:`streamk.demo.transforms.VARIANTS`), so that a query has several
   positives; the stereo pair ``motorcycle_left`` / ``motorcycle_right`` is one
   scene. Beside them, **bursty scenes** (:mod:`streamk.demo.scenes`): small
   objects cut from the photos, hung on walls of repeated windows, tiles or
   fences, with the same walls bare as distractors: where the paper says sum
   pooling fails. ``--images``: every readable image is in the database as it is.
2. **Queries.** For a deterministic sample of at most ``max_queries`` photos,
   one view per real-world change (:data:`streamk.demo.transforms.TRANSFORMS`:
   crop, rotation, scale, perspective, JPEG, lighting), written as JPEG files.
   The same for every bursty scene. Positives of a query: the database images of
   its scene (``--images``: its source image only); junk (not counted): the
   images that share only its object (a scene and the photo of its object);
   ``--images``: the folder's copies of its source image
   (:mod:`streamk.demo.folder_copies`).
3. **Features** of the database images, extracted once on all cores through
   the on-disk feature cache.
4. **Encoder**: T-emb learned on the database images' own descriptors --
   unsupervised (k-means and whitening use no labels), since no distinct
   learning collection comes with the photos. One
   :class:`~streamk.index.StreamingIndex` per aggregation method (sum,
   democratic, GMP), sharing the learned embedding (``Encoder.derive``).
5. **Search**: the query images' features extracted once (all cores, cached),
   embedded once with one Gram for the three methods (as the database images),
   then each method's vector searched with ``index.search(vector, k)``; mAP
   with the official AP (:mod:`streamk.evaluation.metrics`), overall, per
   category (photos, bursty scenes) and per change.
6. **Page**: ``index.html`` (:mod:`streamk.demo.page`): a summary table, the
   queries a method gets wrong, then every query with its results.

Everything is written under ``out_dir``; a folder holding anything but an
earlier demo's output is refused, never overwritten.
"""

import hashlib
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .. import features as feat
from . import scenes as sc
from . import transforms as tf
from .folder_copies import folder_copies
from .page import write_page
from ..encoding import Encoder, postprocess
from ..errors import ConfigError, DatasetImageError, ImageReadError, StreamkError, TooFewImagesError
from ..evaluation import compute_map
from ..index import MAX_K, StreamingIndex, encoded_image_file
from ..pipeline import extract_many, scan
from ..index import validate_id
from ..verification import stored_record

METHODS = ("sum", "democratic", "gmp")

#: scikit-image's real photographs (file, scene); drawings, synthetic images and
#: photos with almost no Hessian-affine features (cell, clock_motion) are left out
PHOTOS = (
    ("astronaut.png", "astronaut"), ("brick.png", "brick"), ("camera.png", "camera"),
    ("chelsea.png", "chelsea"), ("coffee.png", "coffee"), ("coins.png", "coins"),
    ("grass.png", "grass"), ("gravel.png", "gravel"), ("hubble_deep_field.jpg", "hubble_deep_field"),
    ("ihc.png", "ihc"), ("moon.png", "moon"),
    ("motorcycle_left.png", "motorcycle"), ("motorcycle_right.png", "motorcycle"),
    ("page.png", "page"), ("retina.jpg", "retina"), ("rocket.jpg", "rocket"), ("text.png", "text"),
)

PHOTOS_CATEGORY, SCENES_CATEGORY = "photos", "bursty scenes"
MARKER = ".streamk-demo"  # marks a folder as ours: a re-run may replace what is in it
_OUTPUTS = ("database", "queries", "thumbs", "index.html") + tuple(f"index-{m}" for m in METHODS)
QUERY_MAX_SIDE = 1024  # queries are made from a copy of at most this size (large photos)


class DbImage(NamedTuple):
    id: str
    path: str
    scene: str
    original: bool  # False for the variants the demo wrote (never made into queries)


@dataclass
class Query:
    path: str  # the query image file
    source: str  # id of the database image it is a view of
    scene: str
    transform: str
    category: str = PHOTOS_CATEGORY


@dataclass
class MethodResult:
    method: str
    map: float  # percent
    per_transform: dict  # transform -> mAP percent
    ms_per_query: float  # encoding (embedding and Gram shared by the methods) and this method's scan
    aps: np.ndarray  # per query, percent
    rankings: list  # per query: [(db position, score)] of the first results, best first
    per_category: dict = field(default_factory=dict)  # category -> mAP percent
    missed: np.ndarray = None  # per query: a negative among the first min(positives, show) results


@dataclass
class DemoResult:
    out_dir: Path
    html: Path
    n_database: int
    n_queries: int
    transforms: list
    methods: list  # MethodResult
    skipped: list  # (path, reason)
    timings: dict = field(default_factory=dict)  # stage -> seconds
    copies: list = field(default_factory=list)  # --images: (id, id, reason) of the copy pairs set aside as junk


# ---------------------------------------------------------------- photos
def skimage_photo_dir():
    """scikit-image's bundled ``data`` folder (found through the installed package; nothing is
    downloaded). DatasetImageError when scikit-image is not installed."""
    try:
        import skimage
    except ImportError as exc:
        raise DatasetImageError("the demo photos ship with scikit-image: pip install 'streamk[demo]' "
                                "(or give your own folder with --images DIR)") from exc
    return Path(skimage.__file__).resolve().parent / "data"


def _safe_name(text):
    """A file-name-safe, short version of an id (the page escapes the real id)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60] or "image"


def _prepare_out(out_dir):
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MARKER).exists():
            raise ConfigError(f"--out {out} is not empty and was not written by streamk demo: "
                              "choose a new or empty folder")
        for name in _OUTPUTS:  # an earlier demo's output: replaced
            p = out / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by streamk demo; a new run replaces its content\n")
    for sub in ("database", "queries", "thumbs"):
        (out / sub).mkdir()
    return out


def _save_jpeg(img, path, quality=92):
    img.save(path, format="JPEG", quality=quality)


def builtin_collection(out, photos, n_variants, seed, report):
    """[DbImage] of the database: scikit-image's photos, each with ``n_variants`` milder
    views written to ``out/database``."""
    folder = skimage_photo_dir()
    variants = list(tf.VARIANTS)[:n_variants]
    database = []
    for name, scene in photos:
        path = folder / name
        try:
            img = tf.open_rgb(path)
        except ImageReadError as exc:  # a photo missing from this scikit-image version
            report(str(path), f"{type(exc).__name__}: {exc.reason}")
            continue
        database.append(DbImage(name, str(path), scene, True))
        stem = name.rsplit(".", 1)[0]
        for v in variants:
            vpath = out / "database" / f"{stem}.{v}.jpg"
            _save_jpeg(tf.view(img, v, name, seed), vpath)
            database.append(DbImage(vpath.name, str(vpath), scene, False))
    if not database:
        raise DatasetImageError(f"no demo photos found in {folder}")
    return database


def folder_collection(root, out, report):
    """[DbImage] of every image file under ``root`` (recursively; ids as ``streamk ingest``
    makes them), each its own scene; the demo's own output folder is left out."""
    found, bad = scan([str(root)])
    for path, reason in bad:
        report(path, reason)
    out_abs = os.path.abspath(out) + os.sep
    database = []
    for path, image_id in found:
        if os.path.abspath(path).startswith(out_abs):
            continue
        try:
            validate_id(image_id)
        except StreamkError as exc:
            report(path, f"{type(exc).__name__}: {exc}")
            continue
        database.append(DbImage(image_id, path, image_id, True))
    return database


def _sample(n, k, seed):
    """Positions of a deterministic sample of at most k of n items, in order."""
    if n <= k:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


def make_queries(database, out, transforms, max_queries, seed, report):
    """Write one view per transform of a sample of the database's originals; [Query]."""
    originals = [im for im in database if im.original]
    queries = []
    for n, pos in enumerate(_sample(len(originals), max_queries, seed)):
        queries += _query_views(n, originals[pos], out, transforms, seed, report, PHOTOS_CATEGORY)
    return queries


def _query_views(n, image, out, transforms, seed, report, category):
    """The query files of one database image, one per transform; [Query]."""
    image_id, path, scene, _ = image
    try:
        img = tf.open_rgb(path, max_side=QUERY_MAX_SIDE)
    except ImageReadError as exc:  # changed since its features were extracted
        report(path, f"{type(exc).__name__}: {exc.reason} (no queries made of it)")
        return []
    queries = []
    for t in transforms:
        qpath = out / "queries" / f"{n:04d}-{_safe_name(image_id.rsplit('.', 1)[0])}.{t}.jpg"
        # the jpeg change is its own (heavy) compression; the others are saved as a camera would
        _save_jpeg(tf.view(img, t, image_id, seed), qpath, quality=100 if t == "jpeg" else 92)
        queries.append(Query(str(qpath), image_id, scene, t, category))
    return queries


def bursty_collection(out, database, n_scenes, n_variants, seed):
    """The bursty scenes (:mod:`streamk.demo.scenes`) written to ``out/database``: objects cut from
    the first ``n_scenes`` photo scenes of ``database`` (texture photos left out), each on a place
    in turn, with ``n_variants`` milder views; and the bare walls of the places used.
    Returns ([DbImage], [DbImage] of the scenes' originals (the queried ones), {scene: photo scene})."""
    sources = {}
    for im in database:
        if im.original and im.scene not in sc.NOT_OBJECTS:
            sources.setdefault(im.scene, im)  # one object per scene (the stereo pair gives one)
    sources = list(sources.values())[:max(0, int(n_scenes))]
    # the places in turn across families first: windows-1, tiles-1, fence-1, windows-2, ...
    places = sc.places(seed)
    order = [places[f + sc.PLACES_PER_FAMILY * i] for i in range(sc.PLACES_PER_FAMILY)
             for f in range(len(sc.FAMILIES))]
    folder = out / "database"
    images, originals, related, used = [], [], {}, []
    variants = list(tf.VARIANTS)[:n_variants]
    for n, source in enumerate(sources):
        place = order[n % len(order)]
        if place not in used:
            used.append(place)
        scene = f"{place.name}+{source.scene}"
        related[scene] = source.scene
        img = sc.scene_image(place, sc.object_crop(tf.open_rgb(source.path)), scene, seed)
        stem = f"scene-{n:02d}-{_safe_name(scene)}"
        original = DbImage(f"{stem}.jpg", str(folder / f"{stem}.jpg"), scene, False)
        _save_jpeg(img, original.path)
        images.append(original)
        originals.append(original)
        for v in variants:
            vpath = folder / f"{stem}.{v}.jpg"
            _save_jpeg(tf.view(img, v, original.id, seed), vpath)
            images.append(DbImage(vpath.name, str(vpath), scene, False))
    for place in used:
        for b in range(sc.BARE_VIEWS):
            path = folder / f"wall-{place.name}.bare{b}.jpg"
            _save_jpeg(sc.bare_wall(place, b, seed), path)
            images.append(DbImage(path.name, str(path), f"{place.name}/bare{b}", False))
    return images, originals, related


def scene_queries(originals, out, transforms, seed, report, first=0):
    """One query view per transform of each bursty scene; [Query] (files numbered from ``first``)."""
    queries = []
    for n, image in enumerate(originals, first):
        queries += _query_views(n, image, out, transforms, seed, report, SCENES_CATEGORY)
    return queries


def ground_truth(database, related, copies=()):
    """({scene: positives}, {scene: junk}) as row arrays: a scene's positives are its own images;
    its junk the images that share only its object (``related``: bursty scene -> photo scene)
    and, for the user's folder, the copies of its image (``copies``: (scene, scene) pairs)."""
    rows = {}
    for row, im in enumerate(database):
        rows.setdefault(im.scene, []).append(row)
    junk = {s: [] for s in rows}
    for scene, other in list(related.items()) + list(copies):
        if scene in rows and other in rows:
            junk[scene] += rows[other]
            junk[other] += rows[scene]
    return ({s: np.array(r, np.int64) for s, r in rows.items()},
            {s: np.array(sorted(r), np.int64) for s, r in junk.items()})


# ---------------------------------------------------------------- features and indexes
def extract_database(database, extractor, cache_dir, workers, progress, report):
    """Features of the database images (all cores, cached); unreadable, featureless and
    duplicate files are reported and dropped. Returns (database, [Features], [sha256])."""
    feats, errors = extract_many([im.path for im in database], extractor, cache_dir, workers, progress)
    kept, fs, shas, seen = [], [], [], {}
    for im in database:
        image_id, path = im.id, im.path
        if path in errors:
            report(path, errors[path])
            continue
        if len(feats[path]) == 0:
            report(path, "EmptyDescriptorSetError: no local features")
            continue
        # the content key of the index: the same bytes twice cannot be indexed twice
        try:
            sha = hashlib.sha256(feat.read_image_bytes(path)).hexdigest()
        except ImageReadError as exc:  # removed since its features were extracted
            report(path, f"{type(exc).__name__}: {exc.reason}")
            continue
        if sha in seen:
            report(path, f"DuplicateError: same content as {seen[sha]!r}")
            continue
        seen[sha] = image_id
        kept.append(im)
        fs.append(feats[path])
        shas.append(sha)
    return kept, fs, shas


def encode_database(encoders, fs, progress):
    """{method: [(vector, alpha)]} of the database images, as each method's
    ``encoder.encode(X, return_weights=True)`` gives them; but each image is embedded once
    and its Gram matrix shared by the methods (Encoder.aggregate_methods): the embedding
    and the Gram are most of the cost."""
    from tqdm.auto import tqdm

    out = {m: [] for m in encoders}
    for f in tqdm(fs, desc=f"encoding ({', '.join(encoders)})", unit="img", disable=not progress,
                  dynamic_ncols=True):
        for m, encoded in encode_methods(encoders, f.descriptors).items():
            out[m].append(encoded)
    return out


def encode_methods(encoders, X):
    """{method: (vector, alpha)} of one descriptor set: what each ``encoders[method].encode(X,
    return_weights=True)`` gives, with the embedding and the Gram computed once."""
    base = next(iter(encoders.values()))
    return {m: (postprocess(xi, encoders[m].config.power, encoders[m].rn).astype(np.float32), alpha)
            for m, (xi, alpha) in base.aggregate_methods(X, tuple(encoders)).items()}


def build_index(path, encoder, extractor, database, fs, shas, encoded, batch=64, vocabulary=None):
    """A new index at ``path`` holding the database images, their vectors and weights
    ``encoded`` [(vector, alpha)] written ``batch`` images per transaction; with a
    ``vocabulary``, each image's local geometry too (the second stage)."""
    idx = StreamingIndex.create(path, encoder, vector_dtype="float32", extractor=extractor, vocabulary=vocabulary)
    items = [encoded_image_file(im.id, im.path, sha, v, f.keypoints, alpha, f.image_size,
                                geometry=None if vocabulary is None else
                                stored_record(vocabulary, f.keypoints, f.descriptors, f.image_size))
             for im, f, sha, (v, alpha) in zip(database, fs, shas, encoded)]
    for s in range(0, len(items), batch):
        for outcome in idx.write_encoded(items[s:s + batch]):
            if isinstance(outcome, Exception):  # ids and content were checked before: a bug
                raise outcome
    return idx


def query_features(queries, extractor, cache_dir, workers, progress, report):
    """{query path: Features} of the query images, extracted once for all the methods (all cores,
    cached); a query that fails (unreadable, or no features left after the change) is reported
    and left out: it gets an empty ranking (AP 0)."""
    feats, errors = extract_many([q.path for q in queries], extractor, cache_dir, workers, progress)
    for path, reason in errors.items():
        report(path, f"{reason} (query counted with AP 0)")
    for path in [p for p, f in feats.items() if len(f) == 0]:
        report(path, "EmptyDescriptorSetError: no local features (query counted with AP 0)")
        del feats[path]
    return feats


def _search_all(indexes, encoders, queries, feats, n_db, rows_of, progress, report):
    """{method: ([ranking as (positions, scores)], seconds per query)}: each query's descriptors
    encoded once for all the methods (:func:`encode_methods`), then each method's vector searched
    in its index; a method's seconds are the shared encoding plus its own scan. A query without
    features, or whose encoding or search fails, gets an empty ranking (reported once)."""
    from tqdm.auto import tqdm

    out = {m: [] for m in indexes}
    seconds = dict.fromkeys(indexes, 0.0)
    for q in tqdm(queries, desc="search", unit="query", disable=not progress, dynamic_ncols=True):
        hits = dict.fromkeys(indexes, ())
        if q.path in feats:
            try:
                t0 = time.perf_counter()
                vectors = encode_methods(encoders, feats[q.path].descriptors)
                encoding = time.perf_counter() - t0
                for m, idx in indexes.items():
                    t0 = time.perf_counter()
                    hits[m] = idx.search(vectors[m][0], k=min(n_db, MAX_K))  # the full ranking
                    seconds[m] += encoding + time.perf_counter() - t0
            except StreamkError as exc:
                hits = dict.fromkeys(indexes, ())
                report(q.path, f"{type(exc).__name__}: {exc} (query counted with AP 0)")
        for m in indexes:
            out[m].append((np.array([rows_of[i] for i, _ in hits[m]], dtype=np.int64),
                           np.array([s for _, s in hits[m]])))
    return {m: (out[m], seconds[m] / max(1, len(queries))) for m in indexes}


def _missed(ranking, positives, junk, show):
    """Whether a negative comes among the first min(#positives, show) results, junk skipped."""
    pos, junk = set(positives.tolist()), set(junk.tolist())
    top = [r for r in ranking.tolist() if r not in junk][:min(len(pos), show)]
    return any(r not in pos for r in top) or len(top) < min(len(pos), show)


def _evaluate(method, rankings, seconds, queries, positives, junk, transforms, show):
    """A MethodResult; the rankings kept are the first ``show`` results (for the page)."""
    gt = [(positives[q.scene], junk[q.scene]) for q in queries]
    res = compute_map([pos for pos, _ in rankings], gt)

    def mean_ap(sel):
        return 100 * float(np.nanmean(res.aps[sel])) if sel.any() else float("nan")

    per = {t: mean_ap(np.array([q.transform == t for q in queries])) for t in transforms}
    categories = list(dict.fromkeys(q.category for q in queries))
    per_category = {c: mean_ap(np.array([q.category == c for q in queries])) for c in categories}
    missed = np.array([_missed(pos, p, j, show) for (pos, _), (p, j) in zip(rankings, gt)], dtype=bool)
    return MethodResult(method, 100 * res.map, per, 1000 * seconds, 100 * res.aps,
                        [list(zip(pos[:show].tolist(), sc_[:show].tolist())) for pos, sc_ in rankings],
                        per_category, missed)


# ---------------------------------------------------------------- the job
def _stderr_report(path, reason):
    print(f"streamk: skipped {path}: {reason}", file=sys.stderr, flush=True)


def run_demo(out_dir="streamk-demo", images=None, max_queries=20, transforms=tuple(tf.TRANSFORMS),
             k=16, max_side=640, max_features=1000, workers=None, cache_dir=None, seed=0, show=5,
             photos=PHOTOS, n_variants=2, scenes=12, progress=True, out=print, report=_stderr_report):
    """Run the demo (see the module doc); returns a :class:`DemoResult` and prints its table.

    images: a folder of the user's images (None: scikit-image's photos). scenes: how many
    bursty scenes beside the built-in photos (0: none; none with ``images``). cache_dir:
    the feature cache (None: the default, ``~/.cache/streamk/features``). report(path,
    reason) is called for each skipped file.
    """
    from ..config import default_cache_dir

    t_start = time.perf_counter()
    timings = {}
    transforms = tf.check_names(transforms)
    if int(max_queries) < 1:
        raise ConfigError(f"max_queries must be >= 1, got {max_queries}")
    if int(k) < 2:
        raise ConfigError(f"k must be >= 2 for T-emb, got {k}")
    skipped = []

    def skip(path, reason):
        skipped.append((str(path), reason))
        report(path, reason)

    source = _source_of(images, photos, out_dir)  # before anything is written (or an earlier output deleted)
    extractor = feat.make_extractor(None, max_side=max_side, max_features=max_features)
    made = _what_a_run_makes(out_dir)
    out_path = _prepare_out(out_dir)
    try:
        database, scene_originals, related = _collection(out_path, images, photos, n_variants, scenes, seed, skip)
        t0 = time.perf_counter()
        cache = default_cache_dir() if cache_dir is None else cache_dir
        database, fs, shas = extract_database(database, extractor, cache, workers, progress, skip)
        timings["features"] = time.perf_counter() - t0
        if len(database) < 2:
            raise TooFewImagesError(f"{source}: {len(database)} usable image(s); the demo needs at least 2")
        n_desc = sum(len(f) for f in fs)
        if n_desc < k:
            raise TooFewImagesError(f"{n_desc} local features in all, fewer than k={k}")

        t0 = time.perf_counter()
        queries = make_queries(database, out_path, transforms, int(max_queries), seed, skip)
        kept = {im.id for im in database}
        queries += scene_queries([im for im in scene_originals if im.id in kept], out_path, transforms, seed, skip,
                                 first=len(queries) // len(transforms))
        timings["query views"] = time.perf_counter() - t0
        _print_collection(out, database, queries, transforms, source, images, n_variants, extractor, n_desc, out_path)
        searched, copies = _encode_index_search(out_path, database, fs, shas, extractor, queries, int(k),
                                                (cache, workers, progress), skip, timings, out, images is not None)
        positives, junk = ground_truth(database, related, [(database[a].scene, database[b].scene)
                                                           for a, b, _ in copies])
        methods = [_evaluate(m, rankings, sec, queries, positives, junk, transforms, show)
                   for m, (rankings, sec) in searched.items()]
        result = DemoResult(out_path, out_path / "index.html", len(database), len(queries), transforms,
                            methods, skipped, timings, _copy_ids(database, copies))

        t0 = time.perf_counter()
        info = [(f"Database: {len(database)} images from {_page_source(images, photos, scene_originals)}. "
                 f"Queries: {len(queries)} views ({', '.join(transforms)}). Encoder: T-emb k={k}, learned on the "
                 f"database images (unsupervised). One streaming index per aggregation method, exact search.")]
        if images is not None:
            info.append(_copies_said(result.copies))
        write_page(out_path, result, database, queries, positives, junk, info, show)
        timings["page"] = time.perf_counter() - t0
        timings["total"] = time.perf_counter() - t_start
        _print_table(result, out)
        return result
    except BaseException:
        made()  # a failed run leaves nothing it made (an empty skeleton of database/, queries/, thumbs/ was left)
        raise


def _collection(out_path, images, photos, n_variants, scenes, seed, skip):
    """(database [DbImage], bursty scenes' originals, {bursty scene: photo scene}), written under
    ``out_path``: the built-in photos and their bursty scenes, or the user's folder."""
    if images is not None:
        return folder_collection(images, out_path, skip), [], {}
    database = builtin_collection(out_path, photos, n_variants, seed, skip)
    extra, originals, related = bursty_collection(out_path, database, scenes, n_variants, seed)
    return database + extra, originals, related


def _print_collection(out, database, queries, transforms, source, images, n_variants, extractor, n_desc, out_path):
    n_scenes = sum(q.category == SCENES_CATEGORY for q in queries) // len(transforms)
    out(f"database: {len(database)} images from {source}"
        + (f" ({n_variants} extra views of each scene)" if images is None and n_variants else "")
        + (f", {n_scenes} bursty scenes and their bare walls" if n_scenes else "")
        + f"; {n_desc / len(database):.0f} features per image ({extractor.name}, "
          f"long side <= {extractor.max_side}, at most {extractor.max_features})")
    out(f"queries: {len(queries)} views ({', '.join(transforms)}) of {len(queries) // len(transforms)} "
        f"images, written to {out_path / 'queries'}; positives: "
        + ("the database images of the same scene" if images is None else "the source image only"))


def _source_of(images, photos, out_dir):
    """Where the database images come from, in words: ConfigError when ``images`` is not a
    folder or lies in the output folder ``out_dir`` (whose content a run replaces and does not
    read as images), DatasetImageError for the built-in photos without scikit-image."""
    if images is None:
        skimage_photo_dir()
        return f"scikit-image's {len(photos)} bundled photographs"
    if not Path(images).is_dir():
        raise ConfigError(f"--images {images}: not a folder")
    found, out = Path(images).resolve(), Path(out_dir).resolve()
    if found == out or found.is_relative_to(out):
        raise ConfigError(f"--images {images} is inside --out {out_dir}, the demo's output folder, which a run "
                          f"replaces and whose files it does not read as images; move the images out of it, or "
                          f"give another --out")
    return f"the images under {images}"


def _what_a_run_makes(out_dir):
    """A function that removes what :func:`_prepare_out` and the run after it make in
    ``out_dir``: the folder itself (and the parents made for it) when it did not exist, else
    the demo's outputs, and the marker if it was not there."""
    out = Path(out_dir)
    made, p = [], out.absolute()
    while not p.exists() and p != p.parent:
        made.append(p)
        p = p.parent
    had_marker = (out / MARKER).exists()

    def remove():
        if made:
            shutil.rmtree(made[0], ignore_errors=True)
            for folder in made[1:]:
                try:
                    folder.rmdir()
                except OSError:
                    break
            return
        for name in _OUTPUTS + (() if had_marker else (MARKER,)):
            p = out / name
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
    return remove


def _page_source(images, photos, scene_originals):
    """The source in words for the page: no machine path (the folder's name only)."""
    if images is not None:
        return f"the images under a folder named {Path(images).resolve().name!r}"
    scenes = f" and {len(scene_originals)} bursty scenes made from them" if scene_originals else ""
    return f"scikit-image's {len(photos)} bundled photographs{scenes}"


def _encode_index_search(out_path, database, fs, shas, extractor, queries, k, extraction, skip, timings, out,
                         find_copies=False):
    """Learn the T-emb encoder on the database's descriptors, build one index per method
    and search every query in each: ({method: (rankings, seconds per query)}, copy pairs).
    extraction: (cache_dir, workers, progress) for the queries' features; find_copies: the
    copy pairs among the database images ([(row, row, PairClass)], :mod:`.folder_copies`)."""
    cache, workers, progress = extraction
    t0 = time.perf_counter()
    base = Encoder(embedding="temb", k=k, aggregation="sum").fit([f.descriptors for f in fs], verbose=progress)
    timings["encoder fit"] = time.perf_counter() - t0
    out(f"encoder: T-emb k={k} (D={base.dim}) learned on the database images' own "
        f"{sum(len(f) for f in fs)} descriptors: unsupervised (no labels used; no distinct learning set "
        f"comes with these photos)")

    t0 = time.perf_counter()
    encoders = {m: base if m == "sum" else base.derive(aggregation=m) for m in METHODS}
    vectors = encode_database(encoders, fs, progress)
    timings["encoding"] = time.perf_counter() - t0
    copies = []
    if find_copies:  # proposed by the GMP vectors, the vector rule's (DEFAULT_DUPLICATE_THRESHOLD's)
        t0 = time.perf_counter()
        copies, checked = folder_copies([im.path for im in database], fs, shas,
                                        np.stack([v for v, _ in vectors["gmp"]]), extractor.orients,
                                        extraction_side=extractor.max_side)
        timings["copies"] = time.perf_counter() - t0
        out(f"copies: {_copies_said(_copy_ids(database, copies))} "
            f"({checked} pair(s) checked: those whose vectors are alike)")
    t0 = time.perf_counter()
    indexes = {}
    try:
        for m, enc in encoders.items():
            indexes[m] = build_index(out_path / f"index-{m}", enc, extractor, database, fs, shas, vectors[m])
        timings["indexing"] = timings.pop("encoding") + time.perf_counter() - t0
        t0 = time.perf_counter()
        feats = query_features(queries, extractor, cache, workers, progress, skip)
        timings["query features"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        rows_of = {im.id: row for row, im in enumerate(database)}
        searched = _search_all(indexes, encoders, queries, feats, len(database), rows_of, progress, skip)
        timings["search"] = time.perf_counter() - t0
    finally:
        for idx in indexes.values():
            idx.close()
    return searched, copies


def _copy_ids(database, copies):
    """[(id, id, reason)] of copy pairs given as (row, row, PairClass)."""
    return [(database[a].id, database[b].id, c.reason) for a, b, c in copies]


def _copies_said(copies, show=5):
    """The copy pairs of the user's folder set aside, in words: how many, the first ``show``."""
    if not copies:
        return ("no two images of the folder are copies of each other (files with the same bytes are skipped "
                "and listed as such)")
    named = "; ".join(f"{a} ~ {b}" for a, b, _ in copies[:show]) + ("; ..." if len(copies) > show else "")
    return (f"{len(copies)} pair(s) of images of the folder are copies of each other (the same photo, exported "
            f"again, resized, re-encoded or cropped), each junk for the other's queries, not counted: {named}")


def _print_table(result, out):
    """The mAP table (overall, per category and per change; ms per query), the time of each
    stage, the skipped files' count and the page's path."""
    categories = list(result.methods[0].per_category)
    many = len(categories) > 1
    head = "".join(f"{c:>15}" for c in categories) if many else ""
    out("")
    out(f"{'method':<12}{'mAP':>6}{head}" + "".join(f"{t:>8}" for t in result.transforms) + f"{'ms/query':>10}"
        + f"{'missed':>8}")
    for m in result.methods:
        cells = "".join(f"{v:15.1f}" for v in m.per_category.values()) if many else ""
        out(f"{m.method:<12}{m.map:6.1f}{cells}" + "".join(f"{v:8.1f}" for v in m.per_transform.values())
            + f"{m.ms_per_query:10.0f}{int(m.missed.sum()):8d}")
    out("(mAP in %, official AP; per change over all categories; ms/query: the query's encoding, one embedding "
        "and Gram for the three methods, and the method's scan; its features, extracted once for all methods, "
        "are 'query features' below; missed: queries with a negative before their positives in the first results)")
    out("")
    out("time: " + ", ".join(f"{name} {s:.1f} s" for name, s in result.timings.items()))
    if result.skipped:
        out(f"skipped {len(result.skipped)} file(s) (listed above)")
    out(f"page: {result.html.resolve()}")

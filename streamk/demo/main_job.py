"""The main job: ``streamk demo`` -- retrieval on real photographs, end to end.

1. **Photos.** The real photographs that ship inside scikit-image's wheel
   (``skimage/data``: no download), or the images under ``--images DIR``.
   Built-in set: each photo is in the database with two milder variants
   (:data:`streamk.demo.transforms.VARIANTS`), so that a query has several
   positives; the stereo pair ``motorcycle_left`` / ``motorcycle_right`` is one
   scene. ``--images``: every readable image is in the database as it is.
2. **Queries.** For a deterministic sample of at most ``max_queries`` photos,
   one view per real-world change (:data:`streamk.demo.transforms.TRANSFORMS`:
   crop, rotation, scale, perspective, JPEG, lighting), written as JPEG files.
   Positives of a query: the database images of its scene (``--images``: its
   source image only).
3. **Features** of the database images, extracted once on all cores through
   the on-disk feature cache.
4. **Encoder**: T-emb learned on the database images' own descriptors --
   unsupervised (k-means and whitening use no labels), since no distinct
   learning collection comes with the photos. One
   :class:`~streamk.index.StreamingIndex` per aggregation method (sum,
   democratic, GMP), sharing the learned embedding (``Encoder.derive``).
5. **Search**: each query image with ``index.search(path, k)`` (features,
   encoding and scan: the time a user waits); mAP with the official AP
   (:mod:`streamk.evaluation.metrics`), overall and per change.
6. **Page**: ``index.html`` with the query and result thumbnails (JPEG files
   beside it, relative links), green border for a positive, red for a negative.

Everything is written under ``out_dir``; a folder holding anything but an
earlier demo's output is refused, never overwritten.
"""

import hashlib
import html
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
from . import transforms as tf
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

MARKER = ".streamk-demo"  # marks a folder as ours: a re-run may replace what is in it
_OUTPUTS = ("database", "queries", "thumbs", "index.html") + tuple(f"index-{m}" for m in METHODS)
QUERY_MAX_SIDE = 1024  # queries are made from a copy of at most this size (large photos)
THUMB_SIDE = 160


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


@dataclass
class MethodResult:
    method: str
    map: float  # percent
    per_transform: dict  # transform -> mAP percent
    ms_per_query: float
    aps: np.ndarray  # per query, percent
    rankings: list  # per query: [(db position, score)] of the first results, best first


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
        image_id, path, scene, _ = originals[pos]
        try:
            img = tf.open_rgb(path, max_side=QUERY_MAX_SIDE)
        except ImageReadError as exc:  # changed since its features were extracted
            report(path, f"{type(exc).__name__}: {exc.reason} (no queries made of it)")
            continue
        for t in transforms:
            qpath = out / "queries" / f"{n:04d}-{_safe_name(image_id.rsplit('.', 1)[0])}.{t}.jpg"
            # the jpeg change is its own (heavy) compression; the others are saved as a camera would
            _save_jpeg(tf.view(img, t, image_id, seed), qpath, quality=100 if t == "jpeg" else 92)
            queries.append(Query(str(qpath), image_id, scene, t))
    return queries


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

    base = next(iter(encoders.values()))
    out = {m: [] for m in encoders}
    for f in tqdm(fs, desc=f"encoding ({', '.join(encoders)})", unit="img", disable=not progress,
                  dynamic_ncols=True):
        for m, (xi, alpha) in base.aggregate_methods(f.descriptors, tuple(encoders)).items():
            enc = encoders[m]
            out[m].append((postprocess(xi, enc.config.power, enc.rn).astype(np.float32), alpha))
    return out


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


def _search_all(indexes, queries, n_db, rows_of, progress, report):
    """{method: ([ranking as (positions, scores)], seconds per query)}; a query that fails
    (e.g. no features left after the change) gets an empty ranking and is reported once."""
    from tqdm.auto import tqdm

    out = {m: [] for m in indexes}
    seconds = {m: 0.0 for m in indexes}
    failed = set()
    bar = tqdm(total=len(queries) * len(indexes), desc="search", unit="query", disable=not progress,
               dynamic_ncols=True)
    with bar:
        for qi, q in enumerate(queries):
            for m, idx in indexes.items():
                t0 = time.perf_counter()
                try:
                    hits = idx.search(q.path, k=min(n_db, MAX_K))  # the full ranking, up to MAX_K
                except StreamkError as exc:
                    hits = []
                    if qi not in failed:
                        failed.add(qi)
                        report(q.path, f"{type(exc).__name__}: {exc} (query counted with AP 0)")
                seconds[m] += time.perf_counter() - t0
                pos = np.array([rows_of[i] for i, _ in hits], dtype=np.int64)
                out[m].append((pos, np.array([s for _, s in hits])))
                bar.update(1)
    return {m: (out[m], seconds[m] / max(1, len(queries))) for m in indexes}


def _evaluate(method, rankings, seconds, queries, positives, transforms, show):
    """A MethodResult; the rankings kept are the first ``show`` results (for the page)."""
    gt = [(positives[q.scene], ()) for q in queries]
    res = compute_map([pos for pos, _ in rankings], gt)
    per = {}
    for t in transforms:
        sel = np.array([q.transform == t for q in queries])
        per[t] = 100 * float(np.nanmean(res.aps[sel])) if sel.any() else float("nan")
    return MethodResult(method, 100 * res.map, per, 1000 * seconds, 100 * res.aps,
                        [list(zip(pos[:show].tolist(), sc[:show].tolist())) for pos, sc in rankings])


# ---------------------------------------------------------------- page
_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} p.info{max-width:60em}
table.map{border-collapse:collapse;margin:1em 0}
table.map th,table.map td{padding:.25em .7em;text-align:right;border-bottom:1px solid #ddd}
table.map th:first-child,table.map td:first-child{text-align:left}
.q{display:flex;gap:1.2em;border-top:1px solid #ccc;padding:.8em 0;align-items:flex-start}
.q table th{text-align:left;font-weight:normal;font-size:13px;width:7.5em;vertical-align:top}
.hits{display:flex;gap:.4em}
figure{margin:0;width:132px;font-size:11px;overflow-wrap:anywhere}
figure img{display:block;max-width:120px;max-height:120px;border:5px solid #999}
figure.query img{border-color:#48c}
figure.pos img{border-color:#2a2} figure.neg img{border-color:#d22}
"""


def _thumbnail(src, dst):
    img = tf.open_rgb(src, max_side=THUMB_SIDE)
    _save_jpeg(img, dst, quality=85)


def _figure(cls, thumb, caption_lines):
    cap = "<br>".join(html.escape(str(line)) for line in caption_lines)
    return (f'<figure class="{cls}"><img src="{html.escape(thumb)}" alt="{html.escape(str(caption_lines[-1]))}">'
            f"<figcaption>{cap}</figcaption></figure>")


def write_page(out, result, database, queries, positives, info_lines, show=5):
    """index.html under ``out`` and the thumbnails it links (only those it shows)."""
    thumbs = {}

    def thumb(kind, i, path):
        key = (kind, i)
        if key not in thumbs:
            rel = f"thumbs/{kind}{i:05d}.jpg"
            _thumbnail(path, out / rel)
            thumbs[key] = rel
        return thumbs[key]

    e = html.escape
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>streamk demo</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>streamk demo: sum, democratic and GMP aggregation</h1>"]
    parts += [f'<p class="info">{e(line)}</p>' for line in info_lines]
    head = "".join(f"<th>{e(t)}</th>" for t in result.transforms)
    parts.append(f'<table class="map"><tr><th>method</th><th>mAP</th>{head}<th>ms/query</th></tr>')
    for m in result.methods:
        cells = "".join(f"<td>{v:.1f}</td>" for v in m.per_transform.values())
        parts.append(f"<tr><td>{e(m.method)}</td><td>{m.map:.1f}</td>{cells}<td>{m.ms_per_query:.0f}</td></tr>")
    parts.append("</table>")
    parts.append(f"<p>Each query with its top {show} results per method: rank, score (cosine), id; "
                 "green border: same scene, red: another.</p>")
    for qi, q in enumerate(queries):
        pos = set(positives[q.scene].tolist())
        parts.append('<div class="q">')
        parts.append(_figure("query", thumb("q", qi, q.path), ["query", q.transform, q.source]))
        parts.append("<table>")
        for m in result.methods:
            figs = []
            for rank, (row, score) in enumerate(m.rankings[qi][:show], 1):
                im = database[row]
                figs.append(_figure("pos" if row in pos else "neg", thumb("d", row, im.path),
                                    [f"#{rank} {score:.3f}", im.id]))
            ap = "n/a" if np.isnan(m.aps[qi]) else f"{m.aps[qi]:.1f}"
            parts.append(f"<tr><th>{e(m.method)}<br>AP {e(ap)}</th>"
                         f'<td><div class="hits">{"".join(figs) or e("(no result)")}</div></td></tr>')
        parts.append("</table></div>")
    parts.append("</body></html>")
    page = out / "index.html"
    page.write_text("\n".join(parts), encoding="utf-8")
    return page


# ---------------------------------------------------------------- the job
def _stderr_report(path, reason):
    print(f"streamk: skipped {path}: {reason}", file=sys.stderr, flush=True)


def run_demo(out_dir="streamk-demo", images=None, max_queries=20, transforms=tuple(tf.TRANSFORMS),
             k=16, max_side=640, max_features=1000, workers=None, cache_dir=None, seed=0, show=5,
             photos=PHOTOS, n_variants=2, progress=True, out=print, report=_stderr_report):
    """Run the demo (see the module doc); returns a :class:`DemoResult` and prints its table.

    images: a folder of the user's images (None: scikit-image's photos). cache_dir:
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

    source = _source_of(images, photos)  # before anything is written
    extractor = feat.make_extractor(None, max_side=max_side, max_features=max_features)
    out_path = _prepare_out(out_dir)
    database = (builtin_collection(out_path, photos, n_variants, seed, skip) if images is None
                else folder_collection(images, out_path, skip))
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
    timings["query views"] = time.perf_counter() - t0
    scenes = {}
    for row, im in enumerate(database):
        scenes.setdefault(im.scene, []).append(row)
    positives = {s: np.array(rows) for s, rows in scenes.items()}

    out(f"database: {len(database)} images from {source}"
        + (f" ({n_variants} extra views of each scene)" if images is None and n_variants else "")
        + f"; {n_desc / len(database):.0f} features per image ({extractor.name}, "
          f"long side <= {max_side}, at most {max_features})")
    out(f"queries: {len(queries)} views ({', '.join(transforms)}) of {len(queries) // len(transforms)} "
        f"images, written to {out_path / 'queries'}; positives: "
        + ("the database images of the same scene" if images is None else "the source image only"))
    searched = _encode_index_search(out_path, database, fs, shas, extractor, queries, int(k), progress, skip,
                                    timings, out)
    methods = [_evaluate(m, rankings, sec, queries, positives, transforms, show)
               for m, (rankings, sec) in searched.items()]
    result = DemoResult(out_path, out_path / "index.html", len(database), len(queries), transforms,
                        methods, skipped, timings)

    t0 = time.perf_counter()
    info = [f"Database: {len(database)} images from {source}. Queries: {len(queries)} views "
            f"({', '.join(transforms)}). Encoder: T-emb k={k}, learned on the database images "
            f"(unsupervised). One streaming index per aggregation method, exact search."]
    write_page(out_path, result, database, queries, positives, info, show)
    timings["page"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_start
    _print_table(result, out)
    return result


def _source_of(images, photos):
    """Where the database images come from, in words: ConfigError when ``images`` is not a
    folder, DatasetImageError for the built-in photos without scikit-image."""
    if images is None:
        return f"scikit-image's {len(photos)} bundled photographs ({skimage_photo_dir()})"
    if not Path(images).is_dir():
        raise ConfigError(f"--images {images}: not a folder")
    return f"the images under {images}"


def _encode_index_search(out_path, database, fs, shas, extractor, queries, k, progress, skip, timings, out):
    """Learn the T-emb encoder on the database's descriptors, build one index per method
    and search every query in each: {method: (rankings, seconds per query)}."""
    t0 = time.perf_counter()
    base = Encoder(embedding="temb", k=k, aggregation="sum").fit([f.descriptors for f in fs], verbose=progress)
    timings["encoder fit"] = time.perf_counter() - t0
    out(f"encoder: T-emb k={k} (D={base.dim}) learned on the database images' own "
        f"{sum(len(f) for f in fs)} descriptors: unsupervised (no labels used; no distinct learning set "
        f"comes with these photos)")

    t0 = time.perf_counter()
    encoders = {m: base if m == "sum" else base.derive(aggregation=m) for m in METHODS}
    vectors = encode_database(encoders, fs, progress)
    indexes = {}
    try:
        for m, enc in encoders.items():
            indexes[m] = build_index(out_path / f"index-{m}", enc, extractor, database, fs, shas, vectors[m])
        timings["indexing"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        rows_of = {im.id: row for row, im in enumerate(database)}
        searched = _search_all(indexes, queries, len(database), rows_of, progress, skip)
        timings["search"] = time.perf_counter() - t0
    finally:
        for idx in indexes.values():
            idx.close()
    return searched


def _print_table(result, out):
    """The mAP table (overall and per change, ms per query), the time of each stage, the
    skipped files' count and the page's path."""
    out("")
    out(f"{'method':<12}{'mAP':>6}" + "".join(f"{t:>8}" for t in result.transforms) + f"{'ms/query':>10}")
    for m in result.methods:
        out(f"{m.method:<12}{m.map:6.1f}" + "".join(f"{v:8.1f}" for v in m.per_transform.values())
            + f"{m.ms_per_query:10.0f}")
    out("(mAP in %, official AP; ms/query: one index.search on the query file: its features, "
        "encoding and the scan)")
    out("")
    out("time: " + ", ".join(f"{name} {s:.1f} s" for name, s in result.timings.items()))
    if result.skipped:
        out(f"skipped {len(result.skipped)} file(s) (listed above)")
    out(f"page: {result.html.resolve()}")

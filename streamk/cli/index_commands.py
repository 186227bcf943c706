"""``streamk index create | field | train | train-pq | info | add-local-features |
upgrade | verify | backup | remove | export``: make an index, give it what it lacks, look at
it, check it, copy it, take images out of it, hand its vectors to other tools."""

import json
import sys

from ..schema import with_schema_version
from ..units import byte_size
from .defaults import DEFAULT_DESCRIPTORS_PER_IMAGE, DEFAULT_MAX_IMAGES
from .options import add_cache_options, add_limit_options, add_vocab_size_option, positive_int, unit_float

DASK_OWNERS_HELP = "a sharded index: its shards' owners on this Dask cluster"
EXPORT_FORMATS = (".npy", ".fvecs")
EXPORT_PAGE = 256  # vectors read (and held) at a time by ``index export``


def open_from_args(args, readonly):
    """The index at args.dir: a StreamingIndex, or a ShardedIndex (its shards' owners on
    the Dask cluster of --dask, when given)."""
    from ..index import open_index

    return open_index(args.dir, readonly=readonly, dask=getattr(args, "dask", None))


def stale_note(staleness, where):
    """The note that the index's codec is stale (None when it is not), naming the index
    ``where`` as a shell word a user can paste."""
    import shlex

    from ..index import stale_codec_note

    return stale_codec_note(staleness, shlex.quote(str(where)))


# ---------------------------------------------------------------- the commands
def _index_create(args):
    from ..config import feature_cache_dir
    from ..pipeline import create_index

    create_index(args.dir, encoder=args.encoder, train=args.train, vector_dtype=args.vector_dtype,
                 extractor=args.extractor, max_side=args.max_side or None, max_features=args.max_features or None,
                 max_file_size=args.max_file_size, max_pixels=args.max_pixels, embedding=args.embedding,
                 fv_pca=args.fv_pca, k=args.vocab_size, aggregation=args.aggregation,
                 workers=args.workers, dask=args.dask, train_images=args.train_images,
                 train_descriptors=args.train_descriptors, seed=args.seed,
                 cache_dir=feature_cache_dir(args.cache, args.no_cache), save_encoder=args.save_encoder,
                 shards=args.shards, store_extras=not args.no_extras, local_features=not args.no_local_features,
                 vocabulary=args.vocabulary, indexed_fields=args.index_field or (),
                 rn=None if args.rn is None else {"off": False, "on": True}[args.rn], dim=args.dim,
                 power=args.power, gamma=args.gamma, lam=args.lam)
    return 0


def _index_field(args):
    with open_from_args(args, readonly=False) as idx:
        for name in args.names:
            added = idx.index_field(name)
            print(f"{name}: {'indexed' if added else 'already indexed'}")
        print(f"indexed fields: {', '.join(idx.indexed_fields())}")
    return 0


def _add_local_features(args):
    from ..config import feature_cache_dir
    from ..errors import ConfigError
    from ..index import StreamingIndex, is_sharded
    from ..pipeline import add_local_features

    if is_sharded(args.dir):  # (its shards may live on other hosts: refused before any is opened)
        raise ConfigError(f"{args.dir} is a sharded index: `streamk index add-local-features` works on a single "
                          f"index (each shard would learn its own visual words); a sharded index has local geometry "
                          f"when it is created with it (the default of `streamk index create --shards N`, without "
                          f"--no-local-features): create one so and ingest the images into it")
    with StreamingIndex.open(args.dir) as idx:
        _, failed = add_local_features(idx, vocabulary=args.vocabulary, train_images=args.train_images,
                                       train_descriptors=args.train_descriptors, seed=args.seed, workers=args.workers,
                                       dask=args.dask, cache_dir=feature_cache_dir(args.cache, args.no_cache))
    return 1 if failed else 0


def _index_train(args):
    import time

    from ..index import check_trainable
    from ..quantization import IVFPQ, default_train_size

    nlist = getattr(args, "nlist", 1)
    with open_from_args(args, readonly=False) as idx:
        t0 = time.perf_counter()
        codec = IVFPQ(nlist=nlist, M=args.M, nprobe=getattr(args, "nprobe", None))
        kind = check_trainable(codec, len(idx), idx.dim).describe()  # before saying that it trains
        sample = min(len(idx), args.train_size or default_train_size(nlist))
        print(f"training {kind} on {sample:,} of the {len(idx):,} stored vectors; ingestion and searches "
              f"go on meanwhile", flush=True)
        codec = idx.train(nlist=nlist, M=args.M, seed=args.seed, train_size=args.train_size,
                          nprobe=getattr(args, "nprobe", None))
        name = f"PQ M={codec.M}" if codec.nlist == 1 else f"IVF{codec.nlist}-PQ M={codec.M}"
        print(f"swapped in {name} ({codec.M} bytes per image) for {len(idx):,} images in "
              f"{time.perf_counter() - t0:.1f} s; searches use it (--mode pq, the default once trained)",
              flush=True)
    return 0


def _index_info(args):
    with open_from_args(args, readonly=True) as idx:
        info = describe_index(idx)
        if args.json:
            print(json.dumps(with_schema_version(info), indent=1))
            return 0
        print("\n".join(info_lines(info)))
        note = stale_note(idx.codec_staleness(), args.dir)
        if note:
            print(f"note: {note}")
    return 0


def describe_index(idx):
    """What ``index info`` shows: the index's counts (its ``stats()``), its encoder, the
    extractor of its images, its local features (the second stage's vocabulary) and the
    bytes its files take on this machine's disk."""
    info = idx.stats()
    config, vocabulary = idx.encoder.config, idx.vocabulary
    info["encoder"] = {"embedding": config.embedding, "k": config.k, "aggregation": config.aggregation,
                       "dimension": idx.encoder.dim, "power": config.power, "rn": config.rn,
                       # the research knobs index create --train takes: D' and D, gamma / lambda of its aggregation
                       "dim": config.dim, "embedding_dimension": idx.encoder.embedding.dim,
                       "gamma": config.gamma if config.aggregation == "democratic" else None,
                       "n_iter": config.n_iter if config.aggregation == "democratic" else None,
                       "lam": config.lam if config.aggregation == "gmp" else None}
    ex = idx.extractor()
    params = ex.params()
    info["extractor"] = {"name": params["extractor"], **params["options"], "exif_orientation": ex.orients}
    info["local_features"] = vocabulary is not None
    info["vocabulary"] = None if vocabulary is None else {"words": vocabulary.n_words, "coarse": vocabulary.n_coarse}
    info["disk_bytes"] = disk_bytes(idx.path)
    return info


def disk_bytes(path):
    """The bytes the files under ``path`` take on disk (allocated blocks, as ``du``: an
    LMDB map is sparse where nothing was written)."""
    import os

    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:  # removed meanwhile
                pass
    return total


def info_lines(info):
    """``index info`` for a person: one line per thing, in words (the JSON has the raw values)."""
    enc, ex, voc = info["encoder"], info["extractor"], info["vocabulary"]
    rn = ", RN" if enc["rn"] else ""
    lines = [("images", f"{info['images']:,}")]
    if "shards" in info:
        lines.append(("shards", f"{info['shards']:,}"))
    lines += [("encoder", (f"{enc['embedding']} k={enc['k']}, {enc['aggregation']}, dimension {enc['dimension']:,}"
                           f" (power-law {enc['power']:g}{rn})")),
              ("aggregation", _aggregation_words(enc)),
              ("normalisation", _normalisation_words(enc)),
              ("extractor", (f"{ex['name']}, long side {ex.get('max_side') or 'full'} px, "
                             f"at most {ex.get('max_features') or 'all'} features an image, "
                             + ("photos turned upright by their EXIF orientation" if ex.get("exif_orientation")
                                else "pixels as stored (made before streamk applied the EXIF orientation)"))),
              ("local features", "no (no second stage: streamk index add-local-features adds it)" if voc is None
               else f"yes, a vocabulary of {voc['words']:,} visual words ({voc['coarse']} coarse cells)"),
              ("vectors", f"{info['vector_dtype']}, {enc['dimension']:,} values an image"),
              ("codec", info["codec"] or "none (exact search; streamk index train fits a PQ codec)")]
    if "codec_trained_on" in info:  # named as the JSON's keys (the README and the stale-codec note use them)
        trained, added = info["codec_trained_on"], info["added_since_training"]
        lines.append(("codec_trained_on", "?" if trained is None else f"{trained:,} images"))
        lines.append(("added_since_training", "?" if added is None else f"{added:,} images"))
    lines += [("reader memory", byte_size(info["reader_memory"])), ("disk size", byte_size(info["disk_bytes"]))]
    return [f"{name:>14}: {value}" for name, value in lines]


def _aggregation_words(enc):
    """The aggregation with its parameter (``index create --gamma`` / ``--lam``), in words."""
    if enc.get("gamma") is not None:
        return f"democratic, gamma {enc['gamma']:g} (its damping exponent), {enc['n_iter']} iterations"
    if enc.get("lam") is not None:
        return f"gmp, lambda {enc['lam']:g} (its ridge regulariser)"
    return f"{enc['aggregation']} (no parameter)" if enc["aggregation"] == "sum" else enc["aggregation"]


def _normalisation_words(enc):
    """What is done to the aggregated vector (``index create --power``, ``--rn``, ``--dim``), in order."""
    power = f"power-law {enc['power']:g}"
    if not enc["rn"]:
        return f"{power}, L2 (no RN)"
    kept = (f"keeps D'={enc['dim']:,} of {enc['embedding_dimension']:,} components" if enc.get("dim") is not None
            else f"keeps all {enc['dimension']:,} components")
    return f"L2, RN ({kept}), {power}, L2"


def _index_upgrade(args):
    from ..index import upgrade

    n = upgrade(args.dir, progress=None if sys.stderr.isatty() else False)
    from ..index import FORMAT_VERSION

    print(f"upgraded {args.dir} to index format {FORMAT_VERSION} ({n:,} images)")
    return 0


def _index_verify(args):
    from ..errors import IndexCorruptError
    from ..index import check_index

    report = check_index(args.dir, repair=args.repair, progress=None if sys.stderr.isatty() else False)
    if args.json:
        print(json.dumps(with_schema_version(report.to_dict()), indent=1))
    else:
        print("\n".join(report.lines()))
    return 0 if report.ok else IndexCorruptError.exit_code


def _index_backup(args):
    from ..index import backup

    r = backup(args.dir, args.dest, progress=None if sys.stderr.isatty() else False)
    if r.removed:
        print(f"removed {len(r.removed)} partial copy(ies) of backups killed before they finished, beside "
              f"{args.dest}: {', '.join(r.removed)}", file=sys.stderr)
    print(f"backed up {args.dir} to {args.dest}: {r.images:,} images, {byte_size(r.bytes)} in "
          f"{len(r.shards)} environment(s), verified, {r.seconds:.1f} s")
    return 0


def _index_remove(args):
    from ..errors import ConfigError

    ids = list(args.ids)
    if args.from_file is not None:
        try:
            with open(args.from_file, encoding="utf-8") as f:
                ids += [line.rstrip("\r\n") for line in f if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--from-file {args.from_file}: cannot read it ({exc})") from None
    ids = list(dict.fromkeys(ids))  # an id given twice is removed once
    if not ids:
        args.parser.error("give the ids to remove (ID ..., or --from-file FILE)")
    with open_from_args(args, readonly=False) as idx:
        n = idx.remove(ids)  # all or none: an unknown id removes nothing (UnknownIdError names it)
    from ..errors import printable

    for image_id in ids:
        print(f"removed {printable(image_id)}")
    print(f"removed {n:,} image{'' if n == 1 else 's'} from {args.dir}")
    return 0


def _index_export(args):
    """``index export IDX OUT``: every vector of the index, page by page (Index.vectors_page,
    bounded memory), into OUT (.npy: an (N, D) float32 array; .fvecs: TEXMEX records) and
    its ids, one a line in page order, into OUT with .ids.txt for its extension. Both are
    written to temporary files beside them and renamed at the end (the ids file first, OUT
    last; with --force the old OUT is removed first, so that old vectors never lie beside new
    ids), so a killed export leaves no partial file. N is len(idx) when the export starts:
    an index that takes a change meanwhile (its change count moved: an image added, removed or
    replaced, also an add and a remove that leave N as it was) is refused (IndexChangedError,
    nothing written) rather than exported half old, half new."""
    from pathlib import Path

    from ..errors import OutputFileError
    from ..files import atomic_write, check_output_file

    out = Path(args.out)
    if out.suffix.lower() not in EXPORT_FORMATS:
        args.parser.error(f"OUT must end in .npy (an (N, D) float32 array) or .fvecs (TEXMEX vectors), "
                          f"got {args.out!r}")
    ids_path = out.with_suffix(".ids.txt")
    for path, what in ((out, "the vectors"), (ids_path, "the ids")):
        check_output_file(path, what)
        if path.exists() and not args.force:
            raise OutputFileError(f"cannot write {what} to {path}: it exists; give --force to replace it, or "
                                  f"another path", path)
    with open_from_args(args, readonly=True) as idx:
        n, dim, changes = len(idx), int(idx.dim), idx.change_count()

        def vectors_then_ids(vectors_fh):
            atomic_write(ids_path, lambda ids_fh: _export_pages(idx, n, dim, changes, out.suffix.lower(), vectors_fh,
                                                                ids_fh, args), "the ids")
            out.unlink(missing_ok=True)  # (--force) the new ids are in place: the old vectors must not stay beside

        atomic_write(out, vectors_then_ids, "the vectors")
    print(f"exported {n:,} vectors of dimension {dim:,} to {args.out} (ids: {ids_path})")
    return 0


def _export_pages(idx, n, dim, changes, kind, vectors_fh, ids_fh, args):
    """Write the index's n vectors and ids page by page; IndexChangedError when the pass
    finds more or fewer than n, or the index's change count is no longer ``changes``."""
    import numpy as np
    from tqdm import tqdm

    from ..errors import IndexChangedError
    from ..features import fvecs_bytes

    def changed(seen):
        return IndexChangedError(f"the index {args.dir} changed during the export ({n:,} images when it began, "
                                 f"{seen} read): nothing was written; run it again when no one adds or removes "
                                 f"images, or export a backup of it (streamk index backup)")

    if kind == ".npy":
        np.lib.format.write_array_header_1_0(vectors_fh, {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")),
                                                          "fortran_order": False, "shape": (n, dim)})
    done, after = 0, None
    with tqdm(total=n, unit="vec", desc="export", file=sys.stderr, disable=True if args.no_progress else None) as bar:
        while True:
            ids, V, after = idx.vectors_page(after, EXPORT_PAGE)
            if not ids:
                break
            if done + len(ids) > n:
                raise changed(f"more than {n:,}")
            V = np.ascontiguousarray(V, "<f4")
            vectors_fh.write(V.tobytes() if kind == ".npy" else fvecs_bytes(V))
            ids_fh.write("".join(f"{i}\n" for i in ids).encode("utf-8"))
            done += len(ids)
            bar.update(len(ids))
    if done != n or len(idx) != n or idx.change_count() != changes:
        raise changed(f"{done:,}")


# ---------------------------------------------------------------- their arguments
def add_index_commands(sub):
    ix = sub.add_parser("index", help="create a streaming index, train its product quantiser")
    ix_sub = ix.add_subparsers(dest="index_command", required=True)
    _add_create_command(ix_sub)
    fi = ix_sub.add_parser("field", help="index metadata fields so that search filters (--where) may use them")
    fi.add_argument("dir", help="index directory")
    fi.add_argument("names", nargs="+", metavar="NAME", help="metadata field names (e.g. folder, date)")
    fi.add_argument("--dask", default=None, metavar="ADDRESS", help=DASK_OWNERS_HELP)
    fi.set_defaults(func=_index_field)
    _add_train_commands(ix_sub)
    inf = ix_sub.add_parser("info", help="counts, codec and sizes of an index")
    inf.add_argument("dir", help="index directory")
    inf.add_argument("--json", action="store_true", help="the same as one JSON object")
    inf.add_argument("--dask", default=None, metavar="ADDRESS", help=DASK_OWNERS_HELP)
    inf.set_defaults(func=_index_info)
    _add_local_features_command(ix_sub)
    up = ix_sub.add_parser("upgrade", help="convert an index of format 1, 2 or 3 to format 4 (checksums on "
                                            "every record), in place")
    up.add_argument("dir", help="index directory")
    up.set_defaults(func=_index_upgrade)
    ve = ix_sub.add_parser("verify", help="check every block, record and count of an index against its "
                                          "checksums; exit 5 when damaged (--repair: rebuild what can be)")
    ve.add_argument("dir", help="index directory (a sharded one: every shard)")
    ve.add_argument("--repair", action="store_true",
                    help="rebuild codes and lists, drop unreadable rows (listed as lost), then verify again")
    ve.add_argument("--json", action="store_true", help="the report as JSON")
    ve.set_defaults(func=_index_verify)
    bk = ix_sub.add_parser("backup", help="a consistent, compacted copy of an index taken while it is written "
                                          "and searched, verified, then renamed into place (a backup is an index)")
    bk.add_argument("dir", help="index directory (a sharded one: every shard, with its manifest)")
    bk.add_argument("dest", help="the backup's folder (must not exist)")
    bk.set_defaults(func=_index_backup)
    rm = ix_sub.add_parser("remove", help="remove images by id, all or none (an unknown id removes nothing)")
    rm.add_argument("dir", help="index directory (single or sharded)")
    rm.add_argument("ids", nargs="*", metavar="ID", help="ids of images to remove")
    rm.add_argument("--from-file", default=None, metavar="FILE", help="also the ids in this file, one per line")
    rm.add_argument("--dask", default=None, metavar="ADDRESS", help=DASK_OWNERS_HELP)
    rm.set_defaults(func=_index_remove, parser=rm)
    ex = ix_sub.add_parser("export", help="write every vector of an index to a .npy array or an .fvecs file, "
                                          "and its ids, one a line, to OUT with .ids.txt for its extension")
    ex.add_argument("dir", help="index directory (single or sharded)")
    ex.add_argument("out", metavar="OUT", help="the file to write: NAME.npy ((N, D) float32, numpy.load) or "
                                               "NAME.fvecs (TEXMEX: faiss, INRIA tools); the ids go to NAME.ids.txt")
    ex.add_argument("--force", action="store_true", help="replace OUT and its ids file when they exist")
    ex.add_argument("--no-progress", action="store_true", help="no progress bar")
    ex.add_argument("--dask", default=None, metavar="ADDRESS", help=DASK_OWNERS_HELP)
    ex.set_defaults(func=_index_export, parser=ex)


def _add_create_command(ix_sub):
    cr = ix_sub.add_parser("create", help="create an empty index with a saved, newly trained or the default encoder")
    cr.add_argument("dir", help="index directory (new or empty)")
    cr.add_argument("--encoder", help="a saved encoder (.npz, Encoder.save); with neither --encoder nor --train: "
                                      "streamk's default encoder (T-emb k=16, learned on scikit-image's photos)")
    cr.add_argument("--train", nargs="+", metavar="IMAGES",
                    help="fit a new encoder (and the visual words) on these image files/folders; with --encoder: "
                         "the visual words only")
    cr.add_argument("--no-local-features", action="store_true",
                    help="no local geometry (no spatial verification): about 20 KB less per image")
    cr.add_argument("--vocabulary", default=None, metavar="FILE",
                    help="a saved vocabulary of visual words (Vocabulary.save) for the local geometry")
    cr.add_argument("--vector-dtype", default="float16", choices=["float16", "float32"],
                    help="how stored vectors are kept: float16 (the default: half the disk) or float32")
    cr.add_argument("--no-extras", action="store_true",
                    help="do not keep keypoints and weights for display (~50 KB per photo): for millions")
    cr.add_argument("--shards", type=positive_int, default=None,
                    help="spread the index over S shards (S LMDB folders; with --dask, on the workers' disks)")
    cr.add_argument("--extractor", default=None, help="hesaff (default) or sift (OpenCV)")
    add_limit_options(cr, extraction=True)
    cr.add_argument("--embedding", default="temb", help="with --train: temb, fv, fv-hard, vlad, bow")
    cr.add_argument("--fv-pca", type=int, default=64, metavar="P",
                    help="with --train and fv / fv-hard: PCA of the descriptors to P dimensions first (0: none)")
    add_vocab_size_option(cr, type=positive_int, default=None,
                          help="with --train: vocabulary size (default 64; with T-emb, less when the learning "
                               "sample is small: the largest power of two k with k x 128 <= its descriptors)")
    cr.add_argument("--aggregation", default="gmp", help="with --train: sum, democratic, gmp")
    cr.add_argument("--rn", choices=("off", "on"), default=None,
                    help="with --train: RN, the rotation + whitening learned on the learning images' aggregated "
                         "vectors (default off; needs many images: RN learned on few hurts)")
    cr.add_argument("--dim", type=positive_int, default=None, metavar="D",
                    help="with --train and --rn on: keep the first D' components after RN (default: all)")
    cr.add_argument("--power", type=unit_float, default=None, metavar="A",
                    help="with --train: power-law exponent on the aggregated vectors, in (0, 1] (default 0.5, "
                         "the paper's)")
    cr.add_argument("--gamma", type=float, default=None, metavar="G",
                    help="with --train and --aggregation democratic: its damping exponent, in (0, 1] "
                         "(default 0.5, the paper's)")
    cr.add_argument("--lam", type=float, default=None, metavar="L",
                    help="with --train and --aggregation gmp: generalised max pooling's ridge regulariser lambda, "
                         "> 0 (default 1.0)")
    cr.add_argument("--workers", type=positive_int, default=None, help="with --train: extraction processes")
    cr.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="with --train: extract on a Dask cluster (tcp://host:8786, or local:N)")
    cr.add_argument("--train-images", type=positive_int, default=DEFAULT_MAX_IMAGES,
                    help=f"with --train: learn from at most this many images, a seeded sample "
                         f"(default {DEFAULT_MAX_IMAGES})")
    cr.add_argument("--train-descriptors", type=positive_int, default=DEFAULT_DESCRIPTORS_PER_IMAGE,
                    help=f"with --train: at most this many descriptors of each image, a seeded sample "
                         f"(default {DEFAULT_DESCRIPTORS_PER_IMAGE})")
    cr.add_argument("--seed", type=int, default=0,
                    help="with --train: seed of the samples and k-means (default 0)")
    add_cache_options(cr)
    cr.add_argument("--save-encoder", default=None, help="with --train: also save the encoder here")
    cr.add_argument("--index-field", action="append", default=None, metavar="NAME",
                    help="a metadata field that search filters (--where) may use; repeatable")
    cr.set_defaults(func=_index_create)


def _add_train_commands(ix_sub):
    tr = ix_sub.add_parser("train", help="(re)train the PQ / IVF-PQ codec and swap it in without stopping "
                                         "ingestion or searches")
    tr.add_argument("dir", help="index directory")
    tr.add_argument("--nlist", type=positive_int, default=1,
                    help="IVF lists (1: flat PQ, for up to ~10^5 images; e.g. 4096 at 10^6)")
    tr.add_argument("--nprobe", type=positive_int, default=None,
                    help="lists a query visits by default (default: nlist / 256, at least 1)")
    tp = ix_sub.add_parser("train-pq", help="flat PQ: train --nlist 1 (needs >= 256 images)")
    tp.add_argument("dir", help="index directory")
    for p in (tr, tp):
        p.add_argument("--dask", default=None, metavar="ADDRESS", help=DASK_OWNERS_HELP)
        p.add_argument("--M", type=positive_int, default=16, help="sub-quantisers = bytes per image (default 16)")
        p.add_argument("--train-size", type=positive_int, default=None,
                       help="stored vectors drawn to train on (default: max(65536, 32 nlist))")
        p.add_argument("--seed", type=int, default=0, help="seed of the training sample and k-means (default 0)")
        p.set_defaults(func=_index_train)


def _add_local_features_command(ix_sub):
    lf = ix_sub.add_parser("add-local-features", help="give an index its local geometry (spatial verification): "
                                                       "learn the visual words on its images, add every record")
    lf.add_argument("dir", help="index directory")
    lf.add_argument("--vocabulary", default=None, metavar="FILE", help="a saved vocabulary instead of learning one")
    lf.add_argument("--train-images", type=positive_int, default=DEFAULT_MAX_IMAGES,
                    help=f"learn the words on at most this many of the index's images (default {DEFAULT_MAX_IMAGES})")
    lf.add_argument("--train-descriptors", type=positive_int, default=DEFAULT_DESCRIPTORS_PER_IMAGE,
                    help=f"descriptors per learning image (default {DEFAULT_DESCRIPTORS_PER_IMAGE})")
    lf.add_argument("--seed", type=int, default=0,
                    help="seed of the visual words' learning sample and k-means (default 0)")
    lf.add_argument("--workers", type=positive_int, default=None, help="extraction processes (default: all cores)")
    lf.add_argument("--dask", default=None, metavar="ADDRESS", help="extract on a Dask cluster")
    add_cache_options(lf)
    lf.set_defaults(func=_add_local_features)

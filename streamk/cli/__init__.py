"""Command line: ``streamk demo``, ``streamk eval``, ``streamk datasets download``,
``streamk index create``, ``streamk ingest``, ``streamk search``, ``streamk duplicates``."""

import argparse
import errno
import json
import os
import sys
import traceback

from ..errors import StreamkError, Terminated

__all__ = ["build_parser", "main", "run_command"]


def _demo(args):
    from ..demo import run_demo

    run_demo(out_dir=args.out, images=args.images, max_queries=args.max_queries, transforms=args.transforms,
             k=args.k, max_side=args.max_side, max_features=args.max_features, workers=args.workers,
             cache_dir=args.cache, seed=args.seed, show=args.show, progress=not args.no_progress)
    return 0


def _csv(cast=str):
    return lambda text: [cast(x) for x in text.split(",") if x]


def _eval(args):
    from ..evaluation.report import run_eval

    report = run_eval(
        args.dataset, args.root, method=args.method, embeddings=args.embedding, ks=args.k,
        aggregations=args.aggregation, rn=[{"off": False, "on": True}[v] for v in args.rn], dims=args.dim,
        power=args.power, seeds=args.seeds, pq_bytes=args.pq_bytes, rerank=args.rerank, fv_pca=args.fv_pca,
        gamma=args.gamma, lam=args.lam, learn_dataset=args.learn_dataset, learn_root=args.learn_root,
        extractor=args.extractor, max_side=args.max_side, max_features=args.max_features, cache=args.cache,
        no_cache=args.no_cache, workers=args.workers, asmk_words=args.asmk_words, asmk_ma=args.asmk_ma,
        verify=args.verify, expand=args.expand,
        log=(lambda *a: None) if args.json else print, progress=not args.json)
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


def _download(args):
    from ..datasets import download

    path = download(args.name, args.dir, progress=True, base_url=args.mirror)
    print(f"{args.name}: ready in {path}")
    return 0


# ---------------------------------------------------------------- streaming index
def _int_at_least(minimum):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        return v
    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _unit_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def _positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return v


_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _byte_size(text):
    """A size in bytes: ``52428800``, ``50M``, ``1.5G`` (K, M, G, T: powers of 1024)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _SIZE_UNITS and t[-1:] else ""
    try:
        v = float(t[: len(t) - len(unit)]) * _SIZE_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 52428800, 50M, 1G)") from None
    if not (v >= 1 and v < 2**62):
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return int(v)


def _add_limit_options(parser, extraction=False):
    """The image limits (README, "Limits and errors"): file size and pixels of every image
    read; with ``extraction`` (index create), the extractor's long side and feature cap too."""
    from ..features import DEFAULT_MAX_FEATURES, DEFAULT_MAX_SIDE, MAX_FILE_SIZE, MAX_PIXELS

    parser.add_argument("--max-file-size", type=_byte_size, default=MAX_FILE_SIZE, metavar="BYTES",
                        help=f"refuse image files larger than this (e.g. 50M; default {MAX_FILE_SIZE // 2**20}M)")
    parser.add_argument("--max-pixels", type=_positive_int, default=MAX_PIXELS, metavar="N",
                        help=f"refuse images of more pixels (width x height, read from the header before "
                             f"decoding; default {MAX_PIXELS:,})")
    if extraction:
        parser.add_argument("--max-side", type=_max_side, default=DEFAULT_MAX_SIDE, metavar="PX",
                            help=f"extractor: reduce images to this long side before detection (default "
                                 f"{DEFAULT_MAX_SIDE}, the Oxford/Paris images' size; 0: full resolution); "
                                 f"stored with the index, queries are reduced alike")
        parser.add_argument("--max-features", type=_non_negative_int, default=DEFAULT_MAX_FEATURES, metavar="N",
                            help=f"extractor: keep the strongest N features of an image (default "
                                 f"{DEFAULT_MAX_FEATURES}; 0: all); stored with the index")


def _max_side(text):
    v = _non_negative_int(text)
    if 0 < v < 16:
        raise argparse.ArgumentTypeError(f"must be 0 (full resolution) or >= 16, got {v}")
    return v


def _index_create(args):
    from ..config import feature_cache_dir
    from ..pipeline.index_setup import create_index

    create_index(args.dir, encoder=args.encoder, train=args.train, vector_dtype=args.vector_dtype,
                 extractor=args.extractor, max_side=args.max_side or None, max_features=args.max_features or None,
                 max_file_size=args.max_file_size, max_pixels=args.max_pixels, embedding=args.embedding, fv_pca=args.fv_pca, k=args.k, aggregation=args.aggregation,
                 workers=args.workers, dask=args.dask, train_images=args.train_images,
                 train_descriptors=args.train_descriptors, seed=args.seed,
                 cache_dir=feature_cache_dir(args.cache, args.no_cache), save_encoder=args.save_encoder,
                 shards=args.shards, store_extras=not args.no_extras, local_features=not args.no_local_features,
                 vocabulary=args.vocabulary, indexed_fields=args.index_field or ())
    return 0


def _index_field(args):
    with _open(args, readonly=False) as idx:
        for name in args.names:
            added = idx.index_field(name)
            print(f"{name}: {'indexed' if added else 'already indexed'}")
        print(f"indexed fields: {', '.join(idx.indexed_fields)}")
    return 0


def _duplicates(args):
    with _open(args, readonly=True) as idx:
        if args.id is not None:
            hits = idx.duplicates(args.id, threshold=args.threshold, verify=args.verify)
            if args.json:
                print(json.dumps([h.to_dict(pairs=False) for h in hits], indent=1))
            else:
                for h in hits:
                    inl = "" if h.inliers is None else f"  {h.inliers} inliers"
                    print(f"{h.score:8.4f}  {h.id}{inl}")
            return 0
        groups = idx.duplicates(threshold=args.threshold, verify=args.verify, neighbours=args.neighbours,
                                progress=None if not args.no_progress else False)
    if args.json:
        print(json.dumps(groups, indent=1))
    else:
        for n, g in enumerate(groups, 1):
            print(f"group {n} ({len(g['ids'])} images): {' '.join(g['ids'])}")
        print(f"{len(groups)} group(s) of near-duplicates, {sum(len(g['ids']) for g in groups)} images "
              f"(threshold {args.threshold:g}{', verified' if args.verify else ''})")
    return 0


def _add_local_features(args):
    from ..config import feature_cache_dir
    from ..index import StreamingIndex
    from ..pipeline import add_local_features

    with StreamingIndex.open(args.dir) as idx:
        _, failed = add_local_features(idx, vocabulary=args.vocabulary, train_images=args.train_images,
                                       train_descriptors=args.train_descriptors, seed=args.seed, workers=args.workers,
                                       dask=args.dask, cache_dir=feature_cache_dir(args.cache, args.no_cache))
    return 1 if failed else 0


def _index_train(args):
    import time

    from ..quantization.ivfpq import IVFPQ, default_train_size

    nlist = getattr(args, "nlist", 1)
    with _open(args, readonly=False) as idx:
        t0 = time.perf_counter()
        kind = IVFPQ(nlist=nlist, M=args.M, nprobe=getattr(args, "nprobe", None)).describe()
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

    with _open(args, readonly=True) as idx:
        info = idx.stats()
        if args.json:
            print(json.dumps(info, indent=1))
            return 0
        for k, v in info.items():
            if k != "per_shard":
                print(f"{k:>14}: {v:,}" if isinstance(v, int) else f"{k:>14}: {v}")
        note = _stale_note(idx.codec_staleness(), args.dir)
        if note:
            print(f"note: {note}")
    return 0


def _stale_note(staleness, where):
    from ..index import stale_codec_note

    return stale_codec_note(staleness, _shell_word(where))


def _shell_word(text):
    import shlex

    return shlex.quote(str(text))


def _index_upgrade(args):
    from ..index import upgrade

    n = upgrade(args.dir, progress=None if sys.stderr.isatty() else False)
    from ..index.store import FORMAT_VERSION

    print(f"upgraded {args.dir} to index format {FORMAT_VERSION} ({n:,} images)")
    return 0


def _index_verify(args):
    from ..errors import IndexCorruptError
    from ..index import check_index

    report = check_index(args.dir, repair=args.repair, progress=None if sys.stderr.isatty() else False)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print("\n".join(report.lines()))
    return 0 if report.ok else IndexCorruptError.exit_code


def _open(args, readonly):
    """The index at args.dir: a StreamingIndex, or a ShardedIndex (its shards' owners on
    the Dask cluster of --dask, when given)."""
    from ..index import open_index

    return open_index(args.dir, readonly=readonly, dask=getattr(args, "dask", None))


def _ingest(args):
    from ..config import feature_cache_dir
    from ..errors import IngestInterruptedError
    from ..pipeline import run_ingest

    try:
        with _terminate_raises():  # SIGTERM, as SIGINT, ends a watch cleanly and a one-shot run with its account
            stats = run_ingest(args.dir, args.images, watch=args.watch, interval=args.interval,
                               max_polls=args.max_polls, workers=args.workers, dask=args.dask,
                               batch_size=args.batch_size, cache_dir=feature_cache_dir(args.cache, args.no_cache),
                               progress=None if not args.no_progress else False,
                               log=lambda line: print(line, flush=True),
                               max_file_size=args.max_file_size, max_pixels=args.max_pixels,
                               metadata=args.metadata, on_duplicate=args.on_duplicate,
                               duplicate_threshold=args.duplicate_threshold,
                               retrain_at=args.retrain_at)
    except IngestInterruptedError as exc:
        print(f"streamk: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    print(stats.summary(), flush=True)
    return 1 if stats.n_failed else 0


class _terminate_raises:
    """While inside: SIGTERM raises :class:`~streamk.errors.Terminated` in the main thread
    (the previous handler is put back on the way out). Elsewhere than the main thread:
    nothing changes."""

    def __enter__(self):
        import signal
        import threading

        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGTERM, _raise_terminated)
        return self

    def __exit__(self, *exc):
        import signal

        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


def _raise_terminated(signum, frame):
    from ..errors import Terminated

    raise Terminated()


class _sigint_raises:
    """While inside: SIGINT raises KeyboardInterrupt, whatever this process inherited (a
    shell starts background jobs with SIGINT ignored, and Python then leaves it ignored)."""

    def __enter__(self):
        import signal
        import threading

        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, signal.default_int_handler)
        return self

    def __exit__(self, *exc):
        import signal

        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def _search(args):
    box = None if args.box is None else tuple(args.box)
    with _open(args, readonly=True) as idx:
        idx.extractor().set_limits(max_file_size=args.max_file_size, max_pixels=args.max_pixels)
        with _stale_codec_noted(args.dir):
            hits = idx.search(args.image, k=args.k, mode=args.mode, box=box, rerank=args.rerank, nprobe=args.nprobe,
                              verify=args.verify, expand=args.expand, expansion=args.expansion, pairs=args.pairs,
                              where=args.where)
    if args.json:
        print(json.dumps([{"rank": r, **h.to_dict(pairs=args.pairs)} for r, h in enumerate(hits, 1)], indent=1))
    else:
        print(f"{'rank':>4}  {'score':>8}  {'inliers':>7}  id")
        for r, h in enumerate(hits, 1):
            inliers = "" if h.inliers is None else f"{h.inliers}{'*' if h.verified else ''}"
            print(f"{r:>4}  {h.score:8.4f}  {inliers:>7}  {h.id}")
        if any(h.inliers is not None for h in hits):
            print("(* verified: its local features agree with the query's under one affine map)")
    return 0


class _stale_codec_noted:
    """While inside: a StaleCodecWarning becomes one ``streamk: note:`` line on stderr
    (naming the index as typed); other warnings are shown as usual."""

    def __init__(self, where):
        self.where = where

    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings(record=True)
        self._caught = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        import warnings

        from ..errors import StaleCodecWarning

        self._catch.__exit__(*exc)
        stale = None
        for w in self._caught:
            if issubclass(w.category, StaleCodecWarning):
                stale = getattr(w.message, "staleness", None)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        note = _stale_note(stale, self.where)
        if note:
            print(f"streamk: note: {note}", file=sys.stderr, flush=True)


def _serve(args):
    from ..server import serve

    return serve(args.dir, host=args.host, port=args.port, workers=args.workers, token_file=args.token_file,
                 cors=args.cors or (), dask=args.dask, max_upload=int(args.max_upload * (1 << 20)),
                 images=args.images or (), max_requests=args.max_requests, show_paths=args.show_paths)


def _add_serve_command(sub):
    sv = sub.add_parser("serve", help="an HTTP API and a web page over an index (search by photo, id or vector; "
                                      "add, update, delete images)",
                        allow_abbrev=False)  # '--token SECRET' must not pass for --token-file
    sv.add_argument("dir", help="index directory")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    sv.add_argument("--port", type=_int_at_least(0), default=8000, help="port (default 8000)")
    sv.add_argument("--workers", type=_positive_int, default=2,
                    help="processes that extract and encode uploaded photos (default 2)")
    sv.add_argument("--token-file", default=None, metavar="FILE",
                    help="file holding the token that writes (and then reads) need; or set STREAMK_TOKEN. "
                         "Without one the server is read-only")
    sv.add_argument("--cors", action="append", default=None, metavar="ORIGIN",
                    help="allow browser pages of this origin (e.g. https://example.org) to call the API; "
                         "repeatable (default: none)")
    sv.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="a sharded index: its shards' owners on this Dask cluster")
    sv.add_argument("--images", action="append", default=None, metavar="DIR",
                    help="the collection folder the index was ingested from: thumbnails of its images are made "
                         "from these files (repeatable; nothing outside them is read)")
    sv.add_argument("--show-paths", action="store_true",
                    help="include the metadata fields path and folder (where ingestion found each file on this "
                         "machine) in answers; default: hidden (filters may use them either way)")
    sv.add_argument("--max-upload", type=_positive_float, default=20.0, metavar="MB",
                    help="largest request body accepted, in MB (default 20)")
    sv.add_argument("--max-requests", type=_positive_int, default=64, metavar="N",
                    help="requests answered at once; one more gets 503 busy (default 64)")
    sv.set_defaults(func=_serve)


def _add_cache_options(parser):
    parser.add_argument("--cache", default=None, metavar="DIR",
                        help="feature cache folder, read and filled by the workers (default: "
                             "~/.cache/streamk/features when it exists)")
    parser.add_argument("--no-cache", action="store_true", help="no feature cache")


def _add_index_commands(sub):
    from ..index import DEFAULT_DUPLICATE_THRESHOLD, DUPLICATE_POLICIES
    from ..pipeline import DEFAULT_DESCRIPTORS_PER_IMAGE, DEFAULT_MAX_IMAGES

    ix = sub.add_parser("index", help="create a streaming index, train its product quantiser")
    ix_sub = ix.add_subparsers(dest="index_command", required=True)
    cr = ix_sub.add_parser("create", help="create an empty index with a saved or newly trained encoder")
    cr.add_argument("dir", help="index directory (new or empty)")
    cr.add_argument("--encoder", help="a saved encoder (.npz, Encoder.save)")
    cr.add_argument("--train", nargs="+", metavar="IMAGES",
                    help="fit a new encoder (and the visual words) on these image files/folders; with --encoder: "
                         "the visual words only")
    cr.add_argument("--no-local-features", action="store_true",
                    help="no local geometry (no spatial verification): about 20 KB less per image")
    cr.add_argument("--vocabulary", default=None, metavar="FILE",
                    help="a saved vocabulary of visual words (Vocabulary.save) for the local geometry")
    cr.add_argument("--vector-dtype", default="float16", choices=["float16", "float32"])
    cr.add_argument("--no-extras", action="store_true",
                    help="do not keep keypoints and weights for display (~50 KB per photo): for millions")
    cr.add_argument("--shards", type=_positive_int, default=None,
                    help="spread the index over S shards (S LMDB folders; with --dask, on the workers' disks)")
    cr.add_argument("--extractor", default=None, help="hesaff (default) or sift (OpenCV)")
    _add_limit_options(cr, extraction=True)
    cr.add_argument("--embedding", default="temb", help="with --train: temb, fv, fv-hard, vlad, bow")
    cr.add_argument("--fv-pca", type=int, default=64, metavar="P",
                    help="with --train and fv / fv-hard: PCA of the descriptors to P dimensions first (0: none)")
    cr.add_argument("--k", type=_positive_int, default=64, help="with --train: vocabulary size")
    cr.add_argument("--aggregation", default="gmp", help="with --train: sum, democratic, gmp")
    cr.add_argument("--workers", type=_positive_int, default=None, help="with --train: extraction processes")
    cr.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="with --train: extract on a Dask cluster (tcp://host:8786, or local:N)")
    cr.add_argument("--train-images", type=_positive_int, default=DEFAULT_MAX_IMAGES,
                    help=f"with --train: learn from at most this many images, a seeded sample "
                         f"(default {DEFAULT_MAX_IMAGES})")
    cr.add_argument("--train-descriptors", type=_positive_int, default=DEFAULT_DESCRIPTORS_PER_IMAGE,
                    help=f"with --train: at most this many descriptors of each image, a seeded sample "
                         f"(default {DEFAULT_DESCRIPTORS_PER_IMAGE})")
    cr.add_argument("--seed", type=int, default=0, help="with --train: seed of the samples")
    _add_cache_options(cr)
    cr.add_argument("--save-encoder", default=None, help="with --train: also save the encoder here")
    cr.add_argument("--index-field", action="append", default=None, metavar="NAME",
                    help="a metadata field that search filters (--where) may use; repeatable")
    cr.set_defaults(func=_index_create)
    fi = ix_sub.add_parser("field", help="index metadata fields so that search filters (--where) may use them")
    fi.add_argument("dir", help="index directory")
    fi.add_argument("names", nargs="+", metavar="NAME", help="metadata field names (e.g. folder, date)")
    fi.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="a sharded index: its shards' owners on this Dask cluster")
    fi.set_defaults(func=_index_field)
    tr = ix_sub.add_parser("train", help="(re)train the PQ / IVF-PQ codec and swap it in without stopping "
                                         "ingestion or searches")
    tr.add_argument("dir", help="index directory")
    tr.add_argument("--nlist", type=_positive_int, default=1,
                    help="IVF lists (1: flat PQ, for up to ~10^5 images; e.g. 4096 at 10^6)")
    tr.add_argument("--nprobe", type=_positive_int, default=None,
                    help="lists a query visits by default (default: nlist / 256, at least 1)")
    tp = ix_sub.add_parser("train-pq", help="flat PQ: train --nlist 1 (needs >= 256 images)")
    tp.add_argument("dir", help="index directory")
    inf = ix_sub.add_parser("info", help="counts, codec and sizes of an index")
    inf.add_argument("dir", help="index directory")
    inf.add_argument("--json", action="store_true")
    inf.set_defaults(func=_index_info)
    for p in (tr, tp, inf):
        p.add_argument("--dask", default=None, metavar="ADDRESS",
                       help="a sharded index: its shards' owners on this Dask cluster")
    for p in (tr, tp):
        p.add_argument("--M", type=_positive_int, default=16, help="sub-quantisers = bytes per image (default 16)")
        p.add_argument("--train-size", type=_positive_int, default=None,
                       help="stored vectors drawn to train on (default: max(65536, 32 nlist))")
        p.add_argument("--seed", type=int, default=0)
        p.set_defaults(func=_index_train)
    lf = ix_sub.add_parser("add-local-features", help="give an index its local geometry (spatial verification): "
                                                       "learn the visual words on its images, add every record")
    lf.add_argument("dir", help="index directory")
    lf.add_argument("--vocabulary", default=None, metavar="FILE", help="a saved vocabulary instead of learning one")
    lf.add_argument("--train-images", type=_positive_int, default=DEFAULT_MAX_IMAGES,
                    help=f"learn the words on at most this many of the index's images (default {DEFAULT_MAX_IMAGES})")
    lf.add_argument("--train-descriptors", type=_positive_int, default=DEFAULT_DESCRIPTORS_PER_IMAGE,
                    help=f"descriptors per learning image (default {DEFAULT_DESCRIPTORS_PER_IMAGE})")
    lf.add_argument("--seed", type=int, default=0)
    lf.add_argument("--workers", type=_positive_int, default=None, help="extraction processes (default: all cores)")
    lf.add_argument("--dask", default=None, metavar="ADDRESS", help="extract on a Dask cluster")
    _add_cache_options(lf)
    lf.set_defaults(func=_add_local_features)
    up = ix_sub.add_parser("upgrade", help="convert an index of format 1 or 2 to format 3 (checksums), in place")
    up.add_argument("dir", help="index directory")
    up.set_defaults(func=_index_upgrade)
    ve = ix_sub.add_parser("verify", help="check every block, record and count of an index against its "
                                          "checksums; exit 5 when damaged (--repair: rebuild what can be)")
    ve.add_argument("dir", help="index directory (a sharded one: every shard)")
    ve.add_argument("--repair", action="store_true",
                    help="rebuild codes and lists, drop unreadable rows (listed as lost), then verify again")
    ve.add_argument("--json", action="store_true", help="the report as JSON")
    ve.set_defaults(func=_index_verify)

    ing = sub.add_parser("ingest", help="add image files/folders to an index (resumable; skips known content)")
    ing.add_argument("dir", help="index directory")
    ing.add_argument("images", nargs="+", help="image files and folders (walked recursively)")
    ing.add_argument("--watch", action="store_true", help="keep polling the folders for new files")
    ing.add_argument("--interval", type=_positive_float, default=5.0, help="seconds between polls (--watch)")
    ing.add_argument("--max-polls", type=_positive_int, default=None,
                     help="with --watch: stop after this many passes (default: until Ctrl-C)")
    ing.add_argument("--workers", type=_positive_int, default=None, help="extraction processes (default: all cores)")
    ing.add_argument("--dask", default=None, metavar="ADDRESS",
                     help="run the workers on a Dask cluster: its scheduler's address (tcp://host:8786), "
                          "or local:N for a LocalCluster of N processes started here")
    _add_cache_options(ing)
    ing.add_argument("--batch-size", type=_positive_int, default=64, help="images per write transaction")
    ing.add_argument("--no-progress", action="store_true", help="no progress bar")
    ing.add_argument("--metadata", default=None, metavar="FILE.jsonl",
                     help='metadata for the images: one JSON object per line, {"id": ..., fields} or '
                          '{"path": ..., fields} (beside the path, folder, size, mtime and EXIF date stored anyway)')
    ing.add_argument("--on-duplicate", choices=list(DUPLICATE_POLICIES), default="keep",
                     help="a near-duplicate of a stored image (same photo re-encoded, resized, cropped a little): "
                          "keep it (default, not looked up), skip it, or add it and report it")
    ing.add_argument("--duplicate-threshold", type=_unit_float, default=DEFAULT_DUPLICATE_THRESHOLD, metavar="T",
                     help=f"vector similarity of a near-duplicate (default {DEFAULT_DUPLICATE_THRESHOLD})")
    ing.add_argument("--retrain-at", type=_positive_float, default=None, metavar="RATIO",
                     help="after the pass (each poll with --watch), retrain the PQ codec when the images added since "
                          "it was trained exceed RATIO times the images it was trained on (e.g. 1; default: never)")
    _add_limit_options(ing)
    ing.set_defaults(func=_ingest)

    se = sub.add_parser("search", help="the k best images of an index for a query image")
    se.add_argument("dir", help="index directory")
    se.add_argument("image", help="query image file")
    se.add_argument("-k", type=_positive_int, default=10)
    se.add_argument("--box", type=float, nargs=4, metavar=("X1", "Y1", "X2", "Y2"), default=None)
    se.add_argument("--mode", choices=["exact", "pq"], default=None,
                    help="default: pq once the index has a codec (index train), else exact")
    se.add_argument("--nprobe", type=_positive_int, default=None, help="with an IVF codec: lists visited")
    se.add_argument("--rerank", type=_non_negative_int, default=None,
                    help="with --mode pq: candidates re-scored with the stored vectors (0: none; "
                         "default max(4k, 100))")
    se.add_argument("--verify", type=_non_negative_int, default=None, metavar="R",
                    help="spatially verify the first R results (default 100 when the index has local geometry; "
                         "0: off)")
    se.add_argument("--expand", type=_non_negative_int, default=None, metavar="N",
                    help="query expansion with at most N verified results (default 50; 0: off)")
    se.add_argument("--expansion", choices=["aqe", "alpha"], default="aqe",
                    help="average query expansion (default) or alpha-QE")
    se.add_argument("--pairs", action="store_true", help="with --json: each result's inlier pairs")
    se.add_argument("--json", action="store_true", help="print JSON instead of a table")
    se.add_argument("--where", default=None, metavar="JSON",
                    help='a metadata filter on indexed fields, e.g. \'{"folder": "/photos/paris"}\', '
                         '\'{"date": {"gte": "2024-01-01"}}\', \'{"tag": {"in": ["a", "b"]}}\' (fields ANDed)')
    _add_limit_options(se)
    se.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="a sharded index: search its shards through their owners on this Dask cluster")
    se.set_defaults(func=_search)

    du = sub.add_parser("duplicates", help="groups of near-duplicate images (the same photo re-encoded, resized, "
                                           "cropped a little), from the vectors, optionally verified")
    du.add_argument("dir", help="index directory")
    du.add_argument("--id", default=None, help="only this image's near-duplicates")
    du.add_argument("--threshold", type=_unit_float, default=DEFAULT_DUPLICATE_THRESHOLD, metavar="T",
                    help=f"vector similarity (inner product) of a near-duplicate (default {DEFAULT_DUPLICATE_THRESHOLD}, "
                         f"measured on the demo's photo changes: bench/README.md)")
    du.add_argument("--verify", action="store_true",
                    help="keep only the pairs the second stage confirms (local geometry, RANSAC)")
    du.add_argument("--neighbours", type=_positive_int, default=10,
                    help="each image's nearest images looked at (whole index; default 10)")
    du.add_argument("--json", action="store_true", help="print JSON")
    du.add_argument("--no-progress", action="store_true", help="no progress bar")
    du.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="a sharded index: its shards' owners on this Dask cluster")
    du.set_defaults(func=_duplicates)


def build_parser():
    from ..demo.transforms import TRANSFORMS

    parser = argparse.ArgumentParser(prog="streamk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="index real photographs, search views of them under real-world "
                                       "changes with sum / democratic / GMP; print mAP, write an HTML page")
    demo.add_argument("--images", default=None, metavar="DIR",
                      help="your own folder of images (default: scikit-image's bundled photographs)")
    demo.add_argument("--out", default="streamk-demo", metavar="DIR",
                      help="output folder: query images, indexes, index.html (default: ./streamk-demo)")
    demo.add_argument("--max-queries", type=_positive_int, default=20,
                      help="images to make query views of (a deterministic sample)")
    demo.add_argument("--transforms", type=_csv(), default=list(TRANSFORMS),
                      help=f"changes to make the queries with (comma list of {','.join(TRANSFORMS)})")
    demo.add_argument("--k", type=_positive_int, default=16, help="T-emb vocabulary size")
    demo.add_argument("--max-side", type=_positive_int, default=640, help="extractor: downscale to this long side")
    demo.add_argument("--max-features", type=_positive_int, default=1000, help="extractor: keep the strongest N")
    demo.add_argument("--workers", type=_positive_int, default=None, help="extraction processes (default: all cores)")
    demo.add_argument("--cache", default=None, help="feature cache directory (default ~/.cache/streamk/features)")
    demo.add_argument("--show", type=_positive_int, default=5, help="results per method on the page")
    demo.add_argument("--seed", type=int, default=0, help="seed of the query sample and the changes")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.set_defaults(func=_demo)

    ev = sub.add_parser("eval", help="mAP of aggregation methods on a benchmark, laid out like the paper's table")
    ev.add_argument("--dataset", required=True, help="paris6k-subset, oxford5k, paris6k, holidays, roxford5k, ...")
    ev.add_argument("--method", choices=["single", "asmk"], default="single",
                    help="single: the paper's one vector per image (default); asmk: ASMK and ASMK* "
                         "(Tolias et al. 2013) on the same descriptors, with memory and query time")
    ev.add_argument("--asmk-words", type=_positive_int, default=None,
                    help="with --method asmk: codebook size (default: the paper's 65k words scaled to the "
                         "learning descriptors, ~250 per word)")
    ev.add_argument("--asmk-ma", type=_positive_int, default=5,
                    help="with --method asmk: also rows with each query descriptor on its N nearest words "
                         "(the paper's multiple assignment; 1: none)")
    ev.add_argument("--root", help="dataset directory (images in ROOT/jpg); default for paris6k-subset: "
                                   "../shared/data or $STREAMK_SHARED_DATA")
    ev.add_argument("--embedding", type=_csv(), default=["temb"], help="temb, fv, fv-hard, vlad, bow (comma list)")
    ev.add_argument("--fv-pca", type=int, default=64, metavar="P",
                    help="fv / fv-hard: PCA of the descriptors to P dimensions before the GMM (0: none)")
    ev.add_argument("--k", type=_csv(int), default=[64], help="vocabulary sizes (comma list)")
    ev.add_argument("--aggregation", type=_csv(), default=["sum", "democratic", "gmp"])
    ev.add_argument("--rn", type=_csv(), default=["off", "on"], help="off,on")
    ev.add_argument("--dim", type=_csv(int), default=None, help="D' after RN (comma list)")
    ev.add_argument("--seeds", type=_positive_int, default=1,
                    help="re-run every learning stage (k-means / GMM, RN, PQ) with seeds 0..N-1 and print "
                         "mAP as mean ± std, as the paper averages three vocabularies (default 1)")
    ev.add_argument("--pq-bytes", type=_csv(int), default=None,
                    help="also rows of PQ codes of these sizes (e.g. 16,32,64; ADC) for each --dim vector "
                         "(or the full vectors)")
    ev.add_argument("--rerank", type=int, default=50,
                    help="with --pq-bytes: rows with the ADC top R re-ranked by the float vectors (0: none)")
    ev.add_argument("--verify", type=_non_negative_int, default=100, metavar="R",
                    help="second-stage rows (+QE, +SP, +SP+QE) beside each method: the first R results spatially "
                         "verified (default 100; 0: none)")
    ev.add_argument("--expand", type=_non_negative_int, default=50, metavar="N",
                    help="with --verify: query expansion over at most N verified images (default 50)")
    ev.add_argument("--power", type=float, default=0.5)
    ev.add_argument("--gamma", type=float, default=None)
    ev.add_argument("--lam", type=float, default=None)
    ev.add_argument("--learn-dataset", help="distinct learning collection (default: Paris6k for Oxford, "
                                            "Oxford5k for Paris)")
    ev.add_argument("--learn-root", help="directory of the learning collection")
    ev.add_argument("--extractor", default=None, help="hesaff (default) or sift (OpenCV)")
    ev.add_argument("--max-side", type=int, default=None)
    ev.add_argument("--max-features", type=int, default=None)
    ev.add_argument("--cache", help="feature cache directory (default ~/.cache/streamk/features)")
    ev.add_argument("--no-cache", action="store_true")
    ev.add_argument("--workers", type=int, default=None)
    ev.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    ev.set_defaults(func=_eval)

    ds = sub.add_parser("datasets", help="benchmark datasets")
    ds_sub = ds.add_subparsers(dest="datasets_command", required=True)
    dl = ds_sub.add_parser("download", help="fetch and extract a benchmark's official archives")
    dl.add_argument("name")
    dl.add_argument("--dir", required=True)
    dl.add_argument("--mirror", default=None, help="base URL of a mirror holding the same file names")
    dl.set_defaults(func=_download)
    _add_index_commands(sub)
    _add_serve_command(sub)
    return parser


EXIT_INTERNAL = 1  # a bug: one line, the traceback with --debug
EXIT_USAGE = 2  # argparse's own errors, and StreamkError without an exit_code of its own
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of our output went away (`| head`)
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_DISK_FULL = 6  # as DiskFullError


def _one_line(text):
    """``text`` on one line: its lines joined by "; " (a report of a file name escapes the
    name's own newlines already)."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def _silence_stdout():
    """After a broken pipe: point stdout at /dev/null so that the interpreter's final flush
    cannot fail again (what the Python docs advise for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (captured in tests)
        pass


def _add_debug_option(parser, top):
    """``--debug`` on ``parser`` and on every subcommand below it (so that it may come
    anywhere on the line); the subcommands' copies leave the value alone unless given."""
    parser.add_argument("--debug", action="store_true", default=False if top else argparse.SUPPRESS,
                        help="print the traceback of an error (for a bug report)")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _add_debug_option(sub, top=False)


def main(argv=None):
    """Run one command; return its exit status (see :func:`run_command`). argparse's own
    errors exit 2 (it raises SystemExit); ``--debug`` (anywhere on the line) adds the
    traceback of an error."""
    parser = build_parser()
    _add_debug_option(parser, top=True)
    if argv is not None and any("\x00" in str(a) for a in argv):  # (a real command line cannot hold one)
        parser.error("an argument holds a NUL byte")
    args = parser.parse_args(argv)
    with _sigint_raises():
        return run_command(lambda: args.func(args), debug=args.debug)


def run_command(command, debug=False):
    """``command()``'s exit status, every error ending as one line on stderr and a
    documented status: a StreamkError's ``exit_code`` (2 usage, 3 input file, 4 index
    state, 5 damaged index, 6 disk full, 7 cluster), 1 for anything else (a bug; an
    OSError of the environment says so instead), 130 on Ctrl-C, 141 quietly when stdout's
    reader has gone. ``debug``: print the traceback too."""
    try:
        status = command()
        sys.stdout.flush()  # a broken pipe shows here, not in the interpreter's exit
        return status
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("streamk: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        if debug:
            traceback.print_exc()
        print("streamk: terminated", file=sys.stderr)
        return Terminated.exit_code
    except StreamkError as exc:
        if debug:
            traceback.print_exc()
        print(f"streamk: error: {_one_line(exc) or type(exc).__name__}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_USAGE)
    except Exception as exc:  # noqa: BLE001 -- not a named error: a bug (or the environment, for an OSError)
        if debug:
            traceback.print_exc()
        what = _one_line(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, OSError) and exc.errno is not None:
            print(f"streamk: error: {what} (run again with --debug for the traceback)", file=sys.stderr)
            return EXIT_DISK_FULL if exc.errno == errno.ENOSPC else EXIT_INTERNAL
        print(f"streamk: internal error: {what} (this is a bug in streamk: run again with --debug and report "
              f"the traceback)", file=sys.stderr)
        return EXIT_INTERNAL

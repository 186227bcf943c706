"""Command line: ``streamk demo``, ``streamk eval``, ``streamk datasets download``,
``streamk index create``, ``streamk ingest``, ``streamk search``."""

import argparse
import json
import sys

import numpy as np

from .errors import ConfigError, StreamkError


def _demo(args):
    from .demo import run_demo

    run_demo(out_dir=args.out, images=args.images, max_queries=args.max_queries, transforms=args.transforms,
             k=args.k, max_side=args.max_side, max_features=args.max_features, workers=args.workers,
             cache_dir=args.cache, seed=args.seed, show=args.show, progress=not args.no_progress)
    return 0


def _csv(cast=str):
    return lambda text: [cast(x) for x in text.split(",") if x]


def _embedding_spec(name, fv_pca=64):
    """'temb' | 'fv' | 'fv-hard' | 'vlad' | 'bow' -> (embedding, params); the FV's
    descriptors are PCA-reduced to ``fv_pca`` dimensions first (0: not reduced)."""
    if name in ("fv", "fv-hard"):
        return "fv", {"hard": name == "fv-hard", "pca_dim": fv_pca or None}
    return name, {}


def _eval(args):
    from .datasets import load_dataset
    from .config import default_cache_dir
    from .evaluation.experiment import DEFAULT_LEARNING, dataset_descriptors, evaluate_dataset
    from .features import make_extractor

    log = (lambda *a: None) if args.json else print
    dataset = load_dataset(args.dataset, args.root)
    extractor = make_extractor(args.extractor, max_side=args.max_side, max_features=args.max_features)
    cache = None if args.no_cache else (args.cache or default_cache_dir())
    learning = None
    learn_name = args.learn_dataset or DEFAULT_LEARNING.get(dataset.name)
    if args.learn_root or args.learn_dataset:
        if not learn_name:
            raise ConfigError("--learn-root needs --learn-dataset NAME")
        learn_ds = load_dataset(learn_name, args.learn_root)
        learning, _ = dataset_descriptors(learn_ds, extractor, cache, args.workers, not args.json)
        log(f"learning set: {learn_name} ({len(learning)} images), distinct from the database")
    elif dataset.name == "paris6k-subset":
        log("learning set: the 250 database images themselves (unsupervised: k-means, whitening and RN "
            "use no labels; no distinct learning set is available for this subset)")
    else:
        raise ConfigError(f"{dataset.name} needs a distinct learning set: pass --learn-root DIR "
                          f"(and --learn-dataset NAME{', default ' + learn_name if learn_name else ''})")
    if args.method == "asmk":
        return _eval_asmk(args, dataset, learning, extractor, cache, log)
    rn = [{"off": False, "on": True}[v] for v in args.rn]
    aggregation_params = {name: value for name, value in (("gamma", args.gamma), ("lam", args.lam))
                          if value is not None}
    report = {"dataset": dataset.name, "configs": []}
    seeds = list(range(args.seeds))
    dims = args.dim or (None,)
    for embedding_name in args.embedding:
        embedding, params = _embedding_spec(embedding_name, args.fv_pca)
        for k in args.k:
            rows, info = evaluate_dataset(
                dataset, embedding, k, params, args.aggregation, rn, dims, args.power,
                learning=learning, extractor=extractor, cache_dir=cache, workers=args.workers,
                verbose=not args.json, seeds=seeds, pq_bytes=args.pq_bytes or (), rerank=args.rerank,
                **aggregation_params)
            report["configs"].append({"embedding": embedding_name, "k": k, **info, "rows": [
                {"method": label, "map_mean": float(np.mean([r.map for r in runs])),
                 "map_std": float(np.std([r.map for r in runs])), "per_seed": [r.to_dict() for r in runs]}
                for label, runs in rows]})
            log(f"\n{dataset.name}: {info['n_images']} images, {info['n_queries']} queries; "
                f"{info['descriptors_per_image']:.0f} descriptors per image ({extractor.name}); "
                f"fit {info['fit_s']:.1f} s; encoding {info['encode_s_per_image']:.2f} s per image "
                f"(all methods, one Gram)" + (f"; mean of {len(seeds)} seeds" if len(seeds) > 1 else ""))
            for note in _eval_notes(info, rn, dims, args):
                log(f"note: {note}")
            log(f"{'method':<64}{'mAP':>14}")
            for label, runs in rows:
                m = [100 * r.map for r in runs]
                log(f"{label:<64}" + (f"{np.mean(m):8.1f} ± {np.std(m):3.1f}" if len(m) > 1 else f"{m[0]:8.1f}"))
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


def _eval_notes(info, rn, dims, args):
    """What makes a row differ from the paper's protocol, said next to the table."""
    n, dim = info["rn_learning_images"], info["dim"]
    if True in rn and dim is not None and n <= dim:
        yield (f"RN is learned on {n} images for D = {dim}: only {n - 1} principal components exist, the "
               f"components past them are an arbitrary basis of the rest, so D' >= {n - 1} keeps all of the "
               "PCA and rows -> D' are not the paper's (RN learned on a distinct, larger collection)")
    if args.pq_bytes and info["learning"].startswith("database"):
        yield ("PQ codebooks are learned on the database vectors plus 3 vectors of random halves of each "
               "image's descriptors (no distinct learning images): an optimistic estimate of the PQ loss")


def _eval_asmk(args, dataset, learning, extractor, cache, log):
    """``streamk eval --method asmk``: ASMK / ASMK* on the same descriptors."""
    from .evaluation.experiment import evaluate_dataset_asmk

    rows, info = evaluate_dataset_asmk(dataset, n_words=args.asmk_words, multiple_assignment=args.asmk_ma,
                                       learning=learning, extractor=extractor, cache_dir=cache,
                                       workers=args.workers, verbose=not args.json)
    if args.json:
        print(json.dumps({"dataset": dataset.name, "method": "asmk", **info,
                          "rows": [{"method": label, **res.to_dict(), **costs} for label, res, costs in rows]},
                         indent=1))
        return 0
    log(f"\n{dataset.name}: {info['n_images']} images, {info['n_queries']} queries; "
        f"{info['descriptors_per_image']:.0f} descriptors per image ({extractor.name}); codebook "
        f"{info['n_words']} words (fit {info['fit_s']:.1f} s); alpha {info['alpha']:g}, tau {info['tau']:g}; "
        f"aggregation {1000 * info['aggregate_s_per_image']:.0f} ms per database image")
    log(f"{'method':<32}{'mAP':>7}{'bytes/image':>13}{'entries/image':>15}{'query: aggregate ms':>21}"
        f"{'search ms':>11}")
    for label, res, c in rows:
        log(f"{label:<32}{100 * res.map:7.1f}{c['bytes_per_image']:13,.0f}{c['entries_per_image']:15.0f}"
            f"{c['query_aggregate_ms']:21.1f}{c['query_search_ms']:11.2f}")
    return 0


def _download(args):
    from .datasets import download

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


def _positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return v


def _index_create(args):
    import os
    import shutil
    from pathlib import Path

    from .encoding.encoder import Encoder
    from .errors import EmptyDescriptorSetError, IndexExistsError
    from .features import make_extractor
    from .index import StreamingIndex
    from .pipeline import collect_images

    path = Path(args.dir)
    # every check before anything is written
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise IndexExistsError(f"{path} exists and is not an empty directory: refusing to create an index there")
    if args.vector_dtype not in ("float16", "float32"):
        raise ConfigError(f"--vector-dtype must be float16 or float32, got {args.vector_dtype!r}")
    options = {k: v for k, v in (("max_side", args.max_side), ("max_features", args.max_features))
               if v is not None}
    extractor = make_extractor(args.extractor, **options)
    if args.encoder is not None:
        encoder = Encoder.load(args.encoder)
    else:
        from .parallel import make_executor
        from .pipeline import train_encoder

        _one_executor(args)

        paths, bad = collect_images(args.train)
        for p, reason in bad:
            print(f"streamk: skipped {p}: {reason}", file=sys.stderr)
        if not paths:
            raise EmptyDescriptorSetError("--train: no image files found")
        embedding, params = _embedding_spec(args.embedding, args.fv_pca)
        config = {"embedding": embedding, "k": args.k, "embedding_params": params,
                  "aggregation": args.aggregation}
        with make_executor(args.workers, args.dask) as executor:
            encoder, info = train_encoder(
                paths, config, extractor, executor, max_images=args.train_images,
                descriptors_per_image=args.train_descriptors, seed=args.seed, cache_dir=_cache_dir(args),
                report=lambda p, reason: print(f"streamk: skipped {p}: {reason}", file=sys.stderr),
                progress=sys.stderr.isatty())
        print(f"trained {args.embedding} k={args.k} ({args.aggregation}) on {info.descriptors} descriptors "
              f"of {info.images} images (a sample of {len(paths)}; {executor.name})")
        if args.save_encoder:
            encoder.save(args.save_encoder)
    existed = path.exists()
    try:
        if args.shards is not None:
            from .index import ShardedIndex
            from .parallel import make_executor

            with (make_executor(dask=args.dask) if args.dask else _NoExecutor()) as executor:
                ShardedIndex.create(path, encoder, args.shards, vector_dtype=args.vector_dtype,
                                    extractor=extractor, dask=getattr(executor, "client", None),
                                    store_extras=not args.no_extras).close()
            print(f"created index {path} in {args.shards} shards: {encoder.config.embedding} "
                  f"k={encoder.config.k} ({encoder.config.aggregation}), dim {encoder.dim}, "
                  f"{args.vector_dtype} vectors, extractor {extractor.name}")
            return 0
        idx = StreamingIndex.create(path, encoder, vector_dtype=args.vector_dtype, extractor=extractor,
                                    store_extras=not args.no_extras)
    except BaseException:
        if not existed and path.is_dir():  # ours: leave nothing behind
            shutil.rmtree(path, ignore_errors=True)
        elif existed:
            for child in path.iterdir():
                shutil.rmtree(child) if child.is_dir() else os.unlink(child)
        raise
    with idx:
        print(f"created index {path}: {encoder.config.embedding} k={encoder.config.k} "
              f"({encoder.config.aggregation}), dim {encoder.dim}, {args.vector_dtype} vectors, "
              f"extractor {extractor.name}")
    return 0


def _index_train(args):
    import time

    from .quantization.ivfpq import IVFPQ, default_train_size

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
    return 0


def _index_upgrade(args):
    from .index import upgrade

    n = upgrade(args.dir, progress=None if sys.stderr.isatty() else False)
    print(f"upgraded {args.dir} to index format 2 ({n:,} images)")
    return 0


def _cache_dir(args):
    """--cache DIR; by default the shared feature cache when it exists; --no-cache: none."""
    import os

    from .config import default_cache_dir

    if args.no_cache:
        return None
    if args.cache is not None:
        return args.cache
    return default_cache_dir() if os.path.isdir(default_cache_dir()) else None


def _one_executor(args):
    if args.dask is not None and args.workers is not None:
        raise ConfigError("--workers is for the local pool, --dask for a cluster: give one of them")


class _NoExecutor:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def _open(args, readonly, executor=None):
    """The index at args.dir: a StreamingIndex, or a ShardedIndex (its shards' owners on
    the Dask cluster of ``executor``, or of --dask, when given)."""
    from .index import ShardedIndex, is_sharded, open_index

    if executor is not None:  # ingestion: the cluster runs the tasks, and owns the shards if any
        if is_sharded(args.dir):
            return ShardedIndex.open(args.dir, readonly=readonly, dask=executor.client)
        return open_index(args.dir, readonly=readonly)
    return open_index(args.dir, readonly=readonly, dask=getattr(args, "dask", None))


def _ingest(args):
    from .parallel import make_executor
    from .pipeline import Ingester

    _one_executor(args)

    # one Dask client for the tasks and, for a sharded index, the shards' owners
    with (make_executor(dask=args.dask) if args.dask else _NoExecutor()) as executor, \
            _open(args, readonly=False, executor=executor if args.dask else None) as idx, Ingester(
            idx, workers=args.workers, batch_size=args.batch_size, cache_dir=_cache_dir(args),
            executor=executor if args.dask else None,
            progress=None if not args.no_progress else False) as ing:
        try:
            if args.watch:
                def on_poll(n, stats):
                    if n == 1:
                        print(f"watching {len(args.images)} path(s) every {args.interval:g} s "
                              f"(Ctrl-C to stop)", flush=True)
                    print(f"poll {n}: {stats.summary()}", flush=True)
                stats = ing.watch(args.images, interval=args.interval, max_polls=args.max_polls,
                                  on_poll=on_poll)
            else:
                stats = ing.ingest(args.images)
        except KeyboardInterrupt:
            ing._flush()
            stats = ing.stats
        print(stats.summary(), flush=True)
        return 1 if stats.n_failed else 0


def _search(args):
    box = None if args.box is None else tuple(args.box)
    with _open(args, readonly=True) as idx:
        hits = idx.search(args.image, k=args.k, mode=args.mode, box=box, rerank=args.rerank, nprobe=args.nprobe)
    if args.json:
        print(json.dumps([{"rank": r, "score": s, "id": i} for r, (i, s) in enumerate(hits, 1)], indent=1))
    else:
        print(f"{'rank':>4}  {'score':>8}  id")
        for r, (i, s) in enumerate(hits, 1):
            print(f"{r:>4}  {s:8.4f}  {i}")
    return 0


def _add_cache_options(parser):
    parser.add_argument("--cache", default=None, metavar="DIR",
                        help="feature cache folder, read and filled by the workers (default: "
                             "~/.cache/streamk/features when it exists)")
    parser.add_argument("--no-cache", action="store_true", help="no feature cache")


def _add_index_commands(sub):
    from .pipeline import DEFAULT_DESCRIPTORS_PER_IMAGE, DEFAULT_MAX_IMAGES

    ix = sub.add_parser("index", help="create a streaming index, train its product quantiser")
    ix_sub = ix.add_subparsers(dest="index_command", required=True)
    cr = ix_sub.add_parser("create", help="create an empty index with a saved or newly trained encoder")
    cr.add_argument("dir", help="index directory (new or empty)")
    src = cr.add_mutually_exclusive_group(required=True)
    src.add_argument("--encoder", help="a saved encoder (.npz, Encoder.save)")
    src.add_argument("--train", nargs="+", metavar="IMAGES", help="fit a new encoder on these image files/folders")
    cr.add_argument("--vector-dtype", default="float16", choices=["float16", "float32"])
    cr.add_argument("--no-extras", action="store_true",
                    help="do not keep keypoints and weights for display (~50 KB per photo): for millions")
    cr.add_argument("--shards", type=_positive_int, default=None,
                    help="spread the index over S shards (S LMDB folders; with --dask, on the workers' disks)")
    cr.add_argument("--extractor", default=None, help="hesaff (default) or sift (OpenCV)")
    cr.add_argument("--max-side", type=_positive_int, default=None, help="extractor: downscale to this long side")
    cr.add_argument("--max-features", type=_positive_int, default=None, help="extractor: keep the strongest N")
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
    cr.set_defaults(func=_index_create)
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
    up = ix_sub.add_parser("upgrade", help="convert an index of format 1 (streamk <= 0.1) to format 2, in place")
    up.add_argument("dir", help="index directory")
    up.set_defaults(func=_index_upgrade)

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
    se.add_argument("--json", action="store_true", help="print JSON instead of a table")
    se.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="a sharded index: search its shards through their owners on this Dask cluster")
    se.set_defaults(func=_search)


def build_parser():
    from .demo.transforms import TRANSFORMS

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
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except StreamkError as exc:
        print(f"streamk: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

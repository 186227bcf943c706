"""``streamk demo``, ``streamk eval`` and ``streamk datasets download``: the paper's
experiments on real photographs and on the benchmarks."""

import json

from ..schema import with_schema_version
from .defaults import AGGREGATIONS, DEMO_TRANSFORMS, DOWNLOADABLE_DATASETS, EVAL_EMBEDDINGS
from .options import add_vocab_size_option, csv, max_side, non_negative_int, positive_int, unit_float


def _demo(args):
    from ..demo import run_demo
    from ..pipeline import KernelWarmUp

    with KernelWarmUp():  # the first search after the demo finds the second stage compiled
        run_demo(out_dir=args.out, images=args.images, max_queries=args.max_queries, transforms=args.transforms,
                 k=args.vocab_size, max_side=args.max_side, max_features=args.max_features, workers=args.workers,
                 cache_dir=args.cache, seed=args.seed, show=args.show, scenes=args.scenes,
                 progress=not args.no_progress)
    return 0


def _eval(args):
    from ..evaluation import run_eval

    report = run_eval(
        args.dataset, args.root, method=args.method, embeddings=args.embedding, ks=args.vocab_size,
        aggregations=args.aggregation, rn=[{"off": False, "on": True}[v] for v in args.rn], dims=args.dim,
        power=args.power, seeds=args.seeds, pq_bytes=args.pq_bytes, rerank=args.rerank, fv_pca=args.fv_pca,
        gamma=args.gamma, lam=args.lam, learn_dataset=args.learn_dataset, learn_root=args.learn_root,
        extractor=args.extractor, max_side=args.max_side or None, max_features=args.max_features or None,
        cache=args.cache,
        no_cache=args.no_cache, workers=args.workers, asmk_words=args.asmk_words, asmk_ma=args.asmk_ma,
        verify=args.verify, expand=args.expand,
        log=(lambda *a: None) if args.json else print, progress=not args.json)
    if args.json:
        print(json.dumps(with_schema_version(report), indent=1))
    return 0


def _download(args):
    from ..datasets import download

    path = download(args.name, args.dir, progress=True, base_url=args.mirror)
    print(f"{args.name}: ready in {path}")
    return 0


def add_experiment_commands(sub):
    _add_demo_command(sub)
    _add_eval_command(sub)
    ds = sub.add_parser("datasets", help="benchmark datasets")
    ds_sub = ds.add_subparsers(dest="datasets_command", required=True)
    dl = ds_sub.add_parser("download", help="fetch and extract a benchmark's official archives")
    dl.add_argument("name", choices=DOWNLOADABLE_DATASETS, metavar="NAME",
                    help=f"one of {', '.join(DOWNLOADABLE_DATASETS)}")
    dl.add_argument("--dir", required=True, metavar="DIR",
                    help="where it goes: images in DIR/jpg, ground truth beside them; the --root of streamk eval")
    dl.add_argument("--mirror", default=None, help="base URL of a mirror holding the same file names")
    dl.set_defaults(func=_download)


def _add_demo_command(sub):
    demo = sub.add_parser("demo", help="index real photographs, search views of them under real-world "
                                       "changes with sum / democratic / GMP; print mAP, write an HTML page")
    demo.add_argument("--images", default=None, metavar="DIR",
                      help="your own folder of images (default: scikit-image's bundled photographs); a query's "
                           "positive is its source image, its copies in the folder are not counted")
    demo.add_argument("--out", default="streamk-demo", metavar="DIR",
                      help="output folder: query images, indexes, index.html (default: ./streamk-demo)")
    demo.add_argument("--max-queries", type=positive_int, default=20,
                      help="images to make query views of (a deterministic sample)")
    demo.add_argument("--transforms", type=csv(), default=list(DEMO_TRANSFORMS),
                      help=f"changes to make the queries with (comma list of {','.join(DEMO_TRANSFORMS)})")
    add_vocab_size_option(demo, type=positive_int, default=16, help="T-emb vocabulary size")
    demo.add_argument("--max-side", type=positive_int, default=640, help="extractor: downscale to this long side")
    demo.add_argument("--max-features", type=positive_int, default=1000, help="extractor: keep the strongest N")
    demo.add_argument("--workers", type=positive_int, default=None, help="extraction processes (default: all cores)")
    demo.add_argument("--cache", default=None, help="feature cache directory (default ~/.cache/streamk/features)")
    demo.add_argument("--show", type=positive_int, default=5, help="results per method on the page")
    demo.add_argument("--scenes", type=non_negative_int, default=12,
                      help="bursty scenes beside the built-in photos (objects on repeated walls; 0: none)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the query sample and the changes")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.set_defaults(func=_demo)


def _add_eval_command(sub):
    ev = sub.add_parser("eval", help="mAP of aggregation methods on a benchmark, laid out like the paper's table")
    ev.add_argument("--dataset", required=True, help="paris6k-subset, oxford5k, paris6k, holidays, roxford5k, ...")
    ev.add_argument("--method", choices=["single", "asmk"], default="single",
                    help="single: the paper's one vector per image (default); asmk: ASMK and ASMK* "
                         "(Tolias et al. 2013) on the same descriptors, with memory and query time")
    ev.add_argument("--asmk-words", type=positive_int, default=None,
                    help="with --method asmk: codebook size (default: the paper's 65k words scaled to the "
                         "learning descriptors, ~250 per word)")
    ev.add_argument("--asmk-ma", type=positive_int, default=5,
                    help="with --method asmk: also rows with each query descriptor on its N nearest words "
                         "(the paper's multiple assignment; 1: none)")
    ev.add_argument("--root", help="dataset directory (images in ROOT/jpg); default for paris6k-subset: "
                                   "../shared/data or $STREAMK_SHARED_DATA")
    ev.add_argument("--embedding", type=csv(choices=EVAL_EMBEDDINGS), default=["temb"],
                    help=f"{', '.join(EVAL_EMBEDDINGS)} (comma list; default temb)")
    ev.add_argument("--fv-pca", type=int, default=64, metavar="P",
                    help="fv / fv-hard: PCA of the descriptors to P dimensions before the GMM (0: none)")
    add_vocab_size_option(ev, type=csv(positive_int), default=[64], metavar="K[,K...]",
                          help="vocabulary sizes (comma list; default 64)")
    ev.add_argument("--aggregation", type=csv(choices=AGGREGATIONS), default=list(AGGREGATIONS),
                    help=f"{', '.join(AGGREGATIONS)} (comma list; default all three)")
    ev.add_argument("--rn", type=csv(choices=("off", "on")), default=["off", "on"],
                    help="rows without and / or with RN: off, on (comma list; default off,on)")
    ev.add_argument("--dim", type=csv(positive_int), default=None,
                    help="D' after RN (comma list; needs --rn on)")
    ev.add_argument("--seeds", type=positive_int, default=1,
                    help="re-run every learning stage (k-means / GMM, RN, PQ) with seeds 0..N-1 and print "
                         "mAP as mean ± std, as the paper averages three vocabularies (default 1)")
    ev.add_argument("--pq-bytes", type=csv(positive_int), default=None,
                    help="also rows of PQ codes of these sizes (e.g. 16,32,64; ADC) for each --dim vector "
                         "(or the full vectors)")
    ev.add_argument("--rerank", type=non_negative_int, default=50,
                    help="with --pq-bytes: rows with the ADC top R re-ranked by the float vectors (0: none)")
    ev.add_argument("--verify", type=non_negative_int, default=100, metavar="R",
                    help="second-stage rows (+QE, +SP, +SP+QE) beside each method: the first R results spatially "
                         "verified (default 100; 0: none)")
    ev.add_argument("--expand", type=non_negative_int, default=50, metavar="N",
                    help="with --verify: query expansion over at most N verified images (default 50)")
    ev.add_argument("--power", type=unit_float, default=0.5,
                    help="power-law exponent on the aggregated vectors, in (0, 1] (default 0.5, the paper's)")
    ev.add_argument("--gamma", type=float, default=None,
                    help="democratic aggregation's damping exponent, in (0, 1] (default 0.5, the paper's)")
    ev.add_argument("--lam", type=float, default=None,
                    help="generalised max pooling's ridge regulariser lambda, > 0 (default 1.0)")
    ev.add_argument("--learn-dataset", help="distinct learning collection (default: Paris6k for Oxford, "
                                            "Oxford5k for Paris)")
    ev.add_argument("--learn-root", help="directory of the learning collection")
    ev.add_argument("--extractor", default=None, help="hesaff (default) or sift (OpenCV)")
    ev.add_argument("--max-side", type=max_side, default=0, metavar="PX",
                    help="extractor: downscale to this long side (default 0: the benchmark's images as they are)")
    ev.add_argument("--max-features", type=non_negative_int, default=0, metavar="N",
                    help="extractor: keep the strongest N (default 0: every feature)")
    ev.add_argument("--cache", help="feature cache directory (default ~/.cache/streamk/features)")
    ev.add_argument("--no-cache", action="store_true", help="extract without the feature cache")
    ev.add_argument("--workers", type=positive_int, default=None, help="extraction processes (default: all cores)")
    ev.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    ev.set_defaults(func=_eval)

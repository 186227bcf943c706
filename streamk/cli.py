"""Command line: ``streamk demo``, ``streamk eval``, ``streamk datasets download``."""

import argparse
import json
import sys

from .errors import ConfigError, StreamkError


def _demo(args):
    from .demo import run_demo

    run_demo(seed=args.seed)
    return 0


def _csv(cast=str):
    return lambda text: [cast(x) for x in text.split(",") if x]


def _embedding_spec(name):
    """'temb' | 'fv' | 'fv-hard' | 'vlad' | 'bow' -> (embedding, params)."""
    return ("fv", {"hard": True}) if name == "fv-hard" else (name, {})


def _eval(args):
    from .datasets import load_dataset
    from .experiment import DEFAULT_LEARNING, dataset_descriptors, default_cache_dir, evaluate_dataset
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
    rn = [{"off": False, "on": True}[v] for v in args.rn]
    aggregation_params = {name: value for name, value in (("gamma", args.gamma), ("lam", args.lam))
                          if value is not None}
    report = {"dataset": dataset.name, "configs": []}
    for embedding_name in args.embedding:
        embedding, params = _embedding_spec(embedding_name)
        for k in args.k:
            rows, info = evaluate_dataset(
                dataset, embedding, k, params, args.aggregation, rn, args.dim or (None,), args.power,
                learning=learning, extractor=extractor, cache_dir=cache, workers=args.workers,
                verbose=not args.json, **aggregation_params)
            report["configs"].append({"embedding": embedding_name, "k": k, **info,
                                      "rows": [{"method": label, **res.to_dict()} for label, res in rows]})
            log(f"\n{dataset.name}: {info['n_images']} images, {info['n_queries']} queries; "
                f"{info['descriptors_per_image']:.0f} descriptors per image ({extractor.name}); "
                f"fit {info['fit_s']:.1f} s; encoding {info['encode_s_per_image']:.2f} s per image "
                f"(all methods, one Gram)")
            log(f"{'method':<40}{'mAP':>8}")
            for label, res in rows:
                log(f"{label:<40}{100 * res.map:8.1f}")
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


def _download(args):
    from .datasets import download

    path = download(args.name, args.dir, progress=True, base_url=args.mirror)
    print(f"{args.name}: ready in {path}")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="streamk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="encode and search a synthetic collection; print mAP per method")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)

    ev = sub.add_parser("eval", help="mAP of aggregation methods on a benchmark, laid out like the paper's table")
    ev.add_argument("--dataset", required=True, help="paris6k-subset, oxford5k, paris6k, holidays, roxford5k, ...")
    ev.add_argument("--root", help="dataset directory (images in ROOT/jpg); default for paris6k-subset: "
                                   "../shared/data or $STREAMK_SHARED_DATA")
    ev.add_argument("--embedding", type=_csv(), default=["temb"], help="temb, fv, fv-hard, vlad, bow (comma list)")
    ev.add_argument("--k", type=_csv(int), default=[64], help="vocabulary sizes (comma list)")
    ev.add_argument("--aggregation", type=_csv(), default=["sum", "democratic", "gmp"])
    ev.add_argument("--rn", type=_csv(), default=["off", "on"], help="off,on")
    ev.add_argument("--dim", type=_csv(int), default=None, help="D' after RN (comma list)")
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

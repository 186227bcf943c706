"""``streamk search`` and ``streamk duplicates``: what an index holds that looks like a
query image, or like its own images."""

import json
import os
import sys

from ..schema import JSON_SCHEMA_VERSION, SCHEMA_VERSION_KEY, with_schema_version
from .defaults import DEFAULT_DUPLICATE_THRESHOLD, SEARCH_EXPANSION, SEARCH_EXPANSIONS, SEARCH_MODES
from .index_commands import open_from_args, stale_note
from .options import add_limit_options, non_negative_int, positive_float, positive_int, unit_float


SEARCH_DESCRIPTION = (
    "The k best images of the index for each query: query photos (several in one process: each is searched as it "
    "comes, the index opened once), indexed images (--id), or both; photos first. Output: a table per query (named "
    "when there are several), or with --json the results of one query as a JSON array (one result per line) and "
    "of several queries JSON lines (one object per query, as --jsonl). A query that fails on its own (an unreadable "
    "photo, an unknown id) is reported on stderr and the others go on; the exit status is then that error's. "
    "--server URL sends the queries to a running 'streamk serve' instead (then no index directory is given).")


def print_json_rows(rows):
    """``rows`` as one JSON array with one row per line (not one coordinate per line, as
    an indented dump gives): readable, greppable, and still one JSON document."""
    print("[" + ",".join(f"\n{json.dumps(row)}" for row in rows) + ("\n]" if rows else "]"))


def _search(args):
    """One or more queries (photos, then indexed images by --id), searched in this process
    on the index opened once, or sent to a running server (--server); each query's results
    printed as it is answered. A query that fails on its own (an unreadable photo, an
    unknown id) is reported on stderr and the others go on; the status is then the first
    such error's."""
    _check_queries(args)
    if args.server is not None:
        from .remote import RemoteSearch, read_token

        remote = RemoteSearch(args.server, read_token(args.token_file), timeout=args.timeout,
                              max_file_size=args.max_file_size)
        options = {"k": args.k, "verify": args.verify, "expand": args.expand, "mode": args.mode,
                   "box": args.box, "where": _where_object(args.where),
                   "false_alarms_per_pair": args.false_alarms_per_pair}
        return _answer_each(args, lambda kind, q: (remote.search_image(q, options) if kind == "image"
                                                   else remote.search_id(q, options)))
    from ..index import SearchParams

    # checked once, here, before the index is opened; the index takes it whole
    params = SearchParams(k=args.k, mode=args.mode, nprobe=args.nprobe, rerank=args.rerank, verify=args.verify,
                          expand=args.expand, expansion=args.expansion, pairs=args.pairs, where=args.where,
                          box=None if args.box is None else tuple(args.box),
                          false_alarms_per_pair=args.false_alarms_per_pair)
    with open_from_args(args, readonly=True) as idx:
        if len(idx) == 0:  # a header and nothing under it says nothing
            print(f"streamk: note: {args.dir} holds no images yet: `streamk ingest {args.dir} PHOTOS` adds them",
                  file=sys.stderr, flush=True)
        if args.images:  # (queries by --id alone need no extractor: its library is not even imported)
            idx.extractor().set_limits(max_file_size=args.max_file_size, max_pixels=args.max_pixels)
        with _stale_codec_noted(args.dir), _no_codec_said(args.dir):
            return _answer_each(args, lambda kind, q: _local_answer(idx, kind, q, params))


class _no_codec_said:
    """While inside: a PQ search's NotFittedError for want of a codec names the command
    that trains one (the library's message names its Python method)."""

    def __init__(self, where):
        self.where = where

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is not None and getattr(exc, "needs", None) == "codec":
            import shlex

            from ..errors import NotFittedError

            raise NotFittedError(f"--mode pq needs a trained codec, and {self.where} has none: train one with "
                                 f"`streamk index train {shlex.quote(str(self.where))}` (256 images at least), or "
                                 f"leave --mode out (exact)") from exc
        return False


def _check_queries(args):
    """Usage errors of the query arguments (before anything is opened or sent)."""
    from ..errors import ConfigError

    if args.server is not None:  # no index here: every positional argument is a query photo
        if args.dir is not None and os.path.isdir(args.dir):
            raise ConfigError(f"with --server, leave out the index directory ({args.dir}): the server has its "
                              f"index open; give only query photos (or --id)")
        args.images = ([args.dir] if args.dir is not None else []) + args.images
        for option, given in (("--nprobe", args.nprobe is not None), ("--rerank", args.rerank is not None),
                              ("--expansion", args.expansion != SEARCH_EXPANSION), ("--pairs", args.pairs),
                              ("--dask", args.dask is not None)):
            if given:
                raise ConfigError(f"{option} is not an option of the server's search API: leave it out with "
                                  f"--server, or search the index here")
    elif args.dir is None:
        args.parser.error("the following arguments are required: dir")
    if not args.images and not args.ids:
        args.parser.error("give a query: one or more image files, or --id ID")
    if args.box is not None and args.ids:
        raise ConfigError("--box selects a region of a query photo: it does not apply to --id")
    if args.images.count(STDIN) > 1:
        raise ConfigError("'-' (the image on standard input) can be given once: standard input is read once")


STDIN = "-"  # the query image's bytes on standard input (`curl ... | streamk search my-index -`)


def read_stdin_image(max_file_size):
    """The bytes of the query image piped to standard input, read once and bounded by
    ``max_file_size``; ImageReadError when nothing was piped."""
    from ..errors import ImageReadError, ImageTooLargeError

    if sys.stdin is None or sys.stdin.isatty():
        raise ImageReadError(STDIN, "'-' reads the query image from standard input, and none was piped: "
                                    "`streamk search INDEX - < photo.jpg`")
    data = sys.stdin.buffer.read(max_file_size + 1)
    if len(data) > max_file_size:
        raise ImageTooLargeError(STDIN, f"over the limit of {max_file_size:,} bytes (--max-file-size)",
                                 limit="max_file_size")
    if not data:
        raise ImageReadError(STDIN, "standard input held no bytes")
    return data


def _where_object(text):
    if text is None:
        return None
    from ..errors import FilterError

    try:
        where = json.loads(text)
    except ValueError as exc:
        raise FilterError(f"--where is not valid JSON ({exc})") from None
    if not isinstance(where, dict):
        raise FilterError("--where must be a JSON object of fields, e.g. '{\"folder\": \"paris\"}'")
    return where


def _local_answer(idx, kind, query, params):
    """``{"query", "results"}`` of one query searched in ``idx``: a photo, or an indexed
    image (its stored vector, verified with its stored local geometry, as the server does)."""
    if kind == "image":
        hits = idx.search(read_stdin_image(idx.extractor().max_file_size) if query == STDIN else query,
                          params=params)
        about = {"kind": "image", "path": str(query)} | ({} if params.box is None else {"box": list(params.box)})
    else:
        vector = idx.vector(query)
        record = idx.geometry(query) if params.verify != 0 else None
        hits = idx.search(vector, params=params, record=record)
        about = {"kind": "id", "id": query}
    if not hits and params.where and len(idx):
        print(f"streamk: note: {empty_filter_note(idx, params.where)}", file=sys.stderr, flush=True)
    return {"query": about, "results": [h.to_dict(pairs=params.pairs) for h in hits]}


FILTER_NOTE_VALUES = 5  # values shown of each field of a filter that selected nothing


def empty_filter_note(idx, where):
    """What to say when a filter selected no image: a few of the values each of its
    fields holds (one seek each), so that a near miss (a relative folder, another case)
    shows; ingestion's folder and path fields are absolute paths."""
    from ..index import parse_filter

    fields = list(dict.fromkeys(c.field for c in parse_filter(where)))  # where: a dict or its JSON text
    parts = []
    for field in fields:
        values, more = idx.field_values(field, limit=FILTER_NOTE_VALUES)
        shown = ", ".join(_value_text(v) for v in values) + (", ..." if more else "")
        parts.append(f"{field!r} holds {shown}" if values else f"no image has a value of {field!r}")
    note = "no image matches the filter; " + "; ".join(parts)
    if {"folder", "path"} & set(fields):
        note += " (ingestion stores folders and paths as absolute paths)"
    return note


def _value_text(v):
    """A field's value as a filter writes it (JSON; a whole float as an int)."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
        v = int(v)
    return json.dumps(v, ensure_ascii=False)


def _answer_each(args, answer):
    """Each query's ``answer(kind, query)`` printed (:func:`print_answer`); the exit status."""
    queries = [("image", q) for q in args.images] + [("id", q) for q in args.ids]
    output = "jsonl" if args.jsonl or (args.json and len(queries) > 1) else "json" if args.json else "table"
    status, printed = 0, 0
    for kind, query in queries:
        try:
            got = answer(kind, query)
        except Exception as exc:  # noqa: BLE001 -- one query's own error: reported, the batch goes on
            from .remote import QUERY_ERRORS  # (here: its urllib is of no use to a local search)

            if not (isinstance(exc, QUERY_ERRORS) or getattr(exc, "per_query", False)) or len(queries) == 1:
                raise
            from ..errors import printable

            print(f"streamk: error: {' '.join(printable(exc).split())}", file=sys.stderr, flush=True)
            status = status or getattr(exc, "exit_code", 1)
            if output == "jsonl":
                from .remote import error_code

                code = getattr(exc, "code", None) or error_code(type(exc).__name__)
                print(json.dumps(with_schema_version(
                    {"query": {"kind": kind, "path" if kind == "image" else "id": _shown(query)},
                     "error": {"code": code, "message": str(exc)}})), flush=True)
            continue
        print_answer(got, output, first=not printed, named=len(queries) > 1)
        printed += 1
    return status


def _shown(query):
    return os.fsdecode(query) if isinstance(query, bytes) else str(query)


def print_answer(got, output, first=True, named=False):
    """One query's answer: a JSON array of its results, one per line (``json``); one JSON
    object per query on one line (``jsonl``: ``{"query", "results"}``); or a table, under
    the query's name when ``named``."""
    rows = [{"rank": r, **hit} for r, hit in enumerate(got["results"], 1)]
    if output == "json":  # an array stays an array: each result carries the schema's version
        print_json_rows([{**row, SCHEMA_VERSION_KEY: JSON_SCHEMA_VERSION} for row in rows])
        return
    if output == "jsonl":
        print(json.dumps(with_schema_version({"query": got["query"], "results": rows})), flush=True)
        return
    if named:
        from ..errors import printable

        q = got["query"]
        name = f"query {printable(q['path'])}" if q["kind"] == "image" else f"query id {printable(q['id'])}"
        print(("" if first else "\n") + name)
    from ..verification import NFA_MEANING, log10_nfa_text

    whys = list(dict.fromkeys(hit["why"] for hit in rows if hit.get("why")))
    width = max([len("not verified")] + [len(w) for w in whys])
    why_column = f"  {'not verified':<{width}}" if whys else ""
    nfas = [log10_nfa_text(hit.get("log10_nfa")) for hit in rows]
    nfa_width = max([len("log10 NFA")] + [len(t) for t in nfas]) if any(nfas) else 0
    nfa_column = f"  {'log10 NFA':>{nfa_width}}" if nfa_width else ""
    if not rows:
        print("(no results)")
        sys.stdout.flush()
        return
    print(f"{'rank':>4}  {'score':>8}  {'inliers':>7}{nfa_column}{why_column}  id")
    for hit, nfa in zip(rows, nfas):
        inliers = "" if hit.get("inliers") is None else f"{hit['inliers']}{'*' if hit.get('verified') else ''}"
        nfa = f"  {nfa:>{nfa_width}}" if nfa_width else ""
        why = f"  {hit.get('why') or '':<{width}}" if whys else ""
        print(f"{hit['rank']:>4}  {hit['score']:8.4f}  {inliers:>7}{nfa}{why}  {hit['id']}")
    if any(hit.get("inliers") is not None for hit in rows):
        print("(* verified: its local features agree with the query's under one affine map)")
    if nfa_width:
        print(f"({NFA_MEANING})")
    if whys:
        from ..verification import WHY_NOT_VERIFIED

        print("(not verified, the first check it failed: "
              + "; ".join(f"{w}: {WHY_NOT_VERIFIED.get(w, w)}" for w in whys) + ")")
    sys.stdout.flush()


class _stale_codec_noted:
    """While inside: a StaleCodecWarning becomes one ``streamk: note:`` line on stderr
    (naming the index as typed), an IgnoredSearchParameterWarning one such line too (once);
    other warnings are shown as usual."""

    def __init__(self, where):
        self.where = where

    def __enter__(self):
        import warnings

        from ..errors import IgnoredSearchParameterWarning, StaleCodecWarning

        self._catch = warnings.catch_warnings(record=True)
        self._caught = self._catch.__enter__()
        for category in (StaleCodecWarning, IgnoredSearchParameterWarning):  # the others keep their filters
            warnings.simplefilter("always", category)
        return self

    def __exit__(self, *exc):
        import warnings

        from ..errors import IgnoredSearchParameterWarning, StaleCodecWarning

        self._catch.__exit__(*exc)
        stale, ignored = None, []
        for w in self._caught:
            if issubclass(w.category, StaleCodecWarning):
                stale = getattr(w.message, "staleness", None)
            elif issubclass(w.category, IgnoredSearchParameterWarning):
                ignored += [str(w.message)] if str(w.message) not in ignored else []
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        for note in [stale_note(stale, self.where), *ignored]:
            if note:
                print(f"streamk: note: {note}", file=sys.stderr, flush=True)


def _vector_only_note(idx, args):
    """Why these groups are by the vector alone, and what gives the copy classes instead."""
    from ..index import vector_only_note

    return "groups " + vector_only_note(idx, args.dir, "--threshold or --dask")


def _duplicates(args):
    """On an index with local geometry (the default since 0.3): every verified pair classed
    exact / copy / same scene, groups of copies only (--classes and --verify say the same).
    Without it, or asked with --threshold / --dask: groups by vector similarity, with a note
    on stderr (a field in the JSON) that they may hold other photos of the same scene."""
    from ..errors import ConfigError

    by_vector = args.threshold is not None or args.dask is not None
    if by_vector and (args.classes or args.verify):
        raise ConfigError("--classes and --verify class every verified pair themselves: give them without "
                          "--threshold or --dask (those ask for groups by vector similarity only)")
    if by_vector and (args.rotations or args.mirrored):
        raise ConfigError("--rotations and --mirrored find turned or mirrored copies for the copy classes: "
                          "give them without --threshold or --dask")
    with open_from_args(args, readonly=True) as idx:
        local = idx.vocabulary is not None  # local geometry, on one index or on shards
        if not by_vector and local:
            return _copy_classes(args, idx)
        if args.classes or args.verify or args.rotations or args.mirrored:
            raise ConfigError("--classes, --verify, --rotations and --mirrored need the second stage: this index "
                              "keeps no local geometry (give it some with `streamk index add-local-features`)")
        note = _vector_only_note(idx, args)
        threshold = DEFAULT_DUPLICATE_THRESHOLD if args.threshold is None else args.threshold
        if args.id is not None:
            hits = idx.duplicates(args.id, threshold=threshold)
            _print_near_duplicates_of(args, hits, f"threshold {threshold:g}", note)
            return 0
        groups = idx.duplicates(threshold=threshold, neighbours=args.neighbours,
                                progress=None if not args.no_progress else False)
    if args.json:
        print(json.dumps(_vector_answer(threshold, note, groups=groups), indent=1))
        return 0
    print(f"streamk: note: {note}", file=sys.stderr, flush=True)
    for n, g in enumerate(groups, 1):
        print(f"group {n} ({len(g['ids'])} images): {' '.join(g['ids'])}")
    print(f"{len(groups)} group(s) of near-duplicates, {sum(len(g['ids']) for g in groups)} images "
          f"(threshold {threshold:g}, by vector similarity only)")
    return 0


def _vector_answer(threshold, note, **rest):
    return {"schema_version": JSON_SCHEMA_VERSION, "rule": "vector", "threshold": threshold, "note": note, **rest}


def _pair_line(p, other):
    agree = "-" if p["agreement"] is None else f"{p['agreement']:.2f}"
    turn = (f"  turned {90 * p['turns']} deg" if p.get("turns") else "") + ("  mirrored" if p.get("mirrored") else "")
    return (f"{p['class']:>10}  {other}  score {p['score']:.3f}  inliers {p['inliers']}  covered "
            f"{100 * p['covered']:.0f} %  pixels {agree}{turn}  ({p['reason']})")


def _copy_classes(args, idx):
    from ..index import copies_of, copy_report
    from ..schema import JSON_SCHEMA_VERSION

    if args.id is not None:
        pairs = [p.to_dict() for p in copies_of(idx, args.id, neighbours=args.neighbours, rotations=args.rotations,
                                                  mirrored=args.mirrored)]
        if args.json:
            print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "rule": "classes", "id": args.id, "pairs": pairs},
                             indent=1))
        elif not pairs:
            print(f"no duplicates of {args.id}: none of its {args.neighbours} nearest images is verified "
                  f"as the same scene")
        else:
            for p in pairs:
                print(_pair_line(p, p["b"]))
        return 0
    report = copy_report(idx, neighbours=args.neighbours, rotations=args.rotations, mirrored=args.mirrored,
                         progress=None if not args.no_progress else False)
    if args.json:
        print(json.dumps({"schema_version": report.pop("schema_version"), "rule": "classes", **report}, indent=1))
        return 0
    for n, g in enumerate(report["groups"], 1):
        print(f"group {n} ({len(g['ids'])} images, copies of one capture: keep one): {' '.join(g['ids'])}")
        for p in g["pairs"]:
            print("  " + _pair_line(p, f"{p['a']} ~ {p['b']}"))
    same = [p for p in report["pairs"] if p["class"] == "same scene"]
    print(f"{len(report['groups'])} group(s) of copies, {sum(len(g['ids']) for g in report['groups'])} images; "
          f"{len(same)} pair(s) of other photos of the same scene (not copies: keep both)")
    return 0


def _print_near_duplicates_of(args, hits, how, note):
    if args.json:
        print(json.dumps(_vector_answer(args.threshold if args.threshold is not None else DEFAULT_DUPLICATE_THRESHOLD,
                                        note, id=args.id, duplicates=[h.to_dict(pairs=False) for h in hits]),
                         indent=1))
        return
    print(f"streamk: note: {note}", file=sys.stderr, flush=True)
    if not hits:
        print(f"no near-duplicates of {args.id} ({how})")
    else:
        for h in hits:
            print(f"{h.score:8.4f}  {h.id}")


def add_search_commands(sub):
    se = sub.add_parser("search", help="the k best images of an index for query images, or for indexed images",
                        description=SEARCH_DESCRIPTION)
    se.add_argument("dir", nargs="?", help="index directory (left out with --server)")
    se.add_argument("images", nargs="*", metavar="image",
                    help="query image files: several are searched one after the other in this one process; "
                         "'-': the image's bytes on standard input")
    se.add_argument("--id", dest="ids", action="append", default=[], metavar="ID",
                    help="an indexed image as the query (its stored vector, verified with its stored local "
                         "geometry, which keeps at most 1,500 of its features: a search by its file uses them all "
                         "and verifies more results); repeatable")
    se.add_argument("-k", type=positive_int, default=10, help="results (default 10)")
    se.add_argument("--box", type=float, nargs=4, metavar=("X1", "Y1", "X2", "Y2"), default=None,
                    help="search with the part of the query photo inside this box (pixels, as viewers show the "
                         "photo); each verified result shows where it matched")
    se.add_argument("--mode", choices=list(SEARCH_MODES), default=None,
                    help="default: pq once the index has a codec (index train), else exact")
    se.add_argument("--nprobe", type=positive_int, default=None, help="with an IVF codec: lists visited")
    se.add_argument("--rerank", type=non_negative_int, default=None,
                    help="with --mode pq: candidates re-scored with the stored vectors (0: none; "
                         "default max(4k, 100))")
    se.add_argument("--verify", type=non_negative_int, default=None, metavar="R",
                    help="spatially verify the first R results (default 100 when the index has local geometry; "
                         "0: off)")
    se.add_argument("--expand", type=non_negative_int, default=None, metavar="N",
                    help="query expansion with at most N verified results (default 50; 0: off)")
    se.add_argument("--expansion", choices=list(SEARCH_EXPANSIONS), default=SEARCH_EXPANSION,
                    help="average query expansion, alpha-QE, recursive AQE (--expand N verified results more "
                         "a round, each round's results verified), or recursive AQE less the collection's mean "
                         "vector (the default)")
    se.add_argument("--false-alarms-per-pair", type=float, default=None, metavar="RATE",
                    help="the bar of the verified mark: at most RATE false verifications per pair of unrelated "
                         "photos (default 1e-4; 1e-7 marks fewer, and left none wrong on held-out photos)")
    se.add_argument("--pairs", action="store_true", help="with --json: each result's inlier pairs")
    se.add_argument("--json", action="store_true",
                    help="print JSON instead of tables: for one query an array of its results, one per line; for "
                         "several, JSON lines (as --jsonl)")
    se.add_argument("--jsonl", action="store_true",
                    help='print JSON lines: one object per query, {"query": ..., "results": [...]} '
                         '(or "error": {"code", "message"}), whatever the number of queries')
    se.add_argument("--where", default=None, metavar="JSON",
                    help='a metadata filter on indexed fields, e.g. \'{"folder": "/photos/paris"}\', '
                         '\'{"date": {"gte": "2024-01-01"}}\', \'{"tag": {"in": ["a", "b"]}}\' (fields ANDed)')
    add_limit_options(se)
    se.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="a sharded index: search its shards through their owners on this Dask cluster")
    _add_server_options(se)
    se.set_defaults(func=_search, parser=se)
    _add_duplicates_command(sub)


def _add_server_options(se):
    se.add_argument("--server", default=None, metavar="URL",
                    help="send the queries to a running 'streamk serve' at URL (e.g. http://127.0.0.1:8000) instead "
                         "of opening an index here; its search options: -k, --box, --mode, --verify, --expand, --where")
    se.add_argument("--token-file", default=None, metavar="FILE",
                    help="with --server: the file holding the server's token (else $STREAMK_TOKEN, else none)")
    se.add_argument("--timeout", type=positive_float, default=60.0, metavar="S",
                    help="with --server: seconds to wait for each answer (default 60)")


def _add_duplicates_command(sub):
    du = sub.add_parser("duplicates", help="copies of one capture (exact / copy) told apart from other photos of the "
                                           "same scene (an index with local geometry); else groups by vector "
                                           "similarity only")
    du.add_argument("dir", help="index directory")
    du.add_argument("--id", default=None, help="only this image's duplicates")
    du.add_argument("--threshold", type=unit_float, default=None, metavar="T",
                    help="groups by vector similarity only (inner product at least T; the rule without local "
                         f"geometry, default {DEFAULT_DUPLICATE_THRESHOLD}, measured on the demo's photo changes: "
                         "bench/README.md): they may hold other photos of the same scene")
    du.add_argument("--verify", action="store_true",
                    help="deprecated, the default with local geometry: every pair is verified and classed")
    du.add_argument("--classes", action="store_true",
                    help="the default with local geometry (kept for 0.2 call forms): class every verified pair: "
                         "exact (same bytes or pixels), copy (the same capture edited: re-encoded, resized, cropped, "
                         "bordered, captioned, toned), same scene (another photo: keep both); groups of copies only, "
                         "with score, inliers, covered fraction and pixel agreement")
    du.add_argument("--rotations", action="store_true",
                    help="also find copies turned by quarter turns (describes each image three more times)")
    du.add_argument("--mirrored", action="store_true",
                    help="also find mirrored copies (describes each image once more)")
    du.add_argument("--neighbours", type=positive_int, default=10,
                    help="each image's nearest images looked at (default 10)")
    du.add_argument("--json", action="store_true",
                    help="print JSON (with schema_version, rule: classes or vector, and the vector rule's note)")
    du.add_argument("--no-progress", action="store_true", help="no progress bar")
    du.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="a sharded index: its shards' owners on this Dask cluster (groups by vector similarity only)")
    du.set_defaults(func=_duplicates)

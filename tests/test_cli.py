"""The command line's error contract: every error a user can cause is one line on stderr
and a documented exit status (a StreamkError's ``exit_code``), a bug is one line and
status 1, Ctrl-C 130, a closed output pipe 141 and quiet; ``--debug`` adds the
traceback. Run in child processes, as a user runs ``streamk``."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from streamk import errors
from streamk.cli import main
from streamk.schema import JSON_SCHEMA_VERSION

pytest.importorskip("cv2")
pytest.importorskip("PIL")
from helpers.cli import every_help  # noqa: E402
from helpers.images import textured  # noqa: E402
from helpers.processes import REPO, run_python, start_python, stop, subprocess_env  # noqa: E402

# every status the command line may end with (README, "Limits and errors")
EXIT_CODES = {0, 1, 2, 3, 4, 5, 6, 7, 130, 141, 143}


def streamk(*args, **kwargs):
    """``python -m streamk.cli ARGS`` in a child process (output captured, bounded)."""
    return run_python("-m", "streamk.cli", *args, timeout=kwargs.pop("timeout", 120), **kwargs)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A small real index (OpenCV SIFT, a VLAD k=4 encoder, 6 textured images) and its
    images and encoder file."""
    from streamk import Encoder
    from streamk.features import make_extractor
    from streamk.index import StreamingIndex
    from streamk.pipeline import extract_many

    root = tmp_path_factory.mktemp("cli")
    paths = [textured(str(root / "imgs" / f"img{i}.png"), i) for i in range(6)]
    feats, _ = extract_many(paths, make_extractor("sift"), workers=1, progress=False)
    enc = Encoder(embedding="vlad", k=4, aggregation="gmp").fit([f.descriptors for f in feats.values()])
    enc.save(root / "enc.npz")
    with StreamingIndex.create(root / "ix", enc, vector_dtype="float32", extractor=make_extractor("sift")) as idx:
        for p in paths:
            idx.add(p.rsplit("/", 1)[1], image_path=p)
    return root


def one_error_line(res):
    """The one line a failed command printed on stderr (and no traceback)."""
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_exit_codes_are_documented_and_distinct_by_kind():
    for name in dir(errors):
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, errors.StreamkError):
            assert cls.exit_code in EXIT_CODES - {0, 1, 130, 141, 143}, name
    assert errors.ConfigError.exit_code == 2
    assert errors.ImageReadError.exit_code == errors.EncoderFileError.exit_code == 3
    assert errors.NotAnIndexError.exit_code == errors.UnknownIdError.exit_code == 4


def test_a_named_error_is_one_line_and_its_exit_code(work, tmp_path):
    res = streamk("index", "info", str(tmp_path / "nothere"))
    assert res.returncode == errors.NotAnIndexError.exit_code == 4
    line = one_error_line(res)
    assert line.startswith("streamk: error: ") and "nothere" in line
    # a bad input file: 3
    res = streamk("index", "create", str(tmp_path / "new"), "--encoder", str(tmp_path / "nope.npz"))
    assert res.returncode == 3
    assert "nope.npz" in one_error_line(res)
    assert not (tmp_path / "new").exists()
    # a query image that is not an image: 3, the index unchanged
    (tmp_path / "q.jpg").write_text("not an image\n")
    res = streamk("search", str(work / "ix"), str(tmp_path / "q.jpg"))
    assert res.returncode == 3 and "q.jpg" in one_error_line(res)


def test_debug_anywhere_adds_the_traceback(work, tmp_path):
    for argv in (["--debug", "index", "info", str(tmp_path / "nothere")],
                 ["index", "info", str(tmp_path / "nothere"), "--debug"]):
        res = streamk(*argv)
        assert res.returncode == 4
        assert "Traceback" in res.stderr and "NotAnIndexError" in res.stderr
        assert res.stderr.splitlines()[-1].startswith("streamk: error: ")


def test_usage_errors_exit_2(work):
    """Each is one line naming the command and its --help (argparse's usage block of 10-17
    lines came before the error once)."""
    for argv, said in ((["no-such-command"], "streamk: error: argument command: invalid choice: 'no-such-command'"),
                       (["search", str(work / "ix")], "streamk search: error: give a query"),
                       (["search", str(work / "ix"), "q.jpg", "-k", "x"],
                        "streamk search: error: argument -k: not an integer: 'x' (see streamk search --help)"),
                       (["search", str(work / "ix"), "q.jpg", "--box", "1", "2", "3"],
                        "streamk search: error: argument --box: expected 4 arguments"),
                       (["index", "info"], "streamk index info: error: the following arguments are required: dir"),
                       ([], "streamk: error: the following arguments are required: command (see streamk --help)")):
        res = streamk(*argv)
        assert res.returncode == 2, argv
        line = one_error_line(res)
        assert line.startswith(said) and line.endswith(" --help)") and "usage:" not in res.stderr, (argv, line)


def test_a_usage_error_of_every_command_is_one_line(capsys):
    """Every parser is streamk's (subparsers take their parent's class): an unknown option
    of any command is one line; its --help is argparse's usual text."""
    for command in _parsers():
        with pytest.raises(SystemExit) as exit_:
            main([*command, "--no-such-option"])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1, (command, err)
        prog = " ".join(("streamk", *command))
        assert err.startswith(f"{prog}: error: ") and err.endswith(f"(see {prog} --help)\n"), (command, err)
    with pytest.raises(SystemExit) as exit_:
        main(["search", "--help"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("usage: streamk search [-h]")


def test_a_bug_is_one_line_status_1_and_says_so():
    code = ("import sys\nfrom streamk.cli import run_command\n"
            "sys.exit(run_command(lambda: {}['missing'], debug='--debug' in sys.argv))")
    res = run_python("-c", code, timeout=60)
    assert res.returncode == 1
    line = one_error_line(res)
    assert "internal error" in line and "KeyError" in line and "--debug" in line and "bug" in line
    res = run_python("-c", code, "--debug", timeout=60)
    assert res.returncode == 1 and "Traceback" in res.stderr


def test_ctrl_c_exits_130_without_a_traceback():
    code = ("import sys\nfrom streamk.cli import run_command\n"
            "def command():\n    print('ready', flush=True)\n    sys.stdin.read()  # until interrupted\n"
            "sys.exit(run_command(command))")
    proc = start_python("-c", code, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        stop(proc)
    assert proc.returncode == 130
    assert "Traceback" not in err and err.strip() == "streamk: interrupted"


@pytest.mark.parametrize("argv", [["index", "info", "{ix}"], ["search", "{ix}", "{img}", "--json"]])
def test_a_closed_output_pipe_ends_quietly(work, argv):
    """``streamk index info IDX | head -1``: the reader has gone before streamk writes."""
    argv = [a.format(ix=work / "ix", img=work / "imgs" / "img0.png") for a in argv]
    proc = start_python("-m", "streamk.cli", *argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdout.close()  # no reader left: streamk's first write meets EPIPE
        err = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 141
    assert err == ""


def test_head_of_a_real_pipe(work):
    """Through a shell, as a user types it: the first line, and nothing on stderr."""
    cmd = f"{sys.executable} -m streamk.cli index info {work / 'ix'} | head -1"
    res = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=120,
                         env=subprocess_env())
    assert res.returncode == 0 and len(res.stdout.splitlines()) == 1
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr


def test_in_process_main_returns_the_exit_code(work, tmp_path, capsys):
    assert main(["index", "info", str(work / "ix")]) == 0
    assert "images" in capsys.readouterr().out
    assert main(["index", "info", str(tmp_path / "nothere")]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("streamk: error: ")
    with pytest.raises(SystemExit) as e:
        main(["index", "info"])
    assert e.value.code == 2


LIMITED_CLI = textwrap.dedent("""
    import resource, sys
    import streamk.cli, streamk.index, streamk.pipeline  # what the command loads, before the limit
    vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (3 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))
    sys.exit(streamk.cli.main(sys.argv[1:]))
""")


@pytest.mark.parametrize("k", ["1000000000", "10001"])
def test_huge_k_is_refused_under_a_memory_limit(work, k):
    """``streamk search IDX q.jpg -k 1000000000`` once died allocating 7.45 GiB."""
    res = run_python("-c", LIMITED_CLI, "search", work / "ix", work / "imgs" / "img2.png", "-k", k, timeout=120)
    assert res.returncode == 2
    line = one_error_line(res)
    assert "limit of 10,000" in line and "MemoryError" not in res.stderr


def test_search_parameters_are_checked_before_the_index_is_opened(tmp_path, capsys):
    """``streamk search`` builds one SearchParams from its arguments: a bad one is refused
    (usage, 2) before anything is opened, even when the index does not exist."""
    for argv, words in ((["-k", "10001"], "limit of 10,000"), (["--box", "5", "0", "1", "9"], "x1 < x2"),
                        (["--where", "{broken"], "")):
        assert main(["search", str(tmp_path / "nothere"), str(tmp_path / "q.jpg"), *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "nothere" not in err, err


def test_k_above_the_images_is_capped_under_a_memory_limit(work):
    res = run_python("-c", LIMITED_CLI, "search", work / "ix", work / "imgs" / "img2.png", "-k", "10000", "--json",
                     timeout=120)
    assert res.returncode == 0, res.stderr
    hits = json.loads(res.stdout)
    assert len(hits) == 6 and hits[0]["id"] == "img2.png"
    for opt in ("--rerank", "--verify", "--expand"):
        res = run_python("-c", LIMITED_CLI, "search", work / "ix", work / "imgs" / "img2.png", opt, "1000000000",
                         timeout=120)
        assert res.returncode == 2 and "limit of" in one_error_line(res), opt


# ---------------------------------------------------------------- start-up, help and small outputs (issues 23, 26, 27)
STAGES = ("numpy", "numba", "lmdb", "streamk.index", "streamk.demo", "streamk.encoding", "streamk.features",
          "streamk.pipeline", "streamk.evaluation", "streamk.server")


def test_building_the_parser_and_its_help_imports_no_stage():
    """``streamk --help`` (and the parse before any command) loads none of the packages the
    commands drive: each command imports what it needs when it runs."""
    code = ("import sys\nfrom streamk.cli import build_parser, main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "from helpers.cli import every_help\nevery_help(build_parser())\n"
            f"print([m for m in {STAGES!r} if m in sys.modules], file=sys.stderr)")
    res = run_python("-c", code, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "[]"
    assert "usage: streamk" in res.stdout


def test_the_defaults_in_help_are_the_packages_own():
    """The parser's defaults are constants (cheap to import); each is the value the
    package it mirrors defines."""
    from streamk import demo, features, index, pipeline
    from streamk.cli import defaults

    assert defaults.MAX_FILE_SIZE == features.MAX_FILE_SIZE and defaults.MAX_PIXELS == features.MAX_PIXELS
    assert defaults.DEFAULT_MAX_SIDE == features.DEFAULT_MAX_SIDE
    assert defaults.DEFAULT_MAX_FEATURES == features.DEFAULT_MAX_FEATURES
    assert defaults.DEFAULT_DUPLICATE_THRESHOLD == index.DEFAULT_DUPLICATE_THRESHOLD
    assert tuple(defaults.DUPLICATE_POLICIES) == tuple(index.DUPLICATE_POLICIES)
    assert defaults.SEARCH_MODES == tuple(index.MODES) and defaults.SEARCH_EXPANSIONS == tuple(index.EXPANSIONS)
    assert defaults.SEARCH_EXPANSION == index.SearchParams().expansion
    assert defaults.DEFAULT_MAX_IMAGES == pipeline.DEFAULT_MAX_IMAGES
    assert defaults.DEFAULT_DESCRIPTORS_PER_IMAGE == pipeline.DEFAULT_DESCRIPTORS_PER_IMAGE
    assert defaults.DEMO_TRANSFORMS == tuple(demo.TRANSFORMS)
    from streamk.encoding import EMBEDDINGS, METHODS, embedding_spec

    assert defaults.AGGREGATIONS == tuple(METHODS)
    assert {embedding_spec(name)[0] for name in defaults.EVAL_EMBEDDINGS} == set(EMBEDDINGS)
    from streamk.datasets.download import REMOTES

    assert defaults.DOWNLOADABLE_DATASETS == tuple(sorted(REMOTES))


def test_every_option_of_every_command_says_what_it_is():
    """`--help` is where a newcomer learns a command: no option or argument without a line
    (`streamk datasets download --help` showed a bare NAME and --dir; eval's --power, --gamma,
    --lam and a dozen more said nothing)."""
    import argparse

    from streamk.cli import build_parser

    bare = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, path + [name])
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                bare.append(f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), ["streamk"])
    assert bare == []


def test_a_warning_during_a_command_is_one_line(work, tmp_path):
    """A warning reached a CLI user as Python shows it: the file, the line number and the
    source line under the message (the fallback extractor's note, "RN learned on 6 image
    vectors ..."). Now one line, `streamk: warning: ...`; --debug keeps Python's format."""
    code = ("import sys, warnings\n"
            "import streamk.cli.index_commands as ic\n"
            "real = ic._index_info\n"
            "def noisy(args):\n"
            "    warnings.warn('first line\\nsecond line', RuntimeWarning)\n"
            "    return real(args)\n"
            "ic._index_info = noisy\n"
            "from streamk.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    res = run_python("-c", code, "index", "info", str(work / "ix"), timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == ["streamk: warning: first line; second line"]
    res = run_python("-c", code, "index", "info", str(work / "ix"), "--debug", timeout=120)
    assert res.returncode == 0 and res.stderr.startswith("<string>:5: RuntimeWarning: first line\nsecond line")


def test_version():
    from streamk import __version__

    res = streamk("--version")
    assert res.returncode == 0 and res.stdout == f"streamk {__version__}\n"


def test_help_is_plain_text():
    """No reStructuredText markup (``literal``, :func:) reaches a terminal."""
    from streamk.cli import build_parser

    for text in every_help(build_parser()):
        assert "``" not in text and ":func:" not in text and ":class:" not in text, text


@pytest.mark.parametrize("option, value, said", [
    ("--rn", "maybe", "argument --rn: 'maybe' is not one of off, on"),
    ("--aggregation", "sum,max", "argument --aggregation: 'max' is not one of sum, democratic, gmp"),
    ("--embedding", "temb,tmeb", "argument --embedding: 'tmeb' is not one of temb, fv, fv-hard, vlad, bow"),
    ("--embedding", ",", "argument --embedding: no value in ','"),
    ("--vocab-size", "16,abc", "argument --vocab-size: not an integer: 'abc'"),
    ("--dim", "128,0", "argument --dim: must be >= 1, got 0"),
    ("--pq-bytes", "x", "argument --pq-bytes: not an integer: 'x'"),
    ("--rerank", "-5", "argument --rerank: must be >= 0, got -5"),
    ("--power", "-1", "argument --power: expected a number in (0, 1], got '-1'"),  # as index create's
])
def test_eval_lists_are_checked_when_parsed(option, value, said, capsys):
    """`streamk eval --rn maybe` was an internal error (KeyError) after the parse;
    `--aggregation max` ran the encoder's fit (20 s at k = 16, minutes at 64) before saying
    it; `--vocab-size abc` said "invalid <lambda> value"; `--embedding ,` ran nothing and
    exited 0; `--rerank -5` made a row "re-rank -5". Each is now one usage line, exit 2."""
    from streamk.cli import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["eval", "--dataset", "paris6k-subset", option, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "<lambda>" not in err, err
    args = build_parser().parse_args(["eval", "--dataset", "paris6k-subset", "--rn", " on", "--aggregation",
                                      "gmp,sum", "--embedding", "fv-hard", "--vocab-size", "8,16", "--dim", "64"])
    assert (args.rn, args.aggregation, args.embedding, args.vocab_size, args.dim) == (
        ["on"], ["gmp", "sum"], ["fv-hard"], [8, 16], [64])


@pytest.mark.parametrize("argv", [["demo"], ["eval", "--dataset", "holidays"], ["index", "create", "ix"]])
def test_vocab_size_and_its_deprecated_old_name(argv, capsys):
    """``--vocab-size`` is the vocabulary; ``--k`` still works for one release, saying it is
    deprecated; ``-k`` stays the number of results of a search."""
    from streamk.cli import build_parser

    parser = build_parser()
    value = "8" if argv[0] != "eval" else "8,16"
    expected = 8 if argv[0] != "eval" else [8, 16]
    new = parser.parse_args(argv + ["--vocab-size", value])
    assert new.vocab_size == expected and capsys.readouterr().err == ""
    old = parser.parse_args(argv + ["--k", value])
    assert old.vocab_size == expected
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--k is deprecated" in err and "--vocab-size" in err
    # index create: None, the size the learning sample can fill (64 at most; tests/pipeline/test_ingest.py)
    assert parser.parse_args(argv).vocab_size == (16 if argv[0] == "demo" else None if argv[0] == "index" else [64])
    help_text = "\n".join(every_help(parser))
    assert "--vocab-size" in help_text and "--k K" not in help_text  # the old name is not offered
    assert parser.parse_args(["search", "ix", "q.jpg", "-k", "3"]).k == 3


def test_search_json_is_one_result_per_line(work):
    res = streamk("search", str(work / "ix"), str(work / "imgs" / "img2.png"), "-k", "4", "--json", "--pairs")
    assert res.returncode == 0, res.stderr
    hits = json.loads(res.stdout)
    lines = res.stdout.splitlines()
    assert len(hits) == 4 and lines[0] == "[" and lines[-1] == "]" and len(lines) == len(hits) + 2
    for line, hit in zip(lines[1:-1], hits):
        assert json.loads(line.rstrip(",")) == hit


def test_a_search_with_no_results_says_so_and_why_when_the_index_is_empty(work, tmp_path):
    """A table header with nothing under it said nothing: "(no results)", and on an empty
    index a note that says how to fill it."""
    from streamk import Encoder
    from streamk.features import make_extractor
    from streamk.index import StreamingIndex

    StreamingIndex.create(tmp_path / "empty", Encoder.load(work / "enc.npz"), extractor=make_extractor("sift")).close()
    res = streamk("search", str(tmp_path / "empty"), str(work / "imgs" / "img2.png"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["(no results)"]
    assert one_error_line(res) == f"streamk: note: {tmp_path / 'empty'} holds no images yet: `streamk ingest " \
                                  f"{tmp_path / 'empty'} PHOTOS` adds them"
    res = streamk("search", str(tmp_path / "empty"), str(work / "imgs" / "img2.png"), "--json")
    assert res.returncode == 0 and json.loads(res.stdout) == []


def test_a_filter_that_selects_nothing_shows_values_its_fields_hold(work, tmp_path):
    """`--where '{"folder": "imgs"}'` said "(no results)" and no more, although the images
    are in that folder: ingestion stores it as an absolute path. The note shows a few of
    the values each field holds (index.field_values)."""
    from streamk import Encoder
    from streamk.features import make_extractor
    from streamk.index import StreamingIndex

    ix = tmp_path / "ix"
    StreamingIndex.create(ix, Encoder.load(work / "enc.npz"), extractor=make_extractor("sift"),
                          indexed_fields=["folder", "stars"]).close()
    assert streamk("ingest", str(ix), str(work / "imgs"), "--workers", "1", "--no-progress").returncode == 0
    query = str(work / "imgs" / "img2.png")
    res = streamk("search", str(ix), query, "--where", '{"folder": "imgs"}')
    assert res.returncode == 0 and res.stdout.splitlines() == ["(no results)"], res.stderr
    folder = os.path.abspath(work / "imgs")
    assert one_error_line(res) == (f"streamk: note: no image matches the filter; 'folder' holds {json.dumps(folder)} "
                                   f"(ingestion stores folders and paths as absolute paths)")
    res = streamk("search", str(ix), query, "--where", json.dumps({"folder": folder, "stars": 4}))
    assert one_error_line(res).endswith(f"'folder' holds {json.dumps(folder)}; no image has a value of 'stars' "
                                        f"(ingestion stores folders and paths as absolute paths)")
    res = streamk("search", str(ix), query, "--where", json.dumps({"folder": folder}), "--json")
    assert res.returncode == 0 and json.loads(res.stdout)[0]["id"] == "img2.png" and not res.stderr


def test_search_reads_the_query_image_from_standard_input_given_as_dash(work):
    """`curl ... | streamk search INDEX -`: '-' is the image's bytes on standard input, read
    once and bounded; it was "cannot read image -: no such file"."""
    img = work / "imgs" / "img2.png"
    res = streamk("search", str(work / "ix"), "-", "-k", "3", "--json", input=img.read_bytes(), text=False)
    assert res.returncode == 0, res.stderr
    by_path = streamk("search", str(work / "ix"), str(img), "-k", "3", "--json")
    assert json.loads(res.stdout) == json.loads(by_path.stdout)
    res = streamk("search", str(work / "ix"), "-", input=b"", text=False)
    assert res.returncode == 3 and b"standard input held no bytes" in res.stderr
    res = streamk("search", str(work / "ix"), "-", "--max-file-size", "100", input=img.read_bytes(), text=False)
    assert res.returncode != 0 and b"max-file-size" in res.stderr
    res = streamk("search", str(work / "ix"), "-", "-", input=b"x", text=False)
    assert res.returncode == 2 and b"can be given once" in res.stderr


def test_duplicates_of_an_image_with_none_says_so(work):
    res = streamk("duplicates", str(work / "ix"), "--id", "img0.png", "--threshold", "1")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["no near-duplicates of img0.png (threshold 1)"]
    # no local geometry here: one note line that the rule is the vector's, and how to add geometry
    assert "by vector similarity only" in one_error_line(res) and "add-local-features" in res.stderr
    res = streamk("duplicates", str(work / "ix"), "--id", "img0.png", "--threshold", "1", "--json")
    assert res.returncode == 0
    answer = json.loads(res.stdout)
    assert answer["duplicates"] == [] and answer["id"] == "img0.png" and answer["rule"] == "vector"
    assert answer["schema_version"] == JSON_SCHEMA_VERSION and "same scene" in answer["note"]


# ---------------------------------------------------------------- smaller failures (issue 17, 7)
def test_a_text_file_as_encoder_is_an_encoder_file_error(tmp_path):
    from streamk import Encoder

    (tmp_path / "enc.txt").write_text("this is not an encoder\n")
    res = streamk("index", "create", str(tmp_path / "ix"), "--encoder", str(tmp_path / "enc.txt"))
    assert res.returncode == errors.EncoderFileError.exit_code == 3
    line = one_error_line(res)
    assert "enc.txt" in line and "text file" in line and "pickle" not in line
    assert not (tmp_path / "ix").exists()
    import numpy as np

    np.save(tmp_path / "one.npy", np.zeros(3))
    for name, words in (("enc.txt", "a text file"), ("one.npy", "a single .npy array"), ("empty.npz", "an empty file")):
        (tmp_path / "empty.npz").write_bytes(b"")
        with pytest.raises(errors.EncoderFileError, match=words):
            Encoder.load(tmp_path / name)


def test_names_that_are_not_utf8_or_hold_a_newline(work, tmp_path):
    """Such files are ingested under ids with ``%XX`` for those bytes, and a bad file whose
    name holds a newline is reported on one line."""
    import os

    from streamk.index import StreamingIndex

    imgs = tmp_path / "imgs"
    imgs.mkdir()
    raw = os.fsencode(imgs) + b"/caf\xe9.png"
    with open(raw, "wb") as fh:
        fh.write((work / "imgs" / "img1.png").read_bytes())
    (imgs / "new\nline.png").write_bytes((work / "imgs" / "img2.png").read_bytes())
    (imgs / "bad\nname.jpg").write_text("not an image\n")
    ix = tmp_path / "ix"
    assert streamk("index", "create", str(ix), "--encoder", str(work / "enc.npz"), "--extractor", "sift",
                   "--no-local-features").returncode == 0
    res = streamk("ingest", str(ix), str(imgs), "--workers", "1", "--no-progress")
    assert res.returncode == 1, res.stderr  # the bad file
    assert "Traceback" not in res.stderr
    skipped = [line for line in res.stderr.splitlines() if line.startswith("streamk: skipped")]
    assert len(skipped) == 1 and "bad\\nname.jpg" in skipped[0] and "not a recognised image" in skipped[0]
    assert "added 2, skipped 0 existing, failed 1" in res.stdout
    with StreamingIndex.open(ix, readonly=True) as idx:
        assert sorted(idx.ids()) == ["caf%E9.png", "new%0Aline.png"]
        assert os.fsencode(idx.info("caf%E9.png")["source"]) == raw  # the file it came from
        assert idx.info("new%0Aline.png")["source"] == str(imgs / "new\nline.png")
    res = streamk("ingest", str(ix), str(imgs), "--workers", "1", "--no-progress")  # resumes: nothing new
    assert "added 0, skipped 2 existing, failed 1" in res.stdout
    res = streamk("search", str(ix), str(imgs / "new\nline.png"), "-k", "2")
    assert res.returncode == 0 and res.stdout.splitlines()[1].split()[-1] == "new%0Aline.png"


# ---------------------------------------------------------------- fuzz: no traceback ever reaches the user
FUZZ_EXAMPLES = 150
FUZZ_SECONDS = 300  # the whole fuzz run, whatever the examples cost: later examples are skipped
# commands run in process, on a copy of the fixture's index; options that start servers,
# clusters, endless loops or long trainings are left out (they have their own tests)
FUZZ_LEFT_OUT = {"--dask", "--watch", "--train", "--help", "--debug"}
FUZZ_COMMANDS = [("index", "create"), ("index", "field"), ("index", "train"), ("index", "train-pq"), ("index", "info"),
                 ("index", "upgrade"), ("index", "verify"), ("index", "add-local-features"), ("ingest",), ("search",),
                 ("duplicates",)]
JUNK = ["", "0", "-1", "1", "2", "3", "10001", "1000000000", "99999999999999999999", "nan", "inf", "-inf", "1e308",
        "0.5", "-0.0", "x", "--", "-", "\x00", "a\nb", "é", "\udce9", "..", "{}", "[1]", '{"a": 1}',
        "tcp://127.0.0.1:1", "local:0", "float32", "exact", "pq", "keep"]


def _parsers():
    """{command tuple: its argparse parser}, from the real parser."""
    import argparse

    from streamk.cli import build_parser

    out = {}

    def walk(parser, path):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            out[tuple(path)] = parser
        for action in subs:
            for name, sp in action.choices.items():
                walk(sp, path + [name])
    walk(build_parser(), [])
    return out


@pytest.fixture(scope="module")
def fuzz_files(work, tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzfiles")
    (root / "notes.txt").write_text("not an image, not an encoder\n")
    (root / "meta.jsonl").write_text('{"id": "img0.png", "tag": "x"}\n{broken\n')
    return {"index": None, "image": str(work / "imgs" / "img1.png"), "images": str(work / "imgs"),
            "encoder": str(work / "enc.npz"), "text": str(root / "notes.txt"), "jsonl": str(root / "meta.jsonl"),
            "missing": str(root / "missing"), "newdir": None}


def test_fuzz_cli_arguments_never_show_a_traceback(work, fuzz_files, tmp_path_factory, monkeypatch):
    """Random argument lists of the real subcommands and options with junk values, run as
    ``streamk.cli.main``: whatever they are, the user sees no traceback and an exit status
    of the documented set, and no 'internal error' (a bug). The examples are the same on
    every run; FUZZ_RANDOM=1 draws new ones."""
    import contextlib
    import io
    import shutil
    import time

    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    parsers = _parsers()
    commands = [c for c in FUZZ_COMMANDS if c in parsers]
    assert len(commands) == len(FUZZ_COMMANDS), "a fuzzed command is gone: update FUZZ_COMMANDS"
    started = time.monotonic()
    scratch = tmp_path_factory.mktemp("fuzz")
    monkeypatch.chdir(scratch)  # a junk value taken as a relative folder (--cache x) is made there
    seen = {"runs": 0}

    def files(run_dir):
        return dict(fuzz_files, index=str(run_dir / "ix"), newdir=str(run_dir / "new"))

    def positional_values(action, f):
        good = {"dir": [f["index"]] * 4 + [f["missing"], f["newdir"], f["text"]],
                "image": [f["image"]] * 4 + [f["text"], f["missing"], f["images"]],
                "images": [f["images"], f["image"], f["text"], f["missing"]],
                "names": ["tag", "date", "size", "name", "é"]}.get(action.dest, [f["index"], f["image"]])
        return st.sampled_from(good * 12 + JUNK)

    numbers = ["1", "2", "3", "8", "10", "16", "100", "0", "-1", "10001", "1000000000", "99999999999999999999", "0.5"]

    def option_values(action, f):
        paths = [f["index"], f["image"], f["encoder"], f["text"], f["jsonl"], f["missing"]]
        good = list(action.choices) * 4 if action.choices else (numbers if action.type not in (None, str) else paths)
        return st.sampled_from(good * 8 + JUNK)

    @hypothesis.settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
                         derandomize=os.environ.get("FUZZ_RANDOM") is None,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(data=st.data())
    def run(data):
        if time.monotonic() - started > FUZZ_SECONDS:
            return  # bounded in time as in count
        run_dir = scratch / f"run{seen['runs']}"
        seen["runs"] += 1
        shutil.copytree(work / "ix", run_dir / "ix")
        f = files(run_dir)
        command = data.draw(st.sampled_from(commands))
        parser = parsers[command]
        argv = list(command)
        for action in [a for a in parser._actions if not a.option_strings]:
            n = 1 if action.nargs in (None, 1) else data.draw(st.integers(0, 2)) + (action.nargs == "+")
            if data.draw(st.integers(0, 9)) == 0:
                n = 0  # a positional left out: a usage error
            argv += [data.draw(positional_values(action, f)) for _ in range(n)]
        options = [a for a in parser._actions if a.option_strings and not set(a.option_strings) & FUZZ_LEFT_OUT]
        for action in data.draw(st.lists(st.sampled_from(options), max_size=4)) if options else []:
            argv.append(data.draw(st.sampled_from(action.option_strings)))
            if action.nargs == 0:
                continue
            n = action.nargs if isinstance(action.nargs, int) else 1
            argv += [data.draw(option_values(action, f)) for _ in range(n)]
            if (action.option_strings[-1] == "--workers" and argv[-1].lstrip("-").isdigit()
                    and 1 < int(argv[-1]) < 10 ** 6):
                argv[-1] = "1"  # a real pool per example is slow; huge counts stay (they must be refused)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors and --help
                code = exc.code
        shown = out.getvalue() + err.getvalue()
        assert "Traceback" not in shown, (argv, shown[-3000:])
        assert "internal error" not in err.getvalue(), (argv, err.getvalue()[-3000:])
        assert code in EXIT_CODES, (argv, code, shown[-3000:])
        if code == 1:  # files that failed (ingestion, local features), never an error of the program
            assert command in (("ingest",), ("index", "add-local-features")), (argv, shown[-3000:])
            assert "streamk: error" not in err.getvalue(), (argv, shown[-3000:])
        shutil.rmtree(run_dir, ignore_errors=True)

    run()
    assert seen["runs"] >= 20  # it did run (in time)


def test_counts_of_processes_shards_and_batches_are_bounded(work, tmp_path, capsys):
    """--workers 100000 once tried to start 100,000 processes, --shards 100000 to make as many
    LMDB folders: each is refused by name, before anything starts or is written."""
    ix = tmp_path / "ix"
    for argv, limit in ((["ingest", str(work / "ix"), str(work / "imgs"), "--workers", "100000"], "local processes"),
                        (["ingest", str(work / "ix"), str(work / "imgs"), "--batch-size", "1000000"], "4,096 images"),
                        (["index", "create", str(ix), "--encoder", str(work / "enc.npz"), "--shards", "100000"],
                         "1..1,024")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and limit in err, err
    assert not ix.exists()


def test_the_readme_lists_every_exit_status_and_request_limit():
    """README, "Limits and errors": each named error in the row of its exit status, and
    the request maxima as the code has them."""
    from streamk.index import MAX_BATCH, MAX_EXPAND, MAX_K, MAX_RERANK, MAX_VERIFY

    readme = (REPO / "README.md").read_text()
    section = readme.split("## Limits and errors", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.replace("\\|", "").strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            rows[int(cells[0])] = cells[2]
    assert set(rows) == EXIT_CODES
    for name in dir(errors):
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, errors.StreamkError) and cls is not errors.StreamkError:
            code = 130 if cls is errors.IngestInterruptedError else cls.exit_code
            assert f"`{name}`" in rows[code], (name, code)
    for value, name in ((MAX_K, "MAX_K"), (MAX_RERANK, "MAX_RERANK"), (MAX_VERIFY, "MAX_VERIFY"),
                        (MAX_EXPAND, "MAX_EXPAND"), (MAX_BATCH, "MAX_BATCH")):
        row = next(line for line in section.splitlines() if f"`{name}`" in line or f".{name}`" in line)
        assert f"{value:,}" in row, name


def test_index_info_shows_the_encoder_extractor_local_features_and_disk_size(work, capsys):
    """Issue 27: ``index info`` in words (no ``None`` / raw reprs), with the encoder as
    stored, and --json the same facts as values (and the schema's version)."""
    from streamk import Encoder

    enc = Encoder.load(work / "enc.npz")
    assert main(["index", "info", str(work / "ix")]) == 0
    text = capsys.readouterr().out
    lines = dict(line.strip().split(": ", 1) for line in text.splitlines() if ": " in line)
    assert lines["images"] == "6"
    assert lines["encoder"].startswith(f"vlad k=4, gmp, dimension {enc.dim:,}")
    assert lines["extractor"].startswith("sift, ")
    assert lines["local features"].startswith("no ")
    assert lines["codec"].startswith("none ")
    assert "None" not in text and "{" not in text
    assert main(["index", "info", str(work / "ix"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["schema_version"] == 1 and info["images"] == 6
    assert info["encoder"] == {"embedding": "vlad", "k": 4, "aggregation": "gmp", "dimension": enc.dim,
                               "power": enc.config.power, "rn": False, "dim": None, "embedding_dimension": enc.dim,
                               "gamma": None, "n_iter": None, "lam": enc.config.lam}
    assert lines["aggregation"] == "gmp, lambda 1 (its ridge regulariser)"
    assert lines["normalisation"] == "power-law 0.5, L2 (no RN)"
    assert info["local_features"] is False and info["vocabulary"] is None
    # the disk size is what du counts (allocated blocks of every file under the folder)
    du = subprocess.run(["du", "-s", "-B1", str(work / "ix")], capture_output=True, text=True, timeout=60, check=True)
    dir_blocks = sum(os.lstat(r).st_blocks * 512 for r, _, _ in os.walk(work / "ix"))
    assert info["disk_bytes"] == int(du.stdout.split()[0]) - dir_blocks
    assert lines["disk size"].endswith((" KiB", " MiB")) and info["disk_bytes"] > 0  # binary, as the README's
    assert re.fullmatch(r"[\d,]+(\.\d)? (B|KiB|MiB)", lines["reader memory"]), lines["reader memory"]
    # the vectors' type, as `index create` said it
    assert info["vector_dtype"] == "float32" and lines["vectors"] == f"float32, {enc.dim:,} values an image"


@pytest.mark.parametrize("options, said, encoder", [
    (["--rn", "on", "--dim", "64", "--power", "0.3", "--lam", "2"],
     {"aggregation": "gmp, lambda 2 (its ridge regulariser)",
      "normalisation": "L2, RN (keeps D'=64 of 512 components), power-law 0.3, L2"},
     {"aggregation": "gmp", "dimension": 64, "power": 0.3, "rn": True, "dim": 64, "embedding_dimension": 512,
      "gamma": None, "n_iter": None, "lam": 2.0}),
    (["--shards", "2", "--aggregation", "democratic", "--gamma", "0.7", "--power", "0.8"],
     {"aggregation": "democratic, gamma 0.7 (its damping exponent), 10 iterations",
      "normalisation": "power-law 0.8, L2 (no RN)"},
     {"aggregation": "democratic", "dimension": 512, "power": 0.8, "rn": False, "dim": None,
      "embedding_dimension": 512, "gamma": 0.7, "n_iter": 10, "lam": None}),
    (["--shards", "2", "--rn", "on", "--aggregation", "sum"],
     {"aggregation": "sum (no parameter)", "normalisation": "L2, RN (keeps all 512 components), power-law 0.5, L2"},
     {"aggregation": "sum", "dimension": 512, "power": 0.5, "rn": True, "dim": None, "embedding_dimension": 512,
      "gamma": None, "n_iter": None, "lam": None}),
], ids=["single-rn-gmp", "sharded-democratic", "sharded-rn-sum"])
def test_index_info_shows_the_encoders_research_knobs(work, tmp_path, capsys, options, said, encoder):
    """``index create --train`` takes --rn / --dim / --power / --gamma / --lam; ``index info`` showed
    the power-law only (D' as a bare "dimension", no gamma, no lambda). Now its lines say D' of D,
    the power-law and the aggregation's parameter, and --json has them; a single and a sharded index."""
    ix = tmp_path / "ix"
    assert main(["index", "create", str(ix), "--train", str(work / "imgs"), "--extractor", "sift", "--vocab-size", "4",
                 "--embedding", "vlad", "--workers", "1", "--no-local-features", "--no-cache", *options]) == 0
    capsys.readouterr()
    assert main(["index", "info", str(ix)]) == 0
    text = capsys.readouterr().out
    names = [line.split(": ", 1)[0].strip() for line in text.splitlines()]
    lines = dict(line.strip().split(": ", 1) for line in text.splitlines())
    for name, value in said.items():
        assert lines[name] == value, text
    # the lines there were, in their order; the two new ones after the encoder's
    first = ["images", "shards", "encoder"] if "--shards" in options else ["images", "encoder"]
    assert [n for n in names if n not in said][:len(first)] == first
    assert names[names.index("encoder") + 1:names.index("encoder") + 3] == ["aggregation", "normalisation"]
    assert lines["encoder"].startswith(f"vlad k=4, {encoder['aggregation']}, dimension {encoder['dimension']}")
    assert main(["index", "info", str(ix), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["encoder"] == {"embedding": "vlad", "k": 4, **encoder}


def test_byte_size_is_said_in_binary_units():
    from streamk.units import byte_size

    assert [byte_size(n) for n in (0, 812, 1023, 1024, 1536, 20 * 2**20, 5 * 2**30, 3 * 2**50, 2**60)] == [
        "0 B", "812 B", "1,023 B", "1.0 KiB", "1.5 KiB", "20.0 MiB", "5.0 GiB", "3.0 PiB", "1,024.0 PiB"]


def test_index_info_names_the_vocabulary_of_the_second_stage(work, tmp_path, capsys):
    """An index with local features: ``index info`` says so and how many visual words."""
    import shutil

    from streamk.features import make_extractor
    from streamk.index import StreamingIndex
    from streamk.verification import Vocabulary

    shutil.copytree(work / "ix", tmp_path / "ix")
    sift = make_extractor("sift")
    sets = [sift.extract(str(p)).descriptors for p in sorted((work / "imgs").iterdir())]
    vocabulary = Vocabulary(n_coarse=4, n_fine=4, min_per_word=1).fit(sets)
    with StreamingIndex.open(tmp_path / "ix") as idx:
        idx.add_local_features(vocabulary)
    assert main(["index", "info", str(tmp_path / "ix")]) == 0
    lines = dict(line.strip().split(": ", 1) for line in capsys.readouterr().out.splitlines() if ": " in line)
    assert lines["local features"] == f"yes, a vocabulary of {vocabulary.n_words:,} visual words (4 coarse cells)"
    assert main(["index", "info", str(tmp_path / "ix"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["local_features"] is True and info["vocabulary"] == {"words": vocabulary.n_words, "coarse": 4}


def test_index_create_train_shows_progress_in_a_log(work, tmp_path, capsys, monkeypatch):
    """Issue 27: ``index create --train`` with stderr not a terminal (captured here) shows
    its progress as plain lines (the log's quiet time and interval set to 0 so that this
    short training counts as long), never a carriage return."""
    from streamk.cli import progress_log

    monkeypatch.setattr(progress_log, "QUIET_S", 0.0)
    monkeypatch.setattr(progress_log, "INTERVAL_S", 0.0)
    assert main(["index", "create", str(tmp_path / "ix"), "--train", str(work / "imgs"), "--extractor", "sift",
                 "--embedding", "vlad", "--vocab-size", "4", "--no-local-features", "--workers", "1",
                 "--no-cache"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    bars = [line for line in err.splitlines() if "|" in line and "%" in line]
    assert bars and any("6/6" in line for line in bars), err


def test_cache_info_and_trim(tmp_path, capsys, monkeypatch):
    """``streamk cache info`` says what the feature cache holds and its bound; ``trim``
    removes the least recently used down to 90 % of a bound (0: all)."""
    cache = tmp_path / "features"
    assert main(["cache", "info", "--cache", str(cache)]) == 0
    assert "no feature cache" in capsys.readouterr().out
    for i in range(10):  # ten entries of 1,000 bytes, entry i last used at time 1e6 + i
        p = cache / "0123456789abcdef" / "ab" / f"{i:064x}.npz"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * 1000)
        os.utime(p, (1e6 + i, 1e6 + i))
    monkeypatch.setenv("STREAMK_FEATURE_CACHE_MAX_BYTES", "0")
    assert main(["cache", "info", "--cache", str(cache)]) == 0
    assert "10 images' features, 9.8 KiB (no bound;" in capsys.readouterr().out  # was 0.0 MB
    assert main(["cache", "trim", "--cache", str(cache)]) == 0  # no bound: nothing is over it
    assert capsys.readouterr().out.startswith("removed 0 images' features (0 B); 10 left (9.8 KiB)")
    assert main(["cache", "trim", "--cache", str(cache), "--max-bytes", "5000"]) == 0
    assert capsys.readouterr().out.startswith("removed 6 images' features (5.9 KiB); 4 left (3.9 KiB)")
    monkeypatch.delenv("STREAMK_FEATURE_CACHE_MAX_BYTES")
    assert main(["cache", "info", "--cache", str(cache)]) == 0  # the default bound, as the README says it
    assert "(bound 5.0 GiB;" in capsys.readouterr().out  # was 5,368.7 MB
    assert sorted(p.name[-6:-4] for p in (cache / "0123456789abcdef" / "ab").iterdir()) == ["06", "07", "08", "09"]
    assert main(["cache", "trim", "--cache", str(cache), "--max-bytes", "0"]) == 0
    assert "; 0 left" in capsys.readouterr().out
    monkeypatch.setenv("STREAMK_FEATURE_CACHE_MAX_BYTES", "lots")
    assert main(["cache", "info", "--cache", str(cache)]) == 2
    assert "STREAMK_FEATURE_CACHE_MAX_BYTES must be a number of bytes" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["/proc", "a file"])
def test_a_destination_that_cannot_take_a_folder_is_an_output_file_error_before_any_work(work, tmp_path, capsys,
                                                                                        where):
    """`index backup IDX DEST` and `index create DEST` where no folder can be made (/proc, or
    under a file: as root, chmod stops nothing) once ended in a raw OSError, exit 1, naming the
    backup's temporary folder, and create printed its default-encoder note first."""
    (tmp_path / "f").write_bytes(b"x")
    dest = "/proc/streamk-dest" if where == "/proc" else str(tmp_path / "f" / "dest")
    for argv in (["index", "backup", str(work / "ix"), dest], ["index", "create", dest]):
        assert main(argv) == errors.OutputFileError.exit_code == 2, argv
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1, (out, err)
        assert err.startswith("streamk: error: cannot write the ") and f" to {dest}: " in err and ".partial" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_an_output_folder_check_leaves_nothing_behind(tmp_path):
    from streamk.files import check_output_folder

    assert check_output_folder(tmp_path / "a" / "b", "the index") == tmp_path / "a" / "b"
    assert check_output_folder(tmp_path, "the index") == tmp_path
    assert list(tmp_path.iterdir()) == []


def test_index_create_checks_the_shard_count_before_its_note(tmp_path, capsys):
    """`index create x --shards 2000` printed the default encoder's note, then the limit."""
    assert main(["index", "create", str(tmp_path / "x"), "--shards", "2000"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "1..1,024" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("port", ["99999", "65536", "-1"])
def test_serve_port_outside_0_65535_is_a_usage_error(work, capsys, port):
    """`serve --port 99999` once reached bind(): an internal error (OverflowError), exit 1."""
    with pytest.raises(SystemExit) as exit_:
        main(["serve", str(work / "ix"), "--port", port])
    assert exit_.value.code == 2
    assert "argument --port: must be" in capsys.readouterr().err


def _index_of_work_images(work, path, shards=None):
    """An index at ``path`` (``shards``: sharded) holding work's 6 images."""
    from streamk import Encoder
    from streamk.features import make_extractor
    from streamk.index import ShardedIndex, StreamingIndex

    enc, ex = Encoder.load(work / "enc.npz"), make_extractor("sift")
    with (ShardedIndex.create(path, enc, shards, vector_dtype="float32", extractor=ex) if shards else
          StreamingIndex.create(path, enc, vector_dtype="float32", extractor=ex)) as idx:
        for p in sorted((work / "imgs").iterdir()):
            idx.add(p.name, image_path=str(p))
    return path


@pytest.fixture(scope="module")
def sharded(work, tmp_path_factory):
    """A sharded index of 2 shards holding work's 6 images."""
    return _index_of_work_images(work, tmp_path_factory.mktemp("sharded") / "ixs", shards=2)


def test_upgrade_and_add_local_features_on_a_sharded_index_say_it_is_sharded(sharded, capsys):
    """Both once said `ixs is not a streamk index (no LMDB data there)`, exit 4."""
    assert main(["index", "upgrade", str(sharded)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a sharded index (2 shards)" in err and str(sharded / "shard-000") in err
    assert main(["index", "add-local-features", str(sharded)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a sharded index" in err and "streamk index create --shards N" in err
    assert "not a streamk index" not in err


def test_a_pq_search_without_a_codec_names_the_command_and_the_library_its_method(work, capsys):
    """`search --mode pq` once said `train_pq() or train()`, Python's methods, on the command line."""
    assert main(["search", str(work / "ix"), str(work / "imgs" / "img0.png"), "--mode", "pq"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"`streamk index train {work / 'ix'}`" in err and "()" not in err, err
    from streamk.index import StreamingIndex

    with StreamingIndex.open(work / "ix", readonly=True) as idx:
        with pytest.raises(errors.NotFittedError, match=r"index\.train\(\)"):
            idx.search(idx.vector("img0.png"), k=3, mode="pq")


def test_serve_images_must_be_existing_folders(work, capsys):
    """`serve IDX --images nothere --images q.jpg` once started silently."""
    for bad, said in (("nothere", "no such folder: 'nothere'"), (str(work / "enc.npz"), "is not a folder")):
        with pytest.raises(SystemExit) as exit_:
            main(["serve", str(work / "ix"), "--images", str(work / "imgs"), "--images", bad])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "argument --images: " in err and said in err, err


def test_index_train_checks_the_image_count_before_saying_it_trains(work, sharded, capsys):
    """`index train IDX` on fewer than 256 images printed `training PQ ... go on meanwhile`, then failed."""
    for ix in (work / "ix", sharded):
        assert main(["index", "train", str(ix), "--M", "4"]) == errors.TooFewImagesError.exit_code
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "needs at least 256 images, the index has 6" in err, (out, err)


def test_metadata_lines_that_match_no_file_are_a_warning(work, tmp_path, capsys):
    """A --metadata line naming an id or a path that matched no file was silently unused."""
    from streamk import Encoder
    from streamk.features import make_extractor
    from streamk.index import StreamingIndex

    StreamingIndex.create(tmp_path / "ix", Encoder.load(work / "enc.npz"), extractor=make_extractor("sift")).close()
    lines = [{"id": "img0.png", "album": "a"}, {"id": "nothere.png", "album": "b"},
             {"path": str(work / "imgs" / "typo.png"), "album": "c"}, {"path": str(work / "imgs" / "img1.png"), "n": 1}]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    argv = ["ingest", str(tmp_path / "ix"), str(work / "imgs" / "img0.png"), str(work / "imgs" / "img1.png"),
            "--workers", "1", "--no-progress", "--metadata", str(tmp_path / "m.jsonl")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith("added 2,") and err.count("\n") == 1, (out, err)
    assert err.startswith(f"streamk: warning: 2 ids or paths of {tmp_path / 'm.jsonl'} matched no file of this pass")
    assert f"'nothere.png', '{work / 'imgs' / 'typo.png'}';" in err
    with StreamingIndex.open(tmp_path / "ix", readonly=True) as idx:
        assert idx.metadata("img0.png")["album"] == "a" and idx.metadata("img1.png")["n"] == 1
    assert main(argv[:-2]) == 0 and capsys.readouterr().err == ""  # without the file: nothing to say


def test_search_help_says_what_a_query_by_id_uses():
    """--id verifies with the stored record (at most 1,500 features), which finds fewer than the file."""
    from streamk.verification import DEFAULT_MAX_RECORD_FEATURES

    search = _parsers()[("search",)]
    text = " ".join(next(a for a in search._actions if "--id" in a.option_strings).help.split())
    assert f"at most {DEFAULT_MAX_RECORD_FEATURES:,} of its features" in text and "uses them all" in text


@pytest.mark.parametrize("shards", [None, 2])
def test_index_remove_takes_images_out_all_or_none(work, tmp_path, capsys, shards):
    """The CLI had no way to remove an image (only Python and HTTP)."""
    from streamk.index import open_index

    ix = str(_index_of_work_images(work, tmp_path / "ix", shards))
    assert main(["index", "remove", ix, "img0.png", "nothere.png"]) == errors.UnknownIdError.exit_code
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "nothere.png" in err and "nothing removed" in err
    (tmp_path / "ids.txt").write_text("img2.png\n\nimg3.png\n")
    argv = ["index", "remove", ix, "img0.png", "img1.png", "img0.png", "--from-file", str(tmp_path / "ids.txt")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == ["removed img0.png", "removed img1.png", "removed img2.png", "removed img3.png",
                                f"removed 4 images from {ix}"]
    with open_index(ix, readonly=True) as idx:
        assert sorted(idx.ids()) == ["img4.png", "img5.png"]
    with pytest.raises(SystemExit) as exit_:
        main(["index", "remove", ix])
    assert exit_.value.code == 2 and "give the ids to remove" in capsys.readouterr().err


def test_a_file_named_in_nfd_is_found_by_its_name_typed(work, tmp_path, capsys):
    """macOS names ``café.png`` decomposed (NFD: e + U+0301); the id typed is composed
    (NFC). Ingestion stores the id NFC, ``--id`` finds it in either form, and a second
    ingest of the folder skips it as stored."""
    import shutil

    nfd, nfc = "cafe\u0301.png", "caf\u00e9.png"
    (tmp_path / "imgs").mkdir()
    shutil.copy(work / "imgs" / "img0.png", tmp_path / "imgs" / nfd)
    shutil.copy(work / "imgs" / "img1.png", tmp_path / "imgs" / "other.png")
    assert os.listdir(tmp_path / "imgs").count(nfd) == 1  # the file's name is the NFD one
    ix = str(tmp_path / "ix")
    assert main(["index", "create", ix, "--encoder", str(work / "enc.npz"), "--extractor", "sift"]) == 0
    (tmp_path / "albums.jsonl").write_text(json.dumps({"id": nfd, "album": "paris"}) + "\n")  # named as listed
    ingest = ["ingest", ix, str(tmp_path / "imgs"), "--workers", "1", "--no-progress", "--no-cache"]
    assert main([*ingest, "--metadata", str(tmp_path / "albums.jsonl")]) == 0
    assert "matched no file" not in capsys.readouterr().err
    from streamk.index import open_index
    with open_index(ix, readonly=True) as idx:
        assert sorted(idx.ids()) == [nfc, "other.png"] and idx.metadata(nfd)["album"] == "paris"
    for given in (nfc, nfd):
        assert main(["search", ix, "--id", given, "-k", "1", "--json", "--verify", "0"]) == 0
        assert json.loads(capsys.readouterr().out)[0]["id"] == nfc
    assert main(ingest) == 0
    assert "added 0, skipped 2 existing" in capsys.readouterr().out

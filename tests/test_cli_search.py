"""``streamk search`` with several queries in one process, with an indexed image as the
query (``--id``), and through a running ``streamk serve`` (``--server``): each checked
against an independent reference (an indexed photo finds itself first; first-stage
scores are the inner products of the stored vectors, computed with numpy) and against
the same search made the other way (one query at a time; in this process)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from streamk.cli import main
from streamk.verification import VerificationParams

pytest.importorskip("cv2")
from helpers.processes import run_python  # noqa: E402
from helpers.server import free_port, make_index, make_photos  # noqa: E402

N_INDEXED = 5


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_photos(tmp_path_factory.mktemp("photos"))


@pytest.fixture(scope="module")
def ix(photos, tmp_path_factory):
    """An index of photos p0..p4, with their local geometry (the second stage)."""
    return make_index(tmp_path_factory.mktemp("cli-search") / "ix", photos, n=N_INDEXED)


@pytest.fixture(scope="module")
def sharded(photos, tmp_path_factory):
    """The same photos in a sharded index (2 shards, in this process), ingested as p0.png..p4.png."""
    import shutil

    from streamk.index import ShardedIndex

    root = tmp_path_factory.mktemp("cli-sharded")
    (root / "imgs").mkdir()
    for p in photos["paths"][:N_INDEXED]:
        shutil.copy(p, root / "imgs")
    ShardedIndex.create(root / "ix", photos["encoder"], shards=2, vector_dtype="float32", extractor=photos["extractor"],
                        vocabulary=photos["vocabulary"]).close()
    assert main(["ingest", str(root / "ix"), str(root / "imgs"), "--workers", "1", "--no-progress", "--no-cache"]) == 0
    return root / "ix"


def run(capsys, *argv):
    """``streamk ARGV`` in this process: (status, stdout, stderr)."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def tables(out):
    """{query name: [(rank, id), ...]} of the tables ``streamk search`` printed for several queries."""
    got, name = {}, None
    for line in out.splitlines():
        if line.startswith("query "):
            name = line.removeprefix("query ")
            got[name] = []
        elif line.strip() and line.split()[0].isdigit():
            got[name].append((int(line.split()[0]), line.split()[-1]))
    return got


def test_many_photos_in_one_process_each_a_named_table(photos, ix, capsys):
    paths = photos["paths"][:3]
    status, out, err = run(capsys, "search", ix, *paths, "-k", "3")
    assert status == 0 and err == "", err
    got = tables(out)
    assert list(got) == paths  # in the order given, each named
    for i, path in enumerate(paths):
        assert got[path][0] == (1, f"p{i}")  # an indexed photo finds itself first
        assert [r for r, _ in got[path]] == [1, 2, 3]
        status, alone, _ = run(capsys, "search", ix, path, "-k", "3")  # one query: the table as before, unnamed
        assert status == 0 and not alone.startswith("query ")
        assert "\n".join(out.split(f"query {path}\n", 1)[1].split("\n\n", 1)[0].splitlines()) == alone.rstrip("\n")


def test_json_of_one_query_is_an_array_of_several_json_lines(photos, ix, capsys):
    paths = photos["paths"][:2]
    _, one, _ = run(capsys, "search", ix, paths[0], "-k", "2", "--json")
    # each result of the array names the schema's version; a JSON line names it once, at its top
    one = json.dumps([{k: v for k, v in row.items() if k != "schema_version"} for row in json.loads(one)])
    assert [h["id"] for h in json.loads(one)] == ["p0", json.loads(one)[1]["id"]]
    for argv in ([*paths, "--json"], [*paths, "--jsonl"]):
        status, out, _ = run(capsys, "search", ix, *argv, "-k", "2")
        lines = out.splitlines()
        assert status == 0 and len(lines) == 2
        for i, line in enumerate(lines):
            answer = json.loads(line)
            assert answer["query"] == {"kind": "image", "path": paths[i]}
            assert [h["rank"] for h in answer["results"]] == [1, 2] and answer["results"][0]["id"] == f"p{i}"
            if i == 0:
                assert answer["results"] == json.loads(one)  # the same results as alone
    status, out, _ = run(capsys, "search", ix, paths[0], "-k", "2", "--jsonl")  # one query, one line
    assert status == 0 and len(out.splitlines()) == 1 and json.loads(out)["results"] == json.loads(one)


def test_a_failed_query_is_reported_and_the_others_go_on(photos, ix, tmp_path, capsys):
    bad = tmp_path / "bad.jpg"
    bad.write_text("not an image\n")
    status, out, err = run(capsys, "search", ix, photos["paths"][0], bad, "--id", "nope", "--id", "p1", "--jsonl")
    assert status == 3  # the first failure's: an unreadable image file
    assert len(err.splitlines()) == 2 and "bad.jpg" in err.splitlines()[0] and "nope" in err.splitlines()[1]
    answers = [json.loads(line) for line in out.splitlines()]
    assert [a.get("error", {}).get("code") for a in answers] == [None, "image_read", "unknown_id", None]
    assert answers[0]["results"][0]["id"] == "p0" and answers[3]["results"][0]["id"] == "p1"
    assert answers[2]["query"] == {"kind": "id", "id": "nope"}
    status, out, err = run(capsys, "search", ix, "--id", "nope")  # alone: the one error line, as before
    assert status == 4 and out == "" and err.startswith("streamk: error: ") and err.count("\n") == 1


def stored(ix):
    from streamk.index import open_index

    with open_index(ix, readonly=True) as idx:
        ids = sorted(idx.ids())
        return ids, np.stack([idx.vector(i) for i in ids]).astype(np.float64)


@pytest.mark.parametrize("which", ["single", "sharded"])
def test_an_indexed_image_as_the_query(ix, sharded, which, capsys):
    """``--id``: the first stage ranks by the inner products of the stored vectors (numpy);
    the second stage verifies with the image's stored geometry, so it finds itself with
    every one of its words as inliers."""
    path, p2 = (ix, "p2") if which == "single" else (sharded, "p2.png")
    ids, V = stored(path)
    assert len(ids) == N_INDEXED
    q = ids.index(p2)
    status, out, _ = run(capsys, "search", path, "--id", p2, "-k", "5", "--verify", "0", "--expand", "0",
                         "--mode", "exact", "--json")
    assert status == 0
    hits = json.loads(out)
    expected = np.sort(V @ V[q])[::-1]
    np.testing.assert_allclose([h["score"] for h in hits], expected, rtol=0, atol=1e-5)
    assert hits[0]["id"] == p2 and all(h["inliers"] is None for h in hits)
    status, out, _ = run(capsys, "search", path, "--id", p2, "-k", "5", "--jsonl")
    answer = json.loads(out)
    assert status == 0 and answer["query"] == {"kind": "id", "id": p2}
    top = answer["results"][0]
    assert top["id"] == p2 and top["verified"] and top["inliers"] >= 8
    # a verified result says how significant it is; an unverified one checked says why not
    assert top["why"] is None and top["log10_nfa"] <= math.log10(VerificationParams().false_alarms_per_pair)
    from streamk.verification import WHY_NOT_VERIFIED
    for hit in answer["results"][1:]:
        assert (hit["why"] is None) == (hit["verified"] or hit["inliers"] is None)
        assert hit["why"] is None or hit["why"] in WHY_NOT_VERIFIED
    # the table shows the same significance, with what it means
    status, out, _ = run(capsys, "search", path, "--id", p2, "-k", "5")
    lines = out.splitlines()
    assert status == 0 and "log10 NFA" in lines[0]
    column = lines[0].index("log10 NFA") + len("log10 NFA")  # right-aligned under its header
    for line, hit in zip(lines[1:6], answer["results"]):
        shown = line[:column].split()[-1] if hit["log10_nfa"] is not None else ""
        assert shown == ("" if hit["log10_nfa"] is None else f"{hit['log10_nfa']:.1f}"), line
    assert any(line.startswith("(log10 NFA: ") for line in lines)
    # the bar of the mark: only what clears it is verified; a bar out of (0, 1) is one line
    status, out, _ = run(capsys, "search", path, "--id", p2, "-k", "5", "--jsonl", "--false-alarms-per-pair", "1e-12")
    assert status == 0
    for hit in json.loads(out)["results"]:
        assert hit["verified"] == (hit["log10_nfa"] is not None and hit["log10_nfa"] <= -12), hit
    status, out, err = run(capsys, "search", path, "--id", p2, "--false-alarms-per-pair", "2")
    assert status == 2 and "false_alarms_per_pair must be a number in (0, 1)" in err and len(err.splitlines()) == 1


def test_photos_after_an_id_are_queries_too(photos, ix, capsys):
    """``search IDX --id X q.jpg``: the photo after --id is a query as one before it is
    (argparse alone called it unrecognised); photos first, then the ids, as documented."""
    p0, p1 = photos["paths"][:2]
    status, out, err = run(capsys, "search", ix, "--id", "p2", p0, "-k", "2", "--jsonl", "--", p1)
    assert status == 0 and err == "", err
    answers = [json.loads(line) for line in out.splitlines()]
    assert [a["query"] for a in answers] == [{"kind": "image", "path": p0}, {"kind": "image", "path": p1},
                                             {"kind": "id", "id": "p2"}]
    assert [a["results"][0]["id"] for a in answers] == ["p0", "p1", "p2"]
    with pytest.raises(SystemExit) as e:  # an unknown option is still one line naming it (not the photos)
        main(["search", str(ix), "--id", "p2", p0, "--bogus"])
    assert e.value.code == 2 and "unrecognized arguments: --bogus (" in capsys.readouterr().err


def test_a_box_past_the_photo_is_clipped_and_one_outside_it_is_one_line(photos, ix, capsys):
    """As the server and the Python API: the box reaching past the photo searches its part
    inside (p1 verified, its region inside the 256 px photo); a box outside is exit 2."""
    status, out, _ = run(capsys, "search", ix, photos["paths"][1], "-k", "1", "--box", "32", "40", "9000", "9000",
                         "--json")
    top = json.loads(out)[0]
    assert status == 0 and top["id"] == "p1" and top["verified"], top
    assert np.allclose(top["region"], [[32, 40], [255.5, 40], [255.5, 255.5], [32, 255.5]], atol=1.0)
    status, out, err = run(capsys, "search", ix, photos["paths"][1], "--box", "300", "0", "400", "100")
    assert status == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("streamk: error: box (300, 0, 400, 100) lies outside the image, which is 256 x 256 pixels")


def test_box_does_not_apply_to_an_id_and_a_query_is_needed(ix, capsys):
    assert run(capsys, "search", ix, "--id", "p1", "--box", "0", "0", "9", "9")[0] == 2
    with pytest.raises(SystemExit) as e:
        main(["search", str(ix)])
    assert e.value.code == 2 and "give a query" in capsys.readouterr().err


# ---------------------------------------------------------------- --server
def test_the_client_reads_the_servers_error_codes_back_to_their_classes():
    """One error_code (streamk.errors) names every error for the server; the client's
    error_class inverts it for every class, so a server error exits as it would here."""
    pytest.importorskip("fastapi")
    from streamk import errors
    from streamk.cli.remote import error_class
    from streamk.server import error_code as servers

    assert servers is errors.error_code
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.StreamkError)]
    assert len(classes) > 30 and all(error_class(servers(c.__name__)) is c for c in classes)


def test_search_through_a_running_server(photos, ix, tmp_path, capsys):
    """``--server URL``: the same answers as the same search here (photos and ids), the
    token from --token-file or $STREAMK_TOKEN, and the server's errors as one line with
    the status of the same error here."""
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from helpers.server import Server

    server = Server(ix, tmp_path / "srv").start()
    try:
        token_file = tmp_path / "srv" / "token.txt"
        queries = [photos["paths"][3], photos["paths"][6], "--id", "p1"]
        res = run_python("-m", "streamk.cli", "search", "--server", server.url, "--token-file", token_file, *queries,
                         "-k", "3", "--jsonl", timeout=120)
        assert res.returncode == 0, res.stderr + server.log()
        remote = [json.loads(line) for line in res.stdout.splitlines()]
        _, out, _ = run(capsys, "search", ix, *queries, "-k", "3", "--jsonl")
        here = [json.loads(line) for line in out.splitlines()]
        assert len(remote) == len(here) == 3
        for r, h in zip(remote, here):
            assert [x["id"] for x in r["results"]] == [x["id"] for x in h["results"]]
            np.testing.assert_allclose([x["score"] for x in r["results"]], [x["score"] for x in h["results"]],
                                       atol=1e-5)
            assert [x["inliers"] for x in r["results"]] == [x["inliers"] for x in h["results"]]
            assert r["query"]["kind"] == h["query"]["kind"] and r["query"].get("path") == h["query"].get("path")
        piped = run_python("-m", "streamk.cli", "search", "--server", server.url, "--token-file", token_file, "-",
                           "-k", "3", "--jsonl", input=Path(photos["paths"][3]).read_bytes(), text=False, timeout=120)
        assert piped.returncode == 0, piped.stderr
        assert [x["id"] for x in json.loads(piped.stdout)["results"]] == [x["id"] for x in here[0]["results"]]
        _check_server_errors(server, token_file)
    finally:
        server.stop()


def _check_server_errors(server, token_file):
    def search(*argv, env=None):
        from helpers.processes import subprocess_env

        res = run_python("-m", "streamk.cli", "search", "--server", *argv, timeout=120,
                         env=subprocess_env(**(env or {})))
        assert "Traceback" not in res.stderr
        return res.returncode, res.stderr

    status, err = search(server.url, "--id", "p1")  # no token
    assert status == 2 and err.count("\n") == 1 and "401 unauthorized" in err and "--token-file" in err
    status, err = search(server.url, "--id", "nope", env={"STREAMK_TOKEN": server.token})  # the token from the env
    assert status == 4 and err.count("\n") == 1 and err.startswith("streamk: error: ") and "unknown_id" in err
    status, err = search(f"http://127.0.0.1:{free_port()}", "--id", "p1", "--timeout", "5")  # nothing listens
    assert status == 7 and err.count("\n") == 1 and "no answer from the server" in err
    status, err = search("not-a-url", "--id", "p1")
    assert status == 2 and "--server" in err


def test_a_search_through_a_server_imports_no_stage():
    """``--server``: nothing of numpy, Numba or the index is loaded here (the server has
    them), so the command starts in the time of Python itself."""
    stages = ("numpy", "numba", "lmdb", "streamk.index", "streamk.features", "streamk.encoding", "streamk.server")
    code = ("import sys\nfrom streamk.cli import main\n"
            f"status = main(['search', '--server', 'http://127.0.0.1:{free_port()}', '--id', 'p1', '--timeout', '5'])\n"
            f"print(status, [m for m in {stages!r} if m in sys.modules])")
    res = run_python("-c", code, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "7 []", res.stdout + res.stderr


def test_a_redirect_is_not_followed_and_a_large_file_not_sent(photos, monkeypatch, capsys):
    """A server answering with a redirect: refused as one line (urllib would resend the
    token there); a photo over --max-file-size: refused here, before any request."""
    import http.server
    import threading

    seen = []

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            seen.append((self.path, self.headers.get("Authorization")))
            self.send_response(302 if self.path == "/search" else 200)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_port}/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Redirecting)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("STREAMK_TOKEN", "a-token-of-enough-characters")
        url = f"http://127.0.0.1:{httpd.server_port}"
        status, out, err = run(capsys, "search", "--server", url, "--id", "p1", "--timeout", "10")
        assert status == 2 and out == "" and err.count("\n") == 1 and "redirect" in err
        assert seen == [("/search", "Bearer a-token-of-enough-characters")]  # not resent to /elsewhere
        status, _, err = run(capsys, "search", "--server", url, photos["paths"][0], "--max-file-size", "100")
        assert status == 3 and "--max-file-size" in err and len(seen) == 1  # nothing sent
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=30)


# ---------------------------------------------------------------- what a command loads (issue 26: start-up)
# Libraries a command may need, none of which building the parser or printing a help needs.
LIBRARIES = ("numpy", "numba", "llvmlite", "scipy", "sklearn", "tqdm", "lmdb", "cv2", "pyhesaff", "PIL", "fastapi",
             "uvicorn", "dask", "distributed", "ipywidgets", "matplotlib")
# streamk's modules that the parser and the helps may load: the CLI and the bottom layer
PARSER_MODULES = ("streamk", "streamk.cli", "streamk.errors", "streamk.exports", "streamk.schema", "streamk.checks",
                  "streamk.config", "streamk.units")  # the bottom layer: no library, no kernel

LOADED = ("import json, sys\n"
          "from numba.core.dispatcher import Dispatcher\n" "{run}\n"
          "kernels = sorted(f'{{m}}.{{n}}' for m, mod in list(sys.modules.items()) if m.startswith('streamk.')\n"
          "                 for n, f in vars(mod).items() if isinstance(f, Dispatcher) and f.overloads)\n"
          "print(json.dumps({{'modules': sorted(sys.modules), 'kernels': kernels}}))")


def test_the_parser_and_every_help_load_no_library_and_no_stage():
    """Building the parser and every ``--help`` (``streamk --help``, ``streamk search
    --help``, ...) loads no library a command drives (Numba, SciPy, numpy, tqdm, LMDB, an
    extractor) and no module of streamk outside the CLI and the bottom layer (no kernel):
    checked on what the process loaded, not on a time."""
    code = ("import json, sys\nfrom streamk.cli import build_parser, main\nfrom helpers.cli import every_help\n"
            "for argv in (['--help'], ['search', '--help'], ['index', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "every_help(build_parser())\nprint(json.dumps(sorted(sys.modules)))")
    res = run_python("-c", code, timeout=120)
    assert res.returncode == 0, res.stderr
    modules = json.loads(res.stdout.strip().splitlines()[-1])
    assert [m for m in modules if m.split(".")[0] in LIBRARIES] == []
    stages = [m for m in modules if m.startswith("streamk") and m not in PARSER_MODULES
              and not m.startswith("streamk.cli.")]
    assert stages == []


def test_a_search_by_id_loads_only_what_it_runs(ix):
    """``streamk search IDX --id ID`` encodes no photo: no extractor library, no kernel of
    the encoding loaded from Numba's cache; and nothing of ingestion, training, integrity
    checks, the server, the evaluation or the --server client (each loads on its own
    command)."""
    run = f"from streamk.cli import main\nassert main(['search', {str(ix)!r}, '--id', 'p1', '--json']) == 0"
    res = run_python("-c", LOADED.format(run=run), timeout=300)
    assert res.returncode == 0, res.stderr
    loaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert "numba" in loaded["modules"] and loaded["kernels"]  # (the check below would see a kernel)
    assert [k for k in loaded["kernels"] if k.startswith("streamk.encoding.")] == []
    unused = ("cv2", "pyhesaff", "tqdm", "asyncio", "urllib.request", "ssl", "scipy.linalg", "sklearn", "fastapi",
              "streamk.pipeline", "streamk.server", "streamk.evaluation", "streamk.demo",
              "streamk.index.integrity_check", "streamk.index.backup", "streamk.index.upgrade")
    assert [m for m in unused if m in loaded["modules"]] == []


def test_a_photo_search_starts_numba_without_scipy_linalg_and_finds_the_same(photos, ix):
    """A typed photo search loads SciPy's two BLAS extension modules alone
    (streamk.cli.startup), not the scipy.linalg package (0.14 s); its answer is the one the
    same search gives in a process that imported scipy.linalg first; after it, scipy.linalg
    imports as usual, holding those same modules, and Numba's and the Gram's BLAS agree
    with numpy."""
    search = f"main(['search', {str(ix)!r}, {str(photos['paths'][2])!r}, '-k', '3', '--json'])"
    run = (f"from streamk.cli import main\nassert {search} == 0\nalone = 'scipy.linalg' in sys.modules\n"
           "import numpy as np, numba, scipy.linalg\nfrom streamk.encoding.aggregation import gram\n"
           "P = np.random.default_rng(0).standard_normal((50, 40))\n"
           "dot = numba.njit(lambda a: np.dot(a, a.T))\n"
           "same = [scipy.linalg.cython_blas is sys.modules['scipy.linalg.cython_blas'],\n"
           "        scipy.linalg.blas.dsyrk is sys.modules['scipy.linalg._fblas'].dsyrk,\n"
           "        bool(np.allclose(gram(P), P @ P.T)), bool(np.allclose(dot(P), P @ P.T))]\n"
           "print(json.dumps([alone, same]), file=sys.stderr)")
    res = run_python("-c", LOADED.format(run=run), timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stderr.strip().splitlines()[-1]) == [False, [True] * 4]
    answer = res.stdout.split('\n{"modules"')[0]
    first = run_python("-c", f"import scipy.linalg, sys\nfrom streamk.cli import main\nsys.exit({search})", timeout=300)
    assert first.returncode == 0, first.stderr
    assert json.loads(answer) == json.loads(first.stdout) and json.loads(answer)[0]["id"] == "p2"


def test_nprobe_on_an_index_without_a_codec_is_one_note_and_the_same_answer(photos, ix, capsys):
    """--nprobe on an index searched exactly (no codec): the search answers as without it and
    says once, on one line, that it had no effect (not a Python warning with its source line)."""
    path = photos["paths"][0]
    status, plain, err = run(capsys, "search", ix, path, "-k", "3")
    assert status == 0 and err == ""
    status, out, err = run(capsys, "search", ix, path, photos["paths"][1], "-k", "3", "--nprobe", "32")
    assert status == 0 and plain.rstrip("\n") in out
    assert err.splitlines() == ["streamk: note: nprobe=32 has no effect: this index has no trained codec, so every "
                                "search is exact (streamk index train makes one)"], err


def test_a_sideways_tagged_photo_is_searched_upright(photos, ix, tmp_path, capsys):
    """A phone's portrait photo: pixels stored turned a quarter, an EXIF tag saying so. The
    index turns it upright first (features version 3): it finds the photo, verified, under a
    map that turns nothing. (OpenCV SIFT, these tests' extractor, would match it turned too;
    Hessian-affine, the default, is upright and would not: tests/features/test_orientation.py.)"""
    from PIL import Image

    img = Image.open(photos["paths"][2]).convert("L")
    stored = img.transpose(Image.Transpose.ROTATE_90)  # a viewer turns it back: Orientation 6
    exif = stored.getexif()
    exif[0x0112] = 6
    q = tmp_path / "portrait.jpg"
    stored.save(q, "JPEG", quality=95, exif=exif)
    assert main(["search", str(ix), str(q), "-k", "1", "--json"]) == 0
    hit = json.loads(capsys.readouterr().out)[0]
    assert hit["id"] == "p2" and hit["verified"]
    np.testing.assert_allclose(np.asarray(hit["affine"])[:, :2], np.eye(2), atol=0.05)  # upright, same scale

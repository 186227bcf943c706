"""Every JSON output names the version of its schema (streamk.schema), where its readers
do not trip on it: a top-level ``schema_version`` in the CLI's JSON objects and in each
line of JSON lines, in each result of ``search --json``'s array, and the header
``Streamk-Schema-Version`` on every answer of the server (bodies unchanged)."""

import json

import pytest

from streamk.cli import main
from streamk.schema import JSON_SCHEMA_VERSION, SCHEMA_VERSION_HEADER

pytest.importorskip("cv2")
from helpers.images import textured  # noqa: E402


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """4 textured images indexed with OpenCV SIFT and a VLAD k=4 encoder."""
    from streamk import Encoder
    from streamk.features import make_extractor
    from streamk.index import StreamingIndex

    root = tmp_path_factory.mktemp("schema")
    paths = [textured(str(root / "imgs" / f"img{i}.png"), i) for i in range(4)]
    sift = make_extractor("sift")
    enc = Encoder(embedding="vlad", k=4, aggregation="gmp").fit([sift.extract(p).descriptors for p in paths])
    with StreamingIndex.create(root / "ix", enc, vector_dtype="float32", extractor=sift) as idx:
        for p in paths:
            idx.add(p.rsplit("/", 1)[1], image_path=p)
    return root


def test_the_version_is_a_positive_integer():
    assert isinstance(JSON_SCHEMA_VERSION, int) and JSON_SCHEMA_VERSION >= 1


def test_search_json_keeps_its_array_and_each_result_names_the_version(index, capsys):
    assert main(["search", str(index / "ix"), str(index / "imgs" / "img1.png"), "-k", "3", "--json"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out)
    assert isinstance(rows, list) and len(rows) == 3 and rows[0]["id"] == "img1.png"
    assert all(r["schema_version"] == JSON_SCHEMA_VERSION for r in rows)
    assert len(out.splitlines()) == 5  # compact: "[", a result per line, "]"


def test_each_json_line_names_the_version(index, capsys):
    imgs = index / "imgs"
    status = main(["search", str(index / "ix"), str(imgs / "img0.png"), str(imgs / "nothere.png"), "--id", "img2.png",
                   "-k", "2", "--jsonl"])
    assert status != 0  # the missing photo's error, the others answered
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 3 and all(line["schema_version"] == JSON_SCHEMA_VERSION for line in lines)
    assert [("error" in line) for line in lines] == [False, True, False]


def test_index_verify_json_names_the_version(index, capsys):
    assert main(["index", "verify", str(index / "ix"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema_version"] == JSON_SCHEMA_VERSION and report["ok"] is True


def test_every_server_answer_has_the_version_header(tmp_path):
    """A real ``streamk serve``: a JSON answer, an error answer and the page all carry it."""
    pytest.importorskip("httpx")
    from helpers.server import Server, make_index, make_photos

    photos = make_photos(tmp_path / "photos")
    srv = Server(make_index(tmp_path / "idx", photos, n=2), tmp_path, args=["--workers", "1"]).start()
    try:
        with srv.client() as c:
            for path, status in (("/health", 200), ("/stats", 200), ("/images/nothere", 404), ("/", 200)):
                r = c.get(path)
                assert r.status_code == status, (path, r.text)
                assert r.headers[SCHEMA_VERSION_HEADER] == str(JSON_SCHEMA_VERSION), path
            assert "schema_version" not in c.get("/stats").json()  # bodies unchanged
    finally:
        srv.stop()

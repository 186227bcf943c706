"""Errors that reveal nothing (issue 25 item 5): no server path and no CLI command in what
a client is told (the log keeps them); HEAD answered as GET without a body; ``Allow``
listing every method of a path; the schema under the token; a client gone mid-body logged
as such, not as an internal error."""

import socket
from types import SimpleNamespace

import pytest
from helpers.server import running_server

httpx = pytest.importorskip("httpx")

from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from streamk import errors  # noqa: E402
from streamk.server.http_errors import install_error_handlers  # noqa: E402


@pytest.fixture(scope="module")
def served(photos, tmp_path_factory):
    with running_server(photos, tmp_path_factory.mktemp("errors")) as srv:
        yield srv


def test_server_side_errors_name_no_path_and_no_command(tmp_path, caplog):
    index = tmp_path / "where" / "the.index"
    raised = {
        "/corrupt": errors.IndexCorruptError(f"{index}: the index is damaged: block 3; restore it or run "
                                             f"'streamk index verify --repair {index}'"),
        "/full": errors.DiskFullError(f"no space left on the disk holding {index}; free some, then "
                                      f"'streamk index compact {index}'"),
        "/unknown": errors.UnknownIdError(f"no image 'x' in {index}"),
    }
    app = FastAPI()
    app.state.service = SimpleNamespace(path=str(index))
    install_error_handlers(app)
    for path, exc in raised.items():
        app.add_api_route(path, (lambda exc: lambda: (_ for _ in ()).throw(exc))(exc))
    client = TestClient(app, raise_server_exceptions=False)
    for path, status, code in [("/corrupt", 500, "index_corrupt"), ("/full", 507, "disk_full"),
                               ("/unknown", 404, "unknown_id")]:
        with caplog.at_level("INFO", logger="streamk.server"):
            r = client.get(path)
        assert r.status_code == status and r.json()["error"]["code"] == code, r.text
        message = r.json()["error"]["message"]
        assert str(tmp_path) not in r.text and "streamk " not in message, message
        if status >= 500:
            assert str(index) in caplog.text  # the log keeps what the operator needs
    assert "the index" in client.get("/unknown").json()["error"]["message"]


def test_head_answers_as_get_without_a_body_and_allow_lists_every_method(served):
    with served.client() as c:
        for path in ("/health", "/stats", "/images/p0", "/images/p0/duplicates", "/"):
            get, head = c.get(path), c.head(path)
            assert get.status_code == head.status_code == 200, (path, head.status_code)
            assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"]
            assert int(head.headers["content-length"]) == len(get.content)
        for method, path, allow in [("POST", "/images/p0", "DELETE, GET, HEAD, PUT"), ("PUT", "/stats", "GET, HEAD"),
                                    ("GET", "/search", "POST"), ("HEAD", "/search", "POST"),
                                    ("DELETE", "/images", "POST")]:
            r = c.request(method, path)
            assert r.status_code == 405 and r.headers["allow"] == allow, (method, path, r.headers.get("allow"))


def test_the_schema_needs_the_token_when_reads_do(served):
    assert httpx.get(f"{served.url}/openapi.json").status_code == 401
    with served.client() as c:
        assert "/search" in c.get("/openapi.json").json()["paths"]


def test_a_client_gone_mid_body_is_logged_as_a_disconnect(served, wait_until):
    for route in ("/search", "/images"):
        with socket.create_connection(("127.0.0.1", served.port), timeout=30) as s:
            s.sendall(f"POST {route} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {served.token}\r\n"
                      f"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"id\": ".encode())
        wait_until(lambda: served.log().count("disconnected before sending the whole body") >= 1, 30,
                   "the server to log the client's disconnect")
    wait_until(lambda: served.log().count(" 499 ") >= 2, 30, "both requests logged with status 499")
    log = served.log()
    assert "internal error" not in log and "ERROR" not in log and "Traceback" not in log, log[-3000:]


def test_a_pq_search_without_a_codec_says_what_a_client_can_do(served):
    """The 400 not_fitted once named the library's methods (train_pq() or train())."""
    with served.client() as c:
        r = c.post("/search", json={"id": "p1", "k": 3, "mode": "pq"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "not_fitted", r.text
    message = r.json()["error"]["message"]
    assert "mode 'exact'" in message and "train()" not in message and "streamk " not in message, message

"""A client that hangs up on its search, against a real ``streamk serve`` (one worker, two
upload slots) on loopback: the search is cancelled as soon as the server sees the connection
closed, its upload slot is free at once, a describe still waiting for the worker is never run,
and the server answers as before; a write whose client hangs up is still done, whole.

A worker is held on an upload by the test hook ``STREAMK_TEST_WORKER_HOLD`` of
streamk.server.tasks (an upload named NAME waits in its worker while NAME.hold exists, and
each upload described leaves NAME.started). Every wait is bounded."""

import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers.processes import subprocess_env
from helpers.server import Server, make_index, png_bytes

from streamk.server.tasks import HOLD_ENV

httpx = pytest.importorskip("httpx")

WAIT = 60  # seconds before a test gives up on what it waits for (a loaded machine)
BOUNDARY = "streamk-test-boundary"


@pytest.fixture(scope="module")
def served(photos, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("disconnect")
    hold = tmp / "hold"
    hold.mkdir()
    srv = Server(make_index(tmp / "idx", photos, n=2), tmp, args=["--workers", "1", "--max-uploads", "2"],
                 env=subprocess_env(**{HOLD_ENV: str(hold)})).start()
    srv.hold = hold
    try:
        yield srv
    finally:
        srv.stop()


def multipart(name, photo, **fields):
    parts = [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts.append(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="{name}"\r\n'
                 f'Content-Type: image/png\r\n\r\n'.encode() + photo + b"\r\n")
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


def sent(srv, path, name, photo, **fields):
    """A raw connection that has sent a whole multipart request (its photo named ``name``)."""
    body = multipart(name, photo, **fields)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=WAIT)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.token}\r\n"
              f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {len(body)}\r\n\r\n"
              .encode() + body)
    return s


def upload_search(client, name, photo, **fields):
    return client.post("/search", files={"image": (name, photo, "image/png")}, data=fields)


def upload_slot(client, photo):
    """The status of an upload (a multipart search) refused for its box before it needs a
    worker: 400 when it got an upload slot, 503 busy when none was free."""
    return upload_search(client, "probe.png", photo, box="1,2").status_code


def load(client):
    """(uploads in the workers, uploads waiting for one) from /stats."""
    stats = client.get("/stats").json()
    return stats["workers_busy"], stats["worker_queue"]


def test_a_search_whose_client_hangs_up_is_cancelled_and_its_slot_freed(served, photos, wait_until):
    hold, photo = served.hold, png_bytes(photos["paths"][3])
    (hold / "slow.png.hold").touch()
    with served.client() as c, served.client() as c2, ThreadPoolExecutor(1) as background:
        assert upload_slot(c, photo) == 400
        slow = background.submit(upload_search, c2, "slow.png", photo)  # holds one upload slot and the one worker
        wait_until((hold / "slow.png.started").exists, WAIT, "the slow search to hold the worker")
        gone = sent(served, "/search", "gone.png", photo)  # the second slot; its body read, it waits for the worker
        wait_until(lambda: load(c) == (1, 1), WAIT, "the second search to wait for the worker")
        assert upload_slot(c, photo) == 503  # both upload slots taken
        gone.close()
        wait_until(lambda: upload_slot(c, photo) == 400, WAIT, "the slot of the search whose client hung up")
        assert load(c) == (1, 0)  # no longer waiting for the worker, which still holds the slow one
        assert not slow.done()  # freed while the slow one still held its slot and the worker
        wait_until(lambda: "the client closed the connection before its answer" in served.log(), WAIT,
                   "the log line of the cancelled search")
        (hold / "slow.png.hold").unlink()
        assert slow.result(timeout=WAIT).status_code == 200
        after = upload_search(c, "after.png", photo)
        assert after.status_code == 200 and after.json()["results"], after.text
        assert (hold / "after.png.started").exists() and load(c) == (0, 0)
        # described in order: queued for the worker, it would have been described before after.png
        assert not (hold / "gone.png.started").exists()
    log = served.log()
    assert log.count("the client closed the connection before its answer") == 1, log[-3000:]
    assert " POST /search 499 " in log and "Traceback" not in log and "ERROR" not in log, log[-3000:]


def test_a_write_whose_client_hangs_up_is_still_done(served, photos, wait_until):
    hold = served.hold
    (hold / "new.png.hold").touch()
    s = sent(served, "/images", "new.png", png_bytes(photos["paths"][5]), id="new")
    wait_until((hold / "new.png.started").exists, WAIT, "the write's photo in the worker")
    s.close()
    with served.client() as c:
        assert c.get("/health").status_code == 200  # the server's loop has seen the connection closed
        (hold / "new.png.hold").unlink()
        wait_until(lambda: c.get("/images/new").status_code == 200, WAIT, "the image written")
        wait_until(lambda: " POST /images 201 " in served.log(), WAIT, "the write's answer")
        assert c.get("/stats").json()["images"] == 3
    assert "/images: the client closed the connection" not in served.log()

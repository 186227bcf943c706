"""Fixtures of the server tests: the photos and their encoder (once per run), servers
started on demand and stopped after each test."""

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("cv2")
pytest.importorskip("httpx")

from helpers.server import Server, make_photos  # noqa: E402


@pytest.fixture(scope="session")
def photos(tmp_path_factory):
    return make_photos(tmp_path_factory.mktemp("photos"))


@pytest.fixture
def make_server(tmp_path):
    servers = []

    def make(index, **kw):
        s = Server(index, tmp_path / f"srv{len(servers)}", **kw)
        servers.append(s)
        return s.start()
    yield make
    for s in servers:
        s.stop()



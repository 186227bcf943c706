"""POST /backup (issue 25, item 6): token-guarded, written under --backup-dir with a name the
server chooses, verified, taken while the server adds and searches; 404 backups_off without a
backup folder; no answer shows a server path."""

import threading

import pytest
from helpers.server import make_index

from streamk.index import StreamingIndex, check_index

httpx = pytest.importorskip("httpx")


def error_of(resp, status, code):
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] == code, resp.text
    return resp.json()["error"]["message"]


def test_a_backup_is_taken_under_the_backup_dir_while_the_server_writes(photos, tmp_path, make_server):
    index = make_index(tmp_path / "idx", photos, n=3)
    folder = tmp_path / "backups"
    srv = make_server(index, args=["--workers", "1", "--backup-dir", str(folder)])
    auth = {"Authorization": f"Bearer {srv.token}"}
    with httpx.Client(base_url=srv.url, timeout=120) as c:
        error_of(c.post("/backup"), 401, "unauthorized")
        assert not any(folder.iterdir())
        answers, stop = [], threading.Event()

        def write_and_search():  # bounded: until the backup answered, at most 200 requests
            for i in range(200):
                if stop.is_set():
                    break
                answers.append(c.post("/images", json={"id": f"v{i}", "vector": [1.0] + [0.001 * i] * 511},
                                      headers=auth).status_code)
                answers.append(c.post("/search", json={"id": "p0", "k": 1}, headers=auth).status_code)
        t = threading.Thread(target=write_and_search)
        t.start()
        try:
            r = c.post("/backup", headers=auth)
        finally:
            stop.set()
            t.join(120)
        assert r.status_code == 201, r.text
        body = r.json()
        assert str(tmp_path) not in r.text and body["verified"] and body["shards"] == 1
        assert set(answers) <= {200, 201}, answers
        stored = c.get("/stats", headers=auth).json()["images"]
    made = folder / body["backup"]
    assert [p.name for p in folder.iterdir()] == [body["backup"]]  # nothing else, no partial folder
    assert check_index(made, progress=False).ok
    with StreamingIndex.open(made, readonly=True) as copy:  # restore: a backup is an index
        assert {"p0", "p1", "p2"} <= set(copy.ids()) and len(copy) == body["images"] <= stored
        assert copy.vector("p1") is not None


def test_without_a_backup_dir_backups_are_off(photos, tmp_path, make_server):
    index = make_index(tmp_path / "idx", photos, n=1, local_features=False)
    srv = make_server(index, args=["--workers", "1"])
    with httpx.Client(base_url=srv.url, timeout=120) as c:
        error_of(c.post("/backup"), 401, "unauthorized")
        message = error_of(c.post("/backup", headers={"Authorization": f"Bearer {srv.token}"}), 404, "backups_off")
        assert str(tmp_path) not in message
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("srv")) == ["idx"]

"""An index replaced under a running ``streamk serve`` (a backup restored in its place, as
the README's "Restore:" describes, while the server runs): the server kept its LMDB
environment on the old files, answered searches from them and wrote uploads into them
(into a deleted file when the folder was removed: lost at the restart), and said nothing.
It notices now: every request that touches the index is refused with 503 index_replaced,
/health says so, nothing is written to either index; a server whose index was only
written to is not affected."""

import shutil

import pytest
from helpers.copies import sharded_copy
from helpers.processes import run_python
from helpers.server import make_index
from helpers.waiting import poll

from streamk.index import StreamingIndex, backup, open_index

httpx = pytest.importorskip("httpx")

PLACE_CHECK_WAIT = 30.0  # s: a bound on the wait for the server to notice (it looks once a second)


def refused(resp):
    """The message of a 503 index_replaced answer."""
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"]["code"] == "index_replaced", resp.text
    return resp.json()["error"]["message"]


def restore(index, bk, how):
    """The README's restore, done under the running server: the backup moved into the index's place."""
    if how == "move":
        index.rename(index.with_name(index.name + ".bad"))
    else:
        shutil.rmtree(index)
    bk.rename(index)


def vector_body(image_id, dim, seed):
    return {"id": image_id, "vector": [1.0] + [0.01 * seed] * (dim - 1)}


def test_writes_do_not_misfire_the_check(photos, tmp_path, make_server):
    """Writes change data.mdb's size and times, never its inode: the server goes on serving
    (a check is made before every write, so these writes are each looked at)."""
    index = make_index(tmp_path / "idx", photos, n=2)
    srv = make_server(index, args=["--workers", "1"])
    with srv.client() as c:
        dim = c.get("/stats").json()["dim"]
        for i in range(30):  # a few hundred KB more in data.mdb
            assert c.post("/images", json=vector_body(f"v{i}", dim, i)).status_code == 201
        assert c.put("/images/v1", json={"metadata": {"album": "c"}}).status_code == 200
        assert c.delete("/images/v2").status_code == 200
        assert c.post("/images", files={"image": ("p3.png", open(photos["paths"][3], "rb").read())},
                      data={"id": "p3"}).status_code == 201
        assert c.get("/health").json()["status"] == "ok"
        assert c.post("/search", json={"id": "p3", "k": 1}).json()["results"][0]["id"] == "p3"
        assert c.get("/stats").json()["images"] == 2 + 30 - 1 + 1
    assert "replaced" not in srv.log()


@pytest.mark.parametrize("how", ["move", "delete"])
def test_a_server_refuses_every_request_once_its_index_is_replaced(photos, tmp_path, make_server, how):
    index = make_index(tmp_path / "idx", photos, n=3)
    backup(index, tmp_path / "bk", False)
    with StreamingIndex.open(tmp_path / "bk") as bk:  # the backup differs from what the server holds
        bk.remove(["p2"])
    srv = make_server(index, args=["--workers", "1"])
    with srv.client() as c:
        dim = c.get("/stats").json()["dim"]
        assert c.post("/images", json=vector_body("before", dim, 1)).status_code == 201
        restore(index, tmp_path / "bk", how)
        if how == "move":  # a write right away: looked at before it is made, refused
            message = refused(c.post("/images", json=vector_body("after", dim, 2)))
        else:  # reads: refused within about a second
            poll(lambda: c.post("/search", json={"id": "p0", "k": 1}).status_code == 503, PLACE_CHECK_WAIT,
                 "the search refused")
            message = refused(c.post("/search", json={"id": "p0", "k": 1}))
        assert "replaced while the server ran" in message and "restart the server" in message
        assert str(tmp_path) not in message  # no server path shown to a client
        # every request that touches the index, from now on
        refused(c.post("/images", json=vector_body("after", dim, 2)))
        refused(c.post("/images", files={"image": ("p3.png", open(photos["paths"][3], "rb").read())},
                       data={"id": "p3"}))
        refused(c.put("/images/p0", json={"metadata": {"album": "z"}}))
        refused(c.delete("/images/p1"))
        refused(c.post("/search", json={"vector": [1.0] * dim, "k": 1}))
        refused(c.post("/search", files={"image": ("p0.png", open(photos["paths"][0], "rb").read())}))
        for path in ("/stats", "/images/p0", "/images/p0/thumbnail", "/images/p0/duplicates"):
            refused(c.get(path))
        health = c.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "index_replaced", health.text
        assert set(health.json()) == {"status", "reads_need_token", "writable", "filters", "message"}
        assert "restart the server" in health.json()["message"]
        assert httpx.get(f"{srv.url}/health").status_code == 503  # no token needed
        assert c.get("/").status_code == 200  # the page itself, which says what /health says
    # nothing written to the restored index, nor to the old one after the restore
    with open_index(index, readonly=True) as now:
        assert sorted(now.ids()) == ["p0", "p1"] and now.metadata("p0")["album"] == "a"
    if how == "move":
        with open_index(tmp_path / "idx.bad", readonly=True) as old:
            assert sorted(old.ids()) == ["before", "p0", "p1", "p2"]
    # a client of the server (streamk search --server) gets one line and the exit code of the index's state
    res = run_python("-m", "streamk.cli", "search", "--server", srv.url, "--token-file", srv.tmp / "token.txt",
                     "--id", "p0", timeout=120)
    assert res.returncode == 4 and len(res.stderr.splitlines()) == 1, res
    assert "index_replaced" in res.stderr or "replaced while the server ran" in res.stderr, res.stderr
    log = srv.log()
    assert log.count("was replaced while the server ran") == 1 and f"the index at {index} was replaced" in log, log
    # a restart serves the restored index
    srv.stop()
    srv = make_server(index, args=["--workers", "1"])
    with srv.client() as c:
        assert c.get("/stats").json()["images"] == 2 and c.get("/health").json()["status"] == "ok"


def test_a_sharded_index_replaced_under_the_server(photos, tmp_path, make_server):
    make_index(tmp_path / "one", photos, n=3)
    with StreamingIndex.open(tmp_path / "one") as single:
        sharded_copy(single, tmp_path / "idx", shards=2).close()
    backup(tmp_path / "idx", tmp_path / "bk", False)
    srv = make_server(tmp_path / "idx", args=["--workers", "1", "--backup-dir", str(tmp_path / "backups")])
    with srv.client() as c:
        dim = c.get("/stats").json()["dim"]
        assert c.get("/stats").json()["shards"] == 2
        assert c.post("/images", json=vector_body("before", dim, 1)).status_code == 201
        restore(tmp_path / "idx", tmp_path / "bk", "move")
        refused(c.post("/backup"))  # looked at at once: a backup is copied from the path, now another index's
        assert not any((tmp_path / "backups").iterdir())
        refused(c.post("/images", json=vector_body("after", dim, 2)))
        refused(c.post("/search", json={"id": "p0", "k": 1}))
        assert c.get("/health").json()["status"] == "index_replaced"
    with open_index(tmp_path / "idx", readonly=True) as now:
        assert sorted(now.ids()) == ["p0", "p1", "p2"]

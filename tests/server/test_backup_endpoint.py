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


def test_a_backup_dir_that_takes_no_files_is_said_at_start_and_never_named_to_a_client(photos, tmp_path,
                                                                                         make_server):
    """A --backup-dir on a read-only disk started a server whose every POST /backup answered 400
    output_file "cannot write the backup to /srv/.../backup-...: ... does not take new files": a client
    told it sent something wrong, and shown the server's path. It is said at start (one line, exit 2);
    a folder that turns read-only later answers 500 backup_failed, the reason in the server's log."""
    from helpers.disks import remount_read_only, tmpfs
    from helpers.processes import run_python

    from streamk.errors import ConfigError
    from streamk.server.routes.backup import backup_folder

    index = make_index(tmp_path / "idx", photos, n=1, local_features=False)
    with tmpfs(tmp_path / "disk", "16m") as disk:
        srv = make_server(index, args=["--workers", "1", "--backup-dir", str(disk)])
        remount_read_only(disk)
        with pytest.raises(ConfigError, match="--backup-dir .*does not take new files"):
            backup_folder(disk, index)
        proc = run_python("-m", "streamk.cli", "serve", index, "--port", "0", "--workers", "1", "--backup-dir",
                          disk, timeout=120)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc
        assert proc.stderr.startswith("streamk: error: --backup-dir ") and "Read-only file system" in proc.stderr
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            r = c.post("/backup", headers={"Authorization": f"Bearer {srv.token}"})
            message = error_of(r, 500, "backup_failed")
            assert str(tmp_path) not in r.text and "log" in message
            assert c.get("/health").status_code == 200
        assert "Read-only file system" in srv.log() and not list(disk.iterdir())

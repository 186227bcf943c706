"""Online backups (issue 25, item 6): a copy taken while another process adds images verifies
clean and holds exactly a prefix of the acknowledged writes; a sharded index backs up every
shard with its manifest; dest is whole or absent; the CLI."""

import json
import threading

import numpy as np
import pytest

from helpers.index import make_encoder, vectors
from helpers.processes import run_python, start_python
from helpers.waiting import poll
from streamk.errors import IndexExistsError, NotAnIndexError
from streamk.index import ShardedIndex, StreamingIndex, backup, check_index, open_index

WRITER = r"""
import sys
import numpy as np
from helpers.index import vectors
from streamk.index import StreamingIndex

V = vectors(5, int(sys.argv[2]))
with StreamingIndex.open(sys.argv[1]) as idx:
    print("open", flush=True)
    for i, v in enumerate(V):
        idx.add(f"w{i:05d}", vector=v)
        print(f"w{i:05d}", flush=True)  # acknowledged: committed before this line is written
"""


@pytest.fixture(scope="module")
def encoder():
    return make_encoder()


def test_a_backup_during_an_ingest_holds_exactly_a_prefix_of_the_acknowledged_writes(tmp_path, encoder):
    path = tmp_path / "ix"
    V0 = vectors(1, 300)
    with StreamingIndex.create(path, encoder, vector_dtype="float32") as idx:
        idx.add_many([{"id": f"a{i:05d}", "vector": v} for i, v in enumerate(V0)], batch_size=100)
    n_writes = 4000  # bounded: the writer stops after these, the test after its timeout
    child = start_python("-c", WRITER, path, n_writes, stdout=-1, stderr=-1)
    acked, lock = [], threading.Lock()

    def read_acks():
        for line in child.stdout:
            with lock:
                acked.append(line.strip())
    reader = threading.Thread(target=read_acks, daemon=True)
    reader.start()
    try:
        poll(lambda: len(acked) >= 150 or child.poll() is not None, 120, interval=0.01)
        assert len(acked) >= 150, child.stderr.read() if child.poll() is not None else "writer too slow"
        with lock:
            before = [a for a in acked if a != "open"]
        report = backup(path, tmp_path / "bk" / "copy1", progress=False)
        with lock:
            after = [a for a in acked if a != "open"]
    finally:
        child.kill()
        child.wait(30)
    written = [f"w{i:05d}" for i in range(n_writes)]
    assert after == written[:len(after)]  # the writer acknowledged in order
    with StreamingIndex.open(tmp_path / "bk" / "copy1", readonly=True) as copy:
        ids = set(copy.ids())
        seqs = {i: copy.info(i)["seq"] for i in ids}
    got = sorted(i for i in ids if i.startswith("w"))
    n = len(got)
    assert len(before) <= n <= len(after), (len(before), n, len(after))
    assert got == written[:n]  # a prefix: every write acknowledged before is in, nothing unacknowledged
    assert ids == {f"a{i:05d}" for i in range(300)} | set(got)
    # the copy's point: every change up to its seq, nothing after
    assert report.shards[0]["seq"] == max(seqs.values()) and report.shards[0]["images"] == len(ids)
    assert sorted(seqs.values()) == list(range(1, len(ids) + 1))
    assert check_index(tmp_path / "bk" / "copy1", progress=False).ok
    assert not [p for p in (tmp_path / "bk").iterdir() if p.name != "copy1"]  # no partial folder left
    info = json.loads((tmp_path / "bk" / "copy1" / "backup.json").read_text())
    assert info["shards"][0]["seq"] == report.shards[0]["seq"] and info["images"] == len(ids)


def test_a_backup_searches_like_the_index_and_is_smaller_after_removals(tmp_path, encoder):
    path = tmp_path / "ix"
    V = vectors(2, 600)
    with StreamingIndex.create(path, encoder, vector_dtype="float32") as idx:
        idx.add_many([{"id": f"i{i:04d}", "vector": v} for i, v in enumerate(V)], batch_size=200)
        idx.remove([f"i{i:04d}" for i in range(0, 600, 2)])
        want = idx.search(V[:20], k=5, mode="exact")[1].tolist()
        report = backup(path, tmp_path / "copy", progress=False)
    assert report.images == 300
    with open_index(tmp_path / "copy", readonly=True) as copy:  # a backup is an index: restore is opening it
        got = copy.search(V[:20], k=5, mode="exact")[1].tolist()
    assert got == want
    assert report.bytes <= (path / "data.mdb").stat().st_size


def test_a_sharded_backup_copies_every_shard_and_the_manifest(tmp_path, encoder):
    V = vectors(3, 200)
    with ShardedIndex.create(tmp_path / "sh", encoder, shards=3) as idx:
        idx.add_many([{"id": f"s{i}", "vector": v} for i, v in enumerate(V)])
        want = idx.search(V[:10], k=4, mode="exact")[1].tolist()
    report = backup(tmp_path / "sh", tmp_path / "shcopy", progress=False)
    manifest = json.loads((tmp_path / "shcopy" / "shards.json").read_text())
    original = json.loads((tmp_path / "sh" / "shards.json").read_text())
    assert manifest["dirs"] == original["dirs"] and manifest["shards"] == 3
    assert [s["dir"] for s in report.shards] == original["dirs"] and report.images == 200
    for s in report.shards:  # each shard's own point: its changes 1..seq
        with StreamingIndex.open(tmp_path / "shcopy" / s["dir"], readonly=True) as shard:
            assert len(shard) == s["images"]
            assert max(shard.info(i)["seq"] for i in shard.ids()) == s["seq"]
    assert check_index(tmp_path / "shcopy", progress=False).ok
    with open_index(tmp_path / "shcopy", readonly=True) as copy:
        assert copy.search(V[:10], k=4, mode="exact")[1].tolist() == want


def test_dest_is_whole_or_absent(tmp_path, encoder):
    with StreamingIndex.create(tmp_path / "ix", encoder) as idx:
        idx.add_many([{"id": f"i{i}", "vector": v} for i, v in enumerate(vectors(4, 20))])
    (tmp_path / "taken").mkdir()
    with pytest.raises(IndexExistsError):
        backup(tmp_path / "ix", tmp_path / "taken")
    with pytest.raises(NotAnIndexError):
        backup(tmp_path / "taken", tmp_path / "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix", "taken"]


def test_the_cli_backs_up_and_the_copy_verifies(tmp_path, encoder):
    with StreamingIndex.create(tmp_path / "ix", encoder) as idx:
        idx.add_many([{"id": f"i{i}", "vector": v} for i, v in enumerate(vectors(6, 50))])
    proc = run_python("-m", "streamk.cli", "index", "backup", tmp_path / "ix", tmp_path / "b", timeout=120)
    assert proc.returncode == 0 and "50 images" in proc.stdout, proc
    proc = run_python("-m", "streamk.cli", "index", "verify", tmp_path / "b", timeout=120)
    assert proc.returncode == 0 and ": clean;" in proc.stdout, proc
    proc = run_python("-m", "streamk.cli", "index", "backup", tmp_path / "ix", tmp_path / "b", timeout=120)
    assert proc.returncode != 0 and "exists" in proc.stderr, proc
    assert np.isfinite(json.loads((tmp_path / "b" / "backup.json").read_text())["seconds"])


def test_a_backup_onto_a_full_disk_names_dest_and_the_room_there(tmp_path, encoder):
    """A backup onto a disk without room said "no space left on the disk holding
    .../.b.partial-1f2e3d4c (0 bytes free)": a folder that no longer exists, and the room its
    partial copy had taken. It names dest, the room the disk has once the copy is removed, and
    the copy's size; nothing is left there, exit 6."""
    from helpers.disks import tmpfs

    from streamk.errors import DiskFullError

    with StreamingIndex.create(tmp_path / "ix", encoder, vector_dtype="float32") as idx:
        idx.add_many([{"id": f"i{i}", "vector": v} for i, v in enumerate(vectors(7, 2000))])
    size = (tmp_path / "ix" / "data.mdb").stat().st_size
    with tmpfs(tmp_path / "disk", "512k") as disk:
        assert size > 2 * 512 * 1024
        with pytest.raises(DiskFullError) as info:
            backup(tmp_path / "ix", disk / "b")
        message = str(info.value)
        assert message.startswith(f"no room for the backup {disk / 'b'}: the disk holding {disk} has ")
        free = int(message.split(" has ")[1].split(" bytes free")[0].replace(",", ""))
        assert free > 400 * 1024 and f"up to about {size:,} bytes" in message and "partial" not in message
        assert not list(disk.iterdir())
        proc = run_python("-m", "streamk.cli", "index", "backup", tmp_path / "ix", disk / "b", timeout=120)
        assert proc.returncode == 6 and proc.stderr.startswith("streamk: error: no room for the backup "), proc
        assert len(proc.stderr.splitlines()) == 1 and not list(disk.iterdir())
        # the folders made for it (as mkdir -p) go with it: a failed backup leaves nothing behind
        (disk / "nightly").mkdir()
        with pytest.raises(DiskFullError):
            backup(tmp_path / "ix", disk / "nightly" / "2026" / "11" / "b")
        assert [p.name for p in disk.iterdir()] == ["nightly"] and not list((disk / "nightly").iterdir())


KILLED_MID_BACKUP = r"""
import importlib, os, signal, sys
b = importlib.import_module("streamk.index.backup")  # the module (streamk.index.backup is also the function)
copy = b._copy_environment

def copy_then_die(src, dest_dir):  # the real copy, then SIGKILL before the verification and the rename
    copy(src, dest_dir)
    os.kill(os.getpid(), signal.SIGKILL)

b._copy_environment = copy_then_die
b.backup(sys.argv[1], sys.argv[2], progress=False)
"""


def test_the_partial_copy_of_a_killed_backup_is_removed_by_the_next_one(tmp_path, encoder):
    """A backup killed (SIGKILL, a crash, a reboot) left its hidden .NAME.partial-XXXX folder, as large as
    the index, for good: nightly backups on a disk whose runs were killed filled it. The next backup beside
    it removes the partial folders whose writer is dead (their flock free), never one being written."""
    import fcntl
    import os
    import signal

    from streamk.index.backup import PARTIAL_LOCK

    with StreamingIndex.create(tmp_path / "ix", encoder) as idx:
        idx.add_many([{"id": f"i{i}", "vector": v} for i, v in enumerate(vectors(8, 50))])
    (tmp_path / "killed.py").write_text(KILLED_MID_BACKUP)
    proc = run_python(tmp_path / "killed.py", tmp_path / "ix", tmp_path / "backups" / "monday", timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc
    left = [p.name for p in (tmp_path / "backups").iterdir()]
    assert len(left) == 1 and left[0].startswith(".monday.partial-"), left
    assert (tmp_path / "backups" / left[0] / "data.mdb").stat().st_size > 0
    running = tmp_path / "backups" / ".wednesday.partial-0000"  # a backup being written: its lock held
    running.mkdir()
    fd = os.open(running / PARTIAL_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        proc = run_python("-m", "streamk.cli", "index", "backup", tmp_path / "ix", tmp_path / "backups" / "tuesday",
                          timeout=120)
        assert proc.returncode == 0, proc
        assert "removed 1 partial copy(ies) of backups killed before they finished" in proc.stderr
        assert left[0] in proc.stderr
        assert sorted(p.name for p in (tmp_path / "backups").iterdir()) == [".wednesday.partial-0000", "tuesday"]
        assert not (tmp_path / "backups" / "tuesday" / PARTIAL_LOCK).exists()
        assert check_index(tmp_path / "backups" / "tuesday", progress=False).ok
    finally:
        os.close(fd)

"""Online backups: a consistent, compacted copy of an index taken while it is written and
searched, verified, then put in place atomically.

    backup("my-index", "backups/my-index-monday")     # streamk index backup IDX DEST

One index: LMDB copies the environment as one read transaction sees it (``env.copy(...,
compact=True, txn=...)``): every image committed before that transaction began, nothing
committed after, free pages left out. Writers and readers go on meanwhile (LMDB readers never
block writers; the copy holds the pages of its snapshot until it ends, so the index's file may
grow by what is written during the copy). The index's change counter (``meta/seq``) read in the
same transaction says which point the copy holds: exactly the changes numbered 1..seq.

A sharded index: every shard is copied in turn, each at one consistent point of its own (a
shard's writes are independent of the others'), with its manifest (``shards.json``, the shards
then on this machine), encoder and vocabulary.

The copy is written into a new folder beside ``dest`` (``.NAME.partial-XXXX``), checked with
:func:`~streamk.index.integrity_check.check_index`, then renamed to ``dest``: ``dest`` either
does not exist or is a whole, verified backup. ``dest/backup.json`` records when the backup
was taken and each shard's point (seq), images and bytes. While it is written, its writer holds
an flock on ``.partial.lock`` in it (placed there locked); the kernel drops it when the process
dies, however it dies, so a backup finds the partial folders beside its own whose writer was
killed (SIGKILL, a crash, a reboot: they were left for good, hidden, as large as the index)
and removes them first (``BackupReport.removed``).

Restore: a backup is an index. Open it (``open_index(dest)``), serve it (``streamk serve
dest``), or move it where the index was while nothing has it open.
"""

import fcntl
import json
import os
import secrets
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import lmdb

from ..errors import ConfigError, DiskFullError, IndexCorruptError, IndexExistsError
from ..files import check_output_folder, make_folders, remove_made_folders
from .integrity import CORRUPTION, corrupt, disk_full, free_bytes
from .integrity_check import check_index
from .store import Store, not_an_index

BACKUP_FILE = "backup.json"
BACKUP_FORMAT = "streamk-backup"
BACKUP_VERSION = 1


@dataclass
class BackupReport:
    """What :func:`backup` wrote: ``path`` (the backup), ``shards`` (one dict per shard, or
    one for a single index: ``dir`` ('' for a single index), ``seq`` (the last change the copy
    holds), ``images``, ``bytes``), ``seconds`` (copy and verification), ``copy_seconds`` (the copy)."""

    path: str
    source: str
    created: str
    seconds: float = 0.0
    copy_seconds: float = 0.0
    shards: list = field(default_factory=list)
    removed: list = field(default_factory=list)  # partial folders of killed backups removed beside it

    @property
    def images(self):
        return sum(s["images"] for s in self.shards)

    @property
    def bytes(self):
        return sum(s["bytes"] for s in self.shards)

    def to_dict(self):
        return {"format": BACKUP_FORMAT, "version": BACKUP_VERSION, "source": self.source, "created": self.created,
                "seconds": round(self.seconds, 3), "copy_seconds": round(self.copy_seconds, 3),
                "images": self.images, "bytes": self.bytes,
                "shards": self.shards}


def _copy_environment(src, dest_dir):
    """Copy the index at ``src`` into the empty folder ``dest_dir`` as one read transaction
    sees it (compacted); returns {seq, images, bytes} of the copy."""
    store = Store.open(src, readonly=True)  # this process's environment on it when it has one
    try:
        with store.read() as txn:
            seq = store.seq(txn)
            images = txn.stat(store.images_db)["entries"]
            try:
                store.env.copy(str(dest_dir), compact=True, txn=txn)
            except CORRUPTION as exc:
                raise corrupt(src, f"LMDB, while copying it: {exc}") from exc
            except (lmdb.Error, OSError) as exc:
                full = disk_full(dest_dir, exc, (Path(src) / "data.mdb").stat().st_size)
                if full is not None:
                    raise full from exc
                raise
    finally:
        store.close()
    return {"seq": int(seq), "images": int(images), "bytes": (Path(dest_dir) / "data.mdb").stat().st_size}


def _copy_sharded(src, tmp, progress):
    """Copy the sharded index at ``src`` into ``tmp``: each shard at its own consistent point,
    then the manifest (last: a folder without it is not an index), encoder and vocabulary."""
    from tqdm.auto import tqdm

    from .sharded import MANIFEST, read_manifest

    manifest = read_manifest(src)
    here = socket.gethostname()
    away = [s for s, h in enumerate(manifest["hosts"]) if h not in (None, here)]
    if away:
        raise ConfigError(f"{src}: shard(s) {away} live on other hosts ({manifest['hosts'][away[0]]}, ...): back "
                          f"up each shard on its host (streamk index backup SHARD_DIR DEST)")
    for name in sorted(os.listdir(src)):  # encoder.npz, vocabulary.npz: written once, at create
        if name != MANIFEST and name.endswith(".npz") and (src / name).is_file():
            shutil.copy2(src / name, tmp / name)
    shards = []
    for d in tqdm(manifest["dirs"], desc="backup", unit="shard", disable=progress is False):
        (tmp / d).mkdir()
        shards.append({"dir": d, **_copy_environment(src / d, tmp / d)})
    manifest = dict(manifest, hosts=[None] * len(manifest["dirs"]))  # the backup is on this machine
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return shards


def backup(path, dest, progress=None):
    """Back up the index at ``path`` (single or sharded) to ``dest`` (a new folder) while it is
    written and searched: a compacted copy at one consistent point (per shard), verified, then
    renamed into place. Returns a :class:`BackupReport`. ``dest`` must not exist
    (IndexExistsError); a copy that does not verify is removed (IndexCorruptError) and nothing
    is left at ``dest``; a disk without room is a DiskFullError, nothing left either; a ``dest``
    where no folder can be made (read-only, under a file, /proc) an OutputFileError, before
    anything is copied."""
    from .sharded import is_sharded

    path, dest = Path(path), Path(dest)
    sharded = is_sharded(path)
    if not sharded and not (path / "data.mdb").is_file():
        raise not_an_index(path)
    if os.path.lexists(dest):
        raise IndexExistsError(f"{dest} exists: a backup goes into a new folder (choose another name)")
    if dest.resolve() == path.resolve() or path.resolve() in dest.resolve().parents:
        raise ConfigError(f"{dest}: a backup cannot go inside the index it copies")
    check_output_folder(dest, "the backup")  # before the copy, and named: not the temporary folder's OSError
    made = make_folders(dest.parent)  # as mkdir -p; taken away again if the backup fails
    removed = remove_abandoned_partials(dest.parent)
    tmp = dest.parent / f".{dest.name}.partial-{secrets.token_hex(4)}"
    try:
        tmp.mkdir()
    except BaseException:
        remove_made_folders(made)
        raise
    started = time.time()
    report = BackupReport(str(dest), str(path.resolve()), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                          removed=removed)
    lock = None
    try:
        lock = _lock_partial(tmp)
        if sharded:
            report.shards = _copy_sharded(path, tmp, progress)
        else:
            report.shards = [{"dir": "", **_copy_environment(path, tmp)}]
        report.copy_seconds = time.time() - started
        check = check_index(tmp, progress=progress)
        if not check.ok:
            found = [d for r in (check.shards or [check]) for d in r.damaged]
            raise IndexCorruptError(f"{path}: its backup does not verify ({'; '.join(found[:3])}): nothing was "
                                    f"placed at {dest}; run `streamk index verify {path}`", path=path)
        report.seconds = time.time() - started
        (tmp / BACKUP_FILE).write_text(json.dumps(report.to_dict(), indent=1))
        os.unlink(tmp / PARTIAL_LOCK)  # (still held: no other backup takes the folder for abandoned)
        os.rename(tmp, dest)  # atomic: dest is whole or absent (refused if a folder appeared there)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_made_folders(made)  # a failed backup leaves no folder behind, not even those made for it
        if lock is not None:
            os.close(lock)
            lock = None
        if isinstance(exc, DiskFullError) and exc.needed and "ulimit" not in str(exc):
            raise _no_room(dest, exc.needed) from exc  # said of dest, with the room there is without the copy
        raise
    finally:
        if lock is not None:
            os.close(lock)
    return report


PARTIAL_LOCK = ".partial.lock"  # in a backup being written: flocked by its writer until the backup is in place


def _lock_partial(tmp):
    """The fd of the flock that marks ``tmp`` as being written: made under another name and
    locked, then renamed to PARTIAL_LOCK, so that no one finds the lock file unlocked."""
    making = tmp / f"{PARTIAL_LOCK}.{os.getpid()}"
    fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(making, tmp / PARTIAL_LOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_abandoned_partials(folder):
    """Remove the partial folders (``.NAME.partial-XXXX``) in ``folder`` of backups whose
    writer died before finishing: those holding a PARTIAL_LOCK nobody holds. A backup being
    written holds its lock, and a folder without one is left (not a backup's, or one being
    renamed into place). Returns the names removed."""
    removed = []
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(".") and ".partial-" in e.name]
    except OSError:
        return removed
    for entry in entries:
        try:
            fd = os.open(os.path.join(entry.path, PARTIAL_LOCK), os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # its writer is alive
            continue
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
        finally:
            os.close(fd)
    return removed


def _no_room(dest, needed):
    """The DiskFullError of a backup to ``dest`` whose copy (about ``needed`` bytes: the size
    of the index's data file, or of a shard's) found no room: what the disk has free once the
    partial copy is removed (it said "0 bytes free" of the removed partial folder)."""
    free = free_bytes(dest.parent)
    has = f"has {free:,} bytes free" if free is not None else "is full"
    return DiskFullError(f"no room for the backup {dest}: the disk holding {dest.parent} {has}, and a copy "
                         f"takes up to about {needed:,} bytes (the index's data file); nothing was kept: free "
                         f"space there, or back up to another disk, and run it again", path=dest, needed=needed)


def read_backup_info(path):
    """The ``backup.json`` of a backup (a dict), or None when ``path`` holds none."""
    try:
        return json.loads((Path(path) / BACKUP_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None


__all__ = ["BACKUP_FILE", "BackupReport", "PARTIAL_LOCK", "backup", "read_backup_info",
           "remove_abandoned_partials"]

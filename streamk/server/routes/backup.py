"""Backups of the served index (``POST /backup``, token needed): an online copy
(:func:`streamk.index.backup`) written under the folder the server was started with
(``streamk serve --backup-dir DIR``), named by the server. Clients never name a path, and no
answer shows one; without a backup folder the route answers 404 ``backups_off``. One backup
at a time (another while one runs: 409 ``backup_running``); searches and writes go on while
it is taken (it runs beside the index thread, on its own read transaction)."""

import asyncio
import logging
import secrets
import threading
import time
from pathlib import Path

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from ...errors import ConfigError, DiskFullError, IndexCorruptError, OutputFileError, describe
from ...files import check_output_folder
from ...index import backup
from ...units import byte_size
from ..dependencies import may_write, service_of
from ..http_errors import ApiError, error_responses

log = logging.getLogger("streamk.server")
router = APIRouter()


class BackupAnswer(BaseModel):
    """A backup taken: its name under the server's backup folder, what it holds and how long
    it took (copy and verification)."""

    backup: str = Field(description="the backup's name (a folder under the server's --backup-dir)")
    images: int = Field(description="images in the backup")
    bytes: int = Field(description="size of the copied LMDB data, in bytes")
    shards: int = Field(description="environments copied: 1, or a sharded index's shard count")
    seconds: float = Field(description="time to copy and verify it")
    verified: bool = Field(True, description="the copy was checked (streamk index verify) before it was kept")


def backup_folder(backup_dir, index_path):
    """The backup folder of ``streamk serve --backup-dir`` made ready at start: created when
    absent; ConfigError when it is not a folder, lies inside the index or takes no new folder
    (read-only, no permission: said at start, not by the first POST /backup); a disk without
    room now is only logged (there may be room by the time a backup is asked)."""
    folder = Path(backup_dir).resolve()
    if folder == Path(index_path).resolve() or Path(index_path).resolve() in folder.parents:
        raise ConfigError(f"--backup-dir {backup_dir}: a backup folder cannot lie inside the index it backs up")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--backup-dir {backup_dir}: cannot make it a folder ({exc})") from exc
    try:
        check_output_folder(folder, "backups")
    except OutputFileError as exc:
        raise ConfigError(f"--backup-dir {backup_dir}: {exc}") from None
    except DiskFullError as exc:
        log.warning("--backup-dir %s: %s", backup_dir, describe(exc))
    return folder


def _lock_of(app):
    lock = getattr(app.state, "backup_lock", None)
    if lock is None:  # no await in between: one event loop, no race
        lock = app.state.backup_lock = threading.Lock()
    return lock


@router.post("/backup", status_code=201, response_model=BackupAnswer,
             responses=error_responses(401, 403, 404, 409, 507), dependencies=[Depends(may_write)])
async def take_backup(request: Request, service=Depends(service_of)):
    """Back up the served index now, while it is searched and written: a compacted copy at
    one consistent point (per shard), verified, then renamed into place under the server's
    backup folder. Restore: the backup is an index (serve or open it)."""
    folder = getattr(request.app.state, "backup_dir", None)
    if folder is None:
        raise ApiError(404, "backups_off", "this server takes no backups: it was started without a backup folder")
    service.check_place(force=True)  # the copy is made from the path: never of an index put there since the start
    lock = _lock_of(request.app)
    if not lock.acquire(blocking=False):
        raise ApiError(409, "backup_running", "a backup is being taken: ask again once it has finished")
    name = f"backup-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"
    try:
        report = await asyncio.to_thread(backup, service.path, Path(folder) / name, False)
    except DiskFullError as exc:
        log.error("backup %s: %s", name, describe(exc))
        raise ApiError(507, "disk_full", f"no room for backup {name}: nothing of it was kept") from None
    except OutputFileError as exc:  # the folder became read-only or not ours since the start: no path said
        log.error("backup %s: %s", name, describe(exc))
        raise ApiError(500, "backup_failed", f"backup {name} could not be written: the server's backup folder "
                                             "takes no new files (the server's log says why); nothing of it was "
                                             "kept") from None
    except IndexCorruptError as exc:
        log.error("backup %s: %s", name, describe(exc))
        raise ApiError(500, "index_corrupt", f"backup {name} did not verify and was not kept: the index "
                                             "may be damaged (the server's log says where)") from None
    finally:
        lock.release()
    if report.removed:
        log.info("backup %s: removed %d partial backup(s) left by a killed backup: %s", name, len(report.removed),
                 ", ".join(report.removed))
    log.info("backup %s: %d images, %s in %.1f s", name, report.images, byte_size(report.bytes), report.seconds)
    return {"backup": name, "images": report.images, "bytes": report.bytes, "shards": len(report.shards),
            "seconds": round(report.seconds, 3), "verified": True}


__all__ = ["BackupAnswer", "backup_folder", "router"]

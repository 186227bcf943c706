"""Writing a file a user keeps (an encoder, a vocabulary, a descriptor file): whole or not
at all, and a bad path said before the work that fills it.

:func:`atomic_write` writes to a temporary file beside the target and renames it onto
the target, so that a reader (or a later run) sees the old file or the complete new one,
never a partial write: Ctrl-C, a full disk or a crash in the middle leaves an existing
file as it was. Its failures are named: :class:`~streamk.errors.DiskFullError` when the
disk (or a quota, or the file size limit) is full, :class:`~streamk.errors.OutputFileError`
when the path cannot take a file. :func:`check_output_file` makes the second check before
a long computation whose result goes there (``index create --train --save-encoder``), and
:func:`check_output_folder` the same for a new folder (``index create``, ``index backup``).
"""

import errno
import os
import secrets
from pathlib import Path

from .errors import DiskFullError, OutputFileError

_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}

__all__ = ["atomic_write", "check_output_file", "check_output_folder", "make_folders", "remove_made_folders"]


def check_output_file(path, what="the file"):
    """The Path ``path``, once a file can be written there: its folder exists and is a
    folder this process may write to, and ``path`` is not a folder; else OutputFileError."""
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        raise OutputFileError(f"cannot write {what} to {path}: it is a folder; give a file name in it", path)
    if not folder.is_dir():
        reason = "is not a folder" if folder.exists() else "does not exist"
        raise OutputFileError(f"cannot write {what} to {path}: the folder {folder} {reason}; make it first, or "
                              f"give a path in an existing folder", path)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputFileError(f"cannot write {what} to {path}: no permission to write in {folder}; give a path "
                              f"in a folder you can write to", path)
    return path


def check_output_folder(path, what="the folder"):
    """The Path ``path``, once a folder can be made there (or ``path``, an existing folder,
    can take files): its nearest existing folder is a folder and takes a new entry, tried
    with an empty probe folder made and removed at once, since os.access says yes to root on
    a read-only mount's neighbours and to /proc. Else OutputFileError (DiskFullError for a
    full disk), naming ``path``; nothing is left behind."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputFileError(f"cannot write {what} to {path}: it is a file, not a folder; give a folder (a new "
                              f"one, or an existing folder)", path)
    base = path if path.is_dir() else path.parent
    while not base.exists() and base != base.parent:  # the folders that would be made above it
        base = base.parent
    if not base.is_dir():
        raise OutputFileError(f"cannot write {what} to {path}: {base} is a file, not a folder; give a path in a "
                              f"folder", path)
    probe = base / f".streamk-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.mkdir(probe)
    except OSError as exc:
        if exc.errno in _FULL:
            raise DiskFullError(f"cannot write {what} to {path}: {exc.strerror or exc} in {base}; free space and "
                                f"run it again", path) from None
        raise OutputFileError(f"cannot write {what} to {path}: {base} does not take new files "
                              f"({exc.strerror or exc}); give a path in a folder you can write to", path) from None
    os.rmdir(probe)
    return path


def make_folders(path):
    """``mkdir -p path``; returns the folders it made, the deepest last, for
    :func:`remove_made_folders` to take away again when what was to go there failed."""
    path = Path(path)
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    made = []
    try:
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:  # made meanwhile by someone else: theirs
                continue
            made.append(folder)
    except BaseException:
        remove_made_folders(made)
        raise
    return made


def remove_made_folders(made):
    """Remove the folders :func:`make_folders` made, deepest first, each only while it is
    empty (what another process put there stays, and the folders above it)."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            return


def atomic_write(path, write, what="the file"):
    """Call ``write(fh)`` on a temporary file beside ``path``, then rename it onto ``path``.

    Readers see either the old file or the complete new one, never a partial
    write; on any error the temporary file is removed and ``path`` is untouched.
    The new file gets the usual permissions (0o666 less the umask). A full disk
    raises DiskFullError, a path that cannot take a file OutputFileError.
    """
    path = Path(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        check_output_file(path, what)  # the reason in words, when it is the path's
        raise _named(exc, path, what) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and not isinstance(exc, (DiskFullError, OutputFileError)):
            raise _named(exc, path, what) from exc
        raise


def _named(exc, path, what):
    if exc.errno in _FULL:
        return DiskFullError(f"cannot write {what} to {path}: {exc.strerror or exc}; nothing was written (an "
                             f"existing file there is unchanged): free space and run it again", path)
    if isinstance(exc, IsADirectoryError):
        return OutputFileError(f"cannot write {what} to {path}: it is a folder; give a file name", path)
    return OutputFileError(f"cannot write {what} to {path}: {exc.strerror or exc}; nothing was written (an "
                           f"existing file there is unchanged): give a path in a folder you can write to", path)

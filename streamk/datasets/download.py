"""Downloads of the benchmarks' official files (pooch: resume, sizes, SHA-256 where
published) and their safe extraction (no path outside the destination, no links)."""

import fnmatch
import os
import re
import shutil
import tarfile
import warnings
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from ..errors import (ChecksumError, ConfigError, DownloadError, StreamkError,
                      UnknownDatasetError, UnsafeArchiveError)
from ..files import check_output_folder
from .benchmarks import dataset_key


# ------------------------------------------------------------------ download

@dataclass(frozen=True)
class Remote:
    """One published file of a dataset.

    size / sha256: expected values, None when nothing is published (then the
    transfer is checked against the server's Content-Length only).  extract:
    None keeps the file as downloaded in dest_dir; otherwise the archive is
    extracted into ``dest_dir/extract`` ("" = dest_dir itself), keeping only
    members whose path matches ``members`` (fnmatch), without their directories
    if ``flatten``.
    """

    url: str
    filename: str
    size: int | None = None
    sha256: str | None = None
    extract: str | None = None
    members: str = "*"
    flatten: bool = False


_OX = "https://www.robots.ox.ac.uk/~vgg/data/oxbuildings/"
_PA = "https://www.robots.ox.ac.uk/~vgg/data/parisbuildings/"
_REVISITOP = "http://cmp.felk.cvut.cz/revisitop/data/datasets/"
# The Oxford and Paris images are the face-blurred "-v1" archives that replaced
# the originals on the VGG pages (as revisitop's download script fetches them);
# the ground-truth archives are unchanged.  No SHA-256 (nor size) of any of
# these files is published by VGG, revisitop, INRIA or archive.org's UKBench
# item as far as we could find, so every entry has sha256=None, size=None: a
# download is checked against the Content-Length the server announces and,
# on extraction, against the archive's own CRCs (gzip, zip).  Fill in sha256
# where a publisher gives one and pooch checks it.
_OXFORD_IMAGES = Remote(_OX + "oxbuild_images-v1.tgz", "oxbuild_images-v1.tgz", extract="jpg", members="*.jpg",
                        flatten=True)
_OXFORD_GT = Remote(_OX + "gt_files_170407.tgz", "gt_files_170407.tgz", extract="gt_files", members="*.txt",
                    flatten=True)
_PARIS_1 = Remote(_PA + "paris_1-v1.tgz", "paris_1-v1.tgz", extract="jpg", members="*.jpg", flatten=True)
_PARIS_2 = Remote(_PA + "paris_2-v1.tgz", "paris_2-v1.tgz", extract="jpg", members="*.jpg", flatten=True)
_PARIS_GT = Remote(_PA + "paris_120310.tgz", "paris_120310.tgz", extract="gt_files", members="*.txt", flatten=True)
# Holidays: the published addresses are on the INRIA FTP server (no resume over FTP:
# a partial file restarts).
_HOLIDAYS = "ftp://ftp.inrialpes.fr/pub/lear/douze/data/"

REMOTES: dict[str, tuple[Remote, ...]] = {
    "holidays": (Remote(_HOLIDAYS + "jpg1.tar.gz", "jpg1.tar.gz", extract="jpg", members="*.jpg", flatten=True),
                 Remote(_HOLIDAYS + "jpg2.tar.gz", "jpg2.tar.gz", extract="jpg", members="*.jpg", flatten=True)),
    "oxford5k": (_OXFORD_IMAGES, _OXFORD_GT),
    "paris6k": (_PARIS_1, _PARIS_2, _PARIS_GT),
    # the 100k Flickr distractors have no address we can vouch for: see download()
    "oxford105k": (_OXFORD_IMAGES, _OXFORD_GT),
    "paris106k": (_PARIS_1, _PARIS_2, _PARIS_GT),
    "roxford5k": (_OXFORD_IMAGES, Remote(_REVISITOP + "roxford5k/gnd_roxford5k.pkl", "gnd_roxford5k.pkl")),
    "rparis6k": (_PARIS_1, _PARIS_2, Remote(_REVISITOP + "rparis6k/gnd_rparis6k.pkl", "gnd_rparis6k.pkl")),
    # ukbench.zip holds full/*.jpg, thumbnails/*.jpg (same names) and html pages: keep full/ only
    "ukbench": (Remote("https://archive.org/download/ukbench/ukbench.zip", "ukbench.zip", extract="jpg",
                       members="*full/*.jpg", flatten=True),),
}

_CHUNK = 1 << 20


class ResumingDownloader:
    """A pooch downloader (``downloader(url, output_file, pooch)``) that resumes.

    pooch downloads into a fresh temporary file each time and has no resume; a
    2 GB archive cut off at 90 % would start over.  Here the bytes go to a
    stable ``part`` file, continued with an HTTP ``Range`` request (a server that
    ignores Range restarts it, one that answers 416 for a complete part keeps
    it); once complete and of the expected size (``size``, else the announced
    length) the part becomes pooch's ``output_file``, which pooch then checks
    against the known hash and moves into place.  A broken connection raises
    :class:`DownloadError` and keeps the part for the next call; a size
    mismatch deletes it and raises :class:`ChecksumError`.  ftp:// goes through
    pooch's own FTPDownloader, without resume.
    """

    def __init__(self, part, size=None, progress=True, timeout=60.0):
        self.part = Path(part)
        self.size = size
        self.progress = progress
        self.timeout = timeout

    def __call__(self, url, output_file, pooch_=None, check_only=False):
        if url.lower().startswith("ftp://"):
            import ftplib

            import pooch

            try:
                pooch.FTPDownloader(progressbar=self.progress, timeout=self.timeout)(url, self.part, pooch_)
            except (OSError, EOFError, *ftplib.all_errors) as exc:  # named as an HTTP failure is, with its URL
                raise DownloadError(f"{url}: {type(exc).__name__}: {exc}; check the network (or give a mirror: "
                                    f"--mirror URL)") from exc
            total = None
        else:
            total = self._http(url)
        got = self.part.stat().st_size if self.part.exists() else 0
        if total is not None and got < total:        # the connection closed early: keep the part
            raise DownloadError(f"{url}: transfer ended at {got} of {total} bytes; run again to resume")
        expected = self.size if self.size is not None else total
        if expected is not None and got != expected:
            self.part.unlink(missing_ok=True)
            raise ChecksumError(f"{self.part.name[:-5]}: size {got} bytes, expected {expected}; "
                                f"the file was deleted")
        os.replace(self.part, output_file)

    def _http(self, url):
        """Fetch into the part; return the file's total size as the server gave it (or None)."""
        import requests
        import urllib3
        from tqdm.auto import tqdm

        offset = self.part.stat().st_size if self.part.exists() else 0
        if self.size is not None and offset > self.size:
            self.part.unlink()
            offset = 0
        # identity: the bytes on disk are the file's bytes, so that a Range continues them
        headers = {"User-Agent": "streamk-download/0.1", "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            resp = requests.get(url, headers=headers, stream=True, timeout=self.timeout)
        except requests.RequestException as exc:
            raise DownloadError(f"{url}: {exc}; check the network (or give a mirror: --mirror URL)") from exc
        with resp:
            if resp.status_code == 416 and offset:
                # range not satisfiable: the part is complete if the server's size is its size, else start over
                m = re.match(r"bytes\s+\*/(\d+)", resp.headers.get("Content-Range", ""))
                if m and int(m.group(1)) == offset:
                    return offset
                self.part.unlink()
                return self._http(url)
            if resp.status_code >= 400:
                raise DownloadError(f"{url}: HTTP {resp.status_code} {resp.reason}")
            if offset and resp.status_code == 206:
                m = re.match(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", resp.headers.get("Content-Range", ""))
                if not m or int(m.group(1)) != offset:
                    raise DownloadError(f"{url}: server answered a range other than bytes={offset}-")
                total = None if m.group(3) == "*" else int(m.group(3))
                mode = "ab"
            else:                                    # 200: the whole file (Range ignored or not sent)
                offset, mode = 0, "wb"
                length = resp.headers.get("Content-Length", "")
                total = int(length) if length.isdigit() else None
            try:
                with open(self.part, mode) as out, tqdm(
                        total=self.size if self.size is not None else total, initial=offset, unit="B",
                        unit_scale=True, unit_divisor=1024, desc=self.part.name[:-5],
                        disable=not self.progress) as bar:
                    for block in resp.raw.stream(_CHUNK, decode_content=False):
                        out.write(block)
                        bar.update(len(block))
            except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
                raise DownloadError(f"{url}: transfer interrupted ({exc}); run again to resume from "
                                    f"{self.part.name}") from exc
        return total


class _QuietPooch:
    """pooch logs each download and, with no known hash, the SHA-256 it computed (useful to
    see on the command line); silenced when progress is off."""

    def __init__(self, quiet):
        self.quiet = quiet

    def __enter__(self):
        import pooch

        self.logger = pooch.get_logger()
        self.level = self.logger.level
        if self.quiet:
            self.logger.setLevel("WARNING")

    def __exit__(self, *exc):
        self.logger.setLevel(self.level)


def fetch(url: str, path, size: int | None = None, sha256: str | None = None, progress: bool = True,
          timeout: float = 60.0, processor=None) -> Path:
    """Download ``url`` to ``path`` with pooch: resume, size and SHA-256 checks.

    pooch (``pooch.retrieve``) checks the file against ``sha256`` when one is
    given (also an existing file, which is fetched again if it differs) and
    runs ``processor`` (a pooch processor, e.g. extraction); the transfer is
    :class:`ResumingDownloader`'s.  On a size or SHA-256 mismatch nothing is
    left and :class:`ChecksumError` is raised; a broken connection leaves
    ``<path>.part`` for the next call.  An existing ``path`` that passes the
    checks is kept as is.
    """
    import pooch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and size is not None and path.stat().st_size != size:
        path.unlink()
    downloader = ResumingDownloader(path.with_name(path.name + ".part"), size=size, progress=progress,
                                    timeout=timeout)
    known_hash = f"sha256:{sha256.lower()}" if sha256 else None
    try:
        with _QuietPooch(not progress):
            pooch.retrieve(url, known_hash, fname=path.name, path=path.parent, downloader=downloader,
                           processor=processor, progressbar=False)
    except ValueError as exc:   # pooch's hash mismatch; ours (extraction, ...) pass through
        if sha256 and not isinstance(exc, StreamkError) and "hash" in str(exc).lower():
            raise ChecksumError(f"{path.name}: SHA-256 differs from the published {sha256}; the file was "
                                f"deleted ({exc})") from exc
        raise
    return path


class _ExtractOnce:
    """A pooch processor: extract the archive safely (:func:`extract_archive`) and leave a stamp,
    so that a later call does not extract it again."""

    def __init__(self, target: Path, members: str, flatten: bool, stamp: Path, url: str):
        self.target, self.members, self.flatten, self.stamp, self.url = target, members, flatten, stamp, url

    def __call__(self, fname, action, pooch_):
        if action == "fetch" and self.stamp.exists():
            return fname
        extract_archive(fname, self.target, members=self.members, flatten=self.flatten)
        self.stamp.write_text(f"{self.url}\n")
        return fname


def _safe_member_name(name: str) -> PurePosixPath:
    n = name.replace("\\", "/")
    parts = [p for p in n.split("/") if p not in ("", ".")]
    if n.startswith("/") or re.match(r"^[A-Za-z]:", n) or ".." in parts or "\x00" in n:
        raise UnsafeArchiveError(f"archive member {name!r} would be written outside the destination")
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


def _archive_kind(path: Path) -> str | None:
    n = path.name.lower()
    if n.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")):
        return "tar"
    if n.endswith(".zip"):
        return "zip"
    return None


def extract_archive(path, dest_dir, members: str = "*", flatten: bool = False) -> list[Path]:
    """Extract a tar(.gz)/tgz/zip into dest_dir; return the files written.

    Every member is checked before anything is written: an absolute path, a
    ``..`` component, a link or a device refuses the whole archive with
    :class:`UnsafeArchiveError`.  Only regular files whose path matches
    ``members`` (fnmatch) are written; ``flatten`` drops their directories.
    """
    path, dest = Path(path), Path(dest_dir)
    kind = _archive_kind(path)
    if kind is None:
        raise ConfigError(f"{path.name}: not a .tar.gz / .tgz / .tar / .zip archive")
    plan: list[tuple[object, Path]] = []

    def add(member, name: str):
        rel = _safe_member_name(name)
        if not fnmatch.fnmatch(str(rel), members):
            return
        plan.append((member, PurePosixPath(rel.name) if flatten else rel))

    try:
        archive = tarfile.open(path, "r:*") if kind == "tar" else zipfile.ZipFile(path)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        raise DownloadError(f"{path.name}: corrupt archive ({exc})") from exc
    with archive:
        try:
            if kind == "tar":
                for m in archive.getmembers():
                    _safe_member_name(m.name)
                    if m.issym() or m.islnk():
                        raise UnsafeArchiveError(f"archive member {m.name!r} is a link; links are refused")
                    if not (m.isfile() or m.isdir()):
                        raise UnsafeArchiveError(f"archive member {m.name!r} is not a file or a directory")
                    if m.isfile():
                        add(m, m.name)
            else:
                for info in archive.infolist():
                    _safe_member_name(info.filename)
                    if (info.external_attr >> 16) & 0o170000 == 0o120000:
                        raise UnsafeArchiveError(f"archive member {info.filename!r} is a link; links are refused")
                    if not info.is_dir():
                        add(info, info.filename)
        except (tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
            raise DownloadError(f"{path.name}: corrupt archive ({exc})") from exc
        targets = [rel for _, rel in plan]
        if len(set(targets)) != len(targets):
            raise UnsafeArchiveError(f"{path.name}: several members would be written to the same file")
        dest_resolved = dest.resolve()
        jobs = []
        for member, rel in plan:
            target = dest / Path(*rel.parts)
            if not target.resolve().is_relative_to(dest_resolved):   # e.g. a symlinked directory in dest
                raise UnsafeArchiveError(f"{rel} would be written outside {dest}")
            jobs.append((member, target))
        written = []
        for member, target in jobs:             # nothing is written before every member passed
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".extracting")
            src = archive.extractfile(member) if kind == "tar" else archive.open(member)
            with src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out, _CHUNK)
            tmp.replace(target)
            written.append(target)
    return written


def _remotes_for(name: str, base_url: str | None, remotes) -> tuple[Remote, ...]:
    key = dataset_key(name)
    if remotes is not None:
        table = tuple(remotes)
    elif key in REMOTES:
        table = REMOTES[key]
    else:
        raise UnknownDatasetError(f"{key} has no published download (paris6k-subset ships with the shared data)")
    base_url = base_url or os.environ.get("STREAMK_DATASETS_MIRROR")
    if base_url:
        _check_mirror(base_url)
        table = tuple(replace(r, url=base_url.rstrip("/") + "/" + r.filename) for r in table)
    return table


MIRROR_SCHEMES = ("http", "https", "ftp")  # what the downloader fetches


def _check_mirror(base_url):
    """ConfigError unless ``base_url`` is an http(s):// or ftp:// URL with a host: said before
    anything is fetched or made, not as the HTTP library's complaint about a file's URL."""
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    if parts.scheme.lower() not in MIRROR_SCHEMES or not parts.netloc:
        raise ConfigError(f"the mirror {base_url!r} (--mirror or $STREAMK_DATASETS_MIRROR) is not a URL: give its "
                          f"address with the scheme, e.g. https://example.org/datasets/ (http, https or ftp)")


def _made_folders(dest: Path) -> list[Path]:
    """The folders that making ``dest`` (with its parents) creates, deepest first."""
    made, p = [], dest.absolute()
    while not p.exists() and p != p.parent:
        made.append(p)
        p = p.parent
    return made


def download(name: str, dest_dir, progress: bool = True, *, base_url: str | None = None, remotes=None,
             keep_archives: bool = True, timeout: float = 60.0) -> Path:
    """Fetch a dataset's official files into ``dest_dir`` and extract them; return dest_dir.

    The result is the layout :func:`load_dataset` reads with ``root=dest_dir``:
    images in ``dest_dir/jpg/``, official text ground truth in
    ``dest_dir/gt_files/``, revisited ``gnd_*.pkl`` in ``dest_dir``.

    base_url   a mirror: each file is fetched from ``<base_url>/<file name>``
               instead of its published address (also $STREAMK_DATASETS_MIRROR);
    remotes    replaces the table entry (a sequence of :class:`Remote`);
    keep_archives  keep the downloaded archives after extraction.

    Files go through :func:`fetch` (pooch; resume; the size and SHA-256 in the
    table where known), archives through :func:`extract_archive`.  Already
    fetched and extracted files are not fetched again.  For oxford105k /
    paris106k only the 5k/6k part is fetched; the 100k Flickr distractors must
    be added to ``dest_dir/jpg`` by hand (a warning says so).
    """
    key = dataset_key(name)
    dest = Path(dest_dir)
    table = _remotes_for(key, base_url, remotes)  # an unknown name or a bad mirror: nothing made
    check_output_folder(dest, f"the dataset {key}")
    made = _made_folders(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        _download_into(key, dest, table, remotes, progress, keep_archives, timeout)
    except BaseException:
        for folder in made:  # a failed try leaves no empty folder it made (a partial download is kept)
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    return dest


def _download_into(key, dest, table, remotes, progress, keep_archives, timeout):
    if key in ("oxford105k", "paris106k") and remotes is None:
        warnings.warn(f"{key}: only the {key[:-4]}k images and ground truth are fetched; put the 100k Flickr "
                      f"distractor images in {dest / 'jpg'} yourself", stacklevel=3)
    for r in table:
        stamp = dest / f".{r.filename}.extracted"
        if r.extract is not None and stamp.exists():
            continue
        processor = None if r.extract is None else _ExtractOnce(dest / r.extract if r.extract else dest,
                                                                r.members, r.flatten, stamp, r.url)
        archive = fetch(r.url, dest / r.filename, size=r.size, sha256=r.sha256, progress=progress,
                        timeout=timeout, processor=processor)
        if r.extract is not None and not keep_archives:
            archive.unlink()


__all__ = ["REMOTES", "Remote", "ResumingDownloader", "download", "extract_archive", "fetch"]

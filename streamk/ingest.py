"""Bulk, resumable ingestion of image files into a :class:`~streamk.index.StreamingIndex`.

    with StreamingIndex.open("my.index") as idx:
        stats = Ingester(idx, workers=None, batch_size=64).ingest(["photos/", "extra.jpg"])
        print(stats.summary())

What it does, per pass over the given files and folders:

1. **Walk.** Folders are walked recursively (sorted, symlinked folders not
   followed); a file is an image candidate when its extension is one of
   :data:`IMAGE_EXTENSIONS` (case-insensitive). A *directory* whose name looks
   like an image (``photos.jpg/``), found in a folder or given explicitly, is
   reported as a bad file ("is a directory") and not descended into. A file given explicitly is always a
   candidate, whatever its extension.
2. **Ids.** A file found under a folder ROOT gets the id ``relpath(file, ROOT)``
   with the path separator replaced by ``"__"`` (``ROOT/a/b.jpg`` -> ``a__b.jpg``);
   a file given explicitly gets its base name (``x/y/c.png`` -> ``c.png``).
   Ids are checked with the store's rules (:func:`streamk.store.validate_id`:
   1..200 characters, no control characters, ...); a file whose id is invalid is
   reported and skipped. Two files mapping to the same id (``a/b.jpg`` and
   ``a__b.jpg``) cannot both be stored: the second is reported (IdExistsError).
3. **Skip what is known (resumable).** The sha256 of each file's bytes is
   computed first, in this process, and turned into the index's content key of
   an image file (see :mod:`streamk.index`: ``sha256(b"image\\0" + sha + b"null")``);
   files whose content is already in the ``hashes`` sub-database, or repeated in
   this run, are counted as *skipped existing* without extracting anything. An
   id that already holds other content is reported as failed (IdExistsError):
   nothing already stored is ever touched.
4. **Extract and encode** the remaining files in a process pool on all cores
   (spawned workers, each holding the index's extractor and encoder; an image
   that crashes a worker is isolated and reported as WorkerCrashed, like
   :func:`streamk.features.iter_extract`). Encoding in the workers matters: with
   temb k=64 it costs ~10x the extraction. The sha256 stored is that of the
   very bytes the features came from.
5. **Write** in this single process, ``batch_size`` images per LMDB write
   transaction (or sooner, every ``commit_interval`` seconds), through the same
   checks as :meth:`StreamingIndex.add`: each image is either fully stored or
   not at all, and a crash loses at most the uncommitted batch -- the next run
   skips everything committed.

Each bad file (unreadable, empty, truncated, corrupt, not an image, a directory,
no local features, invalid id, ...) is reported with its reason and skipped.
"""

import hashlib
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from . import features as feat
from .errors import (ConfigError, DuplicateError, EmptyDescriptorSetError, ImageReadError,
                     StreamkError)
from .index import encoded_image_file, image_content_key
from .store import validate_id
from .workers import isolated_map

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".gif", ".tif", ".tiff",
                              ".webp", ".ppm", ".pgm", ".pbm", ".pnm"})


def is_image_name(name):
    return os.path.splitext(str(name))[1].lower() in IMAGE_EXTENSIONS


def id_for(path, root=None):
    """The image id of ``path`` found under folder ``root`` (None: given explicitly)."""
    if root is None:
        return os.path.basename(os.path.normpath(str(path)))
    rel = os.path.relpath(str(path), str(root))
    return rel.replace(os.sep, "__").replace("/", "__")


def scan(roots):
    """([(path, id)], [(path, reason)]): image candidates and bad entries, in a stable order."""
    found, bad = [], []
    for root in roots:
        root = str(root)
        if os.path.isdir(root) and is_image_name(os.path.normpath(root)):
            bad.append((root, "ImageReadError: is a directory"))
        elif os.path.isdir(root):
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                keep = []
                for d in dirnames:
                    full = os.path.join(dirpath, d)
                    if is_image_name(d):
                        bad.append((full, "ImageReadError: is a directory"))
                    elif not os.path.islink(full):
                        keep.append(d)
                dirnames[:] = keep
                for name in sorted(filenames):
                    if is_image_name(name):
                        full = os.path.join(dirpath, name)
                        found.append((full, id_for(full, root)))
        elif os.path.lexists(root):
            found.append((root, id_for(root)))
        else:
            bad.append((root, "ImageReadError: no such file or directory"))
    return found, bad


@dataclass
class IngestStats:
    added: int = 0
    existing: int = 0
    failed: dict = field(default_factory=dict)  # path -> "ErrorType: reason"
    added_ids: list = field(default_factory=list)
    seconds: float = 0.0
    processed: int = 0  # files looked at (for the rate)

    @property
    def n_failed(self):
        return len(self.failed)

    def summary(self):
        rate = self.processed / self.seconds if self.seconds > 0 else 0.0
        return (f"added {self.added}, skipped {self.existing} existing, failed {self.n_failed} "
                f"({self.seconds:.1f} s, {rate:.2f} images/s)")


def _stat_sig(path):
    try:
        st = os.stat(path)
        return (st.st_size, st.st_mtime_ns)
    except OSError:
        return None


def _describe(exc):
    reason = exc.reason if isinstance(exc, ImageReadError) else str(exc)
    return f"{type(exc).__name__}: {reason}"


class Ingester:
    """Adds image files to an open, writable index; see the module doc.

    workers: extraction processes (None: all cores; 1: in this process).
    batch_size: images per write transaction. report: callable(path, reason)
    for each bad file (default: print to stderr). progress: tqdm bar on stderr
    (None: only when stderr is a terminal).
    """

    def __init__(self, index, workers=None, batch_size=64, commit_interval=2.0, report=None,
                 progress=None):
        if int(batch_size) < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if workers is not None and int(workers) < 1:
            raise ConfigError(f"workers must be >= 1, got {workers}")
        self.index = index
        self.workers = workers
        self.batch_size = int(batch_size)
        self.commit_interval = float(commit_interval)
        self.report = report or (lambda path, reason: print(f"streamk: skipped {path}: {reason}",
                                                            file=sys.stderr, flush=True))
        self.progress = progress
        self.stats = IngestStats()
        self._seen = {}  # path -> stat signature when last handled (for --watch)
        self._batch = []  # (path, _Encoded)
        self._last_commit = time.monotonic()
        self._bar = None
        self._extractor = index.extractor()  # pins the default extractor's params at the first write

    # ------------------------------------------------------------------ reporting
    def _fail(self, path, reason):
        self.stats.failed[str(path)] = reason
        self.stats.processed += 1
        self._seen[str(path)] = _stat_sig(path)
        if self._bar is not None:
            self._bar.clear()
        self.report(str(path), reason)
        self._tick()

    def _ok(self, path, status, image_id=None):
        self.stats.failed.pop(str(path), None)
        self.stats.processed += 1
        self._seen[str(path)] = _stat_sig(path)
        if status == "added":
            self.stats.added += 1
            self.stats.added_ids.append(image_id)
        else:
            self.stats.existing += 1
        self._tick()

    def _tick(self):
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(added=self.stats.added, existing=self.stats.existing,
                                  failed=self.stats.n_failed, refresh=False)

    # ------------------------------------------------------------------ writing
    def _flush(self):
        batch, self._batch = self._batch, []
        self._last_commit = time.monotonic()
        if not batch:
            return
        outcomes = self.index.write_encoded([enc for _, enc in batch])
        for (path, enc), out in zip(batch, outcomes):
            exc = out if isinstance(out, Exception) else None
            if exc is None:
                self._ok(path, out, enc.key.decode())
            elif isinstance(exc, DuplicateError):  # added meanwhile by another process
                self._ok(path, "exists")
            else:
                self._fail(path, _describe(exc))

    def _encode(self, path, image_id, sha, features):
        if len(features) == 0:
            raise EmptyDescriptorSetError("no local features")
        v, alpha = self.index.encoder.encode(features.descriptors, return_weights=True)
        return encoded_image_file(image_id, path, sha, v, features.keypoints, alpha, features.image_size)

    # ------------------------------------------------------------------ one pass
    def ingest(self, roots, only_new=False):
        """One pass over ``roots``; returns the cumulative :class:`IngestStats`.

        only_new: skip files already handled in an earlier pass of this Ingester
        whose size and mtime are unchanged (used by watch mode).
        """
        from tqdm.auto import tqdm

        t0 = time.monotonic()
        found, bad = scan(roots)
        if only_new:
            found = [(p, i) for p, i in found if self._seen.get(p, False) != _stat_sig(p)]
            bad = [(p, r) for p, r in bad if p not in self._seen]
        total = len(found) + len(bad)
        self._bar = tqdm(total=total, unit="img", desc="ingest", file=sys.stderr,
                         disable=True if self.progress is False else (None if self.progress is None
                                                                      else False),
                         dynamic_ncols=True) if total else None
        try:
            for p, reason in bad:
                self._fail(p, reason)
            todo = self._triage(found)
            if todo:
                self._extract_and_write(todo)
            self._flush()
        finally:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            self.stats.seconds += time.monotonic() - t0
        return self.stats

    def _triage(self, found):
        """Hash every candidate; count known content as existing; return {path: (id, sha, sig)}."""
        idx = self.index
        db = idx.store.dbs
        todo = {}
        in_run = {}  # content key -> path (same content twice in this run)
        with idx.store.read() as txn:
            for path, image_id in found:
                try:
                    validate_id(image_id)
                except StreamkError as exc:
                    self._fail(path, _describe(exc))
                    continue
                sig = _stat_sig(path)
                try:
                    data = feat._read_file_bytes(path)
                except ImageReadError as exc:
                    self._fail(path, _describe(exc))
                    continue
                sha = hashlib.sha256(data).hexdigest()
                ck = image_content_key(sha)
                owner = txn.get(ck, db=db["hashes"])
                if owner is not None or ck in in_run:
                    self._ok(path, "exists")
                    continue
                if txn.get(image_id.encode("utf-8"), db=db["images"]) is not None:
                    self._fail(path, f"IdExistsError: id {image_id!r} already holds other content")
                    continue
                in_run[ck] = path
                todo[path] = (image_id, sha, sig)
        return todo

    def _extract_and_write(self, todo):
        workers = feat._default_workers() if self.workers is None else int(self.workers)
        workers = max(1, min(workers, len(todo)))
        if workers == 1:
            _init_worker(None, None, self.index.encoder, self._extractor, in_pool=False)
            results = (_job(p) for p in todo)
        else:
            results = _run_pool(list(todo), self.index.encoder.to_bytes(), self._extractor, workers)
        try:
            for r in results:
                image_id, sha, sig = todo[r["path"]]
                if r["error"] is not None:
                    self._fail(r["path"], r["error"])
                    continue
                try:
                    enc = self._make_encoded(r, image_id)
                except StreamkError as exc:
                    self._fail(r["path"], _describe(exc))
                    continue
                self._batch.append((r["path"], enc))
                if (len(self._batch) >= self.batch_size
                        or time.monotonic() - self._last_commit >= self.commit_interval):
                    self._flush()
        finally:
            if hasattr(results, "close"):
                results.close()  # stops the pool when interrupted

    def _make_encoded(self, r, image_id):
        """The index's record of an image file (as StreamingIndex.add(image_path=...) writes it)
        from a worker's result; the sha256 is of the very bytes the features came from."""
        return encoded_image_file(image_id, r["path"], r["sha256"], r["vector"], r["keypoints"],
                                  r["weights"], r["image_size"])

    # ------------------------------------------------------------------ watch
    def watch(self, roots, interval=5.0, max_polls=None, on_poll=None):
        """Ingest, then poll ``roots`` every ``interval`` seconds for new or changed files.

        Stops after ``max_polls`` passes (None: until KeyboardInterrupt, which ends
        cleanly after committing what was already encoded). on_poll(n, stats) is
        called after each pass.
        """
        n = 0
        try:
            while True:
                self.ingest(roots, only_new=n > 0)
                n += 1
                if on_poll is not None:
                    on_poll(n, self.stats)
                if max_polls is not None and n >= max_polls:
                    break
                time.sleep(interval)
        except KeyboardInterrupt:
            self._flush()
        return self.stats


# ---------------------------------------------------------------------- worker processes
_W = {}  # per process: "encoder", "extractor"


def _init_worker(encoder_bytes, extractor, encoder=None, extractor_obj=None, in_pool=True):
    if in_pool:
        feat._worker_init()  # single-threaded libraries in each worker
        try:
            import numba
            numba.set_num_threads(1)
        except Exception:  # pragma: no cover - numba absent or refusing
            pass
        from .encoder import Encoder
        _W["encoder"] = Encoder.from_bytes(encoder_bytes)
        _W["extractor"] = extractor
    else:
        _W["encoder"], _W["extractor"] = encoder, extractor_obj


def _job(path):
    """Read, hash, extract and encode one image file; never raises."""
    out = {"path": path, "error": None}
    try:
        data = feat._read_file_bytes(path)
        gray = feat._decode_gray(data, path)
        f = _W["extractor"].extract_array(gray)
        if len(f) == 0:
            raise EmptyDescriptorSetError("no local features")
        v, alpha = _W["encoder"].encode(f.descriptors, return_weights=True)
        out.update(sha256=hashlib.sha256(data).hexdigest(), vector=np.asarray(v, np.float32),
                   weights=np.asarray(alpha, np.float32), keypoints=f.keypoints, n=len(f),
                   image_size=[int(x) for x in f.image_size])
    except Exception as exc:  # reported per file
        out["error"] = _describe(exc)
    return out


def _pool(workers, encoder_bytes, extractor):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn: fork after OpenCV / OpenMP / numba threads have run can deadlock the child
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(encoder_bytes, extractor))


def _run_pool(paths, encoder_bytes, extractor, workers):
    """Yield _job results in completion order; an image that kills a worker is isolated
    (the in-flight images are retried one at a time) and reported as WorkerCrashed."""
    return isolated_map(
        lambda n: _pool(n, encoder_bytes, extractor), lambda pool, p: pool.submit(_job, p), paths, workers,
        crashed=lambda p: {"path": p, "error": "WorkerCrashed: the process died on this image "
                                               "(a crash in the detector library?)"},
        failed=lambda p, exc: {"path": p, "error": _describe(exc)})


def collect_images(roots):
    """([image paths], [(path, reason)]) under ``roots`` (for training an encoder)."""
    found, bad = scan(roots)
    return [p for p, _ in found], bad


__all__ = ["IMAGE_EXTENSIONS", "Ingester", "IngestStats", "collect_images", "id_for",
           "image_content_key", "is_image_name", "scan"]

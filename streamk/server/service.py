"""What the server does with its index, apart from HTTP: the index kept open and warm in
one thread of its own, the encoding workers, thumbnails, and the answers as plain data.

Threads and processes. A StreamingIndex is not thread-safe and LMDB allows one
environment per process, so every index call runs in one dedicated thread (searches
take milliseconds; the costly step, extraction and encoding, runs in the worker
processes of :class:`~streamk.server.pool.EncodingPool`). The event loop only awaits.
Each search refreshes the index's view from its change log first, so images added or
removed by another process (``streamk ingest``, a notebook) are seen at the next request.
A write is one LMDB transaction committed before the answer is sent: a server stopped
or killed at any moment loses nothing it reported written.

The index at the server's path may be replaced while it runs (a backup moved into its
place): LMDB keeps mapping the old files, which a write would then go to (a deleted file,
lost at the restart). So the server compares the files it opened with what the path holds
(:meth:`Service.replaced`: a few ``stat`` calls, at most once a second, before every write)
and, once they differ, refuses every request that touches the index (503
``index_replaced``) until it is restarted; it never opens the new index in place.
"""

import asyncio
import logging
import os
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np

from .. import errors
from ..index import (ImageRecord, checked_vector, encoded_image_file, encoded_vector, open_index, replaced_files,
                     vector_only_note)
from .pool import EncodingPool
from .tasks import describe_upload, thumbnail_task

log = logging.getLogger("streamk.server")

MAX_THUMBNAIL_SOURCE = 64 << 20  # a collection file larger than this gets no thumbnail
PLACE_CHECK_INTERVAL = 1.0  # s: how often reads look whether the index at the path was replaced (writes: each time)


class WorkerError(Exception):
    """An error a worker reported for an image: ``name`` (a streamk.errors class name)
    and ``message``; the server answers it as it would that class."""

    def __init__(self, name, message):
        self.name = name
        self.message = message
        super().__init__(f"{name}: {message}")

    @property
    def http_status(self):
        """The ``http_status`` of the streamk error class it names; 422 (the image was not
        described) for a name that is none, as a worker's crash."""
        return getattr(getattr(errors, self.name, None), "http_status", 422)


def raise_worker_error(out):
    if out.get("error"):
        name, message = out["error"]
        raise WorkerError(name, message)
    return out


# Metadata fields in which ingestion records where each file lies on this machine: not
# shown to clients unless the server is told (--show-paths); filters may still use them.
SERVER_PATH_FIELDS = ("path", "folder")


class Service:
    """An index (``path``; sharded ones through ``dask``) served: see the module doc.

    workers: encoding processes; writable: open the index for writing (the server is
    read-only without a token); collection: folders whose files may be read to make the
    thumbnail of an image indexed from them (by ``streamk ingest``); nothing else on the
    server's disk is ever read on a client's behalf; show_paths: answers include the
    metadata fields SERVER_PATH_FIELDS (hidden by default)."""

    def __init__(self, path, workers=2, dask=None, writable=True, collection=(), show_paths=False):
        self.path = str(path)
        self.show_paths = bool(show_paths)
        self.workers = int(workers)
        self.dask = dask
        self.writable = bool(writable)
        self.collection = [os.path.realpath(c) for c in collection]
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamk-index")
        self.index = None
        self.pool = None
        self.dim = None
        self.has_local_features = False
        self._lock = threading.Lock()
        self._opened = {}  # {path: (st_dev, st_ino)} of the index's files as opened (Index.opened_files)
        self._place_lock = threading.Lock()
        self._place_checked = 0.0  # time.monotonic() of the last look
        self._replaced = None  # the message, once the index at the path is another one (for good)

    # ------------------------------------------------------------ life
    def open(self):
        """Open the index and start (and warm) the workers; blocking, before serving."""
        self._thread.submit(self._open).result()
        self.pool.start(warm=True)
        return self

    def _open(self):
        self.index = open_index(self.path, readonly=not self.writable, dask=self.dask)
        self._opened = self.index.opened_files()
        self._place_checked = time.monotonic()
        vocabulary = self.index.vocabulary
        self.has_local_features = vocabulary is not None
        self.dim = int(self.index.encoder.dim)
        extractor = self.index.extractor()  # the stored one, or the default (pinned by the first write)
        self.pool = EncodingPool(self.path, extractor, self.index.encoder.fingerprint, vocabulary is not None,
                                 self.workers)
        self._warm()

    def _warm(self):
        """Load what searches scan and the search kernels now, not at the first request:
        one first-stage search, and one verified search of random features."""
        from ..features import Features

        if len(self.index) == 0:
            return
        rng = np.random.default_rng(0)
        q = rng.standard_normal(self.dim).astype(np.float32)
        self.index.search(q / np.linalg.norm(q), k=1, verify=0)
        if self.has_local_features:
            n = 64
            kp = np.zeros((n, 6), np.float32)
            kp[:, :2] = rng.uniform(0, 200, (n, 2))
            kp[:, 2] = kp[:, 4] = 3.0
            f = Features(kp, rng.integers(0, 120, (n, 128)).astype(np.uint8), (200, 200))
            self.index.search(q / np.linalg.norm(q), k=1, features=f, verify=2, expand=1)

    def close(self):
        """Stop the workers, then close the index (after the writes in flight committed)."""
        if self.pool is not None:
            self.pool.close()
        try:
            if self.index is not None:
                self._thread.submit(self.index.close).result()
        finally:
            self._thread.shutdown(wait=True)

    # ------------------------------------------------------------ the index at its path
    def replaced(self, force=False):
        """The message of the IndexReplacedError once the index at ``path`` is no longer the
        one this server opened (moved away, deleted, a backup moved into its place:
        :func:`streamk.index.replaced_files`), else None. Looked at most once per
        PLACE_CHECK_INTERVAL, or now with ``force``; once found, for good (logged once).
        Any thread."""
        with self._place_lock:
            now = time.monotonic()
            if self._replaced is None and self._opened and (force or now - self._place_checked >= PLACE_CHECK_INTERVAL):
                self._place_checked = now
                changed = replaced_files(self._opened)
                if changed:
                    self._replaced = (f"the index at {self.path} was replaced while the server ran ({changed[0]} "
                                      f"is another file now, or gone): restart the server to serve it; until then "
                                      f"every request that reads or writes the index is refused (503 index_replaced), "
                                      f"and nothing is written to the old files")
                    log.error("%s", self._replaced)
            return self._replaced

    def check_place(self, force=False):
        """IndexReplacedError once the index at ``path`` was replaced (:meth:`replaced`)."""
        message = self.replaced(force)
        if message is not None:
            raise errors.IndexReplacedError(message)

    def run_sync(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` in the index thread, waited for (outside the event loop)."""
        return self._thread.submit(fn, *args, **kwargs).result()

    async def call(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` in the index thread."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, partial(fn, *args, **kwargs))

    # ------------------------------------------------------------ describing images (workers)
    async def describe(self, data, box=None, purpose="query", name="upload"):
        if purpose == "add" and not self.has_local_features:  # its stored geometry needs the words
            await self.call(self.local_features_now)
        return raise_worker_error(await self.pool.run(describe_upload, (data, box, purpose, name)))

    def local_features_now(self):
        """Whether the index keeps local geometry now (in the index thread): another process
        (``streamk index add-local-features``) may have given it visual words since the
        server started; the workers then describe uploads with them. One read of the
        index's state while it has none, nothing after."""
        if not self.has_local_features:
            vocabulary = self.index.vocabulary
            if vocabulary is not None:
                self.pool.use_vocabulary()
                self.has_local_features = True
        return self.has_local_features

    # ------------------------------------------------------------ search
    def _hits(self, hits, query):
        """Each hit as JSON with its image's size, kind and metadata (k reads, one transaction each)."""
        return {"query": query, "results": self._described([h.to_dict(pairs=False) for h in hits])}

    def _described(self, hits):
        """Each hit (a dict with its id) with its image's size, kind and metadata."""
        idx = self.index
        ids = [h["id"] for h in hits]
        records = idx.records(ids) if hits else []
        metas = idx.metadata_many(ids) if hits else []
        for d, raw, meta in zip(hits, records, metas):
            rec = ImageRecord.from_json(raw, idx.path, d["id"]) if raw is not None else None
            d["image_size"] = rec and rec.image_size
            d["kind"] = rec and rec.kind
            d["metadata"] = self.public_metadata(meta)
        return hits

    def search(self, vector, params, features=None, query=None, record=None):
        """The results of one query vector under ``params`` (a SearchParams: its filter
        selects among the images), with its image's Features, or a stored image's geometry
        record, for the second stage."""
        hits = self.index.search(checked_vector(vector, self.dim), params=params, features=features, record=record)
        return self._hits(hits, query or {})

    def search_id(self, image_id, params):
        """The results of an indexed image: its stored vector, verified with its stored local
        geometry where the index keeps it (on whichever shard holds it)."""
        v = self.index.vector(image_id)
        record = None
        if params.verify != 0 and self.local_features_now():
            record = self.index.geometry(image_id)
        return self.search(v, params, query={"kind": "id", "id": image_id}, record=record)

    def duplicates(self, image_id, threshold, verify, max_results, classes=None):
        """Its copies (exact / copy pairs) and every verified pair classed, where the index keeps
        local geometry and ``classes`` is not false; else its near-duplicates by vector
        similarity (``threshold``, ``verify``), with a note that they may be other photos."""
        if verify and classes is False:
            raise errors.ConfigError("verify=true classes every verified pair: give it without classes=false")
        if classes is None:
            classes = bool(verify) or self.local_features_now()
        if not classes:
            hits = self.index.duplicates(image_id, threshold=threshold, max_results=max_results)
            note = "near-duplicates " + vector_only_note(self.index, "IDX", "classes=false")
            return {"id": image_id, "threshold": threshold, "verify": False, "rule": "vector", "note": note,
                    "duplicates": self._hits(hits, {})["results"]}
        from ..index import copies_of

        # pixels: stored thumbnails, or files inside the served collection only
        pairs = [p.to_dict() for p in copies_of(self.index, image_id, source_filter=self._collection_file)]
        copies = [p for p in pairs if p["class"] != "same scene"][:max_results]
        hits = [{"id": p["b"], "score": p["score"], "stage": "verified", "inliers": p["inliers"], "verified": True,
                 "region": None, "affine": None} for p in copies]
        return {"id": image_id, "threshold": threshold, "verify": True, "rule": "classes",
                "note": self._no_pixels_note(pairs), "duplicates": self._described(hits), "pairs": pairs[:max_results]}

    def _no_pixels_note(self, pairs):
        """What to do when pairs with a copy's geometry were kept as same scene for want of
        pixels (this server reads stored thumbnails and files inside --images folders only)."""
        from ..verification import NO_PIXELS

        n = sum(p["reason"] == NO_PIXELS for p in pairs)
        if not n:
            return None
        where = ("no --images folder was given" if not self.collection else
                 "their files are not inside the --images folders")
        return (f"{n} pair(s) have the geometry of a copy but no pixels to compare ({where}): they are kept as "
                f"same scene; start the server with --images FOLDER, the folder the images were ingested from, "
                f"to class them")

    # ------------------------------------------------------------ writes
    def encoded_upload(self, image_id, described, name, metadata=None):
        """The EncodedImage of an uploaded image described by a worker; its metadata: the
        upload's name, size and EXIF date, and ``metadata`` (whose fields win)."""
        meta = dict(described["file_metadata"], **(metadata or {}))
        enc = encoded_image_file(image_id, name, described["sha256"], described["vector"], described["keypoints"],
                                 described["weights"], described["image_size"], None, described["geometry"],
                                 metadata=meta)
        record = dict(enc.record, source=None, kind="upload", filename=name)
        return enc._replace(record=record, thumbnail=described["thumbnail"])

    def encoded_vector(self, image_id, vector, metadata=None):
        return encoded_vector(image_id, vector, self.dim, metadata=metadata)

    def set_metadata(self, image_id, metadata, merge=False):
        self.check_place(force=True)  # in the index thread, just before the write: never into old files
        return self.index.set_metadata(image_id, metadata, merge=merge)

    def write(self, enc, replace=False):
        """Write one image (one transaction): "added" / "exists", or its named error."""
        self.check_place(force=True)
        out = self.index.write_encoded([enc], replace=replace)[0]
        if isinstance(out, Exception):
            raise out
        return out

    def remove(self, image_id):
        self.check_place(force=True)
        return self.index.remove([image_id])

    def require(self, image_id):
        """UnknownIdError unless the image is indexed."""
        if self.index.records([image_id])[0] is None:
            raise errors.UnknownIdError(f"no image {image_id!r} in the index")

    # ------------------------------------------------------------ facts
    def info(self, image_id):
        raw = self.index.records([image_id])[0]
        if raw is None:
            raise errors.UnknownIdError(f"no image {image_id!r} in the index")
        rec = ImageRecord.from_json(raw, self.index.path, image_id)
        return {"id": image_id, "kind": rec.kind, "sha256": rec.sha256,
                "n_descriptors": rec.n_descriptors, "image_size": rec.image_size,
                "box": rec.box, "added": rec.added, "filename": rec.get("filename"),
                "metadata": self.public_metadata(self.index.metadata(image_id))}

    def public_metadata(self, meta):
        """An image's metadata as answers show it: without the server's file paths unless told."""
        if self.show_paths or meta is None:
            return meta
        return {k: v for k, v in meta.items() if k not in SERVER_PATH_FIELDS}

    def stored_thumbnail(self, image_id):
        """(stored JPEG or None, path of the image in the served collection or None)."""
        jpeg = self.index.thumbnail(image_id)
        if jpeg is not None:
            return jpeg, None
        raw = self.index.records([image_id])[0]
        return None, self._collection_file(raw and ImageRecord.from_json(raw, self.index.path, image_id).source)

    def _collection_file(self, source):
        """``source`` if it is a regular file inside one of the collection folders."""
        if not source or not self.collection:
            return None
        real = os.path.realpath(source)
        if not any(os.path.commonpath([real, root]) == root for root in self.collection):
            return None
        try:
            st = os.stat(real)
        except OSError:
            return None
        return real if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_THUMBNAIL_SOURCE else None

    async def thumbnail(self, image_id):
        """The JPEG thumbnail of an image, or None when there is none to give."""
        jpeg, path = await self.call(self.stored_thumbnail, image_id)
        if jpeg is not None or path is None:
            return jpeg
        data = await asyncio.get_running_loop().run_in_executor(None, _read, path)
        out = await self.pool.run(thumbnail_task, (data, os.path.basename(path)))
        return None if out.get("error") else out["thumbnail"]

    def stats(self):
        s = self.index.stats()
        return {"images": int(s["images"]), "codec": s.get("codec"), "reader_memory": int(s.get("reader_memory", 0)),
                "shards": int(s.get("shards", 1)), "dim": self.dim, "local_features": self.local_features_now(),
                "workers": self.workers, "writable": self.writable,
                "indexed_fields": sorted(self._indexed_fields())}

    def _indexed_fields(self):
        return self.index.indexed_fields()  # a method of every streamk.index.Index


def _read(path):
    with open(path, "rb") as fh:
        return fh.read(MAX_THUMBNAIL_SOURCE + 1)


__all__ = ["Service", "WorkerError"]

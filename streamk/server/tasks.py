"""What the server's worker processes do with an uploaded image's bytes, never in the
server's event loop: :func:`streamk.index.describe_image` (the one way an image is
described, with the context of :func:`streamk.index.describe_context`), and thumbnails.

A task gets the bytes (never a path: a client never names a server file) and returns a
dict of plain data. A bad image comes back as ``{"error": ImageFailure}`` (the class
name and message of its error, :class:`streamk.index.ImageFailure`) rather than a raised
exception, so that an error class whose constructor takes other arguments still crosses
the process boundary; the server maps the name to its HTTP answer.
"""

import os
import time

from ..features import THUMBNAIL_SIDE, memory_image_metadata, thumbnail_jpeg
from ..index import ImageFailure, describe_context, describe_image, open_index, unit_vector
from ..parallel import TaskContext

# Test hook (tests/server/test_worker_faults.py): a worker whose context is built while
# this variable names an existing file dies in its initialiser (the file is removed
# first, so that only one worker dies): a death at start-up, on demand. Never set it
# in production.
DIE_AT_START_ENV = "STREAMK_TEST_WORKER_DIE_AT_START"
# Test hook (tests/server/test_disconnect.py): while this variable names a folder, a worker
# that starts describing an upload named NAME leaves the file NAME.started there (what the
# workers described), then waits while NAME.hold exists there (at most HOLD_LIMIT s): an
# upload held in its worker, on demand. Never set it in production.
HOLD_ENV = "STREAMK_TEST_WORKER_HOLD"
HOLD_LIMIT = 120.0


def index_describe_context(index_path, extractor, fingerprint, local_features):
    """The :func:`streamk.index.describe_context` of the index at ``index_path``, built in
    a worker process from the index itself (its encoder, and its visual words when
    ``local_features``), so that what a worker is sent to start is a path and a few
    small values, never the encoder's megabytes. ``fingerprint``: the encoder the server
    serves (an encoder changed since is an error, not a silent mismatch)."""
    _maybe_die_at_start()
    with open_index(index_path, readonly=True) as idx:
        encoder = idx.encoder
        vocabulary = idx.vocabulary if local_features else None
    if encoder.fingerprint != fingerprint:
        raise RuntimeError(f"the index's encoder changed since the server started ({encoder.fingerprint[:12]}... "
                           f"is not {fingerprint[:12]}...): restart the server")
    return describe_context(encoder, extractor, vocabulary)


def index_task_context(index_path, extractor, fingerprint, local_features=False):
    """The TaskContext of :func:`index_describe_context` (what each worker is sent)."""
    return TaskContext(index_describe_context, {"index_path": os.path.realpath(index_path), "extractor": extractor,
                                                "fingerprint": str(fingerprint),
                                                "local_features": bool(local_features)})


def _maybe_die_at_start():
    marker = os.environ.get(DIE_AT_START_ENV)
    if marker:
        try:
            os.remove(marker)
        except OSError:  # another worker took it (or none was asked for)
            return
        os._exit(3)


def _maybe_hold(name):
    folder = os.environ.get(HOLD_ENV)
    if not folder:
        return
    base = os.path.join(folder, os.path.basename(name))
    with open(base + ".started", "w"):
        pass
    deadline = time.monotonic() + HOLD_LIMIT
    while os.path.exists(base + ".hold") and time.monotonic() < deadline:
        time.sleep(0.02)


def describe_upload(ctx, item):
    """One uploaded image. ``item`` = (bytes, box or None, purpose, name): purpose "query"
    gives the unit vector of the features inside ``box`` and those features; "add" gives
    the vector, the display extras, the local-geometry record and a thumbnail."""
    data, box, purpose, name = item
    _maybe_hold(name)
    add = purpose != "query"
    try:
        d = describe_image(ctx, data, name, box, geometry=add, thumbnail=add, keep_features=not add)
        out = {"error": None, "sha256": d.sha256, "vector": unit_vector(d.vector), "image_size": list(d.image_size),
               "n": len(d.keypoints)}
        if not add:
            out["features"] = d.features
            return out
        out.update(geometry=d.geometry, keypoints=d.keypoints, weights=d.weights, thumbnail=d.thumbnail,
                   file_metadata=upload_metadata(data, name))
        return out
    except Exception as exc:  # reported to the client with its class name
        return {"error": ImageFailure.of(exc, name)}


def upload_metadata(data, name):
    """What an uploaded image's metadata holds of its file: name, size, EXIF date."""
    return memory_image_metadata(data, name)


def thumbnail_task(ctx, item):
    """A thumbnail of an image's bytes: ``item`` = (bytes, name)."""
    data, name = item
    try:
        return {"error": None, "thumbnail": thumbnail_jpeg(data, name, orient=ctx["extractor"].orients)}
    except Exception as exc:
        return {"error": ImageFailure.of(exc, name)}


__all__ = ["DIE_AT_START_ENV", "HOLD_ENV", "THUMBNAIL_SIDE", "describe_upload", "index_describe_context",
           "index_task_context", "thumbnail_jpeg", "thumbnail_task", "upload_metadata"]

"""One image described, the one way every caller does it: ``add(image_path=)`` of every
index (:func:`encode_item`), ingestion's workers and the server's workers.

    bytes -> features (from the feature cache, or extracted) -> the features inside a box
          -> the encoder's vector and per-descriptor weights
          -> the local-geometry record (with the index's visual words, when it keeps them)
          -> a thumbnail (when asked)

What every description shares is a *context*, built by :func:`describe_context` (the one
builder: in this process from the objects, in a worker process from their bytes, once per
worker through :class:`streamk.parallel.TaskContext`): ``{"encoder", "extractor",
"vocabulary", "cache"}``.

Errors. :func:`describe_image` raises the named error of a bad image
(:mod:`streamk.errors`); a task in a worker returns it as an :class:`ImageFailure`
instead -- the one shape in which an image's error crosses a process boundary, a worker
that died on it (:data:`streamk.parallel.CRASHED`) included. A pair (error class name,
message without the image's name), so that it pickles whatever the error class's
constructor takes; ``str()`` gives ``"ErrorType: message"`` (as
:func:`streamk.errors.describe`).
"""

import hashlib
from typing import NamedTuple

import numpy as np

from ..checks import as_descriptor_set
from ..errors import ConfigError, EmptyDescriptorSetError, ImageReadError
from ..features import (Features, FeatureCache, crop_to_box, features_of_bytes, file_metadata, in_memory_image_bytes,
                        memory_image_metadata, thumbnail_jpeg)
from ..parallel import TaskContext, in_worker_process
from ..verification import stored_record
from .items import EncodedImage, encoded_image_file, encoded_vector, normalise_box, npz_bytes, one_source, unit_vector
from .metadata import encode_metadata
from .store import id_key


# ---------------------------------------------------------------- the context
def describe_context(encoder=None, extractor=None, vocabulary=None, cache_dir=None, warm=None):
    """What describing images needs, built once per process: the Encoder and Vocabulary
    (None: no geometry records), each decoded when given as bytes; the extractor; the
    feature cache of ``cache_dir`` (None: none). ``warm`` (None: in a worker process) loads
    the encoder's Numba kernels before the first image (:func:`warm_encoder`)."""
    from ..encoding import Encoder
    from ..verification import Vocabulary

    if isinstance(encoder, (bytes, bytearray)):
        encoder = Encoder.from_bytes(bytes(encoder))
    if isinstance(vocabulary, (bytes, bytearray)):
        vocabulary = Vocabulary.from_bytes(bytes(vocabulary))
    ctx = {"encoder": encoder, "extractor": extractor, "vocabulary": vocabulary,
           "cache": None if cache_dir is None else FeatureCache(cache_dir)}
    if encoder is not None and (in_worker_process() if warm is None else warm):
        warm_encoder(encoder)
    return ctx


def describe_task_context(encoder=None, extractor=None, cache_dir=None, executor=None, vocabulary=None):
    """The :class:`~streamk.parallel.TaskContext` of :func:`describe_context` for a run on
    ``executor``. In this process (``executor.name == "in-process"``) the Encoder and
    Vocabulary themselves are used; elsewhere their bytes travel, once per worker."""
    in_process = executor is not None and executor.name == "in-process"
    key = None
    if in_process and (encoder is not None or vocabulary is not None):
        key = f"{getattr(encoder, 'fingerprint', None)}:{id(encoder)}:{id(vocabulary)}"
    else:
        if encoder is not None and not isinstance(encoder, (bytes, bytearray)):
            encoder = encoder.to_bytes()
        if vocabulary is not None and not isinstance(vocabulary, (bytes, bytearray)):
            vocabulary = vocabulary.to_bytes()
    params = {"encoder": encoder, "extractor": extractor, "vocabulary": vocabulary,
              "cache_dir": None if cache_dir is None else str(cache_dir)}
    if key is not None:  # the in-process objects stand for themselves; the rest is small
        key += ":" + hashlib.sha256(repr((extractor, params["cache_dir"])).encode()).hexdigest()
    return TaskContext(describe_context, params, key)


def warm_encoder(encoder):
    """Load (or compile once, cache=True) the Numba kernels this encoder calls, before
    the first image: a few random descriptors through the whole encoder."""
    rng = np.random.default_rng(0)
    try:
        encoder.encode(rng.integers(0, 256, (16, encoder.input_dim)).astype(np.float32))
    except Exception:  # a warm-up only: a real image reports its own errors
        pass


# ---------------------------------------------------------------- one image
class ImageDescription(NamedTuple):
    """What an index needs of one image, computed from its bytes (no transaction)."""

    sha256: str  # hex digest of the bytes described
    image_size: tuple  # (width, height) of the whole image
    keypoints: np.ndarray  # of the features described (inside the box, if one was given)
    vector: np.ndarray  # (D,) float32: the encoder's vector (stored as a unit vector)
    weights: np.ndarray  # float32 per-descriptor weights of the aggregation
    geometry: bytes | None = None  # the local-geometry record, or None (no visual words)
    thumbnail: bytes | None = None  # a small JPEG (streamk.features.thumbnail_jpeg), or None
    features: Features | None = None  # the features described, when asked (a query's second stage)

    def encoded(self, image_id, path, box=None, metadata=None):
        """The :class:`~streamk.index.EncodedImage` that ``add(image_path=path)`` writes
        for this description (its thumbnail included)."""
        enc = encoded_image_file(image_id, path, self.sha256, self.vector, self.keypoints, self.weights,
                                 self.image_size, box, self.geometry, metadata)
        return enc._replace(thumbnail=self.thumbnail)


def describe_image(ctx, data, name, box=None, sha256=None, geometry=True, thumbnail=False, keep_features=False):
    """The :class:`ImageDescription` of an image file's bytes, or the named error of a bad
    image. ctx: a :func:`describe_context` context; name: the image's name in errors (its
    path, or an upload's name); box: (x1, y1, x2, y2): describe the features inside it;
    sha256: the bytes' digest when the caller has it; geometry: make the local-geometry
    record (when the context has visual words); thumbnail: make one; keep_features: keep
    the Features described."""
    sha = sha256 or hashlib.sha256(data).hexdigest()
    f, _ = features_of_bytes(data, name, ctx["extractor"], ctx.get("cache"), sha)
    size = tuple(int(v) for v in f.image_size)
    if box is not None:
        f = crop_to_box(f, box)
    if len(f) == 0:
        raise EmptyDescriptorSetError(f"{name}: no local features" + (" inside the box" if box is not None else "")
                                      + "; use a larger or more textured image")
    v, alpha = ctx["encoder"].encode(f.descriptors, return_weights=True)
    vocabulary = ctx.get("vocabulary") if geometry else None
    record = None if vocabulary is None else stored_record(vocabulary, f.keypoints, f.descriptors, f.image_size)
    return ImageDescription(sha, size, f.keypoints, np.asarray(v, np.float32), np.asarray(alpha, np.float32), record,
                            thumbnail_jpeg(data, name, orient=ctx["extractor"].orients) if thumbnail else None,
                            f if keep_features else None)


def geometry_record(ctx, features):
    """The stored local-geometry record (bytes) of an image's features, or None when the
    context has no visual words."""
    vocabulary = ctx.get("vocabulary")
    if vocabulary is None:
        return None
    return stored_record(vocabulary, features.keypoints, features.descriptors, features.image_size)


# ---------------------------------------------------------------- the one error shape
class ImageFailure(NamedTuple):
    """Why an image was not described, as a task returns it across a process boundary:
    the :mod:`streamk.errors` class name and a one-line message without the image's name
    (the caller reports it beside). ``str()``: ``"ErrorType: message"``."""

    error: str
    message: str

    @classmethod
    def of(cls, exc, name=None):
        """The failure of an exception raised describing the image ``name``."""
        reason = exc.reason if isinstance(exc, ImageReadError) else (str(exc) or repr(exc))
        if name is not None:
            reason = reason.removeprefix(f"{name}: ")
        return cls(type(exc).__name__, " ".join(reason.split()))

    @classmethod
    def of_task(cls, failure):
        """The failure of a :class:`streamk.parallel.TaskFailure` (a task that never
        returned: its worker died, or its result could not come back)."""
        error, sep, message = failure.reason.partition(": ")
        return cls(error, message) if sep else cls("TaskFailure", failure.reason)

    def __str__(self):
        return f"{self.error}: {self.message}"


# ---------------------------------------------------------------- one item of add / update
def encode_item(image_id, image_path=None, descriptors=None, vector=None, box=None, metadata=None, *, encoder,
                extractor, vocabulary, dim):
    """The :class:`~streamk.index.EncodedImage` that ``add`` / ``update`` of every index
    write for one image from exactly one source, or a named error (before any write):

    image_path: an image file, or an image held in memory (the file's bytes, a PIL image,
    an (H, W, 3 or 4) uint8 array; :func:`~streamk.features.in_memory_image_bytes`),
    described with ``extractor()`` (a callable: the extractor is looked up only for images)
    inside ``box``; its metadata also gets the file's fields
    (:func:`~streamk.features.file_metadata`; in memory: size and EXIF date) and an image in
    memory keeps a thumbnail (no file is left for its pixels); ``metadata``'s fields win.
    descriptors: (n, d) raw descriptors encoded with ``encoder``. vector: a vector of
    dimension ``dim`` (made a unit vector). ``vocabulary``: the visual words of the local
    geometry record, or None."""
    key = id_key(image_id)
    if metadata is not None:
        encode_metadata(metadata)  # MetadataError before any work
    kind = one_source(image_path, descriptors, vector)
    box = normalise_box(box)
    if box is not None and kind != "image_path":
        raise ConfigError("box applies to image_path only")
    if kind == "vector":
        return encoded_vector(image_id, vector, dim, metadata)
    if kind == "descriptors":
        X = as_descriptor_set(descriptors, dim=encoder.input_dim)
        v, alpha = encoder.encode(X, return_weights=True)
        sha = hashlib.sha256(X.tobytes()).hexdigest()
        content = hashlib.sha256(b"descriptors\0" + str(X.shape).encode() + bytes.fromhex(sha)).digest()
        record = {"kind": kind, "source": None, "box": None, "n_descriptors": int(X.shape[0]), "sha256": sha}
        return EncodedImage(key, unit_vector(v), content, record, npz_bytes(weights=np.asarray(alpha, np.float32)),
                            None, metadata=metadata)
    ex = extractor()
    name = f"image {image_id!r}"  # an image held in memory has no file name
    data = in_memory_image_bytes(image_path, name, ex.max_file_size, ex.max_pixels)
    in_memory = data is not None
    if not in_memory:
        data, name = ex.read(image_path), image_path
    context = describe_context(encoder, ex, vocabulary, warm=False)
    described = describe_image(context, data, name, box, thumbnail=in_memory)
    found = memory_image_metadata(data) if in_memory else file_metadata(image_path, data)
    return described.encoded(image_id, None if in_memory else image_path, box, dict(found, **(metadata or {})))


__all__ = ["ImageDescription", "ImageFailure", "describe_context", "describe_image", "describe_task_context",
           "encode_item", "geometry_record", "warm_encoder"]

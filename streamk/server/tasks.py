"""What the server's worker processes do: one uploaded image's bytes -> its features,
its vector, its local-geometry record and a thumbnail; never in the server's event loop.

A task gets the bytes (never a path: a client never names a server file) and returns a
dict of plain data. A bad image comes back as ``{"error": (class name, message)}`` rather
than a raised exception, so that an error class whose constructor takes other arguments
still crosses the process boundary; the server maps the name to its HTTP answer.
"""

import hashlib
import io

import numpy as np

from ..errors import EmptyDescriptorSetError, ImageReadError
from ..features import crop_to_box, exif_date, features_of_bytes, pil_image
from ..index import unit_vector

THUMBNAIL_SIDE = 256  # the longer side of a stored thumbnail, in pixels
THUMBNAIL_QUALITY = 80


def build_context(encoder=None, extractor=None, vocabulary=None):
    """Built once per worker process (streamk.parallel's TaskContext): the encoder and
    vocabulary decoded from their bytes, the extractor, the encoder's kernels warmed."""
    from ..encoding import Encoder
    from ..pipeline.tasks import warm
    from ..verification import Vocabulary

    encoder = Encoder.from_bytes(bytes(encoder))
    vocabulary = None if vocabulary is None else Vocabulary.from_bytes(bytes(vocabulary))
    warm(encoder)
    return {"encoder": encoder, "extractor": extractor, "vocabulary": vocabulary}


def thumbnail_jpeg(data, name="upload", side=THUMBNAIL_SIDE):
    """A JPEG of at most ``side`` pixels a side (aspect kept) of an image's bytes, or
    ImageReadError. Pixels as stored (no EXIF rotation), as the features see them."""
    Image = pil_image()
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.draft("RGB", (side, side))  # JPEG: decode at 1/2..1/8 scale, fast
            img = img.convert("RGB")
            img.thumbnail((side, side))
            out = io.BytesIO()
            img.save(out, "JPEG", quality=THUMBNAIL_QUALITY)
            return out.getvalue()
    except Image.DecompressionBombError as exc:
        raise ImageReadError(name, f"image too large ({exc})") from exc
    except Exception as exc:  # Pillow raises OSError, ValueError, SyntaxError, ...
        raise ImageReadError(name, f"cannot make a thumbnail ({str(exc) or type(exc).__name__})") from exc


def _error(exc):
    return {"error": (type(exc).__name__, str(exc) if not isinstance(exc, ImageReadError) else exc.reason)}


def describe_image(ctx, item):
    """One uploaded image. ``item`` = (bytes, box or None, purpose, name): purpose "query"
    gives the unit vector of the features inside ``box`` and those features; "add" gives
    the vector, the display extras, the local-geometry record and a thumbnail."""
    data, box, purpose, name = item
    try:
        sha = hashlib.sha256(data).hexdigest()
        f, _ = features_of_bytes(data, name, ctx["extractor"], None, sha)
        full_size = [int(v) for v in f.image_size]
        if box is not None:
            f = crop_to_box(f, box)
        if len(f) == 0:
            raise EmptyDescriptorSetError(f"{name}: no local features" + (" inside the box" if box is not None else "")
                                          + "; send a larger or more textured photo")
        v, alpha = ctx["encoder"].encode(f.descriptors, return_weights=True)
        out = {"error": None, "sha256": sha, "vector": unit_vector(v), "image_size": full_size, "n": len(f)}
        if purpose == "query":
            out["features"] = f
            return out
        vocabulary = ctx["vocabulary"]
        if vocabulary is not None:
            from ..verification import stored_record

            out["geometry"] = stored_record(vocabulary, f.keypoints, f.descriptors, f.image_size)
        else:
            out["geometry"] = None
        file_meta = {"name": name, "size": len(data)}
        date = exif_date(data)
        if date is not None:
            file_meta["date"] = date
        out.update(keypoints=f.keypoints, weights=np.asarray(alpha, np.float32), thumbnail=thumbnail_jpeg(data, name),
                   file_metadata=file_meta)
        return out
    except Exception as exc:  # reported to the client with its class name
        return _error(exc)


def thumbnail_task(ctx, item):
    """A thumbnail of an image's bytes: ``item`` = (bytes, name)."""
    data, name = item
    try:
        return {"error": None, "thumbnail": thumbnail_jpeg(data, name)}
    except Exception as exc:
        return _error(exc)


__all__ = ["THUMBNAIL_SIDE", "build_context", "describe_image", "thumbnail_jpeg", "thumbnail_task"]

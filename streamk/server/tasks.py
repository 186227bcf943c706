"""What the server's worker processes do with an uploaded image's bytes, never in the
server's event loop: :func:`streamk.index.describe_image` (the one way an image is
described, with the context of :func:`streamk.index.describe_context`), and thumbnails.

A task gets the bytes (never a path: a client never names a server file) and returns a
dict of plain data. A bad image comes back as ``{"error": ImageFailure}`` (the class
name and message of its error, :class:`streamk.index.ImageFailure`) rather than a raised
exception, so that an error class whose constructor takes other arguments still crosses
the process boundary; the server maps the name to its HTTP answer.
"""

from ..features import THUMBNAIL_SIDE, exif_date, thumbnail_jpeg
from ..index import ImageFailure, describe_image, unit_vector


def describe_upload(ctx, item):
    """One uploaded image. ``item`` = (bytes, box or None, purpose, name): purpose "query"
    gives the unit vector of the features inside ``box`` and those features; "add" gives
    the vector, the display extras, the local-geometry record and a thumbnail."""
    data, box, purpose, name = item
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
    meta = {"name": name, "size": len(data)}
    date = exif_date(data)
    if date is not None:
        meta["date"] = date
    return meta


def thumbnail_task(ctx, item):
    """A thumbnail of an image's bytes: ``item`` = (bytes, name)."""
    data, name = item
    try:
        return {"error": None, "thumbnail": thumbnail_jpeg(data, name)}
    except Exception as exc:
        return {"error": ImageFailure.of(exc, name)}


__all__ = ["THUMBNAIL_SIDE", "describe_upload", "thumbnail_jpeg", "thumbnail_task", "upload_metadata"]

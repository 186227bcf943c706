"""Image files to grayscale arrays: read once, decoded by Pillow, named errors for
every way a file can be bad.

EXIF orientation is IGNORED: images are used as stored (raw pixel grid),
because the Oxford/Paris query boxes are given in raw pixel coordinates.

Grey levels: 8-bit images go through Pillow's ``convert("L")`` (ITU-R 601-2
luma for colour); 16-bit images are divided by 257; float images are taken as
0..1 when their maximum is at most 1, else as 0..255, and clipped.
"""

import io
import os
import stat

import numpy as np

from ..errors import ExtractorUnavailableError, ImageReadError

def read_image_bytes(path):
    """The bytes of an image file, or ImageReadError (missing, a directory, unreadable, empty)."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise ImageReadError(path, "is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise ImageReadError(path, "not a regular file")
        with open(path, "rb") as fh:
            data = fh.read()
    except ImageReadError:
        raise
    except FileNotFoundError as exc:
        raise ImageReadError(path, "no such file") from exc
    except IsADirectoryError as exc:
        raise ImageReadError(path, "is a directory") from exc
    except PermissionError as exc:
        raise ImageReadError(path, "permission denied") from exc
    except OSError as exc:
        raise ImageReadError(path, exc.strerror or str(exc)) from exc
    if not data:
        raise ImageReadError(path, "empty file (0 bytes)")
    return data


def pil_image():
    """Pillow's Image module, or ExtractorUnavailableError."""
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ExtractorUnavailableError(
            "reading images needs Pillow: pip install 'streamk[features]'") from exc
    return Image


def _to_gray(img):
    mode = img.mode
    if mode == "L":
        return np.asarray(img, dtype=np.uint8)
    if mode.startswith("I;16"):
        a = np.asarray(img).astype(np.float64) / 257.0
    elif mode == "I":
        a = np.asarray(img).astype(np.float64)
        if a.size and a.max() > 255:
            a = a / 257.0
    elif mode == "F":
        a = np.asarray(img).astype(np.float64)
        a = np.nan_to_num(a, nan=0.0, posinf=255.0, neginf=0.0)
        if a.size and a.max() <= 1.0:
            a = a * 255.0
    else:
        try:
            gray = img.convert("L")
        except (ValueError, OSError):
            gray = img.convert("RGB").convert("L")
        return np.asarray(gray, dtype=np.uint8)
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def decode_gray(data, path):
    """uint8 (height, width) grayscale array from the bytes of an image file."""
    Image = pil_image()
    from PIL import UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()  # decode now: truncated or corrupt data fails here
            gray = _to_gray(img)
    except UnidentifiedImageError as exc:
        raise ImageReadError(path, "not a recognised image format") from exc
    except Image.DecompressionBombError as exc:  # Pillow's limit: over ~179 megapixels
        raise ImageReadError(path, f"image too large ({exc})") from exc
    except Exception as exc:  # Pillow's decoders raise OSError, ValueError, SyntaxError, ...
        reason = str(exc) or type(exc).__name__
        reason = f"truncated image ({reason})" if "truncated" in reason else f"corrupt image ({reason})"
        raise ImageReadError(path, reason) from exc
    if gray.ndim != 2 or gray.size == 0:
        raise ImageReadError(path, f"decoded to an unusable array of shape {gray.shape}")
    return np.ascontiguousarray(gray)


def load_gray(path):
    """Read an image file as a uint8 (height, width) grayscale array (no EXIF rotation).

    Raises :class:`~streamk.errors.ImageReadError` (with ``path`` and ``reason``)
    for a missing, empty, truncated, corrupt or non-image file and for a directory.
    """
    return decode_gray(read_image_bytes(path), path)


__all__ = ["decode_gray", "load_gray", "pil_image", "read_image_bytes"]

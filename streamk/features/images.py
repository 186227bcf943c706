"""Image files to grayscale arrays: read once, decoded by Pillow, named errors for
every way a file can be bad; and the small JPEG thumbnail an index keeps for display.

EXIF orientation: with ``orient`` (the extractors of features version 3, every new
index's), an image is turned as its EXIF Orientation tag says (a phone's portrait
photo is stored sideways with a tag saying so), so that features, boxes, thumbnails
and drawings are in the frame every viewer shows, and a portrait photo matches a
landscape one of the same scene. Without it (indexes made before, and the evaluation
datasets, whose query boxes are given in the stored pixel grid) images are used as
stored. :func:`exif_orientation` reads the tag from the header; :func:`orient_array`
turns a decoded array.

Grey levels: 8-bit images go through Pillow's ``convert("L")`` (ITU-R 601-2
luma for colour); 16-bit images are divided by 257; float images are taken as
0..1 when their maximum is at most 1, else as 0..255, and clipped.

Limits (every image's cost is bounded before it is paid; a file over one is refused
with :class:`~streamk.errors.ImageTooLargeError`, which names the limit and how to
raise it):

* :data:`MAX_FILE_SIZE` (50 MiB): checked with ``os.stat`` before the file is read,
  and the read itself stops one byte past it (a file growing meanwhile). A 4 GB
  sparse file is refused without reading it. 50 MiB is ten times a 50-megapixel
  camera JPEG at top quality; an image file larger than that is a RAW/TIFF export or
  not a photograph.
* :data:`MAX_PIXELS` (128 megapixels): width x height from the file's header,
  checked before anything is decoded. Admits a 108-megapixel phone photo; the worst
  full decode (non-JPEG, 4 bands) is then 512 MB. Pillow's own decompression-bomb
  guard (``Image.MAX_IMAGE_PIXELS``) is set explicitly to at least this limit (never
  disabled), and its warning/error become ours.
* Downscaling while decoding: with ``max_side`` (the extractors' default is
  :data:`~streamk.features.extractors.DEFAULT_MAX_SIDE`), a JPEG is decoded by
  libjpeg at 1/2, 1/4 or 1/8 scale (Pillow's ``draft``), the smallest that keeps the
  long side >= ``max_side``, so a 10000 x 8000 JPEG costs about what a 1250 x 1000
  one does; other formats are decoded whole (within MAX_PIXELS) and reduced.
"""

import io
import os
import re
import stat
import warnings

import numpy as np

from ..errors import ExtractorUnavailableError, ImageReadError, ImageTooLargeError
from ..units import byte_size

#: Largest image file read, in bytes (50 MiB). ``max_file_size=`` / ``--max-file-size`` change it.
MAX_FILE_SIZE = 50 * 2**20
#: Most pixels (width x height, from the header) decoded. ``max_pixels=`` / ``--max-pixels`` change it.
MAX_PIXELS = 128_000_000
#: Most bytes an image decodes to (pixels x channels x bytes per sample, from the header):
#: 512 MiB, an 8-bit 4-channel image at MAX_PIXELS; a 16-bit RGB one stops at 89 megapixels.
MAX_DECODED_BYTES = 512 * 2**20


def _check_limit(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        from ..errors import ConfigError

        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def read_image_bytes(path, max_file_size=MAX_FILE_SIZE):
    """The bytes of an image file, or ImageReadError (missing, a directory, unreadable, empty),
    or ImageTooLargeError (over ``max_file_size`` bytes: checked before reading)."""
    max_file_size = _check_limit(max_file_size, "max_file_size")
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise ImageReadError(path, "is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise ImageReadError(path, "not a regular file")
        if st.st_size > max_file_size:
            raise _file_too_large(path, st.st_size, max_file_size)
        with open(path, "rb") as fh:
            data = fh.read(max_file_size + 1)  # bounded even if the file grew since the stat
            if len(data) > max_file_size:
                raise _file_too_large(path, os.fstat(fh.fileno()).st_size, max_file_size)
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


_RAISE_IT = {"max_file_size": "--max-file-size BYTES", "max_pixels": "--max-pixels N"}


def _advice(limit):
    return f"({limit}; raise it with {_RAISE_IT[limit]} or {limit}=)"


def over_limit(path, fact, limit):
    """ImageTooLargeError saying ``fact`` and how to raise ``limit``."""
    return ImageTooLargeError(path, f"{fact} {_advice(limit)}", limit=limit)


def advice_for_clients(message):
    """``message`` (of an image over a limit) as a server's client reads it: the limit is the
    server's, which a client cannot raise with a flag of its own; it can send less, or ask."""
    for limit in _RAISE_IT:
        message = message.replace(_advice(limit), f"(this server's {limit}: send a smaller image, or ask the "
                                                  f"server's operator to raise it with streamk serve "
                                                  f"--{limit.replace('_', '-')})")
    return message


def _file_too_large(path, size, limit):
    return over_limit(path, f"file of {byte_size(size)} is over the limit of {byte_size(limit)}", "max_file_size")


def _pixels_too_large(path, size, limit):
    w, h = size
    return over_limit(path, f"{w} x {h} = {w * h:,} pixels is over the limit of {limit:,} pixels", "max_pixels")


def pil_image(data=None):
    """Pillow's Image module, or ExtractorUnavailableError. Its decompression-bomb guard
    is set to at least :data:`MAX_PIXELS` (never left disabled), and its warnings about
    corrupt EXIF blocks are off. ``data``: the bytes about
    to be opened; when they are a HEIC / HEIF photo, pillow-heif's opener is registered
    first (once per process, and only then: its import costs ~30 ms)."""
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ExtractorUnavailableError(
            "reading images needs Pillow: pip install 'streamk[features]'") from exc
    _guard(Image, MAX_PIXELS)
    if not _quiet_exif:
        # Pillow parses EXIF as TIFF tags and warns when a block is broken ("Corrupt EXIF data",
        # "Tag data larger than file": some apps write such blocks, and every copy keeps them): two
        # lines of Python warning per open, several per file in an ingest. The tags it could not
        # read count as absent (orientation 1, no date); the pixels are unaffected.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.TiffImagePlugin")
        _quiet_exif.append(True)
    if data is not None and is_heif(data):
        _register_heif()
    return Image


_quiet_exif = []


#: ISO base media file brands of HEIF still images (iPhone photos: heic); AVIF (avif, avis)
#: is read by Pillow itself
_HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"})
_heif_registered = []


def is_heif(data):
    """Whether ``data`` starts as a HEIC / HEIF file does (an ISO box ``ftyp`` of a HEIF brand)."""
    head = bytes(data[:12])
    return len(head) == 12 and head[4:8] == b"ftyp" and head[8:12] in _HEIF_BRANDS


def _register_heif():
    """pillow-heif's opener registered with Pillow, once; False when it is not installed."""
    if not _heif_registered:
        try:
            import pillow_heif
        except ImportError:
            return False
        pillow_heif.register_heif_opener()
        _heif_registered.append(True)
    return True


def _guard(Image, max_pixels):
    """Pillow warns past ``Image.MAX_IMAGE_PIXELS`` and refuses past twice that, in
    ``Image.open``: keep it set, and at least ``max_pixels`` (ours is checked exactly
    right after the header is read; Pillow's is the backstop)."""
    if Image.MAX_IMAGE_PIXELS is None or Image.MAX_IMAGE_PIXELS < max_pixels:
        Image.MAX_IMAGE_PIXELS = int(max_pixels)


def _to_gray(img):
    mode = img.mode
    if mode == "L":
        return np.asarray(img, dtype=np.uint8)
    if mode.startswith("I;16"):
        a = np.asarray(img).astype(np.float64)
        a /= 257.0  # in place: one float64 copy, not two
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
        return np.asarray(_convert(img, "L"), dtype=np.uint8)
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def _convert(img, mode):
    """Pillow's conversion to an 8-bit ``mode``, through RGB where it has no direct one (LAB)."""
    try:
        return img.convert(mode)
    except (ValueError, OSError):
        return img.convert("RGB").convert(mode)


def eight_bit(img, mode):
    """An opened image as 8 bits a channel in ``mode`` ("L" or "RGB"), for pictures a person
    or the copy check looks at. Deep grey images (16-bit, 32-bit, float) are scaled as the
    features see them (:func:`_to_gray`): Pillow's ``convert`` clips them, so a 16-bit grey
    photo came out white."""
    if img.mode.startswith("I") or img.mode == "F":
        return pil_image().fromarray(_to_gray(img)).convert(mode)
    return _convert(img, mode)


def _open(data, path, max_pixels):
    """The PIL image of a file's bytes, header read, nothing decoded; its size checked."""
    Image = pil_image(data)
    from PIL import UnidentifiedImageError

    max_pixels = _check_limit(max_pixels, "max_pixels")
    _guard(Image, max_pixels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        # Pillow's own text names its own limit (twice ours for the error): say the image's pixels, and ours
        found = re.search(r"\((\d+) pixels\)", str(exc))
        pixels = f"{int(found.group(1)):,} pixels is over" if found else "over"
        raise over_limit(path, f"{pixels} the limit of {max_pixels:,} pixels", "max_pixels") from exc
    except UnidentifiedImageError as exc:
        if is_heif(data):
            raise ImageReadError(path, "a HEIC / HEIF photo (an iPhone's): reading it needs pillow-heif: "
                                       "pip install 'streamk[features]' (or pillow-heif)") from exc
        raise ImageReadError(path, "not a recognised image format") from exc
    except Exception as exc:
        raise ImageReadError(path, f"corrupt image ({str(exc) or type(exc).__name__})") from exc
    try:
        check_pixels(img.size, path, max_pixels)
        check_decoded_bytes(img, path)
    except ImageTooLargeError:
        img.close()
        raise
    return img


def decoded_bytes(img):
    """The bytes an opened image takes decoded, from its header alone: pixels x channels x
    bytes per sample, where a sample is as wide as the file stores it (a 16-bit PNG: 2
    bytes) and one-band images of more than 8 bits (16-bit, 32-bit, float grey) count the
    8 bytes of the float64 copy that turns them grey."""
    w, h = img.size
    bands = len(img.getbands())
    # the decoder's raw mode ("I;16B", "F;32F", "CMYK;I"), the first string of the tile's
    # arguments where it has one; a GIF's (bits, interlaced, ...) or a DDS's masks have none
    args = img.tile[0][3] if getattr(img, "tile", None) else img.mode
    args = args if isinstance(args, tuple) else (args,)
    raw = next((a for a in args if isinstance(a, str)), img.mode)
    bits = 32 if ";32" in raw or img.mode in ("I", "F") else 16 if ";16" in raw or img.mode.startswith("I;16") else 8
    per_sample = 8 if bands == 1 and bits > 8 else bits // 8
    return w * h * bands * per_sample


def check_decoded_bytes(img, path, limit=None):
    """ImageTooLargeError when an opened image decodes to more than ``limit`` bytes
    (:data:`MAX_DECODED_BYTES`): the pixel limit alone lets a 16-bit image cost several times more."""
    limit = MAX_DECODED_BYTES if limit is None else limit
    n = decoded_bytes(img)
    if n > limit:
        w, h = img.size
        raise ImageTooLargeError(path, f"{w} x {h} pixels of {img.mode} ({len(img.getbands())} channels) decode to "
                                       f"{byte_size(n)}, over the limit of {byte_size(limit)}: send it at 8 bits per "
                                       f"channel or fewer pixels", limit="max_decoded_bytes")


def check_pixels(size, path, max_pixels=MAX_PIXELS):
    """ImageTooLargeError when an image of ``size`` = (width, height) is over ``max_pixels``."""
    w, h = size
    if w * h > max_pixels:
        raise _pixels_too_large(path, (w, h), max_pixels)


#: EXIF Orientation (1-8) -> the turn that shows the image upright, as numpy operations on
#: a (height, width[, bands]) array (the TIFF / EXIF definition; Pillow's ImageOps.exif_transpose)
_ORIENT = {
    2: lambda a: a[:, ::-1],  # mirrored left-right
    3: lambda a: a[::-1, ::-1],  # upside down
    4: lambda a: a[::-1, :],  # mirrored top-bottom
    5: lambda a: a.swapaxes(0, 1),  # mirrored along the main diagonal
    6: lambda a: np.rot90(a, -1),  # stored turned 90 degrees counter-clockwise: turn it clockwise
    7: lambda a: a[::-1, ::-1].swapaxes(0, 1),  # mirrored along the other diagonal
    8: lambda a: np.rot90(a, 1),  # stored turned 90 degrees clockwise: turn it counter-clockwise
}


def exif_orientation(img):
    """The EXIF Orientation (1-8) of an opened PIL image, from its header; 1 (as stored)
    when it has none or an invalid one."""
    try:
        value = int(img.getexif().get(0x0112, 1))
    except Exception:  # no EXIF, or EXIF Pillow cannot parse: as stored
        return 1
    return value if value in _ORIENT else 1


def orient_array(a, orientation):
    """The (height, width[, bands]) array ``a`` turned upright for its EXIF ``orientation``."""
    turn = _ORIENT.get(int(orientation))
    return a if turn is None else np.ascontiguousarray(turn(a))


def orient_image(img, orientation):
    """A decoded PIL image (grey or RGB) turned upright for its EXIF ``orientation`` (the same
    image when 1)."""
    if int(orientation) not in _ORIENT:
        return img
    return pil_image().fromarray(orient_array(np.asarray(img), orientation))


def oriented_size(size, orientation):
    """(width, height) of an image of stored ``size`` once turned for ``orientation``."""
    return (size[1], size[0]) if int(orientation) in (5, 6, 7, 8) else tuple(size)


def _decode(img, path):
    Image = pil_image()
    try:
        with img:
            img.load()  # decode now: truncated or corrupt data fails here
            gray = _to_gray(img)
    except Image.DecompressionBombError as exc:  # pragma: no cover - _open checked the size
        raise ImageTooLargeError(path, f"image too large ({exc})", limit="max_pixels") from exc
    except Exception as exc:  # Pillow's decoders raise OSError, ValueError, SyntaxError, ...
        reason = str(exc) or type(exc).__name__
        reason = f"truncated image ({reason})" if "truncated" in reason else f"corrupt image ({reason})"
        raise ImageReadError(path, reason) from exc
    if gray.ndim != 2 or gray.size == 0:
        raise ImageReadError(path, f"decoded to an unusable array of shape {gray.shape}")
    return np.ascontiguousarray(gray)


def decode_gray(data, path, max_pixels=MAX_PIXELS, orient=False):
    """uint8 (height, width) grayscale array from the bytes of an image file, at full
    resolution (turned upright for its EXIF orientation with ``orient``);
    ImageTooLargeError past ``max_pixels`` (checked on the header)."""
    img = _open(data, path, max_pixels)
    orientation = exif_orientation(img) if orient else 1
    return orient_array(_decode(img, path), orientation)


def scaled_size(size, max_side):
    """(width, height) of an image of ``size`` reduced so that its long side is at most
    ``max_side`` (never enlarged; None: unchanged)."""
    W, H = size
    if max_side is None or max(W, H) <= max_side:
        return W, H
    s = max_side / max(W, H)
    return max(1, round(W * s)), max(1, round(H * s))


def resize_gray(gray, size):
    """A uint8 grayscale array resized to ``size`` = (width, height) (Pillow, bilinear
    with its antialiasing support when reducing)."""
    Image = pil_image()
    return np.asarray(Image.fromarray(np.ascontiguousarray(gray)).resize(size, Image.Resampling.BILINEAR),
                      dtype=np.uint8)


def decode_gray_scaled(data, path, max_side=None, max_pixels=MAX_PIXELS, draft=True, orient=False):
    """(uint8 grayscale array, (width, height) of the original image): the image of a
    file's bytes reduced so that its long side is at most ``max_side`` (None: full
    size), at the size :func:`scaled_size` gives. A JPEG is decoded at a reduced scale
    by libjpeg when ``draft`` (see the module doc); ``max_pixels`` is checked on the
    header before anything is decoded. ``orient``: the array and the size are those of
    the image turned upright for its EXIF orientation."""
    img = _open(data, path, max_pixels)
    orientation = exif_orientation(img) if orient else 1
    size = img.size
    target = scaled_size(size, max_side)
    if draft and target != size and getattr(img, "format", None) == "JPEG":
        try:
            img.draft("L", target)  # libjpeg's DCT scaling: 1/2, 1/4 or 1/8, never below target
        except Exception:  # pragma: no cover - a decoder that refuses: decode whole
            pass
    gray = _decode(img, path)
    if (gray.shape[1], gray.shape[0]) != target:
        gray = resize_gray(gray, target)
    return orient_array(np.ascontiguousarray(gray), orientation), oriented_size(size, orientation)


def load_gray(path, max_file_size=MAX_FILE_SIZE, max_pixels=MAX_PIXELS):
    """Read an image file as a uint8 (height, width) grayscale array (as stored: no EXIF turn).

    Raises :class:`~streamk.errors.ImageReadError` (with ``path`` and ``reason``)
    for a missing, empty, truncated, corrupt or non-image file and for a directory,
    and :class:`~streamk.errors.ImageTooLargeError` for a file over a limit.
    """
    return decode_gray(read_image_bytes(path, max_file_size), path, max_pixels)


EXIF_DATE_TAGS = (0x9003, 0x9004, 0x0132)  # DateTimeOriginal, DateTimeDigitized (Exif IFD), DateTime


def exif_date(data):
    """The EXIF date of an image's bytes as ``"YYYY-MM-DD HH:MM:SS"`` (sorts as time), or
    None (no EXIF, no date, not parseable). Reads the header only: Pillow's ``open`` is
    lazy and ``getexif`` decodes no pixels."""
    try:
        Image = pil_image(data)
        with Image.open(io.BytesIO(data)) as img:
            exif = img.getexif()
            values = {0x0132: exif.get(0x0132)}
            values.update(exif.get_ifd(0x8769))
    except Exception:  # no EXIF to speak of: a date is optional
        return None
    for tag in EXIF_DATE_TAGS:
        raw = values.get(tag)
        if isinstance(raw, bytes):
            raw = raw.decode("ascii", "replace")
        if isinstance(raw, str) and len(raw) >= 19 and raw[4] == ":" and raw[7] == ":":
            text = raw[:19]
            date = text[:10].replace(":", "-") + text[10:]
            if date[:4].isdigit() and date[:4] != "0000":
                return date
    return None


def _json_text(name):
    """``name`` as valid text: the bytes of a file name that are not UTF-8 (os.fsdecode's
    lone surrogates, which JSON cannot hold) written as ``\\xNN``."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def file_metadata(path, data):
    """What ingestion stores about an image file: ``path`` (absolute), ``folder``, ``name``,
    ``size`` (bytes read), ``mtime`` (unix time, when the file can be stat'ed) and ``date``
    (the EXIF date, where the bytes carry one)."""
    path = os.path.abspath(os.fsdecode(path))
    text = _json_text(path)
    out = {"path": text, "folder": os.path.dirname(text), "name": os.path.basename(text), "size": len(data)}
    try:
        out["mtime"] = os.stat(path).st_mtime
    except OSError:
        pass
    date = exif_date(data)
    if date is not None:
        out["date"] = date
    return out


def memory_image_metadata(data, name=None):
    """What is stored about an image given as bytes, not as a file (an upload, an image
    held in memory): ``name`` (when it has one), ``size`` (bytes) and ``date`` (the EXIF
    date, where the bytes carry one)."""
    out = {} if name is None else {"name": name}
    out["size"] = len(data)
    date = exif_date(data)
    if date is not None:
        out["date"] = date
    return out


#: the PIL modes a PNG holds as they are (others go through :func:`eight_bit` as RGB)
_PNG_MODES = ("1", "L", "LA", "P", "RGB", "RGBA", "I;16")


def is_image_in_memory(image):
    """Whether ``image`` is an image held in memory that :func:`in_memory_image_bytes` takes:
    bytes, a PIL image, an (H, W, 3 or 4) uint8 array."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return True
    if isinstance(image, np.ndarray):
        return image.ndim == 3 and image.shape[2] in (3, 4) and image.dtype == np.uint8
    return type(image).__module__.startswith("PIL.") and hasattr(image, "getbands")


def in_memory_image_bytes(image, name="query image", max_file_size=MAX_FILE_SIZE, max_pixels=MAX_PIXELS):
    """The file bytes of an image held in memory, or None when ``image`` is not one: bytes
    as they are (a file's contents, an upload; within ``max_file_size``), a PIL image or an
    (H, W, 3 or 4) uint8 array (RGB / RGBA, as skimage and Pillow give it) as a lossless PNG
    of its pixels, checked against ``max_pixels`` before it is encoded. A 2-D array is not
    taken: an (n, 128) one is a descriptor set (pass a grey image as a PIL image)."""
    if not is_image_in_memory(image):
        return None
    if isinstance(image, (bytes, bytearray, memoryview)):
        data = bytes(image)
        if len(data) > _check_limit(max_file_size, "max_file_size"):
            raise _file_too_large(name, len(data), max_file_size)
        return data
    if isinstance(image, np.ndarray):
        check_pixels((image.shape[1], image.shape[0]), name, max_pixels)  # before the array's copy
        image = pil_image().fromarray(np.ascontiguousarray(image))
    else:
        check_pixels(image.size, name, max_pixels)
    if image.mode not in _PNG_MODES:
        image = eight_bit(image, "RGB")
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=1)  # lossless, and fast: its pixels are what is searched
    return out.getvalue()


THUMBNAIL_SIDE = 256  # the longer side of a stored thumbnail, in pixels
THUMBNAIL_QUALITY = 80


def thumbnail_jpeg(data, name="upload", side=THUMBNAIL_SIDE, orient=False):
    """A JPEG of at most ``side`` pixels a side (aspect kept) of an image's bytes, or
    ImageReadError. In the frame the features see: turned for its EXIF orientation with
    ``orient`` (the extractor's :attr:`~streamk.features.Extractor.orients`), else as stored."""
    Image = pil_image(data)
    try:
        with Image.open(io.BytesIO(data)) as img:
            orientation = exif_orientation(img) if orient else 1
            img.draft("RGB", (side, side))  # JPEG: decode at 1/2..1/8 scale, fast
            img = orient_image(eight_bit(img, "RGB"), orientation)
            img.thumbnail((side, side))
            out = io.BytesIO()
            img.save(out, "JPEG", quality=THUMBNAIL_QUALITY)
            return out.getvalue()
    except Image.DecompressionBombError as exc:
        raise ImageReadError(name, f"image too large ({exc})") from exc
    except Exception as exc:  # Pillow raises OSError, ValueError, SyntaxError, ...
        raise ImageReadError(name, f"cannot make a thumbnail ({str(exc) or type(exc).__name__})") from exc


__all__ = ["MAX_DECODED_BYTES", "MAX_FILE_SIZE", "MAX_PIXELS", "THUMBNAIL_SIDE", "advice_for_clients",
           "check_decoded_bytes", "check_pixels",
           "decode_gray", "decode_gray_scaled", "decoded_bytes", "eight_bit", "exif_date", "exif_orientation",
           "file_metadata", "in_memory_image_bytes", "is_heif", "is_image_in_memory", "orient_array", "orient_image",
           "oriented_size", "load_gray", "memory_image_metadata", "pil_image", "read_image_bytes", "resize_gray",
           "scaled_size", "thumbnail_jpeg"]

"""Real-world image changes for the demo's query views (Pillow, deterministic).

Each transform takes an 8-bit ``L`` or ``RGB`` Pillow image and a NumPy
``Generator`` and returns a new image of the same mode:

======== ==================================================================
crop     keep a window of ~60% of the area, at a random position
rotate   rotate by 20-30 degrees (either way), canvas expanded, black fill
scale    downscale to 50% (Lanczos)
persp    a perspective view: each corner moved inward by up to 18%
jpeg     re-encode as JPEG at quality 12 (blocking, ringing, colour loss)
light    gamma, brightness and contrast changed together
======== ==================================================================

:data:`VARIANTS` are milder changes (``nearer``, ``tilted``) for extra database
photos of a scene.

:func:`view` seeds the generator from (seed, image key, transform name), so
a view depends on nothing else (not on the order of the calls, nor on Python's
hash randomisation).
"""

import io
import zlib

import numpy as np

from ..errors import ConfigError, ImageReadError

MODES = ("L", "RGB")


def _pil():
    from PIL import Image

    return Image


def crop(img, rng, area=0.6):
    """A window of ``area`` of the image (same aspect ratio), at a random position."""
    w, h = img.size
    side = np.sqrt(area)
    cw, ch = max(1, round(w * side)), max(1, round(h * side))
    x = int(rng.integers(0, w - cw + 1))
    y = int(rng.integers(0, h - ch + 1))
    return img.crop((x, y, x + cw, y + ch))


def rotate(img, rng, degrees=(20.0, 30.0)):
    """Rotated by 20-30 degrees clockwise or anticlockwise; the canvas grows to hold it all."""
    angle = float(rng.uniform(*degrees)) * (1 if rng.random() < 0.5 else -1)
    return img.rotate(angle, resample=_pil().Resampling.BICUBIC, expand=True)


def scale(img, rng, factor=0.5):
    """Downscaled to ``factor`` of each side (a lower-resolution copy)."""
    w, h = img.size
    return img.resize((max(1, round(w * factor)), max(1, round(h * factor))), _pil().Resampling.LANCZOS)


def _perspective_coeffs(dst, src):
    """The 8 coefficients PIL's PERSPECTIVE transform takes: for each output pixel
    (x, y) it samples the input at ((a x + b y + c) / (g x + h y + 1), (d x + e y + f) / (...)),
    so they map the output corners ``dst`` to the input corners ``src``."""
    A = np.zeros((8, 8))
    b = np.zeros(8)
    for i, ((x, y), (u, v)) in enumerate(zip(dst, src)):
        A[2 * i] = (x, y, 1, 0, 0, 0, -u * x, -u * y)
        A[2 * i + 1] = (0, 0, 0, x, y, 1, -v * x, -v * y)
        b[2 * i], b[2 * i + 1] = u, v
    return np.linalg.solve(A, b)


def perspective(img, rng, strength=0.18):
    """The image seen from another angle: its corners pulled inward by up to ``strength``
    of the side (independently), the result filling the same canvas size."""
    w, h = img.size
    corners = np.array([(0, 0), (w, 0), (w, h), (0, h)], dtype=np.float64)
    inward = np.array([(1, 1), (-1, 1), (-1, -1), (1, -1)], dtype=np.float64)
    moved = corners + inward * rng.uniform(0, strength, size=(4, 2)) * (w, h)
    # output corners = where the image corners land; PIL wants output -> input
    coeffs = _perspective_coeffs(moved, corners)
    Image = _pil()
    return img.transform((w, h), Image.Transform.PERSPECTIVE, tuple(coeffs), Image.Resampling.BICUBIC)


def jpeg(img, rng, quality=12):
    """Re-encoded as a heavily compressed JPEG (and decoded again)."""
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=int(quality))
    buf.seek(0)
    out = _pil().open(buf)
    out.load()
    return out.convert(img.mode)


def light(img, rng):
    """Other lighting: a gamma of 0.5-0.7 or 1.5-2.0, brightness x0.7-1.3, contrast x0.6-0.9."""
    from PIL import ImageEnhance

    gamma = float(rng.uniform(0.5, 0.7) if rng.random() < 0.5 else rng.uniform(1.5, 2.0))
    lut = np.clip(np.rint(255.0 * (np.arange(256) / 255.0) ** gamma), 0, 255).astype(np.uint8)
    out = img.point(lut.tolist() * len(img.getbands()))
    out = ImageEnhance.Brightness(out).enhance(float(rng.uniform(0.7, 1.3)))
    return ImageEnhance.Contrast(out).enhance(float(rng.uniform(0.6, 0.9)))


TRANSFORMS = {"crop": crop, "rotate": rotate, "scale": scale, "persp": perspective,
              "jpeg": jpeg, "light": light}


def nearer(img, rng):
    """Another photo of the scene from closer: 80% of the area, other lighting."""
    return light(crop(img, rng, area=0.8), rng)


def tilted(img, rng):
    """Another photo from further off: 70% of the size, tilted by 5-10 degrees."""
    return rotate(scale(img, rng, factor=0.7), rng, degrees=(5.0, 10.0))


#: milder changes, for extra database photos of a scene (so that a query has several positives)
VARIANTS = {"nearer": nearer, "tilted": tilted}
_ALL = {**TRANSFORMS, **VARIANTS}


def check_names(names):
    """The transform names as a list (ConfigError for an unknown or repeated one)."""
    names = list(names)
    unknown = [n for n in names if n not in TRANSFORMS]
    if unknown:
        raise ConfigError(f"unknown transform(s) {unknown}; choose from {list(TRANSFORMS)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"a transform is named twice in {names}")
    if not names:
        raise ConfigError("no transform given")
    return names


def rng_for(seed, key, name):
    """The generator of one view: a function of (seed, key, transform name) only."""
    return np.random.default_rng([int(seed), zlib.crc32(str(key).encode()), zlib.crc32(name.encode())])


def view(img, name, key, seed=0):
    """The view ``name`` (a :data:`TRANSFORMS` or :data:`VARIANTS` key) of ``img``;
    ``key`` names the source image."""
    if name not in _ALL:
        raise ConfigError(f"unknown transform {name!r}; choose from {list(_ALL)}")
    if img.mode not in MODES:
        raise ConfigError(f"transforms take L or RGB images, got mode {img.mode!r} (see open_rgb)")
    return _ALL[name](img, rng_for(seed, key, name))


def open_rgb(path, max_side=None):
    """An image file as an 8-bit L or RGB Pillow image (raw pixel grid, EXIF orientation
    ignored, as the feature extractor does), downscaled so its long side is <= max_side.

    Raises :class:`~streamk.errors.ImageReadError` for an unreadable file.
    """
    Image = _pil()
    try:
        with Image.open(path) as img:
            img.load()
            if img.mode in MODES:
                out = img.copy()
            elif img.mode.startswith(("I", "F")):  # 16-bit / float: the extractor's grey levels
                from ..features import load_gray
                out = Image.fromarray(load_gray(path))
            else:  # palette, alpha, CMYK, ...
                out = img.convert("RGB")
    except ImageReadError:
        raise
    except Exception as exc:  # Pillow raises OSError, ValueError, SyntaxError, ...
        raise ImageReadError(path, str(exc) or type(exc).__name__) from exc
    if max_side is not None and max(out.size) > max_side:
        out.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    return out

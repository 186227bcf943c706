"""Bursty scenes: where sum pooling should fail and democratic / GMP aggregation not.

The paper's argument (Murray et al., section 1 and section 3.1): with sum
aggregation the similarity of two images is the sum of the similarities of all
their descriptor pairs, so a *bursty* structure -- many descriptors forming one
mode, as the windows of a facade, the tiles of a wall, the bars of a fence --
contributes in proportion to the square of its count and dominates the image
vector, although it is not the informative part; democratic aggregation and GMP
give each descriptor an equal say, so a small distinctive object keeps its
weight. Distractors (Oxford105k) make it show: images that share the burst but
not the object.

The scenes follow that argument and nothing else (their parameters were fixed
before any mAP was measured, and are not tuned to one):

* a **place** is a wall covered by one repeated structure, drawn here: a facade of
  identical windows, a tiled wall, or a diagonal fence lattice; two places per
  family, their period and colours drawn from the seed;
* a **scene** is a place with one small distinctive **object** hung on it: a crop
  of a real photograph (the centre of one of the demo's photos), 160 x 120 pixels
  on a 640 x 480 wall (6% of the area), inside the central region so that every
  query change (a crop keeps 77% of each side) keeps it whole; scenes are spread
  over the places in turn, so a place holds several scenes;
* **distractors**: each place also appears bare (another stretch of the same
  wall, no object), twice.

The instance to find is the scene: its positives are its own database images
(the original and its milder views); the other scenes of the same place and the
bare walls share all of its bursty descriptors and none of its object's. The
photograph an object was cut from shares the object only: it is junk for the
scene's queries (neither right nor wrong), and the scene is junk for the
photograph's.
"""

from typing import NamedTuple

import numpy as np

from . import transforms as tf

SIZE = (640, 480)
OBJECT_SIZE = (160, 120)
FAMILIES = ("windows", "tiles", "fence")
PLACES_PER_FAMILY = 2
BARE_VIEWS = 2  # distractors per place
#: photos whose whole frame is a texture: bursts themselves, not objects
NOT_OBJECTS = ("brick", "grass", "gravel")


class Place(NamedTuple):
    name: str  # e.g. "windows-1"
    family: str
    period: tuple  # (px, py) of the repeated motif
    colours: tuple  # three grey levels: wall, motif, detail


def places(seed=0):
    """The demo's places: PLACES_PER_FAMILY per family, parameters drawn from ``seed``."""
    out = []
    for f, family in enumerate(FAMILIES):
        for i in range(PLACES_PER_FAMILY):
            rng = np.random.default_rng([int(seed), 1009, f, i])
            period = {"windows": (int(rng.integers(56, 80)), int(rng.integers(72, 96))),
                      "tiles": (int(rng.integers(36, 56)),) * 2,
                      "fence": (int(rng.integers(32, 48)),) * 2}[family]
            wall, motif, detail = (int(v) for v in rng.integers((150, 20, 90), (230, 80, 150)))
            out.append(Place(f"{family}-{i + 1}", family, period, (wall, motif, detail)))
    return out


def _cells(period, offset, size):
    """The top-left corners of a periodic grid's cells (``period`` px, shifted by ``offset``)
    covering an image of ``size``, one cell beyond each edge, row by row."""
    (px, py), (ox, oy), (w, h) = period, offset, size
    for y in range(-py + oy % py, h + py, py):
        for x in range(-px + ox % px, w + px, px):
            yield x, y


def _windows(draw, place, offset, size):
    (px, py), (wall, glass, frame) = place.period, place.colours
    for x, y in _cells((px, py), offset, size):
        x0, y0, x1, y1 = x + px // 5, y + py // 6, x + px - px // 5, y + py - py // 4
        draw.rectangle((x0 - 3, y0 - 3, x1 + 3, y1 + 3), fill=frame)
        draw.rectangle((x0, y0, x1, y1), fill=glass)
        draw.line(((x0 + x1) // 2, y0, (x0 + x1) // 2, y1), fill=frame, width=3)  # mullion
        draw.line((x0, (y0 + y1) // 2, x1, (y0 + y1) // 2), fill=frame, width=3)  # transom
        draw.rectangle((x0 - 6, y1 + 4, x1 + 6, y1 + 8), fill=wall - 40)  # sill


def _tiles(draw, place, offset, size):
    (p, _), (tile, grout, inlay) = place.period, place.colours
    for x, y in _cells((p, p), offset, size):
        draw.rectangle((x, y, x + p, y + p), fill=grout)
        draw.rectangle((x + 3, y + 3, x + p - 3, y + p - 3), fill=tile)
        c, r = x + p // 2, p // 4
        draw.polygon(((c, y + p // 2 - r), (c + r, y + p // 2), (c, y + p // 2 + r), (c - r, y + p // 2)),
                     fill=inlay)


def _fence(draw, place, offset, size):
    (p, _), bar = place.period, place.colours[1]  # on the wall colour
    w, h = size
    shift = offset[0] % p
    for c in range(-h - p, w + h + p, p):  # bars at +45 and -45 degrees
        draw.line((c + shift, 0, c + shift + h, h), fill=bar, width=6)
        draw.line((c + shift, h, c + shift + h, 0), fill=bar, width=6)


_DRAW = {"windows": _windows, "tiles": _tiles, "fence": _fence}


def wall(place, offset, noise_seed):
    """A 640 x 480 RGB image of the place's wall, the motif shifted by ``offset`` pixels, with
    mild sensor noise (so that the repeated motifs are near-identical, not identical)."""
    from PIL import Image, ImageDraw

    img = Image.new("L", SIZE, place.colours[0])
    _DRAW[place.family](ImageDraw.Draw(img), place, offset, SIZE)
    rng = np.random.default_rng(noise_seed)
    px = np.asarray(img, np.float64) + rng.normal(0, 3, (SIZE[1], SIZE[0]))
    return Image.fromarray(np.clip(np.rint(px), 0, 255).astype(np.uint8)).convert("RGB")


def object_crop(photo):
    """The object cut from a photo: its central 4:3 window of 60% of the largest one,
    resized to OBJECT_SIZE."""
    from PIL import Image

    w, h = photo.size
    cw = min(w, h * 4 / 3) * 0.6
    ch = cw * 3 / 4
    box = tuple(round(v) for v in ((w - cw) / 2, (h - ch) / 2, (w + cw) / 2, (h + ch) / 2))
    return photo.convert("RGB").crop(box).resize(OBJECT_SIZE, Image.Resampling.LANCZOS)


def scene_image(place, obj, key, seed=0):
    """The scene: the place's wall with ``obj`` pasted in the central region (position and
    wall offset drawn from (seed, key))."""
    rng = tf.rng_for(seed, key, "scene")
    offset = (int(rng.integers(0, 1000)), int(rng.integers(0, 1000)))
    img = wall(place, offset, rng.integers(1 << 31))
    w, h = SIZE
    ow, oh = OBJECT_SIZE
    x = int(rng.integers(w // 4, 3 * w // 4 - ow + 1))
    y = int(rng.integers(h // 4, 3 * h // 4 - oh + 1))
    img.paste(obj, (x, y))
    return img


def bare_wall(place, n, seed=0):
    """The n-th distractor of a place: another stretch of its wall, no object."""
    rng = tf.rng_for(seed, f"{place.name}/bare{n}", "scene")
    return wall(place, (int(rng.integers(0, 1000)), int(rng.integers(0, 1000))), rng.integers(1 << 31))


__all__ = ["BARE_VIEWS", "FAMILIES", "NOT_OBJECTS", "OBJECT_SIZE", "SIZE", "Place", "bare_wall", "object_crop",
           "places", "scene_image", "wall"]

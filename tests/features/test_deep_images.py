"""Deep grey images (16-bit, float) in the pictures a person or the copy check sees.

Pillow's ``convert("L")`` / ``convert("RGB")`` clips a 16-bit grey image at 255, so a
16-bit grey photo's thumbnail, notebook view and copy-check pixels were white while its
features (``images._to_gray``, scaled by 1/257) were right: a 16-bit PNG and its 8-bit
twin were classed "same scene, pixels agree 0.01", and any two 16-bit greys compared as the
same pixels. The reference here is the 8-bit twin saved by Pillow from the same values.
"""

import io

import numpy as np
import pytest
from PIL import Image

from streamk.features import eight_bit, thumbnail_jpeg
from streamk.verification.copies import decode_for_copies, same_pixels
from streamk.widgets.common import image_from_bytes


def _png(array):
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def twins():
    rng = np.random.default_rng(4)
    gray8 = rng.integers(0, 256, (90, 120), dtype=np.uint8)
    deep = {"I;16": _png(gray8.astype(np.uint16) * 257),
            "F": None}
    buf = io.BytesIO()
    Image.fromarray(gray8.astype(np.float32) / 255.0).save(buf, "TIFF")
    deep["F"] = buf.getvalue()
    return gray8, _png(gray8), deep


@pytest.mark.parametrize("mode", ["I;16", "F"])
def test_eight_bit_scales_a_deep_grey_as_its_8_bit_twin(twins, mode):
    gray8, _, deep = twins
    img = Image.open(io.BytesIO(deep[mode]))
    assert img.mode.startswith("I") or img.mode == "F"
    np.testing.assert_array_equal(np.asarray(eight_bit(img, "L")), gray8)
    rgb = np.asarray(eight_bit(Image.open(io.BytesIO(deep[mode])), "RGB"))
    assert rgb.shape == gray8.shape + (3,) and all(np.array_equal(rgb[..., c], gray8) for c in range(3))


@pytest.mark.parametrize("mode", ["I;16", "F"])
def test_thumbnail_notebook_view_and_copy_pixels_of_a_deep_grey_are_its_twins(twins, mode):
    gray8, png8, deep = twins
    np.testing.assert_array_equal(decode_for_copies(deep[mode]), decode_for_copies(png8))
    np.testing.assert_array_equal(np.asarray(image_from_bytes(deep[mode], "deep")),
                                  np.asarray(image_from_bytes(png8, "8")))
    thumb = np.asarray(Image.open(io.BytesIO(thumbnail_jpeg(deep[mode]))), np.float64)
    thumb8 = np.asarray(Image.open(io.BytesIO(thumbnail_jpeg(png8))), np.float64)
    assert thumb.shape == thumb8.shape and np.abs(thumb - thumb8).max() <= 1  # the same JPEG, up to its rounding
    assert abs(thumb.mean() - gray8.mean()) < 3  # not white


def test_same_pixels_compares_deep_greys_at_their_depth(twins):
    gray8, png8, deep = twins
    above = (gray8.astype(np.uint16) * 257) | 0x100  # every value over 255: clipped, all would be white
    other = above ^ 1  # differs in every pixel's lowest bit
    assert not same_pixels(_png(above), _png(other))
    assert same_pixels(_png(above), _png(above.copy()))
    assert same_pixels(deep["I;16"], png8)  # the same picture at 8 bits
    assert not same_pixels(deep["I;16"], _png(np.roll(gray8, 1)))


def test_a_lab_tiff_reaches_the_copy_check_as_grey():
    """Pillow has no LAB -> L conversion: the copy check's decode failed on a LAB TIFF whose
    features (grey through RGB) were fine."""
    rng = np.random.default_rng(5)
    rgb = Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8))
    buf = io.BytesIO()
    rgb.convert("LAB").save(buf, "TIFF")
    lab = Image.open(io.BytesIO(buf.getvalue()))
    assert lab.mode == "LAB"
    expected = np.asarray(lab.convert("RGB").convert("L"))
    np.testing.assert_array_equal(decode_for_copies(buf.getvalue()), expected)

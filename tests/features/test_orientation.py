"""EXIF orientation (features version 3): an image stored sideways with a tag saying so is
described, drawn and compared as every viewer shows it; indexes of version 2 and the
evaluation datasets keep the stored pixels."""

import io
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image, ImageOps

from helpers.images import blobs
from streamk import features as F
from streamk.errors import ConfigError

pytestmark = pytest.mark.skipif("sift" not in F.available_extractors(), reason="opencv-python-headless not installed")


def tagged(upright, orientation, fmt="JPEG"):
    """The bytes of a file whose pixels are ``upright`` stored so that a viewer applying the
    EXIF ``orientation`` shows ``upright`` again (what a phone writes)."""
    stored = Image.fromarray(upright)
    # store the inverse of the turn the tag asks for (Pillow's transposes of exif_transpose)
    inverse = {1: None, 2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE",
               6: "ROTATE_90", 7: "TRANSVERSE", 8: "ROTATE_270"}[orientation]
    if inverse:
        stored = stored.transpose(getattr(Image.Transpose, inverse))
    exif = stored.getexif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    stored.save(buf, fmt, exif=exif, **({"quality": 95} if fmt == "JPEG" else {}))
    return buf.getvalue()


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orient_array_is_what_pillow_shows(orientation):
    """Against an independent reference: Pillow's ImageOps.exif_transpose."""
    a = np.random.default_rng(orientation).integers(0, 256, (7, 11), dtype=np.uint8)
    data = tagged(a, orientation, "PNG")  # lossless: the pixels compare exactly
    with Image.open(io.BytesIO(data)) as img:
        assert F.exif_orientation(img) == orientation
        raw = np.asarray(img.convert("L"))
        shown = np.asarray(ImageOps.exif_transpose(img).convert("L"))
    assert np.array_equal(shown, a)
    assert np.array_equal(F.orient_array(raw, orientation), shown)
    assert np.array_equal(np.asarray(F.orient_image(Image.fromarray(raw), orientation)), shown)
    assert F.oriented_size(raw.shape[::-1], orientation) == shown.shape[::-1]
    gray, size = F.decode_gray_scaled(data, "x.png", None, orient=True)
    assert np.array_equal(gray, a) and size == (11, 7)
    assert np.array_equal(F.decode_gray(data, "x.png", orient=True), a)
    assert np.array_equal(F.decode_gray(data, "x.png"), raw)  # as stored unless asked


def test_a_sideways_phone_photo_is_described_upright():
    """Version 3 describes a tagged sideways file as its upright twin (same features, same
    size); version 2 (an index made before) describes the stored pixels, as it did."""
    upright = blobs(320, 240, seed=3)
    plain = io.BytesIO()
    Image.fromarray(upright).save(plain, "PNG")
    sideways = tagged(upright, 6, "PNG")
    ex = F.make_extractor("sift")
    assert ex.orients and ex.params()["features_version"] == 3
    a, b = ex.extract_bytes(plain.getvalue(), "a.png"), ex.extract_bytes(sideways, "b.png")
    assert b.image_size == a.image_size == (320, 240) and len(a) > 20
    np.testing.assert_allclose(b.keypoints, a.keypoints, atol=1e-4)
    assert np.array_equal(b.descriptors, a.descriptors)
    old = F.extractor_from_params({**ex.params(), "features_version": 2})
    assert not old.orients and old.extract_bytes(sideways, "b.png").image_size == (240, 320)
    assert F.stored_pixels(ex).features_version == 2 and ex.orients  # a copy: ex unchanged
    with pytest.raises(ConfigError, match="newer"):
        F.extractor_from_params({**ex.params(), "features_version": F.FEATURES_VERSION + 1})


def test_thumbnails_and_copy_pixels_follow_the_features():
    from streamk.verification import decode_for_copies

    upright = blobs(320, 240, seed=4)
    sideways = tagged(upright, 8)
    with Image.open(io.BytesIO(F.thumbnail_jpeg(sideways, "s.jpg", side=64, orient=True))) as t:
        assert t.size == (64, 48)
    with Image.open(io.BytesIO(F.thumbnail_jpeg(sideways, "s.jpg", side=64))) as t:
        assert t.size == (48, 64)
    turned = decode_for_copies(sideways, "s.jpg", orient=True)
    assert turned.shape == (240, 320) and np.corrcoef(turned.ravel(), upright.ravel())[0, 1] > 0.95
    assert decode_for_copies(sideways, "s.jpg").shape == (320, 240)


def test_evaluation_datasets_keep_the_stored_pixels(tmp_path):
    """Their query boxes are in the stored grid: dataset_features reads images as stored."""
    from streamk.evaluation.experiment import dataset_features

    upright = blobs(320, 240, seed=5)
    path = tmp_path / "img.jpg"
    path.write_bytes(tagged(upright, 6))
    ds = SimpleNamespace(name="toy", n_images=1, image_path=lambda i: path, queries=[SimpleNamespace(box=None)],
                         query_image_path=lambda q: path, crop_query=False)
    database, queries = dataset_features(ds, F.make_extractor("sift"), None, workers=1, progress=False)
    assert database[0].image_size == (240, 320) == queries[0].image_size


def test_heic_and_avif_photos_are_read(tmp_path):
    """An iPhone's HEIC photo (pillow-heif, registered only for HEIF bytes) and an AVIF one
    are found by a folder walk and described like the same picture as a PNG."""
    pillow_heif = pytest.importorskip("pillow_heif")
    from streamk.pipeline.ingest import is_image_name

    upright = blobs(320, 240, seed=6)
    ex = F.make_extractor("sift")
    png = io.BytesIO()
    Image.fromarray(upright).save(png, "PNG")
    ref = ex.extract_bytes(png.getvalue(), "ref.png")
    for fmt, suffix in (("HEIF", ".heic"), ("AVIF", ".avif")):
        buf = io.BytesIO()
        try:
            Image.fromarray(upright).convert("RGB").save(buf, fmt, quality=95) if fmt == "AVIF" else \
                pillow_heif.from_pillow(Image.fromarray(upright).convert("RGB")).save(buf, quality=95)
        except (KeyError, OSError) as exc:  # this Pillow has no AVIF encoder
            pytest.skip(f"cannot write {fmt} here ({exc})")
        data = buf.getvalue()
        assert F.is_heif(data) == (fmt == "HEIF") and is_image_name(f"IMG_0001{suffix.upper()}")
        f = ex.extract_bytes(data, f"photo{suffix}")
        assert f.image_size == (320, 240) and len(f) > 0.5 * len(ref)
        with Image.open(io.BytesIO(F.thumbnail_jpeg(data, f"photo{suffix}", side=64))) as t:
            assert t.size == (64, 48)


def test_heic_without_pillow_heif_says_what_to_install(monkeypatch):
    import builtins

    from streamk.errors import ImageReadError
    from streamk.features import images

    real_import = builtins.__import__

    def no_pillow_heif(name, *args, **kwargs):
        if name == "pillow_heif":
            raise ImportError("not installed")
        return real_import(name, *args, **kwargs)

    heic_head = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64
    monkeypatch.setattr(images, "_heif_registered", [])
    monkeypatch.setattr(builtins, "__import__", no_pillow_heif)
    with pytest.raises(ImageReadError, match="pillow-heif"):
        images.decode_gray(heic_head, "IMG_0001.HEIC")


def _with_corrupt_exif(jpeg):
    """``jpeg`` with an APP1 Exif block whose first tag points past its end (as some apps write)."""
    import struct

    payload = b"Exif\x00\x00II\x2a\x00\x08\x00\x00\x00" + bytes([0x05, 0x00, 0x12, 0x01, 0x03, 0x00, 0x01])
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def test_a_corrupt_exif_block_prints_nothing_and_counts_as_absent(tmp_path):
    """Pillow warns "Corrupt EXIF data" at every open of such a file: two lines of Python
    warning each time, several per file in an ingest or a search. Its tags count as absent."""
    from helpers.processes import run_python

    buf = io.BytesIO()
    Image.fromarray(blobs(120, 90, seed=2)).save(buf, "JPEG", quality=90)
    bad = _with_corrupt_exif(buf.getvalue())
    with warnings.catch_warnings(record=True) as seen:  # Pillow does warn on it
        warnings.simplefilter("always")
        Image.open(io.BytesIO(bad)).getexif()
    assert any("EXIF" in str(w.message) for w in seen)
    path = tmp_path / "bad_exif.jpg"
    path.write_bytes(bad)
    code = ("from streamk import features as F\n"
            f"d = open({str(path)!r}, 'rb').read()\n"
            "F.HessianAffineSift().extract_bytes(d, 'x'); F.thumbnail_jpeg(d, 'x', orient=True)\n"
            "img = F.pil_image().open(__import__('io').BytesIO(d))\n"
            "print(F.exif_orientation(img), F.exif_date(d))\n")
    out = run_python("-c", code, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "None"] and out.stderr == ""

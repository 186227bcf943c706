"""Every image's cost is bounded (issue 17, failure 8): a file over the size limit is refused
before it is read (a 4 GB sparse file too), an image over the pixel limit before it is
decoded (a PNG decompression bomb too), a large JPEG is reduced while decoding (memory of a
small one, keypoints in original pixels), features are capped; each limit says how to
raise it."""

import io
import json
import os
import struct
import zlib

import numpy as np
import pytest

from streamk import features as F
from streamk.errors import ImageReadError, ImageTooLargeError, StreamkError

PIL = pytest.importorskip("PIL")
pytest.importorskip("cv2")
from helpers.images import textured  # noqa: E402
from helpers.processes import run_python  # noqa: E402
from PIL import Image  # noqa: E402


def png_header_bomb(path, width, height, bits=8, color=0):
    """A valid PNG whose header says width x height (8-bit grey unless told: ``bits`` per
    sample, PNG ``color`` type 0 grey, 2 RGB, 6 RGBA) with almost no data: a few hundred
    bytes that would decode to width * height pixels."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, bits, color, 0, 0, 0)
    idat = zlib.compress(b"\0" * 4096, 9)  # the start of the rows: all zeros
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    return path


def test_the_limits_are_named_documented_constants():
    assert F.MAX_FILE_SIZE == 50 * 2**20
    assert F.MAX_PIXELS == 128_000_000
    assert F.DEFAULT_MAX_SIDE == 1024
    assert F.DEFAULT_MAX_FEATURES == 8192
    ex = F.make_extractor("sift")
    assert (ex.max_side, ex.max_features) == (F.DEFAULT_MAX_SIDE, F.DEFAULT_MAX_FEATURES)
    assert ex.limits() == {"max_file_size": F.MAX_FILE_SIZE, "max_pixels": F.MAX_PIXELS}
    assert issubclass(ImageTooLargeError, ImageReadError) and issubclass(ImageTooLargeError, StreamkError)
    assert issubclass(ImageTooLargeError, ValueError) and ImageTooLargeError.exit_code == 3


def test_a_file_over_the_size_limit_is_refused_before_reading(tmp_path):
    p = textured(str(tmp_path / "a.png"), 1)
    size = os.path.getsize(p)
    assert len(F.read_image_bytes(p, max_file_size=size)) == size  # at the limit: read
    with pytest.raises(ImageTooLargeError) as e:
        F.read_image_bytes(p, max_file_size=size - 1)
    assert e.value.limit == "max_file_size" and e.value.path == p
    assert "--max-file-size" in str(e.value) and "max_file_size" in str(e.value)
    ex = F.make_extractor("sift").set_limits(max_file_size=size - 1)
    with pytest.raises(ImageTooLargeError):
        F.extract(p, ex)


def test_a_4gb_sparse_file_is_never_read(tmp_path):
    big = tmp_path / "huge.jpg"
    with open(big, "wb") as fh:
        fh.truncate(4 * 2**30)  # sparse: no disk used, 4 GiB of zeros if read
    # in a child whose address space is capped at 1 GiB: reading the file whole is impossible there
    code = f"""
import resource
resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))
from streamk import features as F
from streamk.errors import ImageTooLargeError
try:
    F.extract({str(big)!r}, F.make_extractor("sift"))
except ImageTooLargeError as exc:
    print("refused:", exc)
"""
    r = run_python("-c", code, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and "file of 4.0 GiB is over the limit of 50.0 MiB" in r.stdout, r.stdout
    assert "MemoryError" not in r.stderr


def test_an_image_over_the_pixel_limit_is_refused_from_its_header(tmp_path):
    p = tmp_path / "wide.png"
    Image.fromarray(np.full((40, 300), 90, np.uint8)).save(p)
    ex = F.make_extractor("sift").set_limits(max_pixels=300 * 40)
    assert F.extract(p, ex).image_size == (300, 40)  # at the limit: decoded
    ex.set_limits(max_pixels=300 * 40 - 1)
    with pytest.raises(ImageTooLargeError) as e:
        F.extract(p, ex)
    assert e.value.limit == "max_pixels" and "300 x 40" in str(e.value) and "--max-pixels" in str(e.value)
    with pytest.raises(ImageTooLargeError):
        F.decode_gray(p.read_bytes(), p, max_pixels=1000)
    # a feature-cache hit gives the same answer as a miss
    ex.set_limits(max_pixels=10**6)
    F.extract(p, ex, cache=tmp_path / "cache")
    assert F.extract(p, ex, cache=tmp_path / "cache").image_size == (300, 40)
    with pytest.raises(ImageTooLargeError):
        F.extract(p, ex.set_limits(max_pixels=1000), cache=tmp_path / "cache")


def test_decoded_bytes_count_channels_and_bit_depth(tmp_path):
    """The bytes an image decodes to, from its header: pixels x channels x bytes per sample
    (numpy's itemsize of the array written), one-band images of over 8 bits counting the
    float64 copy that turns them grey."""
    import cv2

    for shape, dtype in [((30, 40), np.uint8), ((30, 40, 3), np.uint8), ((30, 40, 4), np.uint8),
                         ((30, 40, 3), np.uint16), ((30, 40, 4), np.uint16), ((30, 40), np.uint16)]:
        a = np.zeros(shape, dtype)
        ok, buf = cv2.imencode(".png", a)
        img = Image.open(io.BytesIO(buf.tobytes()))
        expected = a.size * a.itemsize if a.ndim == 3 or a.itemsize == 1 else a.size * 8
        assert F.decoded_bytes(img) == expected, (shape, dtype, img.mode)


@pytest.mark.parametrize("side, bits, color, refused", [
    (10_000, 16, 2, True),  # 100 Mpx, under the pixel limit, 16-bit RGB: 600 MB decoded
    (10_000, 16, 0, True),  # 16-bit grey: 800 MB with its float64 copy
    (10_000, 8, 2, False),  # 8-bit RGB: 300 MB
    (8_000, 16, 0, False),  # 16-bit grey: 512 MB, at the limit
])
def test_an_image_over_the_decoded_bytes_limit_is_refused_from_its_header(tmp_path, side, bits, color, refused):
    p = png_header_bomb(tmp_path / "deep.png", side, side, bits, color)
    assert side * side <= F.MAX_PIXELS
    if refused:
        with pytest.raises(ImageTooLargeError) as e:
            F.decode_gray_scaled(p.read_bytes(), p, max_side=1024)
        assert e.value.limit == "max_decoded_bytes" and "8 bits per channel" in str(e.value)
    else:  # over no limit: decoding starts and fails on the missing rows
        with pytest.raises(ImageReadError) as e:
            F.decode_gray_scaled(p.read_bytes(), p, max_side=1024)
        assert not isinstance(e.value, ImageTooLargeError)


@pytest.mark.parametrize("side", [12_000, 100_000])  # 144 Mpx: Pillow warns; 10^10 px: Pillow refuses
def test_a_png_decompression_bomb_is_refused_before_decoding(tmp_path, side, monkeypatch):
    p = png_header_bomb(tmp_path / "bomb.png", side, side)
    assert p.stat().st_size < 1000
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # someone disabled Pillow's guard: set again
    with pytest.raises(ImageTooLargeError) as e:
        F.extract(p, F.make_extractor("sift"))
    assert e.value.limit == "max_pixels" and "--max-pixels" in str(e.value)
    assert Image.MAX_IMAGE_PIXELS is not None and Image.MAX_IMAGE_PIXELS >= F.MAX_PIXELS
    # one limit said, ours, with the image's pixels: it said "over the limit of 128,000,000 pixels (Image
    # size (10000000000 pixels) exceeds limit of 256000000 pixels, could be decompression bomb DOS attack.; ..."
    assert f"{side * side:,} pixels is over the limit of {F.MAX_PIXELS:,} pixels (max_pixels; " in str(e.value)
    assert "exceeds" not in str(e.value) and "DOS" not in str(e.value)


def test_large_jpeg_is_reduced_while_decoding_in_original_coordinates(tmp_path):
    """An 8000 x 6000 colour JPEG (a 1000 x 750 texture enlarged 8x): extracted at the
    default long side of 1024, its features lie where those of the 1000 x 750 image lie,
    times 8, and its image size is the original one."""
    small = Image.open(textured(str(tmp_path / "small.png"), 3, size=1000)).convert("L").crop((0, 0, 1000, 750))
    small = Image.merge("RGB", (small, small, small))
    small.save(tmp_path / "small.jpg", quality=95)
    small.resize((8000, 6000), Image.Resampling.BICUBIC).save(tmp_path / "big.jpg", quality=90)
    ex = F.make_extractor("sift", max_side=1000)
    fb = F.extract(tmp_path / "big.jpg", ex)
    fs = F.extract(tmp_path / "small.jpg", ex)
    assert fb.image_size == (8000, 6000) and fs.image_size == (1000, 750)
    assert len(fb) > 50 and len(fs) > 50
    x, y = fb.positions[:, 0], fb.positions[:, 1]
    assert x.min() >= -0.5 and y.min() >= -0.5 and x.max() < 8000 and y.max() < 6000
    # each feature of the big image has one of the small image's, mapped x8 (pixel centres), within 8 px
    mapped = (fs.positions.astype(np.float64) + 0.5) * 8 - 0.5
    d = np.sqrt(((fb.positions[:, None, :] - mapped[None, :, :]) ** 2).sum(-1)).min(axis=1)
    assert np.mean(d < 8) > 0.8, np.percentile(d, [50, 80, 95])
    assert np.allclose(np.median(fb.scales) / np.median(fs.scales), 8, rtol=0.1)
    # the same file as an array (decoded whole, then reduced) gives nearly the same features
    fa = ex.extract_array(F.load_gray(tmp_path / "big.jpg"))
    d2 = np.sqrt(((fb.positions[:, None, :] - fa.positions[None, :, :]) ** 2).sum(-1)).min(axis=1)
    assert np.mean(d2 < 8) > 0.8


def test_large_jpeg_costs_the_memory_of_a_small_one(tmp_path):
    """Decoded whole, an 8000 x 6000 colour JPEG is 144 MB of RGB (and 48 MB of grey): the
    extraction's peak memory must stay under a third of that."""
    rng = np.random.default_rng(0)
    tile = Image.fromarray(rng.integers(0, 256, (75, 100, 3), dtype=np.uint8)).resize((8000, 6000))
    tile.save(tmp_path / "big.jpg", quality=85)
    del tile
    code = f"""
import resource
from streamk import features as F
ex = F.make_extractor("sift")
F.extract({str(tmp_path / 'small.png')!r}, ex)  # libraries loaded, kernels warm
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
f = F.extract({str(tmp_path / 'big.jpg')!r}, ex)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(f), f.image_size, (peak - base) * 1024)
"""
    textured(str(tmp_path / "small.png"), 1, size=1024)
    r = run_python("-c", code, timeout=120)
    assert r.returncode == 0, r.stderr
    n, grown = int(r.stdout.split()[0]), int(r.stdout.split()[-1])
    assert "(8000, 6000)" in r.stdout and 0 < n <= F.DEFAULT_MAX_FEATURES
    assert grown < 8000 * 6000 * 3 / 3, f"peak memory grew by {grown / 2**20:.0f} MiB"


def test_feature_cap_keeps_the_strongest_deterministically():
    rng = np.random.default_rng(1)
    noise = np.asarray(Image.fromarray(rng.integers(0, 256, (64, 64), dtype=np.uint8)).resize(
        (512, 512), Image.Resampling.BICUBIC))
    full = F.make_extractor("sift", max_features=None).extract_array(noise)
    capped = F.make_extractor("sift", max_features=100).extract_array(noise)
    assert len(full) > 100 and len(capped) == 100
    np.testing.assert_array_equal(capped.keypoints, full.keypoints[:100])  # strongest first, same order


def test_extractor_params_keep_old_indexes_at_full_resolution():
    new = F.make_extractor("sift")
    p = json.loads(json.dumps(new.params()))
    assert p["options"]["max_side"] == 1024 and p["features_version"] == F.FEATURES_VERSION
    again = F.extractor_from_params(p)
    assert again.params() == new.params() and again.features_version == F.FEATURES_VERSION
    # stored before the defaults: max_side null, version 1 -> no reduction, decoded whole
    old = {"extractor": "sift", "options": {"max_side": None, "max_features": None}, "features_version": 1,
           "versions": {}}
    ex = F.extractor_from_params(old)
    assert ex.max_side is None and ex.max_features is None and ex.params()["features_version"] == 1
    old640 = {"extractor": "sift", "options": {"max_side": 640, "max_features": None}, "features_version": 1}
    ex = F.extractor_from_params(old640)
    assert ex.max_side == 640 and ex.features_version == 1 and ex.params()["features_version"] == 1
    assert F.extractor_from_params({"extractor": "sift", "options": {}}).max_side is None
    # off: None, reported as version 1 when nothing differs from it at full resolution (version 2);
    # version 3 turns images for their EXIF orientation, which version 1 did not
    v2 = F.extractor_from_params({"extractor": "sift", "options": {"max_side": None}, "features_version": 2})
    assert v2.params()["features_version"] == 1 and not v2.orients
    assert F.make_extractor("sift", max_side=None).params()["features_version"] == 3


@pytest.mark.parametrize("fmt, mode", [
    ("GIF", "P"), ("BMP", "RGB"), ("BMP", "P"), ("TIFF", "RGB"), ("TIFF", "F"), ("TIFF", "I;16"), ("TIFF", "1"),
    ("TIFF", "CMYK"), ("WEBP", "RGB"), ("PPM", "RGB"), ("TGA", "RGB"), ("JPEG", "CMYK"), ("JPEG2000", "RGB"),
    ("PCX", "RGB"), ("SGI", "RGB"), ("DDS", "RGB"), ("ICO", "RGB"), ("QOI", "RGB"), ("PNG", "LA"),
])
def test_decoded_bytes_of_every_format_pillow_writes_is_what_numpy_decodes(fmt, mode):
    """Whatever a format's tile says (a GIF's (bits, interlaced), a DDS's masks: no raw mode
    string), the header's count is the decoded array's bytes (numpy's, the float64 grey copy for
    one band of over 8 bits). A GIF crashed the count (TypeError) and so every ingest of one."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 255, (40, 52, 3), dtype=np.uint8)
    img = (Image.fromarray(a[..., 0].astype(np.uint16 if mode == "I;16" else np.float32))
           if mode in ("I;16", "F") else Image.fromarray(a).convert(mode))
    buf = io.BytesIO()
    try:
        img.save(buf, fmt)
    except (KeyError, OSError, ValueError) as exc:  # a writer this Pillow lacks
        pytest.skip(f"Pillow cannot write {fmt} {mode}: {exc}")
    opened = Image.open(io.BytesIO(buf.getvalue()))
    decoded = np.asarray(opened)
    expected = decoded.size * 8 if decoded.ndim == 2 and decoded.itemsize > 1 else decoded.size * decoded.itemsize
    assert F.decoded_bytes(Image.open(io.BytesIO(buf.getvalue()))) == expected, (fmt, mode, opened.mode)


def test_an_animated_gif_is_read_as_its_first_frame(tmp_path):
    rng = np.random.default_rng(1)
    frames = [Image.fromarray(rng.integers(0, 255, (60, 80), dtype=np.uint8)).convert("P") for _ in range(3)]
    p = tmp_path / "anim.gif"
    frames[0].save(p, save_all=True, append_images=frames[1:])
    gray = F.decode_gray(p.read_bytes(), p)
    assert gray.shape == (60, 80)
    np.testing.assert_array_equal(gray, np.asarray(Image.open(p).convert("L")))

"""Copies told apart from other captures of a scene (streamk.verification.copies): classes on
a Paris photo edited here with known transforms (accepted: re-encoded, resized, cropped,
bordered, captioned, toned, turned; refused: a re-shot from a step aside, another photo of
the landmark, the pixels of another capture), and the pieces against numpy references."""

import io

import numpy as np
import pytest

from streamk.errors import ConfigError
from streamk.verification.copies import (DEFAULT_MIN_AGREEMENT, DEFAULT_MIN_COVERED, GRID, MIN_CONTAINED,
                                         CopyParams, classify_pair, contained_fraction, covered_fraction,
                                         decode_for_copies, fit_similarity, pixel_agreement, precise_inliers,
                                         rotate_record_frame, same_pixels)

Image = pytest.importorskip("PIL.Image")


# ---------------------------------------------------------------- pieces, against numpy
def test_fit_similarity_is_the_least_squares_similarity():
    rng = np.random.default_rng(0)
    P1 = rng.uniform(0, 1000, (50, 2))
    a, b, tx, ty = 0.7, -0.4, 30.0, -12.0
    P2 = P1 @ np.array([[a, -b], [b, a]]).T + [tx, ty] + rng.normal(0, 2, (50, 2))
    # reference: the 4 unknowns (a, b, tx, ty) of x' = a x - b y + tx, y' = b x + a y + ty by lstsq
    A = np.zeros((100, 4))
    A[0::2] = np.c_[P1[:, 0], -P1[:, 1], np.ones(50), np.zeros(50)]
    A[1::2] = np.c_[P1[:, 1], P1[:, 0], np.zeros(50), np.ones(50)]
    ra, rb, rtx, rty = np.linalg.lstsq(A, P2.reshape(-1), rcond=None)[0]
    S = fit_similarity(P1, P2)
    np.testing.assert_allclose(S, [[ra, -rb, rtx], [rb, ra, rty]], rtol=1e-9, atol=1e-7)
    assert np.isnan(fit_similarity(P1[:1], P2[:1])).all()


def test_covered_fraction_counts_cells_by_brute_force():
    rng = np.random.default_rng(1)
    w, h = 640, 480
    feats = rng.uniform(0, [w, h], (300, 2))
    feats[:, 0] *= 0.8  # the right fifth holds no feature
    inl = feats[rng.random(300) < 0.2]
    have, hit = set(), set()
    for x, y in feats:
        have.add((min(int((x + 0.5) * GRID // w), GRID - 1), min(int((y + 0.5) * GRID // h), GRID - 1)))
    for x, y in inl:
        hit.add((min(int((x + 0.5) * GRID // w), GRID - 1), min(int((y + 0.5) * GRID // h), GRID - 1)))
    assert covered_fraction(feats, (w, h), inl) == pytest.approx(len(hit & have) / len(have))


def test_contained_fraction_counts_points_by_brute_force():
    rng = np.random.default_rng(2)
    pts = rng.uniform(0, [640, 480], (400, 2))
    S = np.array([[0.8 * np.cos(0.3), -0.8 * np.sin(0.3), 120.0], [0.8 * np.sin(0.3), 0.8 * np.cos(0.3), -40.0]])
    inside = 0
    for x, y in pts:
        u, v = S[0, 0] * x + S[0, 1] * y + S[0, 2], S[1, 0] * x + S[1, 1] * y + S[1, 2]
        inside += 0 <= u <= 600 and 0 <= v <= 500
    assert contained_fraction(pts, S, (600, 500)) == pytest.approx(inside / len(pts))
    assert 0 < inside < len(pts)  # the case tests both sides
    assert contained_fraction(np.zeros((0, 2)), S, (600, 500)) == 0.0


def test_rotated_frames_are_numpys_rot90():
    img = np.arange(12).reshape(3, 4)  # (h, w) = (3, 4)
    ys, xs = np.mgrid[0:3, 0:4]
    P = np.c_[xs.ravel(), ys.ravel()].astype(float)
    for turns in range(4):
        R = rotate_record_frame(P, (4, 3), turns).astype(int)
        rot = np.rot90(img, turns)
        np.testing.assert_array_equal(rot[R[:, 1], R[:, 0]], img[ys.ravel(), xs.ravel()])


def test_precise_inliers_are_counted_in_the_coarser_images_pixels():
    P1 = np.array([[100.0, 100.0], [500.0, 300.0]])
    S = np.array([[0.5, 0, 0], [0, 0.5, 0]])  # image 2 is image 1 at half size
    P2 = P1 * 0.5 + [[1.4, 0], [1.6, 0]]  # 1.4 and 1.6 px off in image 2 (the coarser)
    np.testing.assert_array_equal(precise_inliers(P1, P2, S, (1000, 600), (500, 300)), [True, False])


def test_precise_inliers_are_counted_in_the_pixels_the_extractor_saw():
    # the same two errors on images twice as large, whose features an extractor saw at 500 px a side:
    # 2.8 and 3.2 px of image 2's are 1.4 and 1.6 of its extraction pixels; at the default side (1,024
    # px: image 2 seen whole) both are over the tolerance
    P1 = np.array([[200.0, 200.0], [1000.0, 600.0]])
    S = np.array([[0.5, 0, 0], [0, 0.5, 0]])
    P2 = P1 * 0.5 + [[2.8, 0], [3.2, 0]]
    np.testing.assert_array_equal(precise_inliers(P1, P2, S, (2000, 1200), (1000, 600), extraction_side=500),
                                  [True, False])
    np.testing.assert_array_equal(precise_inliers(P1, P2, S, (2000, 1200), (1000, 600)), [False, False])


def _texture(seed, h=96, w=128):
    from scipy import ndimage

    noise = np.random.default_rng(seed).normal(0, 1, (h, w))
    return (128 + 40 * ndimage.gaussian_filter(noise, 1.5) / ndimage.gaussian_filter(noise, 1.5).std()).astype(
        np.float32)


def test_pixel_agreement_is_a_correlation_blind_to_tone_and_not_to_content():
    a = _texture(0)
    size = (a.shape[1], a.shape[0])
    same = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    assert pixel_agreement(a, size, a, size, same, side=128) == pytest.approx(1.0, abs=1e-9)
    toned = np.clip(0.6 * a + 30, 0, 255)  # contrast and brightness: a local normalisation cancels it
    assert pixel_agreement(a, size, toned, size, same, side=128) > 0.98
    assert pixel_agreement(a, size, 255 - a, size, same, side=128) < -0.98
    n = a.size
    assert abs(pixel_agreement(a, size, _texture(1), size, same, side=128)) < 5 / np.sqrt(n / 9)  # ~ independent
    big = np.kron(a, np.ones((2, 2), np.float32))  # the same picture at twice the size: S maps a -> big
    twice = np.array([[2.0, 0, 0.5], [0, 2.0, 0.5]])  # pixel centres: x' = 2 x + 0.5
    assert pixel_agreement(a, size, big, (2 * size[0], 2 * size[1]), twice, side=128) > 0.9
    cells = np.zeros((GRID, GRID), bool)
    assert pixel_agreement(a, size, a, size, same, side=128, cells=cells) is None  # nothing compared


def test_same_pixels_decodes_both():
    rng = np.random.default_rng(2)
    img = Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8))
    png, bmp, jpg = io.BytesIO(), io.BytesIO(), io.BytesIO()
    img.save(png, "PNG")
    img.save(bmp, "BMP")
    img.save(jpg, "JPEG", quality=90)
    assert same_pixels(png.getvalue(), bmp.getvalue())
    assert not same_pixels(png.getvalue(), jpg.getvalue())
    assert not same_pixels(png.getvalue(), b"not an image")


def test_params_are_checked():
    with pytest.raises(ConfigError, match="min_covered"):
        CopyParams.of(min_covered=1.5)
    with pytest.raises(ConfigError, match="unknown"):
        CopyParams.of(nonsense=1)


# ---------------------------------------------------------------- classes on edited photos
@pytest.fixture(scope="module")
def photo_case(paris6k_subset_photos, small_vocabulary):
    """An original Paris photo, its stored record and pixels, and a describe() that turns
    any edited PIL image into (query record, stored record, pixels)."""
    from streamk.features import HessianAffineSift, extract
    from streamk.verification import make_query_record, stored_record, unpack

    ex = HessianAffineSift()
    src = paris6k_subset_photos[100]  # an Invalides photo with texture all over
    f = extract(src, ex)
    data = src.read_bytes()

    def describe(img, quality=92, fmt="JPEG"):
        buf = io.BytesIO()
        img.save(buf, fmt, quality=quality)
        g = ex.extract_bytes(buf.getvalue(), "edited")
        return (make_query_record(small_vocabulary, g.keypoints, g.descriptors, g.image_size),
                unpack(stored_record(small_vocabulary, g.keypoints, g.descriptors, g.image_size)),
                decode_for_copies(buf.getvalue()))

    original = unpack(stored_record(small_vocabulary, f.keypoints, f.descriptors, f.image_size))
    return {"src": src, "image": Image.open(src).convert("RGB"), "record": original,
            "gray": decode_for_copies(data), "describe": describe, "photos": paris6k_subset_photos,
            "extract": lambda p: extract(p, ex), "vocabulary": small_vocabulary}


def _classify(case, query, stored, gray):
    from streamk.verification import verify_geometry

    v = verify_geometry(query, [case["record"]], return_pairs=True)[0]
    return classify_pair(stored, case["record"], v.pairs, v.verified, gray, case["gray"])


def _edits(img):
    from PIL import ImageDraw

    W, H = img.size
    out = {"jpeg q15 + 400 px": (img.resize((400, round(400 * H / W)), Image.Resampling.LANCZOS), 15)}
    out["crop 60 %"] = (img.crop((int(0.1 * W), int(0.15 * H), int(0.1 * W + 0.77 * W), int(0.15 * H + 0.78 * H))),
                        92)
    framed = Image.new("RGB", (W + 2 * int(0.12 * W), H + 2 * int(0.3 * H)), (0, 0, 0))  # letterbox + frame
    framed.paste(img, (int(0.12 * W), int(0.3 * H)))
    out["letterbox"] = (framed, 92)
    cap = img.copy()
    d = ImageDraw.Draw(cap)
    d.rectangle((0, int(0.85 * H), W, H), fill=(0, 0, 0))
    d.text((20, int(0.88 * H)), "Paris, summer 2009 - all rights reserved", fill=(255, 255, 255))
    out["caption band 15 %"] = (cap, 92)
    a = (np.asarray(img, np.float32) / 255.0) ** 1.5 * np.array([1.15, 1.0, 0.8], np.float32)
    out["gamma 1.5 + colour cast"] = (Image.fromarray((np.clip(a, 0, 1) * 255 + 0.5).astype(np.uint8)), 92)
    return out


def test_edited_copies_are_copies(photo_case):
    for name, (img, quality) in _edits(photo_case["image"]).items():
        c = _classify(photo_case, *photo_case["describe"](img, quality))
        assert c.kind == "copy", (name, c)
        assert c.covered >= DEFAULT_MIN_COVERED and c.agreement >= DEFAULT_MIN_AGREEMENT, (name, c)


def test_a_panned_view_of_one_capture_is_the_same_scene(photo_case):
    """Two windows of one capture, each showing a tenth of the scene the other does not (a pan,
    or two crops): the pixels agree where they overlap, but neither holds the other, so deleting
    either loses part of the scene: same scene, never a copy."""
    from streamk.verification import verify_geometry

    img = photo_case["image"]
    W, H = img.size
    left = img.crop((0, 0, int(0.9 * W), H))
    right = img.crop((int(0.1 * W), 0, W, H))
    q, _, g_left = photo_case["describe"](left)
    _, s_right, g_right = photo_case["describe"](right)
    v = verify_geometry(q, [s_right], return_pairs=True)[0]
    c = classify_pair(q, s_right, v.pairs, v.verified, g_left, g_right)
    assert v.verified and c.kind == "same scene" and "outside" in c.reason, c
    assert c.covered >= DEFAULT_MIN_COVERED  # the overlap is covered: only the containment tells
    S = c.similarity
    assert contained_fraction(q.xy, S, s_right.image_size) < MIN_CONTAINED


def test_a_quarter_turned_copy_is_a_copy_once_the_query_is_turned_back(photo_case):
    turned = photo_case["image"].transpose(Image.Transpose.ROTATE_90)
    q, s, g = photo_case["describe"](turned)
    assert _classify(photo_case, q, s, g).kind == "different"  # upright features: no match across a turn
    back = turned.transpose(Image.Transpose.ROTATE_270)  # what the rotated query does
    c = _classify(photo_case, *photo_case["describe"](back, fmt="PNG"))
    assert c.kind == "copy", c


def test_a_reshot_from_a_step_aside_is_the_same_scene(photo_case):
    """Another capture: another similarity, a slight perspective (the camera moved), and
    local changes (a person walked through): geometry verified, never a copy."""
    from PIL import ImageDraw

    img = photo_case["image"]
    W, H = img.size
    # perspective: the right side 6 % nearer, as a step to the left gives a facade
    coeffs = _homography_coeffs([(0, 0), (W, 0), (W, H), (0, H)],
                                [(0.05 * W, 0.04 * H), (0.97 * W, 0.0), (0.97 * W, H), (0.05 * W, 0.96 * H)])
    shot = img.transform((W, H), Image.Transform.PERSPECTIVE, coeffs, Image.Resampling.BICUBIC)
    d = ImageDraw.Draw(shot)
    d.ellipse((0.4 * W, 0.55 * H, 0.48 * W, 0.95 * H), fill=(60, 50, 40))  # a passer-by
    c = _classify(photo_case, *photo_case["describe"](shot))
    assert c.kind == "same scene", c


def _homography_coeffs(dst, src):
    """PIL's PERSPECTIVE coefficients mapping output corners ``dst`` to input ``src``."""
    A, b = [], []
    for (x, y), (u, v) in zip(dst, src):
        A.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        A.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        b += [u, v]
    return np.linalg.solve(np.array(A, float), np.array(b, float)).tolist()


def test_another_capture_with_a_copys_geometry_is_refused_by_its_pixels(photo_case):
    """A copy's geometry with the pixels of another photo (what a burst shot on a tripod,
    its people moved, amounts to at worst): the pixel check says same scene."""
    q, s, _ = photo_case["describe"](photo_case["image"], 40)
    other = decode_for_copies(photo_case["photos"][30].read_bytes())  # another landmark's pixels
    c = _classify(photo_case, q, s, other)
    assert c.kind == "same scene" and c.agreement is not None and c.agreement < 0.5, c
    assert _classify(photo_case, q, s, None).kind == "same scene"  # no pixels: never a copy


def test_other_photos_of_the_landmark_are_not_copies(photo_case):
    from streamk.verification import make_query_record, stored_record, unpack, verify_geometry

    photos = [p for p in photo_case["photos"] if "invalides" in p.name and p != photo_case["src"]][:8]
    voc = photo_case["vocabulary"]
    for p in photos:
        g = photo_case["extract"](p)
        q = make_query_record(voc, g.keypoints, g.descriptors, g.image_size)
        v = verify_geometry(q, [photo_case["record"]], return_pairs=True)[0]
        rec = unpack(stored_record(voc, g.keypoints, g.descriptors, g.image_size))
        c = classify_pair(rec, photo_case["record"], v.pairs, v.verified, decode_for_copies(p.read_bytes()),
                          photo_case["gray"])
        assert c.kind in ("same scene", "different"), (p.name, c)


def test_the_same_bytes_are_exact(photo_case):
    r = photo_case["record"]
    c = classify_pair(r, r, np.zeros((0, 4)), False, sha_a="ab" * 32, sha_b="ab" * 32)
    assert c.kind == "exact" and c.to_dict()["class"] == "exact"


# ---------------------------------------------------------------- detail beyond the coarser view's limit
def test_band_ratio_is_the_windowed_fft_band_power_of_numpy():
    """band_ratio against a plain numpy reference (tile by tile, bin by bin), and 1 for 1/f noise."""
    from streamk.verification.copies import BAND_GUARD, BAND_PATCH, band_ratio

    rng = np.random.default_rng(3)
    n, scale, theta = 256, 1.2, 0.1
    f = np.fft.fftfreq(n)
    amp = 1.0 / np.maximum(np.hypot(*np.meshgrid(f, f)), 1.0 / n)  # 1/f amplitude: power 1/|f|^2
    img = np.real(np.fft.ifft2(amp * np.exp(2j * np.pi * rng.random((n, n)))))
    p = BAND_PATCH
    win = np.outer(np.hanning(p), np.hanning(p))
    power = np.zeros((p, p))
    tiles = [img[y:y + p, x:x + p] for y in range(0, n, p) for x in range(0, n, p)]
    for t in tiles:
        power += np.abs(np.fft.fft2((t - t.mean()) * win)) ** 2
    limit, fr = 0.5 / scale, np.fft.fftfreq(p)
    num = den = rnum = rden = 0.0
    for i in range(p):
        for j in range(p):
            fx, fy = fr[j], fr[i]
            if abs(fx) >= 0.5 or abs(fy) >= 0.5 or (fx == 0 and fy == 0):
                continue
            m = max(abs(np.cos(theta) * fx + np.sin(theta) * fy), abs(np.cos(theta) * fy - np.sin(theta) * fx))
            if m > limit * BAND_GUARD:
                num, rnum = num + power[i, j], rnum + 1 / (fx * fx + fy * fy)
            elif limit / 2 < m <= limit / BAND_GUARD:
                den, rden = den + power[i, j], rden + 1 / (fx * fx + fy * fy)
    assert band_ratio(img, scale, theta) == pytest.approx((num / den) / (rnum / rden), rel=1e-9)
    assert band_ratio(img, scale, theta) == pytest.approx(1.0, abs=0.25)  # a 1/f image goes on as one
    flat = np.zeros((n, n))
    flat[:, : n // 2] = 1.0  # the mask keeps only the tiles wholly inside
    assert band_ratio(img, scale, theta, mask=flat > 0) == pytest.approx(
        band_ratio(img[:, : n // 2], scale, theta), rel=1e-9)


def _two_scales(img, crop, closer, wider):
    """The scene ``img`` seen wide (all of it, downsampled to ``wider``) and closer (the window
    ``crop``, downsampled to ``closer``): two captures, each with the detail of its own resolution."""
    W, H = img.size
    wide = img.resize((round(W * wider), round(H * wider)), Image.Resampling.LANCZOS)
    near = img.crop(crop)
    near = near.resize((round(near.width * closer), round(near.height * closer)), Image.Resampling.LANCZOS)
    return wide, near


def _classify_two(case, img_a, img_b):
    from streamk.verification import verify_geometry

    qa, ra, ga = case["describe"](img_a)
    _, rb, gb = case["describe"](img_b)
    v = verify_geometry(qa, [rb], return_pairs=True)[0]
    return classify_pair(ra, rb, v.pairs, v.verified, ga, gb)


def test_a_crop_upscaled_by_1_2_is_a_copy_and_a_capture_1_2x_closer_is_the_same_scene(photo_case):
    """One scene (a Paris photo), the wide view at 0.6 of its pixels. The closer view shows a
    window of it at 0.72 (1.2x the wide view's pixels): downsampled from the scene it holds the
    scene's detail up to its own limit (a zoomed capture); upscaled from the wide view it holds
    nothing beyond the wide view's (a copy). Same geometry, same window: only the band differs."""
    img = photo_case["image"]
    W, H = img.size
    window = (int(0.12 * W), int(0.1 * H), int(0.82 * W), int(0.8 * H))
    wide, near = _two_scales(img, window, closer=0.72, wider=0.6)
    upscaled = wide.crop(tuple(round(0.6 * v) for v in window))
    upscaled = upscaled.resize(near.size, Image.Resampling.BICUBIC)
    copy = _classify_two(photo_case, upscaled, wide)
    assert copy.kind == "copy", copy
    zoomed = _classify_two(photo_case, near, wide)
    assert zoomed.kind == "same scene" and "detail beyond" in zoomed.reason, zoomed
    assert zoomed.agreement >= 0.5  # the pixels at 128 px cannot tell them apart: the band does


def test_new_detail_is_not_measured_on_thumbnails_or_at_small_scales():
    from streamk.verification.copies import new_detail

    a = _texture(4, 256, 256)
    half = np.array([[0.8, 0, 0], [0, 0.8, 0]])  # fine -> coarse: the fine view at 1.25x
    assert new_detail(a[::4, ::4], (256, 256), a, (256, 256), half) is None  # a thumbnail: no band
    same = np.array([[0.95, 0, 0], [0, 0.95, 0]])
    assert new_detail(a, (256, 256), a, (256, 256), same) is None  # 1.05x: under MIN_BAND_SCALE


def test_a_full_size_crop_and_a_reduced_copy_of_one_photo_are_copies_of_it_not_of_each_other(photo_case):
    """Two copies of one photo: its central part at full size, and the whole reduced to half.
    Each is a copy of the photo; to each other the crop holds 2x the detail the reduced copy
    kept, so neither can replace the other: same scene, and the reason says that both may be
    made from a larger original (it said "a zoomed capture, not a crop")."""
    img = photo_case["image"]
    W, H = img.size
    crop = img.crop((int(0.2 * W), int(0.2 * H), int(0.8 * W), int(0.8 * H)))
    half = img.resize((W // 2, H // 2), Image.Resampling.LANCZOS)
    assert _classify_two(photo_case, crop, img).kind == "copy"
    assert _classify_two(photo_case, half, img).kind == "copy"
    pair = _classify_two(photo_case, crop, half)
    assert pair.kind == "same scene" and "both made from a larger original" in pair.reason, pair

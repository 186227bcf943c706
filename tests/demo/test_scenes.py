"""The bursty scenes (streamk.demo.scenes): the properties their design rests on, and their
ground truth."""

import numpy as np
import pytest

from streamk.demo import scenes as sc
from streamk.demo import transforms as tf
from streamk.demo.main_job import DbImage, ground_truth

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

RED = (255, 0, 0)


def _red_object():
    return Image.new("RGB", sc.OBJECT_SIZE, RED)


def _red_pixels(img):
    a = np.asarray(img.convert("RGB")).astype(int)
    return int(((a[..., 0] > 200) & (a[..., 1] < 60) & (a[..., 2] < 60)).sum())


def test_places_cover_every_family_with_their_own_parameters():
    places = sc.places(seed=0)
    assert len(places) == len(sc.FAMILIES) * sc.PLACES_PER_FAMILY
    assert {p.family for p in places} == set(sc.FAMILIES)
    assert len({(p.period, p.colours) for p in places}) == len(places)
    assert places == sc.places(seed=0) and places != sc.places(seed=1)


@pytest.mark.parametrize("place", sc.places(), ids=lambda p: p.name)
def test_a_wall_repeats_its_motif(place):
    """The burst: shifted by one period the wall is the same up to its noise (sigma 3, so a mean
    absolute difference of about 3.4 grey levels); shifted by half a period it is not."""
    px, py = place.period
    gray = [np.asarray(sc.wall(place, offset, noise_seed=i).convert("L"), np.float64)
            for i, offset in enumerate([(0, 0), (px, py), (px // 2, py // 2)])]
    assert np.abs(gray[1] - gray[0]).mean() < 5
    assert np.abs(gray[2] - gray[0]).mean() > 15


@pytest.mark.parametrize("seed", [0, 1])
def test_the_object_is_whole_in_the_scene_and_in_every_crop(seed):
    """The object sits in the central half of each side, which every crop query keeps (a crop
    keeps sqrt(0.6) = 77% of each side): no query loses what it is looking for."""
    place = sc.places(seed)[0]
    area = sc.OBJECT_SIZE[0] * sc.OBJECT_SIZE[1]
    for n in range(12):
        img = sc.scene_image(place, _red_object(), f"scene-{n}", seed)
        assert img.size == sc.SIZE and _red_pixels(img) == area
        assert _red_pixels(tf.view(img, "crop", f"scene-{n}.jpg", seed)) == area


def test_scenes_are_deterministic_and_keyed():
    place = sc.places()[3]
    a = np.asarray(sc.scene_image(place, _red_object(), "k1"))
    assert np.array_equal(a, np.asarray(sc.scene_image(place, _red_object(), "k1")))
    assert not np.array_equal(a, np.asarray(sc.scene_image(place, _red_object(), "k2")))
    assert not np.array_equal(np.asarray(sc.bare_wall(place, 0)), np.asarray(sc.bare_wall(place, 1)))


def test_object_crop_is_the_centre_of_the_photo():
    photo = Image.new("RGB", (400, 300), (0, 0, 255))
    photo.paste(Image.new("RGB", (200, 150), RED), (100, 75))  # the central half
    obj = sc.object_crop(photo)
    # 60% of the 400 x 300 frame: 240 x 180 around the centre, all of it inside the red half but
    # the 20-pixel (15-pixel) margins, scaled to 160 x 120
    assert obj.size == sc.OBJECT_SIZE
    assert 0.6 < _red_pixels(obj) / (160 * 120) < 0.75


def test_walls_are_bursty_photos_are_not(tmp_path):
    """The design's premise, measured on the demo's own extractor: a bare wall's descriptors
    form modes (most have five or more near-duplicates, RootSIFT cosine > 0.9); a photo's not."""
    pytest.importorskip("pyhesaff")
    from streamk.demo.main_job import skimage_photo_dir
    from streamk.features import extract, make_extractor

    pytest.importorskip("skimage")
    extractor = make_extractor(None, max_side=640, max_features=1000)

    def near_duplicates(img, name):
        img.save(tmp_path / name)
        x = extract(tmp_path / name, extractor).descriptors.astype(np.float64)
        x = np.sqrt(x / np.maximum(x.sum(axis=1, keepdims=True), 1e-12))
        return (x @ x.T > 0.9).sum(axis=1) - 1

    for place in sc.places()[::2]:
        assert np.median(near_duplicates(sc.bare_wall(place, 0), f"{place.name}.png")) >= 5, place.name
    photo = tf.open_rgb(skimage_photo_dir() / "camera.png")
    assert np.median(near_duplicates(photo, "camera.png")) < 1


def test_ground_truth_positives_and_junk():
    database = [DbImage("coffee.png", "", "coffee", True), DbImage("coffee.v.jpg", "", "coffee", False),
                DbImage("s.jpg", "", "tiles-1+coffee", False), DbImage("s.v.jpg", "", "tiles-1+coffee", False),
                DbImage("w.jpg", "", "tiles-1/bare0", False), DbImage("cat.png", "", "chelsea", True)]
    positives, junk = ground_truth(database, {"tiles-1+coffee": "coffee"})
    assert positives["coffee"].tolist() == [0, 1] and positives["tiles-1+coffee"].tolist() == [2, 3]
    # the scene and the photo of its object share the object only: junk to each other
    assert junk["coffee"].tolist() == [2, 3] and junk["tiles-1+coffee"].tolist() == [0, 1]
    assert junk["chelsea"].tolist() == [] and junk["tiles-1/bare0"].tolist() == []

"""One image described one way (streamk.index.describe_image): the vector of the features
extracted independently, the features inside a box, the geometry record made with the
visual words only, a thumbnail when asked; errors as one shape across processes."""

import hashlib
import io

import numpy as np
import pytest
from helpers.images import textured
from PIL import Image

from streamk.errors import EmptyDescriptorSetError, ImageReadError, describe
from streamk.index import ImageFailure, describe_context, describe_image
from streamk.parallel import CRASHED, TaskFailure


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    from streamk.encoding import Encoder
    from streamk.features import extract, make_extractor
    from streamk.verification import Vocabulary

    root = tmp_path_factory.mktemp("describe")
    paths = [textured(str(root / f"p{i}.png"), 10 + i, size=192) for i in range(4)]
    ex = make_extractor("sift")
    feats = [extract(p, ex) for p in paths]
    enc = Encoder(embedding="vlad", k=4, aggregation="gmp").fit([f.descriptors for f in feats])
    words = Vocabulary(n_coarse=4, n_fine=4, min_per_word=2, max_iter=3, seed=0).fit(
        np.concatenate([f.descriptors for f in feats]))
    return {"root": root, "paths": paths, "feats": feats, "encoder": enc, "extractor": ex, "vocabulary": words}


def test_the_vector_is_the_encoders_on_the_extracted_features(parts):
    ctx = describe_context(parts["encoder"], parts["extractor"])
    data = open(parts["paths"][0], "rb").read()
    d = describe_image(ctx, data, "p0.png")
    f = parts["feats"][0]
    v, alpha = parts["encoder"].encode(f.descriptors, return_weights=True)
    np.testing.assert_array_equal(d.vector, np.asarray(v, np.float32))
    np.testing.assert_array_equal(d.weights, np.asarray(alpha, np.float32))
    np.testing.assert_array_equal(d.keypoints, f.keypoints)
    assert d.image_size == (192, 192) and d.geometry is None and d.thumbnail is None and d.features is None
    assert d.sha256 == hashlib.sha256(data).hexdigest()


def test_a_box_keeps_the_features_whose_centre_lies_inside(parts):
    ctx = describe_context(parts["encoder"], parts["extractor"])
    data = open(parts["paths"][1], "rb").read()
    box = (20.0, 30.0, 120.0, 150.0)
    d = describe_image(ctx, data, "p1.png", box, keep_features=True)
    kp = parts["feats"][1].keypoints
    inside = (kp[:, 0] >= 20) & (kp[:, 0] <= 120) & (kp[:, 1] >= 30) & (kp[:, 1] <= 150)
    assert 0 < len(d.keypoints) == int(inside.sum()) < len(kp)
    np.testing.assert_array_equal(d.keypoints, kp[inside])
    assert d.image_size == (192, 192)  # the whole image's, not the box's
    np.testing.assert_array_equal(d.features.keypoints, d.keypoints)


def test_geometry_with_visual_words_and_a_thumbnail_when_asked(parts):
    from streamk.verification import stored_record

    ctx = describe_context(parts["encoder"], parts["extractor"], parts["vocabulary"].to_bytes())
    data = open(parts["paths"][2], "rb").read()
    d = describe_image(ctx, data, "p2.png", thumbnail=True)
    f = parts["feats"][2]
    assert d.geometry == stored_record(parts["vocabulary"], f.keypoints, f.descriptors, f.image_size)
    assert describe_image(ctx, data, "p2.png", geometry=False).geometry is None
    with Image.open(io.BytesIO(d.thumbnail)) as img:
        assert img.format == "JPEG" and img.size == (192, 192)  # never enlarged past the image


def test_what_the_description_stores_is_the_record_add_writes(parts):
    ctx = describe_context(parts["encoder"], parts["extractor"])
    d = describe_image(ctx, open(parts["paths"][3], "rb").read(), "p3.png")
    enc = d.encoded("x", parts["paths"][3], metadata={"a": 1})
    assert enc.record["sha256"] == d.sha256 and enc.record["n_descriptors"] == len(d.keypoints)
    assert enc.record["image_size"] == [192, 192] and enc.metadata == {"a": 1}
    np.testing.assert_allclose(np.linalg.norm(enc.vector), 1.0, rtol=1e-6)


def test_a_bad_image_is_a_named_error_and_one_failure_shape(parts, tmp_path):
    ctx = describe_context(parts["encoder"], parts["extractor"])
    with pytest.raises(ImageReadError) as e:
        describe_image(ctx, b"not an image", "x.jpg")
    failure = ImageFailure.of(e.value, "x.jpg")
    assert failure.error == "ImageReadError" and str(failure) == describe(e.value)
    flat = io.BytesIO()
    Image.new("L", (96, 96), 128).save(flat, "PNG")
    with pytest.raises(EmptyDescriptorSetError) as e:
        describe_image(ctx, flat.getvalue(), "flat.png")
    failure = ImageFailure.of(e.value, "flat.png")
    assert failure.error == "EmptyDescriptorSetError" and failure.message.startswith("no local features")
    crashed = ImageFailure.of_task(TaskFailure("crashed", CRASHED))
    assert crashed.error == "WorkerCrashedError" and str(crashed) == CRASHED

"""A query image held in memory -- the file's bytes (an upload), a PIL image, an (H, W, 3)
uint8 array (as skimage and Pillow give them in a notebook) -- is searched as its file is:
``Index.search`` took only a path, and took a 512 x 512 grey array for a descriptor set
("descriptors have dimension 512, expected 128"). The reference is the path's own query
vector: the files are PNGs, so every form holds the same pixels."""

import numpy as np
import pytest
from PIL import Image

from streamk import Encoder
from streamk.errors import DimensionError, ImageTooLargeError
from streamk.features import make_extractor
from streamk.index import ShardedIndex, StreamingIndex
from streamk.pipeline import extract_many, run_ingest

from helpers.images import textured


@pytest.fixture(scope="module", params=["one", "sharded"])
def index(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("in-memory")
    paths = [textured(str(root / "imgs" / f"img{i}.png"), i, size=160) for i in range(5)]
    rgb = np.asarray(Image.open(paths[2]).convert("RGB"))  # a colour copy of img2, as a file too
    Image.fromarray(rgb).save(root / "imgs" / "rgb.png")
    paths.append(str(root / "imgs" / "rgb.png"))
    ex = make_extractor("sift")
    feats, _ = extract_many(paths, ex, workers=1, progress=False)
    enc = Encoder(embedding="vlad", k=4, aggregation="gmp").fit([f.descriptors for f in feats.values()])
    kind = StreamingIndex if request.param == "one" else ShardedIndex
    extra = {} if request.param == "one" else {"shards": 2}
    kind.create(root / "ix", enc, vector_dtype="float32", extractor=ex, **extra).close()
    assert run_ingest(root / "ix", root / "imgs", workers=1, progress=False, log=lambda m: None).added == 6
    idx = kind.open(root / "ix")
    yield idx, root / "imgs"
    idx.close()


def test_bytes_pil_image_and_rgb_array_search_as_the_file(index):
    idx, imgs = index
    path = imgs / "rgb.png"
    want = idx.query_vector(str(path))
    forms = {"bytes": path.read_bytes(), "PIL": Image.open(path), "array": np.asarray(Image.open(path)),
             "RGBA array": np.asarray(Image.open(path).convert("RGBA")), "bytearray": bytearray(path.read_bytes())}
    for name, query in forms.items():
        np.testing.assert_array_equal(idx.query_vector(query), want, err_msg=name)
        hits = idx.search(query, k=3, verify=0)
        assert [h.id for h in hits] == [h.id for h in idx.search(str(path), k=3, verify=0)], name
        assert hits[0].id in ("rgb.png", "img2.png") and hits[0].score > 0.999, name
    grey = Image.open(imgs / "img3.png")
    assert grey.mode == "L"
    np.testing.assert_array_equal(idx.query_vector(grey), idx.query_vector(str(imgs / "img3.png")))
    box = (10, 10, 120, 140)
    np.testing.assert_array_equal(idx.query_vector(forms["array"], box=box), idx.query_vector(str(path), box=box))


def test_what_is_not_an_image_is_named(index):
    idx, imgs = index
    grey = np.asarray(Image.open(imgs / "img3.png"))
    with pytest.raises(DimensionError, match=r"\(160, 160\) \(a grey image\? pass it as a PIL image"):
        idx.search(grey, k=1)
    with pytest.raises(DimensionError, match="got shape"):
        idx.search(np.zeros((4, 4, 3)), k=1)  # float: not an image, not a descriptor set
    with pytest.raises(DimensionError):
        idx.search(object(), k=1)


def test_an_in_memory_image_is_held_to_the_extractor_s_limits(index):
    idx, imgs = index
    ex = idx.extractor()
    limits = ex.max_pixels, ex.max_file_size
    try:
        ex.set_limits(max_pixels=100 * 100)
        with pytest.raises(ImageTooLargeError, match="max_pixels"):
            idx.search(np.zeros((200, 200, 3), np.uint8), k=1)  # before any PNG is made
        ex.set_limits(max_pixels=limits[0], max_file_size=1000)
        data = (imgs / "img1.png").read_bytes()
        assert len(data) > 1000
        with pytest.raises(ImageTooLargeError, match="max_file_size"):
            idx.search(data, k=1)
    finally:
        ex.set_limits(max_pixels=limits[0], max_file_size=limits[1])


def test_an_image_added_from_memory_pins_the_extractor_as_a_file_does(tmp_path):
    """The first image described from pixels stores the extractor's parameters, so that
    later queries and files are described alike, whatever form it came in (an image in
    memory, as a server upload, once left them unpinned)."""
    import json

    path = textured(str(tmp_path / "a.png"), 3, size=160)
    enc = Encoder(embedding="vlad", k=4, aggregation="gmp").fit(
        [np.random.default_rng(0).integers(0, 120, (80, 128)).astype(np.float32)])
    with StreamingIndex.create(tmp_path / "ix", enc, vector_dtype="float32") as idx:
        assert json.loads(idx.store.get_meta(b"extractor")) is None
        idx.add("a", image_path=np.asarray(Image.open(path).convert("RGB")))
        assert json.loads(idx.store.get_meta(b"extractor")) == idx.extractor().params()

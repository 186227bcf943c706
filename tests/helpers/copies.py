"""Indexes for the copy-class tests: Invalides photos with two edited copies of the first,
and a sharded index holding what a single index stored of each image."""

import numpy as np


def invalides_with_copies(paris_photos, vocabulary, tmp, n_photos, extra=()):
    """A StreamingIndex of ``n_photos`` Invalides photos (other captures of one place, the
    same-landmark negatives), then ``extra`` ((id, path) pairs), then two edited copies of the
    first photo: "half" (half size, JPEG q30) and "crop" (80 x 85 %, q90). No image keeps a
    thumbnail: pixels come from the files. (index, the Invalides photos)."""
    from PIL import Image

    from streamk.config import default_cache_dir
    from streamk.encoding import Encoder
    from streamk.features import HessianAffineSift, stored_pixels, extract
    from streamk.index import StreamingIndex

    photos = [p for p in paris_photos if "invalides" in p.name][::8][:n_photos]
    ex = stored_pixels(HessianAffineSift())  # the benchmark photos as `streamk eval` reads them: its cached features
    feats = [extract(p, ex, cache=default_cache_dir()) for p in photos]
    enc = Encoder(embedding="temb", k=4, aggregation="gmp").fit([f.descriptors for f in feats])
    img = Image.open(photos[0]).convert("RGB")
    W, H = img.size
    img.resize((W // 2, H // 2), Image.Resampling.LANCZOS).save(tmp / "half.jpg", quality=30)
    img.crop((0, 0, int(0.8 * W), int(0.85 * H))).save(tmp / "crop.jpg", quality=90)
    idx = StreamingIndex.create(tmp / "ix", enc, vector_dtype="float32", extractor=ex, vocabulary=vocabulary)
    for p in photos:
        idx.add(p.stem, image_path=str(p))
    for image_id, path in extra:
        idx.add(image_id, image_path=str(path))
    idx.add("half", image_path=str(tmp / "half.jpg"))
    idx.add("crop", image_path=str(tmp / "crop.jpg"))
    return idx, photos


def sharded_copy(single, path, shards):
    """An open ShardedIndex at ``path`` holding what ``single`` stored of each image (its
    record, vector and geometry), written through write_encoded."""
    from streamk.index import ShardedIndex, encoded_image_file

    many = ShardedIndex.create(path, single.encoder, shards=shards, vector_dtype="float32",
                               extractor=single.extractor(), vocabulary=single.vocabulary)
    stored = []
    for image_id in single.ids():
        info = single.info(image_id)
        n = info["n_descriptors"]
        stored.append(encoded_image_file(image_id, info["source"], info["sha256"], single.vector(image_id),
                                         np.zeros((n, 5), np.float32), np.ones(n), info["image_size"],
                                         geometry=single.geometry(image_id)))
    assert many.write_encoded(stored) == ["added"] * len(stored)
    return many

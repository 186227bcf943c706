"""Build streamk/pipeline/data/default_learning_sample.npz: the learning sample of
streamk's default encoder (see streamk/pipeline/bundled_encoder.py).

The photographs are the ones scikit-image's wheel bundles whose documentation
states public-domain, CC0 or "no known copyright restrictions" terms (listed in
``LICENSED_PHOTOS`` with their terms); moon, page and the Middlebury motorcycle
pair state none and are left out. Each photo's Hessian-affine SIFT descriptors
(the default extractor with its default limits, the ones ``streamk index create``
stores) are sampled down to ``PER_PHOTO`` rows, seeded, and stored as uint8
(SIFT entries are integers 0..255), one array per photo.

    python data/make_default_learning_sample.py      # needs streamk[demo]
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

#: (file in skimage/data, the terms its skimage.data docstring states)
LICENSED_PHOTOS = (
    ("astronaut.png", "public domain (NASA)"),
    ("brick.png", "CC0 (CC0Textures)"),
    ("camera.png", "CC0 (Lav Varshney)"),
    ("chelsea.png", "CC0 (Stefan van der Walt)"),
    ("coffee.png", "CC0 (Rachel Michetti)"),
    ("coins.png", "no known copyright restrictions"),
    ("grass.png", "CC0 (CC0Textures)"),
    ("gravel.png", "CC0 (CC0Textures)"),
    ("hubble_deep_field.jpg", "public domain (NASA)"),
    ("ihc.png", "no known copyright restrictions"),
    ("retina.jpg", "CC0 1.0"),
    ("rocket.jpg", "public domain (SpaceX)"),
    ("text.png", "public domain"),
)
PER_PHOTO = 4000  # every descriptor of these photos (at most 3,989 each)
SEED = 0
OUT = Path(__file__).resolve().parents[1] / "streamk" / "pipeline" / "data" / "default_learning_sample.npz"


def main():
    import skimage

    from streamk.features import make_extractor
    from streamk.features import extract

    folder = Path(skimage.__file__).resolve().parent / "data"
    extractor = make_extractor("hesaff")
    arrays, sources = {}, []
    for i, (name, terms) in enumerate(LICENSED_PHOTOS):
        path = folder / name
        X = extract(path, extractor).descriptors
        if not np.array_equal(X, np.round(X)) or X.min() < 0 or X.max() > 255:
            sys.exit(f"{name}: descriptors are not integers in 0..255")
        rng = np.random.default_rng([SEED, i])
        keep = np.sort(rng.choice(len(X), min(PER_PHOTO, len(X)), replace=False))
        arrays[f"photo{i:02d}"] = X[keep].astype(np.uint8)
        sources.append({"file": name, "terms": terms, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                        "descriptors": int(len(X)), "kept": int(len(keep))})
        print(f"{name}: {len(X)} descriptors, kept {len(keep)}", file=sys.stderr)
    meta = {"format": "streamk-learning-sample", "version": 1, "extractor": extractor.name,
            "extractor_options": extractor.options(), "scikit_image": skimage.__version__, "seed": SEED,
            "per_photo": PER_PHOTO, "photos": sources}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, __meta__=np.array(json.dumps(meta, sort_keys=True)), **arrays)
    print(f"wrote {OUT}: {OUT.stat().st_size / 1e6:.2f} MB, {sum(len(a) for a in arrays.values())} descriptors",
          file=sys.stderr)


if __name__ == "__main__":
    main()

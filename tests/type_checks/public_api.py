"""A user's code calling the names streamk exports, as its README and docstrings show them.
Never run: tests/test_packaging.py type-checks it with ``mypy --strict``, so each call here
type-checks as written against streamk's annotations (py.typed)."""

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

import streamk


def encode_photos(paths: list[Path], learning: list[NDArray[np.uint8]]) -> NDArray[np.float32]:
    extractor = streamk.make_extractor("sift", max_features=500)
    sets = [streamk.extract(p, extractor, cache=Path("features")).descriptors for p in paths]
    encoder = streamk.Encoder(embedding="temb", k=16, aggregation="gmp").fit(learning)
    vector: NDArray[np.float32] = encoder.encode(sets[0])
    weighted, alpha = encoder.encode(sets[0], return_weights=True)
    assert vector.shape == weighted.shape and alpha.ndim == 1
    encoder.save(Path("encoder.npz"))
    same = streamk.Encoder.load("encoder.npz")
    same = streamk.Encoder.from_bytes(encoder.to_bytes())
    assert same.fingerprint == encoder.fingerprint and same.dim == vector.shape[0] and same.fitted
    gmp = encoder.derive(aggregation="democratic", gamma=0.5)
    by_method = gmp.aggregate_methods(sets[0], ("sum", "gmp"))
    assert set(by_method) == {"sum", "gmp"}
    return encoder.encode_many(sets)


def score(root: Path, ranks: NDArray[np.int64]) -> float:
    dataset = streamk.load_dataset("paris6k", root, missing="ignore")
    result = streamk.evaluate(ranks, dataset, ks=(1, 10))
    return float(result.map)


def learn(paths: list[str]) -> int:
    encoder, info = streamk.train_encoder(paths, {"k": 16}, max_images=50, report=lambda p, why: print(p, why))
    return info.images + encoder.dim


def open_for_search(path: Path) -> "streamk.StreamingIndex | streamk.ShardedIndex":
    return streamk.open_index(path, readonly=True)


def make_index(photos: Path) -> Path:
    return streamk.create_index("my-index", train=[photos], k=16, aggregation="gmp", workers=1,
                                log=lambda line: None, progress=False)


def index_and_search(path: Path, photo: Path, vector: NDArray[np.float32]) -> list[str]:
    idx = streamk.StreamingIndex.open(path)
    idx.add("chelsea-view", image_path=photo, metadata={"folder": "paris"})
    idx.add("v1", vector=vector)
    results = idx.add_many([{"id": "v2", "vector": vector}], batch_size=1024)
    assert len(results) == 1 and "v1" in idx and len(idx) >= 2
    idx.update("v1", vector=2 * vector)
    removed: int = idx.remove(["v1", "v2"])
    hits = idx.search(photo, k=5, box=(60, 40, 300, 220), pairs=True)
    for h in hits:
        print(h.id, h.score, h.inliers, h.verified, h.region)
    meta: dict[str, object] = idx.metadata("chelsea-view")
    idx.set_metadata("chelsea-view", {"year": 2024}, merge=True)
    groups = idx.duplicates()
    near = idx.duplicates("chelsea-view", threshold=0.8)
    if len(idx) >= 256:
        idx.train(nlist=1, M=16)
    unit: NDArray[np.float32] = idx.vector("chelsea-view")
    assert removed == 2 and meta and unit.ndim == 1 and len(groups) + len(near) >= 0
    idx.close()
    with streamk.StreamingIndex.open(path, readonly=True) as same:
        return [h.id for h in same.search(str(photo), k=3)]


def shard(path: Path, encoder: streamk.Encoder, photo: Path) -> float:
    streamk.ShardedIndex.create(path, encoder, shards=2).close()
    with streamk.ShardedIndex.open(path) as idx:
        idx.add("a", image_path=photo)
        hits = idx.search(photo, k=5)
        return hits[0].score if hits else 0.0


def ingest(path: Path, folder: Path) -> str:
    with streamk.open_index(path) as idx, streamk.Ingester(idx, workers=1, batch_size=64, progress=False) as ing:
        stats = ing.ingest([folder])
        left, exact = ing.not_ingested()
        assert left >= 0 and exact in (True, False) and stats.n_failed >= 0
        return stats.summary()


def parameters() -> int:
    params = streamk.SearchParams(k=5, verify=0, box=(0, 0, 10, 10))
    return params.replace(k=3).k + params.verify_count() + params.expand_count()

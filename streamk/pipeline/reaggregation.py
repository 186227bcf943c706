"""Search an index under other aggregation settings than it was built with.

The search app lets a user switch between sum, democratic and GMP, and change
gamma, lambda and the power-law exponent, and see the ranking change. The stored
vectors were made with one setting; for any other, every database image must be
aggregated again from its descriptors (the paper's methods differ in the weights
of each descriptor, which need the image's own Gram matrix).

:class:`Reaggregator` does that once per (method, gamma | lambda) and keeps the
L2-normalised raw vectors xi (before power-law); the power-law exponent and RN
are then applied to the whole (N, D) matrix at once, so moving the exponent is
instant. Each image is embedded once per pass and its Gram matrix shared by all
three methods (:meth:`Encoder.aggregate_methods`). The descriptors come from the
images' source files through the feature cache and are kept in memory (uint8).

The index's own setting never re-aggregates: it searches the stored vectors (and
PQ codes). An index whose encoder has RN gets, for other settings, an RN learned
on the database's own raw vectors of that setting (unsupervised; the index's RN
was learned on other vectors).
"""

from typing import NamedTuple

import numpy as np

from .. import features as feat
from .extraction import iter_extract
from ..errors import ConfigError, DatasetImageError, NotFittedError
from ..encoding import RotationNormalisation, l2_normalize, postprocess
from ..index import Hit, check_request, unit_vector

MAX_IMAGES = 5000  # beyond this, re-aggregating the whole database is not interactive


class Settings(NamedTuple):
    """Aggregation settings of a search: method, Sinkhorn gamma, GMP lambda, power-law exponent."""

    method: str
    gamma: float
    lam: float
    power: float

    def key(self):
        """What the raw vectors depend on (the exponent is applied afterwards)."""
        if self.method == "democratic":
            return ("democratic", round(float(self.gamma), 6))
        if self.method == "gmp":
            return ("gmp", round(float(self.lam), 9))
        return ("sum",)


class Reaggregator:
    """Database vectors of ``index`` under any :class:`Settings`; see the module doc."""

    def __init__(self, index, cache_dir=None, workers=None, max_images=MAX_IMAGES):
        from ..config import default_cache_dir

        self.index = index
        self.encoder = index.encoder
        self.cache_dir = default_cache_dir() if cache_dir is None else cache_dir
        self.workers = workers
        self.max_images = max_images
        self._ids = None
        self._descriptors = None
        self._raw = {}  # Settings.key() -> (N, D) float32, rows L2-normalised
        self._rn = {}
        self._codes = {}
        self.passes = 0  # database aggregation passes done (tests, status line)

    def index_settings(self):
        c = self.encoder.config
        return Settings(c.aggregation, c.gamma, c.lam, c.power)

    def is_index_settings(self, s):
        return tuple(s) == tuple(self.index_settings())

    # ---------------------------------------------------------------- database
    def _load_descriptors(self, step):
        ids = self.index.ids()
        if len(ids) > self.max_images:
            raise ConfigError(f"the index holds {len(ids)} images; other aggregation settings than the "
                              f"index's own are recomputed for the whole database, which is offered up to "
                              f"{self.max_images} images: open an index built with the settings you want")
        sources = {}
        for image_id in ids:
            info = self.index.info(image_id)
            if info.get("kind") != "image_path" or not info.get("source"):
                raise ConfigError(f"image {image_id!r} was added as {info.get('kind')}: its descriptors are "
                                  "not stored, so it cannot be aggregated again; only the index's own "
                                  "settings can be searched")
            sources[image_id] = (info["source"], info.get("box"))
        extractor = self.index.extractor()
        got, errors = {}, {}
        for r in iter_extract([p for p, _ in sources.values()], extractor, self.cache_dir, self.workers):
            (errors.__setitem__(r.path, r.error) if r.error is not None else got.__setitem__(r.path, r.features))
            step("features")
        if errors:
            listed = "; ".join(f"{p}: {e}" for p, e in list(errors.items())[:5])
            raise DatasetImageError(f"{len(errors)} database image(s) cannot be read again: {listed}")
        descriptors = []
        for image_id in ids:
            path, box = sources[image_id]
            f = got[path] if box is None else feat.crop_to_box(got[path], box)
            descriptors.append(f.descriptors)
        self._ids, self._descriptors = ids, descriptors

    def _aggregate_database(self, s, step):
        """Raw vectors of every method at (gamma, lambda) of ``s`` not cached yet, in one pass."""
        wanted = {Settings(m, s.gamma, s.lam, s.power).key(): m for m in ("sum", "democratic", "gmp")}
        missing = {k: m for k, m in wanted.items() if k not in self._raw}
        out = {k: [] for k in missing}
        for X in self._descriptors:
            res = self.encoder.aggregate_methods(X, tuple(missing.values()), gamma=s.gamma, lam=s.lam)
            for k, m in missing.items():
                out[k].append(res[m][0])
            step("aggregation")
        for k, rows in out.items():
            self._raw[k] = l2_normalize(np.stack(rows)).astype(np.float32)
        self.passes += 1

    def work_needed(self, s):
        """Images to read and aggregate before ``s`` can be searched (0: ready)."""
        if self.is_index_settings(s) or s.key() in self._raw:
            return 0
        n = len(self.index)
        return n if self._descriptors is not None else 2 * n

    def database(self, s, progress=None):
        """(ids, (N, D') float32 unit rows) of the database under settings ``s``.

        progress(done, total, stage) is called per image when work is needed.
        """
        total = self.work_needed(s)
        done = [0]

        def step(stage):
            done[0] += 1
            if progress is not None:
                progress(done[0], total, stage)

        if self._descriptors is None:
            self._load_descriptors(step)
        if s.key() not in self._raw:
            self._aggregate_database(s, step)
        raw = self._raw[s.key()]
        return self._ids, postprocess(raw, s.power, self._rotation(s)).astype(np.float32)

    def _rotation(self, s):
        if self.encoder.rn is None:
            return None
        if s.key() not in self._rn:
            rn = self.encoder.rn
            self._rn[s.key()] = RotationNormalisation(rn.n_components, rn.dim).fit(self._raw[s.key()])
        return self._rn[s.key()]

    # ---------------------------------------------------------------- queries
    def encode_query(self, descriptors, s):
        """(unit query vector, per-descriptor weights) of a raw SIFT set under ``s``."""
        xi, alpha = self.encoder.aggregate_methods(descriptors, (s.method,), gamma=s.gamma, lam=s.lam)[s.method]
        rn = self.encoder.rn if self.is_index_settings(s) else self._rotation(s)
        v = postprocess(l2_normalize(xi[None, :]), s.power, rn)[0].astype(np.float32)
        return unit_vector(v), alpha

    def search(self, q, s, k=10, mode="exact", rerank=None, progress=None):
        """[Hit] of the k best database images for query vector ``q`` under ``s`` (k and
        rerank checked against the index's maxima, capped at the images)."""
        k = check_request(k, rerank)
        if self.is_index_settings(s):
            return [Hit(i, sc) for i, sc in self.index.search(q, k=k, mode=mode, rerank=rerank)]
        ids, V = self.database(s, progress)
        if len(ids) == 0:
            return []
        k = min(int(k), len(ids))
        if mode == "pq":
            codec = self.index.codec()
            if codec is None:
                raise NotFittedError("PQ search needs the index's codec first (index.train())")
            if s not in self._codes:  # the index's codebooks, these settings' vectors
                self._codes = {s: codec.lists_of(V)}
            R = min(len(ids), max(4 * k, 100) if rerank is None else int(rerank))
            cand = codec.search(self._codes[s], q[None, :], R)[1][0]
            cand = cand[cand >= 0]
        else:
            cand = np.arange(len(ids))
        scores = V[cand] @ q
        top = np.lexsort((cand, -scores))[:k]
        return [Hit(ids[cand[t]], float(scores[t])) for t in top]


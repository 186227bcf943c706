"""Retrieval benchmarks: image lists, queries, ground truth, and their download.

A :class:`Dataset` holds what an evaluation needs and nothing else: the image
ids in database order, how to find an image on disk, the queries (label,
database index, query box) and, per query, the ground truth as 0-based database
indices.  The protocol flags say how queries are run and scored:

- ``crop_query``   (Oxford, Paris, revisited): the query is described by the
  features inside its box only;
- ``exclude_query`` (Holidays): the query image is removed from its own
  ranking (it is also listed as junk, which has the same effect on AP);
- ``protocol``: ``"oxford"``, ``"holidays"``, ``"revisited"`` (Easy / Medium /
  Hard, Radenovic et al. CVPR 2018) or ``"ukbench"`` (N-S score).

Ground truth comes from the standard files:

- ``gnd_<name>.mat`` (Holidays, Oxford5k/105k, Paris6k/106k): indices in these
  files are **1-based**; they are converted to 0-based here.
- the official Oxford/Paris text files (``<label>_good.txt``, ``_ok.txt``,
  ``_junk.txt``, ``_query.txt``); positives = good + ok, junk ignored;
- ``gnd_roxford5k.pkl`` / ``gnd_rparis6k.pkl`` (0-based), read by
  :func:`safe_load_pickle`, which refuses every global outside plain containers
  and numpy's array reconstruction (a pickle can otherwise run code on load);
- Holidays and UKBench also derive their ground truth from file names alone
  (Holidays: ``XXXXYY.jpg``, query = ``YY == 00``, group = ``XXXX``; UKBench:
  groups of 4 consecutive images).

Images are looked up as ``<image_dir>/<id>.jpg`` with ``image_dir`` defaulting
to ``<root>/jpg`` (the layout :func:`download` produces and the one revisitop
uses); ids never carry the extension (Holidays ids are ``"100000"`` for
``100000.jpg``).

:func:`download` fetches the official archives with pooch (SHA-256 where one is
published, sizes against the server's length, resume by HTTP Range on
``<file>.part``) and extracts them safely (no path outside the destination, no
links; the archives' own CRCs checked as members are read).
"""

import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..config import shared_data_dir
from ..errors import ConfigError, GroundTruthError, UnknownDatasetError
from .safe_pickle import safe_load_pickle

__all__ = [
    "DATASETS", "Query", "Dataset", "load_dataset", "load_mat_ground_truth", "load_text_ground_truth",
    "load_revisited", "holidays_from_ids", "ukbench_from_ids", "load_paris6k_subset", "default_data_dir",
    "dataset_key",
]

REVISITED_PROTOCOLS = ("easy", "medium", "hard")
UKBENCH_SIZE = 10200
UKBENCH_GROUP = 4


# ----------------------------------------------------------------- data model

def _index_array(values, what="indices"):
    """Sorted unique int64 array, read-only."""
    arr = np.unique(np.asarray(values, dtype=np.int64).ravel())
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, eq=False)
class Query:
    """One query: its label, its image, its database index and its ground truth.

    ``positives`` and ``junk`` are sorted 0-based database indices.  For the
    revisited datasets ``easy``, ``hard`` hold the two positive classes and
    ``junk`` the revisited junk; ``positives`` is then easy + hard (the Medium
    protocol).  ``index`` is None when the query image is not in the database
    (revisited datasets).  ``box`` is (x1, y1, x2, y2) in pixels of the original
    image, or None.
    """

    name: str
    image_id: str
    index: int | None
    box: tuple[float, float, float, float] | None
    positives: np.ndarray
    junk: np.ndarray
    easy: np.ndarray | None = None
    hard: np.ndarray | None = None

    def ground_truth(self, protocol: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(positives, junk) for a protocol.

        protocol None: the dataset's own (for revisited: Medium).  Revisited
        protocols as in Radenovic et al. 2018 / revisitop ``example_evaluate``:
        easy = (easy, junk + hard), medium = (easy + hard, junk),
        hard = (hard, junk + easy).
        """
        if protocol is None:
            return self.positives, self.junk
        protocol = protocol.lower()
        if protocol not in REVISITED_PROTOCOLS:
            raise ConfigError(f"unknown protocol {protocol!r}; expected one of {REVISITED_PROTOCOLS}")
        if self.easy is None or self.hard is None:
            raise ConfigError(f"query {self.name!r} has no easy/hard ground truth (not a revisited dataset)")
        if protocol == "easy":
            return self.easy, _index_array(np.concatenate([self.junk, self.hard]))
        if protocol == "medium":
            return _index_array(np.concatenate([self.easy, self.hard])), self.junk
        return self.hard, _index_array(np.concatenate([self.junk, self.easy]))

    def _remap(self, old_to_new: np.ndarray, keep_index: bool) -> "Query":
        def m(a):
            if a is None:
                return None
            new = old_to_new[a]
            return _index_array(new[new >= 0])
        index = int(old_to_new[self.index]) if (keep_index and self.index is not None) else None
        return replace(self, index=index, positives=m(self.positives), junk=m(self.junk),
                       easy=m(self.easy), hard=m(self.hard))


@dataclass(eq=False)
class Dataset:
    """A retrieval benchmark: database images, queries, ground truth, protocol flags."""

    name: str
    image_ids: tuple[str, ...]
    queries: tuple[Query, ...]
    protocol: str = "oxford"
    crop_query: bool = False
    exclude_query: bool = False
    root: Path | None = None
    image_dir: Path | None = None
    image_ext: str = ".jpg"
    query_image_dir: Path | None = None  # where query images are, when not among the database's
    _index: dict | None = field(default=None, repr=False)

    def __post_init__(self):
        self.image_ids = tuple(str(i) for i in self.image_ids)
        self.queries = tuple(self.queries)
        if self.root is not None:
            self.root = Path(self.root)
        if self.image_dir is not None:
            self.image_dir = Path(self.image_dir)
        elif self.root is not None:
            self.image_dir = self.root / "jpg"
        if self.query_image_dir is not None:
            self.query_image_dir = Path(self.query_image_dir)

    # -- sizes and lookups
    def __len__(self) -> int:
        return len(self.image_ids)

    @property
    def n_images(self) -> int:
        return len(self.image_ids)

    @property
    def n_queries(self) -> int:
        return len(self.queries)

    @property
    def query_names(self) -> list[str]:
        return [q.name for q in self.queries]

    @property
    def protocols(self) -> tuple[str, ...]:
        """Evaluation protocols: ('easy', 'medium', 'hard') for revisited, else ()."""
        return REVISITED_PROTOCOLS if self.protocol == "revisited" else ()

    def index_of(self, image_id: str) -> int:
        """Database index of an image id (KeyError-free: raises GroundTruthError)."""
        if self._index is None:
            self._index = {name: i for i, name in enumerate(self.image_ids)}
        try:
            return self._index[str(image_id)]
        except KeyError:
            raise GroundTruthError(f"image {image_id!r} is not in dataset {self.name!r}") from None

    def query(self, name: str) -> Query:
        for q in self.queries:
            if q.name == name:
                return q
        raise GroundTruthError(f"dataset {self.name!r} has no query {name!r}")

    # -- paths
    def image_path(self, image: int | str) -> Path:
        """Path of a database image (by index) or of any image id of the dataset."""
        if self.image_dir is None:
            raise ConfigError(f"dataset {self.name!r} was loaded without an image directory; pass root= or image_dir=")
        if isinstance(image, (int, np.integer)):
            if not 0 <= int(image) < self.n_images:
                raise GroundTruthError(f"image index {image} out of range [0, {self.n_images})")
            image = self.image_ids[int(image)]
        return self.image_dir / f"{image}{self.image_ext}"

    def query_image_path(self, query: int | Query) -> Path:
        q = self.queries[query] if isinstance(query, (int, np.integer)) else query
        if self.query_image_dir is not None:
            return self.query_image_dir / f"{q.image_id}{self.image_ext}"
        return self.image_path(q.image_id)

    # -- ground truth
    def ground_truth(self, protocol: str | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """[(positives, junk)] per query (0-based indices), for a protocol (see Query.ground_truth).

        With ``exclude_query`` (Holidays) the query's own index is part of junk.
        """
        out = []
        for q in self.queries:
            pos, junk = q.ground_truth(protocol)
            if self.exclude_query and q.index is not None and q.index not in junk:
                junk = _index_array(np.append(junk, q.index))
            out.append((pos, junk))
        return out

    def restrict(self, image_ids, name: str | None = None, root=None, image_dir=None) -> "Dataset":
        """The dataset on a subset of its images, in the original database order.

        Queries whose image is in the database are kept only if that image is
        kept; queries outside the database (revisited) are always kept.
        Positives and junk are re-indexed to the subset; absent ones are dropped.
        """
        wanted = {str(i) for i in image_ids}
        unknown = wanted.difference(self.image_ids)
        if unknown:
            raise GroundTruthError(f"{len(unknown)} image(s) not in {self.name!r}, e.g. {sorted(unknown)[:3]}")
        old_to_new = np.full(self.n_images, -1, dtype=np.int64)
        kept = [i for i, iid in enumerate(self.image_ids) if iid in wanted]
        old_to_new[kept] = np.arange(len(kept))
        queries = []
        for q in self.queries:
            if q.index is None:
                queries.append(q._remap(old_to_new, keep_index=False))
            elif old_to_new[q.index] >= 0:
                queries.append(q._remap(old_to_new, keep_index=True))
        return Dataset(name=name or self.name, image_ids=tuple(self.image_ids[i] for i in kept),
                       queries=tuple(queries), protocol=self.protocol, crop_query=self.crop_query,
                       exclude_query=self.exclude_query, root=root if root is not None else self.root,
                       image_dir=image_dir if image_dir is not None else (None if root is not None else self.image_dir),
                       image_ext=self.image_ext, query_image_dir=self.query_image_dir)

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}, n_images={self.n_images}, n_queries={self.n_queries}, "
                f"protocol={self.protocol!r}, crop_query={self.crop_query}, exclude_query={self.exclude_query}, "
                f"image_dir={str(self.image_dir) if self.image_dir else None!r})")


# ------------------------------------------------------------ dataset specs


@dataclass(frozen=True)
class _Spec:
    protocol: str
    crop_query: bool
    exclude_query: bool
    gt_files: tuple[str, ...] = ()     # file names searched for (.mat / .pkl)
    text_gt: bool = False               # official Oxford/Paris text files accepted


_SPECS = {
    "holidays": _Spec("holidays", False, True, ("gnd_holidays.mat",)),
    "oxford5k": _Spec("oxford", True, False, ("gnd_oxford5k.mat",), text_gt=True),
    "oxford105k": _Spec("oxford", True, False, ("gnd_Oxford105k.mat", "gnd_oxford105k.mat"), text_gt=True),
    "paris6k": _Spec("oxford", True, False, ("gnd_paris6k.mat",), text_gt=True),
    "paris106k": _Spec("oxford", True, False, ("gnd_Paris106k.mat", "gnd_paris106k.mat"), text_gt=True),
    "roxford5k": _Spec("revisited", True, False, ("gnd_roxford5k.pkl",)),
    "rparis6k": _Spec("revisited", True, False, ("gnd_rparis6k.pkl",)),
    "ukbench": _Spec("ukbench", False, False),
    "paris6k-subset": _Spec("oxford", True, False, ("gnd_paris6k.mat",)),
}
DATASETS = tuple(_SPECS)


def _spec(name: str) -> tuple[str, _Spec]:
    key = str(name).lower()
    if key not in _SPECS:
        raise UnknownDatasetError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    return key, _SPECS[key]


def default_data_dir() -> Path | None:
    """$STREAMK_SHARED_DATA, else ``../shared/data`` beside the repository; None if absent."""
    return shared_data_dir()


def _list_image_ids(image_dir: Path, ext: str = ".jpg") -> list[str]:
    if not image_dir.is_dir():
        raise GroundTruthError(f"image directory {image_dir} does not exist")
    ids = sorted(p.name[: -len(ext)] for p in image_dir.iterdir()
                 if p.name.lower().endswith(ext) and not p.name.startswith("."))
    if not ids:
        raise GroundTruthError(f"no *{ext} images in {image_dir}")
    return ids


# ------------------------------------------------------------- .mat format


def _mat_indices(value, n: int, what: str) -> np.ndarray:
    """1-based indices from a loadmat field (scalar, array or empty) -> 0-based."""
    if value is None:
        return _index_array([])
    arr = np.atleast_1d(np.asarray(value))
    if arr.size == 0:
        return _index_array([])
    if arr.dtype.kind not in "iuf" or (arr.dtype.kind == "f" and not np.all(arr == np.round(arr))):
        raise GroundTruthError(f"{what}: expected integer indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64) - 1            # the .mat files are 1-based
    if arr.min() < 0 or arr.max() >= n:
        raise GroundTruthError(f"{what}: index out of range 1..{n} (1-based)")
    return _index_array(arr)


def _box(value, what: str):
    if value is None:
        return None
    arr = np.asarray(value, dtype=np.float64).ravel()
    if arr.size == 0:
        return None
    if arr.size != 4 or not np.all(np.isfinite(arr)):
        raise GroundTruthError(f"{what}: a box is 4 finite numbers x1 y1 x2 y2, got {arr.tolist()}")
    return tuple(float(v) for v in arr)


def load_mat_ground_truth(path, name: str | None = None, root=None, image_dir=None) -> Dataset:
    """Dataset from a ``gnd_*.mat`` file (feature_name, query_list, gnd[i].ok/.junk/.bbx, 1-based)."""
    import scipy.io

    path = Path(path)
    if not path.is_file():
        raise GroundTruthError(f"ground-truth file {path} does not exist")
    try:
        mat = scipy.io.loadmat(str(path), squeeze_me=True, struct_as_record=False)
    except Exception as exc:  # scipy raises several types for corrupt files
        raise GroundTruthError(f"cannot read {path}: {exc}") from exc
    for key in ("feature_name", "query_list", "gnd"):
        if key not in mat:
            raise GroundTruthError(f"{path}: missing field {key!r}")
    if name is None:
        stem = path.stem
        name = stem[4:].lower() if stem.startswith("gnd_") else stem.lower()
    key, spec = _spec(name) if name.lower() in _SPECS else (name, _Spec("oxford", True, False))
    image_ids = [str(s) for s in np.atleast_1d(mat["feature_name"])]
    n = len(image_ids)
    qlist = np.asarray(mat["query_list"], dtype=object)
    if qlist.ndim == 1:
        qlist = qlist.reshape(1, -1)
    gnd = np.atleast_1d(mat["gnd"])
    if len(gnd) != len(qlist):
        raise GroundTruthError(f"{path}: {len(qlist)} queries but {len(gnd)} ground-truth entries")
    queries = []
    for i, (row, g) in enumerate(zip(qlist, gnd)):
        qname, qidx = str(row[0]), int(row[1]) - 1      # 1-based in the file
        label = str(row[2]) if len(row) > 2 else qname
        if not 0 <= qidx < n or image_ids[qidx] != qname:
            raise GroundTruthError(f"{path}: query {label!r} index {qidx + 1} does not point at {qname!r}")
        fields = getattr(g, "_fieldnames", [])
        queries.append(Query(
            name=label, image_id=qname, index=qidx,
            box=_box(getattr(g, "bbx", None), f"{path} query {label}") if "bbx" in fields else None,
            positives=_mat_indices(getattr(g, "ok", None), n, f"{path} query {label} ok"),
            junk=_mat_indices(getattr(g, "junk", None), n, f"{path} query {label} junk")))
    return Dataset(name=key, image_ids=tuple(image_ids), queries=tuple(queries), protocol=spec.protocol,
                   crop_query=spec.crop_query, exclude_query=spec.exclude_query, root=root, image_dir=image_dir)


# ------------------------------------------------- official Oxford/Paris text


def _natural_key(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _read_names(path: Path) -> list[str]:
    if not path.is_file():
        raise GroundTruthError(f"ground-truth file {path} is missing")
    return [line.split()[0] for line in path.read_text().splitlines() if line.strip()]


def _strip_prefix(name: str) -> str:
    return name[5:] if name.startswith("oxc1_") else name


def load_text_ground_truth(gt_dir, image_ids, name: str = "oxford5k", root=None, image_dir=None,
                           missing: str = "warn") -> Dataset:
    """Dataset from the official Oxford/Paris text ground truth.

    ``gt_dir`` holds ``<label>_query.txt`` (one line ``oxc1_<image> x1 y1 x2 y2``
    for Oxford, ``<image> x1 y1 x2 y2`` for Paris), ``<label>_good.txt``,
    ``_ok.txt`` and ``_junk.txt`` (one image name a line).  Positives = good + ok.
    ``image_ids`` is the database in order (the text files do not list it).
    Queries are in natural label order (all_souls_1, ..., all_souls_5, ashmolean_1, ...),
    the order of the .mat files.  Ground-truth images absent from ``image_ids``
    are dropped with a warning (``missing="warn"``), silently (``"ignore"``) or
    raise GroundTruthError (``"error"``).
    """
    if missing not in ("warn", "ignore", "error"):
        raise ConfigError(f"missing must be 'warn', 'ignore' or 'error', got {missing!r}")
    gt_dir = Path(gt_dir)
    if not gt_dir.is_dir():
        raise GroundTruthError(f"ground-truth directory {gt_dir} does not exist")
    key, spec = _spec(name) if str(name).lower() in _SPECS else (name, _Spec("oxford", True, False))
    image_ids = [str(i) for i in image_ids]
    index = {iid: i for i, iid in enumerate(image_ids)}
    if len(index) != len(image_ids):
        raise GroundTruthError("image_ids has repeated ids")
    qfiles = sorted(gt_dir.glob("*_query.txt"), key=lambda p: _natural_key(p.name))
    if not qfiles:
        raise GroundTruthError(f"no *_query.txt files in {gt_dir}")
    absent: set[str] = set()

    def to_idx(names):
        out = []
        for nm in names:
            nm = _strip_prefix(nm)
            if nm in index:
                out.append(index[nm])
            else:
                absent.add(nm)
        return _index_array(out)

    queries = []
    for qf in qfiles:
        label = qf.name[: -len("_query.txt")]
        lines = [ln for ln in qf.read_text().splitlines() if ln.strip()]
        if len(lines) != 1 or len(lines[0].split()) != 5:
            raise GroundTruthError(f"{qf}: expected one line '<image> x1 y1 x2 y2'")
        tok = lines[0].split()
        qimg = _strip_prefix(tok[0])
        try:
            box = _box([float(t) for t in tok[1:]], str(qf))
        except ValueError as exc:
            raise GroundTruthError(f"{qf}: bad box: {exc}") from exc
        good = _read_names(gt_dir / f"{label}_good.txt")
        ok = _read_names(gt_dir / f"{label}_ok.txt")
        junk = _read_names(gt_dir / f"{label}_junk.txt")
        queries.append(Query(name=label, image_id=qimg, index=index.get(qimg), box=box,
                             positives=to_idx(good + ok), junk=to_idx(junk)))
    if absent:
        msg = f"{len(absent)} ground-truth image(s) not in the image list were dropped, e.g. {sorted(absent)[:3]}"
        if missing == "error":
            raise GroundTruthError(msg)
        if missing == "warn":
            warnings.warn(msg, stacklevel=2)
    return Dataset(name=key, image_ids=tuple(image_ids), queries=tuple(queries), protocol=spec.protocol,
                   crop_query=spec.crop_query, exclude_query=spec.exclude_query, root=root, image_dir=image_dir)


# ----------------------------------------------------------------- revisited


def load_revisited(path, name: str | None = None, root=None, image_dir=None) -> Dataset:
    """Revisited Oxford/Paris from ``gnd_r*.pkl``: dict imlist, qimlist, gnd[i] = {bbx, easy, hard, junk}, 0-based."""
    path = Path(path)
    cfg = safe_load_pickle(path)
    if not isinstance(cfg, dict) or not {"imlist", "qimlist", "gnd"} <= set(cfg):
        raise GroundTruthError(f"{path}: expected a dict with 'imlist', 'qimlist', 'gnd'")
    if name is None:
        name = path.stem[4:] if path.stem.startswith("gnd_") else path.stem
    key, spec = _spec(name) if str(name).lower() in _SPECS else (name, _SPECS["roxford5k"])
    imlist = [str(s) for s in cfg["imlist"]]
    qimlist = [str(s) for s in cfg["qimlist"]]
    gnd = list(cfg["gnd"])
    if len(gnd) != len(qimlist):
        raise GroundTruthError(f"{path}: {len(qimlist)} queries but {len(gnd)} ground-truth entries")
    n = len(imlist)
    index = {iid: i for i, iid in enumerate(imlist)}

    def idx(g, k, qn):
        v = g.get(k)
        arr = np.empty(0, np.int64) if v is None else np.atleast_1d(np.asarray(v, dtype=np.int64))
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            raise GroundTruthError(f"{path}: query {qn} {k}: index out of range [0, {n})")
        return _index_array(arr)

    queries = []
    for qn, g in zip(qimlist, gnd):
        if not isinstance(g, dict):
            raise GroundTruthError(f"{path}: ground truth of {qn} is not a dict")
        easy, hard, junk = idx(g, "easy", qn), idx(g, "hard", qn), idx(g, "junk", qn)
        queries.append(Query(name=qn, image_id=qn, index=index.get(qn), box=_box(g.get("bbx"), f"{path} {qn}"),
                             positives=_index_array(np.concatenate([easy, hard])), junk=junk, easy=easy, hard=hard))
    return Dataset(name=key, image_ids=tuple(imlist), queries=tuple(queries), protocol="revisited",
                   crop_query=spec.crop_query, exclude_query=False, root=root, image_dir=image_dir)


# ------------------------------------------------- ground truth from file names


def holidays_from_ids(image_ids, root=None, image_dir=None) -> Dataset:
    """INRIA Holidays ground truth from its file names, as the official holidays_map.py.

    Image ``XXXXYY``: group ``XXXX`` (id // 100); the query of a group is the
    image with ``YY == 00``; positives = the other images of the group; the
    query itself is junk (removed from its own ranking).
    """
    ids = [str(i)[:-4] if str(i).lower().endswith(".jpg") else str(i) for i in image_ids]
    try:
        nums = np.array([int(i) for i in ids], dtype=np.int64)
    except ValueError as exc:
        raise GroundTruthError(f"Holidays image ids are numbers like '100000': {exc}") from exc
    groups = nums // 100
    queries = []
    for qi in np.flatnonzero(nums % 100 == 0):
        members = np.flatnonzero(groups == groups[qi])
        queries.append(Query(name=ids[qi], image_id=ids[qi], index=int(qi), box=None,
                             positives=_index_array(members[members != qi]), junk=_index_array([qi])))
    spec = _SPECS["holidays"]
    return Dataset(name="holidays", image_ids=tuple(ids), queries=tuple(queries), protocol=spec.protocol,
                   crop_query=False, exclude_query=True, root=root, image_dir=image_dir)


def ukbench_from_ids(image_ids=None, root=None, image_dir=None) -> Dataset:
    """UKBench: every image is a query; its positives are its group of 4 consecutive images (itself included).

    Without ``image_ids`` the official names ``ukbench00000`` ... ``ukbench10199`` are used.
    """
    ids = [f"ukbench{i:05d}" for i in range(UKBENCH_SIZE)] if image_ids is None else [str(i) for i in image_ids]
    if len(ids) % UKBENCH_GROUP:
        raise GroundTruthError(f"UKBench has groups of {UKBENCH_GROUP} images; got {len(ids)} images")
    queries = []
    for i, iid in enumerate(ids):
        g0 = (i // UKBENCH_GROUP) * UKBENCH_GROUP
        queries.append(Query(name=iid, image_id=iid, index=i, box=None,
                             positives=_index_array(np.arange(g0, g0 + UKBENCH_GROUP)), junk=_index_array([])))
    return Dataset(name="ukbench", image_ids=tuple(ids), queries=tuple(queries), protocol="ukbench",
                   crop_query=False, exclude_query=False, root=root, image_dir=image_dir)


# ------------------------------------------------------------------- loading


def load_paris6k_subset(gt=None, image_dir=None) -> Dataset:
    """The 250-photo Paris6k subset of the shared data with the official Paris6k ground truth restricted to it.

    ``gt``: gnd_paris6k.mat or the directory holding it (default ``<data>/gt``);
    ``image_dir``: the subset's images (default ``<data>/paris6k-subset/jpg``),
    ``<data>`` being $STREAMK_SHARED_DATA or ../shared/data beside the repository.
    """
    data = default_data_dir()
    if gt is None or image_dir is None:
        if data is None:
            raise GroundTruthError("shared data not found (set STREAMK_SHARED_DATA or pass gt= and image_dir=)")
    gt = Path(gt) if gt is not None else data / "gt"  # type: ignore[operator]  # data: not None (above)
    mat = gt / "gnd_paris6k.mat" if gt.is_dir() else gt
    image_dir = Path(image_dir) if image_dir is not None else data / "paris6k-subset" / "jpg"  # type: ignore[operator]
    full = load_mat_ground_truth(mat, name="paris6k")
    present = _list_image_ids(image_dir)
    return full.restrict(present, name="paris6k-subset", root=image_dir.parent, image_dir=image_dir)


def _find_gt(key: str, spec: _Spec, root: Path | None, gt) -> tuple[str, Path] | None:
    if gt is not None:
        gt = Path(gt)
        if gt.is_file():
            return ("pkl" if gt.suffix == ".pkl" else "mat"), gt
        if not gt.is_dir():
            raise GroundTruthError(f"ground truth {gt} does not exist")
        dirs = [gt]
    else:
        dirs = [d for d in ((root, root / "gt") if root is not None else ()) if d.is_dir()]
        shared = default_data_dir()
        if shared is not None and (shared / "gt").is_dir():
            dirs.append(shared / "gt")
    for d in dirs:
        for fname in spec.gt_files:
            if (d / fname).is_file():
                return ("pkl" if fname.endswith(".pkl") else "mat"), d / fname
        if spec.text_gt:
            for t in (d / "gt_files", d):
                if t.is_dir() and any(t.glob("*_query.txt")):
                    return "text", t
    return None


def load_dataset(name: str, root: str | os.PathLike[str] | None = None, *, gt: str | os.PathLike[str] | None = None,
                 image_dir: str | os.PathLike[str] | None = None, image_ids: Sequence[str] | None = None,
                 missing: str = "warn") -> Dataset:
    """Load a benchmark by name (see DATASETS).

    Args:
        root: the dataset directory (images in ``<root>/jpg``, as :func:`download` leaves them);
        gt: a ground-truth file (.mat / .pkl) or a directory holding it or the
            official text files; by default looked up in ``root``, ``root/gt``,
            ``root/gt_files`` and then the shared data's ``gt/``;
        image_dir: overrides ``<root>/jpg`` (for UKBench ``<root>/full`` is used when there is no jpg/);
        image_ids: the database list for text ground truth (default: the image directory's listing, sorted);
        missing: what to do with text ground-truth images absent from the list ('warn', 'ignore', 'error').

    Holidays without a .mat and UKBench use the ground truth encoded in file names.
    """
    key, spec = _spec(name)
    root = Path(root) if root is not None else None
    if key == "paris6k-subset":
        if image_dir is None and root is not None:
            image_dir = root / "jpg"
        return load_paris6k_subset(gt=gt, image_dir=image_dir)
    if image_dir is None and root is not None:
        image_dir = root / "jpg"
        if key == "ukbench" and not image_dir.is_dir() and (root / "full").is_dir():
            image_dir = root / "full"
    image_dir = Path(image_dir) if image_dir is not None else None

    def listing():
        if image_ids is not None:
            return [str(i) for i in image_ids]
        if image_dir is None:
            raise GroundTruthError(f"{key}: no image list; pass root=, image_dir= or image_ids=")
        return _list_image_ids(image_dir)

    if key == "ukbench":
        ids = None
        if image_ids is not None or (image_dir is not None and image_dir.is_dir()):
            ids = listing()
        return ukbench_from_ids(ids, root=root, image_dir=image_dir)
    found = _find_gt(key, spec, root, gt)
    if found is None:
        if key == "holidays":
            return holidays_from_ids(listing(), root=root, image_dir=image_dir)
        where = gt if gt is not None else (root or "(no root)")
        raise GroundTruthError(f"{key}: no ground truth found (looked for {', '.join(spec.gt_files) or 'files'}"
                               f"{' or gt_files/*_query.txt' if spec.text_gt else ''} in {where} and the shared data)")
    kind, path = found
    if kind == "mat":
        return load_mat_ground_truth(path, name=key, root=root, image_dir=image_dir)
    if kind == "pkl":
        return load_revisited(path, name=key, root=root, image_dir=image_dir)
    return load_text_ground_truth(path, listing(), name=key, root=root, image_dir=image_dir, missing=missing)


def dataset_key(name):
    """The canonical name of a dataset (``"Oxford5k"`` -> ``"oxford5k"``), or UnknownDatasetError."""
    return _spec(name)[0]

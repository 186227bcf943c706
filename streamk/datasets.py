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

from __future__ import annotations

import fnmatch
import io
import os
import pickle
import re
import shutil
import tarfile
import warnings
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

import numpy as np

from .errors import (ChecksumError, ConfigError, DownloadError, GroundTruthError, StreamkError,
                     UnknownDatasetError, UnsafeArchiveError, UnsafePickleError)

__all__ = [
    "DATASETS", "Query", "Dataset", "load_dataset", "load_mat_ground_truth", "load_text_ground_truth",
    "load_revisited", "holidays_from_ids", "ukbench_from_ids", "load_paris6k_subset", "safe_load_pickle",
    "default_data_dir", "Remote", "REMOTES", "download", "fetch", "extract_archive",
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
    env = os.environ.get("STREAMK_SHARED_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    return path if path.is_dir() else None


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


# ------------------------------------------------------- restricted pickle


def _safe_globals() -> dict:
    import builtins
    import _codecs

    allowed = {}
    for nm in ("dict", "list", "tuple", "set", "frozenset", "str", "bytes", "bytearray",
               "int", "float", "complex", "bool"):
        allowed[("builtins", nm)] = getattr(builtins, nm)
        allowed[("__builtin__", nm)] = getattr(builtins, nm)     # protocol 0-2 pickles made by Python 2
    # protocol <= 2 pickles of numpy arrays carry their raw bytes as
    # _codecs.encode(latin1_str, 'latin1'): a pure str -> bytes conversion
    allowed[("_codecs", "encode")] = _codecs.encode
    try:
        from numpy._core import multiarray as ma
        from numpy._core import numeric as nm_
    except ImportError:  # numpy < 2
        from numpy.core import multiarray as ma
        from numpy.core import numeric as nm_
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[(mod, "_reconstruct")] = ma._reconstruct
        allowed[(mod, "scalar")] = ma.scalar
    # protocol 5 pickles of arrays (numpy >= 1.16) rebuild from a buffer
    for mod in ("numpy.core.numeric", "numpy._core.numeric"):
        if hasattr(nm_, "_frombuffer"):
            allowed[(mod, "_frombuffer")] = nm_._frombuffer
    allowed[("numpy", "ndarray")] = np.ndarray
    allowed[("numpy", "dtype")] = np.dtype
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that admits only plain containers and numpy array reconstruction.

    Any other global (``os.system``, ``builtins.eval``, a class, ...) raises
    :class:`UnsafePickleError` before it is looked up, so nothing runs.
    """

    _allowed: dict | None = None

    def find_class(self, module, name):
        if RestrictedUnpickler._allowed is None:
            RestrictedUnpickler._allowed = _safe_globals()
        try:
            return RestrictedUnpickler._allowed[(module, name)]
        except KeyError:
            raise UnsafePickleError(f"refusing to unpickle global {module}.{name}: only plain containers "
                                    f"and numpy arrays are allowed") from None

    def persistent_load(self, pid):
        raise UnsafePickleError("refusing a pickle with persistent ids")


def safe_load_pickle(source):
    """Load a pickle (path, bytes or binary file) with :class:`RestrictedUnpickler`."""
    if isinstance(source, (bytes, bytearray)):
        f = io.BytesIO(source)
    elif hasattr(source, "read"):
        f = source
    else:
        path = Path(source)
        if not path.is_file():
            raise GroundTruthError(f"pickle file {path} does not exist")
        with open(path, "rb") as fh:
            return safe_load_pickle(fh)
    try:
        return RestrictedUnpickler(f, encoding="latin1").load()
    except UnsafePickleError:
        raise
    except Exception as exc:
        raise GroundTruthError(f"cannot read pickle: {exc}") from exc


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
    gt = Path(gt) if gt is not None else data / "gt"
    mat = gt / "gnd_paris6k.mat" if gt.is_dir() else gt
    image_dir = Path(image_dir) if image_dir is not None else data / "paris6k-subset" / "jpg"
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


def load_dataset(name: str, root=None, *, gt=None, image_dir=None, image_ids=None,
                 missing: str = "warn") -> Dataset:
    """Load a benchmark by name (see DATASETS).

    root       the dataset directory (images in ``<root>/jpg``, as :func:`download` leaves them);
    gt         a ground-truth file (.mat / .pkl) or a directory holding it or the
               official text files; by default looked up in ``root``, ``root/gt``,
               ``root/gt_files`` and then the shared data's ``gt/``;
    image_dir  overrides ``<root>/jpg`` (for UKBench ``<root>/full`` is used when there is no jpg/);
    image_ids  the database list for text ground truth (default: the image directory's listing, sorted);
    missing    what to do with text ground-truth images absent from the list ('warn', 'ignore', 'error').

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


# ------------------------------------------------------------------ download


@dataclass(frozen=True)
class Remote:
    """One published file of a dataset.

    size / sha256: expected values, None when nothing is published (then the
    transfer is checked against the server's Content-Length only).  extract:
    None keeps the file as downloaded in dest_dir; otherwise the archive is
    extracted into ``dest_dir/extract`` ("" = dest_dir itself), keeping only
    members whose path matches ``members`` (fnmatch), without their directories
    if ``flatten``.
    """

    url: str
    filename: str
    size: int | None = None
    sha256: str | None = None
    extract: str | None = None
    members: str = "*"
    flatten: bool = False


_OX = "https://www.robots.ox.ac.uk/~vgg/data/oxbuildings/"
_PA = "https://www.robots.ox.ac.uk/~vgg/data/parisbuildings/"
_REVISITOP = "http://cmp.felk.cvut.cz/revisitop/data/datasets/"
# The Oxford and Paris images are the face-blurred "-v1" archives that replaced
# the originals on the VGG pages (as revisitop's download script fetches them);
# the ground-truth archives are unchanged.  No SHA-256 (nor size) of any of
# these files is published by VGG, revisitop, INRIA or archive.org's UKBench
# item as far as we could find, so every entry has sha256=None, size=None: a
# download is checked against the Content-Length the server announces and,
# on extraction, against the archive's own CRCs (gzip, zip).  Fill in sha256
# where a publisher gives one and pooch checks it.
_OXFORD_IMAGES = Remote(_OX + "oxbuild_images-v1.tgz", "oxbuild_images-v1.tgz", extract="jpg", members="*.jpg",
                        flatten=True)
_OXFORD_GT = Remote(_OX + "gt_files_170407.tgz", "gt_files_170407.tgz", extract="gt_files", members="*.txt",
                    flatten=True)
_PARIS_1 = Remote(_PA + "paris_1-v1.tgz", "paris_1-v1.tgz", extract="jpg", members="*.jpg", flatten=True)
_PARIS_2 = Remote(_PA + "paris_2-v1.tgz", "paris_2-v1.tgz", extract="jpg", members="*.jpg", flatten=True)
_PARIS_GT = Remote(_PA + "paris_120310.tgz", "paris_120310.tgz", extract="gt_files", members="*.txt", flatten=True)
# Holidays: the published addresses are on the INRIA FTP server (no resume over FTP:
# a partial file restarts).
_HOLIDAYS = "ftp://ftp.inrialpes.fr/pub/lear/douze/data/"

REMOTES: dict[str, tuple[Remote, ...]] = {
    "holidays": (Remote(_HOLIDAYS + "jpg1.tar.gz", "jpg1.tar.gz", extract="jpg", members="*.jpg", flatten=True),
                 Remote(_HOLIDAYS + "jpg2.tar.gz", "jpg2.tar.gz", extract="jpg", members="*.jpg", flatten=True)),
    "oxford5k": (_OXFORD_IMAGES, _OXFORD_GT),
    "paris6k": (_PARIS_1, _PARIS_2, _PARIS_GT),
    # the 100k Flickr distractors have no address we can vouch for: see download()
    "oxford105k": (_OXFORD_IMAGES, _OXFORD_GT),
    "paris106k": (_PARIS_1, _PARIS_2, _PARIS_GT),
    "roxford5k": (_OXFORD_IMAGES, Remote(_REVISITOP + "roxford5k/gnd_roxford5k.pkl", "gnd_roxford5k.pkl")),
    "rparis6k": (_PARIS_1, _PARIS_2, Remote(_REVISITOP + "rparis6k/gnd_rparis6k.pkl", "gnd_rparis6k.pkl")),
    # ukbench.zip holds full/*.jpg, thumbnails/*.jpg (same names) and html pages: keep full/ only
    "ukbench": (Remote("https://archive.org/download/ukbench/ukbench.zip", "ukbench.zip", extract="jpg",
                       members="*full/*.jpg", flatten=True),),
}

_CHUNK = 1 << 20


class ResumingDownloader:
    """A pooch downloader (``downloader(url, output_file, pooch)``) that resumes.

    pooch downloads into a fresh temporary file each time and has no resume; a
    2 GB archive cut off at 90 % would start over.  Here the bytes go to a
    stable ``part`` file, continued with an HTTP ``Range`` request (a server that
    ignores Range restarts it, one that answers 416 for a complete part keeps
    it); once complete and of the expected size (``size``, else the announced
    length) the part becomes pooch's ``output_file``, which pooch then checks
    against the known hash and moves into place.  A broken connection raises
    :class:`DownloadError` and keeps the part for the next call; a size
    mismatch deletes it and raises :class:`ChecksumError`.  ftp:// goes through
    pooch's own FTPDownloader, without resume.
    """

    def __init__(self, part, size=None, progress=True, timeout=60.0):
        self.part = Path(part)
        self.size = size
        self.progress = progress
        self.timeout = timeout

    def __call__(self, url, output_file, pooch_=None, check_only=False):
        if url.lower().startswith("ftp://"):
            import pooch

            pooch.FTPDownloader(progressbar=self.progress, timeout=self.timeout)(url, self.part, pooch_)
            total = None
        else:
            total = self._http(url)
        got = self.part.stat().st_size if self.part.exists() else 0
        if total is not None and got < total:        # the connection closed early: keep the part
            raise DownloadError(f"{url}: transfer ended at {got} of {total} bytes; run again to resume")
        expected = self.size if self.size is not None else total
        if expected is not None and got != expected:
            self.part.unlink(missing_ok=True)
            raise ChecksumError(f"{self.part.name[:-5]}: size {got} bytes, expected {expected}; "
                                f"the file was deleted")
        os.replace(self.part, output_file)

    def _http(self, url):
        """Fetch into the part; return the file's total size as the server gave it (or None)."""
        import requests
        import urllib3
        from tqdm.auto import tqdm

        offset = self.part.stat().st_size if self.part.exists() else 0
        if self.size is not None and offset > self.size:
            self.part.unlink()
            offset = 0
        # identity: the bytes on disk are the file's bytes, so that a Range continues them
        headers = {"User-Agent": "streamk-download/0.1", "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            resp = requests.get(url, headers=headers, stream=True, timeout=self.timeout)
        except requests.RequestException as exc:
            raise DownloadError(f"{url}: {exc}") from exc
        with resp:
            if resp.status_code == 416 and offset:
                # range not satisfiable: the part is complete if the server's size is its size, else start over
                m = re.match(r"bytes\s+\*/(\d+)", resp.headers.get("Content-Range", ""))
                if m and int(m.group(1)) == offset:
                    return offset
                self.part.unlink()
                return self._http(url)
            if resp.status_code >= 400:
                raise DownloadError(f"{url}: HTTP {resp.status_code} {resp.reason}")
            if offset and resp.status_code == 206:
                m = re.match(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", resp.headers.get("Content-Range", ""))
                if not m or int(m.group(1)) != offset:
                    raise DownloadError(f"{url}: server answered a range other than bytes={offset}-")
                total = None if m.group(3) == "*" else int(m.group(3))
                mode = "ab"
            else:                                    # 200: the whole file (Range ignored or not sent)
                offset, mode = 0, "wb"
                length = resp.headers.get("Content-Length", "")
                total = int(length) if length.isdigit() else None
            try:
                with open(self.part, mode) as out, tqdm(
                        total=self.size if self.size is not None else total, initial=offset, unit="B",
                        unit_scale=True, unit_divisor=1024, desc=self.part.name[:-5],
                        disable=not self.progress) as bar:
                    for block in resp.raw.stream(_CHUNK, decode_content=False):
                        out.write(block)
                        bar.update(len(block))
            except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
                raise DownloadError(f"{url}: transfer interrupted ({exc}); run again to resume from "
                                    f"{self.part.name}") from exc
        return total


class _QuietPooch:
    """pooch logs each download and, with no known hash, the SHA-256 it computed (useful to
    see on the command line); silenced when progress is off."""

    def __init__(self, quiet):
        self.quiet = quiet

    def __enter__(self):
        import pooch

        self.logger = pooch.get_logger()
        self.level = self.logger.level
        if self.quiet:
            self.logger.setLevel("WARNING")

    def __exit__(self, *exc):
        self.logger.setLevel(self.level)


def fetch(url: str, path, size: int | None = None, sha256: str | None = None, progress: bool = True,
          timeout: float = 60.0, processor=None) -> Path:
    """Download ``url`` to ``path`` with pooch: resume, size and SHA-256 checks.

    pooch (``pooch.retrieve``) checks the file against ``sha256`` when one is
    given (also an existing file, which is fetched again if it differs) and
    runs ``processor`` (a pooch processor, e.g. extraction); the transfer is
    :class:`ResumingDownloader`'s.  On a size or SHA-256 mismatch nothing is
    left and :class:`ChecksumError` is raised; a broken connection leaves
    ``<path>.part`` for the next call.  An existing ``path`` that passes the
    checks is kept as is.
    """
    import pooch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and size is not None and path.stat().st_size != size:
        path.unlink()
    downloader = ResumingDownloader(path.with_name(path.name + ".part"), size=size, progress=progress,
                                    timeout=timeout)
    known_hash = f"sha256:{sha256.lower()}" if sha256 else None
    try:
        with _QuietPooch(not progress):
            pooch.retrieve(url, known_hash, fname=path.name, path=path.parent, downloader=downloader,
                           processor=processor, progressbar=False)
    except ValueError as exc:   # pooch's hash mismatch; ours (extraction, ...) pass through
        if sha256 and not isinstance(exc, StreamkError) and "hash" in str(exc).lower():
            raise ChecksumError(f"{path.name}: SHA-256 differs from the published {sha256}; the file was "
                                f"deleted ({exc})") from exc
        raise
    return path


class _ExtractOnce:
    """A pooch processor: extract the archive safely (:func:`extract_archive`) and leave a stamp,
    so that a later call does not extract it again."""

    def __init__(self, target: Path, members: str, flatten: bool, stamp: Path, url: str):
        self.target, self.members, self.flatten, self.stamp, self.url = target, members, flatten, stamp, url

    def __call__(self, fname, action, pooch_):
        if action == "fetch" and self.stamp.exists():
            return fname
        extract_archive(fname, self.target, members=self.members, flatten=self.flatten)
        self.stamp.write_text(f"{self.url}\n")
        return fname


def _safe_member_name(name: str) -> PurePosixPath:
    n = name.replace("\\", "/")
    parts = [p for p in n.split("/") if p not in ("", ".")]
    if n.startswith("/") or re.match(r"^[A-Za-z]:", n) or ".." in parts or "\x00" in n:
        raise UnsafeArchiveError(f"archive member {name!r} would be written outside the destination")
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


def _archive_kind(path: Path) -> str | None:
    n = path.name.lower()
    if n.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")):
        return "tar"
    if n.endswith(".zip"):
        return "zip"
    return None


def extract_archive(path, dest_dir, members: str = "*", flatten: bool = False) -> list[Path]:
    """Extract a tar(.gz)/tgz/zip into dest_dir; return the files written.

    Every member is checked before anything is written: an absolute path, a
    ``..`` component, a link or a device refuses the whole archive with
    :class:`UnsafeArchiveError`.  Only regular files whose path matches
    ``members`` (fnmatch) are written; ``flatten`` drops their directories.
    """
    path, dest = Path(path), Path(dest_dir)
    kind = _archive_kind(path)
    if kind is None:
        raise ConfigError(f"{path.name}: not a .tar.gz / .tgz / .tar / .zip archive")
    plan: list[tuple[object, Path]] = []

    def add(member, name: str):
        rel = _safe_member_name(name)
        if not fnmatch.fnmatch(str(rel), members):
            return
        plan.append((member, PurePosixPath(rel.name) if flatten else rel))

    try:
        archive = tarfile.open(path, "r:*") if kind == "tar" else zipfile.ZipFile(path)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        raise DownloadError(f"{path.name}: corrupt archive ({exc})") from exc
    with archive:
        try:
            if kind == "tar":
                for m in archive.getmembers():
                    _safe_member_name(m.name)
                    if m.issym() or m.islnk():
                        raise UnsafeArchiveError(f"archive member {m.name!r} is a link; links are refused")
                    if not (m.isfile() or m.isdir()):
                        raise UnsafeArchiveError(f"archive member {m.name!r} is not a file or a directory")
                    if m.isfile():
                        add(m, m.name)
            else:
                for info in archive.infolist():
                    _safe_member_name(info.filename)
                    if (info.external_attr >> 16) & 0o170000 == 0o120000:
                        raise UnsafeArchiveError(f"archive member {info.filename!r} is a link; links are refused")
                    if not info.is_dir():
                        add(info, info.filename)
        except (tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
            raise DownloadError(f"{path.name}: corrupt archive ({exc})") from exc
        targets = [rel for _, rel in plan]
        if len(set(targets)) != len(targets):
            raise UnsafeArchiveError(f"{path.name}: several members would be written to the same file")
        dest_resolved = dest.resolve()
        jobs = []
        for member, rel in plan:
            target = dest / Path(*rel.parts)
            if not target.resolve().is_relative_to(dest_resolved):   # e.g. a symlinked directory in dest
                raise UnsafeArchiveError(f"{rel} would be written outside {dest}")
            jobs.append((member, target))
        written = []
        for member, target in jobs:             # nothing is written before every member passed
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".extracting")
            src = archive.extractfile(member) if kind == "tar" else archive.open(member)
            with src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out, _CHUNK)
            tmp.replace(target)
            written.append(target)
    return written


def _remotes_for(name: str, base_url: str | None, remotes) -> tuple[Remote, ...]:
    key, _ = _spec(name)
    if remotes is not None:
        table = tuple(remotes)
    elif key in REMOTES:
        table = REMOTES[key]
    else:
        raise UnknownDatasetError(f"{key} has no published download (paris6k-subset ships with the shared data)")
    base_url = base_url or os.environ.get("STREAMK_DATASETS_MIRROR")
    if base_url:
        table = tuple(replace(r, url=base_url.rstrip("/") + "/" + r.filename) for r in table)
    return table


def download(name: str, dest_dir, progress: bool = True, *, base_url: str | None = None, remotes=None,
             keep_archives: bool = True, timeout: float = 60.0) -> Path:
    """Fetch a dataset's official files into ``dest_dir`` and extract them; return dest_dir.

    The result is the layout :func:`load_dataset` reads with ``root=dest_dir``:
    images in ``dest_dir/jpg/``, official text ground truth in
    ``dest_dir/gt_files/``, revisited ``gnd_*.pkl`` in ``dest_dir``.

    base_url   a mirror: each file is fetched from ``<base_url>/<file name>``
               instead of its published address (also $STREAMK_DATASETS_MIRROR);
    remotes    replaces the table entry (a sequence of :class:`Remote`);
    keep_archives  keep the downloaded archives after extraction.

    Files go through :func:`fetch` (pooch; resume; the size and SHA-256 in the
    table where known), archives through :func:`extract_archive`.  Already
    fetched and extracted files are not fetched again.  For oxford105k /
    paris106k only the 5k/6k part is fetched; the 100k Flickr distractors must
    be added to ``dest_dir/jpg`` by hand (a warning says so).
    """
    key, _ = _spec(name)
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    table = _remotes_for(key, base_url, remotes)
    if key in ("oxford105k", "paris106k") and remotes is None:
        warnings.warn(f"{key}: only the {key[:-4]}k images and ground truth are fetched; put the 100k Flickr "
                      f"distractor images in {dest / 'jpg'} yourself", stacklevel=2)
    for r in table:
        stamp = dest / f".{r.filename}.extracted"
        if r.extract is not None and stamp.exists():
            continue
        processor = None if r.extract is None else _ExtractOnce(dest / r.extract if r.extract else dest,
                                                                r.members, r.flatten, stamp, r.url)
        archive = fetch(r.url, dest / r.filename, size=r.size, sha256=r.sha256, progress=progress,
                        timeout=timeout, processor=processor)
        if r.extract is not None and not keep_archives:
            archive.unlink()
    return dest

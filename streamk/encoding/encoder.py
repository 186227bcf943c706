"""The Encoder: descriptor set -> image vector, with one config.

    X (n x d SIFT) -> RootSIFT -> embedding phi -> weights alpha -> xi = Phi^T alpha
      -> power-law + L2 (or L2, RN rotation, keep D', power-law, L2)

Saved as one ``.npz`` holding the learned arrays and the config as JSON text;
loading never unpickles anything.
"""

import hashlib
import io
import json
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import aggregation as agg
from ..checks import as_descriptor_set
from .embeddings import EMBEDDINGS, make_embedding, rootsift
from ..errors import (ConfigError, DimensionError, EmptyDescriptorSetError, EncoderFileError, FewRNImagesWarning,
                      NotFittedError)
from ..files import atomic_write
from .fit_cost import FLOAT16_ARRAYS, FitCost, FitProgress, check_fits_in_memory, npz_bytes
from .postprocessing import DEFAULT_POWER, RotationNormalisation, l2_normalize, postprocess

FORMAT = "streamk-encoder"
FORMAT_VERSION = 1
#: how the learned arrays are stored (Encoder.save): float32 as computed, or the big ones
#: (fit_cost.FLOAT16_ARRAYS) as float16, read back as float32
STORAGE = ("float32", "float16")


_ZIP_MAGIC = b"PK\x03\x04"  # a .npz is a zip archive


def _what_file(data):
    """A few words on what bytes that are not a .npz look like (for the error message)."""
    if not data:
        return "an empty file"
    if data.startswith(b"\x93NUMPY"):
        return "a single .npy array, not a .npz archive"
    head = data[:1024]
    try:
        head.decode("utf-8")
        return "a text file"
    except UnicodeDecodeError:
        return "not a .npz archive"


@dataclass
class EncoderConfig:
    embedding: str = "temb"  # temb | fv | vlad | bow
    k: int = 64
    embedding_params: dict = field(default_factory=dict)  # e.g. {"hard": True} for fv
    rootsift: bool = True  # apply RootSIFT to the input descriptors
    aggregation: str = "gmp"  # sum | democratic | gmp
    gamma: float = agg.DEFAULT_GAMMA
    n_iter: int = agg.DEFAULT_N_ITER
    lam: float = agg.DEFAULT_LAMBDA
    tol: float = agg.DEFAULT_TOL
    max_iter: int = agg.DEFAULT_MAX_ITER
    power: float = DEFAULT_POWER
    rn: bool = False
    rn_components: int = 1000
    dim: int | None = None  # keep the first D' components after RN
    on_empty: str = "error"  # "error": raise EmptyDescriptorSetError; "zero": zero vector

    def validate(self):
        if self.embedding not in EMBEDDINGS:
            raise ConfigError(f"unknown embedding {self.embedding!r}; choose one of {sorted(EMBEDDINGS)}")
        agg.check_params(self.aggregation, self.gamma, self.n_iter, self.lam)
        if not self.power >= 0.0:
            raise ConfigError(f"power must be >= 0, got {self.power}")
        if self.dim is not None and not self.rn:
            raise ConfigError("dim (reduction to the first D' components) needs rn=True")
        if self.on_empty not in ("error", "zero"):
            raise ConfigError(f"on_empty must be 'error' or 'zero', got {self.on_empty!r}")


class Encoder:
    """Turns descriptor sets into image vectors; fit once on a learning set.

    >>> enc = Encoder(embedding="temb", k=16, aggregation="gmp").fit(learning_sets)
    >>> v = enc.encode(X)                         # (D,) float32, unit norm
    >>> v, alpha = enc.encode(X, return_weights=True)
    """

    def __init__(self, config: EncoderConfig | dict[str, Any] | None = None, **overrides: Any) -> None:
        config = EncoderConfig() if config is None else config
        if isinstance(config, dict):
            config = EncoderConfig(**config)
        unknown = set(overrides) - {f.name for f in fields(EncoderConfig)}
        if unknown:
            raise ConfigError(f"unknown encoder option(s): {sorted(unknown)}")
        self.config = EncoderConfig(**{**asdict(config), **overrides})
        self.config.validate()
        self.embedding = make_embedding(self.config.embedding, self.config.k, **self.config.embedding_params)
        self.rn = (RotationNormalisation(self.config.rn_components, self.config.dim)
                   if self.config.rn else None)
        self._fitted = False

    # ------------------------------------------------------------ fit
    def _preprocess(self, X, dim=None, what="descriptor set"):
        X = as_descriptor_set(X, dim=dim, what=what)
        return rootsift(X) if self.config.rootsift else X

    def fit(self, descriptor_sets: Iterable[ArrayLike], verbose: bool | None = None) -> "Encoder":
        """Learn the embedding (and RN) on learning-set images' descriptors.

        ``descriptor_sets``: a list of (n_i, d) arrays, one per learning image.
        verbose: True: the estimate (work, time here, size on disk), a progress bar and
        the time taken, on stderr; None (default): the same when the fit is estimated to
        take :data:`~streamk.encoding.fit_cost.LONG_FIT_SECONDS` or more (a T-emb with
        k = 64: minutes), also when stderr is not a terminal; False: nothing.
        :meth:`fit_cost` gives the estimate without fitting.
        """
        raw = list(descriptor_sets)
        if not raw:
            raise EmptyDescriptorSetError("the learning set has no images")
        sets = [self._preprocess(X, what=f"learning image {i}") for i, X in enumerate(raw)]
        if len({X.shape[1] for X in sets}) != 1:
            raise ConfigError("learning images have descriptors of different dimensions")
        X = np.concatenate(sets)
        cost = self.fit_cost(X.shape[0], n_images=len(sets), d=X.shape[1])
        check_fits_in_memory(cost)  # before the estimate is shown and anything is allocated for it
        if X.shape[0] < self.config.k:
            raise ConfigError(f"need at least k={self.config.k} learning descriptors, got {X.shape[0]}")
        progress = FitProgress(cost, verbose)
        self.embedding.fit(X, progress=progress)
        del X
        if self.rn is not None:
            self._fit_rn(sets, progress)
        self._fitted = True
        self.__dict__.pop("_fingerprint", None)
        progress.finish(self.stored_bytes(), self.stored_bytes("float16"))
        return self

    def fit_cost(self, n_descriptors: int, n_images: int = 1, d: int = 128) -> FitCost:
        """What :meth:`fit` on ``n_descriptors`` descriptors of dimension ``d`` from
        ``n_images`` images costs, from the shapes alone: flops per stage
        (``.seconds()``: estimated on this machine, ``.describe()``: one line) and
        the encoder's bytes on disk (float32 and float16 storage).
        See :mod:`streamk.encoding.fit_cost`."""
        cost = self.embedding.fit_cost(n_descriptors, d)
        D = self.embedding.output_dim(d)
        arrays = [(f"embedding.{name}", n, size) for name, n, size in self.embedding.stored_arrays(d)]
        rn_flops = 0.0
        if self.rn is not None:
            r = min(self.rn.n_components, max(int(n_images) - 1, 1), D)
            arrays += [("rn.mean_", D, 8), ("rn.reflectors_", D * r, 8), ("rn.tau_", r, 8), ("rn.signs_", r, 8)]
            rn_flops = self.embedding.embed_flops(n_descriptors, d)
        return FitCost(what=cost.what + (f", RN on {int(n_images):,} images" if self.rn is not None else ""),
                       kmeans_flops=cost.kmeans_flops, covariance_flops=cost.covariance_flops,
                       eigh_order=cost.eigh_order, rn_flops=rn_flops,
                       encoder_bytes=npz_bytes((n, size) for _, n, size in arrays),
                       encoder_bytes_float16=npz_bytes((n, 2 if name in FLOAT16_ARRAYS else size)
                                                       for name, n, size in arrays))

    _EMBEDDING_OPTIONS = ("embedding", "k", "embedding_params", "rootsift")
    # options that change the aggregated vectors RN is learned on
    _RN_INPUT_OPTIONS = ("aggregation", "gamma", "n_iter", "lam", "tol", "max_iter", "rn_components")

    def derive(self, learning_sets: Iterable[ArrayLike] | None = None,
               aggregated: Sequence[ArrayLike] | None = None, **overrides: Any) -> "Encoder":
        """A new encoder sharing this one's fitted embedding, with other
        aggregation or post-processing options (RN, if on, is refitted on
        ``learning_sets``: it is learned on aggregated vectors; or directly on
        ``aggregated``, those vectors computed elsewhere, see :meth:`fit_rn_vectors`)."""
        self._check_fitted()
        changed = [k for k in self._EMBEDDING_OPTIONS if k in overrides
                   and overrides[k] != getattr(self.config, k)]
        if changed:
            raise ConfigError(f"derive() cannot change the embedding ({changed}); fit a new Encoder")
        enc = Encoder(self.config, **overrides)
        enc.embedding = self.embedding
        if enc.rn is not None:
            if learning_sets is not None:
                enc.fit_rn(learning_sets)
            elif aggregated is not None:
                enc._fit_rn_vectors(aggregated, stacklevel=3)
            elif self.rn is not None and not (set(overrides) & set(self._RN_INPUT_OPTIONS)):
                # same aggregated vectors: reuse the learned rotation (D' may differ)
                enc.rn = RotationNormalisation.from_state(enc.rn.params(), self.rn.state()[1])
            else:
                raise ConfigError("derive() with RN needs learning_sets to refit RN")
        enc._fitted = True
        return enc

    def fit_rn(self, learning_sets: Iterable[ArrayLike], verbose: bool = False) -> "Encoder":
        """(Re)learn RN on the aggregated vectors of the learning images."""
        from tqdm.auto import tqdm  # (imported here: it loads asyncio, a cost to every command)

        if self.rn is None:
            raise ConfigError("this encoder has rn=False")
        sets = [self._preprocess(X, dim=self.embedding.d_, what=f"learning image {i}")
                for i, X in enumerate(learning_sets)]
        xis = [self._aggregate(X)[0] for X in tqdm(sets, desc="RN learning vectors", disable=not verbose)]
        return self._fit_rn_vectors(xis, stacklevel=4)

    def _fit_rn(self, sets, progress):
        """RN on the (preprocessed) learning sets, each image's embedding counted on ``progress``."""
        progress.stage("RN learning vectors")
        xis = []
        for X in sets:
            xis.append(self._aggregate(X)[0])
            progress.advance(self.embedding.embed_flops(X.shape[0], X.shape[1]))
        self._fit_rn_vectors(xis, stacklevel=4)

    def fit_rn_vectors(self, aggregated: Sequence[ArrayLike]) -> "Encoder":
        """(Re)learn RN on the learning images' aggregated vectors xi (before any
        post-processing: what :meth:`aggregate_methods` gives for this encoder's
        aggregation), e.g. computed on a cluster (:mod:`streamk.training`).

        Warns (:class:`~streamk.errors.FewRNImagesWarning`) when there are fewer vectors
        than the components RN rotates onto, plus one."""
        return self._fit_rn_vectors(aggregated, stacklevel=3)

    def _fit_rn_vectors(self, aggregated, stacklevel):
        if self.rn is None:
            raise ConfigError("this encoder has rn=False")
        A = np.stack([np.asarray(x) for x in aggregated]) if len(aggregated) else np.zeros((0, 0))
        if A.ndim != 2 or A.shape[0] == 0 or A.shape[1] != self.embedding.dim:
            raise DimensionError(f"aggregated vectors: expected shape (n >= 1, {self.embedding.dim}), "
                                 f"got {A.shape}")
        asked = min(self.rn.n_components, A.shape[1])
        if A.shape[0] - 1 < asked:
            warnings.warn(FewRNImagesWarning(
                f"RN learned on {A.shape[0]} image vectors: their PCA determines at most {A.shape[0] - 1} of the "
                f"{asked} components RN rotates onto (the rest is an arbitrary completion), and a rotation learned "
                f"on few images flattens the directions that tell them apart (paris6k-subset, RN learned on its "
                f"250 images: 14 to 22 mAP points lost, bench/README.md section 3). Learn RN on at least "
                f"{asked + 1} images of a distinct collection, or keep RN off (rn=False, --rn off)."),
                stacklevel=stacklevel)
        self.rn.fit(l2_normalize(A))
        self.__dict__.pop("_fingerprint", None)
        return self

    # ------------------------------------------------------------ encode
    @property
    def fitted(self) -> bool:
        return self._fitted

    def _check_fitted(self):
        if not self._fitted:
            raise NotFittedError("Encoder is not fitted: call fit() or Encoder.load()")

    def __repr__(self) -> str:
        c = self.config
        shape = f", dim={self.dim}, fingerprint={self.fingerprint[:12]!r}" if self._fitted else ", not fitted"
        return (f"Encoder(embedding={c.embedding!r}, k={c.k}, aggregation={c.aggregation!r}, power={c.power}, "
                f"rn={c.rn}{shape})")

    @property
    def input_dim(self) -> int:
        self._check_fitted()
        return self.embedding.d_

    @property
    def dim(self) -> int:
        """Dimension of the image vectors this encoder produces."""
        self._check_fitted()
        return self.rn.output_dim if self.rn is not None else self.embedding.dim

    def _aggregate(self, X):
        return self._aggregate_many(X, (self.config.aggregation,))[self.config.aggregation]

    def _aggregate_many(self, X, methods, gamma=None, lam=None):
        c = self.config
        return agg.aggregate_many(self.embedding.embed(X), methods, gamma=c.gamma if gamma is None else gamma,
                                  n_iter=c.n_iter, lam=c.lam if lam is None else lam, tol=c.tol,
                                  max_iter=c.max_iter)

    def aggregate_methods(self, X: ArrayLike, methods: Iterable[str] = agg.METHODS, gamma: float | None = None,
                          lam: float | None = None) -> dict[str, tuple[NDArray[Any], NDArray[Any]]]:
        """{method: (xi, alpha)} before post-processing, for several aggregation
        methods of one descriptor set, embedded once and sharing one Gram.
        gamma, lam: other values than the encoder's (None: its own)."""
        self._check_fitted()
        return self._aggregate_many(self._preprocess(X, dim=self.input_dim), tuple(methods), gamma, lam)

    @overload
    def encode(self, X: ArrayLike, return_weights: Literal[False] = ...) -> NDArray[np.float32]: ...
    @overload
    def encode(self, X: ArrayLike, return_weights: Literal[True]) -> tuple[NDArray[np.float32], NDArray[Any]]: ...

    def encode(self, X: ArrayLike, return_weights: bool = False
               ) -> NDArray[np.float32] | tuple[NDArray[np.float32], NDArray[Any]]:
        """Image vector (float32, unit L2 norm) of one descriptor set (n, d).

        With ``return_weights`` also returns alpha (n,), the per-descriptor
        weights in input order.
        """
        self._check_fitted()
        if not isinstance(X, np.ndarray):
            try:
                X = np.asarray(X)
            except ValueError as exc:  # ragged lists
                raise DimensionError(f"descriptor set: not an array ({exc})") from exc
        if X.shape in ((0,), (0, self.input_dim)) and self.config.on_empty == "zero":
            v = np.zeros(self.dim, dtype=np.float32)
            return (v, np.zeros(0)) if return_weights else v
        X = self._preprocess(X, dim=self.input_dim)
        xi, alpha = self._aggregate(X)
        v = postprocess(xi, self.config.power, self.rn).astype(np.float32)
        return (v, alpha) if return_weights else v

    def encode_many(self, descriptor_sets: Iterable[ArrayLike], verbose: bool = False) -> NDArray[np.float32]:
        """(N, dim) float32 matrix of image vectors."""
        from tqdm.auto import tqdm  # (imported here: it loads asyncio, a cost to every command)

        sets = list(descriptor_sets)
        out = np.empty((len(sets), self.dim), dtype=np.float32)
        for i, X in enumerate(tqdm(sets, desc="encoding", disable=not verbose)):
            out[i] = self.encode(X)
        return out

    # ------------------------------------------------------------ save / load
    def _state(self):
        self._check_fitted()
        emb_params, emb_arrays = self.embedding.state()
        meta = {"format": FORMAT, "version": FORMAT_VERSION, "config": asdict(self.config),
                "embedding_params": emb_params}
        arrays = {f"embedding.{k}": v for k, v in emb_arrays.items()}
        if self.rn is not None:
            _, rn_arrays = self.rn.state()
            arrays.update({f"rn.{k}": v for k, v in rn_arrays.items()})
        return meta, arrays

    @staticmethod
    def _stored(arrays, storage):
        if storage not in STORAGE:
            raise ConfigError(f"storage must be one of {STORAGE}, got {storage!r}")
        if storage == "float32":
            return arrays
        return {name: a.astype(np.float16) if name in FLOAT16_ARRAYS else a for name, a in arrays.items()}

    def stored_bytes(self, storage: str = "float32") -> int:
        """Bytes of :meth:`save`'s file with this ``storage``, from the arrays (within a few kB)."""
        self._stored({}, storage)  # checks the name
        _, arrays = self._state()
        return npz_bytes((a.size, 2 if storage == "float16" and name in FLOAT16_ARRAYS else a.itemsize)
                         for name, a in arrays.items())

    def to_bytes(self, storage: str = "float32") -> bytes:
        """The encoder as the bytes of an .npz file (config JSON + arrays); see :meth:`save`."""
        meta, arrays = self._state()
        arrays = self._stored(arrays, storage)
        if storage != "float32":
            meta = {**meta, "storage": storage}
        buf = io.BytesIO()
        np.savez(buf, __meta__=np.array(json.dumps(meta, sort_keys=True)), **arrays)
        return buf.getvalue()

    def save(self, path: str | os.PathLike[str], storage: str = "float32") -> None:
        """Write the encoder as an .npz. storage="float16" stores the big learned
        matrices (T-emb's k d x D whitening: 265 MB at k = 64) as float16, half the
        size; they are read back as float32, so the loaded encoder's vectors differ
        from this one's by float16 rounding, and rankings change a little
        (bench/training.py, paris6k-subset, T-emb k = 16 GMP: mAP 74.19 -> 74.07, top-10
        overlap 98.7 %, 141 of 262 searches with a different top 10 or order). Default
        float32: the encoder exactly as fitted. Written whole or not at all (an existing
        file there stays as it was on any failure: :func:`streamk.files.atomic_write`)."""
        data = self.to_bytes(storage)
        atomic_write(path, lambda fh: fh.write(data), "the encoder")

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> "Encoder":
        data = bytes(data)
        if not data.startswith(_ZIP_MAGIC):  # what np.load would take for a pickle, or a .npy
            raise EncoderFileError(f"not a streamk encoder file ({_what_file(data)}): expected the .npz that "
                                   f"Encoder.save or `streamk index create --save-encoder` writes")
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                meta = json.loads(str(npz["__meta__"]))
                arrays = {name: npz[name] for name in npz.files if name != "__meta__"}
            # float16 storage (Encoder.save): computed in float32
            arrays = {name: a.astype(np.float32) if a.dtype == np.float16 else a for name, a in arrays.items()}
        except EncoderFileError:
            raise
        except Exception as exc:  # noqa: BLE001 -- whatever numpy or zipfile say of a damaged archive
            reason = "it holds pickled objects, which streamk never loads" if "pickle" in str(exc) else \
                f"{type(exc).__name__}: {exc}"
            raise EncoderFileError(f"not a streamk encoder file ({reason})") from exc
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise EncoderFileError("not a streamk encoder file (format tag missing)")
        if meta.get("version") != FORMAT_VERSION:
            raise EncoderFileError(f"encoder format version {meta.get('version')} is not supported "
                                   f"(this streamk reads version {FORMAT_VERSION})")
        try:
            enc = cls(EncoderConfig(**meta["config"]))
            emb_arrays = {k[len("embedding."):]: v for k, v in arrays.items() if k.startswith("embedding.")}
            enc.embedding = type(enc.embedding).from_state(meta["embedding_params"], emb_arrays)
            if enc.rn is not None:
                rn_arrays = {k[len("rn."):]: v for k, v in arrays.items() if k.startswith("rn.")}
                enc.rn = RotationNormalisation.from_state(enc.rn.params(), rn_arrays)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise EncoderFileError(f"corrupt streamk encoder file: {exc!r}") from exc
        enc._fitted = True
        return enc

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Encoder":
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise EncoderFileError(f"cannot read encoder file {path}: {exc}") from exc
        try:
            return cls.from_bytes(data)
        except EncoderFileError as exc:
            raise EncoderFileError(f"{path}: {exc}") from exc

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the config and learned arrays: equal iff encoders encode alike."""
        if "_fingerprint" not in self.__dict__:
            meta, arrays = self._state()
            h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
            for name in sorted(arrays):
                a = np.ascontiguousarray(arrays[name])
                h.update(name.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
            self.__dict__["_fingerprint"] = h.hexdigest()
        return self.__dict__["_fingerprint"]

"""What fitting an encoder costs, stated before it is paid: floating-point operations
counted from the shapes, seconds from this machine's measured rates, bytes on disk.

    cost = Encoder(embedding="temb", k=64, rn=True).fit_cost(n_descriptors=40_667, n_images=20)
    print(cost.describe())   # ~5.5 TFLOP of GEMM, eigh of 8,192 x 8,192: ~7 min here; 265 MB on disk

The counts (what :class:`FitCost` holds):

- **k-means** (every embedding but the FV): ``2 n k d`` per Lloyd iteration, on the
  ``n = min(N, max_fit_descriptors)`` descriptors it subsamples, counted for
  :data:`KMEANS_ITERATIONS` iterations (scikit-learn stops at convergence, often sooner).
- **T-emb whitening**: the covariance ``R^T R`` of the ``n_w = min(n, max_whiten_descriptors)``
  residual rows of ``k d`` entries, ``2 n_w (k d)^2`` flops of float64 GEMM, then the
  symmetric eigendecomposition of order ``k d``: LAPACK's ``syevd`` with eigenvectors,
  counted as :data:`EIGH_FLOPS_PER_N3` ``(k d)^3``.
- **RN** (when on): embedding every learning image, ``2 n_i (k d) D`` flops of float32 GEMM
  per image of ``n_i`` descriptors (``D = (k - 1) d``), summed over the images; the PCA of
  the image vectors is small beside it.

Seconds: each count divided by this machine's rate for that kind of work, measured
on small problems of the same kind (:func:`machine_rates`: a float64 and a float32
GEMM, an ``eigh``; about 0.1 s), again when the last measure is over
:data:`RATES_MAX_AGE_SECONDS` old: a long-lived process (a notebook, a server) does not
keep a rate measured while something else loaded the cores. The eigendecomposition's rate at order
``k d`` is taken as its rate at the measured order scaled by ``n^3``: at orders in the
thousands LAPACK runs at least that fast, so the estimate errs long.

Bytes: the learned arrays as :meth:`Encoder.save` writes them (uncompressed .npz);
``storage="float16"`` halves the big ones (:data:`FLOAT16_ARRAYS`).
"""

import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..units import byte_size

KMEANS_ITERATIONS = 30
EIGH_FLOPS_PER_N3 = 9.0  # syevd with eigenvectors: tridiagonal reduction, divide and conquer, back-transform
#: a fit estimated to take at least this many seconds shows its estimate and progress
#: (Encoder.fit with verbose=None), whether or not stderr is a terminal
LONG_FIT_SECONDS = 10.0
#: the learned arrays that ``storage="float16"`` stores as float16 (the k d x D whitening)
FLOAT16_ARRAYS = ("embedding.projection_",)
#: a measure of the machine's rates older than this is taken again (the load changes)
RATES_MAX_AGE_SECONDS = 60.0
#: float64 arrays of (k d)^2 alive at the whitening's peak: the covariance, LAPACK's copy and
#: work, the eigenvectors, the projection made of them (measured: a k = 32 fit's resident
#: memory grew by 6.5 covariances); :attr:`FitCost.peak_bytes` counts this many
WHITENING_PEAK_ARRAYS = 6
_NEVER_LONG_FLOPS = 1e9  # below this a fit is short on any machine: the rates are not measured
_NPZ_MEMBER_OVERHEAD = 256  # zip headers and the .npy header of one array, about


@dataclass(frozen=True)
class MachineRates:
    gemm64: float  # float64 GEMM, flop/s
    gemm32: float  # float32 GEMM, flop/s
    eigh: float  # symmetric eigendecomposition with eigenvectors, in EIGH_FLOPS_PER_N3 n^3 per second
    eigh_order: int  # the order eigh was measured at


def _best_seconds(fn, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return max(best, 1e-9)


_rates_lock = threading.Lock()
_last_rates = None  # ((gemm_rows, gemm_cols, eigh_order), time.monotonic() when measured, MachineRates)


def machine_rates(gemm_rows=2048, gemm_cols=512, eigh_order=512) -> MachineRates:
    """This machine's rates now (best of 3): ``R^T R`` for R of ``gemm_rows x gemm_cols``
    in float64 and float32, and ``numpy.linalg.eigh`` of order ``eigh_order``; the last
    measure is reused while under :data:`RATES_MAX_AGE_SECONDS` old."""
    global _last_rates
    key = (int(gemm_rows), int(gemm_cols), int(eigh_order))
    with _rates_lock:
        last = _last_rates
        if last is not None and last[0] == key and time.monotonic() - last[1] < RATES_MAX_AGE_SECONDS:
            return last[2]
        rates = _measure_rates(*key)
        _last_rates = (key, time.monotonic(), rates)
        return rates


def _measure_rates(gemm_rows, gemm_cols, eigh_order):
    rng = np.random.default_rng(0)
    R64 = rng.standard_normal((gemm_rows, gemm_cols))
    R32 = R64.astype(np.float32)
    gemm_flops = 2.0 * gemm_rows * gemm_cols ** 2
    A = rng.standard_normal((eigh_order, eigh_order))
    S = A @ A.T
    return MachineRates(gemm64=gemm_flops / _best_seconds(lambda: R64.T @ R64),
                        gemm32=gemm_flops / _best_seconds(lambda: R32.T @ R32),
                        eigh=EIGH_FLOPS_PER_N3 * eigh_order ** 3 / _best_seconds(lambda: np.linalg.eigh(S), 2),
                        eigh_order=eigh_order)


def format_seconds(seconds):
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class FitCost:
    """A fit's work counted from its shapes (see the module doc) and its encoder's size."""

    what: str  # e.g. "T-emb k=64 on 40,667 descriptors (d=128)"
    kmeans_flops: float = 0.0  # float64-ish, counted as GEMM work
    covariance_flops: float = 0.0  # float64 GEMM
    eigh_order: int = 0  # order of the symmetric eigendecomposition (0: none)
    rn_flops: float = 0.0  # float32 GEMM: embedding the RN learning images
    encoder_bytes: int = 0  # on disk, float32 storage
    encoder_bytes_float16: int = 0  # on disk, storage="float16"

    @property
    def eigh_flops(self) -> float:
        return EIGH_FLOPS_PER_N3 * float(self.eigh_order) ** 3

    @property
    def flops(self) -> float:
        return self.kmeans_flops + self.covariance_flops + self.eigh_flops + self.rn_flops

    @property
    def model(self) -> str:
        """What is fitted, without the data it is fitted on ("T-emb k=64")."""
        return self.what.split(" on ", 1)[0]

    @property
    def peak_bytes(self) -> int:
        """The memory the whitening holds at its peak (0 without one): the T-emb's (k d)^2
        arrays, which grow with k^2 while the rest of a fit stays small beside them."""
        return WHITENING_PEAK_ARRAYS * 8 * int(self.eigh_order) ** 2

    def stage_seconds(self, rates: MachineRates | None = None) -> dict[str, float]:
        """{stage: estimated seconds} on this machine (``rates``: measured here when None)."""
        r = machine_rates() if rates is None else rates
        return {"k-means": self.kmeans_flops / r.gemm64, "covariance": self.covariance_flops / r.gemm64,
                "eigh": self.eigh_flops / r.eigh, "RN vectors": self.rn_flops / r.gemm32}

    def seconds(self, rates: MachineRates | None = None) -> float:
        return float(sum(self.stage_seconds(rates).values()))

    def describe(self, rates: MachineRates | None = None) -> str:
        """One line: the work, the estimated time here, the size on disk."""
        r = machine_rates() if rates is None else rates
        parts = [f"{self.flops / 1e9:,.0f} GFLOP"]
        if self.eigh_order:
            parts.append(f"covariance and eigendecomposition of {self.eigh_order:,} x {self.eigh_order:,} "
                         f"(about {byte_size(self.peak_bytes)} of memory)")
        if self.rn_flops:
            parts.append("RN learning vectors")
        f16 = "" if self.encoder_bytes_float16 == self.encoder_bytes else \
            f" ({byte_size(self.encoder_bytes_float16)} with save(..., storage='float16'))"
        return (f"fitting {self.what}: {', '.join(parts)}; estimated {format_seconds(self.seconds(r))} on this "
                f"machine (GEMM {r.gemm64 / 1e9:.0f} GFLOP/s float64, measured); the encoder takes "
                f"{byte_size(self.encoder_bytes)} on disk{f16}")


def memory_limit_bytes():
    """The memory this process may use at most: the machine's physical memory, or its
    control group's limit where that is lower (a container); None when neither can be read."""
    import os

    limits = []
    try:
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # "max", or v1's "no limit" (a huge number)
            limits.append(int(text))
    return min(limits) if limits else None


def whitening_k_limit(d=128, limit=None):
    """The largest T-emb k whose whitening (:attr:`FitCost.peak_bytes`) fits in ``limit``
    bytes (None: this machine's, :func:`memory_limit_bytes`); None when no limit is known."""
    limit = memory_limit_bytes() if limit is None else limit
    return None if limit is None else int((limit / (WHITENING_PEAK_ARRAYS * 8)) ** 0.5) // int(d)


def check_fits_in_memory(cost, limit=None):
    """ConfigError when a fit's whitening (:attr:`FitCost.peak_bytes`) needs more memory than
    this machine (or container) has: a T-emb with k = 256 asks for some 48 GB and was killed by
    the system, or swapped, hours into its covariance. ``limit``: bytes (None: measured)."""
    limit = memory_limit_bytes() if limit is None else limit
    if limit is None or cost.peak_bytes <= limit:
        return
    k_fits = whitening_k_limit(128, limit)
    raise ConfigError(f"fitting {cost.model} needs about {byte_size(cost.peak_bytes)} of memory (a "
                      f"{cost.eigh_order:,} x {cost.eigh_order:,} whitening in float64), more than the "
                      f"{byte_size(limit)} here: use a smaller vocabulary (with 128-dimensional descriptors "
                      f"k <= {k_fits} fits; the paper's is 64)")


def npz_bytes(shapes_itemsizes):
    """Bytes of an uncompressed .npz of arrays given as (n_elements, itemsize) pairs."""
    return int(sum(n * size + _NPZ_MEMBER_OVERHEAD for n, size in shapes_itemsizes)) + 1024  # + the JSON meta


class FitProgress:
    """One tqdm bar over a fit's counted work (GFLOP), on stderr, shown when asked or
    when the fit is long, also when stderr is not a terminal (then refreshed at most
    every 30 s, a line a log can hold); the estimate is written before, the time and
    the encoder's size after."""

    def __init__(self, cost: FitCost, verbose: bool | None):
        self.cost = cost
        self.t0 = time.monotonic()
        if verbose is False or (verbose is None and cost.flops < _NEVER_LONG_FLOPS):
            self.show, self.rates = False, None
        else:
            self.rates = machine_rates()
            self.show = bool(verbose) or cost.seconds(self.rates) >= LONG_FIT_SECONDS
        self.bar = None
        if self.show:
            from tqdm.auto import tqdm

            self.write(f"streamk: {cost.describe(self.rates)}")
            tty = sys.stderr.isatty()
            self.bar = tqdm(total=cost.flops / 1e9, unit="GFLOP", desc="fit", file=sys.stderr,
                            mininterval=0.5 if tty else 30.0, dynamic_ncols=tty, ncols=None if tty else 100,
                            bar_format="{l_bar}{bar}| {n:,.0f}/{total:,.0f} GFLOP [{elapsed}<{remaining}]")

    @staticmethod
    def write(line):
        from tqdm.auto import tqdm

        tqdm.write(line, file=sys.stderr)

    def stage(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_description(name)

    def advance(self, flops: float) -> None:
        if self.bar is not None:
            self.bar.update(max(0.0, min(flops / 1e9, self.bar.total - self.bar.n)))  # counts are estimates

    def finish(self, encoder_bytes: int | None = None, encoder_bytes_float16: int | None = None) -> None:
        if self.bar is None:
            return
        self.bar.close()
        self.bar = None
        size = "" if encoder_bytes is None else f"; the encoder takes {byte_size(encoder_bytes)} on disk" + (
            "" if encoder_bytes_float16 in (None, encoder_bytes)
            else f" ({byte_size(encoder_bytes_float16)} with storage='float16')")
        self.write(f"streamk: fitted {self.cost.what} in {format_seconds(time.monotonic() - self.t0)} "
                   f"(estimated {format_seconds(self.cost.seconds(self.rates))}){size}")


__all__ = ["EIGH_FLOPS_PER_N3", "FLOAT16_ARRAYS", "KMEANS_ITERATIONS", "LONG_FIT_SECONDS", "FitCost", "FitProgress",
           "MachineRates", "RATES_MAX_AGE_SECONDS", "WHITENING_PEAK_ARRAYS", "check_fits_in_memory", "format_seconds",
           "machine_rates", "memory_limit_bytes", "npz_bytes", "whitening_k_limit"]

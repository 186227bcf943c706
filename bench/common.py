"""What every benchmark prints the same way: progress on stderr, the load
average, markdown tables, and the machine it ran on."""

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def load_str():
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def table(headers, rows, title=None):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    lines = []
    if title:
        lines += ["", title, ""]
    lines.append("| " + " | ".join(str(h).rjust(w) for h, w in zip(headers, widths)) + " |")
    lines.append("|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    for r in rows:
        lines.append("| " + " | ".join(str(c).rjust(w) for c, w in zip(r, widths)) + " |")
    print("\n".join(lines), flush=True)


def cpu_model():
    """The CPU model as ``lscpu`` names it (what the benchmark tables print), else /proc/cpuinfo's."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def paris_photos():
    """The paris6k-subset photos of the shared data (STREAMK_SHARED_DATA, or ../shared/data)."""
    root = Path(os.environ.get("STREAMK_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    d = root / "paris6k-subset" / "jpg"
    if not d.is_dir():
        sys.exit(f"no photos at {d} (set STREAMK_SHARED_DATA)")
    return sorted(d.glob("*.jpg"))


def paris_features(ground_truth=False):
    """(paris6k-subset dataset, database Features, official query Features (cropped)) from the
    feature cache, and with ``ground_truth`` the full official Paris6k ground truth after them."""
    from streamk.config import default_cache_dir
    from streamk.datasets import load_dataset
    from streamk.datasets.benchmarks import default_data_dir, load_mat_ground_truth
    from streamk.evaluation.experiment import dataset_features

    ds = load_dataset("paris6k-subset")
    db, queries = dataset_features(ds, None, default_cache_dir(), 2, False)
    if not ground_truth:
        return ds, db, queries
    return ds, db, queries, load_mat_ground_truth(default_data_dir() / "gt" / "gnd_paris6k.mat", name="paris6k")


def machine_info():
    import numba
    import scipy

    blas = {}
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas = {"name": cfg.get("name"), "version": cfg.get("version"),
                "config": cfg.get("openblas configuration", "")}
    except Exception:  # older numpy: no dict mode
        pass
    pools = []
    try:
        from threadpoolctl import threadpool_info
        pools = [f"{p['internal_api']}:{p['num_threads']}" for p in threadpool_info()]
    except Exception:
        pass
    return {
        "cpu": cpu_model(), "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
        "numba": numba.__version__, "numba_threads": numba.config.NUMBA_NUM_THREADS,
        "blas": blas, "thread_pools": pools,
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                               "NUMBA_NUM_THREADS", "OMP_WAIT_POLICY")},
    }

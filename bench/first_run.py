#!/usr/bin/env python
"""A first run after an install: the README's first command (``streamk demo``), then a first
verified ``streamk search``, each from an empty Numba cache, with the second stage's kernels
compiled beside the demo (as shipped) and without (the reference, in the same run).

    python bench/first_run.py [--images 40] [--repeats 1]

- "as shipped": ``streamk demo`` (its child compiles the second stage's kernels beside it,
  streamk/pipeline/warm_up.py), then ``streamk search IDX q.jpg``, the two sharing one empty
  Numba cache (``NUMBA_CACHE_DIR``, a new folder), as a fresh install does.
- "reference": the demo's own work alone (``streamk.demo.run_demo`` called in a new process,
  the same arguments, no warm-up), then the same search, sharing another empty cache.
- The index searched: the first ``--images`` photos of paris6k-subset (bench/serve.py's index,
  built once); the query: the next photo. The demo: its default run (scikit-image's photos),
  its output in a temporary folder, features from the feature cache (as a second demo finds
  them: this measures Numba, not the detector).

Wall seconds of each step and of the two together, and their ratios to the reference; the
kinds alternated when ``--repeats`` > 1. Nothing here asserts a time.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, paris_photos, table  # noqa: E402
from serve import CACHE, build_index  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 900  # seconds: a step that takes longer is a failure of the run, not a figure
PLAIN_DEMO = ("import sys; from streamk.demo import run_demo; "
              "run_demo(out_dir=sys.argv[1], progress=False)")


def env_with(cache_dir):
    """This checkout first on the child's path; Numba's cache in ``cache_dir`` (empty)."""
    path = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return dict(os.environ, PYTHONPATH=path, NUMBA_CACHE_DIR=str(cache_dir))


def timed(args, env):
    """Wall seconds of ``args`` (a failure ends the run with its output)."""
    t0 = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - t0, done.stderr


def one_run(kind, index, query, work):
    """(demo s, search s, the search's stderr) of one kind, from an empty Numba cache."""
    cache = Path(tempfile.mkdtemp(prefix=f"numba-{kind}-", dir=work))
    out = Path(tempfile.mkdtemp(prefix=f"demo-{kind}-", dir=work)) / "out"
    env = env_with(cache)
    if kind == "as shipped":
        demo_s, _ = timed([sys.executable, "-m", "streamk.cli", "demo", "--out", str(out), "--no-progress"], env)
    else:
        demo_s, _ = timed([sys.executable, "-c", PLAIN_DEMO, str(out)], env)
    search_s, said = timed([sys.executable, "-m", "streamk.cli", "search", str(index), str(query), "-k", "5"], env)
    return demo_s, search_s, said


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    photos = paris_photos()
    index = build_index(photos[:args.images], CACHE / f"serve-index-{args.images}")
    query = photos[args.images]
    kinds = ("reference", "as shipped")
    got = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="first-run-") as work:
        # the feature cache filled and the bytecode written, so that only Numba's cache is empty
        timed([sys.executable, "-m", "streamk.cli", "demo", "--out", str(Path(work) / "untimed"), "--no-progress"],
              env_with(Path(work) / "numba-untimed"))
        for r in range(args.repeats):
            for kind in (kinds if r % 2 == 0 else kinds[::-1]):
                demo_s, search_s, said = one_run(kind, index, query, Path(work))
                compiled = "compiling" in said
                got[kind].append((demo_s, search_s, compiled))
                log(f"{kind}: demo {demo_s:.1f} s, first search {search_s:.1f} s (compiled: {compiled})")
    ref = got["reference"]
    rows = []
    for kind in kinds:
        for (demo_s, search_s, compiled), (rd, rs, _) in zip(got[kind], ref):
            rows.append([kind, f"{demo_s:.1f}", f"{search_s:.1f}", "yes" if compiled else "no",
                         f"{demo_s + search_s:.1f}", f"{demo_s / rd:.2f}x", f"{search_s / rs:.2f}x",
                         f"{(demo_s + search_s) / (rd + rs):.2f}x"])
    table(["kind", "demo s", "first search s", "search compiled", "both s", "demo / ref", "search / ref",
           "both / ref"], rows,
          title=f"A first run from an empty Numba cache ({cpu_model()}, {os.cpu_count()} cores, load {load_str()})")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""``streamk search`` as a person types it, against the same search in a warm process.

    python bench/cli.py [--images 40] [--queries 20] [--repeats 3]

Index: the first ``--images`` photos of paris6k-subset (Hessian-affine, T-emb k = 16 GMP
and the default visual words learned on them), built once in ~/.cache/streamk/bench/ (the
index bench/serve.py uses). Queries: the next ``--queries`` photos (not indexed). Every
search is the default one (first stage, then the second stage: 100 verified, query
expansion).

- "as typed": ``streamk search IDX q.jpg`` in a new process (the ``streamk`` console
  script, else ``python -m streamk.cli``), wall time to its exit; "warm": the same query
  with ``StreamingIndex.search`` in this process, the index open and its kernels loaded.
  Start-up overhead = as typed - warm (target <= 1.0 s).
- "batch": ``streamk search IDX q1 ... qN`` (one process) against N warm searches of the
  same photos (target <= 1.2x).
- "--server": ``streamk search --server URL q.jpg`` in a new process, sent to a running
  ``streamk serve`` of the same index (1 encoding worker, started once, warm), against the
  same request sent from this (warm) process; CPU counts the client alone (``--no-server``:
  left out).
- floors: ``python -c pass`` and ``streamk --version`` (Python and the parser alone).

Each measure is the median of ``--repeats`` runs, the kinds alternated run by run so that
the other work on the machine slows them alike, after one untimed run of each command (the
page cache, Numba's cache and the bytecode as a person's second search finds them). One
thread per library in both (as one encoding worker has), so that the comparison is the same
work. The new processes write and read their bytecode as Python does by default, under
CACHE/pycache (never in the checkout), even where the environment sets
PYTHONDONTWRITEBYTECODE (as this machine's does: every command would then compile streamk's
sources again, ~0.1 s of CPU a person does not pay); ``--no-pyc`` measures that way instead.
Nothing here asserts a time.
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"  # the child processes inherit it: both sides do the same work on one thread

import argparse  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, table  # noqa: E402
from serve import CACHE, Server, build_index  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 600  # seconds: a child that takes longer is a failure of the run, not a figure


def child_env():
    """This checkout first on the child's path (so the child runs the streamk measured here)."""
    path = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return dict(os.environ, PYTHONPATH=path)


def bytecode(cached):
    """The new processes write and read their bytecode under CACHE/pycache (``cached``), or
    none at all (as PYTHONDONTWRITEBYTECODE makes them)."""
    if cached:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(CACHE / "pycache")
    else:
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"


def command():
    """How a person runs streamk: the console script next to this Python, else ``-m``."""
    script = shutil.which("streamk", path=str(Path(sys.executable).parent)) or shutil.which("streamk")
    return [script] if script else [sys.executable, "-m", "streamk.cli"]


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(argv):
    """(wall, CPU) seconds of ``argv`` to its exit (its output discarded; a failure raises)."""
    t0, c0 = time.perf_counter(), children_cpu()
    res = subprocess.run(argv, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         timeout=TIMEOUT)
    took = time.perf_counter() - t0, children_cpu() - c0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, argv))} failed ({res.returncode}):\n{res.stderr}")
    return took


def timed_warm(idx, queries, params):
    """(wall, CPU) seconds of the searches of ``queries`` in this process."""
    t0, c0 = time.perf_counter(), time.process_time()
    for q in queries:
        idx.search(q, params=params)
    return time.perf_counter() - t0, time.process_time() - c0


def timed_request(remote, query):
    """(wall, CPU) seconds of one search sent to the server from this process."""
    t0, c0 = time.perf_counter(), time.process_time()
    remote.search_image(query, {"k": 10})
    return time.perf_counter() - t0, time.process_time() - c0


def measure(index, queries, repeats, server=None):
    """{measure name: [(wall, CPU) seconds per run]}, the kinds alternated run by run."""
    from streamk.cli.remote import RemoteSearch
    from streamk.index import SearchParams, StreamingIndex

    params = SearchParams()
    runs = {name: [] for name in ("python", "version", "typed", "warm", "typed batch", "warm batch")}
    streamk = command()
    remote = None if server is None else RemoteSearch(server.url, server.token, timeout=TIMEOUT)
    with StreamingIndex.open(index, readonly=True) as idx:
        timed_warm(idx, queries[:2], params)  # the index read, the kernels loaded: warm
        if remote is not None:
            timed_request(remote, queries[1])  # the server's workers warm
        for argv in ([*streamk, "--version"], [*streamk, "search", index, queries[0]]):
            timed_run(argv)  # untimed: the bytecode written, the files read once
        for r in range(repeats):
            if remote is not None:
                os.environ["STREAMK_TOKEN"] = server.token
                runs.setdefault("typed server", []).append(
                    timed_run([*streamk, "search", "--server", server.url, queries[0]]))
                del os.environ["STREAMK_TOKEN"]
                runs.setdefault("warm server", []).append(timed_request(remote, queries[0]))
            runs["python"].append(timed_run([sys.executable, "-c", "pass"]))
            runs["version"].append(timed_run([*streamk, "--version"]))
            runs["typed"].append(timed_run([*streamk, "search", index, queries[0]]))
            runs["warm"].append(timed_warm(idx, queries[:1], params))
            runs["typed batch"].append(timed_run([*streamk, "search", index, *queries]))
            runs["warm batch"].append(timed_warm(idx, queries, params))
            log(f"run {r + 1}/{repeats} done; load {load_str()}")
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=40)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-server", action="store_true", help="leave out the search through a running server")
    ap.add_argument("--no-pyc", action="store_true",
                    help="the new processes read and write no bytecode (PYTHONDONTWRITEBYTECODE=1)")
    args = ap.parse_args()
    bytecode(cached=not args.no_pyc)

    from streamk.datasets import load_dataset

    ds = load_dataset("paris6k-subset")
    photos = [str(ds.image_path(i)) for i in range(len(ds.image_ids))]
    index = str(build_index(photos[:args.images], CACHE / f"serve-index-{args.images}"))
    queries = photos[args.images:args.images + args.queries]
    load_before = load_str()
    log(f"index {index}: {args.images} photos; {len(queries)} query photos; load {load_before}")
    server = None if args.no_server else Server(index, 1)
    try:
        runs = measure(index, queries, args.repeats, server)
    finally:
        if server is not None:
            server.stop()
    wall = {name: statistics.median(w for w, _ in times) for name, times in runs.items()}
    cpu = {name: statistics.median(c for _, c in times) for name, times in runs.items()}
    n = len(queries)
    rows = [["python -c pass", "", f"{wall['python']:.2f}", "", f"{cpu['python']:.2f}", "", ""],
            ["streamk --version", "", f"{wall['version']:.2f}", "", f"{cpu['version']:.2f}", "", ""]]
    pairs = [("streamk search IDX q.jpg", "typed", "warm"),
             (f"streamk search IDX q1 ... q{n}", "typed batch", "warm batch")]
    if "typed server" in runs:
        pairs.append(("streamk search --server URL q.jpg", "typed server", "warm server"))
    for name, typed, warm in pairs:
        if warm != "warm batch":
            wall_cmp, cpu_cmp = (f"+{wall[typed] - wall[warm]:.2f} s", f"+{cpu[typed] - cpu[warm]:.2f} s")
        else:
            wall_cmp, cpu_cmp = f"{wall[typed] / wall[warm]:.2f}x", f"{cpu[typed] / cpu[warm]:.2f}x"
        rows.append([name, f"{wall[warm]:.2f}", f"{wall[typed]:.2f}", f"{cpu[warm]:.2f}", f"{cpu[typed]:.2f}",
                     wall_cmp, cpu_cmp])
    print(f"CPU: {cpu_model()}; {os.cpu_count()} logical cores; load average {load_before} before, "
          f"{load_str()} after; one thread per library; median of {args.repeats} runs; new processes "
          + ("with their bytecode cached (as Python's default)" if not args.no_pyc else "without bytecode (--no-pyc)"))
    table(["command", "warm wall s", "as typed wall s", "warm CPU s", "as typed CPU s", "wall: overhead / ratio",
           "CPU: overhead / ratio"], rows,
          title=f"streamk search: a new process against a warm one ({args.images}-photo index, default search; "
                f"targets: start-up overhead <= 1.0 s, a batch of {n} <= 1.2x; --server: CPU of the client alone)")

if __name__ == "__main__":
    main()

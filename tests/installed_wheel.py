"""CI's wheel check: build streamk's wheel, install it (not editable) into a folder made
read-only, and run a subset of the tests against that installed copy, twice, with Numba's
cache in ``NUMBA_CACHE_DIR``.

It fails when: the wheel misses a file the package needs (py.typed, the server's page,
the stubs); the tests import anything but the installed copy; the installed copy cannot
run its Numba kernels (``cache=True``) from a read-only site-packages; anything is written
under the installed package; the second run compiles again instead of loading the
kernels from the cache. The wheel is built as pip builds it (in an isolated environment
with the build backend of pyproject.toml, fetched from the package index) and installed
without its dependencies (those of the environment running the script are used).

    python tests/installed_wheel.py            # a few minutes on two cores (the first run compiles)
    python tests/installed_wheel.py -k PATTERN # another subset (pytest's -k)

Not collected by pytest (its name does not start with ``test_``).
"""

import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the PQ kernels; an index made from photos (extraction, embedding and aggregation kernels),
# read and searched through the CLI
SUBSET = ["tests/quantization/test_pq.py",
          "tests/test_cli.py::test_index_info_shows_the_encoder_extractor_local_features_and_disk_size",
          "tests/test_json_schema_version.py::test_search_json_keeps_its_array_and_each_result_names_the_version"]
NEEDED = ["streamk/py.typed", "streamk/server/static/index.html", "streamk/cli/__init__.py"]


def run(argv, **kwargs):
    print("+", " ".join(map(str, argv)), flush=True)
    return subprocess.run(list(map(str, argv)), check=True, **kwargs)


def build_and_install(work):
    dist, site = work / "dist", work / "site"
    # build isolation: pip fetches the build backend pyproject.toml names (setuptools>=68)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", dist, REPO])
    wheels = sorted(dist.glob("streamk-*.whl"))
    assert len(wheels) == 1, wheels
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--quiet", "--target", site, wheels[0]])
    missing = [f for f in NEEDED if not (site / f).is_file()]
    stubs = [p.relative_to(REPO) for p in (REPO / "streamk").rglob("*.pyi")]
    missing += [str(s) for s in stubs if not (site / s).is_file()]
    assert not missing, f"not in the wheel: {missing}"
    return wheels[0], site


def snapshot(folder):
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


def set_writable(folder, writable):
    for p in [folder, *folder.rglob("*")]:
        if p.is_symlink():
            continue
        mode = p.stat().st_mode
        bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
        p.chmod(mode | stat.S_IWUSR if writable else mode & ~bits)


def test_environment(work, site):
    """Only the installed copy importable: PYTHONPATH is the site folder alone, the tests run
    from a copy of tests/ (no streamk beside them), HOME a fresh folder."""
    home = work / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "NUMBA_", "STREAMK_EXAMPLE"))}
    env.update(PYTHONPATH=str(site), HOME=str(home), NUMBA_CACHE_DIR=str(work / "numba-cache"),
               PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    env.pop("XDG_CACHE_HOME", None)
    return env


def check_imports_installed(work, site, env):
    out = subprocess.run([sys.executable, "-c", "import streamk, streamk.cli; print(streamk.__file__)"], cwd=work,
                         env=env, capture_output=True, text=True, check=True, timeout=300).stdout.strip()
    assert out.startswith(str(site)), f"streamk imported from {out}, not from the installed wheel in {site}"
    run([sys.executable, "-m", "streamk.cli", "--version"], cwd=work, env=env, timeout=300)


def run_tests(work, env, subset, keyword):
    argv = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *subset]
    if keyword:
        argv += ["-k", keyword]
    t0 = time.perf_counter()
    run(argv, cwd=work, env=env, timeout=1200)
    return time.perf_counter() - t0


def cache_files(cache):
    return {str(p.relative_to(cache)): p.stat().st_mtime_ns for p in cache.rglob("*.nb[ic]")}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", default=None, help="pytest -k: another subset of SUBSET")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (printed)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="streamk-wheel-"))
    try:
        wheel, site = build_and_install(work)
        print(f"wheel: {wheel.name}, {wheel.stat().st_size / 1e6:.1f} MB", flush=True)
        shutil.copytree(REPO / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(REPO / "pyproject.toml", work / "pyproject.toml")  # pytest's settings, not the package
        env = test_environment(work, site)
        set_writable(site, False)
        before = snapshot(site)
        check_imports_installed(work, site, env)
        cold = run_tests(work, env, SUBSET, args.k)
        cached = cache_files(work / "numba-cache")
        assert cached, "Numba wrote no cache under NUMBA_CACHE_DIR"
        warm = run_tests(work, env, SUBSET, args.k)
        assert cache_files(work / "numba-cache") == cached, "the second run compiled again instead of loading the cache"
        assert snapshot(site) == before, "something was written under the installed package"
        print(f"installed wheel: tests passed, read-only site-packages; {len(cached)} Numba cache files; "
              f"first run {cold:.0f} s, second (cached) {warm:.0f} s", flush=True)
    finally:
        if (work / "site").exists():
            set_writable(work / "site", True)
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The README's code runs as written: each ```bash and ```python block is run, in README
order, in one folder that holds what the README says a user has (``photos/``: 10 of the
demo's photographs, ``query.jpg``: a cropped, rotated view of one of them) with HOME
there (so ``~/.cache/streamk`` is the test's own), or is listed in PLAN as not run, with
the reason. A block a test runs may need blocks above it (the index they make): those
run first, once.

How a block is run: bash with ``set -euo pipefail``; Python as a script; ``pip install``
(alone, or before ``&&``) is not run (this environment is the installed one) but must
name extras that exist; ``streamk serve`` starts in the background and the blocks that
need it talk to it on a free loopback port (the README's 8000 replaced by it). Blocks
that cost more than seconds are marked slow (``--run-slow``); a new block fails
:func:`test_every_block_is_run_or_listed` until PLAN says how it is run.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.processes import REPO, subprocess_env
from helpers.server import free_port
from helpers.waiting import poll

README = REPO / "README.md"
RUN, SLOW = "run", "slow"
SERVE_PORT_IN_README = 8000


@dataclass(frozen=True)
class Plan:
    mode: str  # RUN, SLOW, or why the block is not run
    needs: tuple = ()  # blocks run before it, once
    first_line_only: bool = False
    timeout: int = 600


# every block of the README, named "<its section> #<n-th block of the section>"
PLAN = {
    "streamk #1": Plan(SLOW, first_line_only=True, timeout=900),  # streamk demo: 2 min on two quiet cores
    # (the second line is the test command itself: .ci/run runs it)
    "Index and search your photos #1": Plan(RUN),
    "Index and search your photos #2": Plan("PQ training needs 256 images (a million for the IVF line), "
                                            "upgrade an index of streamk 0.2, --server a running server: "
                                            "tests/pipeline/test_ingest.py, tests/index/test_upgrade*.py and "
                                            "tests/test_cli_search.py run these commands"),
    "Index and search your photos #3": Plan(RUN, needs=("Index and search your photos #1",)),
    "The second stage: spatial verification and query expansion #1": Plan(
        RUN, needs=("Index and search your photos #1",)),
    "The second stage: spatial verification and query expansion #2": Plan(
        RUN, needs=("Index and search your photos #1",)),
    # a second index made and filled (45 s here); tests/pipeline/test_metadata_ingest.py in the default run
    "Metadata and filters #1": Plan(SLOW, needs=("Index and search your photos #1",)),
    "Metadata and filters #2": Plan(SLOW, needs=("Metadata and filters #1",)),
    "Near-duplicates #1": Plan(SLOW, needs=("Index and search your photos #1",)),  # tests/index/test_duplicates*
    "Serve #1": Plan(SLOW, timeout=900),  # open_example() builds the demo collection: 1-2 min
    "Serve #2": Plan(SLOW, needs=("Serve #1",)),
    "Use from Python #1": Plan(RUN),
    "Use from Python #2": Plan(RUN, needs=("Use from Python #1",)),
    "Notebooks #1": Plan("jupyter lab is an interactive server; tests/widgets/test_notebooks.py executes the "
                         "notebooks top to bottom on the demo collection"),
    "Evaluate on a benchmark #1": Plan(SLOW, timeout=1800),  # needs ../shared/data: a few minutes
    "Evaluate on a benchmark #2": Plan("the paper's grid takes hours on two cores, and the other benchmarks "
                                       "download their archives (gigabytes) from the publishers"),
    "Evaluate on a benchmark #3": Plan(SLOW, timeout=1800),  # needs ../shared/data: a few minutes (the extraction)
    "Ingest on a Dask cluster #1": Plan("a Dask scheduler and workers on other machines (dask scheduler runs "
                                        "until stopped); tests/parallel runs the same code on a LocalCluster"),
    "Ingest on a Dask cluster #2": Plan(SLOW, needs=("Index and search your photos #1",)),
    "A sharded index #1": Plan("shards owned by Dask workers on other machines; tests/index/test_sharded_index.py "
                               "runs these commands on a LocalCluster"),
}


@dataclass(frozen=True)
class Block:
    key: str
    lang: str
    text: str
    line: int


def readme_blocks():
    """The README's ```bash and ```python blocks, in order."""
    blocks, heading, counts, fence = [], None, {}, None
    for n, line in enumerate(README.read_text().splitlines(), 1):
        if fence is None:
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            elif line.startswith("```") and line[3:].strip() in ("bash", "python"):
                fence, lang, start, body = line, line[3:].strip(), n, []
        elif line.startswith("```"):
            counts[heading] = counts.get(heading, 0) + 1
            blocks.append(Block(f"{heading} #{counts[heading]}", lang, "\n".join(body) + "\n", start))
            fence = None
        else:
            body.append(line)
    return blocks


BLOCKS = {b.key: b for b in readme_blocks()}
PIP = re.compile(r"^\s*(?:python3 -m venv \S+ && \. \S+/bin/activate && )?pip install (?:-e )?(\S+)(?: && |\s*$)")


# ---------------------------------------------------------------- the plan itself (quick)
def test_every_block_is_run_or_listed():
    assert list(BLOCKS) == list(PLAN), ("README blocks and PLAN differ: "
                                        f"{sorted(set(BLOCKS) ^ set(PLAN))}")
    for key, plan in PLAN.items():
        assert plan.mode in (RUN, SLOW) or len(plan.mode) > 40, f"{key}: say why it is not run"
        assert all(PLAN[need].mode in (RUN, SLOW) for need in plan.needs), key
        assert plan.mode == SLOW or all(PLAN[need].mode == RUN for need in plan.needs), \
            f"{key} runs by default but needs a slow block"


def test_the_readme_starts_with_exactly_two_commands():
    """One installs and runs the main job, one installs and runs the tests (.ci/run runs it)."""
    first = readme_blocks()[0]
    assert first.line <= 5 and first.lang == "bash"
    commands = first.text.splitlines()
    assert len(commands) == 2
    assert re.search(r"pip install .*&& streamk demo$", commands[0]), commands[0]
    assert re.search(r"pip install .*&& python -m pytest$", commands[1]), commands[1]


def test_pip_lines_name_extras_that_exist():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = []
    for block in BLOCKS.values():
        for line in block.text.splitlines():
            m = PIP.match(line)
            if m:
                spec = m.group(1).strip("'\"")
                named += re.findall(r"\[([^\]]+)\]", spec)[0].split(",") if "[" in spec else []
    assert named and set(named) <= extras, set(named) - extras


# ---------------------------------------------------------------- running the blocks
class Workspace:
    """The user's folder: photos/, query.jpg, HOME; the blocks already run; servers started."""

    def __init__(self, root):
        self.root = root
        self.done = set()
        self.servers = []
        self.port = None
        home = root / "home"
        (home / ".cache" / "streamk" / "features").mkdir(parents=True)  # the feature cache, as after the demo
        self.env = subprocess_env(HOME=str(home), PYTHONUNBUFFERED="1",
                                  PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
        for name in ("STREAMK_EXAMPLE_DIR", "XDG_CACHE_HOME", "STREAMK_TOKEN"):
            self.env.pop(name, None)

    def run(self, key, slow_ok):
        plan = PLAN[key]
        for need in plan.needs:
            self.run(need, slow_ok)
        if key in self.done:
            return
        assert plan.mode == RUN or (plan.mode == SLOW and slow_ok), f"{key}: {plan.mode}"
        block = BLOCKS[key]
        text = block.text.splitlines()[0] + "\n" if plan.first_line_only else block.text
        if block.lang == "python":
            script = self.root / f"block-{block.line}.py"
            script.write_text(text)
            self._check([sys.executable, str(script)], key, plan.timeout)
        else:
            self._bash(key, text, plan.timeout)
        self.done.add(key)

    def _bash(self, key, text, timeout):
        """The block's lines in order: each run of lines by bash, a ``streamk serve`` line
        started in the background between them."""
        lines = []
        for line in text.splitlines():
            m = PIP.match(line)
            if m:
                line = line[m.end():]  # pip install ... && REST: REST
            if line.startswith("streamk serve "):
                self._check(["bash", "-c", "set -euo pipefail\n" + "\n".join(lines)], key, timeout)
                lines = []
                self._serve(line, key)
                continue
            if self.port is not None:
                line = line.replace(f"127.0.0.1:{SERVE_PORT_IN_README}", f"127.0.0.1:{self.port}")
            lines.append(line)
        if any(line.strip() for line in lines):
            self._check(["bash", "-c", "set -euo pipefail\n" + "\n".join(lines)], key, timeout)

    def _serve(self, line, key):
        """``streamk serve ...`` in the background on a free port, until /health answers."""
        self.port = free_port()
        log = open(self.root / f"serve-{self.port}.log", "w")  # noqa: SIM115 -- closed with the server
        proc = subprocess.Popen(["bash", "-c", f"exec {line} --port {self.port}"], cwd=self.root, env=self.env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.servers.append((proc, log))

        def up():
            if proc.poll() is not None:
                raise AssertionError(f"{key}: streamk serve ended ({proc.returncode}):\n"
                                     + (self.root / f"serve-{self.port}.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    return r.status == 200
            except OSError:
                return False
        poll(up, timeout=300, what=f"{key}: streamk serve answering /health", interval=0.5)

    def _check(self, argv, key, timeout):
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=self.root, env=self.env, capture_output=True, text=True,
                                  timeout=timeout, check=False, start_new_session=True)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{key} (README line {BLOCKS[key].line}) ran over {timeout} s:\n"
                                 f"{(exc.stdout or '')[-3000:]}\n{(exc.stderr or '')[-3000:]}") from exc
        print(f"{key}: {time.monotonic() - t0:.1f} s\n{proc.stdout[-2000:]}")
        assert proc.returncode == 0, (f"{key} (README line {BLOCKS[key].line}) exited {proc.returncode}:\n"
                                      f"{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}")
        assert "Traceback" not in proc.stderr, proc.stderr[-4000:]

    def close(self):
        for proc, log in self.servers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=60)
            log.close()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    pytest.importorskip("skimage")
    pytest.importorskip("pyhesaff")
    from PIL import Image

    from streamk.demo.main_job import PHOTOS, skimage_photo_dir

    root = tmp_path_factory.mktemp("readme")
    photos = root / "photos"
    photos.mkdir()
    for name, _ in PHOTOS[:10]:  # astronaut ... ihc, chelsea and coffee among them
        shutil.copyfile(skimage_photo_dir() / name, photos / name)
    cat = Image.open(photos / "chelsea.png").convert("RGB")
    w, h = cat.size
    cat.crop((w // 10, h // 10, w * 9 // 10, h * 9 // 10)).rotate(8, expand=True).save(root / "query.jpg", quality=85)
    ws = Workspace(root)
    yield ws
    ws.close()


def _param(key):
    marks = [pytest.mark.slow] if PLAN.get(key, Plan(RUN)).mode == SLOW else []
    return pytest.param(key, marks=marks, id=key)


@pytest.mark.parametrize("key", [_param(k) for k, p in PLAN.items() if p.mode in (RUN, SLOW)])
def test_the_block_runs_as_written(workspace, key, request):
    if key.startswith("Evaluate"):
        from helpers.data import shared_data_dir, skip_without_data

        if shared_data_dir() is None:
            skip_without_data("the README's eval runs on ../shared/data's paris6k-subset")
    workspace.run(key, slow_ok=request.config.getoption("--run-slow"))


def test_the_index_the_readme_made_finds_the_query(workspace):
    """What the first block made is what it says: the 10 photos, the query's cat first."""
    import json

    workspace.run("Index and search your photos #1", slow_ok=False)
    out = subprocess.run(["streamk", "search", "my-index", "query.jpg", "-k", "3", "--json"], cwd=workspace.root,
                         env=workspace.env, capture_output=True, text=True, timeout=300, check=True).stdout
    rows = json.loads(out)  # the cat first (its photo, or the view of it that a Python block adds)
    assert rows[0]["id"] in ("chelsea.png", "chelsea-view") and rows[0]["verified"], rows
    assert "chelsea.png" in [r["id"] for r in rows if r["verified"]], rows
    info = subprocess.run(["streamk", "index", "info", "my-index", "--json"], cwd=workspace.root,
                          env=workspace.env, capture_output=True, text=True, timeout=300, check=True).stdout
    assert json.loads(info)["images"] >= 10

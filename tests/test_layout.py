"""The package layout, as docs/architecture.md states it: one package per stage, layers
that cannot be crossed (import-linter's contracts in pyproject.toml), no private name
imported across packages, a curated front door, and docs that list the tree."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "streamk"
SUBPACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def lint_imports(root):
    """Run import-linter on the package under ``root`` with the contracts of ``root/pyproject.toml``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           "sys.exit(lint_imports(no_cache=True, no_logo=True))"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_layer_contracts_are_kept():
    proc = lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout and "KEPT" in proc.stdout


@pytest.mark.parametrize("where, line, contract", [
    ("encoding/encoder.py", "from ..index import StreamingIndex", "stages in layers"),
    ("index/reader.py", "from .writer import IndexWriter", "never goes through its writing side"),
    ("parallel/executors.py", "from ..features import Features", "executors know nothing"),
    ("quantization/pq.py", "import lmdb", "know no storage"),
])
def test_a_crossing_import_breaks_the_contracts(tmp_path, where, line, contract):
    """The contracts bite: a copy of the package with one import that crosses a layer fails."""
    shutil.copytree(PACKAGE, tmp_path / "streamk", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "streamk" / where
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode != 0, proc.stdout
    broken = proc.stdout.split("Broken contracts")[-1]
    assert contract in broken, proc.stdout


def _imports(path):
    """(absolute module, [names]) of each import in a module of the package."""
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, []


def _package_of(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "streamk" else None


def test_no_private_name_is_imported_across_packages():
    found = []
    for path in PACKAGE.rglob("*.py"):
        own = _package_of(".".join(path.relative_to(REPO).with_suffix("").parts))
        for line, module, names in _imports(path):
            if not module.startswith("streamk") or _package_of(module) == own:
                continue
            private_module = any(p.startswith("_") and not p.startswith("__") for p in module.split("."))
            private_names = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private_module or private_names:
                found.append(f"{path.relative_to(REPO)}:{line}: {module} {private_names}")
    assert not found, "private names imported across packages:\n" + "\n".join(found)


def test_every_package_states_its_job_and_its_public_names():
    import importlib

    for name in SUBPACKAGES:
        module = importlib.import_module(f"streamk.{name}")
        doc = (module.__doc__ or "").strip()
        assert doc, f"streamk.{name} has no docstring"
        if name == "widgets":  # loaded lazily (ipywidgets), names listed all the same
            assert set(module.__all__) == {"SearchApp", "WeightsView", "EvalDashboard"}
            continue
        assert module.__all__, f"streamk.{name} lists no public names"
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert not missing, f"streamk.{name}.__all__ names what it lacks: {missing}"


def test_numba_kernels_are_private_modules_beside_their_callers():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if re.search(r"^from numba import .*\bnjit\b|^@njit|^@numba\.njit", text, re.M):
            assert path.name.startswith("_"), f"{path.relative_to(REPO)}: Numba kernels live in a private module"


def test_importing_streamk_loads_no_stage_and_gives_the_front_door():
    code = ("import sys, streamk\n"
            "heavy = [m for m in ('numpy', 'numba', 'lmdb', 'dask', 'distributed', 'cv2', 'ipywidgets', "
            "'matplotlib', 'sklearn') if m in sys.modules]\n"
            "from streamk import Encoder, StreamingIndex, ShardedIndex, open_index, Ingester, train_encoder, "
            "load_dataset, evaluate, errors\n"
            "later = [m for m in ('dask', 'distributed', 'cv2', 'ipywidgets', 'matplotlib') if m in sys.modules]\n"
            "print(heavy, later)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[] []"


def test_the_old_top_level_names_still_work_with_a_deprecation_warning():
    import streamk
    from streamk.encoding import rootsift
    from streamk.errors import ConfigError

    for name, value in (("rootsift", rootsift), ("ConfigError", ConfigError)):
        with pytest.warns(DeprecationWarning, match=f"streamk.{name} is deprecated"):
            assert getattr(streamk, name) is value
    with pytest.raises(AttributeError):
        streamk.no_such_name  # noqa: B018


def _readme_layout_rows():
    text = (REPO / "README.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)`", section, re.M)


def test_the_readme_layout_table_lists_every_package_and_nothing_else():
    rows = _readme_layout_rows()
    listed = {r.rstrip("/").split("/")[1] for r in rows if r.startswith("streamk/") and r.endswith("/")}
    assert listed == set(SUBPACKAGES), f"README layout table: {sorted(listed)} vs the tree {SUBPACKAGES}"
    for row in rows:
        assert (REPO / row.rstrip("/")).exists(), f"README layout table names {row}, which does not exist"


def test_the_architecture_doc_names_every_package():
    text = (REPO / "docs" / "architecture.md").read_text()
    for name in SUBPACKAGES:
        assert f"streamk.{name}" in text or f"`{name}/`" in text, f"docs/architecture.md does not name {name}"


def test_every_file_the_docs_name_exists():
    """Paths of tests, modules and benchmarks named in the README, docs/, bench/README.md
    and .ci/run exist (they drifted once when the tests moved into packages)."""
    docs = [REPO / "README.md", REPO / "bench" / "README.md", REPO / ".ci" / "run", *sorted((REPO / "docs").glob("*.md"))]
    missing = []
    for doc in docs:
        for path in sorted(set(re.findall(r"\b((?:tests|streamk|bench)/[\w/]+\.py)\b", doc.read_text()))):
            if not (REPO / path).exists():
                missing.append(f"{doc.relative_to(REPO)}: {path}")
    assert not missing, "files named in the docs but absent: " + ", ".join(missing)

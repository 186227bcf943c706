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
            assert set(module.__all__) == {"SearchApp", "WeightsView", "EvalDashboard", "DuplicatesView"}
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
    docs = [REPO / "README.md", REPO / "bench" / "README.md", REPO / ".ci" / "run",
            *sorted((REPO / "docs").glob("*.md"))]
    missing = []
    for doc in docs:
        for path in sorted(set(re.findall(r"\b((?:tests|streamk|bench)/[\w/]+\.py)\b", doc.read_text()))):
            if not (REPO / path).exists():
                missing.append(f"{doc.relative_to(REPO)}: {path}")
    assert not missing, "files named in the docs but absent: " + ", ".join(missing)


def _module_name(path):
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name):
    rel = Path(*name.split("."))
    return (REPO / rel.with_suffix(".py")).is_file() or (REPO / rel / "__init__.py").is_file()


def test_imports_across_packages_use_the_public_names():
    """``from ..index import StreamingIndex``, never ``from ..index.streaming_index import ...``:
    a package's modules are its own to move; other packages see its ``__init__``."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        own = _package_of(_module_name(path))
        for line, module, _ in _imports(path):
            parts = module.split(".")
            if parts[0] == "streamk" and len(parts) > 2 and parts[1] != own:
                found.append(f"{path.relative_to(REPO)}:{line}: {module}")
    assert not found, "imports into another package's modules:\n" + "\n".join(sorted(found))


def _module_level_imports(path):
    """Modules of streamk imported when ``path`` is imported (statements outside functions),
    with the packages Python imports first, less the module's own ancestors."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, len(name.split(".")))}

    def statements(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list) and not isinstance(node, ast.ClassDef) or \
                        isinstance(node, ast.ClassDef) and field == "body":
                    yield from statements(inner or [])

    out = set()
    for node in statements(ast.parse(path.read_text()).body):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
            targets = [f"{module}.{a.name}" if _is_module(f"{module}.{a.name}") else module for a in node.names]
        else:
            targets = [a.name for a in node.names]
        for target in targets:
            parts = target.split(".")
            if parts[0] != "streamk":
                continue
            for i in range(1, len(parts) + 1):  # importing a.b.c imports a and a.b first
                prefix = ".".join(parts[:i])
                if prefix not in ancestors and prefix != name and _is_module(prefix):
                    out.add(prefix)
    return out


def test_no_import_cycles_between_modules():
    graph = {_module_name(p): _module_level_imports(p) for p in PACKAGE.rglob("*.py")}
    # Tarjan's strongly connected components: a component of more than one module is a cycle
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, "modules that import each other (at module level):\n" + "\n".join(map(str, cycles))


def test_test_files_have_unique_names():
    """pytest imports test modules by their base name (no __init__.py in tests/): two files of
    one name in different folders stop the whole run at collection."""
    from collections import Counter

    names = Counter(p.name for p in (REPO / "tests").rglob("test_*.py") if ".venv" not in p.parts)
    assert not [n for n, c in names.items() if c > 1], sorted(n for n, c in names.items() if c > 1)


MAX_LINE = 120  # the codebase's line length: no formatter enforces it, this test does


def test_no_line_of_the_code_is_longer_than_120_characters():
    long = [f"{path.relative_to(REPO)}:{n}: {len(line)} characters"
            for folder in ("streamk", "tests", "bench") for path in sorted((REPO / folder).rglob("*.py"))
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if len(line) > MAX_LINE]
    assert not long, "lines over 120 characters (wrap them):\n" + "\n".join(long)

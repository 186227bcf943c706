"""streamk as a package its users know: what a newcomer's first commands leave behind is
ignored by git, the browser tests say how to get their browser offline, and the API
documentation builds from the docstrings with no warning."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", ["token.txt", "streamk-demo/index.html", "sub/token.txt"])
def test_what_the_first_commands_leave_is_ignored_by_git(path):
    """``streamk serve`` writes token.txt, ``streamk demo`` the report streamk-demo/."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=REPO, timeout=60)
    assert proc.returncode == 0, f"{path} is not in .gitignore"


def test_the_browser_tests_say_how_to_get_their_browser(monkeypatch, tmp_path):
    from helpers import browser

    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "no-chromium")
    reason = browser.browser_missing_reason()
    assert "apt-get install chromium" in reason and "playwright install" in reason


def test_the_api_documentation_builds_from_the_docstrings_without_warnings(tmp_path):
    """Sphinx (autodoc + napoleon) on docs/api, warnings as errors: a docstring whose
    markup docutils cannot read fails here (about 15 s)."""
    pytest.importorskip("sphinx")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(REPO / "docs" / "api"), str(tmp_path / "html")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (tmp_path / "html" / "index.html").read_text()
    for name in ("Encoder", "StreamingIndex", "ShardedIndex", "open_index", "Ingester", "train_encoder",
                 "create_index", "extract", "make_extractor", "load_dataset", "evaluate"):
        assert f'id="streamk.{name}"' in page, f"streamk.{name} is not documented"


# ---------------------------------------------------------------- types (PEP 561, mypy)

# the names of streamk/__init__ whose public signatures are annotated and type-checked (Index: the
# base of StreamingIndex and ShardedIndex, streamk.index.Index)
TYPED = ("Encoder", "extract", "make_extractor", "train_encoder", "load_dataset", "evaluate", "open_index",
         "create_index", "StreamingIndex", "ShardedIndex", "Index", "Ingester", "SearchParams")


def _mypy(*args):
    return subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def test_the_package_says_it_is_typed():
    """py.typed in the package and in its package data (so that it is in the wheel)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    assert (REPO / "streamk" / "py.typed").is_file()
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["streamk"]
    for stub in REPO.joinpath("streamk").rglob("*.pyi"):
        package = ".".join(stub.parent.relative_to(REPO).parts)
        assert stub.name in data.get(package, ()), f"{stub} is not in the package data"


def test_a_type_checker_sees_the_lazy_names_as_what_they_are():
    """streamk/__init__'s TYPE_CHECKING imports name every public name and what it is at run
    time; a package stub (``__init__.pyi``) lists the names of the package's ``__all__``."""
    import ast
    import importlib

    import streamk

    tree = ast.parse((REPO / "streamk" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {}
    for node in block.body:
        module = importlib.import_module("streamk." + node.module)
        for alias in node.names:
            assert alias.asname == alias.name, f"{alias.name}: re-exported as itself"
            seen[alias.name] = getattr(module, alias.name)
    assert set(seen) == set(streamk._PUBLIC)
    for name, value in seen.items():
        assert value is getattr(streamk, name), name
    for stub in REPO.joinpath("streamk").rglob("__init__.pyi"):
        package = importlib.import_module(".".join(stub.parent.relative_to(REPO).parts))
        names = {a.asname or a.name for n in ast.parse(stub.read_text()).body if isinstance(n, ast.ImportFrom)
                 for a in n.names}
        assert names == set(package.__all__), f"{stub}: {sorted(names ^ set(package.__all__))}"


def _unannotated(name, obj):
    import inspect

    members = [(name, obj)]
    if inspect.isclass(obj):
        for attr, value in vars(obj).items():
            if attr.startswith("_") and attr != "__init__":
                continue
            value = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            if callable(value):
                members.append((f"{name}.{attr}", value))
        members = members[1:]
    missing = []
    for qual, func in members:
        sig = inspect.signature(func)
        missing += [f"{qual}({p})" for p, v in sig.parameters.items()
                    if p not in ("self", "cls") and v.annotation is inspect.Parameter.empty]
        if sig.return_annotation is inspect.Signature.empty:
            missing.append(f"{qual} -> ?")
    return missing


def test_the_typed_public_names_have_complete_signatures():
    import streamk

    missing = [m for name in TYPED for m in _unannotated(name, getattr(streamk, name))]
    assert not missing, "public signatures without annotations:\n" + "\n".join(missing)


def test_the_public_api_type_checks():
    """mypy (pyproject's [tool.mypy]) on the modules that define the typed names, then a
    user's code that calls them under --strict (about 20 s cold, a few s with a cache)."""
    pytest.importorskip("mypy")
    proc = _mypy()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = _mypy("--strict", "tests/type_checks/public_api.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_type_check_refuses_a_misuse():
    """The names are typed, not Any: each line of tests/type_checks/misuse.py marked
    ``# error`` is reported, and no other."""
    pytest.importorskip("mypy")
    path = REPO / "tests" / "type_checks" / "misuse.py"
    marked = {i for i, line in enumerate(path.read_text().splitlines(), 1) if line.endswith("# error")}
    proc = _mypy(str(path.relative_to(REPO)))
    reported = {int(line.split(":")[1]) for line in proc.stdout.splitlines() if ": error:" in line}
    assert reported == marked, proc.stdout + proc.stderr

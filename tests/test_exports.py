"""streamk.exports: a package's public names imported on first use, its modules not before."""

import subprocess
import sys

import pytest

PACKAGES = ("datasets", "encoding", "evaluation", "features", "index", "parallel", "pipeline", "quantization",
            "server", "verification")


def run_python(code):
    res = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_a_package_imports_none_of_its_modules(package):
    """``import streamk.index`` costs nothing: a name equal to a submodule's
    (``streamk.index.backup``) is no exception."""
    out = run_python(f"import sys, streamk.{package}\n"
                     f"print(sorted(m for m in sys.modules if m.startswith('streamk.{package}.')))")
    assert out == "[]"


@pytest.mark.parametrize("first", ["import streamk.index.backup", "from streamk.index.backup import backup",
                                   "from streamk.index import BackupReport", "from streamk.index import backup",
                                   "import streamk.index.integrity_check, streamk.index.backup as b"])
def test_a_public_name_equal_to_a_submodule_is_the_public_name_whichever_import_comes_first(first):
    """``streamk.index.backup`` is the function ``__all__`` names, though ``backup.py``
    is its module and the import system binds a submodule on its package."""
    out = run_python(f"import types\n{first}\n"
                     "import streamk.index as ix\nfrom streamk.index import backup, upgrade\n"
                     "import streamk.index.upgrade\nimport streamk.datasets.download\n"
                     "from streamk.datasets import download\nimport streamk.datasets as ds\n"
                     "names = (ix.backup, backup, ix.upgrade, upgrade, ix.__dict__['backup'], ds.download, download)\n"
                     "print([callable(v) and not isinstance(v, types.ModuleType) for v in names])")
    assert out == str([True] * 7)


def test_the_submodule_itself_is_still_importable_by_its_full_name():
    import importlib

    import streamk.index

    module = importlib.import_module("streamk.index.backup")
    assert module.__name__ == "streamk.index.backup" and module.backup is streamk.index.backup
    upgrade = importlib.import_module("streamk.index.upgrade")
    assert sys.modules["streamk.index.upgrade"] is upgrade and upgrade.upgrade is streamk.index.upgrade

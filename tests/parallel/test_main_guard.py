"""A script that starts streamk's worker processes is told what to do when its workers could
not start: spawned workers run the parent's script again (Python's rule), so a call at an
unguarded top level, or a script read from standard input, made every worker die and every
image be reported as a crash (measured before: 3 of 3 training photos "WorkerCrashedError",
then "no local features in the learning images"; the unguarded script's prints ran once per
worker). The checks run in a child interpreter, as a user runs a script."""

import textwrap

import pytest

from helpers.processes import run_python

START = """
from streamk.parallel import WorkerPool, TaskContext
pool = WorkerPool(2, TaskContext(dict, {}))
"""
USE = "pool.start(); pool.close(); print('workers ran')"


def _run(tmp_path, source, stdin=False):
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(source))
    if stdin:
        return run_python("-", input=script.read_text(), cwd=tmp_path, timeout=120)
    return run_python(script, cwd=tmp_path, timeout=120)


def test_an_unguarded_script_is_told_to_guard_its_top_level(tmp_path):
    out = _run(tmp_path, START + "print('top level ran')\n" + USE + "\n")
    assert out.returncode != 0
    assert "ConfigError" in out.stderr and "if __name__ == \"__main__\":" in out.stderr
    assert "line 5 of" in out.stderr and "workers=1" in out.stderr
    assert out.stdout.count("top level ran") == 1  # no worker ran the script again
    assert "WorkerCrashedError" not in out.stderr


@pytest.mark.parametrize("call", [
    "if __name__ == '__main__':\n    {use}\n",
    "def main():\n    {use}\n\n\nif __name__ == \"__main__\":\n    main()\n",
    "if \"__main__\" == __name__ and True:\n    {use}\n",
])
def test_a_guarded_script_starts_its_workers(tmp_path, call):
    out = _run(tmp_path, START + call.format(use=USE))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "workers ran"


def test_a_script_from_standard_input_is_told_to_be_a_file(tmp_path):
    out = _run(tmp_path, START + "if __name__ == '__main__':\n    " + USE + "\n", stdin=True)
    assert out.returncode != 0
    assert "ConfigError" in out.stderr and "<stdin>" in out.stderr and "Save the script as a file" in out.stderr
    assert "WorkerCrashedError" not in out.stderr and "FileNotFoundError" not in out.stderr


def test_python_c_starts_its_workers(tmp_path):
    """No script file: the workers run nothing of the parent's, and nothing is checked."""
    out = run_python("-c", START + USE, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "workers ran"

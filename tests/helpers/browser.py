"""Helpers for the real-browser test (tests/test_browser.py).

A private JupyterLab server (own config, data, runtime, settings, workspaces and
IPython dirs; the announcements pop-up disabled; a ``python3`` kernelspec that
runs this interpreter), process-tree teardown, and the Chromium launch options.
Every wait here is bounded.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from .waiting import poll

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# page_config.json of the private JUPYTER_CONFIG_DIR: no news/update pop-up
# (announcements), no "build recommended" dialog.
PAGE_CONFIG = {
    "disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True},
    "buildAvailable": False,
    "buildCheck": False,
}

# user settings in the private JUPYTERLAB_SETTINGS_DIR: no toasts or news; every
# notebook cell attached to the DOM (the default 'contentVisibility' windowing
# skips the rendering of off-screen cells, which a browser test must not depend on)
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings":
        {"windowingMode": "none"},
}


def browser_missing_reason():
    """Why the browser test cannot run here, or None when it can."""
    if not CHROMIUM.exists():
        return (f"{CHROMIUM} is absent: apt-get install chromium fonts-dejavu-core (the tests drive Debian's "
                "Chromium; `playwright install` downloads a browser of its own, which fails offline and is not needed)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"playwright is not importable ({exc}); pip install -e '.[notebook-tests]'"
    return None


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -------------------------------------------------------------- process trees

def _children_proc(pid):
    kids = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return kids


def descendants(pid):
    """PIDs of every live descendant of ``pid`` (kernels run in their own
    session, so the server's process group does not cover them)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return [p.pid for p in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []
    found, todo = [], [pid]
    while todo:
        for kid in _children_proc(todo.pop()):
            if kid not in found:
                found.append(kid)
                todo.append(kid)
    return found


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _signal_tree(pids, groups, sig):
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


# -------------------------------------------------------------- the server

class _PortTaken(Exception):
    pass


class JupyterLab:
    """A JupyterLab server on 127.0.0.1 with a random token, in a private
    environment rooted at ``base`` (a temporary directory)."""

    def __init__(self, base: Path, env_extra: dict | None = None, log=print):
        self.base = Path(base)
        self.root = self.base / "root"
        self.port = None
        self.token = secrets.token_hex(24)
        self.proc = None
        self.log_path = self.base / "jupyterlab.log"
        self._log_file = None
        self._known = set()          # every descendant PID seen so far
        self.env_extra = dict(env_extra or {})
        self.log = log

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _environment(self):
        dirs = {name: self.base / name for name in
                ("config", "data", "runtime", "ipython", "settings", "workspaces")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        (dirs["config"] / "labconfig").mkdir(exist_ok=True)
        (dirs["config"] / "labconfig" / "page_config.json").write_text(json.dumps(PAGE_CONFIG, indent=1))
        for rel, values in LAB_SETTINGS.items():
            path = dirs["settings"] / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values, indent=1))
        # the kernel is this interpreter, whatever "python" is on PATH
        spec = dirs["data"] / "kernels" / "python3"
        spec.mkdir(parents=True, exist_ok=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "metadata": {"debugger": False},
        }, indent=1))
        env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH")}
        env.update({
            "JUPYTER_CONFIG_DIR": str(dirs["config"]),
            "JUPYTER_DATA_DIR": str(dirs["data"]),
            "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
            "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
            "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
            "IPYTHONDIR": str(dirs["ipython"]),
            "PYTHONUNBUFFERED": "1",
        })
        env.update(self.env_extra)
        return env

    def start(self, timeout=180, attempts=3):
        """Start the server and poll /api/status until it answers.  The free
        port is picked before the server binds it: when another process took
        it meanwhile, start again on another port."""
        self.root.mkdir(parents=True, exist_ok=True)
        env = self._environment()
        deadline = time.monotonic() + timeout
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once(env, deadline)
            except _PortTaken:
                if attempt == attempts:
                    raise RuntimeError(f"JupyterLab could not bind a free port in {attempts} attempts:\n"
                                       + self.log_tail()) from None

    def _start_once(self, env, deadline):
        self.port = free_port()
        cmd = [
            sys.executable, "-m", "jupyterlab",
            "--no-browser", "--allow-root",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            "--ServerApp.terminals_enabled=False",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if self._log_file is not None:
            self._log_file.close()
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 (closed by stop())
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._log_file, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        status = f"{self.url}/api/status?token={self.token}"

        def answered():
            if self.proc.poll() is not None:
                log = self.log_tail()
                if "already in use" in log:
                    raise _PortTaken()
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode} before answering:\n" + log)
            try:
                with urllib.request.urlopen(status, timeout=5) as r:
                    if r.status == 200:
                        json.load(r)
                        return True
            except (urllib.error.URLError, OSError, ValueError):
                pass
            return False
        if not poll(answered, max(0.0, deadline - time.monotonic()), interval=0.5):
            raise TimeoutError(f"JupyterLab did not answer {self.url}/api/status in time:\n" + self.log_tail())
        return self

    def remember_children(self):
        """Record the server's descendants now (kernels leave its process group)."""
        if self.proc is not None and self.proc.poll() is None:
            self._known.update(descendants(self.proc.pid))

    def log_tail(self, n=4000):
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def stop(self, timeout=30):
        """Shut down kernels and server; always ends every process it started."""
        if self.proc is None:
            return
        self.remember_children()
        pids = sorted(self._known)
        # groups led by our descendants (kernels are session leaders): ours to end
        groups = [self.proc.pid] + [p for p in pids if _pgid(p) == p]
        if self.proc.poll() is None:
            try:   # polite: the server ends its kernels and exits
                req = urllib.request.Request(f"{self.url}/api/shutdown?token={self.token}", method="POST", data=b"")
                urllib.request.urlopen(req, timeout=10).close()
            except (urllib.error.URLError, OSError):
                pass
        try:
            self.proc.wait(timeout=timeout / 2)
        except subprocess.TimeoutExpired:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            live = [p for p in pids if _alive(p)]
            if self.proc.poll() is None or live:
                _signal_tree(live, groups, sig)
                poll(lambda: self.proc.poll() is not None and not any(_alive(p) for p in live), timeout / 4,
                     interval=0.1)  # on time out: the harder signal next
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self._log_file is not None:
            self._log_file.close()
        leftover = [p for p in pids if _alive(p)]
        self.proc_returncode = self.proc.poll()
        return leftover


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def save_artifact(src: Path, name: str | None = None):
    """Copy ``src`` to $STREAMK_ARTIFACTS when set; returns the copy's path."""
    dest_dir = os.environ.get("STREAMK_ARTIFACTS")
    if not dest_dir:
        return None
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / (name or Path(src).name)
    shutil.copyfile(src, target)
    return target


# -------------------------------------------------------------- driving the page

class NotebookError(AssertionError):
    """A cell of the notebook under test raised; carries its traceback text."""


# text outputs on stderr; a raised exception renders as one too (its traceback)
_STDERR_OUTPUTS = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'

_JS_STATE = """() => {
  const text = e => (e.innerText || e.textContent || '').trim();
  const ind = document.querySelector('.jp-Notebook-ExecutionIndicator');
  const prompts = Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')).map(text);
  const stderr = Array.from(document.querySelectorAll('%s')).map(text);
  const dialogs = Array.from(document.querySelectorAll('.jp-Dialog')).map(text);
  return {kernel: ind ? ind.getAttribute('data-status') : null, prompts, stderr, dialogs};
}""".replace("%s", _STDERR_OUTPUTS)


def notebook_state(page):
    """Kernel status (toolbar execution indicator), code-cell prompts
    ("[ ]:", "[*]:", "[3]:"), stderr/error outputs and open dialogs of the
    current notebook."""
    return page.evaluate(_JS_STATE)


def wait_kernel_idle(page, timeout):
    """Until the notebook's kernel is connected and idle: "Run All" sent before
    that is silently dropped.  Both the toolbar indicator
    (``.jp-Notebook-ExecutionIndicator[data-status=idle]``) and the status bar
    ("Python 3 (ipykernel) | Idle") must say so."""
    def ready():
        st = notebook_state(page)
        if st["dialogs"]:
            raise AssertionError(f"unexpected JupyterLab dialog: {st['dialogs']}")
        bar = page.locator('.jp-StatusBar-TextItem[title^="Change kernel"]')
        return st["kernel"] == "idle" and bar.count() > 0 and "| Idle" in bar.first.inner_text()
    poll(ready, timeout, "the notebook kernel to be idle")


# Run menu > "Run All Cells" (the menu's own command id; the notebook's is a fallback)
RUN_ALL_ITEM = ('.lm-Menu-item[data-command="runmenu:run-all"]:not(.lm-mod-disabled), '
                '.lm-Menu-item[data-command="notebook:run-all-cells"]:not(.lm-mod-disabled)')


def run_all_cells(page, timeout):
    """Run > Run All Cells from the menu bar; then make sure execution really
    started (some code-cell prompt shows [*] or a number), retrying once."""
    def started():
        return any(p.strip("[]: ") for p in notebook_state(page)["prompts"])
    for attempt in range(2):
        page.locator("#jp-MainMenu .lm-MenuBar-item", has_text="Run").first.click(timeout=timeout * 1000)
        item = page.locator(RUN_ALL_ITEM).first
        item.wait_for(state="visible", timeout=timeout * 1000)
        item.click(timeout=timeout * 1000)
        try:
            return poll(started, timeout, "the cells to start running")
        except TimeoutError:
            if attempt:
                raise
            page.keyboard.press("Escape")


def wait_for_selector_or_error(page, selector, timeout, grace=20):
    """Until ``selector`` is visible.  When the notebook has finished running
    (kernel idle, no "[*]" prompt left) and the element has still not shown
    up ``grace`` seconds later, a cell has raised (Run All stops there) or the
    notebook displays nothing: fail at once with the stderr/traceback outputs
    instead of waiting out the timeout."""
    loc = page.locator(selector).first
    finished = [None]

    def seen():
        if loc.count() > 0 and loc.is_visible():
            return True
        st = notebook_state(page)
        if st["dialogs"]:
            raise AssertionError(f"unexpected JupyterLab dialog: {st['dialogs']}")
        done = st["kernel"] == "idle" and not any("*" in p for p in st["prompts"])
        if not done:
            finished[0] = None
        elif finished[0] is None:
            finished[0] = time.monotonic()
        elif time.monotonic() - finished[0] > grace:
            raise NotebookError(
                f"the notebook finished running (prompts {st['prompts']}) without showing {selector!r}; "
                "stderr/error outputs:\n" + "\n---\n".join(st["stderr"])[-6000:])
        return False
    poll(seen, timeout, f"{selector!r} to be visible", interval=1.0)
    return loc


def wait_images_loaded(page, selector, timeout):
    """Until every <img> under ``selector`` has finished loading."""
    js = """sel => Array.from(document.querySelectorAll(sel + ' img')).every(i => i.complete && i.naturalWidth > 0)"""
    poll(lambda: page.evaluate(js, selector), timeout, f"the images in {selector!r} to load")

"""The server tests' helpers: a small served collection (textured photos, OpenCV SIFT, a
VLAD k = 4 encoder, visual words learned on their descriptors), a real ``streamk serve``
on 127.0.0.1 in a child process with default signal actions, stopped with bounded waits."""

import os
import secrets
import signal
import socket
import subprocess
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .images import textured
from .processes import alive, start_python, stop  # noqa: F401  (alive: the server tests import it from here)
from .waiting import poll

N_PHOTOS = 8


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_photos(root):
    """N_PHOTOS textured grey photos of 256 px in ``root/imgs``, and the encoder and words
    learned on them."""
    from streamk.encoding import Encoder
    from streamk.features import extract, make_extractor
    from streamk.verification import Vocabulary

    paths = [textured(str(root / "imgs" / f"p{i}.png"), 100 + i, size=256) for i in range(N_PHOTOS)]
    ex = make_extractor("sift")
    feats = [extract(p, ex) for p in paths]
    enc = Encoder(embedding="vlad", k=4, aggregation="gmp").fit([f.descriptors for f in feats])
    vocab = Vocabulary(n_coarse=8, n_fine=8, min_per_word=4, max_iter=5, seed=0).fit(
        np.concatenate([f.descriptors for f in feats]))
    return {"root": root, "paths": paths, "encoder": enc, "extractor": ex, "vocabulary": vocab}


def make_index(path, photos, n=4, local_features=True):
    """An index of the first ``n`` photos (ids p0..), with local geometry (unless told
    not); metadata field "album" ("a" for even photos, "b" for odd ones) indexed for filters."""
    from streamk.index import StreamingIndex

    with StreamingIndex.create(path, photos["encoder"], vector_dtype="float32", extractor=photos["extractor"],
                               vocabulary=photos["vocabulary"] if local_features else None) as idx:
        idx.index_field("album")
        for i in range(n):
            idx.add(f"p{i}", image_path=photos["paths"][i], metadata={"album": "ab"[i % 2], "n": i})
    return path


class Server:
    """``streamk serve`` in a child process; ``url``, ``token``, ``log()``, ``stop()``."""

    def __init__(self, index, tmp, token=True, args=(), env=None):
        self.index = Path(index)
        self.token = secrets.token_urlsafe(24) if token else None
        self.tmp = Path(tmp)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.args = list(args)
        self.env = env
        self.proc = None
        self.log_path = self.tmp / f"server-{secrets.token_hex(4)}.log"

    def _healthy_or_gone(self):
        """ "healthy" once the server answers /health, "gone" if it exited, else None."""
        import httpx

        if self.proc.poll() is not None:
            return "gone"
        try:
            return "healthy" if httpx.get(f"{self.url}/health", timeout=2).status_code == 200 else None
        except httpx.HTTPError:
            return None

    def start(self, timeout=120):
        for attempt in range(3):
            self.port = free_port()
            cmd = ["-m", "streamk.cli", "serve", str(self.index), "--port", str(self.port), *self.args]
            if self.token:
                tf = self.tmp / "token.txt"
                tf.write_text(self.token + "\n")
                cmd += ["--token-file", str(tf)]
            self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop)
            self.proc = start_python(*cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
            if poll(self._healthy_or_gone, timeout, interval=0.2) == "healthy":
                return self
            self.stop()
            if "address already in use" not in self.log().lower():
                raise RuntimeError(f"streamk serve did not answer:\n{self.log()}")
        raise RuntimeError(f"streamk serve could not bind a port:\n{self.log()}")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self):
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, **kw):
        import httpx

        return httpx.Client(base_url=self.url, headers=self.headers, timeout=120, **kw)

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signal the server, wait for it (bounded); its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        stop(self.proc)
        self._log.close()
        return self.proc.returncode


def png_bytes(path):
    with open(path, "rb") as fh:
        return fh.read()


def child_pids(pid):
    """Live child processes of ``pid`` (from /proc)."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(x) for x in fh.read().split())
        except OSError:
            pass
    return out


# ---------------------------------------------------------------- tasks for the pool's tests
def rendezvous(ctx, item):
    """A pool task: mark this task present in ``folder``, then wait (bounded) until ``n``
    tasks are; (pid, whether they all met)."""
    folder, name, n, timeout = item
    Path(folder, name).touch()
    met = poll(lambda: len(list(Path(folder).iterdir())) >= n, timeout, interval=0.02)
    return os.getpid(), bool(met)


def held(ctx, item):
    """A pool task: touch ``started``, then wait (bounded) until ``go`` exists; the pid."""
    started, go, timeout = item
    Path(started).touch()
    poll(lambda: Path(go).exists(), timeout, interval=0.02)
    return os.getpid()


def touch(ctx, item):
    """A pool task that leaves the file ``item``: it ran."""
    Path(item).touch()
    return item


def die(ctx, item):
    """A pool task that kills its worker process, as a crash in a native library would."""
    os._exit(1)


def pid_of(ctx, item):
    return os.getpid()


def words_of(ctx, item):
    """A pool task: the number of visual words its worker describes with (None: none)."""
    return None if ctx["vocabulary"] is None else int(ctx["vocabulary"].n_words)


@contextmanager
def running_server(photos, folder, n=2, args=("--workers", "1")):
    """A started Server over an index of the first ``n`` photos in ``folder``, stopped on exit."""
    srv = Server(make_index(folder / "idx", photos, n=n), folder, args=list(args)).start()
    try:
        yield srv
    finally:
        srv.stop()

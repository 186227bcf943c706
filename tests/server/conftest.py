"""A small served index: textured photos (OpenCV SIFT, a VLAD k = 4 encoder, visual words
learned on their descriptors), and a real ``streamk serve`` on 127.0.0.1 in a child
process with default signal actions, stopped with bounded waits."""

import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("cv2")
httpx = pytest.importorskip("httpx")

from helpers.images import textured  # noqa: E402
from helpers.processes import start_python, stop  # noqa: E402

N_PHOTOS = 8


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def photos(tmp_path_factory):
    """N_PHOTOS textured grey photos of 256 px, and the encoder and words learned on them."""
    from streamk.encoding import Encoder
    from streamk.features import extract, make_extractor
    from streamk.verification import Vocabulary

    root = tmp_path_factory.mktemp("photos")
    paths = [textured(str(root / "imgs" / f"p{i}.png"), 100 + i, size=256) for i in range(N_PHOTOS)]
    ex = make_extractor("sift")
    feats = [extract(p, ex) for p in paths]
    enc = Encoder(embedding="vlad", k=4, aggregation="gmp").fit([f.descriptors for f in feats])
    vocab = Vocabulary(n_coarse=8, n_fine=8, min_per_word=4, max_iter=5, seed=0).fit(
        np.concatenate([f.descriptors for f in feats]))
    return {"root": root, "paths": paths, "encoder": enc, "extractor": ex, "vocabulary": vocab}


def make_index(path, photos, n=4):
    """An index of the first ``n`` photos (ids p0..), with local geometry."""
    from streamk.index import StreamingIndex

    with StreamingIndex.create(path, photos["encoder"], vector_dtype="float32", extractor=photos["extractor"],
                               vocabulary=photos["vocabulary"]) as idx:
        for i in range(n):
            idx.add(f"p{i}", image_path=photos["paths"][i])
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
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
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


@pytest.fixture
def make_server(tmp_path):
    servers = []

    def make(index, **kw):
        s = Server(index, tmp_path / f"srv{len(servers)}", **kw)
        servers.append(s)
        return s.start()
    yield make
    for s in servers:
        s.stop()


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

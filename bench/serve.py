"""The search server against the same work done in-process, measured in one run.

    python bench/serve.py [--images 40] [--queries 8] [--repeats 3] [--clients 8] [--per-client 4]

Index: the first ``--images`` photos of paris6k-subset (1024 px, Hessian-affine; features
from the feature cache), T-emb k = 16 GMP learned on them, the default 64 x 64 visual
words, built once in ~/.cache/streamk/bench/. Queries: the next ``--queries`` photos (not
in the index), uploaded as they are (1024 px JPEGs).

- in-process: ``StreamingIndex.search(path, k=10)`` in this process, one thread (BLAS,
  OpenMP, Numba), warm: read, extract, encode, search (first stage: ``verify=0,
  expand=0``; second stage: the defaults, R = 100, expansion over 50);
- server: ``streamk serve`` (uvicorn, token set) on 127.0.0.1, warm, the same photo's
  bytes uploaded to ``POST /search``, one request at a time, timed by the client from
  sending to the parsed answer, right after the same search in-process (alternated, so
  that other work on the machine slows both alike); ratio = server / in-process (target
  <= 1.2);
- load: ``--clients`` threads each uploading ``--per-client`` photos back to back (first
  stage), on a server with 1 and one with 2 encoding workers, ``--rounds`` runs each,
  alternated: p50, p99, errors, the cores the server and its workers used (their CPU
  seconds over the wall time: what the machine gave them), requests per second, and the
  throughput of 2 workers over 1 (target >= 1.7 on two free cores).

Prints, never asserts; the CPU model and the load average are in the titles. On a machine
shared with other work the load columns say how busy it was.
"""

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"  # the in-process reference runs on one thread, as one encoding worker does

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, load_str, log, table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.path.expanduser("~/.cache/streamk/bench"))


def build_index(photos, path):
    """The index of ``photos`` (built once): T-emb k = 16 GMP and visual words learned on them."""
    import hashlib


    from streamk.config import default_cache_dir
    from streamk.encoding import Encoder
    from streamk.features import FeatureCache, default_extractor, features_of_bytes
    from streamk.index import StreamingIndex, encoded_image_file
    from streamk.verification import Vocabulary, stored_record

    if (path / "data.mdb").exists():
        from streamk.errors import StreamkError

        try:
            StreamingIndex.open(path, readonly=True).close()
            return path
        except StreamkError as exc:  # built by an older streamk: built again
            log(f"rebuilding {path}: {exc}")
            import shutil

            shutil.rmtree(path)
    ex = default_extractor()
    cache = FeatureCache(default_cache_dir())
    feats = []
    for i, p in enumerate(photos):
        data = Path(p).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        feats.append((p, sha, features_of_bytes(data, p, ex, cache, sha)[0]))
        log(f"  features {i + 1}/{len(photos)}")
    enc = Encoder(embedding="temb", k=16, aggregation="gmp").fit([f.descriptors for _, _, f in feats])
    vocab = Vocabulary(seed=0).fit([f.descriptors for _, _, f in feats])
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    with StreamingIndex.create(tmp, enc, extractor=ex, vocabulary=vocab) as idx:
        encoded = []
        for p, sha, f in feats:
            v, alpha = enc.encode(f.descriptors, return_weights=True)
            encoded.append(encoded_image_file(Path(p).name, p, sha, v, f.keypoints, alpha, f.image_size,
                                              geometry=stored_record(vocab, f.keypoints, f.descriptors, f.image_size)))
        out = idx.write_encoded(encoded)
        assert all(o == "added" for o in out), out
    os.replace(tmp, path)
    return path


def time_search(idx, path, k, first_stage):
    t0 = time.perf_counter()
    idx.search(str(path), k=k, **({"verify": 0, "expand": 0} if first_stage else {}))
    return time.perf_counter() - t0


class Server:
    def __init__(self, index, workers):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.token = secrets.token_urlsafe(24)
        env = dict(os.environ, STREAMK_TOKEN=self.token, PYTHONPATH=str(REPO))
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "streamk.cli", "serve", str(index), "--port",
                                      str(self.port), "--workers", str(workers),
                                      "--max-connections-per-client", "0"],  # every client thread is 127.0.0.1
                                     env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        import httpx

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        self.log.seek(0)
        raise RuntimeError("streamk serve did not start:\n" + self.log.read().decode(errors="replace")[-3000:])

    def cpu_seconds(self):
        """CPU seconds (user + system) used so far by the server and its workers."""
        import psutil

        total = 0.0
        procs = [psutil.Process(self.proc.pid)]
        procs += procs[0].children(recursive=True)
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def client(self):
        import httpx

        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=300)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def upload(client, name, data, k, first_stage):
    fields = {"k": str(k)}
    if first_stage:
        fields.update(verify="0", expand="0")
    t0 = time.perf_counter()
    r = client.post("/search", files={"image": (name, data, "image/jpeg")}, data=fields)
    r.json()
    return time.perf_counter() - t0, r.status_code


def latencies(index, server, queries, payloads, repeats, k):
    """{(where, mode): [seconds]}: each photo searched in-process, then uploaded to the
    server, one after the other (a busy machine slows both alike)."""
    from streamk.index import StreamingIndex

    out = {(w, m): [] for w in ("in-process", "server") for m in ("first", "second")}
    with StreamingIndex.open(index, readonly=True) as idx, server.client() as c:
        for mode in ("first", "second"):  # warm both
            time_search(idx, queries[0], k, mode == "first")
            upload(c, *payloads[0], k, mode == "first")
        turn = 0
        for _ in range(repeats):
            for q, (name, data) in zip(queries, payloads):
                for mode in ("first", "second")[::1 - 2 * (turn % 2)]:  # each order as often
                    for where in ("in-process", "server")[::1 - 2 * (turn // 2 % 2)]:
                        if where == "in-process":
                            t = time_search(idx, q, k, mode == "first")
                        else:
                            t, status = upload(c, name, data, k, mode == "first")
                            assert status == 200, status
                        out[where, mode].append(t)
                turn += 1
    return out


def load(server, payloads, clients, per_client, k):
    """(latencies, errors, wall seconds) of ``clients`` threads uploading back to back."""
    lat, errors, lock = [], [0], threading.Lock()
    start = threading.Barrier(clients + 1)

    def run(i):
        with server.client() as c:
            start.wait()
            for j in range(per_client):
                name, data = payloads[(i + j) % len(payloads)]
                try:
                    t, status = upload(c, name, data, k, True)
                except Exception:  # noqa: BLE001 - counted, the run goes on
                    status, t = None, None
                with lock:
                    if status == 200:
                        lat.append(t)
                    else:
                        errors[0] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return lat, errors[0], time.perf_counter() - t0


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=40)
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--per-client", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2, help="load runs per worker count, alternated")
    ap.add_argument("-k", type=int, default=10)
    args = ap.parse_args()

    from streamk.datasets import load_dataset

    ds = load_dataset("paris6k-subset")
    photos = [str(ds.image_path(i)) for i in range(len(ds.image_ids))]
    index = build_index(photos[:args.images], CACHE / f"serve-index-{args.images}")
    queries = photos[args.images:args.images + args.queries]
    payloads = [(Path(q).name, Path(q).read_bytes()) for q in queries]
    cpu = cpu_model()
    log(f"index {index}: {args.images} photos; {len(queries)} query photos; {cpu}; load {load_str()}")

    one, two = Server(index, 1), Server(index, 2)
    try:
        lat = latencies(index, one, queries, payloads, args.repeats, args.k)
        log(f"latencies done; load {load_str()}")
        with two.client() as c:
            upload(c, *payloads[0], args.k, True)  # warm
        runs = {1: ([], 0, 0.0, 0.0), 2: ([], 0, 0.0, 0.0)}
        for r in range(args.rounds):  # alternated: a busy machine slows both alike
            for workers, srv in ((1, one), (2, two)):
                cpu0 = srv.cpu_seconds()
                l, e, w = load(srv, payloads, args.clients, args.per_client, args.k)
                acc = runs[workers]
                runs[workers] = (acc[0] + l, acc[1] + e, acc[2] + w, acc[3] + srv.cpu_seconds() - cpu0)
            log(f"load round {r + 1}/{args.rounds} done; load {load_str()}")
    finally:
        one.stop()
        two.stop()
    (lat1, err1, wall1, cpu1), (lat2, err2, wall2, cpu2) = runs[1], runs[2]
    ref = {m: lat["in-process", m] for m in ("first", "second")}
    served = {m: lat["server", m] for m in ("first", "second")}

    rows = []
    for mode, label in (("first", "first stage"), ("second", "+ second stage (R = 100, expand 50)")):
        a, b = statistics.median(ref[mode]), statistics.median(served[mode])
        rows.append([label, f"{1000 * a:.0f}", f"{1000 * b:.0f}", f"{b / a:.2f}"])
    own = [statistics.median(d["second"]) - statistics.median(d["first"]) for d in (ref, served)]
    rows.append(["the second stage's own cost", f"{1000 * own[0]:.0f}", f"{1000 * own[1]:.0f}",
                 f"{own[1] / own[0]:.2f}" if own[0] > 0 else "n/a"])
    table(["one 1024-px photo, warm (median ms)", "in-process", "server", "ratio"], rows,
          title=f"Upload -> results, T-emb k = 16, {args.images} images, {len(queries)} photos x {args.repeats}; "
                f"{cpu}; load {load_str()}")
    rows = []
    n = args.clients * args.per_client * args.rounds
    for workers, lats, err, wall, cpu_s in ((1, lat1, err1, wall1, cpu1), (2, lat2, err2, wall2, cpu2)):
        rows.append([workers, f"{args.clients} x {args.per_client} x {args.rounds}", err,
                     f"{1000 * pct(lats, 50):.0f}", f"{1000 * pct(lats, 99):.0f}",
                     f"{pct(lats, 99) / pct(lats, 50):.2f}", f"{cpu_s / wall:.2f}", f"{len(lats) / wall:.2f}"])
    rows[1].append(f"{(len(lat2) / wall2) / (len(lat1) / wall1):.2f}")
    rows[0].append("1.00")
    table(["encoding workers", "clients x requests x rounds", "errors", "p50 ms", "p99 ms", "p99/p50",
           "server cores used", "requests/s", "throughput vs 1"], rows,
          title=f"{args.clients} concurrent clients, first stage, {n} uploads per worker count (rounds "
                f"alternated); {cpu}; load {load_str()}")


if __name__ == "__main__":
    main()

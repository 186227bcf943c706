"""Reliability of the streaming index: SIGKILL during ingestion, a reader searching in
another process while this one writes, and bad input through the CLI.

Default run: 5 kills (a few seconds). ``--run-slow``: a 50-kill soak.
"""

import json
import random
import selectors
import signal
import subprocess
import textwrap

import numpy as np
import pytest

from helpers.index import vlad_encoder
from helpers.processes import kill_and_collect, run_python, start_python, stop
from streamk.index import MAX_BATCH, StreamingIndex
from streamk.index.store import OPTIONAL_SUBDBS, SUBDBS, row_key, seq_from_key
from streamk.index.integrity import CRC_BYTES, checksum_ok


@pytest.fixture(scope="module")
def encoder():
    return vlad_encoder(8, 40)


def vector_of(i, dim):
    """The vector the writer adds as id f"v{i}" (known to both sides)."""
    v = np.random.default_rng(1000 + i).standard_normal(dim)
    return (v / np.linalg.norm(v)).astype(np.float32)


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from streamk.index import StreamingIndex

    path, n = sys.argv[1], int(sys.argv[2])
    idx = StreamingIndex.open(path)
    dim = idx.encoder.dim
    for i in range(n):
        v = np.random.default_rng(1000 + i).standard_normal(dim)
        v = (v / np.linalg.norm(v)).astype(np.float32)
        idx.add(f"v{i}", vector=v)          # same id + same content again: returns, writes nothing
        sys.stdout.write(f"v{i}\\n")
        sys.stdout.flush()
    idx.close()
    sys.stdout.write("done\\n")
    sys.stdout.flush()
""")


def check_consistent(path, dim):
    """Open the index; every sub-db readable; counts and cross-references consistent.
    Returns {id: vector}."""
    with StreamingIndex.open(path) as idx:
        dump = idx.store.dump()  # reads every key and value of every sub-db
        assert set(dump) == set(SUBDBS + OPTIONAL_SUBDBS)
        images, hashes, row_ids = dump["images"], dump["hashes"], dump["row_ids"]
        assert all(checksum_ok(r) for r in images.values())  # format 4: each record sealed with its CRC32C
        images = {k: r[:-CRC_BYTES] for k, r in images.items()}
        assert set(images) == set(row_ids.values())
        assert all(row_ids[row_key(json.loads(r)["row"])] == k for k, r in images.items())
        assert len(hashes) == len(images)
        for ck, key in hashes.items():
            assert json.loads(images[key])["content_key"] == ck.hex()
        seq = seq_from_key(dump["meta"][b"seq"])
        assert len(dump["log"]) == seq
        assert sorted(seq_from_key(k) for k in dump["log"]) == list(range(1, seq + 1))
        assert sorted(json.loads(r)["seq"] for r in images.values()) == sorted(
            seq_from_key(k) for k, v in dump["log"].items() if v[:1] == b"+")
        out = {k.decode(): idx.vector(k.decode()) for k in images}
        assert all(v.shape == (dim,) for v in out.values())
        # a reader finds every image by its own vector (in batches of at most MAX_BATCH queries, the search's limit)
        ids = list(out)
        for at in range(0, len(ids), MAX_BATCH):
            part = ids[at:at + MAX_BATCH]
            _, found = idx.search(np.stack([out[i] for i in part]), k=1, mode="exact")
            assert list(found[:, 0]) == part
        return out


def _read_first_line(proc, timeout):
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout=timeout):
            return None
        return proc.stdout.readline()
    finally:
        sel.close()


def crash_loop(tmp_path, encoder, kills, n, seed):
    path = tmp_path / "ix"
    StreamingIndex.create(path, encoder, vector_dtype="float32").close()
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    rng = random.Random(seed)
    printed = set()
    killed = 0
    for _ in range(kills):
        proc = start_python(script, path, n, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = ""
        try:
            first = _read_first_line(proc, timeout=60) or ""
            assert first, proc.stderr.read() if proc.poll() is not None else "no output in 60 s"
            for _ in range(rng.randrange(40)):  # a random moment while adding: after 0-39 more adds
                line = _read_first_line(proc, timeout=60)
                if not line:
                    break
                first += line
        finally:
            lines = kill_and_collect(proc, first)  # a partial last line was not a completed print
        killed += proc.returncode == -signal.SIGKILL
        printed.update(ln for ln in lines if ln.startswith("v"))
        stored = check_consistent(path, encoder.dim)
        missing = printed - set(stored)
        assert not missing, f"printed (added) before the kill but not stored: {sorted(missing)[:5]}"
        for i in printed:
            assert np.allclose(stored[i], vector_of(int(i[1:]), encoder.dim), atol=1e-6), i
        # whatever is stored is right, printed or not (the kill may land between add and print)
        for i, v in stored.items():
            assert np.allclose(v, vector_of(int(i[1:]), encoder.dim), atol=1e-6), i
    assert killed >= 1
    # re-running completes the set, with no duplicates
    done = run_python(script, path, n, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "done"
    stored = check_consistent(path, encoder.dim)
    assert sorted(stored) == sorted(f"v{i}" for i in range(n))
    with StreamingIndex.open(path) as idx:
        assert idx.store.count("hashes") == n and len(idx) == n
        hits = idx.search(vector_of(7, encoder.dim), k=2)
        assert hits[0][0] == "v7" and hits[0][1] == pytest.approx(1.0, abs=1e-5)


def test_sigkill_during_ingestion(tmp_path, encoder):
    crash_loop(tmp_path, encoder, kills=5, n=400, seed=1)


@pytest.mark.slow
def test_sigkill_soak(tmp_path, encoder):
    crash_loop(tmp_path, encoder, kills=50, n=3000, seed=2)


SEARCHER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from streamk.index import StreamingIndex

    path, n, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    idx = StreamingIndex.open(path, readonly=True)
    dim = idx.encoder.dim
    targets = {}
    for i in range(n):
        v = np.random.default_rng(1000 + i).standard_normal(dim)
        targets[f"v{i}"] = (v / np.linalg.norm(v)).astype(np.float32)
    print("ready", flush=True)
    deadline = time.monotonic() + timeout
    searches = 0
    while targets and time.monotonic() < deadline:
        for t, v in list(targets.items()):
            hits = idx.search(v, k=3)
            searches += 1
            if hits and hits[0][0] == t and hits[0][1] > 0.999:
                print("seen", t, flush=True)
                del targets[t]
    print("searches", searches, flush=True)
    idx.close()
    sys.exit(0 if not targets else 3)
""")


def test_search_in_another_process_while_ingesting(tmp_path, encoder):
    path = tmp_path / "ix"
    n = 60
    with StreamingIndex.create(path, encoder, vector_dtype="float16") as idx:
        idx.add("seed", vector=np.ones(encoder.dim))  # so searches have something from the start
    script = tmp_path / "searcher.py"
    script.write_text(SEARCHER)
    proc = start_python(script, path, n, "60", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert (_read_first_line(proc, timeout=60) or "").strip() == "ready"
        with StreamingIndex.open(path) as idx:
            for start in range(0, n, 10):  # single adds and batches, interleaved with the reader
                if start % 20:
                    for i in range(start, start + 10):
                        idx.add(f"v{i}", vector=vector_of(i, encoder.dim))
                else:
                    res = idx.add_many([{"id": f"v{i}", "vector": vector_of(i, encoder.dim)}
                                        for i in range(start, start + 10)], batch_size=4)
                    assert all(r.status == "added" for r in res)
        out, err = proc.communicate(timeout=90)
    finally:
        stop(proc)
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    assert "Traceback" not in err and "Error" not in err
    seen = {ln.split()[1] for ln in out.splitlines() if ln.startswith("seen ")}
    assert seen == {f"v{i}" for i in range(n)}


def test_cli_search_while_cli_ingest_runs(tmp_path, encoder, wait_until):
    """The reverse: `streamk ingest` (images) in a subprocess, searching here meanwhile."""
    pytest.importorskip("cv2")
    from PIL import Image, ImageFilter

    from streamk.cli import main

    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(8):
        a = np.random.default_rng(50 + i).integers(0, 256, (16, 16)).astype(np.uint8)
        Image.fromarray(a).resize((128, 128), Image.Resampling.BICUBIC).filter(
            ImageFilter.GaussianBlur(1)).save(folder / f"p{i}.png")
    enc_path = tmp_path / "enc.npz"
    encoder.save(enc_path)
    path = tmp_path / "ix"
    assert main(["index", "create", str(path), "--encoder", str(enc_path), "--extractor", "sift",
                 "--vector-dtype", "float32"]) == 0
    with StreamingIndex.open(path, readonly=True) as reader:
        query = reader.query_vector(str(folder / "p5.png"))
        proc = start_python("-m", "streamk.cli", "ingest", path, folder, "--workers", "1", "--batch-size", "1",
                            "--no-progress", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            def p5_on_top():
                hits = reader.search(query, k=3)  # searching all along, while the writer adds
                return bool(hits) and hits[0][0] == "p5.png" and hits[0][1] > 0.999
            wait_until(lambda: p5_on_top() or proc.poll() is not None, 60, "p5.png in the reader's results")
            hits = reader.search(query, k=3)
            found = bool(hits) and hits[0][0] == "p5.png"
            out, err = proc.communicate(timeout=60)
        finally:
            stop(proc)
        assert found
        assert proc.returncode == 0, err
        assert "added 8, skipped 0 existing, failed 0" in out
        reader.refresh()
        assert len(reader) == 8


def test_bad_input_via_cli_leaves_index_unchanged(tmp_path, encoder, capsys):
    pytest.importorskip("cv2")
    from PIL import Image, ImageFilter

    from streamk.cli import main

    enc_path = tmp_path / "enc.npz"
    encoder.save(enc_path)
    path = tmp_path / "ix"
    assert main(["index", "create", str(path), "--encoder", str(enc_path), "--extractor", "sift"]) == 0
    good = tmp_path / "good"
    good.mkdir()
    a = np.random.default_rng(3).integers(0, 256, (16, 16)).astype(np.uint8)
    img = Image.fromarray(a).resize((128, 128), Image.Resampling.BICUBIC).filter(ImageFilter.GaussianBlur(1))
    img.save(good / "g.png")
    assert main(["ingest", str(path), str(good), "--workers", "1", "--no-progress"]) == 0
    with StreamingIndex.open(path) as idx:
        before = idx.store.dump()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "photo.jpg").mkdir()  # a directory named like an image
    (bad / "empty.png").write_bytes(b"")
    data = (good / "g.png").read_bytes()
    (bad / "truncated.png").write_bytes(data[: len(data) // 2])
    (bad / "text.jpg").write_text("not an image at all\n")
    (bad / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 3)
    Image.new("L", (80, 80), 128).save(bad / "flat.png")  # decodes, but has no features
    expected = {"photo.jpg": "is a directory", "empty.png": "empty file", "truncated.png": "truncated",
                "text.jpg": "not a recognised image format", "corrupt.png": "image",
                "flat.png": "no local features"}
    capsys.readouterr()
    rc = main(["ingest", str(path), str(bad), "--workers", "2", "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 1
    assert "added 0, skipped 0 existing, failed 6" in cap.out
    for name, words in expected.items():
        hits = [ln for ln in cap.err.splitlines() if f"{bad / name}:" in ln]
        assert len(hits) == 1 and words in hits[0], (name, cap.err)
    with StreamingIndex.open(path) as idx:
        assert idx.store.dump() == before
    # the bad files given one by one, too
    for name in expected:
        assert main(["ingest", str(path), str(bad / name), "--workers", "1", "--no-progress"]) == 1
    with StreamingIndex.open(path) as idx:
        assert idx.store.dump() == before

"""One ingestion pipeline on two executors: the local crash-isolating pool and a Dask
cluster (a LocalCluster of 2 single-threaded worker processes). Same vectors on
both; a Dask worker killed with SIGKILL mid-ingestion loses nothing; the local
pool's workers die with a ``streamk ingest`` killed with SIGKILL; known content
is only hashed; the feature cache is used; encoders are trained on a bounded
sample gathered on the workers."""

import hashlib
import os
import signal
import subprocess
import threading
import uuid

import numpy as np
import pytest

from streamk import Encoder
from streamk.pipeline import extract_many  # noqa: E402
from streamk.index import StreamingIndex
from streamk.pipeline.ingest import Ingester
from streamk.pipeline.encoder_training import (learning_descriptors, sample_images, train_encoder,
                                               vocabulary_descriptors_per_image)
from streamk.pipeline.tasks import sample_rows
from streamk.parallel import InlineExecutor

pytest.importorskip("cv2")
psutil = pytest.importorskip("psutil")
distributed = pytest.importorskip("distributed")
pytest.importorskip("PIL")
from helpers.images import textured  # noqa: E402
from helpers.processes import start_python, subprocess_env  # noqa: E402
from helpers.waiting import poll  # noqa: E402
from PIL import Image  # noqa: E402

from streamk import features as F  # noqa: E402



@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("distributed")
    imgs = root / "imgs"
    for i in range(8):
        textured(str(imgs / f"img{i}.png"), 100 + i, size=128 + 32 * (i % 3))
    (imgs / "broken.jpg").write_text("not an image")
    Image.new("L", (96, 96), 128).save(imgs / "flat.png")  # no features
    feats, _ = extract_many(sorted(str(p) for p in imgs.glob("img*.png")), F.make_extractor("sift"),
                              workers=1, progress=False)
    Encoder(embedding="vlad", k=4, aggregation="gmp").fit([f.descriptors for f in feats.values()]).save(
        root / "enc.npz")
    return root


def new_index(path, work):
    return StreamingIndex.create(path, Encoder.load(work / "enc.npz"), vector_dtype="float32",
                                 extractor=F.make_extractor("sift"))


def stored(path):
    with StreamingIndex.open(path, readonly=True) as idx:
        return {i: idx.vector(i) for i in idx.ids()}


def quiet():
    failures = {}
    return failures, lambda path, reason: failures.__setitem__(os.path.basename(path), reason)


# --------------------------------------------------------------------------- same results
def test_dask_ingestion_gives_the_local_pools_vectors(work, tmp_path, client):
    from streamk.parallel import DaskExecutor

    runs = {}
    for name, kwargs in (("pool", {"workers": 2}), ("dask", {"executor": DaskExecutor(client)})):
        failures, report = quiet()
        with new_index(tmp_path / name, work) as idx, Ingester(idx, report=report, progress=False,
                                                               batch_size=3, **kwargs) as ing:
            stats = ing.ingest([work / "imgs"])
        runs[name] = (stats.added, stats.existing, failures, stored(tmp_path / name))
    pool, dask = runs["pool"], runs["dask"]
    assert pool[:2] == dask[:2] == (8, 0)
    assert pool[2] == dask[2] and sorted(pool[2]) == ["broken.jpg", "flat.png"]
    assert "not a recognised image" in dask[2]["broken.jpg"] and "no local features" in dask[2]["flat.png"]
    assert sorted(pool[3]) == sorted(dask[3]) == [f"img{i}.png" for i in range(8)]
    for i, v in pool[3].items():
        np.testing.assert_allclose(dask[3][i], v, atol=1e-6)
    # and both are the vectors add(image_path=...) gives in this process
    with StreamingIndex.open(tmp_path / "dask", readonly=True) as idx:
        np.testing.assert_allclose(dask[3]["img5.png"], idx.query_vector(str(work / "imgs" / "img5.png")),
                                   atol=1e-6)


# --------------------------------------------------------------------------- a killed Dask worker
def _gated_sift(folder):
    """In each worker: once ``folder``/gate exists, OpenCV SIFT holds each image (marking
    ``held-<pid>``) until ``folder``/release exists (bounded): the test kills a worker
    while it surely runs a task."""
    from helpers.waiting import poll
    from streamk import features

    if not hasattr(features.OpenCVSift, "_fast_detect"):
        features.OpenCVSift._fast_detect = features.OpenCVSift._detect

        def held(self, gray):
            if os.path.exists(os.path.join(folder, "gate")):
                open(os.path.join(folder, f"held-{os.getpid()}"), "w").close()
                poll(lambda: os.path.exists(os.path.join(folder, "release")), 60, interval=0.02)
            return self._fast_detect(gray)
        features.OpenCVSift._detect = held
    return os.getpid()


def _fast_sift():
    from streamk import features

    if hasattr(features.OpenCVSift, "_fast_detect"):
        features.OpenCVSift._detect = features.OpenCVSift._fast_detect
        del features.OpenCVSift._fast_detect


def test_a_dask_worker_killed_mid_ingestion_loses_nothing(work, tmp_path, client):
    from streamk.parallel import DaskExecutor

    killed = {}
    gates = tmp_path / "gates"
    gates.mkdir()

    def kill_a_holder(client):
        held = poll(lambda: sorted(gates.glob("held-*")), 60, "a Dask worker holding an image")
        killed["pid"] = int(held[0].name.split("-")[1])
        worker = next(w for w, pid in client.run(os.getpid).items() if pid == killed["pid"])
        killed["tasks"] = client.processing(workers=[worker])[worker]
        os.kill(killed["pid"], signal.SIGKILL)
        (gates / "release").touch()

    class KillingExecutor(DaskExecutor):
        """After the first result, kills (SIGKILL) a worker while it holds an image (the
        tasks started from then on wait for the release), then releases the others. The
        kill waits beside the run, which goes on sending tasks: the ones in flight at the
        first result may all be past the gate already."""

        def map_unordered(self, *args, **kwargs):
            killer = None
            try:
                for n, out in enumerate(super().map_unordered(*args, **kwargs)):
                    if n == 0:
                        (gates / "gate").touch()
                        killer = threading.Thread(target=kill_a_holder, args=(self.client,), daemon=True)
                        killer.start()
                    yield out
            finally:
                if killer is not None:
                    killer.join(timeout=120)

    pids_before = set(client.run(_gated_sift, str(gates)).values())
    failures, report = quiet()
    with new_index(tmp_path / "ix", work) as idx:
        with Ingester(idx, executor=KillingExecutor(client), batch_size=1, report=report, progress=False) as ing:
            stats = ing.ingest([work / "imgs"])
        assert killed["pid"] in pids_before and killed["tasks"]
        # its task was run again elsewhere: the run is complete, nothing reported but the bad files
        assert stats.added == 8 and sorted(failures) == ["broken.jpg", "flat.png"]
    client.wait_for_workers(2, timeout=60)  # the nanny restarted the killed process
    assert killed["pid"] not in set(client.run(os.getpid).values())
    # a second run: everything is there, only hashed
    with StreamingIndex.open(tmp_path / "ix") as idx:
        with Ingester(idx, executor=DaskExecutor(client), report=report, progress=False) as ing:
            again = ing.ingest([work / "imgs"])
        assert (again.added, again.existing) == (0, 8)
        ref = {i: idx.query_vector(str(work / "imgs" / i)) for i in ("img0.png", "img7.png")}
    client.run(_fast_sift)
    got = stored(tmp_path / "ix")
    assert sorted(got) == [f"img{i}.png" for i in range(8)]
    for i, v in ref.items():
        np.testing.assert_allclose(got[i], v, atol=1e-6)


# --------------------------------------------------------------------------- local pool: death with the parent
@pytest.fixture(scope="module")
def many(tmp_path_factory, work):
    folder = tmp_path_factory.mktemp("many")
    for i in range(40):
        textured(str(folder / f"m{i:02d}.png"), 500 + i, size=384)
    return folder


def marked(mark):
    """Processes (alive, not zombies) whose environment carries ``mark``."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("STREAMK_TEST_MARK") == mark:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


@pytest.mark.parametrize("moment,executor", [("workers starting", "--workers=2"), ("workers busy", "--workers=2"),
                                             ("workers busy", "--dask=local:2")])
def test_workers_die_with_a_sigkilled_streamk_ingest(moment, executor, work, many, tmp_path, wait_until):
    ix = tmp_path / "ix"
    new_index(ix, work).close()
    mark = uuid.uuid4().hex
    proc = start_python("-m", "streamk.cli", "ingest", ix, many, executor, "--batch-size", "1", "--no-progress",
                        "--no-cache", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                        env=subprocess_env(STREAMK_TEST_MARK=mark))
    try:
        parent = psutil.Process(proc.pid)
        if moment == "workers starting":  # the first child seen: it is still importing
            wait_until(lambda: parent.children() or proc.poll() is not None, 60, "a worker process")
        else:
            def committed():
                with StreamingIndex.open(ix, readonly=True) as idx:
                    return len(idx) > 0
            wait_until(lambda: committed() or proc.poll() is not None, 120, "a first committed image")
            assert len(parent.children()) >= 2
        assert proc.poll() is None, proc.stderr.read()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        wait_until(lambda: not marked(mark), 30, "the workers of the killed streamk ingest to exit")
    finally:
        for p in marked(mark):
            p.kill()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
    # and a resumed run completes
    with StreamingIndex.open(ix) as idx, Ingester(idx, workers=2, progress=False) as ing:
        stats = ing.ingest([many])
        assert stats.added + stats.existing == 40 and len(idx) == 40


# --------------------------------------------------------------------------- resume and cache
@pytest.fixture
def count_detect(monkeypatch):
    """Counts OpenCV SIFT detections in this process."""
    calls = []
    detect = F.OpenCVSift._detect
    monkeypatch.setattr(F.OpenCVSift, "_detect", lambda self, gray: calls.append(1) or detect(self, gray))
    return calls


def test_resume_hashes_stored_files_without_extracting(work, tmp_path, count_detect):
    ix = tmp_path / "ix"
    with new_index(ix, work) as idx:
        Ingester(idx, workers=1, progress=False, report=lambda p, r: None).ingest([work / "imgs"])
    count_detect.clear()
    # one stored file changed under its name: reported, not extracted, the stored one kept
    changed = tmp_path / "changed"
    changed.mkdir()
    textured(str(changed / "img3.png"), 999)
    failures, report = quiet()
    with StreamingIndex.open(ix) as idx:
        before = idx.store.dump()
        stats = Ingester(idx, workers=1, progress=False, report=report).ingest([work / "imgs", changed])
        assert (stats.added, stats.existing) == (0, 8)
        assert "IdExistsError" in failures["img3.png"]
        assert idx.store.dump() == before
    assert len(count_detect) == 1  # flat.png only: never stored (no features), so extracted again


def test_ingestion_fills_and_uses_the_feature_cache(work, tmp_path, count_detect):
    cache = tmp_path / "cache"
    with new_index(tmp_path / "a", work) as idx:
        Ingester(idx, workers=2, cache_dir=cache, progress=False, report=lambda p, r: None).ingest([work / "imgs"])
    ex = F.make_extractor("sift")
    for i in range(8):
        sha = hashlib.sha256((work / "imgs" / f"img{i}.png").read_bytes()).hexdigest()
        assert F.FeatureCache(cache).get(sha, ex) is not None
    count_detect.clear()
    with new_index(tmp_path / "b", work) as idx:  # another index of the same folder: no extraction
        stats = Ingester(idx, workers=1, cache_dir=cache, progress=False,
                         report=lambda p, r: None).ingest([work / "imgs"])
        assert stats.added == 8
    assert len(count_detect) == 0  # every image from the cache (flat.png's empty set too)
    a, b = stored(tmp_path / "a"), stored(tmp_path / "b")
    for i in a:
        np.testing.assert_allclose(a[i], b[i], atol=1e-6)


# --------------------------------------------------------------------------- training on a sample
def test_sampling_is_bounded_seeded_and_content_keyed():
    paths = [f"p{i}" for i in range(50)]
    s = sample_images(paths, 10, seed=3)
    assert len(s) == 10 and s == sample_images(paths, 10, seed=3) and s != sample_images(paths, 10, seed=4)
    assert [p for p in paths if p in s] == s  # the given order
    assert sample_images(paths, None) == paths == sample_images(paths, 80)
    sha = "ab" * 32
    r = sample_rows(1000, 100, 0, sha)
    assert len(r) == 100 and len(set(r.tolist())) == 100 and np.all(np.diff(r) > 0) and r.max() < 1000
    assert np.array_equal(r, sample_rows(1000, 100, 0, sha))
    assert not np.array_equal(r, sample_rows(1000, 100, 0, "cd" * 32))
    assert np.array_equal(sample_rows(50, 100, 0, sha), np.arange(50))


@pytest.mark.parametrize("config", [{"embedding": "vlad", "k": 4},
                                    {"embedding": "temb", "k": 3, "rn": True, "dim": 20}])
def test_training_on_every_image_and_descriptor_is_encoder_fit(config, work):
    paths = sorted(str(p) for p in (work / "imgs").glob("img*.png"))
    ex = F.make_extractor("sift")
    enc, info = train_encoder(paths + [str(work / "imgs" / "flat.png")], config, ex, InlineExecutor(),
                              max_images=None, descriptors_per_image=None)
    sets = [ex.extract(p).descriptors for p in paths]
    assert info.images == 8 and info.descriptors == sum(map(len, sets)) and list(info.failed) == [
        str(work / "imgs" / "flat.png")]
    assert info.rn_images == (8 if config.get("rn") else 0)
    assert enc.fingerprint == Encoder(**config).fit(sets).fingerprint


def test_training_sample_through_dask_matches_in_process(work, client):
    from streamk.parallel import DaskExecutor

    paths = sorted(str(p) for p in (work / "imgs").glob("img*.png"))
    ex = F.make_extractor("sift")
    config = {"embedding": "temb", "k": 3, "rn": True, "dim": 4}  # 6 images: RN is defined on 5 dims
    local, info = train_encoder(paths, config, ex, InlineExecutor(), max_images=6, descriptors_per_image=40, seed=1)
    remote, rinfo = train_encoder(paths, config, ex, DaskExecutor(client), max_images=6, descriptors_per_image=40,
                                  seed=1)
    assert info.images == rinfo.images == 6 and info.descriptors == rinfo.descriptors <= 6 * 40
    np.testing.assert_allclose(local.embedding.centroids_, remote.embedding.centroids_, atol=1e-5)
    X = ex.extract(paths[0]).descriptors
    np.testing.assert_allclose(local.encode(X), remote.encode(X), atol=1e-4)


def test_visual_words_of_a_small_collection_learn_on_enough_descriptors(work):
    """The encoder learns on its sample (descriptors_per_image); the visual words on enough
    descriptors for the vocabulary's full size, here every one of 8 images' (fails when they
    learn on the encoder's sample: fewer, coarser words)."""
    from streamk.verification import Vocabulary

    full = Vocabulary().full_learning_size
    assert full == 64 * 64 * 32
    for n in (1, 8, 50, 262, 263, 1000):
        per = vocabulary_descriptors_per_image(n, 500)
        assert per >= 500 and n * per >= full  # enough for the full size
        assert per == 500 or n * (per - 1) < full  # and no more than it asks (rounded up per image)
    assert vocabulary_descriptors_per_image(263, 500) == 500 and vocabulary_descriptors_per_image(8, None) is None
    paths = sorted(str(p) for p in (work / "imgs").glob("img*.png"))
    ex = F.make_extractor("sift")
    sets = [ex.extract(p).descriptors for p in paths]
    config = {"embedding": "vlad", "k": 4}
    enc, info = train_encoder(paths, config, ex, InlineExecutor(), max_images=None, descriptors_per_image=40,
                              vocabulary=True)
    plain, _ = train_encoder(paths, config, ex, InlineExecutor(), max_images=None, descriptors_per_image=40)
    assert enc.fingerprint == plain.fingerprint and info.descriptors == sum(min(len(X), 40) for X in sets)
    assert info.vocabulary.fingerprint_ == Vocabulary(seed=0).fit(sets).fingerprint_
    alone, _ = learning_descriptors(paths, ex, InlineExecutor(), None, 40, vocabulary=True)
    assert [len(X) for X in alone] == [len(X) for X in sets]


# --------------------------------------------------------------------------- the command line
def test_cli_create_and_ingest_on_a_scheduler_address(work, tmp_path, client, capsys):
    from streamk.cli import main

    address = client.scheduler.address
    ix = tmp_path / "ix"
    assert main(["index", "create", str(ix), "--train", str(work / "imgs"), "--extractor", "sift", "--k", "4",
                 "--embedding", "vlad", "--vector-dtype", "float32", "--train-images", "5",
                 "--train-descriptors", "30", "--dask", address, "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "images (a sample of 10; dask)" in out and "trained vlad k=4" in out, out
    with StreamingIndex.open(ix) as idx:
        assert idx.encoder.embedding.centroids_.shape == (4, 128)
    assert main(["ingest", str(ix), str(work / "imgs"), "--dask", address, "--no-progress", "--no-cache"]) == 1
    cap = capsys.readouterr()
    assert "added 8, skipped 0 existing, failed 2" in cap.out
    assert "broken.jpg" in cap.err and "flat.png" in cap.err
    assert len(client.nthreads()) == 2  # a given cluster is left running

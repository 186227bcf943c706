"""CLI: ``streamk index create``, ``streamk ingest`` (resumable, bad files, --watch) and
``streamk search``, on small synthetic textured PNGs with OpenCV SIFT and a tiny encoder."""

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from streamk import Encoder
from streamk.cli import main
from streamk.index import StreamingIndex
from streamk.pipeline.ingest import Ingester, id_for, image_content_key, scan

pytest.importorskip("cv2")
PIL = pytest.importorskip("PIL")
from helpers.images import textured  # noqa: E402
from helpers.processes import run_python, start_python, stop, subprocess_env  # noqa: E402
from PIL import Image  # noqa: E402



def make_bad(folder):
    """The bad inputs: {file name: expected words in the reason}."""
    os.makedirs(folder / "dir.jpg")
    (folder / "empty.png").write_bytes(b"")
    good = textured(str(folder / "_tmp.png"), 99)
    data = open(good, "rb").read()
    os.unlink(good)
    (folder / "truncated.png").write_bytes(data[: len(data) // 3])
    (folder / "notimage.jpg").write_text("hello, not an image\n")
    (folder / "corrupt.jpg").write_bytes(bytes(np.random.default_rng(5).integers(0, 256, 700, dtype=np.uint8)))
    Image.new("L", (96, 96), 128).save(folder / "grey.png")
    return {"dir.jpg": "directory", "empty.png": "empty", "truncated.png": "truncated",
            "notimage.jpg": "not a recognised image", "corrupt.jpg": "image",
            "grey.png": "no local features"}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("ingest")
    imgs = root / "imgs"
    for i in range(5):
        textured(str(imgs / f"img{i}.png"), i)
    textured(str(imgs / "sub" / "img5.png"), 5)
    from streamk.features import make_extractor
    from streamk.pipeline import extract_many
    feats, _ = extract_many(sorted(str(p) for p in imgs.rglob("*.png")), make_extractor("sift"),
                            workers=1, progress=False)
    enc = Encoder(embedding="vlad", k=4, aggregation="gmp").fit([f.descriptors for f in feats.values()])
    enc.save(root / "enc.npz")
    return root


def create(path, work, *extra):
    assert main(["index", "create", str(path), "--encoder", str(work / "enc.npz"), "--extractor", "sift",
                 "--vector-dtype", "float32", *extra]) == 0


def test_scan_ids_and_content_key(work, tmp_path):
    found, bad = scan([str(work / "imgs"), str(work / "imgs" / "img0.png"), str(tmp_path / "missing")])
    ids = [i for _, i in found]
    assert ids == ["img0.png", "img1.png", "img2.png", "img3.png", "img4.png", "sub__img5.png", "img0.png"]
    assert bad == [(str(tmp_path / "missing"), "ImageReadError: no such file or directory")]
    assert id_for("a/b/c.png") == "c.png"
    # the content key is the index's own: add() of the same file is then "already there"
    ix = tmp_path / "ix"
    create(ix, work)
    with StreamingIndex.open(ix) as idx:
        idx.add("x", image_path=str(work / "imgs" / "img0.png"))
        import hashlib
        sha = hashlib.sha256((work / "imgs" / "img0.png").read_bytes()).hexdigest()
        assert idx.info("x")["content_key"] == image_content_key(sha).hex()


def test_one_folder_given_as_a_str_or_path_is_one_root(work, tmp_path):
    """The library calls take "files and folders" or one of them: a str was iterated as its
    characters (create_index(train="photos") reported 'skipped p', 'skipped h', ... and found no
    image)."""
    from pathlib import Path

    from streamk.pipeline import collect_images, create_index, run_ingest

    imgs = str(work / "imgs")
    assert scan(imgs) == scan([imgs]) == scan(Path(imgs))
    assert len(collect_images(imgs)[0]) == 6
    ix = create_index(tmp_path / "ix", train=imgs, extractor="sift", k=4, embedding="vlad", workers=1,
                      local_features=False, log=lambda m: None)
    assert run_ingest(ix, imgs, workers=1, progress=False, log=lambda m: None).added == 6


def test_a_file_whose_id_is_over_the_store_s_length_gets_a_shortened_one(work, tmp_path, capsys):
    """A 250-character file name (Linux takes 255 bytes), or a deep folder, gave an id over the
    store's 200 characters: the file could not be ingested at all ("InvalidIdError: an image id
    must have 1..200 characters, got 254"). Such an id is now a digest of the whole and its end."""
    from streamk.index import MAX_ID_CHARS, MAX_KEY_BYTES, validate_id

    long_name = "v" * 246 + ".png"
    folder = tmp_path / "photos"
    for sub in ("a", "b"):  # two long paths that end alike
        (folder / sub).mkdir(parents=True)
        source = work / "imgs" / ("img1.png" if sub == "a" else "img2.png")
        (folder / sub / long_name).write_bytes(source.read_bytes())
    deep = folder.joinpath(*["deep folder %d" % i for i in range(16)])
    deep.mkdir(parents=True)
    (deep / "photo.png").write_bytes((work / "imgs" / "img3.png").read_bytes())
    found, bad = scan(folder)
    ids = [i for _, i in found]
    assert not bad and len(set(ids)) == 3
    for i in ids:
        assert validate_id(i) and len(i) <= MAX_ID_CHARS and len(i.encode()) <= MAX_KEY_BYTES
    by_path = {os.path.relpath(p, folder): i for p, i in found}
    a, b = by_path[os.path.join("a", long_name)], by_path[os.path.join("b", long_name)]
    assert a != b and a.endswith("vvv.png") and b.endswith("vvv.png") and a[16] == b[16] == "~"
    assert by_path[os.path.relpath(deep / "photo.png", folder)].endswith("deep folder 15__photo.png")
    assert id_for(folder / "a" / long_name, folder) == a  # what a rerun finds: the same id
    assert id_for("x" * 300 + "é" * 200 + ".png") == id_for("x" * 300 + "é" * 200 + ".png")  # a fixed function
    wide = id_for("🙂" * 200 + ".png")
    assert len(wide.encode()) <= MAX_KEY_BYTES and validate_id(wide)
    ix = tmp_path / "ix"
    create(ix, work)
    capsys.readouterr()
    assert main(["ingest", str(ix), str(folder), "--workers", "1", "--no-progress"]) == 0
    assert "added 3" in capsys.readouterr().out
    with StreamingIndex.open(ix) as idx:
        assert sorted(idx.ids()) == sorted(ids)


def test_create_errors_write_nothing(work, tmp_path, capsys):
    ix = tmp_path / "ix"
    assert main(["index", "create", str(ix), "--encoder", str(tmp_path / "nope.npz")]) == 3  # EncoderFileError
    assert "streamk: error:" in capsys.readouterr().err
    assert not ix.exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    assert main(["index", "create", str(tmp_path / "full"), "--encoder", str(work / "enc.npz")]) == 4
    assert sorted(os.listdir(tmp_path / "full")) == ["keep.txt"]
    # training on images without features: error, nothing created
    Image.new("L", (64, 64), 128).save(tmp_path / "grey.png")
    assert main(["index", "create", str(ix), "--train", str(tmp_path / "grey.png"), "--extractor", "sift",
                 "--k", "4", "--workers", "1"]) == 3
    assert "no local features" in capsys.readouterr().err
    assert not ix.exists()
    # neither an encoder nor images: the default encoder (tests/pipeline/test_default_encoder.py);
    # a missing encoder with images: a named error
    assert main(["index", "create", str(ix), "--encoder", str(tmp_path / "nope.npz"), "--train", str(work)]) == 3
    assert not ix.exists()


def test_a_vocabulary_no_machine_can_fit_is_refused_before_the_extraction(work, tmp_path, capsys, monkeypatch):
    """--vocab-size 4096: a T-emb whitening of 524,288 x 524,288 float64 (petabytes). Refused
    before any image is read (it was refused, if at all, by the system killing the fit)."""
    from streamk.pipeline import encoder_training

    read = []
    monkeypatch.setattr(encoder_training, "sample_images", lambda *a, **k: read.append(1) or [])
    ix = tmp_path / "ix"
    assert main(["index", "create", str(ix), "--train", str(work / "imgs"), "--extractor", "sift",
                 "--vocab-size", "4096", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "fitting T-emb k=4096 needs about" in err and "use a smaller vocabulary" in err
    assert not read and not ix.exists()


def test_the_automatic_vocabulary_fits_the_machine_s_memory(work, monkeypatch):
    """Without --vocab-size, k is also capped by what this machine's memory can whiten (a power of
    two): on a small machine a k = 64 fit (3.2 GB at its peak) would be killed."""
    from streamk.features import make_extractor
    from streamk.pipeline import encoder_training
    from streamk.pipeline.ingest import collect_images

    paths, _ = collect_images(work / "imgs")
    config = {"embedding": "temb", "k": 64, "aggregation": "gmp"}
    free, _ = encoder_training.train_encoder(paths, config, make_extractor("sift"), workers=1, auto_k=True)
    monkeypatch.setattr(encoder_training, "whitening_k_limit", lambda: 3)  # k <= 3 fits: 2, the power of two
    capped, _ = encoder_training.train_encoder(paths, config, make_extractor("sift"), workers=1, auto_k=True)
    assert free.config.k > 2 and capped.config.k == 2


def test_the_training_seed_seeds_the_k_means_too(work):
    """`index create --train --seed N` seeds the embedding's k-means as well as the samples: with every image and
    every descriptor learned on (the same sample whatever the seed), seeds 0 and 1 give other centroids; seed 0
    leaves the config as given (its fingerprint unchanged), and a seed the config names itself is kept."""
    from streamk.features import make_extractor
    from streamk.pipeline import encoder_training
    from streamk.pipeline.ingest import collect_images

    paths, _ = collect_images(work / "imgs")

    def fit(seed, params=None):
        config = {"embedding": "vlad", "k": 8, "aggregation": "sum", "embedding_params": params or {}}
        enc, _ = encoder_training.train_encoder(paths, config, make_extractor("sift"), workers=1, seed=seed,
                                                descriptors_per_image=None)
        return enc

    zero, one, named = fit(0), fit(1), fit(1, {"seed": 0})
    assert zero.config.embedding_params == {} and one.config.embedding_params == {"seed": 1}
    assert not np.allclose(zero.embedding.centroids_, one.embedding.centroids_)
    assert np.array_equal(zero.embedding.centroids_, named.embedding.centroids_)


def test_create_with_train(work, tmp_path, capsys):
    ix = tmp_path / "ix"
    assert main(["index", "create", str(ix), "--train", str(work / "imgs"), "--extractor", "sift",
                 "--k", "4", "--embedding", "vlad", "--workers", "1",
                 "--save-encoder", str(tmp_path / "e.npz")]) == 0
    out = capsys.readouterr().out
    assert "trained vlad k=4" in out and "created index" in out
    with StreamingIndex.open(ix) as idx:
        assert idx.encoder.fingerprint == Encoder.load(tmp_path / "e.npz").fingerprint
        assert idx.vector_dtype == np.float16
        assert len(idx) == 0
        assert idx.extractor().name == "sift"


@pytest.fixture
def no_fit(monkeypatch):
    """`index create`'s encoder fit made to fail if called: a fit takes minutes, what is refused is refused first."""
    from streamk.pipeline import index_setup

    def fit(*args, **kwargs):
        raise AssertionError("the encoder was fitted before what was given was checked")

    monkeypatch.setattr(index_setup, "train_encoder", fit)


def train_args(ix, work):
    """`index create IX --train` on the work images, a small VLAD and one worker."""
    return ["index", "create", str(ix), "--train", str(work / "imgs"), "--extractor", "sift", "--vocab-size", "4",
            "--embedding", "vlad", "--workers", "1"]


def test_save_encoder_to_a_bad_path_is_refused_before_the_fit(work, tmp_path, capsys, no_fit):
    """A fit can take minutes: where its encoder goes is checked first, one line, nothing made."""
    ix = tmp_path / "ix"
    base = train_args(ix, work)
    (tmp_path / "taken").mkdir()
    for bad, said in ((tmp_path / "missing" / "e.npz", "does not exist"), (tmp_path / "taken", "is a folder")):
        assert main([*base, "--save-encoder", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("streamk: error: cannot write the encoder to ") and said in err
        assert not ix.exists() and not (tmp_path / "missing").exists()
    # without --train there is no encoder to save: said, not ignored
    assert main(["index", "create", str(ix), "--encoder", str(work / "enc.npz"), "--save-encoder",
                 str(tmp_path / "e.npz")]) == 2
    assert "--save-encoder saves the encoder trained with --train" in capsys.readouterr().err
    assert not ix.exists() and not (tmp_path / "e.npz").exists()
    assert main(["index", "create", str(ix), "--encoder", str(work / "enc.npz"), "--train", str(work / "imgs"),
                 "--save-encoder", str(tmp_path / "e.npz")]) == 2  # the words learn there, the encoder is given
    assert "--save-encoder saves the encoder trained with --train" in capsys.readouterr().err
    assert not ix.exists() and not (tmp_path / "e.npz").exists()


@pytest.mark.parametrize("options, config, said", [
    (["--rn", "on", "--dim", "64", "--power", "0.3", "--lam", "2"], {"rn": True, "dim": 64, "power": 0.3, "lam": 2.0},
     "(gmp, rn, D'=64, power 0.3, lambda 2)"),
    (["--aggregation", "democratic", "--gamma", "0.7", "--power", "0.8"],
     {"aggregation": "democratic", "gamma": 0.7, "power": 0.8}, "(democratic, power 0.8, gamma 0.7)"),
])
def test_create_with_train_takes_the_encoders_options(work, tmp_path, capsys, options, config, said):
    """`index create --train` takes RN, D', the power-law exponent, gamma and lambda (once only from
    Python): the index's encoder has them and encodes as an Encoder fitted with them in Python on the
    same descriptors; the created line names them, and RN on few photos says so in one line."""
    from dataclasses import asdict

    from streamk.errors import FewRNImagesWarning
    from streamk.features import make_extractor
    from streamk.pipeline import extract_many

    ix = tmp_path / "ix"
    assert main(["index", "create", str(ix), "--train", str(work / "imgs"), "--extractor", "sift", "--vocab-size", "4",
                 "--embedding", "vlad", "--workers", "1", "--no-local-features", "--vector-dtype", "float32",
                 "--train-descriptors", "100000", *options]) == 0  # every descriptor: the Python fit's sets
    out, err = capsys.readouterr()
    assert said in out.splitlines()[-1] and out.splitlines()[-1].startswith("created index")
    rn = config.get("rn", False)
    warned = [line for line in err.splitlines() if "warning" in line]
    if rn:  # 6 learning images for 512 components: one line, saying what to do
        assert len(warned) == 1 and warned[0].startswith("streamk: warning: RN learned on 6 image vectors"), err
        assert "--rn off" in warned[0]
    else:
        assert warned == [], err
    feats, _ = extract_many(sorted(str(p) for p in (work / "imgs").rglob("*.png")), make_extractor("sift"),
                            workers=1, progress=False)
    sets = [f.descriptors for f in feats.values()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewRNImagesWarning)
        expected = Encoder(embedding="vlad", k=4, **config).fit(sets)
    with StreamingIndex.open(ix) as idx:
        assert asdict(idx.encoder.config) == asdict(expected.config)
        assert idx.encoder.dim == (64 if rn else 512)
        np.testing.assert_allclose(idx.encoder.encode(sets[0]), expected.encode(sets[0]), atol=1e-5)


def test_the_encoders_options_are_refused_before_the_fit(work, tmp_path, capsys, no_fit):
    """Each bad or misplaced encoder option is one line, exit 2, before any feature is extracted:
    D' without RN or above the embedding's dimension, gamma / lambda for another aggregation or out
    of range, a power outside (0, 1], and any of them without --train (a given or the default
    encoder keeps its own)."""
    ix = tmp_path / "ix"
    base = train_args(ix, work)
    usage = "streamk index create: error: argument "

    def run(argv):  # a usage error leaves the parser by SystemExit
        try:
            return main(argv)
        except SystemExit as exit:
            return exit.code

    for extra, said in (
            (["--dim", "64"], "streamk: error: --dim D' keeps the first D' components after RN: add --rn on"),
            (["--rn", "off", "--dim", "64"], "add --rn on"),
            (["--rn", "on", "--dim", "600"],
             "D' = 600 exceeds the dimension of vlad with k = 4 (512): choose D' <= 512"),
            (["--gamma", "0.7"], "--gamma is democratic aggregation's damping exponent: it needs --aggregation "
                                 "democratic (this encoder's is gmp)"),
            (["--lam", "2", "--aggregation", "democratic"], "--lam is generalised max pooling's ridge regulariser "
                                                             "lambda: it needs --aggregation gmp"),
            (["--gamma", "1.5", "--aggregation", "democratic"], "gamma must be in (0, 1], got 1.5"),
            (["--lam", "0"], "lambda must be > 0, got 0.0"),
            (["--aggregation", "max"], "unknown aggregation 'max'"),
            (["--power", "0"], usage + "--power: expected a number in (0, 1], got '0'"),
            (["--power", "1.5"], usage + "--power: expected a number in (0, 1], got '1.5'"),
            (["--dim", "0", "--rn", "on"], usage + "--dim: must be >= 1, got 0"),
            (["--rn", "maybe"], usage + "--rn: invalid choice")):
        assert run([*base, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err, (extra, err)
        assert not ix.exists()
    for given in (["--encoder", str(work / "enc.npz")], ["--encoder", str(work / "enc.npz"), "--train",
                                                        str(work / "imgs")], []):
        for extra, flags in ((["--rn", "on", "--dim", "64"], "--rn, --dim set"), (["--power", "0.3"], "--power sets"),
                             (["--rn", "off"], "--rn sets")):
            assert run(["index", "create", str(ix), *given, *extra]) == 2, (given, extra)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith(f"streamk: error: {flags} the encoder trained with "
                                                           f"--train: give --train IMAGES without --encoder"), err
            assert not ix.exists()


def test_a_dim_above_the_automatic_vocabularys_is_refused_before_the_fit(work, tmp_path, capsys):
    """Without --vocab-size, T-emb's k is what the learning sample can whiten, known once it is drawn:
    a D' above that k's dimension is refused then, before the fit, saying what to do."""
    ix = tmp_path / "ix"
    assert main(["index", "create", str(ix), "--train", str(work / "imgs"), "--extractor", "sift", "--workers", "1",
                 "--no-local-features", "--rn", "on", "--dim", "4000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "D' = 4000 exceeds the dimension of temb with k = 4 (384)" in err, err
    assert "--vocab-size" in err and not ix.exists()


def test_a_path_that_does_not_exist_stops_the_run_before_it_starts(work, tmp_path, capsys):
    """`streamk ingest IDX missing/` (a typo, a disk not mounted) is one usage line naming the path, not
    "failed 1" beside a file's read error; nothing is ingested, not even the paths that exist."""
    ix = tmp_path / "ix"
    create(ix, work)
    capsys.readouterr()
    for watch in ([], ["--watch", "--max-polls", "1"]):
        assert main(["ingest", str(ix), str(work / "imgs"), str(tmp_path / "missing"), str(tmp_path / "gone"),
                     "--workers", "1", *watch]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{tmp_path / 'missing'} does not exist (and 1 more" in err
        assert "nothing was ingested" in err
    with StreamingIndex.open(ix, readonly=True) as idx:
        assert len(idx) == 0


def test_a_full_disk_says_what_the_run_stored_before_it(work, tmp_path, capsys):
    """An ingestion that fills the disk ends with one line (exit 6) that says, beside the room it wanted, how many
    images this run stored before it: those are durable, and the same command resumes after them."""
    from helpers.disks import tmpfs

    imgs = tmp_path / "many"
    for i in range(60):
        textured(str(imgs / f"m{i:02d}.png"), 100 + i, size=256)  # ~16 KB of index each
    with tmpfs(tmp_path / "disk", "2m") as disk:
        create(disk / "ix", work)  # (a new index asks for 1 MiB free), then a disk with room for ~30 images
        (disk / "ballast").write_bytes(bytes(1 << 20) + bytes(512 << 10))
        capsys.readouterr()
        assert main(["ingest", str(disk / "ix"), str(imgs), "--workers", "1", "--batch-size", "4",
                     "--no-progress"]) == 6
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no space left" in err, err
        added = int(re.search(r"this run added ([\d,]+) image\(s\) before it \(stored", err).group(1).replace(",", ""))
        with StreamingIndex.open(disk / "ix", readonly=True) as idx:
            assert 0 < added == len(idx) < 60


def test_ingest_resume_and_search(work, tmp_path, capsys):
    ix = tmp_path / "ix"
    create(ix, work)
    imgs = work / "imgs"
    # a first, partial run (one file given explicitly), then the folder: resumes
    assert main(["ingest", str(ix), str(imgs / "img2.png"), "--workers", "1", "--no-progress"]) == 0
    assert "added 1, skipped 0 existing, failed 0" in capsys.readouterr().out
    assert main(["ingest", str(ix), str(imgs), "--workers", "2", "--batch-size", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "added 5, skipped 1 existing, failed 0" in out and "images/s" in out
    with StreamingIndex.open(ix) as idx:
        assert sorted(idx.ids()) == ["img0.png", "img1.png", "img2.png", "img3.png", "img4.png", "sub__img5.png"]
        rec = idx.info("sub__img5.png")
        assert rec["kind"] == "image_path" and rec["source"] == str(imgs / "sub" / "img5.png")
        # same vector as add(image_path=...) would give
        ref = idx.query_vector(str(imgs / "img3.png"))
        assert np.allclose(idx.vector("img3.png"), ref, atol=1e-6)
        before = idx.store.dump()
    # again: everything skipped, nothing touched
    assert main(["ingest", str(ix), str(imgs), "--workers", "1", "--no-progress"]) == 0
    assert "added 0, skipped 6 existing, failed 0" in capsys.readouterr().out
    with StreamingIndex.open(ix) as idx:
        assert idx.store.dump() == before
    # search: table and JSON
    assert main(["search", str(ix), str(imgs / "img3.png"), "-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the index keeps local geometry: the top results are verified and their inliers shown
    assert lines[0].split() == ["rank", "score", "inliers", "id"]
    assert lines[1].split()[0] == "1" and lines[1].split()[-1] == "img3.png"
    assert abs(float(lines[1].split()[1]) - 1.0) < 1e-3
    assert len(lines) == 4
    assert main(["search", str(ix), str(imgs / "sub" / "img5.png"), "-k", "10", "--json",
                 "--box", "0", "0", "127", "127"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert [h["rank"] for h in hits] == list(range(1, 7))
    assert hits[0]["id"] == "sub__img5.png"
    assert all(hits[i]["score"] >= hits[i + 1]["score"] for i in range(len(hits) - 1))
    # errors -> one line and their exit codes
    assert main(["search", str(ix), str(imgs / "img3.png"), "--mode", "pq"]) == 2
    assert "streamk index train" in capsys.readouterr().err  # the command, not the library's method
    assert main(["search", str(tmp_path / "nothere"), str(imgs / "img3.png")]) == 4  # NotAnIndexError
    assert main(["ingest", str(tmp_path / "nothere"), str(imgs)]) == 4


def test_ingest_same_id_other_content_and_duplicates(work, tmp_path, capsys):
    ix = tmp_path / "ix"
    create(ix, work)
    a = tmp_path / "a"
    textured(str(a / "x.png"), 1)
    import shutil
    shutil.copy(a / "x.png", a / "z_copy.png")  # same content twice in one run
    assert main(["ingest", str(ix), str(a), "--workers", "1", "--no-progress"]) == 0
    cap = capsys.readouterr()
    assert "added 1, skipped 0 existing and 1 with the bytes of another id, failed 0" in cap.out
    assert f"streamk: skipped {a / 'z_copy.png'}: the same bytes are already indexed as 'x.png'; not added as " \
           f"'z_copy.png'" in cap.err  # said: a search by its name would find nothing
    # a rerun: the same account, and the copy, whose bytes are stored as x.png, is not described again (it was,
    # and then refused): its features are not extracted (an empty feature cache stays empty)
    from streamk.features import FeatureCache
    cache = tmp_path / "cache"
    assert main(["ingest", str(ix), str(a), "--workers", "1", "--no-progress", "--cache", str(cache)]) == 0
    cap = capsys.readouterr()
    assert "added 0, skipped 1 existing and 1 with the bytes of another id, failed 0" in cap.out
    assert f"streamk: skipped {a / 'z_copy.png'}: the same bytes are already indexed as 'x.png'; not added as " \
           f"'z_copy.png'" in cap.err
    assert FeatureCache(cache).size()[0] == 0
    assert main(["ingest", str(ix), str(tmp_path), "--workers", "1", "--no-progress", "--cache", str(cache)]) == 0
    assert "added 0, skipped 0 existing and 2 with the bytes of another id" in capsys.readouterr().out  # a__x.png
    assert FeatureCache(cache).size()[0] == 0
    b = tmp_path / "b"
    textured(str(b / "x.png"), 2)  # same id, other content: reported, stored one untouched
    with StreamingIndex.open(ix) as idx:
        before = idx.store.dump()
    assert main(["ingest", str(ix), str(b), "--workers", "1", "--no-progress"]) == 1
    cap = capsys.readouterr()
    assert "IdExistsError" in cap.err and "x.png" in cap.err
    assert "failed 1" in cap.out
    with StreamingIndex.open(ix) as idx:
        assert idx.store.dump() == before


def test_two_new_copies_in_one_pass_are_described_once(work, tmp_path, capsys):
    """Two new files with the same bytes in one pass (a photo copied under two names): the
    second is recognised before it is described (it was described too, then refused at the
    write), with the same outcome: the first added, the second reported with the id holding its
    bytes and counted apart. When the first is not stored (a bad file copied twice), the second
    is described as before and reported for itself."""
    import shutil

    from streamk.parallel import InlineExecutor

    described = []

    class Noting(InlineExecutor):
        """The in-process executor, noting the files of new ids it is sent to describe."""

        def map_unordered(self, fn, items, context, max_inflight=None):
            def noted():
                for item in items:
                    if item[2] is None:  # no stored sha256: a new id, described
                        described.append(os.path.basename(item[0]))
                    yield item
            return super().map_unordered(fn, noted(), context, max_inflight)

    a = tmp_path / "a"
    textured(str(a / "x.png"), 1)
    shutil.copy(a / "x.png", a / "y_copy.png")
    textured(str(a / "z.png"), 2)
    (a / "bad1.jpg").write_text("not an image\n")
    shutil.copy(a / "bad1.jpg", a / "bad2.jpg")
    create(tmp_path / "ix", work)
    said = []
    with StreamingIndex.open(tmp_path / "ix") as idx, Ingester(
            idx, executor=Noting(), progress=False, report=lambda path, why: said.append((path, why))) as ing:
        stats = ing.ingest([a])
        assert sorted(idx.ids()) == ["x.png", "z.png"]
    assert (stats.added, stats.same_content, stats.existing, stats.processed) == (2, 1, 0, 5)
    assert sorted(stats.failed) == [str(a / "bad1.jpg"), str(a / "bad2.jpg")]
    assert all("ImageReadError" in why for why in stats.failed.values())
    assert (str(a / "y_copy.png"), "the same bytes are already indexed as 'x.png'; not added as 'y_copy.png'") in said
    assert len(said) == 3
    assert sorted(described) == ["bad1.jpg", "bad2.jpg", "x.png", "z.png"]  # y_copy.png: not described
    # the same account from the command line, on a pool of worker processes
    create(tmp_path / "ix2", work)
    capsys.readouterr()
    assert main(["ingest", str(tmp_path / "ix2"), str(a), "--workers", "2", "--no-progress"]) == 1
    cap = capsys.readouterr()
    assert "added 2, skipped 0 existing and 1 with the bytes of another id, failed 2" in cap.out
    assert cap.err.count("ImageReadError") == 2 and cap.err.count("not added as 'y_copy.png'") == 1


def test_ingest_bad_files(work, tmp_path, capsys):
    ix = tmp_path / "ix"
    create(ix, work)
    bad = tmp_path / "bad"
    bad.mkdir()
    expected = make_bad(bad)
    textured(str(tmp_path / "good" / "ok.png"), 7)
    assert main(["ingest", str(ix), str(bad), str(tmp_path / "good"), "--workers", "1", "--no-progress"]) == 1
    cap = capsys.readouterr()
    assert "added 1, skipped 0 existing, failed 6" in cap.out
    lines = cap.err.splitlines()
    for name, words in expected.items():
        line = [ln for ln in lines if os.path.join(str(bad), name) + ":" in ln]
        assert len(line) == 1, (name, cap.err)
        assert words in line[0], line[0]
    with StreamingIndex.open(ix) as idx:
        assert idx.ids() == ["ok.png"]


def test_ingest_skips_images_over_the_limits(work, tmp_path, capsys):
    """Failure 8: a 4 GB sparse .jpg is refused unread, an image over --max-pixels undecoded;
    each is one report line naming the limit, the rest is ingested."""
    ix = tmp_path / "ix"
    create(ix, work)
    folder = tmp_path / "in"
    textured(str(folder / "ok.png"), 7)
    textured(str(folder / "wide.png"), 8, size=160)  # 25,600 pixels
    with open(folder / "huge.jpg", "wb") as fh:
        fh.truncate(4 * 2**30)
    assert main(["ingest", str(ix), str(folder), "--workers", "1", "--no-progress", "--max-pixels", "20000"]) == 1
    cap = capsys.readouterr()
    assert "added 1, skipped 0 existing, failed 2" in cap.out
    lines = cap.err.splitlines()
    huge = [ln for ln in lines if "huge.jpg" in ln]
    wide = [ln for ln in lines if "wide.png" in ln]
    assert len(huge) == 1 and "ImageTooLargeError" in huge[0] and "--max-file-size" in huge[0], cap.err
    assert len(wide) == 1 and "ImageTooLargeError" in wide[0] and "160 x 160" in wide[0], cap.err
    assert "MemoryError" not in cap.err and "Traceback" not in cap.err
    # a query over a limit: one line, exit status 3
    assert main(["search", str(ix), str(folder / "huge.jpg")]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "over the limit of 50.0 MiB" in err and "--max-file-size" in err, err
    assert main(["search", str(ix), str(folder / "wide.png"), "--max-pixels", "20000"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "160 x 160 = 25,600 pixels" in err and "--max-pixels" in err, err
    # raised: the file goes in
    assert main(["ingest", str(ix), str(folder / "wide.png"), "--workers", "1", "--no-progress",
                 "--max-pixels", "25600", "--max-file-size", "1M"]) == 0
    with StreamingIndex.open(ix) as idx:
        assert sorted(idx.ids()) == ["ok.png", "wide.png"]
    with pytest.raises(SystemExit) as e:  # a usage error
        main(["ingest", str(ix), str(folder), "--max-file-size", "lots"])
    assert e.value.code == 2 and "--max-file-size" in capsys.readouterr().err


def test_index_stores_the_extraction_settings_and_boxes_stay_in_original_pixels(work, tmp_path, capsys):
    """A new index records max_side / max_features (default 1024 / 8192; 0: off) so that
    queries are extracted like its images; features of a reduced image are in original
    pixels, so a query box in original pixels selects them."""
    create(tmp_path / "default", work)
    create(tmp_path / "off", work, "--max-side", "0", "--max-features", "0")
    create(tmp_path / "small", work, "--max-side", "64")
    for name, side, cap in (("default", 1024, 8192), ("off", None, None), ("small", 64, 8192)):
        with StreamingIndex.open(tmp_path / name) as idx:
            stored = json.loads(idx.store.get_meta(b"extractor"))
            assert stored["options"]["max_side"] == side and stored["options"]["max_features"] == cap
            assert idx.extractor().max_side == side
    ix = tmp_path / "small"
    assert main(["ingest", str(ix), str(work / "imgs"), "--workers", "1", "--no-progress"]) == 0
    capsys.readouterr()
    with StreamingIndex.open(ix) as idx:
        f = idx.queries.features(str(work / "imgs" / "img3.png"))
        assert f.image_size == (128, 128) and f.positions.max() > 64  # 128 px image, detected at 64
    # the right half of the 128 px query, in original pixels: features there, img3 first
    assert main(["search", str(ix), str(work / "imgs" / "img3.png"), "-k", "1", "--json",
                 "--box", "64", "0", "127", "127"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["id"] == "img3.png"
    with pytest.raises(SystemExit):
        main(["index", "create", str(tmp_path / "bad"), "--encoder", str(work / "enc.npz"), "--max-side", "8"])


def _committed(ix):
    with StreamingIndex.open(ix, readonly=True) as idx:
        return len(idx)


def _sigint_ignored():  # as a shell leaves a background job: SIGINT ignored, SIGTERM default
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def index_and_many_photos(work, tmp_path, n, seed):
    """A new index and a folder of ``n`` textured photos large enough that a stop finds some
    not yet ingested: (index path, folder)."""
    ix = tmp_path / "ix"
    create(ix, work)
    folder = tmp_path / "many"
    for i in range(n):
        textured(str(folder / f"p{i:02d}.png"), seed + i, size=384)
    return ix, folder


@pytest.mark.parametrize("sig, status, inherited, workers", [
    (signal.SIGINT, 130, "default", "1"), (signal.SIGTERM, 143, "default", "1"),
    (signal.SIGINT, 130, "SIGINT ignored", "1"), (signal.SIGTERM, 143, "default", "2")])
def test_interrupted_one_shot_ingest_says_what_is_left_and_a_rerun_resumes(work, tmp_path, wait_until, sig, status,
                                                                            inherited, workers):
    """Failure 5: Ctrl-C / SIGTERM in a one-shot ingest commits what was encoded, says how
    many images were added and how many were not, exits 130 / 143; the same command then
    completes. Also when the process inherited SIGINT ignored (failure 10): the CLI sets its
    own handler. With one worker the encoding runs in this process: the signal waits for the
    image in hand (raised inside a Numba kernel it became a SystemError, a "failed" image);
    with two it stops the wait on the workers at once."""
    n = 20
    ix, folder = index_and_many_photos(work, tmp_path, n, seed=100)
    args = ["-m", "streamk.cli", "ingest", str(ix), str(folder), "--workers", workers, "--batch-size", "1",
            "--no-progress", "--no-cache"]
    if inherited == "default":
        proc = start_python(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    else:
        proc = subprocess.Popen([sys.executable, *args], env=subprocess_env(), preexec_fn=_sigint_ignored,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _committed(ix) >= 2, 120, "two images committed")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == status, (out, err)
    assert "Traceback" not in err
    said = [ln for ln in err.splitlines() if "interrupted by" in ln]
    assert len(said) == 1, err
    m = re.fullmatch(r"streamk: interrupted by (SIG\w+): added (\d+), skipped 0 existing, failed 0; (\d+) not "
                     r"ingested; run the same command again to resume", said[0])
    assert m and m[1] == signal.Signals(sig).name, said[0]
    added, left = int(m[2]), int(m[3])
    assert _committed(ix) == added >= 2 and left >= 1 and added + left == n
    r = run_python(*args, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"added {left}, skipped {added} existing, failed 0" in r.stdout
    assert _committed(ix) == n


def _read_line_until(proc, sel, predicate, deadline, seen):
    """Read proc's stdout lines until predicate(line) or the deadline; returns the line."""
    while time.monotonic() < deadline:
        if not sel.select(timeout=max(0.0, min(1.0, deadline - time.monotonic()))):
            continue
        line = proc.stdout.readline()
        if not line:
            return None
        seen.append(line)
        if predicate(line):
            return line
    return None


@pytest.mark.parametrize("sig, inherited", [(signal.SIGINT, "default"), (signal.SIGTERM, "default"),
                                            (signal.SIGINT, "SIGINT ignored")])
def test_watch_picks_up_new_files_and_ctrl_c_ends_cleanly(work, tmp_path, sig, inherited):
    """Ctrl-C, or SIGTERM as a service manager stops it, ends a watch cleanly (exit 0); Ctrl-C
    too when the process inherited SIGINT ignored (a test runner started in the background)."""
    ix = tmp_path / "ix"
    create(ix, work)
    folder = tmp_path / "watched"
    textured(str(folder / "first.png"), 11)
    args = ["-m", "streamk.cli", "ingest", str(ix), str(folder), "--watch", "--interval", "0.2", "--max-polls", "300",
            "--workers", "1", "--no-progress"]
    if inherited == "default":
        proc = start_python(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    else:
        proc = subprocess.Popen([sys.executable, *args], env=subprocess_env(), preexec_fn=_sigint_ignored,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen = []
    try:
        deadline = time.monotonic() + 40
        assert _read_line_until(proc, sel, lambda ln: ln.startswith("watching"), deadline, seen), seen
        textured(str(folder / "later" / "second.png"), 12)
        assert _read_line_until(proc, sel, lambda ln: ", this poll: added 1," in ln and not ln.startswith("poll 1,"),
                                deadline, seen), seen
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        stop(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert out.strip().splitlines()[-2] == f"stopped by {signal.Signals(sig).name}"
    assert out.strip().splitlines()[-1].startswith("total, all polls: added 2, updated 0, skipped 0 existing, failed 0")
    with StreamingIndex.open(ix) as idx:
        assert sorted(idx.ids()) == ["first.png", "later__second.png"]


def test_watch_max_polls(work, tmp_path, capsys):
    ix = tmp_path / "ix"
    create(ix, work)
    textured(str(tmp_path / "w" / "a.png"), 21)
    assert main(["ingest", str(ix), str(tmp_path / "w"), "--watch", "--interval", "0.05", "--max-polls", "3",
                 "--workers", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    # a poll that found nothing new says nothing (a line every interval, for hours, was noise)
    assert "poll 1," in out and "poll 2," not in out and "poll 3," not in out
    assert out.strip().splitlines()[-1].startswith("total, all polls: added 1, updated 0, skipped 0 existing")


class _Lines:
    """A process's stdout lines as they come, read raw from its descriptor: a buffered readline
    may hold the next line (printed in the same burst) while select() says there is nothing to read."""

    def __init__(self, stream):
        self.fd, self.buf, self.seen = stream.fileno(), b"", []
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.fd, selectors.EVENT_READ)

    def until(self, predicate, deadline):
        """The next line for which predicate(line) holds (the lines before it consumed), or None
        at the deadline or the end of the output."""
        while True:
            while b"\n" in self.buf:
                raw, self.buf = self.buf.split(b"\n", 1)
                self.seen.append(line := raw.decode())
                if predicate(line):
                    return line
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if self.sel.select(timeout=min(1.0, left)):
                data = os.read(self.fd, 65536)
                if not data:
                    return None
                self.buf += data

    def rest(self):
        """What was read and not yet consumed as lines (to put before what communicate() reads)."""
        return self.buf.decode()


def _stored_sha(ix, image_id):
    with StreamingIndex.open(ix, readonly=True) as idx:
        return json.loads(idx.records([image_id])[0])["sha256"]


def test_watch_says_each_polls_own_counts_updates_a_changed_file_and_a_stop_with_failures_is_clean(work, tmp_path):
    """Each poll line counts that poll alone (a running "added" beside a per-poll "failed" read as
    new files that were not), the last line the whole watch, labelled apart. A watched file
    overwritten with another photo gets its image's content replaced (its metadata kept,
    updated with the file's), said as "updated" (it was IdExistsError, never updated). SIGTERM
    ends the watch with exit 0 although a file failed: a supervisor's stop is no crash."""
    import hashlib

    ix = tmp_path / "ix"
    create(ix, work)
    folder = tmp_path / "watched"
    textured(str(folder / "first.png"), 31)
    proc = start_python("-m", "streamk.cli", "ingest", str(ix), str(folder), "--watch", "--interval", "0.2",
                        "--max-polls", "1000", "--workers", "1", "--no-progress",
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = _Lines(proc.stdout)
    try:
        deadline = time.monotonic() + 60
        polled = lines.until(lambda ln: ln.startswith("poll 1,"), deadline)
        assert polled and ", this poll: added 1, updated 0, skipped 0 existing, failed 0" in polled, lines.seen
        textured(str(tmp_path / "staging" / "second.png"), 32)
        (tmp_path / "staging" / "bad.jpg").write_text("not an image\n")
        os.rename(tmp_path / "staging", folder / "later")  # both in one poll
        assert lines.until(lambda ln: ", this poll: added 1, updated 0, skipped 0 existing, failed 1 " in ln,
                           deadline), lines.seen
        with StreamingIndex.open(ix) as idx:
            idx.set_metadata("first.png", {"album": "kept"}, merge=True)
        textured(str(tmp_path / "other.png"), 33)
        os.replace(tmp_path / "other.png", folder / "first.png")  # another photo under the same name, whole
        assert lines.until(lambda ln: ", this poll: added 0, updated 1, skipped 0 existing, failed 0 " in ln,
                           deadline), lines.seen
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        out = lines.rest() + out
    finally:
        stop(proc)
    assert proc.returncode == 0, (lines.seen, out, err)
    assert "IdExistsError" not in err and "Traceback" not in err
    lines = out.strip().splitlines()
    assert lines[-2] == "stopped by SIGTERM"
    assert lines[-1].startswith("total, all polls: added 2, updated 1, skipped 0 existing, failed 1 "), lines
    assert _stored_sha(ix, "first.png") == hashlib.sha256((folder / "first.png").read_bytes()).hexdigest()
    with StreamingIndex.open(ix, readonly=True) as idx:
        meta = idx.metadata("first.png")
        assert meta["album"] == "kept" and meta["size"] == (folder / "first.png").stat().st_size
        assert sorted(idx.ids()) == ["first.png", "later__second.png"]


def test_watch_with_failures_ended_by_max_polls_exits_1(work, tmp_path, capsys):
    """A bounded watch (--max-polls) ends as a one-shot run does: 1 when a file failed."""
    ix = tmp_path / "ix"
    create(ix, work)
    textured(str(tmp_path / "w" / "a.png"), 21)
    (tmp_path / "w" / "bad.jpg").write_text("not an image\n")
    assert main(["ingest", str(ix), str(tmp_path / "w"), "--watch", "--interval", "0.05", "--max-polls", "2",
                 "--workers", "1", "--no-progress"]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith(
        "total, all polls: added 1, updated 0, skipped 0 existing, failed 1")


def test_a_watch_takes_the_changes_made_while_it_was_not_running(work, tmp_path, capsys):
    """A file overwritten while no watch ran (the service stopped, a photo edited, the service
    started again) is updated by the next watch's first poll, as a change seen while watching is:
    its size or mtime are not those stored with the image it was added as (it was IdExistsError on
    that poll, then never looked at again). A one-shot ingest still refuses it and leaves the image
    as it is; a file only touched is skipped as existing, its new mtime stored; a stored id added from another file is
    still refused by the watch too."""
    import hashlib

    ix = tmp_path / "ix"
    create(ix, work)
    folder = tmp_path / "w"
    textured(str(folder / "edited.png"), 41)
    textured(str(folder / "touched.png"), 42)
    elsewhere = textured(str(tmp_path / "elsewhere" / "other.png"), 43)
    assert main(["ingest", str(ix), str(folder), "--workers", "1", "--no-progress"]) == 0
    with StreamingIndex.open(ix) as idx:
        idx.set_metadata("edited.png", {"album": "kept"}, merge=True)
        idx.add("other.png", image_path=elsewhere)  # its id stored, from another file
    capsys.readouterr()
    # while no watch runs: a photo edited (another photo under its name, a later mtime), one only touched
    textured(str(tmp_path / "new.png"), 44)
    old = (folder / "edited.png").stat().st_mtime_ns
    os.replace(tmp_path / "new.png", folder / "edited.png")
    os.utime(folder / "edited.png", ns=(old + 2 * 10**9, old + 2 * 10**9))
    os.utime(folder / "touched.png", ns=(old + 3 * 10**9, old + 3 * 10**9))
    textured(str(folder / "other.png"), 45)
    with StreamingIndex.open(ix) as idx:
        before = idx.store.dump()
    # one-shot: refused, as the README says
    assert main(["ingest", str(ix), str(folder), "--workers", "1", "--no-progress"]) == 1
    cap = capsys.readouterr()
    assert "added 0, skipped 1 existing, failed 2" in cap.out
    assert cap.err.count("IdExistsError") == 2 and "edited.png" in cap.err
    with StreamingIndex.open(ix) as idx:
        assert idx.store.dump() == before
    # a watch: its first poll takes the edit
    assert main(["ingest", str(ix), str(folder), "--watch", "--interval", "0.05", "--max-polls", "2",
                 "--workers", "1", "--no-progress"]) == 1  # other.png failed
    cap = capsys.readouterr()
    assert "poll 1, this poll: added 0, updated 1, skipped 1 existing, failed 1" in cap.out, cap
    assert "poll 2," not in cap.out
    assert cap.err.count("IdExistsError") == 1 and "other.png" in cap.err and "edited.png" not in cap.err
    assert _stored_sha(ix, "edited.png") == hashlib.sha256((folder / "edited.png").read_bytes()).hexdigest()
    assert _stored_sha(ix, "other.png") == hashlib.sha256(open(elsewhere, "rb").read()).hexdigest()
    with StreamingIndex.open(ix, readonly=True) as idx:
        meta = idx.metadata("edited.png")
        st = (folder / "edited.png").stat()
        assert (meta["album"], meta["size"], meta["mtime"]) == ("kept", st.st_size, st.st_mtime)
        np.testing.assert_allclose(idx.vector("edited.png"), idx.query_vector(str(folder / "edited.png")),
                                   atol=1e-6)
        # the file only touched: its new mtime stored, so that no later watch reads it again
        touched = idx.metadata("touched.png")
        assert (touched["size"], touched["mtime"]) == ((folder / "touched.png").stat().st_size,
                                                       (folder / "touched.png").stat().st_mtime)
    # started again, nothing changed since: nothing updated
    assert main(["ingest", str(ix), str(folder), "--watch", "--max-polls", "1", "--workers", "1",
                 "--no-progress"]) == 1
    assert "poll 1, this poll: added 0, updated 0, skipped 2 existing, failed 1" in capsys.readouterr().out


def test_a_watch_stopped_mid_poll_says_what_it_left(work, tmp_path, wait_until):
    """SIGTERM during a poll: what was encoded is committed, and the line says how many files of
    that poll were not ingested, as a one-shot run does; exit 0 (a stop on request)."""
    n = 20
    ix, folder = index_and_many_photos(work, tmp_path, n, seed=200)
    proc = start_python("-m", "streamk.cli", "ingest", str(ix), str(folder), "--watch", "--workers", "1",
                        "--batch-size", "1", "--no-progress", "--no-cache",
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: _committed(ix) >= 2, 120, "two images committed")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 0, (out, err)
    said = [ln for ln in out.splitlines() if ln.startswith("stopped by")]
    m = re.fullmatch(r"stopped by SIGTERM during a poll: that poll added (\d+), updated 0, failed 0; (\d+) not "
                     r"ingested; run the same command again to take them", said[0]) if said else None
    assert m, out
    added, left = int(m[1]), int(m[2])
    assert _committed(ix) == added >= 2 and left >= 1 and added + left == n


def test_train_pq_then_pq_search(work, tmp_path, capsys):
    ix = tmp_path / "ix"
    create(ix, work)
    imgs = work / "imgs"
    assert main(["ingest", str(ix), str(imgs), "--workers", "1", "--no-progress"]) == 0
    assert main(["index", "train-pq", str(ix), "--M", "8"]) == 4  # 6 images: too few (TooFewImagesError)
    assert "at least 256" in capsys.readouterr().err
    with StreamingIndex.open(ix) as idx:  # fill up with other vectors
        V = np.random.default_rng(3).standard_normal((300, idx.encoder.dim))
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(V)])
    assert main(["index", "train-pq", str(ix), "--M", "8"]) == 0
    assert "swapped in PQ M=8" in capsys.readouterr().out
    assert main(["search", str(ix), str(imgs / "img3.png"), "-k", "2", "--mode", "pq", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["id"] == "img3.png" and abs(hits[0]["score"] - 1.0) < 1e-3
    with StreamingIndex.open(ix) as idx:
        assert idx.codec().M == 8 and len(idx) == 306
    assert main(["index", "train", str(ix), "--nlist", "4", "--M", "8", "--nprobe", "2"]) == 0
    assert "swapped in IVF4-PQ M=8" in capsys.readouterr().out
    assert main(["search", str(ix), str(imgs / "img3.png"), "-k", "2", "--json"]) == 0  # pq by default now
    assert json.loads(capsys.readouterr().out)[0]["id"] == "img3.png"
    assert main(["index", "info", str(ix), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["images"] == 306 and info["codec"].startswith("IVF4 (nprobe 2), M=8")


def test_stale_codec_is_reported_and_retrain_at_retrains(work, tmp_path, capsys):
    """Failure 9: a codec trained on 300 images, then 400 more added: index info, a PQ search
    (CLI note, StaleCodecWarning from Python) say so and suggest index train; ingest
    --retrain-at RATIO retrains once the images added exceed RATIO x those trained on."""
    from streamk.errors import StaleCodecWarning

    ix = tmp_path / "ix"
    create(ix, work)
    rng = np.random.default_rng(4)
    with StreamingIndex.open(ix) as idx:
        assert idx.codec_staleness() is None and "added_since_training" not in idx.stats()
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(rng.standard_normal((300, idx.encoder.dim)))])
        idx.train(nlist=1, M=8)
        idx.add_many([{"id": f"w{i}", "vector": v} for i, v in enumerate(rng.standard_normal((10, idx.encoder.dim)))])
        assert idx.codec_staleness() == {"trained_on": 300, "added_since": 10, "ratio": 10 / 300, "stale": False}
        with warnings.catch_warnings():
            warnings.simplefilter("error", StaleCodecWarning)
            idx.search(idx.vector("v1"), k=1)  # 10 added since 300: not stale, no warning
        idx.add_many([{"id": f"x{i}", "vector": v} for i, v in
                      enumerate(rng.standard_normal((390, idx.encoder.dim)))])
        st = idx.codec_staleness()
        assert (st["trained_on"], st["added_since"], st["stale"]) == (300, 400, True)
        with pytest.warns(StaleCodecWarning, match="400 images were added since the PQ codec was trained on 300"):
            assert idx.search(idx.vector("x5"), k=1)[0].id == "x5"
        with warnings.catch_warnings():
            warnings.simplefilter("error", StaleCodecWarning)
            idx.search(idx.vector("x5"), k=1, mode="exact")  # exact mode: no codec, no warning
    assert main(["index", "info", str(ix)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"codec_trained_on: 300\b", out) and re.search(r"added_since_training: 400\b", out)
    assert "note: 400 images were added since the PQ codec was trained on 300" in out
    assert f"streamk index train {ix}" in out
    assert main(["search", str(ix), str(work / "imgs" / "img3.png"), "-k", "2", "--json"]) == 0
    cap = capsys.readouterr()
    json.loads(cap.out)  # the note does not spoil the JSON
    notes = [ln for ln in cap.err.splitlines() if ln.startswith("streamk: note:")]
    assert len(notes) == 1 and "trained on 300" in notes[0] and f"streamk index train {ix}" in notes[0]
    # --retrain-at: 406 added since 300 -> not past 2x, past 1x
    assert main(["ingest", str(ix), str(work / "imgs"), "--workers", "1", "--no-progress", "--retrain-at", "2"]) == 0
    assert "retraining" not in capsys.readouterr().out
    assert main(["ingest", str(ix), str(work / "imgs"), "--workers", "1", "--no-progress", "--retrain-at", "1"]) == 0
    out = capsys.readouterr().out
    assert "retraining the codec: 406 images added since it was trained on 300" in out
    with StreamingIndex.open(ix) as idx:
        assert idx.codec_staleness() == {"trained_on": 706, "added_since": 0, "ratio": 0.0, "stale": False}
        assert idx.codec_params() == {"nlist": 1, "M": 8, "nprobe": 1}
        # a codec trained before streamk recorded it: unknown, never called stale, never retrained
        idx.store.write(lambda txn: txn.delete(b"codec_trained", db=idx.store.meta_db))
        idx.add_many([{"id": f"y{i}", "vector": v} for i, v in
                      enumerate(rng.standard_normal((800, idx.encoder.dim)))])
        assert idx.codec_staleness() == {"trained_on": None, "added_since": None, "ratio": None, "stale": False}
    assert main(["ingest", str(ix), str(work / "imgs"), "--workers", "1", "--no-progress", "--retrain-at", "1"]) == 0
    assert "retraining" not in capsys.readouterr().out
    assert main(["index", "info", str(ix)]) == 0
    assert "note:" not in capsys.readouterr().out


def test_auto_vocab_size_is_the_largest_power_of_two_the_sample_can_whiten():
    from streamk.pipeline.encoder_training import auto_vocab_size

    for n in (0, 255, 256, 1_398, 2_047, 2_048, 4_961, 8_191, 8_192, 10 ** 6):
        fits = [k for k in (2, 4, 8, 16, 32, 64) if k * 128 <= n] or [2]  # brute force over the candidates
        assert auto_vocab_size(n) == max(fits), n
    assert auto_vocab_size(10 ** 6, largest=16) == 16 and auto_vocab_size(1_000, d=64) == 8


def test_create_with_train_fits_the_vocabulary_to_a_small_sample(work, tmp_path, capsys):
    """Without --vocab-size a T-emb encoder gets the largest k whose k x 128 dimensions the
    learning descriptors fill (64 at most); a given --vocab-size is kept as given."""
    from streamk.pipeline.encoder_training import auto_vocab_size

    base = ["--train", str(work / "imgs"), "--extractor", "sift", "--workers", "1", "--no-local-features"]
    assert main(["index", "create", str(tmp_path / "auto"), *base]) == 0
    out = capsys.readouterr().out
    n = int(re.search(r"on (\d+) descriptors", out).group(1))
    with StreamingIndex.open(tmp_path / "auto") as idx:
        assert idx.encoder.config.k == auto_vocab_size(n) < 64 and f"k={idx.encoder.config.k}" in out
    assert "the most these descriptors can whiten" in out
    assert main(["index", "create", str(tmp_path / "given"), *base, "--vocab-size", "4"]) == 0
    with StreamingIndex.open(tmp_path / "given") as idx:
        assert idx.encoder.config.k == 4
    assert "can whiten" not in capsys.readouterr().out

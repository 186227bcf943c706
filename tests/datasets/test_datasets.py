"""Datasets: ground-truth parsing (text, .mat, revisited pickle) on small files
made here, the restricted unpickler, the download code against a local HTTP
server (no internet), and the known checks on the real ground truth files."""

import hashlib
import io
import os
import pickle
import re
import tarfile
import threading
import warnings
import zipfile
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import scipy.io

from streamk.datasets import (DATASETS, REMOTES, Dataset, Query, Remote, download, extract_archive, fetch,
                              holidays_from_ids, load_dataset, load_mat_ground_truth, load_paris6k_subset,
                              load_revisited, load_text_ground_truth, safe_load_pickle, ukbench_from_ids)
from streamk.errors import (ChecksumError, ConfigError, DownloadError, GroundTruthError, StreamkError,
                            UnknownDatasetError, UnsafeArchiveError, UnsafePickleError)


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ------------------------------------------------------- official text format

OX_IDS = ["all_souls_000000", "all_souls_000001", "all_souls_000002", "ashmolean_000000",
          "ashmolean_000001", "christ_church_000000"]


def oxford_gt_dir(root):
    gt = root / "gt_files"
    write(gt / "all_souls_1_query.txt", "oxc1_all_souls_000001 136.5000 34.1000 648.5000 955.7000\n")
    write(gt / "all_souls_1_good.txt", "all_souls_000001\nall_souls_000000\n")
    write(gt / "all_souls_1_ok.txt", "all_souls_000002\nall_souls_000000\n")     # 000000 in both lists
    write(gt / "all_souls_1_junk.txt", "ashmolean_000000\n")
    write(gt / "all_souls_10_query.txt", "oxc1_all_souls_000002 1 2 3 4\n")
    write(gt / "all_souls_10_good.txt", "all_souls_000002\n")
    write(gt / "all_souls_10_ok.txt", "")
    write(gt / "all_souls_10_junk.txt", "")
    write(gt / "all_souls_2_query.txt", "oxc1_christ_church_000000 5 6 7.5 8\n")
    write(gt / "all_souls_2_good.txt", "christ_church_000000\n")
    write(gt / "all_souls_2_ok.txt", "ashmolean_000001\n")
    write(gt / "all_souls_2_junk.txt", "all_souls_000000\nall_souls_000001\n")
    return gt


def test_text_ground_truth_oxford_format(tmp_path):
    ds = load_text_ground_truth(oxford_gt_dir(tmp_path), OX_IDS, name="oxford5k")
    # natural label order, as in the .mat files: _2 before _10
    assert ds.query_names == ["all_souls_1", "all_souls_2", "all_souls_10"]
    q = ds.queries[0]
    assert q.image_id == "all_souls_000001" and q.index == 1          # 'oxc1_' prefix dropped
    assert q.box == (136.5, 34.1, 648.5, 955.7)
    assert q.positives.tolist() == [0, 1, 2]                          # good {1, 0} + ok {2, 0}
    assert q.junk.tolist() == [3]
    q2 = ds.queries[1]
    assert q2.positives.tolist() == [4, 5] and q2.junk.tolist() == [0, 1] and q2.box == (5, 6, 7.5, 8)
    assert ds.queries[2].positives.tolist() == [2] and ds.queries[2].junk.size == 0
    assert ds.crop_query and not ds.exclude_query and ds.protocol == "oxford"


def test_text_ground_truth_paris_format_through_load_dataset(tmp_path):
    ids = ["paris_defense_000000", "paris_defense_000001", "paris_eiffel_000000"]
    for i in ids:
        write(tmp_path / "jpg" / f"{i}.jpg", "x")
    gt = tmp_path / "gt_files"
    write(gt / "defense_1_query.txt", "paris_defense_000001 10 20 30 40\n")
    write(gt / "defense_1_good.txt", "paris_defense_000000\n")
    write(gt / "defense_1_ok.txt", "paris_defense_000001\n")
    write(gt / "defense_1_junk.txt", "paris_eiffel_000000\n")
    ds = load_dataset("paris6k", root=tmp_path)
    assert ds.image_ids == tuple(ids)                                  # the jpg/ listing, sorted
    q = ds.queries[0]
    assert (q.name, q.image_id, q.index, q.box) == ("defense_1", "paris_defense_000001", 1, (10, 20, 30, 40))
    assert q.positives.tolist() == [0, 1] and q.junk.tolist() == [2]
    assert ds.image_path(2) == tmp_path / "jpg" / "paris_eiffel_000000.jpg"
    assert ds.query_image_path(q) == tmp_path / "jpg" / "paris_defense_000001.jpg"


def test_text_ground_truth_missing_images(tmp_path):
    gt = oxford_gt_dir(tmp_path)
    ids = [i for i in OX_IDS if i != "ashmolean_000001"]
    with pytest.warns(UserWarning, match="1 ground-truth image"):
        ds = load_text_ground_truth(gt, ids)
    assert ds.queries[1].positives.tolist() == [4]                    # christ_church only, re-indexed
    with pytest.raises(GroundTruthError, match="not in the image list"):
        load_text_ground_truth(gt, ids, missing="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_text_ground_truth(gt, ids, missing="ignore")


def test_text_ground_truth_malformed(tmp_path):
    gt = oxford_gt_dir(tmp_path)
    (gt / "all_souls_10_ok.txt").unlink()
    with pytest.raises(GroundTruthError, match="all_souls_10_ok.txt"):
        load_text_ground_truth(gt, OX_IDS)
    write(gt / "all_souls_10_ok.txt", "")
    write(gt / "all_souls_2_query.txt", "oxc1_christ_church_000000 5 6\n")
    with pytest.raises(GroundTruthError, match="x1 y1 x2 y2"):
        load_text_ground_truth(gt, OX_IDS)
    with pytest.raises(GroundTruthError, match="no \\*_query.txt"):
        load_text_ground_truth(tmp_path, OX_IDS)


# ---------------------------------------------------------------- .mat format


def make_mat(path, names, query_rows, gnd_rows):
    gnd = np.empty(len(gnd_rows), dtype=[("ok", "O"), ("junk", "O"), ("bbx", "O")])
    for i, row in enumerate(gnd_rows):
        gnd[i] = row
    ql = np.empty((len(query_rows), len(query_rows[0])), dtype=object)
    for i, row in enumerate(query_rows):
        ql[i] = row
    scipy.io.savemat(str(path), {"feature_name": np.array(names, dtype=object), "query_list": ql, "gnd": gnd})
    return path


def test_mat_ground_truth_is_one_based(tmp_path):
    path = make_mat(tmp_path / "gnd_oxford5k.mat", ["a", "b", "c", "d"],
                    [["b", 2, "x_1"], ["d", 4, "x_2"]],
                    [(np.array([1, 3], np.uint16), np.uint16(2), np.array([1.5, 2, 3, 4])),   # junk a scalar
                     (np.array([4], np.uint16), np.zeros((0, 0)), np.array([0.0, 0, 9, 9]))])  # junk empty
    ds = load_mat_ground_truth(path)
    assert ds.name == "oxford5k" and ds.image_ids == ("a", "b", "c", "d")
    q0, q1 = ds.queries
    assert (q0.name, q0.image_id, q0.index) == ("x_1", "b", 1)
    assert q0.positives.tolist() == [0, 2] and q0.junk.tolist() == [1] and q0.box == (1.5, 2, 3, 4)
    assert (q1.index, q1.positives.tolist(), q1.junk.tolist()) == (3, [3], [])
    # found by load_dataset in root/ before the shared data
    assert load_dataset("oxford5k", root=tmp_path).image_ids == ("a", "b", "c", "d")


def test_mat_ground_truth_inconsistent(tmp_path):
    path = make_mat(tmp_path / "g.mat", ["a", "b"], [["b", 1, "x_1"]], [(np.array([1]), np.array([2]), np.zeros(4))])
    with pytest.raises(GroundTruthError, match="does not point at"):
        load_mat_ground_truth(path)
    path = make_mat(tmp_path / "h.mat", ["a", "b"], [["b", 2, "x_1"]], [(np.array([3]), np.array([2]), np.zeros(4))])
    with pytest.raises(GroundTruthError, match="out of range"):
        load_mat_ground_truth(path)
    with pytest.raises(GroundTruthError, match="does not exist"):
        load_mat_ground_truth(tmp_path / "missing.mat")


# ------------------------------------------------------------ file-name ground truth


def test_holidays_from_file_names():
    ds = holidays_from_ids(["100000.jpg", "100001.jpg", "100100.jpg", "100101.jpg", "100102.jpg", "100200.jpg"])
    assert ds.image_ids[0] == "100000"
    assert ds.query_names == ["100000", "100100", "100200"]
    assert [q.positives.tolist() for q in ds.queries] == [[1], [3, 4], []]
    assert [q.junk.tolist() for q in ds.queries] == [[0], [2], [5]]      # the query itself
    assert ds.exclude_query and not ds.crop_query and ds.queries[0].box is None
    with pytest.raises(GroundTruthError):
        holidays_from_ids(["abc"])


def test_ukbench_from_listing(tmp_path):
    for i in range(8):
        write(tmp_path / "full" / f"ukbench{i:05d}.jpg", "x")
    ds = load_dataset("ukbench", root=tmp_path)
    assert ds.n_images == 8 and ds.image_dir == tmp_path / "full"
    assert ds.queries[6].positives.tolist() == [4, 5, 6, 7]
    with pytest.raises(GroundTruthError, match="groups of 4"):
        ukbench_from_ids(["a", "b", "c"])


# ---------------------------------------------------------- dataset object


def toy_dataset():
    qs = [Query("a_1", "i1", 1, (0, 0, 1, 1), np.array([0, 1, 3]), np.array([4])),
          Query("b_1", "i2", 2, None, np.array([2, 4]), np.array([0]))]
    return Dataset("toy", [f"i{k}" for k in range(5)], qs, protocol="oxford", crop_query=True)


def test_restrict_reindexes():
    sub = toy_dataset().restrict(["i4", "i1", "i3"], name="sub")
    assert sub.image_ids == ("i1", "i3", "i4")                          # original order
    assert sub.query_names == ["a_1"]                                   # b_1's image i2 is gone
    q = sub.queries[0]
    assert q.index == 0 and q.positives.tolist() == [0, 1] and q.junk.tolist() == [2]
    with pytest.raises(GroundTruthError, match="not in"):
        toy_dataset().restrict(["i9"])


def test_image_paths(tmp_path):
    ds = toy_dataset()
    with pytest.raises(ConfigError):
        ds.image_path(0)
    ds = Dataset("toy", ds.image_ids, ds.queries, root=tmp_path)
    assert ds.image_path(3) == tmp_path / "jpg" / "i3.jpg"
    assert ds.image_path("zz") == tmp_path / "jpg" / "zz.jpg"
    with pytest.raises(GroundTruthError):
        ds.image_path(5)
    assert ds.index_of("i2") == 2
    with pytest.raises(GroundTruthError):
        ds.index_of("nope")
    with pytest.raises(ConfigError):
        ds.queries[0].ground_truth("easy")                               # not a revisited dataset


def test_unknown_dataset():
    with pytest.raises(UnknownDatasetError):
        load_dataset("oxford6k")
    assert set(DATASETS) >= {"holidays", "oxford5k", "oxford105k", "paris6k", "paris106k", "roxford5k",
                             "rparis6k", "ukbench", "paris6k-subset"}


# ------------------------------------------------------- revisited + pickle


def revisited_cfg():
    return {"imlist": ["db0", "db1", "db2", "db3", "db4"], "qimlist": ["q0", "q1"],
            "gnd": [{"bbx": [1.0, 2.0, 30.5, 40.0], "easy": np.array([0, 2]), "hard": np.array([4]),
                     "junk": np.array([1])},
                    {"bbx": np.array([0.0, 0.0, 5.0, 5.0]), "easy": [], "hard": [3], "junk": []}]}


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_safe_pickle_loads_containers_and_numpy(protocol):
    obj = {"a": [1, 2.5, "s", (3, b"x"), {4, 5}, frozenset([6]), None, True],
           "arr": np.arange(6, dtype=np.int64).reshape(2, 3), "f": np.array([0.5], np.float32),
           "scalar": np.int64(7), "objarr": np.array(["x", 1], dtype=object)}
    out = safe_load_pickle(pickle.dumps(obj, protocol=protocol))
    assert out["a"] == obj["a"]
    np.testing.assert_array_equal(out["arr"], obj["arr"])
    assert out["arr"].dtype == np.int64 and out["f"].dtype == np.float32
    assert out["scalar"] == 7 and out["objarr"].tolist() == ["x", 1]


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_safe_pickle_refuses_code_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    data = pickle.dumps({"gnd": [_Evil(marker)]})
    with pytest.raises(UnsafePickleError, match="system"):
        safe_load_pickle(data)
    assert not marker.exists()
    # the same bytes through plain pickle would run it: the test pickle is real
    pickle.loads(data)
    assert marker.exists()
    for bad in (pickle.dumps(OrderedDict(a=1)), b"cbuiltins\neval\n(S'1+1'\ntR."):
        with pytest.raises(UnsafePickleError):
            safe_load_pickle(bad)
    path = tmp_path / "gnd_roxford5k.pkl"
    path.write_bytes(data)
    with pytest.raises(UnsafePickleError) as info:
        load_revisited(path)
    assert isinstance(info.value, StreamkError)
    with pytest.raises(GroundTruthError):
        safe_load_pickle(b"not a pickle")


def test_load_revisited(tmp_path):
    path = tmp_path / "gnd_roxford5k.pkl"
    path.write_bytes(pickle.dumps(revisited_cfg()))
    ds = load_dataset("roxford5k", root=tmp_path)
    assert ds.name == "roxford5k" and ds.protocol == "revisited" and ds.protocols == ("easy", "medium", "hard")
    assert ds.n_images == 5 and ds.query_names == ["q0", "q1"]
    q0, q1 = ds.queries
    assert q0.index is None and q0.box == (1.0, 2.0, 30.5, 40.0)        # queries are not in the database
    assert q0.easy.tolist() == [0, 2] and q0.hard.tolist() == [4] and q0.junk.tolist() == [1]
    assert q0.positives.tolist() == [0, 2, 4]                           # Medium
    assert [g[0].tolist() for g in ds.ground_truth("easy")] == [[0, 2], []]
    assert [g[1].tolist() for g in ds.ground_truth("easy")] == [[1, 4], [3]]
    assert [g[0].tolist() for g in ds.ground_truth("hard")] == [[4], [3]]
    assert [g[1].tolist() for g in ds.ground_truth("hard")] == [[0, 1, 2], []]
    assert ds.query_image_path(0) == tmp_path / "jpg" / "q0.jpg"
    bad = revisited_cfg()
    bad["gnd"][0]["hard"] = np.array([5])
    path.write_bytes(pickle.dumps(bad))
    with pytest.raises(GroundTruthError, match="out of range"):
        load_revisited(path)


# ------------------------------------------------------------ download


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        srv = self.server
        name = self.path.lstrip("/")
        rng = self.headers.get("Range")
        srv.log.append((name, rng))
        data = srv.files.get(name)
        if data is None:
            self.send_error(404)
            return
        start = 0
        if rng and srv.honour_range:
            start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if srv.truncate:
            body = body[: len(body) // 2]
        srv.served += len(body)  # counted before sending: the client may return first
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch, tmp_path):
    # hermetic: no shared data fallback, no mirror from the environment
    monkeypatch.setenv("STREAMK_SHARED_DATA", str(tmp_path / "no-shared-data"))
    monkeypatch.delenv("STREAMK_DATASETS_MIRROR", raising=False)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.files, srv.log, srv.served, srv.honour_range, srv.truncate = {}, [], 0, True, False
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def make_tgz(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(data, tuple):                 # (type, linkname)
                info.type, info.linkname = data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_zip(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def oxford_archives():
    images = make_tgz({f"{i}.jpg": f"jpeg {i}".encode() for i in OX_IDS})
    gt = make_tgz({"all_souls_1_query.txt": b"oxc1_all_souls_000001 136.5 34.1 648.5 955.7\n",
                   "all_souls_1_good.txt": b"all_souls_000001\nall_souls_000000\n",
                   "all_souls_1_ok.txt": b"all_souls_000002\n",
                   "all_souls_1_junk.txt": b"ashmolean_000000\n"})
    return {"oxbuild_images-v1.tgz": images, "gt_files_170407.tgz": gt}


def test_download_oxford_full(server, tmp_path):
    server.files.update(oxford_archives())
    dest = tmp_path / "oxford5k"
    assert download("oxford5k", dest, progress=True, base_url=server.url) == dest
    assert sorted(p.name for p in (dest / "jpg").iterdir()) == [f"{i}.jpg" for i in OX_IDS]
    assert (dest / "jpg" / "ashmolean_000001.jpg").read_bytes() == b"jpeg ashmolean_000001"
    ds = load_dataset("oxford5k", root=dest)
    q = ds.query("all_souls_1")
    assert q.positives.tolist() == [0, 1, 2] and q.junk.tolist() == [3] and q.box == (136.5, 34.1, 648.5, 955.7)
    assert ds.query_image_path(q).read_bytes() == b"jpeg all_souls_000001"
    # a second call fetches nothing
    n_requests = len(server.log)
    download("oxford5k", dest, progress=False, base_url=server.url)
    assert len(server.log) == n_requests
    # 105k: the same files, and a warning that the distractors are not fetched
    with pytest.warns(UserWarning, match="distractor"):
        download("oxford105k", tmp_path / "ox105k", progress=False, base_url=server.url)
    assert len(list((tmp_path / "ox105k" / "jpg").iterdir())) == len(OX_IDS)


def test_download_paris_holidays_ukbench_revisited_layouts(server, tmp_path):
    server.files.update({
        "paris_1-v1.tgz": make_tgz({"paris/defense/paris_defense_000000.jpg": b"d0"}),
        "paris_2-v1.tgz": make_tgz({"paris/louvre/paris_louvre_000000.jpg": b"l0"}),
        "paris_120310.tgz": make_tgz({"defense_1_query.txt": b"paris_defense_000000 1 2 3 4\n",
                                      "defense_1_good.txt": b"paris_louvre_000000\n",
                                      "defense_1_ok.txt": b"", "defense_1_junk.txt": b""}),
        "jpg1.tar.gz": make_tgz({"jpg/100000.jpg": b"h0", "jpg/100001.jpg": b"h1"}),
        "jpg2.tar.gz": make_tgz({"jpg/100100.jpg": b"h2", "jpg/100101.jpg": b"h3"}),
        "ukbench.zip": make_zip({**{f"full/ukbench{i:05d}.jpg": f"full{i}" for i in range(8)},
                                 **{f"thumbnails/ukbench{i:05d}.jpg": "thumb" for i in range(8)},
                                 "index.html": "<html/>"}),
        "oxbuild_images-v1.tgz": oxford_archives()["oxbuild_images-v1.tgz"],
        "gnd_roxford5k.pkl": pickle.dumps(revisited_cfg()),
    })
    paris = download("paris6k", tmp_path / "paris6k", progress=False, base_url=server.url)
    ds = load_dataset("paris6k", root=paris)
    assert ds.image_ids == ("paris_defense_000000", "paris_louvre_000000")
    assert ds.queries[0].positives.tolist() == [1] and ds.image_path(1).read_bytes() == b"l0"

    holidays = download("holidays", tmp_path / "holidays", progress=False, base_url=server.url)
    ds = load_dataset("holidays", root=holidays)
    assert ds.query_names == ["100000", "100100"] and ds.image_path(3).read_bytes() == b"h3"

    ukb = download("ukbench", tmp_path / "ukbench", progress=False, base_url=server.url)
    assert sorted(p.name for p in (ukb / "jpg").iterdir()) == [f"ukbench{i:05d}.jpg" for i in range(8)]
    ds = load_dataset("ukbench", root=ukb)
    assert ds.n_images == 8 and ds.image_path(5).read_bytes() == b"full5"      # full/, not thumbnails/

    rox = download("roxford5k", tmp_path / "roxford5k", progress=False, base_url=server.url)
    ds = load_dataset("roxford5k", root=rox)
    assert ds.protocol == "revisited" and ds.n_queries == 2 and (rox / "jpg" / "all_souls_000000.jpg").exists()


def test_download_resumes_partial_file(server, tmp_path):
    data = oxford_archives()["oxbuild_images-v1.tgz"]
    server.files["a.tgz"] = data
    dest = tmp_path / "d"
    dest.mkdir()
    k = len(data) // 3
    (dest / "a.tgz.part").write_bytes(data[:k])
    remote = Remote(server.url + "/a.tgz", "a.tgz", sha256=hashlib.sha256(data).hexdigest(), extract="jpg",
                    members="*.jpg", flatten=True)
    download("oxford5k", dest, progress=False, remotes=[remote])
    assert server.log == [("a.tgz", f"bytes={k}-")]
    assert server.served == len(data) - k                               # only the missing bytes
    assert (dest / "a.tgz").read_bytes() == data and not (dest / "a.tgz.part").exists()
    assert len(list((dest / "jpg").iterdir())) == len(OX_IDS)


def test_download_restarts_when_range_is_ignored(server, tmp_path):
    data = b"0123456789" * 100
    server.files["f.bin"] = data
    server.honour_range = False
    (tmp_path / "f.bin.part").write_bytes(b"garbage")
    fetch(server.url + "/f.bin", tmp_path / "f.bin", size=len(data), progress=False)
    assert (tmp_path / "f.bin").read_bytes() == data


def test_interrupted_transfer_keeps_part_and_resumes(server, tmp_path):
    data = bytes(range(256)) * 64
    server.files["f.bin"] = data
    server.truncate = True
    with pytest.raises(DownloadError):
        fetch(server.url + "/f.bin", tmp_path / "f.bin", progress=False)
    part = tmp_path / "f.bin.part"
    assert 0 < part.stat().st_size < len(data) and not (tmp_path / "f.bin").exists()
    server.truncate = False
    fetch(server.url + "/f.bin", tmp_path / "f.bin", sha256=hashlib.sha256(data).hexdigest(), progress=False)
    assert (tmp_path / "f.bin").read_bytes() == data
    assert server.log[-1][1] == f"bytes={len(data) // 2}-"


def test_resume_when_part_is_complete_or_too_long(server, tmp_path):
    data = b"abc" * 50
    server.files["f.bin"] = server.files["g.bin"] = data
    # the whole file is already in f.bin.part: the server answers 416 bytes */150 and the part is kept
    (tmp_path / "f.bin.part").write_bytes(data)
    fetch(server.url + "/f.bin", tmp_path / "f.bin", sha256=hashlib.sha256(data).hexdigest(), progress=False)
    assert (tmp_path / "f.bin").read_bytes() == data and server.log == [("f.bin", "bytes=150-")]
    # a part longer than the file (the file changed): 416 with another size -> start over without Range
    (tmp_path / "g.bin.part").write_bytes(data + b"stale")
    fetch(server.url + "/g.bin", tmp_path / "g.bin", progress=False)
    assert (tmp_path / "g.bin").read_bytes() == data
    assert server.log[1:] == [("g.bin", "bytes=155-"), ("g.bin", None)]


@pytest.mark.parametrize("bad", ["size", "sha256"])
def test_download_checksum_mismatch_extracts_nothing(server, tmp_path, bad):
    data = oxford_archives()["oxbuild_images-v1.tgz"]
    server.files["a.tgz"] = data
    kwargs = {"size": len(data) + 1} if bad == "size" else {"sha256": "0" * 64}
    remote = Remote(server.url + "/a.tgz", "a.tgz", extract="jpg", members="*.jpg", flatten=True, **kwargs)
    dest = tmp_path / "d"
    with pytest.raises(ChecksumError, match=bad.replace("sha256", "SHA-256")) as info:
        download("oxford5k", dest, progress=False, remotes=[remote])
    assert isinstance(info.value, DownloadError) and isinstance(info.value, StreamkError)
    assert not dest.exists()  # no archive, no .part, no jpg/: and the empty folder it made removed


def test_existing_file_is_checked_against_its_hash(server, tmp_path):
    """pooch keeps a file that matches the known SHA-256 (no request) and fetches one that differs again."""
    data = b"the published bytes" * 100
    server.files["f.bin"] = data
    digest = hashlib.sha256(data).hexdigest()
    (tmp_path / "f.bin").write_bytes(data)
    fetch(server.url + "/f.bin", tmp_path / "f.bin", sha256=digest, progress=False)
    assert server.log == []
    (tmp_path / "f.bin").write_bytes(b"tampered")
    fetch(server.url + "/f.bin", tmp_path / "f.bin", sha256=digest, progress=False)
    assert server.log == [("f.bin", None)] and (tmp_path / "f.bin").read_bytes() == data
    # without a known hash, what is there is kept
    (tmp_path / "g.bin").write_bytes(b"whatever")
    fetch(server.url + "/g.bin", tmp_path / "g.bin", progress=False)
    assert len(server.log) == 1


@pytest.mark.parametrize("members", [
    {"ok.jpg": b"fine", "../evil.jpg": b"evil"},
    {"ok.jpg": b"fine", "sub/../../evil.jpg": b"evil"},
    {"ok.jpg": b"fine", "/tmp/streamk-abs-evil.jpg": b"evil"},
    {"ok.jpg": b"fine", "link.jpg": (tarfile.SYMTYPE, "/etc/passwd")},
])
def test_malicious_tar_member_refused(server, tmp_path, members):
    server.files["a.tgz"] = make_tgz(members)
    dest = tmp_path / "d"
    remote = Remote(server.url + "/a.tgz", "a.tgz", extract="jpg", members="*.jpg", flatten=True)
    with pytest.raises(UnsafeArchiveError):
        download("oxford5k", dest, progress=False, remotes=[remote])
    assert not (tmp_path / "evil.jpg").exists() and not (dest / "jpg").exists()
    assert not os.path.exists("/tmp/streamk-abs-evil.jpg")


def test_malicious_zip_member_refused(tmp_path):
    archive = tmp_path / "a.zip"
    archive.write_bytes(make_zip({"ok.jpg": "fine", "../evil.jpg": "evil"}))
    with pytest.raises(UnsafeArchiveError):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "evil.jpg").exists() and not (tmp_path / "out").exists()


def test_extract_keeps_directories_without_flatten(tmp_path):
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(make_tgz({"jpg/1.jpg": b"1", "jpg/sub/2.jpg": b"2", "README": b"r"}))
    written = extract_archive(archive, tmp_path / "out", members="*.jpg")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in written) == ["jpg/1.jpg", "jpg/sub/2.jpg"]
    assert not (tmp_path / "out" / "README").exists()


def test_download_errors(server, tmp_path):
    with pytest.raises(DownloadError, match="404"):
        fetch(server.url + "/missing.tgz", tmp_path / "m.tgz", progress=False)
    with pytest.raises(UnknownDatasetError):
        download("nope", tmp_path)
    with pytest.raises(UnknownDatasetError):
        download("paris6k-subset", tmp_path)


def test_url_table():
    urls = {r.url for rs in REMOTES.values() for r in rs}
    # the face-blurred "-v1" image archives that replaced the originals on the VGG pages
    assert {"https://www.robots.ox.ac.uk/~vgg/data/oxbuildings/oxbuild_images-v1.tgz",
            "https://www.robots.ox.ac.uk/~vgg/data/oxbuildings/gt_files_170407.tgz",
            "https://www.robots.ox.ac.uk/~vgg/data/parisbuildings/paris_1-v1.tgz",
            "https://www.robots.ox.ac.uk/~vgg/data/parisbuildings/paris_2-v1.tgz",
            "https://www.robots.ox.ac.uk/~vgg/data/parisbuildings/paris_120310.tgz",
            "ftp://ftp.inrialpes.fr/pub/lear/douze/data/jpg1.tar.gz",
            "ftp://ftp.inrialpes.fr/pub/lear/douze/data/jpg2.tar.gz",
            "http://cmp.felk.cvut.cz/revisitop/data/datasets/roxford5k/gnd_roxford5k.pkl",
            "http://cmp.felk.cvut.cz/revisitop/data/datasets/rparis6k/gnd_rparis6k.pkl",
            "https://archive.org/download/ukbench/ukbench.zip"} == urls
    for rs in REMOTES.values():
        for r in rs:
            assert r.url.rsplit("/", 1)[1] == r.filename


# ------------------------------------------------------- real ground truth


def test_oxford5k_known_checks(shared_data):
    ds = load_dataset("oxford5k", gt=shared_data / "gt" / "gnd_oxford5k.mat")
    assert ds.n_images == 5063 and ds.n_queries == 55
    q = ds.query("all_souls_1")
    assert len(q.positives) == 78 and len(q.junk) == 33
    assert q.box == pytest.approx((136.5, 34.1, 648.5, 955.7))
    assert ds.image_ids[q.index] == q.image_id == "all_souls_000013"
    assert q.index in q.positives                                       # the query image is a positive


def test_holidays_known_checks(shared_data):
    ds = load_dataset("holidays", gt=shared_data / "gt")
    assert ds.n_images == 1491 and ds.n_queries == 500 and ds.exclude_query
    q = ds.query("100100")
    assert [ds.image_ids[i] for i in q.positives] == ["100101"]
    assert [ds.image_ids[i] for i in q.junk] == ["100100"]              # its own image is junk
    # the .mat agrees with the ground truth encoded in the file names
    derived = holidays_from_ids(ds.image_ids)
    assert derived.query_names == ds.query_names
    for a, b in zip(ds.queries, derived.queries):
        assert a.index == b.index
        assert a.positives.tolist() == b.positives.tolist() and a.junk.tolist() == b.junk.tolist()


@pytest.mark.parametrize("small, large", [("oxford5k", "oxford105k"), ("paris6k", "paris106k")])
def test_distractor_versions_agree(shared_data, small, large):
    a = load_dataset(small, gt=shared_data / "gt")
    b = load_dataset(large, gt=shared_data / "gt")
    assert b.n_images > 100_000 and a.query_names == b.query_names
    for qa, qb in zip(a.queries, b.queries):
        assert qa.box == qb.box and qa.image_id == qb.image_id == b.image_ids[qb.index]
        for field in ("positives", "junk"):
            ids_a = {a.image_ids[i] for i in getattr(qa, field)}
            ids_b = {b.image_ids[i] for i in getattr(qb, field)}
            assert ids_a == ids_b


EXPECTED_SUBSET_QUERIES = ["defense_4", "defense_5", "eiffel_3", "invalides_2", "invalides_5", "louvre_1",
                           "louvre_2", "louvre_3", "louvre_4", "moulinrouge_2", "moulinrouge_5", "triomphe_5"]


def test_paris6k_subset(shared_data):
    image_dir = shared_data / "paris6k-subset" / "jpg"
    ds = load_paris6k_subset(gt=shared_data / "gt", image_dir=image_dir)
    assert ds.n_images == 250 and ds.n_queries == 12
    assert ds.query_names == EXPECTED_SUBSET_QUERIES
    assert ds.crop_query and ds.protocol == "oxford"
    full = load_dataset("paris6k", gt=shared_data / "gt" / "gnd_paris6k.mat")
    present = set(ds.image_ids)
    assert present == {p.stem for p in image_dir.glob("*.jpg")}
    assert list(ds.image_ids) == [i for i in full.image_ids if i in present]     # the .mat's order
    for q in ds.queries:
        assert ds.image_ids[q.index] == q.image_id
        assert q.positives.size > 0
        assert q.positives.min() >= 0 and q.positives.max() < 250
        assert q.junk.size == 0 or (q.junk.min() >= 0 and q.junk.max() < 250)
        fq = full.query(q.name)
        assert q.box == fq.box
        assert {ds.image_ids[i] for i in q.positives} == {full.image_ids[i] for i in fq.positives} & present
        assert {ds.image_ids[i] for i in q.junk} == {full.image_ids[i] for i in fq.junk} & present
    # same result through load_dataset
    again = load_dataset("paris6k-subset", root=shared_data / "paris6k-subset", gt=shared_data / "gt")
    assert again.query_names == ds.query_names and again.image_ids == ds.image_ids


def test_paris6k_subset_boxes_inside_images(shared_data):
    Image = pytest.importorskip("PIL.Image")
    ds = load_paris6k_subset(gt=shared_data / "gt", image_dir=shared_data / "paris6k-subset" / "jpg")
    for q in ds.queries:
        path = ds.query_image_path(q)
        assert path.is_file()
        with Image.open(path) as im:
            w, h = im.size
        x1, y1, x2, y2 = q.box
        assert 0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h, (q.name, q.box, (w, h))


def _closed_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_download_command_failures_are_named_checked_first_and_leave_no_empty_folder(server, tmp_path, capsys):
    """An FTP failure is a DownloadError naming the URL (exit 7; it was a bare gaierror, exit 1),
    as an HTTP one is; --dir naming a file and a --mirror that is no URL are said before anything
    is fetched (they were FileExistsError and requests' "No scheme supplied"); a failed try leaves
    no empty folder it made."""
    from streamk.cli import main

    port = _closed_port()
    dest = tmp_path / "new" / "holidays"
    assert main(["datasets", "download", "holidays", "--dir", str(dest), "--mirror", f"ftp://127.0.0.1:{port}/"]) == 7
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"streamk: error: ftp://127.0.0.1:{port}/jpg1.tar.gz: "), err
    assert "check the network" in err[0]
    assert not (tmp_path / "new").exists()
    assert main(["datasets", "download", "oxford5k", "--dir", str(dest), "--mirror", server.url]) == 7  # 404
    assert "HTTP 404" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    requests = len(server.log)
    assert main(["datasets", "download", "oxford5k", "--dir", str(afile), "--mirror", server.url]) == 2
    assert capsys.readouterr().err.strip() == (
        f"streamk: error: cannot write the dataset oxford5k to {afile}: it is a file, not a folder; give a folder "
        f"(a new one, or an existing folder)")
    assert afile.read_text() == "mine\n" and len(server.log) == requests
    assert main(["datasets", "download", "oxford5k", "--dir", str(dest), "--mirror", "notaurl"]) == 2
    assert capsys.readouterr().err.strip().startswith(
        "streamk: error: the mirror 'notaurl' (--mirror or $STREAMK_DATASETS_MIRROR) is not a URL: give its address")
    assert not (tmp_path / "new").exists()

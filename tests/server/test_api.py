"""The HTTP API end to end, against a real ``streamk serve`` on 127.0.0.1: add, search by
upload / id / vector, update, delete, thumbnails, auth, limits and errors as JSON codes;
a server beside a ``streamk ingest`` in another process; SIGKILL mid-write; SIGTERM."""

import io
import json
import os
import shutil
import signal
import threading

import numpy as np
import pytest
from helpers.processes import run_python
from helpers.server import Server, alive, child_pids, make_index, png_bytes

httpx = pytest.importorskip("httpx")
from PIL import Image  # noqa: E402


@pytest.fixture(scope="module")
def served(photos, tmp_path_factory):
    """One server with a token and a 0.2 MB body limit over an index of p0..p3, for the
    tests of this module that leave the index as they found it (or clean up)."""
    tmp = tmp_path_factory.mktemp("served")
    index = make_index(tmp / "idx", photos)
    srv = Server(index, tmp, args=["--workers", "1", "--max-upload", "0.2",
                                   "--images", str(photos["root"] / "imgs")]).start()
    yield srv
    srv.stop()


def upload(client, path, **fields):
    return client.post("/search", files={"image": (path.rsplit("/", 1)[-1], png_bytes(path), "image/png")},
                       data={k: str(v) for k, v in fields.items()})


def assert_error(resp, status, code):
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert "Traceback" not in resp.text and "File \"" not in resp.text
    return body["error"]["message"]


def test_search_by_upload_is_verified_with_its_region(served, photos):
    with served.client() as c:
        r = upload(c, photos["paths"][1], k=3)
        assert r.status_code == 200, r.text
        body = r.json()
        top = body["results"][0]
        assert top["id"] == "p1" and top["verified"] and top["inliers"] >= 12
        assert top["why"] is None and top["log10_nfa"] <= -4  # a verified result: no reason not to be
        assert all(h["why"] is None or not h["verified"] for h in body["results"])
        # the same photo: the matched region is the whole image (the identity map), within a pixel
        region = np.array(top["region"])
        assert np.allclose(region, [[-0.5, -0.5], [255.5, -0.5], [255.5, 255.5], [-0.5, 255.5]], atol=1.0)
        assert top["image_size"] == [256, 256] and body["query"]["kind"] == "image"
        assert len(body["results"]) == 3 and [h["id"] for h in body["results"]].count("p1") == 1
        # a box: the region is the box mapped into the result (the identity here)
        r = upload(c, photos["paths"][1], k=1, box="32,40,200,220")
        top = r.json()["results"][0]
        assert top["id"] == "p1" and top["verified"]
        assert np.allclose(np.array(top["region"]), [[32, 40], [200, 40], [200, 220], [32, 220]], atol=1.0)
        # a box past the image: clipped to it (searched, verified and mapped as the image's part
        # inside it), as the Python API and the CLI do; one wholly outside: refused with the image's size
        r = upload(c, photos["paths"][1], k=1, box="32,40,9000,9000")
        top = r.json()["results"][0]
        assert r.json()["query"]["box"] == [32, 40, 255.5, 255.5] and top["id"] == "p1" and top["verified"]
        assert np.allclose(np.array(top["region"]), [[32, 40], [255.5, 40], [255.5, 255.5], [32, 255.5]], atol=1.0)
        msg = assert_error(upload(c, photos["paths"][1], k=1, box="300,0,400,100"), 400, "config")
        assert "outside the image, which is 256 x 256 pixels" in msg
        # the verification's bar, as a form field and in JSON: only what clears it is verified
        for r in (upload(c, photos["paths"][1], k=5, false_alarms_per_pair="1e-12"),
                  c.post("/search", json={"id": "p1", "k": 5, "false_alarms_per_pair": 1e-12})):
            assert r.status_code == 200, r.text
            assert all(h["verified"] == (h["log10_nfa"] is not None and h["log10_nfa"] <= -12)
                       for h in r.json()["results"]), r.json()
        assert_error(c.post("/search", json={"id": "p1", "false_alarms_per_pair": 0}), 400, "bad_request")
        # the first stage alone
        r = upload(c, photos["paths"][2], k=2, verify=0)
        assert [h["stage"] for h in r.json()["results"]] == ["first", "first"]
        assert r.json()["results"][0]["id"] == "p2" and r.json()["results"][0]["inliers"] is None


def test_add_search_by_id_and_vector_update_delete(served, photos):
    from streamk.index import StreamingIndex

    p5, p6 = photos["paths"][5], photos["paths"][6]
    with served.client() as c:
        r = c.post("/images", data={"id": "new"}, files={"image": ("p5.png", png_bytes(p5), "image/png")})
        assert r.status_code == 201 and r.json() == {"id": "new", "status": "added"}, r.text
        r = c.post("/images", data={"id": "new"}, files={"image": ("p5.png", png_bytes(p5), "image/png")})
        assert r.status_code == 200 and r.json()["status"] == "exists"
        msg = assert_error(c.post("/images", data={"id": "other"},
                                  files={"image": ("p5.png", png_bytes(p5), "image/png")}), 409, "duplicate")
        assert "'new'" in msg
        info = c.get("/images/new").json()
        assert info["kind"] == "upload" and info["image_size"] == [256, 256] and "source" not in info
        # by id: the stored vector, itself first
        r = c.post("/search", json={"id": "new", "k": 2, "verify": 0})
        assert r.status_code == 200 and r.json()["results"][0]["id"] == "new"
        assert r.json()["results"][0]["score"] == pytest.approx(1.0, abs=1e-5)
        # by vector: an image's stored vector finds that image
        with StreamingIndex.open(served.index, readonly=True) as idx:
            v = idx.vector("p2")
        r = c.post("/search", json={"vector": v.tolist(), "k": 1})
        assert r.json()["results"][0]["id"] == "p2" and r.json()["query"]["kind"] == "vector"
        # a vector image
        w = np.asarray(v, np.float64) + 0.01
        assert c.post("/images", json={"id": "vec", "vector": w.tolist()}).status_code == 201
        # the thumbnail of an upload: a JPEG stored with it
        r = c.get("/images/new/thumbnail")
        assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
        assert Image.open(io.BytesIO(r.content)).size == (256, 256)
        # update: another photo under the same id
        r = c.put("/images/new", files={"image": ("p6.png", png_bytes(p6), "image/png")})
        assert r.status_code == 200 and r.json()["status"] == "updated", r.text
        assert upload(c, p6, k=1).json()["results"][0]["id"] == "new"
        assert_error(c.put("/images/absent", json={"vector": w.tolist()}), 404, "unknown_id")
        # delete
        for image_id in ("new", "vec"):
            assert c.delete(f"/images/{image_id}").json() == {"id": image_id, "status": "removed"}
        assert_error(c.get("/images/new"), 404, "unknown_id")
        assert_error(c.delete("/images/new"), 404, "unknown_id")
        assert_error(c.get("/images/vec/thumbnail"), 404, "unknown_id")
        assert c.get("/stats").json()["images"] == 4


def test_metadata_and_filters(served, photos):
    with served.client() as c:
        # an upload with its metadata: the given fields, and the upload's own name and size
        r = c.post("/images", data={"id": "m4", "metadata": json.dumps({"album": "a", "year": 2020})},
                   files={"image": ("p4.png", png_bytes(photos["paths"][4]), "image/png")})
        assert r.status_code == 201, r.text
        meta = c.get("/images/m4").json()["metadata"]
        assert meta["album"] == "a" and meta["year"] == 2020 and meta["name"] == "p4.png" and meta["size"] > 0
        assert c.post("/images", json={"id": "mv", "vector": [0.0, 1.0] + [0.0] * 510,
                                       "metadata": {"album": "b"}}).status_code == 201
        try:
            # a filtered search returns only what the filter selects, k of them when k match
            for album, expect in (("a", {"p0", "p2", "m4"}), ("b", {"p1", "p3", "mv"})):
                r = upload(c, photos["paths"][1], k=3, where=json.dumps({"album": album}))
                assert r.status_code == 200, r.text
                hits = r.json()["results"]
                assert {h["id"] for h in hits} == expect
                assert all(h["metadata"]["album"] == album for h in hits)
            r = c.post("/search", json={"id": "p1", "k": 10, "where": {"album": {"in": ["b"]}}})
            assert {h["id"] for h in r.json()["results"]} == {"p1", "p3", "mv"}
            r = c.post("/search", json={"id": "p1", "k": 10, "where": {"album": "zzz"}})
            assert r.status_code == 200 and r.json()["results"] == []
            assert_error(c.post("/search", json={"id": "p1", "where": {"year": 2020}}), 400, "filter")
            assert_error(c.post("/search", json={"id": "p1", "where": {"album": {"near": 1}}}), 400, "filter")
            assert_error(c.post("/search", json={"id": "p1", "where": [1]}), 400, "bad_request")
            # metadata alone: replaced, or merged
            assert c.put("/images/mv", json={"metadata": {"album": "a", "x": 1}}).json()["status"] == "updated"
            assert c.put("/images/mv", json={"metadata": {"y": 2}, "merge": True}).status_code == 200
            assert c.get("/images/mv").json()["metadata"] == {"album": "a", "x": 1, "y": 2}
            r = c.post("/search", json={"id": "p1", "k": 10, "where": {"album": "a"}})
            assert "mv" in {h["id"] for h in r.json()["results"]}
            assert_error(c.put("/images/mv", content=b'{"metadata": {"bad": Infinity}}',
                               headers={"content-type": "application/json"}), 400, "bad_request")
            assert_error(c.put("/images/mv", json={"metadata": {"big": "x" * 70_000}}), 400, "metadata")
            assert_error(c.post("/images", json={"id": "mm", "vector": [1.0] * 512, "metadata": "text"}), 400,
                         "bad_request")
            assert c.get("/stats").json()["indexed_fields"] == ["album"]
            assert c.get("/health").json()["filters"] is True
        finally:
            for image_id in ("m4", "mv"):
                c.delete(f"/images/{image_id}")


def test_near_duplicates(served, photos):
    with served.client() as c:
        r = c.get("/images/p1/duplicates")
        assert r.status_code == 200 and r.json()["duplicates"] == []  # four different textures
        # the same photo re-encoded as a JPEG: other bytes, the same picture
        with Image.open(photos["paths"][1]) as im:
            jpeg = io.BytesIO()
            im.convert("RGB").save(jpeg, "JPEG", quality=85)
        assert c.post("/images", data={"id": "p1-copy", "metadata": json.dumps({"album": "b"})},
                      files={"image": ("copy.jpg", jpeg.getvalue(), "image/jpeg")}).status_code == 201
        try:
            for params in ({}, {"verify": "true"}):  # local geometry here: the classes, the default
                r = c.get("/images/p1/duplicates", params=params)
                assert r.status_code == 200, r.text
                answer = r.json()
                dups = answer["duplicates"]
                assert answer["rule"] == "classes" and answer["note"] is None
                assert [d["id"] for d in dups] == ["p1-copy"] and dups[0]["verified"] and dups[0]["inliers"] > 0, dups
                assert dups[0]["metadata"]["album"] == "b"
                assert [(p["b"], p["class"]) for p in answer["pairs"]] == [("p1-copy", "copy")]
            r = c.get("/images/p1/duplicates", params={"classes": "false"})  # the vector rule, asked for
            dups = r.json()["duplicates"]
            assert [d["id"] for d in dups] == ["p1-copy"] and dups[0]["score"] >= 0.5, dups
            assert r.json()["rule"] == "vector" and "same scene" in r.json()["note"]
            assert_error(c.get("/images/p1/duplicates", params={"classes": "false", "verify": "true"}), 400,
                         "config")
            assert [d["id"] for d in c.get("/images/p1-copy/duplicates").json()["duplicates"]] == ["p1"]
            # a misspelt query parameter is refused, as an unknown body field is (not answered with the default)
            msg = assert_error(c.get("/images/p1/duplicates", params={"treshold": "0.3"}), 400, "bad_request")
            assert "unknown query parameter 'treshold'" in msg and "threshold" in msg, msg
            msg = assert_error(c.post("/search?k=1", json={"id": "p1"}), 400, "bad_request")
            assert "unknown query parameter 'k': it takes none" in msg, msg
            # a search by id is verified with the image's stored local geometry
            hits = c.post("/search", json={"id": "p1-copy", "k": 2}).json()["results"]
            assert [h["id"] for h in hits] == ["p1-copy", "p1"] and all(h["verified"] for h in hits), hits
            hits = c.post("/search", json={"id": "p1-copy", "k": 2, "verify": 0}).json()["results"]
            assert [h["stage"] for h in hits] == ["first", "first"]
            assert_error(c.get("/images/absent/duplicates"), 404, "unknown_id")
            assert_error(c.get("/images/p1/duplicates", params={"threshold": 2}), 400, "bad_request")
            assert_error(c.get("/images/p1/duplicates", params={"max_results": 0}), 400, "bad_request")
        finally:
            c.delete("/images/p1-copy")


def test_thumbnails_of_collection_files_and_nothing_else(served, photos):
    with served.client() as c:
        r = c.get("/images/p0/thumbnail")  # ingested from the collection folder given with --images
        assert r.status_code == 200 and Image.open(io.BytesIO(r.content)).format == "JPEG"
        assert c.post("/images", json={"id": "v1", "vector": [1.0] + [0.0] * 511}).status_code == 201
        assert_error(c.get("/images/v1/thumbnail"), 404, "no_thumbnail")
        assert c.delete("/images/v1").status_code == 200
        # a client never names a server path: unknown fields are refused, ids are not paths
        assert_error(c.post("/search", json={"path": "/etc/passwd"}), 400, "bad_request")
        assert_error(c.post("/images", json={"id": "../x", "vector": [1.0] + [0.0] * 511}), 400, "invalid_id")


def test_auth_is_required_for_reads_and_writes(served, photos):
    with httpx.Client(base_url=served.url, timeout=60) as anon:
        assert anon.get("/health").json()["reads_need_token"] is True
        assert_error(anon.get("/stats"), 401, "unauthorized")
        assert_error(anon.post("/search", json={"id": "p1"}), 401, "unauthorized")
        assert_error(anon.get("/images/p1/thumbnail"), 401, "unauthorized")
        r = anon.post("/images", json={"id": "x", "vector": [1.0] + [0.0] * 511},
                      headers={"Authorization": "Bearer wrong-token-of-enough-length"})
        assert_error(r, 401, "unauthorized")
        assert_error(anon.delete("/images/p1"), 401, "unauthorized")
    with served.client() as c:
        assert c.get("/stats").json()["images"] == 4


def test_limits_and_bad_input_answer_json_codes(served, photos):
    with served.client() as c:
        big = bytes(300_000)
        assert_error(c.post("/search", files={"image": ("big.png", big, "image/png")}), 413, "upload_too_large")
        # a body streamed without a length is cut off at the limit too
        def chunks():
            for _ in range(30):
                yield bytes(10_000)
        r = c.post("/search", content=chunks(), headers={"content-type": "application/json"})
        assert_error(r, 413, "upload_too_large")
        # the image limits of streamk.features: 144 megapixels in a small file (checked on its header)
        huge = io.BytesIO()
        Image.new("1", (12000, 12000)).save(huge, "PNG")
        assert len(huge.getvalue()) < 200_000
        msg = assert_error(c.post("/search", files={"image": ("huge.png", huge.getvalue(), "image/png")}), 413,
                           "image_too_large")
        # the limit is the server's: a client is told to send less or ask its operator, not to pass a flag
        assert "144,000,000 pixels is over the limit" in msg and "--max-pixels N or max_pixels=" not in msg, msg
        assert "ask the server's operator to raise it with streamk serve --max-pixels" in msg, msg
        msg = assert_error(c.post("/search", files={"image": ("x.jpg", b"not an image at all", "image/jpeg")}),
                           422, "image_read")
        assert "not a recognised image" in msg
        grey = io.BytesIO()
        Image.new("L", (96, 96), 128).save(grey, "PNG")
        assert_error(c.post("/search", files={"image": ("grey.png", grey.getvalue(), "image/png")}), 422,
                     "empty_descriptor_set")
        assert_error(c.post("/search", content=b"{not json", headers={"content-type": "application/json"}), 400,
                     "bad_request")
        assert_error(c.post("/search", json={"id": "p1", "k": 0}), 400, "bad_request")
        assert_error(c.post("/search", json={"id": "p1", "k": 10**9}), 400, "bad_request")
        assert_error(c.post("/search", json={"vector": [1.0, 2.0]}), 400, "bad_request")
        assert_error(c.post("/search", json={"vector": [0.0] * 512}), 400, "zero_vector")
        assert_error(c.post("/search", json={"id": "absent"}), 404, "unknown_id")
        assert_error(c.post("/search", content=b"k=1", headers={"content-type": "text/plain"}), 415,
                     "unsupported_media_type")
        assert_error(c.get("/no/such/route"), 404, "not_found")
        assert_error(c.put("/stats"), 405, "method_not_allowed")
    # every request is logged with its time
    log = served.log()
    assert "POST /search 413" in log and "GET /no/such/route 404" in log
    assert " ms" in log.splitlines()[-1]


def test_a_read_only_server_without_a_token(photos, tmp_path, make_server):
    index = make_index(tmp_path / "idx", photos, n=2)
    srv = make_server(index, token=False, args=["--workers", "1"])
    with httpx.Client(base_url=srv.url, timeout=120) as c:
        assert c.get("/health").json() == {"status": "ok", "reads_need_token": False, "writable": False,
                                            "filters": True}
        assert c.get("/stats").json()["images"] == 2
        assert c.post("/search", json={"id": "p0", "k": 1}).json()["results"][0]["id"] == "p0"
        assert_error(c.post("/images", json={"id": "x", "vector": [1.0] + [0.0] * 511}), 403, "read_only")
        assert_error(c.delete("/images/p0"), 403, "read_only")
    # no CORS unless configured: a browser on another origin gets no permission
    r = httpx.options(f"{srv.url}/search", headers={"Origin": "https://elsewhere.example",
                                                     "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in r.headers


def test_requests_over_the_limit_are_told_the_server_is_busy(photos, tmp_path, make_server, wait_until):
    index = make_index(tmp_path / "idx", photos, n=1)
    srv = make_server(index, args=["--workers", "1", "--max-requests", "1"])
    release, started = threading.Event(), threading.Event()

    def slow_body():  # a request that stays in flight until released (bounded)
        yield b'{"id": "p0",'
        started.set()
        release.wait(60)
        yield b' "k": 1}'

    results = []
    t = threading.Thread(target=lambda: results.append(
        httpx.post(f"{srv.url}/search", content=slow_body(), headers={**srv.headers, "content-type":
                                                                       "application/json"}, timeout=120)))
    t.start()
    try:
        assert started.wait(60)
        with srv.client() as c:
            answers = []  # until the server has taken the slow request in; the last answer is checked below
            wait_until(lambda: answers.append(c.get("/stats")) or answers[-1].status_code == 503, 30,
                       "GET /stats to answer 503 while the slow request (max-requests 1) is in flight")
            r = answers[-1]
            assert_error(r, 503, "busy")
            assert r.headers["retry-after"] == "1"
            assert c.get("/health").status_code == 200  # always answered
    finally:
        release.set()
        t.join(timeout=120)
    assert results and results[0].status_code == 200, results
    with srv.client() as c:
        assert c.get("/stats").status_code == 200


def test_cors_when_configured(photos, tmp_path, make_server):
    index = make_index(tmp_path / "idx", photos, n=1)
    srv = make_server(index, args=["--workers", "1", "--cors", "https://app.example"])
    r = httpx.options(f"{srv.url}/search", headers={"Origin": "https://app.example",
                                                     "Access-Control-Request-Method": "POST"})
    assert r.headers.get("access-control-allow-origin") == "https://app.example"
    r = httpx.options(f"{srv.url}/search", headers={"Origin": "https://other.example",
                                                     "Access-Control-Request-Method": "POST"})
    assert r.headers.get("access-control-allow-origin") is None


def test_a_server_sees_what_streamk_ingest_adds_in_another_process(photos, tmp_path, make_server):
    from streamk.index import StreamingIndex

    index = make_index(tmp_path / "idx", photos, n=2)
    with StreamingIndex.open(index) as idx:
        idx.index_field("folder")
    srv = make_server(index, args=["--workers", "1"])
    with srv.client() as c:
        assert c.get("/stats").json()["images"] == 2
        new = tmp_path / "more"
        new.mkdir()
        for i in (6, 7):
            shutil.copy(photos["paths"][i], new / f"p{i}.png")
        out = run_python("-m", "streamk.cli", "ingest", str(index), str(new), "--workers", "1", "--no-progress",
                         "--no-cache", timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert c.get("/stats").json()["images"] == 4  # seen at the next request
        top = upload(c, photos["paths"][7], k=1).json()["results"][0]
        assert top["id"] == "p7.png" and top["verified"]
        # ingestion's metadata, less where the file lies on the server (hidden unless --show-paths)
        assert top["metadata"]["name"] == "p7.png" and not {"path", "folder"} & set(top["metadata"])
        meta = c.get("/images/p7.png").json()["metadata"]
        assert meta["size"] > 0 and not {"path", "folder"} & set(meta) and str(tmp_path) not in json.dumps(meta)
        folder = os.path.abspath(tmp_path / "more")
        hits = c.post("/search", json={"id": "p7.png", "k": 4, "where": {"folder": folder}}).json()["results"]
        assert sorted(h["id"] for h in hits) == ["p6.png", "p7.png"]  # a filter may still use the folder
        # and the server's own writes meanwhile land in the same index
        assert c.post("/images", data={"id": "up3"},
                      files={"image": ("p3.png", png_bytes(photos["paths"][3]), "image/png")}).status_code == 201
    with StreamingIndex.open(index, readonly=True) as idx:
        assert sorted(idx.ids()) == ["p0", "p1", "p6.png", "p7.png", "up3"]


def test_local_features_added_by_another_process_are_used_without_a_restart(photos, tmp_path, make_server):
    """A server started on an index without local geometry: after `streamk index
    add-local-features` in another process, the next requests verify (by upload and by
    id) and an uploaded image is stored with its geometry (its workers got the words)."""
    index = make_index(tmp_path / "idx", photos, n=3, local_features=False)
    srv = make_server(index, args=["--workers", "1"])
    with srv.client() as c:
        assert c.get("/stats").json()["local_features"] is False
        assert not upload(c, photos["paths"][1], k=1).json()["results"][0]["verified"]
        words = tmp_path / "words.npz"
        photos["vocabulary"].save(words)
        out = run_python("-m", "streamk.cli", "index", "add-local-features", str(index), "--vocabulary", str(words),
                         "--workers", "1", "--no-cache", timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert c.get("/stats").json()["local_features"] is True
        top = upload(c, photos["paths"][1], k=1).json()["results"][0]
        assert top["id"] == "p1" and top["verified"] and top["inliers"] > 0
        assert c.post("/images", data={"id": "up4"},
                      files={"image": ("p4.png", png_bytes(photos["paths"][4]), "image/png")}).status_code == 201
        hits = c.post("/search", json={"id": "up4", "k": 1}).json()["results"]
        assert hits[0]["id"] == "up4" and hits[0]["verified"] and hits[0]["inliers"] > 0
    from streamk.index import StreamingIndex

    with StreamingIndex.open(index, readonly=True) as idx:
        assert idx.geometry("up4") is not None and idx.geometry("p2") is not None


def test_show_paths_gives_where_the_files_lie(photos, tmp_path, make_server):
    index = make_index(tmp_path / "idx", photos, n=1)
    from streamk.index import StreamingIndex

    with StreamingIndex.open(index) as idx:
        idx.set_metadata("p0", {"path": "/srv/photos/p0.png", "folder": "/srv/photos", "album": "a"})
    srv = make_server(index, args=["--workers", "1", "--show-paths"])
    with srv.client() as c:
        assert c.get("/images/p0").json()["metadata"] == {"path": "/srv/photos/p0.png", "folder": "/srv/photos",
                                                          "album": "a"}


def test_sigkill_mid_write_loses_nothing_committed(photos, tmp_path, make_server, wait_until):
    from streamk.index import StreamingIndex

    index = make_index(tmp_path / "idx", photos, n=1)
    srv = make_server(index, args=["--workers", "1"])
    workers = child_pids(srv.proc.pid)
    assert workers, "the server runs its encoding workers in child processes"
    acked, stop = [], threading.Event()
    rng = np.random.default_rng(0)

    def writer(n_max=2000):
        with srv.client() as c:
            for i in range(n_max):
                if stop.is_set():
                    return
                v = rng.standard_normal(512)
                try:
                    r = c.post("/images", json={"id": f"v{i}", "vector": v.tolist()})
                except httpx.HTTPError:
                    return
                if r.status_code == 201:
                    acked.append(f"v{i}")

    t = threading.Thread(target=writer)
    t.start()
    # 20 writes answered, or the writer ended early (then the assertion below says so)
    wait_until(lambda: len(acked) >= 20 or not t.is_alive(), 60, "the server to answer 20 writes")
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(timeout=30)
    stop.set()
    t.join(timeout=60)
    assert len(acked) >= 20
    with StreamingIndex.open(index) as idx:
        stored = set(idx.ids())
        assert set(acked) <= stored  # every write the server answered is there
        assert len(idx) == len(stored) and idx.search(idx.vector(acked[-1]), k=1)[0][0] == acked[-1]
    wait_until(lambda: not any(alive(p) for p in workers), 30,
               f"the encoding workers {workers} to end with their killed parent")


def test_sigterm_stops_gracefully(photos, tmp_path, make_server, wait_until):
    from streamk.index import StreamingIndex

    index = make_index(tmp_path / "idx", photos, n=1)
    srv = make_server(index, args=["--workers", "1"])
    workers = child_pids(srv.proc.pid)
    with srv.client() as c:
        assert c.post("/images", json={"id": "last", "vector": [0.5] * 512}).status_code == 201
    rc = srv.stop(signal.SIGTERM)
    assert rc in (0, -signal.SIGTERM), srv.log()
    assert "Traceback" not in srv.log() and srv.log().rstrip().endswith("stopped"), srv.log()[-2000:]
    # its children (workers, multiprocessing's resource tracker) end too
    wait_until(lambda: not any(alive(p) for p in workers), 30,
               f"the server's children {workers} to end after its SIGTERM")
    with StreamingIndex.open(index, readonly=True) as idx:
        assert "last" in idx


def test_the_schema_describes_every_endpoint(served):
    with served.client() as c:  # the schema is a read: under the token when reads need it
        schema = c.get("/openapi.json").json()
    assert set(schema["paths"]) == {"/health", "/stats", "/search", "/images", "/images/{image_id}",
                                    "/images/{image_id}/thumbnail", "/images/{image_id}/duplicates", "/backup"}
    body = schema["paths"]["/search"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/json", "multipart/form-data"}
    assert json.dumps(schema).count("Traceback") == 0


@pytest.mark.parametrize("dask", [[], ["--dask", "local:1"]], ids=["shards-here", "shards-on-dask"])
def test_a_sharded_index_is_served_the_same_way(photos, tmp_path, make_server, dask):
    if dask:
        pytest.importorskip("distributed")
    import hashlib

    from streamk.features import extract
    from streamk.index import ShardedIndex, encoded_image_file
    from streamk.verification import stored_record

    path = tmp_path / "sharded"
    with ShardedIndex.create(path, photos["encoder"], shards=2, vector_dtype="float32", extractor=photos["extractor"],
                             vocabulary=photos["vocabulary"]) as idx:
        encoded = []
        for i in range(4):
            p = photos["paths"][i]
            f = extract(p, photos["extractor"])
            v, alpha = photos["encoder"].encode(f.descriptors, return_weights=True)
            geometry = stored_record(photos["vocabulary"], f.keypoints, f.descriptors, f.image_size)
            encoded.append(encoded_image_file(f"p{i}", p, hashlib.sha256(png_bytes(p)).hexdigest(), v, f.keypoints,
                                              alpha, f.image_size, geometry=geometry))
        assert idx.write_encoded(encoded) == ["added"] * 4
    srv = make_server(path, args=["--workers", "1", *dask])
    with srv.client() as c:
        assert c.get("/stats").json()["images"] == 4 and c.get("/stats").json()["shards"] == 2
        top = upload(c, photos["paths"][2], k=2).json()["results"][0]
        assert top["id"] == "p2" and top["verified"]
        r = c.post("/images", data={"id": "up"}, files={"image": ("p6.png", png_bytes(photos["paths"][6]),
                                                                  "image/png")})
        assert r.status_code == 201, r.text
        assert upload(c, photos["paths"][6], k=1).json()["results"][0]["id"] == "up"
        for image_id in ("p1", "up"):  # by id: verified with the record of whichever shard holds it
            hit = c.post("/search", json={"id": image_id, "k": 1}).json()["results"][0]
            assert hit["id"] == image_id and hit["verified"] and hit["inliers"] > 0, hit
        assert c.get("/images/up/thumbnail").headers["content-type"] == "image/jpeg"
        assert c.delete("/images/up").status_code == 200
        assert c.get("/stats").json()["images"] == 4

"""Input checked before it costs anything (issue 25 item 3), against a real ``streamk
serve``: JSON nested deeper than MAX_JSON_DEPTH, numbers too large for a float and
vectors of huge values are answered 400 (never 500), and one vector check serves add and
search, so what /images stores /search takes too."""

import json

import numpy as np
import pytest
from helpers.server import running_server

httpx = pytest.importorskip("httpx")

from streamk.server.models import MAX_JSON_DEPTH, MAX_JSON_VALUES, json_depth, json_shape  # noqa: E402

DIM = 512


@pytest.fixture(scope="module")
def served(photos, tmp_path_factory):
    with running_server(photos, tmp_path_factory.mktemp("bad-input")) as srv:
        yield srv


def nested(depth, leaf=1):
    """A JSON value of ``depth`` levels of lists and objects, alternating."""
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


def nested_text(depth):
    """JSON text of ``depth`` levels of objects and lists (written as text: json.dumps
    recurses)."""
    return '{"a": [' * (depth // 2) + '{"a": 1}' * (depth % 2) + (depth % 2 == 0) * "1" + "]}" * (depth // 2)


def multipart(fields):
    """Form fields sent as multipart/form-data (no file)."""
    return {name: (None, value) for name, value in fields.items()}


def assert_error(resp, status, code):
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] == code, resp.text
    return resp.json()["error"]["message"]


def test_json_depth_scan_agrees_with_the_parser():
    for depth in range(0, 30):
        assert json_depth(nested_text(depth)) == depth
        if depth < 100:
            json.loads(nested_text(depth))
    rng = np.random.default_rng(0)
    for depth in range(0, 12):
        value = nested(depth, leaf="[{\\\"]}")  # brackets, quotes and backslashes inside strings do not count
        text = json.dumps(value)
        assert json_depth(text) == depth
        assert json_depth(json.dumps({"x": value, "s": "]]]" * int(rng.integers(1, 5))})) == depth + 1


def values_and_empties(value):
    """(values, empty containers) of a parsed JSON value, the value itself counted."""
    if isinstance(value, (list, dict)):
        items = list(value.values()) if isinstance(value, dict) else value
        counts = [values_and_empties(v) for v in items]
        return 1 + sum(c[0] for c in counts), (not items) + sum(c[1] for c in counts)
    return 1, 0


def test_json_shape_counts_the_values_the_parser_builds():
    """1 + commas + opening brackets outside strings: each value once, an empty container twice."""
    rng = np.random.default_rng(2)

    def random_value(depth):
        pick = int(rng.integers(0, 6 if depth < 5 else 3))
        if pick == 0:
            return float(rng.standard_normal())
        if pick == 1:
            return "".join(rng.choice(list('ab,[]{}"\\:'), int(rng.integers(0, 6))))
        if pick == 2:
            return None
        if pick in (3, 4):
            return [random_value(depth + 1) for _ in range(int(rng.integers(0, 4)))]
        return {f"k{i},[": random_value(depth + 1) for i in range(int(rng.integers(0, 4)))}
    for _ in range(300):
        value = random_value(0)
        values, empties = values_and_empties(value)
        for text in (json.dumps(value), json.dumps(value, indent=1)):
            assert json_shape(text) == (json_depth(text), values + empties), text


def test_a_body_of_more_values_than_a_vector_and_metadata_is_refused_before_parsing(served):
    """A /search body of 20 MB of numbers was parsed whole (~270 MB of Python floats) before its length
    was found wrong; 12 at once took a server to 3.1 GB. A body holds at most the index's dimension +
    MAX_JSON_VALUES values, counted before parsing; metadata of 64 KiB of numbers still fits."""
    too_many = DIM + MAX_JSON_VALUES + 1
    with served.client() as c:
        for route, body in (("/search", {"vector": [0.5] * too_many}),
                            ("/images", {"id": "many", "vector": [0.5] * DIM, "metadata": {"a": [1] * too_many}})):
            message = assert_error(c.post(route, json=body), 400, "bad_request")
            assert f"holds {values_and_empties(body)[0]:,} JSON values; at most {too_many - 1:,}" in message
            assert "send one vector at a time" in message
        full = {"id": "many", "vector": [0.5] * DIM, "metadata": {"a": [1] * 30_000}}  # 60 KB of metadata
        assert c.post("/images", json=full).status_code == 201
        r = c.post("/search", json={"vector": [0.5] * DIM, "where": {"name": {"in": ["x"] * 1024}}})
        assert r.status_code == 200 or r.json()["error"]["code"] == "filter", r.text  # past the count
        assert c.delete("/images/many").status_code == 200


def test_json_nested_deeper_than_the_limit_is_refused_before_parsing(served):
    with served.client() as c:
        # a body at the limit is taken: metadata nested MAX_JSON_DEPTH - 1 deep inside the body object
        ok = c.post("/images", json={"id": "deep-ok", "vector": [1.0] * DIM, "metadata": nested(MAX_JSON_DEPTH - 1)})
        assert ok.status_code == 201, ok.text
        for depth in (MAX_JSON_DEPTH, 20, 960, 5000):
            body = f'{{"id": "deep-{depth}", "vector": {[1.0] * DIM}, "metadata": {nested_text(depth)}}}'
            msg = assert_error(c.post("/images", content=body,
                                      headers={"content-type": "application/json"}), 400, "bad_request")
            assert "deep" in msg
            form = {"id": f"deep-{depth}", "vector": json.dumps([1.0] * DIM), "metadata": nested_text(depth)}
            assert_error(c.post("/images", files=multipart(form)), 400, "bad_request")
            assert c.get(f"/images/deep-{depth}").status_code == 404  # nothing stored
        assert_error(c.post("/search", content="[" * 100_000 + "]" * 100_000,
                            headers={"content-type": "application/json"}), 400, "bad_request")
        assert c.delete("/images/deep-ok").status_code == 200
    assert "Traceback" not in served.log()


def test_numbers_too_large_for_a_float_are_refused(served):
    with served.client() as c:
        for number in ("1" + "0" * 400, "-" + "9" * 301, "1e400", "-1e309"):
            text = '{"id": "huge", "vector": [' + ", ".join([number] * DIM) + "]}"
            for route in ("/images", "/search"):
                r = c.post(route, content=text.replace('"id": "huge", ', "") if route == "/search" else text,
                           headers={"content-type": "application/json"})
                assert_error(r, 400, "bad_request")
            form = {"id": "huge", "vector": "[" + ", ".join([number] * DIM) + "]"}
            assert_error(c.post("/images", files=multipart(form)), 400, "bad_request")
            # in metadata and filters too: no int -> float overflow anywhere behind
            assert_error(c.post("/search", content='{"id": "p0", "where": {"n": ' + number + "}}",
                                headers={"content-type": "application/json"}), 400, "bad_request")
    assert "Traceback" not in served.log()


def test_huge_and_tiny_vectors_are_unit_vectors_on_add_and_search_alike(served):
    """[1e300] * D was stored as zeros (the norm overflowed); one check now serves both
    paths: the stored vector is the unit vector of its direction (numpy's, below)."""
    rng = np.random.default_rng(1)
    direction = rng.standard_normal(DIM)
    unit = direction / np.linalg.norm(direction)
    with served.client() as c:
        for i, scale in enumerate((1e300, 1e-300, 1.7e308, 1e-310)):
            vector = (direction / np.abs(direction).max() * scale).tolist()
            r = c.post("/images", json={"id": f"scaled-{i}", "vector": vector})
            # the same direction, the same unit vector: stored once, then a duplicate of it (409)
            assert r.status_code == 201 or (i and r.status_code == 409 and "scaled-0" in r.text), r.text
            hits = c.post("/search", json={"vector": vector, "k": 1, "verify": 0}).json()["results"]
            assert hits[0]["id"].startswith("scaled-") and abs(hits[0]["score"] - 1) < 2e-3, hits
            # its score against the unit vector computed here: 1 within float16 storage (1e-3)
            best = c.post("/search", json={"vector": unit.tolist(), "k": 1, "verify": 0}).json()["results"][0]
            assert best["id"].startswith("scaled-") and abs(best["score"] - 1) < 2e-3, best
            by_id = c.post("/search", json={"id": "scaled-0", "k": 1, "verify": 0})
            assert by_id.status_code == 200 and abs(by_id.json()["results"][0]["score"] - 1) < 2e-3, by_id.text
        for i in range(4):
            c.delete(f"/images/scaled-{i}")
        assert_error(c.post("/search", json={"vector": [0.0] * DIM}), 400, "zero_vector")


def test_an_error_quoting_a_large_value_is_short(served):
    """A filter error quotes the value it refuses: a 1 MB value is not sent back whole."""
    with served.client() as c:
        r = c.post("/search", json={"id": "p0", "where": {"s": "x" * (1 << 20)}})
        assert r.status_code == 400 and len(r.content) < 2000, len(r.content)

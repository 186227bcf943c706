"""One index opened several times in one process (a notebook that opens it again, a
reader beside a writer): LMDB refuses a second environment on the same file in one
process, so the stores share one, closed with the last of them. Opening it twice used
to raise NotAnIndexError."""

import shutil

import numpy as np
import pytest

from streamk.errors import ReadOnlyIndexError
from streamk.index import StreamingIndex

from helpers.index import make_encoder, vectors  # noqa: E402


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "ix"
    with StreamingIndex.create(p, make_encoder(), vector_dtype="float32") as idx:
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(vectors(1, 20))])
    return p


def test_open_twice_writer_and_reader(path):
    V = vectors(1, 20)
    a = StreamingIndex.open(path)
    b = StreamingIndex.open(path, readonly=True)
    c = StreamingIndex.open(path)
    assert len(a) == len(b) == len(c) == 20
    a.add("new", vector=V[3] + V[4])
    assert "new" in b and b.search(V[3] + V[4], k=1)[0][0] == "new"  # b sees a's write
    c.remove(["v0"])
    assert "v0" not in a and len(b) == 20
    a.close()
    assert b.search(V[5], k=1)[0][0] == "v5"  # the others go on after one closes
    with pytest.raises(ReadOnlyIndexError):
        b.add("x", vector=V[6])
    b.close()
    c.add("again", vector=V[7] - V[8])
    c.close()
    c.close()  # closing twice is harmless
    with StreamingIndex.open(path, readonly=True) as d:
        assert sorted(d.ids()) == sorted([f"v{i}" for i in range(1, 20)] + ["new", "again"])
        np.testing.assert_allclose(d.vector("v9"), V[9], atol=1e-6)


def test_open_while_the_creator_is_open(tmp_path):
    with StreamingIndex.create(tmp_path / "ix", make_encoder()) as made:
        made.add("a", vector=vectors(2, 1)[0])
        with StreamingIndex.open(tmp_path / "ix", readonly=True) as again:
            assert again.ids() == ["a"]
        made.add("b", vector=vectors(3, 1)[0])
    with StreamingIndex.open(tmp_path / "ix") as idx:
        assert sorted(idx.ids()) == ["a", "b"]


def test_read_only_first_then_writable_is_a_named_error(path):
    with StreamingIndex.open(path, readonly=True) as ro:
        with pytest.raises(ReadOnlyIndexError, match="open read-only elsewhere in this process"):
            StreamingIndex.open(path)
        assert len(ro) == 20  # the failed open took nothing away
    with StreamingIndex.open(path) as rw:  # once the read-only one is closed
        rw.add("w", vector=vectors(4, 1)[0])


def test_a_folder_made_anew_is_a_new_index(path):
    old = StreamingIndex.open(path, readonly=True)
    try:
        moved = path.with_name("moved")
        shutil.move(path, moved)  # the open one now lives in "moved"
        with StreamingIndex.create(path, make_encoder()) as fresh:
            assert len(fresh) == 0
            fresh.add("only", vector=vectors(5, 1)[0])
        with StreamingIndex.open(path) as idx:
            assert idx.ids() == ["only"]
        assert len(old) == 20
    finally:
        old.close()

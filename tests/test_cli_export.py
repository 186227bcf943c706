"""``streamk index export IDX OUT``: every vector of an index, page by page, into a .npy
array or an .fvecs file (what faiss and the INRIA tools read) and its ids into OUT with
.ids.txt for its extension; written beside OUT and renamed at the end; a single and a
sharded index alike (through the Index interface); refusals as one line."""

import numpy as np
import pytest

from streamk.cli import index_commands, main
from streamk.errors import IndexChangedError, OutputFileError
from streamk.features import read_fvecs
from streamk.index import ShardedIndex, StreamingIndex, open_index

from helpers.index import DIM, make_encoder, vectors

N = 40
PAGE = 7  # smaller than N: the export reads several pages
IDS = [f"img{i:02d}.jpg" for i in range(N - 2)] + ["café/été.jpg".replace("/", "-"), "line\u2028sep 東京.png"]


def ids_of(path):
    """The ids file, one id a line: split on "\\n" only (an id may hold U+2028, which
    str.splitlines splits on)."""
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n")
    return text.split("\n")[:-1]


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    """{kind: path} of a single and a 3-shard index holding the same N images, closed."""
    tmp = tmp_path_factory.mktemp("export")
    encoder, V = make_encoder(), vectors(3, N)
    items = [{"id": i, "vector": v} for i, v in zip(IDS, V)]
    out = {"one": tmp / "one", "sharded": tmp / "sharded", "empty": tmp / "empty"}
    with StreamingIndex.create(out["one"], encoder, vector_dtype="float32") as idx:
        idx.add_many(items)
    with ShardedIndex.create(out["sharded"], encoder, shards=3, vector_dtype="float32") as idx:
        idx.add_many(items)
    StreamingIndex.create(out["empty"], encoder, vector_dtype="float32").close()
    return out


@pytest.fixture
def pages(monkeypatch):
    """The export's page size made PAGE; pages(cls): the sizes of the pages read from an
    index of class cls from then on (a sharded index's own, not its shards')."""
    monkeypatch.setattr(index_commands, "EXPORT_PAGE", PAGE)
    sizes = []

    def count(cls):
        def counted(self, after=None, n=256, *old, _read=cls.vectors_page):
            got = _read(self, after, n, *old)
            sizes.append(len(got[0]))
            return got
        monkeypatch.setattr(cls, "vectors_page", counted)
        return sizes
    return count


@pytest.mark.parametrize("fmt", [".npy", ".fvecs"])
@pytest.mark.parametrize("kind", ["one", "sharded"])
def test_the_export_holds_every_vector_and_its_id(indexes, pages, tmp_path, capsys, kind, fmt):
    out = tmp_path / f"vectors{fmt}"
    sizes = pages(StreamingIndex if kind == "one" else ShardedIndex)
    assert main(["index", "export", str(indexes[kind]), str(out), "--no-progress"]) == 0
    ids_file = tmp_path / "vectors.ids.txt"
    assert capsys.readouterr().out == f"exported {N} vectors of dimension {DIM} to {out} (ids: {ids_file})\n"
    X = np.load(out) if fmt == ".npy" else read_fvecs(out)
    ids = ids_of(ids_file)
    assert X.dtype == np.float32 and X.shape == (N, DIM)
    assert sorted(ids) == sorted(IDS) and "line\u2028sep 東京.png" in ids
    assert max(sizes) == PAGE and sum(sizes) == N and len([s for s in sizes if s]) > N // PAGE
    with open_index(indexes[kind], readonly=True) as idx:  # each row against the index's own vector(id)
        assert all(np.array_equal(X[r], idx.vector(i)) for r, i in enumerate(ids))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, ids_file.name])  # no temporary left


@pytest.mark.parametrize("fmt", [".npy", ".fvecs"])
def test_an_empty_index_exports_no_rows_of_its_dimension(indexes, tmp_path, capsys, fmt):
    out = tmp_path / f"e{fmt}"
    assert main(["index", "export", str(indexes["empty"]), str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"exported 0 vectors of dimension {DIM} to ")
    X = np.load(out) if fmt == ".npy" else read_fvecs(out, dim=DIM)
    assert X.shape == (0, DIM) and X.dtype == np.float32
    assert ids_of(tmp_path / "e.ids.txt") == []


def one_line(capsys):
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_refusals_are_one_line_with_exit_2_and_write_nothing(indexes, tmp_path, capsys):
    ix = str(indexes["one"])
    with pytest.raises(SystemExit) as exc:
        main(["index", "export", ix, str(tmp_path / "v.csv")])
    line = one_line(capsys)
    assert exc.value.code == 2 and line.startswith("streamk index export: error: OUT must end in .npy")
    assert ".fvecs" in line
    assert main(["index", "export", ix, str(tmp_path / "missing" / "v.npy")]) == OutputFileError.exit_code == 2
    assert "missing does not exist" in one_line(capsys)
    (tmp_path / "v.npy").write_bytes(b"mine")
    assert main(["index", "export", ix, str(tmp_path / "v.npy")]) == 2
    assert "it exists; give --force" in one_line(capsys)
    assert (tmp_path / "v.npy").read_bytes() == b"mine" and not (tmp_path / "v.ids.txt").exists()
    (tmp_path / "w.ids.txt").write_text("theirs\n")  # the ids file of w.fvecs is an output too
    assert main(["index", "export", ix, str(tmp_path / "w.fvecs")]) == 2
    assert "w.ids.txt: it exists" in one_line(capsys) and not (tmp_path / "w.fvecs").exists()
    assert main(["index", "export", ix, str(tmp_path / "v.npy"), "--force", "--no-progress"]) == 0
    assert np.load(tmp_path / "v.npy").shape == (N, DIM) and len(ids_of(tmp_path / "v.ids.txt")) == N
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.ids.txt", "v.npy", "w.ids.txt"]


@pytest.mark.parametrize("change", ["add", "add and remove"])
def test_an_index_changed_during_the_export_is_refused_and_nothing_written(tmp_path, monkeypatch, capsys, change):
    """An image added between two pages (by a writer holding the index open): the pass
    reads more than len(idx) said at the start; the export says so (exit 4) and leaves no
    file, rather than an array whose rows and count disagree. An image added and one not yet
    read removed leave the count as it was: the index's change count tells."""
    monkeypatch.setattr(index_commands, "EXPORT_PAGE", PAGE)
    idx = StreamingIndex.create(tmp_path / "ix", make_encoder(), vector_dtype="float32")
    idx.add_many([{"id": i, "vector": v} for i, v in zip(IDS, vectors(4, N))])
    read = idx.vectors_page

    def page_then_add(after=None, n=256):
        got = read(after, n)
        if after is None:
            idx.add("added meanwhile", vector=vectors(5, 1)[0])
            if change == "add and remove":
                idx.remove(IDS[-1])  # on the last page: not read yet
        return got

    monkeypatch.setattr(idx, "vectors_page", page_then_add)
    monkeypatch.setattr(index_commands, "open_from_args", lambda args, readonly: idx)
    out = tmp_path / "out" / "v.npy"
    out.parent.mkdir()
    assert main(["index", "export", str(tmp_path / "ix"), str(out)]) == IndexChangedError.exit_code == 4
    assert "changed during the export" in one_line(capsys)
    assert list(out.parent.iterdir()) == []


def test_forced_over_old_files_a_crash_before_the_last_rename_leaves_no_old_vectors_beside_new_ids(
        indexes, tmp_path, monkeypatch, capsys):
    """--force over an earlier export: the new ids are renamed into place first, then the
    vectors; the old vectors are removed in between, so that an export killed there leaves
    the new ids alone, never the old vectors beside them (rows that would not match)."""
    import os

    from streamk import files

    out = tmp_path / "v.npy"
    out.write_bytes(b"old vectors")
    (tmp_path / "v.ids.txt").write_text("old\n")
    replace = os.replace

    def crash_at_the_vectors(src, dst):
        if str(dst) == str(out):
            raise KeyboardInterrupt  # killed between the two renames
        replace(src, dst)

    monkeypatch.setattr(files.os, "replace", crash_at_the_vectors)
    assert main(["index", "export", str(indexes["one"]), str(out), "--force", "--no-progress"]) == 130  # Ctrl-C's
    assert not out.exists() and len(ids_of(tmp_path / "v.ids.txt")) == N
    assert [p.name for p in tmp_path.iterdir()] == ["v.ids.txt"]  # no temporary file left either

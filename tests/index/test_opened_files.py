"""An open index knows the files it opened (``Index.opened_files``), and ``replaced_files``
tells whether its path still holds them: writes (which change a file's size and times) keep
them; a folder moved away and another put in its place (a backup restored under a program
that keeps the index open) does not."""

import shutil

import pytest

from streamk.index import ShardedIndex, StreamingIndex, backup, open_index, replaced_files

from helpers.index import make_encoder, vectors  # noqa: E402


def _single(path):
    with StreamingIndex.create(path, make_encoder(), vector_dtype="float32") as idx:
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(vectors(1, 8))])


def _sharded(path):
    with ShardedIndex.create(path, make_encoder(), shards=2, vector_dtype="float32") as idx:
        idx.add_many([{"id": f"v{i}", "vector": v} for i, v in enumerate(vectors(1, 8))])


@pytest.mark.parametrize("make, names", [(_single, {"", "data.mdb"}),
                                         (_sharded, {"", "shards.json", "shard-000", "shard-000/data.mdb",
                                                     "shard-001", "shard-001/data.mdb"})])
@pytest.mark.parametrize("restore", ["move", "delete"])
def test_writes_keep_the_opened_files_and_a_restore_replaces_them(tmp_path, make, names, restore):
    path = tmp_path / "ix"
    make(path)
    backup(path, tmp_path / "bk", False)
    with open_index(path) as idx:
        opened = idx.opened_files()
        real = str(path.resolve())
        assert {p.replace(real, str(path)).removeprefix(str(path)).lstrip("/") for p in opened} == names
        for i, v in enumerate(vectors(2, 200)):  # grows data.mdb, changes its times: the same files
            idx.add(f"w{i}", vector=v)
        idx.remove(["v0", "w3"])
        assert replaced_files(opened) == []
        if restore == "move":
            path.rename(tmp_path / "ix.old")
        else:
            shutil.rmtree(path)
        assert sorted(replaced_files(opened)) == sorted(opened)  # moved away: nothing at the paths
        (tmp_path / "bk").rename(path)
        assert sorted(replaced_files(opened)) == sorted(opened)  # the backup's files: others
    with open_index(path, readonly=True) as again:  # the restored index, opened anew: its own files
        assert replaced_files(again.opened_files()) == [] and len(again) == 8

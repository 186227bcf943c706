"""Files a user keeps are written whole or not at all, and their failures are named
(streamk.files): a missing folder, a folder in the way, a full disk."""

import errno

import numpy as np
import pytest

from streamk import files
from streamk.errors import DiskFullError, OutputFileError, StreamkError


def test_atomic_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "a.bin"
    files.atomic_write(path, lambda fh: fh.write(b"old"))
    files.atomic_write(path, lambda fh: fh.write(b"new contents"))
    assert path.read_bytes() == b"new contents" and [p.name for p in tmp_path.iterdir()] == ["a.bin"]


@pytest.mark.parametrize("where", ["missing folder", "a folder", "a file as folder"])
def test_a_path_that_cannot_take_a_file_is_named(tmp_path, where):
    (tmp_path / "f").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    path = {"missing folder": tmp_path / "no" / "e.npz", "a folder": tmp_path / "d",
            "a file as folder": tmp_path / "f" / "e.npz"}[where]
    for call in (lambda: files.check_output_file(path, "the encoder"),
                 lambda: files.atomic_write(path, lambda fh: fh.write(b"x"), "the encoder")):
        with pytest.raises(OutputFileError) as err:
            call()
        e = err.value
        assert isinstance(e, OSError) and isinstance(e, StreamkError) and e.exit_code == 2
        assert str(path) in str(e) and "the encoder" in str(e) and e.path == str(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "f"] and not any((tmp_path / "d").iterdir())


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
def test_a_full_disk_leaves_the_old_file_and_says_so(tmp_path, code):
    path = tmp_path / "e.npz"
    path.write_bytes(b"the encoder of yesterday")

    def fill_then_fail(fh):
        fh.write(b"half an encod")
        raise OSError(code, "No space left on device")

    with pytest.raises(DiskFullError) as err:
        files.atomic_write(path, fill_then_fail, "the encoder")
    assert err.value.exit_code == 6 and err.value.path == str(path) and "free space" in str(err.value)
    assert path.read_bytes() == b"the encoder of yesterday" and [p.name for p in tmp_path.iterdir()] == ["e.npz"]


def test_check_output_file_accepts_a_new_or_existing_file(tmp_path):
    assert files.check_output_file(tmp_path / "new.npz") == tmp_path / "new.npz"
    (tmp_path / "old.npz").write_bytes(b"x")
    assert files.check_output_file(str(tmp_path / "old.npz")) == tmp_path / "old.npz"


SAVE_OVER_A_LIMIT = """
import resource, signal, sys
import numpy as np
from streamk import Encoder
from streamk.errors import DiskFullError
from streamk.verification import Vocabulary

rng = np.random.default_rng(0)
X = rng.gamma(0.6, 30.0, (600, 128)).astype(np.float32)
obj = (Encoder(embedding="vlad", k=4, aggregation="sum").fit([X[:300], X[300:]]) if sys.argv[2] == "encoder"
       else Vocabulary(n_coarse=4, n_fine=4, min_per_word=4).fit(X))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (512, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    obj.save(sys.argv[1])
except DiskFullError as exc:
    print("DiskFullError", exc.path)
"""


@pytest.mark.parametrize("what", ["encoder", "vocabulary"])
def test_a_save_that_fails_midway_keeps_the_file_that_was_there(tmp_path, what):
    """The file size limit (or a full disk) reached in the middle of a save: the encoder or
    vocabulary saved there before is still whole, and the failure is named."""
    import subprocess
    import sys

    path = tmp_path / f"{what}.npz"
    path.write_bytes(b"yesterday's file")
    run = subprocess.run([sys.executable, "-c", SAVE_OVER_A_LIMIT, str(path), what], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["DiskFullError", str(path)]
    assert path.read_bytes() == b"yesterday's file" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_saves_to_a_missing_folder_are_named(tmp_path):
    from streamk import Encoder
    from streamk.verification import Vocabulary

    X = np.random.default_rng(0).gamma(0.6, 30.0, (600, 128)).astype(np.float32)
    for obj in (Encoder(embedding="vlad", k=4, aggregation="sum").fit([X[:300], X[300:]]),
                Vocabulary(n_coarse=4, n_fine=4, min_per_word=4).fit(X)):
        with pytest.raises(OutputFileError):
            obj.save(tmp_path / "missing" / "x.npz")
    assert not any(tmp_path.iterdir())

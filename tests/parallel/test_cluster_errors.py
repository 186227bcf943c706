"""Bad Dask addresses: a malformed one, a refused port, an unknown host and a scheduler
that never answers are each a ClusterError (exit 7) naming the address and the cause,
within the connect timeout (STREAMK_DASK_TIMEOUT), never a ValueError or OSError
traceback after 30 s."""

import socket

import pytest

pytest.importorskip("distributed")

from streamk.errors import ClusterError, ConfigError  # noqa: E402
from streamk.parallel import make_executor  # noqa: E402
from streamk.parallel import parse_dask_address  # noqa: E402

from helpers.processes import run_python, subprocess_env  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address, words", [
    ("bogus://x", "unknown protocol 'bogus'"),
    ("tcp://", "not a host:port address"),
    ("tcp://127.0.0.1", "not a host:port address"),
    ("tcp://127.0.0.1:99999", "not a host:port address"),
    ("127.0.0.1:x", "not a host:port address"),
])
def test_a_malformed_address_is_named(address, words):
    with pytest.raises(ClusterError, match=words) as exc:
        parse_dask_address(address)
    assert exc.value.address == address and address in str(exc.value)
    assert ClusterError.exit_code == 7


def test_good_addresses_and_local_pass():
    assert parse_dask_address("tcp://10.0.0.1:8786") == ("remote", "tcp://10.0.0.1:8786")
    assert parse_dask_address("tls://[::1]:8786") == ("remote", "tls://[::1]:8786")
    assert parse_dask_address("sched.example:8786") == ("remote", "sched.example:8786")
    assert parse_dask_address("local:3") == ("local", 3)
    with pytest.raises(ConfigError):
        parse_dask_address("local:0")


def test_a_refused_port_and_an_unknown_host():
    port = free_port()  # nothing listens there now
    with pytest.raises(ClusterError, match=f"tcp://127.0.0.1:{port}.*refused"):
        make_executor(dask=f"tcp://127.0.0.1:{port}")
    with pytest.raises(ClusterError, match="unknown host 'no-such-host.invalid'"):
        make_executor(dask="tcp://no-such-host.invalid:8786")


def test_a_scheduler_that_never_answers_times_out(monkeypatch):
    """A port that accepts connections but never speaks: the handshake is bounded by
    STREAMK_DASK_TIMEOUT."""
    monkeypatch.setenv("STREAMK_DASK_TIMEOUT", "2")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes connections; nobody ever reads or writes
        address = "tcp://127.0.0.1:%d" % silent.getsockname()[1]
        with pytest.raises(ClusterError, match=f"{address}.*within 2 s"):
            make_executor(dask=address)
    monkeypatch.setenv("STREAMK_DASK_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="STREAMK_DASK_TIMEOUT"):
        make_executor(dask=address)


@pytest.mark.parametrize("address, words", [("bogus://x", "unknown protocol"), ("tcp://127.0.0.1:1", "refused")])
def test_the_cli_says_one_line_and_exits_7(tmp_path, address, words):
    pytest.importorskip("PIL")
    from helpers.images import textured

    textured(str(tmp_path / "imgs" / "a.png"), 0)
    for argv in (["ingest", str(tmp_path / "ix"), str(tmp_path / "imgs"), "--dask", address],
                 ["index", "create", str(tmp_path / "ix"), "--train", str(tmp_path / "imgs"), "--dask", address]):
        res = run_python("-m", "streamk.cli", *argv, timeout=120, env=subprocess_env(STREAMK_DASK_TIMEOUT="10"))
        assert res.returncode == 7, (argv, res.stderr)
        assert "Traceback" not in res.stderr
        lines = res.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("streamk: error: ")
        assert address in lines[0] and words in lines[0]

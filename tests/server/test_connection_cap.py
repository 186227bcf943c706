"""The cap on one client address's connections (``--max-connections-per-client``), against
a real ``streamk serve`` by raw sockets on loopback: 127.0.0.1 is the client that takes
too much, 127.0.0.2 another client (the whole of 127/8 reaches the server on Linux). One
address that opened as many half-sent requests as ``--max-connections`` made every other
client get uvicorn's 503, /health too, for up to ``--header-timeout``, again and again.
Every wait is bounded."""

import socket

import pytest

from streamk.errors import ConfigError
from streamk.server.connections import (DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_CLIENT, client_of,
                                        uvicorn_limits)

pytest.importorskip("httpx")

from helpers.server import running_server  # noqa: E402

CAP, MAX_CONNECTIONS, HEADER_TIMEOUT = 4, 16, 2
MARGIN = 30  # seconds beyond a timeout before a test gives up (a loaded machine)
OTHER = "127.0.0.2"


@pytest.fixture(scope="module")
def served(photos, tmp_path_factory):
    args = ["--workers", "1", "--max-connections", str(MAX_CONNECTIONS), "--max-connections-per-client", str(CAP),
            "--header-timeout", str(HEADER_TIMEOUT), "--keep-alive-timeout", "600"]
    with running_server(photos, tmp_path_factory.mktemp("conncap"), args=args) as srv:
        yield srv


def connect(srv, source="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(HEADER_TIMEOUT + MARGIN)
    s.bind((source, 0))
    s.connect(("127.0.0.1", srv.port))
    return s


def half_sent(srv):
    """A connection that sends half of a request's headers, and then nothing."""
    s = connect(srv)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nAcc")
    return s


def health(s):
    """The status of ``GET /health`` asked on ``s`` (kept alive), or None when the server
    closed ``s`` (or reset it) without an answer."""
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        raw = b""
        while b"\r\n\r\n" not in raw:
            chunk = s.recv(65536)
            if not chunk:
                return None
            raw += chunk
    except (ConnectionResetError, BrokenPipeError):
        return None
    head, body = raw.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = s.recv(65536)
        assert chunk, "the server closed a connection in the middle of an answer"
        body += chunk
    return int(head.split(b" ", 2)[1])


def health_on_new(srv, source="127.0.0.1"):
    with connect(srv, source) as s:
        return health(s)


def closed_by_server(s):
    """True once the server has closed ``s`` (read returns b'' or a reset), within the socket's timeout."""
    try:
        return s.recv(65536) == b""
    except ConnectionResetError:
        return True


def served_connections(srv, n):
    """``n`` new connections from 127.0.0.1, each answered /health 200 and kept open; None
    (none left open) when one of them is not served: the address's count is not below
    the cap minus n."""
    socks = []
    try:
        for _ in range(n):
            socks.append(connect(srv))
            if health(socks[-1]) != 200:
                for s in socks:
                    s.close()
                return None
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def close_all(socks):
    for s in socks:
        s.close()


def refusals_logged(srv):
    return srv.log().count("127.0.0.1: already 4 connections open from this address (--max-connections-per-client)")


def test_a_connection_over_the_cap_is_closed_while_another_address_is_served(served, wait_until):
    held = wait_until(lambda: served_connections(served, CAP), MARGIN, f"{CAP} connections from 127.0.0.1 served")
    try:
        assert health_on_new(served) is None  # the fifth from 127.0.0.1: closed by the server, unanswered
        assert health_on_new(served) is None
        assert health_on_new(served, OTHER) == 200  # another client is served meanwhile
        assert all(health(s) == 200 for s in held)  # the four are served still
    finally:
        close_all(held)
    # closed by the client: their places come back, all four (the count did not leak)
    held = wait_until(lambda: served_connections(served, CAP), MARGIN, "127.0.0.1's connections served again")
    try:
        assert health_on_new(served) is None
    finally:
        close_all(held)
    assert refusals_logged(served) == 1, served.log()  # once per address per minute, not once per connection
    assert "Traceback" not in served.log()


def test_connections_closed_by_the_header_timeout_or_a_reset_give_their_places_back(served, wait_until):
    socks = [half_sent(served) for _ in range(CAP)]
    try:
        assert health_on_new(served) is None  # the half-sent requests hold the cap
        assert health_on_new(served, OTHER) == 200
        assert all(closed_by_server(s) for s in socks)  # by the header timeout
    finally:
        close_all(socks)
    held = wait_until(lambda: served_connections(served, CAP), MARGIN, "the places of the timed-out connections")
    for s in held:  # a client's reset (RST, not FIN)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    close_all(held)
    held = wait_until(lambda: served_connections(served, CAP), MARGIN, "the places of the reset connections")
    close_all(held)


def still_open(s):
    """Whether the server has not closed ``s`` (a look that does not wait)."""
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False
    finally:
        s.settimeout(HEADER_TIMEOUT + MARGIN)


@pytest.mark.parametrize("cap", [CAP, 0])
def test_one_address_can_no_longer_take_every_connection(photos, tmp_path, wait_until, cap):
    """The attack: as many half-sent requests from one address as --max-connections (the
    header timeout long). With the cap (4), only 4 of them stay open and another address's
    /health is answered 200; without it (0, as behind a proxy), uvicorn's 503 for everyone."""
    args = ["--workers", "1", "--max-connections", str(MAX_CONNECTIONS), "--max-connections-per-client", str(cap),
            "--header-timeout", "600"]
    with running_server(photos, tmp_path, args=args) as srv:
        socks = [half_sent(srv) for _ in range(MAX_CONNECTIONS)]
        try:
            if cap:
                wait_until(lambda: sum(map(still_open, socks)) <= cap, MARGIN, "the connections over the cap closed")
            statuses = [health_on_new(srv, OTHER) for _ in range(3)]
            still = sum(map(still_open, socks))
        finally:
            close_all(socks)
        if cap:
            assert statuses == [200] * 3 and 1 <= still <= cap, (statuses, still)
            assert "Exceeded concurrency limit" not in srv.log()  # uvicorn's 503 was never given
        else:
            assert statuses == [503] * 3 and still == MAX_CONNECTIONS, (statuses, still)


def test_the_keep_alive_timeout_gives_places_back(photos, tmp_path, wait_until):
    args = ["--workers", "1", "--max-connections-per-client", "2", "--keep-alive-timeout", "1"]
    with running_server(photos, tmp_path, args=args) as srv:
        for _ in range(3):  # both places, each time: the count did not leak
            held = wait_until(lambda: served_connections(srv, 2), MARGIN, "two connections from 127.0.0.1 served")
            try:
                assert all(closed_by_server(s) for s in held)  # idle: closed by the keep-alive timeout
            finally:
                close_all(held)


def test_the_default_cap_is_well_under_the_connections_and_over_a_browsers():
    from streamk.cli import build_parser

    args = build_parser().parse_args(["serve", "idx"])
    assert args.max_connections == DEFAULT_MAX_CONNECTIONS
    assert args.max_connections_per_client == DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    assert 6 * 10 <= DEFAULT_MAX_CONNECTIONS_PER_CLIENT <= DEFAULT_MAX_CONNECTIONS // 8
    assert build_parser().parse_args(["serve", "idx", "--max-connections-per-client", "0"]).max_connections_per_client \
        == 0  # off: behind a reverse proxy
    assert uvicorn_limits(max_connections_per_client=0)["http"].__name__ == "HeaderTimedProtocol"  # no cap
    assert uvicorn_limits()["ws"] == "none"  # an upgraded connection would leave the protocol that counts it


def test_a_negative_cap_is_a_named_error_and_one_line(capsys):
    from streamk.cli import main

    for bad in (-1, 2.5, "4", None):
        with pytest.raises(ConfigError, match="--max-connections-per-client must be a whole number"):
            uvicorn_limits(max_connections_per_client=bad)
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "idx", "--max-connections-per-client", "-1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-connections-per-client: must be >= 0, got -1" in err, err


@pytest.mark.parametrize("address, client", [
    ("127.0.0.1", "127.0.0.1"),
    ("::ffff:192.0.2.7", "192.0.2.7"),  # IPv4 as a dual-stack socket sees it: the same client as 192.0.2.7
    ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"),
    ("2001:db8:1:2::1", "2001:db8:1:2::/64"),  # another address of the same /64: the same client
    ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
    ("fe80::1%eth0", "fe80::/64"),
    ("::1", "::/64"),
])
def test_a_client_is_an_ipv4_address_or_an_ipv6_64(address, client):
    assert client_of(address) == client

"""The server's settings without a server: where the token comes from (never the command
line), and the stable error codes and statuses of streamk's errors."""

import pytest

from streamk import errors
from streamk.cli import build_parser
from streamk.server import error_code, read_token, status_of


def test_the_token_comes_from_a_file_or_the_environment(tmp_path):
    f = tmp_path / "token.txt"
    f.write_text("a-long-enough-token-0123456789\nignored second line\n")
    assert read_token(f, environ={}) == "a-long-enough-token-0123456789"
    assert read_token(None, environ={"STREAMK_TOKEN": " env-token-of-some-length \n"}) == "env-token-of-some-length"
    assert read_token(f, environ={"STREAMK_TOKEN": "env-token-of-some-length"}).startswith("a-long")  # the file wins
    assert read_token(None, environ={}) is None  # no token: a read-only server
    f.write_text("short\n")
    with pytest.raises(errors.ConfigError, match="at least 16 characters"):
        read_token(f, environ={})
    with pytest.raises(errors.ConfigError, match="cannot read"):
        read_token(tmp_path / "absent", environ={})


def test_no_token_option_on_the_command_line():
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "idx", "--token", "secret-on-the-command-line"])
    args = parser.parse_args(["serve", "idx"])
    assert args.host == "127.0.0.1" and args.cors is None and args.token_file is None


@pytest.mark.parametrize("name, code, status", [
    ("ImageReadError", "image_read", 422), ("UnknownIdError", "unknown_id", 404),
    ("DuplicateError", "duplicate", 409), ("IdExistsError", "id_exists", 409),
    ("ImageTooLargeError", "image_too_large", 413), ("FilterError", "filter", 400),
    ("EmptyDescriptorSetError", "empty_descriptor_set", 422), ("DiskFullError", "disk_full", 507),
    ("IndexCorruptError", "index_corrupt", 500), ("ZeroVectorError", "zero_vector", 400),
    ("IndexReplacedError", "index_replaced", 503),
])
def test_error_codes_and_statuses(name, code, status):
    assert hasattr(errors, name)
    assert error_code(name) == code and status_of(name) == status


def test_every_error_class_carries_its_http_status_beside_its_exit_code():
    for name in dir(errors):
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, errors.StreamkError):
            assert cls.http_status in (400, 403, 404, 409, 413, 422, 500, 502, 503, 507), name
            assert status_of(cls) == status_of(name) == cls.http_status
    # a subclass answers as its parent unless it says otherwise
    assert errors.FilterError.http_status == errors.ConfigError.http_status == 400
    assert errors.ImageTooLargeError.http_status == 413 != errors.ImageReadError.http_status


def test_a_port_in_use_is_said_before_anything_is_opened(tmp_path, capsys):
    """uvicorn said "[Errno 98] error while attempting to bind" after streamk had logged
    "serving ... on http://127.0.0.1:PORT/" and started the index and its workers. The socket is
    bound first now: a named error, one line, nothing opened (the index need not exist)."""
    import socket

    from streamk.cli import main
    from streamk.server.runner import bound_socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(errors.ConfigError, match=f"cannot listen on 127.0.0.1 port {port}: it is in use"):
            bound_socket("127.0.0.1", port)
        assert main(["serve", str(tmp_path / "no-index-here"), "--port", str(port)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("streamk: error: cannot listen on") and "serving" not in err
    finally:
        taken.close()
    free = bound_socket("127.0.0.1", 0)  # port 0: the system's choice, as uvicorn would take it
    assert free.getsockname()[1] > 0 and free.get_inheritable()
    free.close()

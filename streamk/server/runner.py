"""``streamk serve``: the token read from a file or the environment (never the command
line), the index opened and the workers warmed, uvicorn on 127.0.0.1 unless told
otherwise, and a graceful stop on SIGTERM / SIGINT (requests in flight finish, the
workers stop, the index closes; then the process ends by that signal)."""

import logging
import os
import sys

from ..errors import ConfigError
from .app import DEFAULT_MAX_REQUESTS, DEFAULT_MAX_UPLOAD, create_app
from .connections import uvicorn_limits
from .routes.backup import backup_folder
from .service import Service

TOKEN_ENV = "STREAMK_TOKEN"
MIN_TOKEN_CHARS = 16


def read_token(token_file=None, environ=None):
    """The token: the first line of ``token_file``, else $STREAMK_TOKEN, else None."""
    environ = os.environ if environ is None else environ
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as fh:
                token = fh.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--token-file {token_file}: cannot read it ({exc})") from exc
        source = f"--token-file {token_file}"
    else:
        token = environ.get(TOKEN_ENV, "").strip()
        if not token:
            return None
        source = f"${TOKEN_ENV}"
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{source}: the token must have at least {MIN_TOKEN_CHARS} characters "
                          f"(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return token


def configure_logging(level="info"):
    log = logging.getLogger("streamk.server")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
    log.setLevel(level.upper())
    log.propagate = False
    return log


def serve(path, host="127.0.0.1", port=8000, workers=2, token_file=None, cors=(), dask=None,
          max_upload=DEFAULT_MAX_UPLOAD, images=(), log_level="info", max_requests=DEFAULT_MAX_REQUESTS,
          show_paths=False, limits=None, connection_limits=None, backup_dir=None):
    """Serve the index at ``path`` until SIGTERM / SIGINT; see the module doc.

    workers: encoding processes; images: the collection folders whose files may be read
    for thumbnails; show_paths: answers include the metadata fields ``path`` and ``folder``
    (where ingestion found each file on this machine; hidden by default); limits: more
    keyword arguments of :func:`create_app` (max_uploads, body_timeout, min_body_rate,
    request_timeout); connection_limits: of :func:`~streamk.server.connections.uvicorn_limits`
    (header_timeout, keep_alive_timeout, max_connections, max_connections_per_client).
    Returns 0 after a stop without a signal (a signal ends the process once the server has
    stopped, as uvicorn re-raises it)."""
    import uvicorn

    log = configure_logging(log_level)
    token = read_token(token_file)
    if host not in ("127.0.0.1", "localhost", "::1") and token is None:
        log.warning("listening on %s without a token: anyone who can reach it can search; writes are off", host)
    sock = bound_socket(host, port)  # before the index and the workers: a port in use is said first
    service = None
    try:
        service = Service(path, workers=workers, dask=dask, writable=token is not None, collection=images,
                          show_paths=show_paths).open()
        app = create_app(service, token=token, max_upload=max_upload, cors=cors, max_requests=max_requests,
                         **(limits or {}))
        app.state.backup_dir = None if backup_dir is None else backup_folder(backup_dir, path)  # POST /backup
    except BaseException:
        if service is not None:
            service.close()
        sock.close()
        raise
    if not images and service.local_features_now():  # the copy classes compare pixels: said before a user asks
        log.warning("no --images folder: /images/{id}/duplicates cannot read the pixels of images ingested from "
                    "files, and keeps their copies as 'same scene'; pass --images FOLDER, the folder they came from")
    config = uvicorn.Config(app, host=host, port=int(port), log_config=None, access_log=False,
                            timeout_graceful_shutdown=30, lifespan="on", server_header=False,
                            **uvicorn_limits(**(connection_limits or {})))
    server = uvicorn.Server(config)
    port = sock.getsockname()[1]  # --port 0: the one the system chose
    log.info("serving %s (%d images, %d encoding workers%s) on http://%s:%d/", path,
             service.run_sync(service.stats)["images"], workers, "" if token else "; read-only: no token",
             f"[{host}]" if ":" in host else host, port)
    server.run(sockets=[sock])
    return 0


def bound_socket(host, port):
    """A TCP socket bound to (``host``, ``port``) as uvicorn binds one (SO_REUSEADDR; IPv6 for
    an address with a colon), or a ConfigError that says why it cannot be: uvicorn printed
    "[Errno 98] error while attempting to bind" after the server had said it was serving."""
    import errno
    import socket

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
    except OSError as exc:
        sock.close()
        why = {errno.EADDRINUSE: "it is in use (another server, or a streamk serve already running): choose "
                                 "another with --port",
               errno.EACCES: "this user may not listen there (ports below 1024 need privileges): choose --port "
                             "1024 or above",
               errno.EADDRNOTAVAIL: f"{host} is not an address of this machine: see --host"}.get(exc.errno)
        raise ConfigError(f"cannot listen on {host} port {port}: {why or exc.strerror or exc}") from None
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


__all__ = ["TOKEN_ENV", "bound_socket", "configure_logging", "read_token", "serve"]

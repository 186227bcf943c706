"""The HTTP API (FastAPI on uvicorn) over a :class:`~streamk.server.service.Service`, and
the web page at ``/``.

Safe by default: every write needs the token (a server started without one is
read-only), and reads do too when a token is set (``Authorization: Bearer TOKEN``);
request bodies are limited in size (413); a client never names a file on the server;
CORS is off unless origins are given; every error is JSON ``{"error": {"code",
"message"}}`` with a stable code, never a traceback; every request is logged with its
time.

The routes are module-level routers (streamk/server/routes/), their bodies and answers
pydantic models (streamk/server/models.py) from which ``/openapi.json`` is generated;
the app holds what they share on ``app.state``: the service and the token.
"""

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI

from .. import __version__
from ..schema import SCHEMA_VERSION_HEADER
from .connections import MAX_HEADER_BYTES
from .dependencies import check_token
from .http_errors import ApiError, error_code, install_error_handlers, status_of
from .middleware import (BodyLimit, CancelOnDisconnect, ConcurrencyLimit, Deadlines, HeadAsGet, HeaderLimit,
                         RequestLog, SchemaVersionHeader)
from .models import MAX_JSON_DEPTH
from .routes import ROUTERS
from .routes import backup as backup_routes

log = logging.getLogger("streamk.server")

DEFAULT_MAX_UPLOAD = 20 << 20  # bytes of one request body
DEFAULT_MAX_REQUESTS = 64  # cheap requests served at once (each holds at most one body in memory); more: 503 busy
DEFAULT_MAX_UPLOADS = 8  # uploads (multipart bodies, writes) at once, in slots of their own; more: 503 busy
DEFAULT_BODY_TIMEOUT = 10.0  # seconds between two parts of a body; then 408 body_timeout
DEFAULT_MIN_BODY_RATE = 64 << 10  # bytes per second a whole body must reach (20 MiB: 10 s + 320 s)
DEFAULT_REQUEST_TIMEOUT = 300.0  # seconds from a request's headers to its answer; then 503 timeout


@asynccontextmanager
async def _lifespan(app):
    try:
        yield
    finally:
        log.info("stopping: the requests in flight have finished; closing the workers and the index")
        app.state.service.close()
        log.info("stopped")


def create_app(service, token=None, max_upload=DEFAULT_MAX_UPLOAD, cors=(), max_requests=DEFAULT_MAX_REQUESTS,
               max_uploads=DEFAULT_MAX_UPLOADS, body_timeout=DEFAULT_BODY_TIMEOUT,
               min_body_rate=DEFAULT_MIN_BODY_RATE, request_timeout=DEFAULT_REQUEST_TIMEOUT):
    """The FastAPI app serving ``service`` (opened), which it closes at shutdown. token:
    None (a read-only server) or the token every write, and every read, needs; the limits:
    see streamk/server/middleware.py and connections.py."""
    if service.dim is None:
        raise RuntimeError("create_app needs an opened Service (Service.open())")
    app = FastAPI(title="streamk", version=__version__, lifespan=_lifespan,
                  description="Image search over a streamk index: search by photo, id or vector; add, update, "
                              "delete images; thumbnails; stats.", docs_url=None, redoc_url=None,
                  openapi_url=None)  # /openapi.json is a route of its own, under the token (routes/admin.py)
    app.state.service = service
    app.state.token = token
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(backup_routes.router)  # POST /backup (answers 404 backups_off unless app.state.backup_dir)
    if cors:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors), allow_methods=["GET", "POST", "PUT", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"], expose_headers=[SCHEMA_VERSION_HEADER])
    app.add_middleware(BodyLimit, limit=max_upload)
    app.add_middleware(Deadlines, body_timeout=body_timeout, min_rate=min_body_rate, request_timeout=request_timeout,
                       max_body=max_upload)
    app.add_middleware(CancelOnDisconnect)  # inside the slots: a search whose client hung up frees its slot at once
    app.add_middleware(ConcurrencyLimit, limit=max_requests, uploads=max_uploads)
    app.add_middleware(HeaderLimit, limit=MAX_HEADER_BYTES)  # before a slot is taken
    app.add_middleware(HeadAsGet)
    app.add_middleware(SchemaVersionHeader)
    app.add_middleware(RequestLog)
    return app


__all__ = ["ApiError", "DEFAULT_BODY_TIMEOUT", "DEFAULT_MAX_REQUESTS", "DEFAULT_MAX_UPLOAD", "DEFAULT_MAX_UPLOADS",
           "DEFAULT_MIN_BODY_RATE", "DEFAULT_REQUEST_TIMEOUT", "MAX_JSON_DEPTH", "check_token", "create_app",
           "error_code", "status_of"]

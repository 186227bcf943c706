"""Errors as the API answers them: JSON ``{"error": {"code", "message"}}``, never a
traceback. A streamk error's code is its class name in snake case (``ImageReadError`` ->
``image_read``) and its status the class's ``http_status`` (streamk/errors.py, beside its
``exit_code``); the API's own errors (auth, limits, malformed bodies) are ApiError;
invalid input, whichever model or parameter refused it, is 400 ``bad_request``.
"""

import logging
import os

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from .. import errors
from ..features import advice_for_clients
from ..errors import error_code
from .models import ErrorAnswer
from .service import WorkerError

log = logging.getLogger("streamk.server")

# the codes of the HTTP errors Starlette raises itself (no route, wrong method, ...)
HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 400: "bad_request", 413: "upload_too_large"}
ALWAYS = (500, 503)  # statuses any operation may answer: a bug; busy, retraining or the index replaced


def status_of(error):
    """The HTTP status of a streamk error (its class, an instance or its class name): the
    class's ``http_status``; 400 for a name streamk.errors does not have."""
    if isinstance(error, str):
        error = getattr(errors, error, None)
    return getattr(error, "http_status", 400)


MAX_MESSAGE_CHARS = 1000  # of an error message: one may quote a value of the request, which may be 20 MB


def error_response(status, code, message, headers=None):
    message = str(message)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + " [...]"
    body = ErrorAnswer(error={"code": code, "message": " ".join(message.split())})
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def error_responses(*statuses):
    """The error answers of an operation, for its OpenAPI description: ``statuses`` and
    ALWAYS, each with the ErrorAnswer model."""
    return {status: {"model": ErrorAnswer, "description": "an error"} for status in statuses + ALWAYS}


class ApiError(Exception):
    """An HTTP error of the API itself (not of the index): status, code, message."""

    def __init__(self, status, code, message, headers=None):
        self.status, self.code, self.message, self.headers = status, code, message, headers
        super().__init__(message)


class UploadTooLargeError(ApiError):
    def __init__(self, limit):
        super().__init__(413, "upload_too_large", f"the request body is over the server's limit of {limit:,} bytes "
                                                  f"(--max-upload); send a smaller image")


def bad_request(message):
    return ApiError(400, "bad_request", message)


def _problem(error, fields):
    """One line of a validation error: where, and what."""
    where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body", "query", "path"))
    if error.get("type") == "extra_forbidden":
        return f"unknown field {where!r}; expected some of {sorted(fields)}"
    message = error.get("msg", "").removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def invalid(exc, fields=()):
    """The ApiError (400 bad_request) of a pydantic ValidationError or FastAPI's
    RequestValidationError; ``fields``:
    the names the refused model knows (said when an unknown one is given)."""
    parts = [_problem(e, fields) for e in exc.errors()]
    return bad_request("; ".join(parts[:5]) or "invalid request")


# What a client is told of the errors that are the server's trouble, not the request's: the
# log keeps the full message (the index's path, the command that repairs it).
INDEX_REPLACED = ("the index was replaced while the server ran (moved away, or a backup put in its place): this "
                  "server no longer reads or writes it; restart the server to serve it (its operator has the details "
                  "in its log)")
SERVER_SIDE = {
    "DiskFullError": "the server's disk is full: nothing of this write was stored; try again later "
                     "(the server's operator has the details in its log)",
    "IndexCorruptError": "the index is damaged; the server's operator has the details in its log",
    "IndexReplacedError": "nothing of this request was done: " + INDEX_REPLACED,
}
NO_CODEC = ("mode 'pq' needs a trained codec, and this index has none: search with mode 'exact' (or leave mode "
            "out), or ask the server's operator to train one")
GENERIC_SERVER_SIDE = "the server could not answer this request; its operator has the details in its log"


def public_message(exc, status, index_path):
    """The message a client gets for a streamk error: a fixed one for the server's own
    troubles (5xx: they name files and commands of the server), else the error's message
    with the index's path, should it appear, replaced by 'the index'."""
    if status >= 500:
        return SERVER_SIDE.get(type(exc).__name__, GENERIC_SERVER_SIDE)
    if getattr(exc, "needs", None) == "codec":  # the library's words name a Python method
        return NO_CODEC
    message = str(exc)
    if isinstance(exc, errors.ImageTooLargeError):
        message = advice_for_clients(message)
    for path in sorted({str(index_path), os.path.realpath(index_path)}, key=len, reverse=True):
        message = message.replace(path, "the index")
    return message


def allowed_methods(app, path):
    """The methods some route of ``app`` answers at ``path`` (HEAD with GET), sorted: each
    asked of the router as a request would be."""
    methods = set()
    for method in METHODS:
        scope = {"type": "http", "path": path, "method": method, "root_path": "", "headers": []}
        if any(route.matches(scope)[0] == Match.FULL for route in app.router.routes):
            methods.add(method)
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")


def install_error_handlers(app):
    @app.exception_handler(ApiError)
    async def api_error(request, exc):
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(errors.StreamkError)
    async def streamk_error(request, exc):
        status = status_of(exc)
        if status >= 500 and not isinstance(exc, errors.IndexReplacedError):  # that one is logged once, when found
            log.error("%s %s: %s", request.method, request.url.path, errors.describe(exc))
        message = public_message(exc, status, request.app.state.service.path)
        return error_response(status, error_code(type(exc).__name__), message)

    @app.exception_handler(ClientDisconnect)
    async def client_disconnect(request, exc):  # nobody reads the answer; the log says what happened
        log.info("%s %s: the client disconnected before sending the whole body", request.method, request.url.path)
        return error_response(499, "client_disconnected", "the client disconnected before sending the whole body")

    @app.exception_handler(WorkerError)
    async def worker_error(request, exc):
        if exc.http_status >= 500:
            log.error("%s %s: a worker: %s", request.method, request.url.path, exc)
            return error_response(exc.http_status, error_code(exc.name), SERVER_SIDE.get(exc.name, GENERIC_SERVER_SIDE))
        message = advice_for_clients(exc.message) if exc.name == "ImageTooLargeError" else exc.message
        return error_response(exc.http_status, error_code(exc.name), message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, exc):
        return await api_error(request, invalid(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc):
        code = HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # every method of every route of this path, not the first route's
            headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request.app, request.url.path))}
        return error_response(exc.status_code, code, exc.detail or code, headers)

    @app.exception_handler(Exception)
    async def internal_error(request, exc):  # a bug: logged with its traceback, answered without
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_response(500, "internal", "internal server error (the server log has the details)")


__all__ = ["ALWAYS", "ApiError", "INDEX_REPLACED", "UploadTooLargeError", "allowed_methods", "bad_request",
           "error_code", "error_response", "error_responses", "install_error_handlers", "invalid", "public_message",
           "status_of"]

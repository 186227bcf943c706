"""The HTTP API (FastAPI on uvicorn) over a :class:`~streamk.server.service.Service`, and
the web page at ``/``.

Safe by default: every write needs the token (a server started without one is
read-only), and reads do too when a token is set (``Authorization: Bearer TOKEN``);
request bodies are limited in size (413); a client never names a file on the server;
CORS is off unless origins are given; every error is JSON ``{"error": {"code",
"message"}}`` with a stable code, never a traceback; every request is logged with its
time.
"""

import hmac
import json
import logging
import math
import time
from contextlib import asynccontextmanager
from importlib import resources

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import errors
from .. import __version__
from .service import WorkerError

log = logging.getLogger("streamk.server")

DEFAULT_MAX_UPLOAD = 20 << 20  # bytes of one request body
DEFAULT_MAX_REQUESTS = 64  # requests served at once (each holds at most one body in memory); more: 503 busy
MAX_K = 1000
MAX_VERIFY = 1000
MAX_EXPAND = 200
MAX_JSON_DEPTH = 8

# ---------------------------------------------------------------- errors as JSON
# HTTP status of each streamk error (by class name, so that classes added elsewhere map
# once they exist); a class not named here: by its exit code's kind, else 400.
STATUS_BY_NAME = {
    "UnknownIdError": 404, "DuplicateError": 409, "IdExistsError": 409, "ImageTooLargeError": 413,
    "UploadTooLargeError": 413, "ImageReadError": 422, "EmptyDescriptorSetError": 422, "WorkerCrashedError": 422,
    "ZeroVectorError": 400, "NonFiniteError": 400, "DimensionError": 400, "InvalidIdError": 400,
    "ConfigError": 400, "FilterError": 400, "MetadataError": 400, "ReadOnlyIndexError": 403, "TrainingInProgressError": 503,
    "IndexLockedError": 503, "DiskFullError": 507, "IndexCorruptError": 500, "NotAnIndexError": 500,
}
STATUS_BY_EXIT_CODE = {2: 400, 3: 422, 4: 409, 5: 500, 6: 507, 7: 502}


def error_code(name):
    """'ImageReadError' -> 'image_read': the stable code of an error class."""
    base = name[:-5] if name.endswith("Error") else name
    out = []
    for i, c in enumerate(base):
        if c.isupper() and i and (not base[i - 1].isupper() or (i + 1 < len(base) and base[i + 1].islower())):
            out.append("_")
        out.append(c.lower())
    return "".join(out)


def status_of(name):
    if name in STATUS_BY_NAME:
        return STATUS_BY_NAME[name]
    cls = getattr(errors, name, None)
    code = getattr(cls, "exit_code", None)
    return STATUS_BY_EXIT_CODE.get(code, 400)


def error_response(status, code, message, headers=None):
    return JSONResponse({"error": {"code": code, "message": " ".join(str(message).split())}}, status_code=status,
                        headers=headers)


class ApiError(Exception):
    """An HTTP error of the API itself (not of the index): status, code, message."""

    def __init__(self, status, code, message, headers=None):
        self.status, self.code, self.message, self.headers = status, code, message, headers
        super().__init__(message)


class UploadTooLargeError(ApiError):
    def __init__(self, limit):
        super().__init__(413, "upload_too_large", f"the request body is over the server's limit of {limit:,} bytes "
                                                  f"(--max-upload); send a smaller image")


def _install_error_handlers(app):
    @app.exception_handler(ApiError)
    async def api_error(request, exc):
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(WorkerError)
    async def worker_error(request, exc):
        return error_response(status_of(exc.name), error_code(exc.name), exc.message)

    @app.exception_handler(errors.StreamkError)
    async def streamk_error(request, exc):
        name = type(exc).__name__
        status = status_of(name)
        if status >= 500:
            log.error("%s %s: %s", request.method, request.url.path, errors.describe(exc))
        return error_response(status, error_code(name), str(exc))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, exc):
        parts = ["{}: {}".format(".".join(str(p) for p in e.get("loc", ())), e.get("msg", "")) for e in exc.errors()]
        return error_response(400, "bad_request", "; ".join(parts[:5]) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc):
        code = {404: "not_found", 405: "method_not_allowed", 400: "bad_request", 413: "upload_too_large"}.get(
            exc.status_code, f"http_{exc.status_code}")
        return error_response(exc.status_code, code, exc.detail or code, getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(request, exc):  # a bug: logged with its traceback, answered without
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_response(500, "internal", "internal server error (the server log has the details)")


# ---------------------------------------------------------------- middleware (pure ASGI)
class BodyLimit:
    """Refuse request bodies over ``limit`` bytes: at once from Content-Length, else
    while they stream in."""

    def __init__(self, app, limit):
        self.app = app
        self.limit = int(limit)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    n = int(value)
                except ValueError:
                    n = -1
                if n < 0 or n > self.limit:
                    resp = error_response(413, "upload_too_large", str(UploadTooLargeError(self.limit))) if n >= 0 \
                        else error_response(400, "bad_request", "invalid Content-Length")
                    return await resp(scope, receive, send)  # the body is never read
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise UploadTooLargeError(self.limit)
            return message
        return await self.app(scope, limited, send)


class ConcurrencyLimit:
    """At most ``limit`` requests at once (so at most that many bodies in memory and
    images queued for the workers); one more is answered 503 ``busy`` with Retry-After at
    once. /health is always answered."""

    def __init__(self, app, limit):
        self.app = app
        self.limit = int(limit)
        self.active = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") == "/health":
            return await self.app(scope, receive, send)
        if self.active >= self.limit:
            resp = error_response(503, "busy", f"the server is answering {self.limit} requests already "
                                               f"(--max-requests); try again shortly", {"Retry-After": "1"})
            return await resp(scope, receive, send)
        self.active += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.active -= 1


class RequestLog:
    """One log line per request: method, path, status, milliseconds."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = [500]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client") or ("-", 0)
            log.info("%s %s %s %d %.1f ms", client[0], scope.get("method"), scope.get("path"), status[0],
                     1000 * (time.perf_counter() - t0))


# ---------------------------------------------------------------- auth
def _bearer(request):
    h = request.headers.get("authorization", "")
    if h[:7].lower() == "bearer ":
        return h[7:].strip()
    return None


def check_token(request, token, write):
    """401 without the right token (for writes always; for reads when a token is set);
    403 for a write to a server started without a token."""
    if token is None:
        if write:
            raise ApiError(403, "read_only", "this server is read-only: start it with a token (--token-file FILE "
                                             "or STREAMK_TOKEN) to add, update or delete images")
        return
    given = _bearer(request)
    if given is None or not hmac.compare_digest(given.encode(), token.encode()):
        raise ApiError(401, "unauthorized", "send the server's token: 'Authorization: Bearer TOKEN'",
                       {"WWW-Authenticate": "Bearer"})


# ---------------------------------------------------------------- request parsing
def _bad(message):
    return ApiError(400, "bad_request", message)


def _int_field(value, name, lo, hi, default=None):
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise _bad(f"{name} must be an integer, got {value!r}")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise _bad(f"{name} must be an integer, got {value!r}") from None
    if not isinstance(value, int):
        raise _bad(f"{name} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise _bad(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _loads(text):
    """JSON, strictly: NaN and Infinity refused."""
    return json.loads(text, parse_constant=_no_constant)


def _json_text(value, name):
    if not isinstance(value, str):
        return value
    try:
        return _loads(value)
    except ValueError:
        raise _bad(f"{name}: not valid JSON") from None


def _box(value):
    if value is None or value == "":
        return None
    if isinstance(value, str):
        text = value.strip()
        value = _json_text(text, "box") if text.startswith("[") else [p for p in text.replace(",", " ").split() if p]
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        raise _bad("box must be 4 numbers x1, y1, x2, y2 (pixels of the query image)")
    try:
        box = [float(v) for v in value]
    except (TypeError, ValueError):
        raise _bad("box must be 4 numbers x1, y1, x2, y2 (pixels of the query image)") from None
    if isinstance(value[0], bool) or not all(math.isfinite(v) for v in box):
        raise _bad("box must be 4 finite numbers")
    if box[2] <= box[0] or box[3] <= box[1]:
        raise _bad("box must have x1 < x2 and y1 < y2")
    return box


def _vector(value, dim):
    value = _json_text(value, "vector")
    if not isinstance(value, list) or len(value) != dim:
        raise _bad(f"vector must be a list of {dim} numbers (the index's dimension)")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise _bad("vector must hold numbers only")
    return value


def _object(value, name):
    """A JSON object field (multipart: its JSON text), or None."""
    if value is None or value == "":
        return None
    value = _json_text(value, name)
    if not isinstance(value, dict):
        raise _bad(f"{name} must be a JSON object")
    return value


def _bool(value, name):
    if value is None or value == "":
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise _bad(f"{name} must be true or false")


def _image_id(value, name="id"):
    if not isinstance(value, str) or not value:
        raise _bad(f"{name} must be a non-empty string")
    return value


async def _body(request, max_json_fields=20):
    """(kind, fields, upload bytes or None, upload name) of a multipart or JSON body."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "multipart/form-data":
        try:
            form = await request.form(max_files=1, max_fields=max_json_fields)
        except UploadTooLargeError:
            raise
        except StarletteHTTPException as exc:
            raise _bad(f"malformed multipart body ({exc.detail})") from None
        except Exception as exc:  # python-multipart's parse errors
            if isinstance(exc, ApiError):
                raise
            raise _bad(f"malformed multipart body ({type(exc).__name__})") from None
        fields, data, name = {}, None, "upload"
        for key, value in form.multi_items():
            if hasattr(value, "read"):
                if key != "image":
                    raise _bad(f"unexpected file field {key!r}; send the photo as 'image'")
                data = await value.read()
                name = (value.filename or "upload").replace("/", "_").replace("\\", "_")[:200] or "upload"
            elif key == "image":
                raise _bad("'image' must be a file part (multipart/form-data upload of the photo's bytes)")
            else:
                fields[key] = value
        await form.close()
        return "multipart", fields, data, name
    if ctype == "application/json":
        raw = await request.body()
        try:
            fields = _loads(raw)
        except ValueError:
            raise _bad("the body is not valid JSON") from None
        if not isinstance(fields, dict):
            raise _bad("the JSON body must be an object")
        return "json", fields, None, None
    raise ApiError(415, "unsupported_media_type", "send multipart/form-data (an image upload) or application/json")


def _only(fields, allowed):
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise _bad(f"unknown field(s) {unknown}; expected some of {sorted(allowed)}")


# ---------------------------------------------------------------- OpenAPI pieces
ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message"],
    "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}}
NUM = {"type": "number"}
NULLABLE_INT = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
HIT_SCHEMA = {"type": "object", "required": ["id", "score", "stage", "verified"], "properties": {
    "id": {"type": "string"}, "score": NUM, "stage": {"type": "string", "enum": ["first", "verified", "expanded"]},
    "inliers": NULLABLE_INT, "verified": {"type": "boolean"},
    "region": {"anyOf": [{"type": "array", "items": {"type": "array", "items": NUM}}, {"type": "null"}]},
    "affine": {"anyOf": [{"type": "array", "items": {"type": "array", "items": NUM}}, {"type": "null"}]},
    "image_size": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
    "kind": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "metadata": {"anyOf": [{"type": "object"}, {"type": "null"}]}}}
SEARCH_SCHEMA = {"type": "object", "required": ["query", "results", "took_ms"], "properties": {
    "query": {"type": "object"}, "results": {"type": "array", "items": HIT_SCHEMA}, "took_ms": NUM}}
IMAGE_SCHEMA = {"type": "object", "required": ["id"], "properties": {
    "id": {"type": "string"}, "kind": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "sha256": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "n_descriptors": NULLABLE_INT,
    "image_size": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
    "box": {"anyOf": [{"type": "array", "items": NUM}, {"type": "null"}]},
    "added": {"anyOf": [NUM, {"type": "null"}]}, "filename": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "metadata": {"type": "object"}}}
WRITE_SCHEMA = {"type": "object", "required": ["id", "status"], "properties": {
    "id": {"type": "string"}, "status": {"type": "string"}}}
DUPLICATES_SCHEMA = {"type": "object", "required": ["id", "threshold", "verify", "duplicates"], "properties": {
    "id": {"type": "string"}, "threshold": NUM, "verify": {"type": "boolean"},
    "duplicates": {"type": "array", "items": HIT_SCHEMA}}}
STATS_SCHEMA = {"type": "object", "required": ["images"], "properties": {
    "images": {"type": "integer"}, "dim": {"type": "integer"}, "workers": {"type": "integer"},
    "local_features": {"type": "boolean"}, "writable": {"type": "boolean"}}}
HEALTH_SCHEMA = {"type": "object", "required": ["status"], "properties": {
    "status": {"type": "string"}, "reads_need_token": {"type": "boolean"}, "writable": {"type": "boolean"},
    "filters": {"type": "boolean"}}}
WHERE = {"type": "object", "description": 'a metadata filter: {"field": value | {"in": [...]} | '
                                          '{"gte": a, "lt": b}, ...} on indexed fields'}


def _responses(ok_status, ok_schema, *errors_, content_type="application/json"):
    """OpenAPI responses: ``ok_status`` (one status, or a tuple) with ``ok_schema``, and the
    error statuses (each with the error schema; 500 always)."""
    ok = ok_status if isinstance(ok_status, tuple) else (ok_status,)
    out = {str(s): {"description": "OK", "content": {content_type: {"schema": ok_schema}}} for s in ok}
    for status in errors_ + (500, 503):
        out[str(status)] = {"description": "error", "content": {"application/json": {"schema": ERROR_SCHEMA}}}
    return {"responses": out}


def _search_body(dim):
    common = {"k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": 10},
              "verify": {"type": "integer", "minimum": 0, "maximum": MAX_VERIFY},
              "expand": {"type": "integer", "minimum": 0, "maximum": MAX_EXPAND},
              "mode": {"type": "string", "enum": ["exact", "pq"]}}
    json_schema = {"type": "object", "additionalProperties": False, "properties": dict(
        common, where=WHERE, id={"type": "string", "minLength": 1, "maxLength": 200},
        vector={"type": "array", "items": {"type": "number"}, "minItems": dim, "maxItems": dim})}
    form = {"type": "object", "required": ["image"], "additionalProperties": False, "properties": dict(
        common, image={"type": "string", "format": "binary"},
        box={"type": "string", "description": "x1,y1,x2,y2 in the photo's pixels"},
        where={"type": "string", "description": "a metadata filter as JSON text"})}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": json_schema},
                                                          "multipart/form-data": {"schema": form}}}}


def _image_body(dim, with_id):
    props = {"vector": {"type": "array", "items": {"type": "number"}, "minItems": dim, "maxItems": dim},
             "metadata": {"type": "object"}}
    form_props = {"image": {"type": "string", "format": "binary"},
                  "vector": {"type": "string", "description": "a JSON list of numbers"},
                  "metadata": {"type": "string", "description": "a JSON object"}}
    required = []
    if with_id:
        props["id"] = form_props["id"] = {"type": "string", "minLength": 1, "maxLength": 200}
        required = ["id"]
    else:  # an update: the metadata alone too, replacing the stored one or merged into it
        props["merge"] = {"type": "boolean"}
        form_props["merge"] = {"type": "string", "enum": ["true", "false"]}
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"type": "object", "required": required + (["vector"] if with_id else []),
                                        "additionalProperties": False, "properties": props}},
        "multipart/form-data": {"schema": {"type": "object", "required": required, "additionalProperties": False,
                                           "properties": form_props}}}}}


# ---------------------------------------------------------------- the app
def create_app(service, token=None, max_upload=DEFAULT_MAX_UPLOAD, cors=(), max_requests=DEFAULT_MAX_REQUESTS):
    """The FastAPI app serving ``service`` (opened: its index's dimension goes into the
    schema), which it closes at shutdown. token: None (a read-only server) or the token
    every write, and every read, needs."""

    @asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            log.info("stopping: the requests in flight have finished; closing the workers and the index")
            service.close()
            log.info("stopped")

    if service.dim is None:
        raise RuntimeError("create_app needs an opened Service (Service.open())")
    app = FastAPI(title="streamk", version=__version__, lifespan=lifespan,
                  description="Image search over a streamk index: search by photo, id or vector; add, update, "
                              "delete images; thumbnails; stats.", docs_url=None, redoc_url=None)
    app.state.service = service
    _install_error_handlers(app)
    dim = service.dim

    def auth(request, write=False):
        check_token(request, token, write)

    # -------------------------------------------------------------- the page
    def _static(name, media):
        text = resources.files("streamk.server").joinpath("static", name).read_bytes()
        return Response(text, media_type=media, headers={"Cache-Control": "no-cache"})

    @app.get("/", include_in_schema=False)
    async def page():
        return _static("index.html", "text/html; charset=utf-8")

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str):
        media = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}.get(name)
        if media is None:
            raise ApiError(404, "not_found", f"no static file {name!r}")
        return _static(name, media)

    # -------------------------------------------------------------- reads
    @app.get("/health", openapi_extra=_responses(200, HEALTH_SCHEMA))
    async def health():
        """Liveness, and what a client needs to know first (no token needed)."""
        return {"status": "ok", "reads_need_token": token is not None, "writable": token is not None,
                "filters": True}

    @app.get("/stats", openapi_extra=_responses(200, STATS_SCHEMA, 401))
    async def stats(request: Request):
        """Counts and sizes of the index."""
        auth(request)
        return await service.call(service.stats)

    @app.post("/search", openapi_extra={**_search_body(dim), **_responses(
        200, SEARCH_SCHEMA, 400, 401, 404, 413, 415, 422)})
    async def search(request: Request):
        """The k best images for a photo (multipart: 'image', optional 'box'), an indexed
        image ('id') or a vector ('vector'), JSON: ids, scores, inliers, matched regions."""
        auth(request)
        t0 = time.perf_counter()
        kind, fields, data, name = await _body(request)
        _only(fields, {"k", "verify", "expand", "mode", "box", "id", "vector", "where"})
        where = _object(fields.get("where"), "where")
        k = _int_field(fields.get("k"), "k", 1, MAX_K, 10)
        verify = _int_field(fields.get("verify"), "verify", 0, MAX_VERIFY)
        expand = _int_field(fields.get("expand"), "expand", 0, MAX_EXPAND)
        mode = fields.get("mode") or None
        if mode is not None and mode not in ("exact", "pq"):
            raise _bad("mode must be 'exact' or 'pq'")
        box = _box(fields.get("box"))
        if kind == "multipart":
            if data is None:
                raise _bad("a multipart search needs the photo as the file field 'image'")
            if "id" in fields or "vector" in fields:
                raise _bad("give one query: a photo, an id or a vector")
            described = await service.describe(data, box, "query", name)
            query = {"kind": "image", "box": box, "image_size": described["image_size"], "features": described["n"]}
            out = await service.call(service.search, described["vector"], k, described["features"], box, verify,
                                     expand, mode, query, where)
        else:
            if ("id" in fields) == ("vector" in fields):
                raise _bad("give one query: 'id' (an indexed image) or 'vector' (or upload a photo as multipart)")
            if box is not None:
                raise _bad("box applies to an uploaded photo only")
            if "id" in fields:
                out = await service.call(service.search_id, _image_id(fields["id"]), k, verify, expand, mode, where)
            else:
                out = await service.call(service.search, _vector(fields["vector"], service.dim), k, None, None,
                                         verify, expand, mode, {"kind": "vector"}, where)
        out["took_ms"] = round(1000 * (time.perf_counter() - t0), 2)
        return out

    @app.get("/images/{image_id}", openapi_extra=_responses(200, IMAGE_SCHEMA, 400, 401, 404))
    async def image_info(image_id: str, request: Request):
        """What the index holds about an image (never a server path)."""
        auth(request)
        return await service.call(service.info, image_id)

    @app.get("/images/{image_id}/thumbnail", openapi_extra=_responses(
        200, {"type": "string", "format": "binary"}, 400, 401, 404, content_type="image/jpeg"))
    async def thumbnail(image_id: str, request: Request):
        """A small JPEG of the image: stored with it at upload, or made from its file when
        the server was told its collection folder (--images)."""
        auth(request)
        jpeg = await service.thumbnail(image_id)
        if jpeg is None:
            raise ApiError(404, "no_thumbnail", f"image {image_id!r} has no thumbnail: it was not uploaded here and "
                                                "its file is not in the served collection (--images)")
        return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=60"})

    @app.get("/images/{image_id}/duplicates", openapi_extra=_responses(200, DUPLICATES_SCHEMA, 400, 401, 404))
    async def duplicates(image_id: str, request: Request,
                         threshold: float = Query(0.5, gt=0, le=1, description="least vector similarity"),
                         verify: bool = Query(False, description="keep only pairs the second stage confirms"),
                         max_results: int = Query(20, ge=1, le=100)):
        """An image's near-duplicates (the same photo re-encoded, resized, cropped a little),
        best first, with their metadata."""
        auth(request)
        return await service.call(service.duplicates, image_id, threshold, verify, max_results)

    # -------------------------------------------------------------- writes
    async def _encoded(image_id, kind, fields, data, name, metadata):
        if data is not None and "vector" in fields:
            raise _bad("give the image as a photo ('image') or as a 'vector', not both")
        if data is not None:
            described = await service.describe(data, None, "add", name)
            return service.encoded_upload(image_id, described, name, metadata)
        if "vector" in fields:
            return service.encoded_vector(image_id, _vector(fields["vector"], service.dim), metadata)
        raise _bad("send the image as a photo (multipart 'image') or a 'vector'")

    @app.post("/images", status_code=201, openapi_extra={**_image_body(dim, True), **_responses(
        (201, 200), WRITE_SCHEMA, 400, 401, 403, 409, 413, 415, 422)})
    async def add_image(request: Request):
        """Add an image under a new id: a photo (multipart 'image') or a vector. Durable
        when the answer comes."""
        auth(request, write=True)
        kind, fields, data, name = await _body(request)
        _only(fields, {"id", "vector", "metadata"})
        image_id = _image_id(fields.get("id"))
        enc = await _encoded(image_id, kind, fields, data, name, _object(fields.get("metadata"), "metadata"))
        status = await service.call(service.write, enc)
        return JSONResponse({"id": image_id, "status": status}, status_code=201 if status == "added" else 200)

    @app.put("/images/{image_id}", openapi_extra={**_image_body(dim, False), **_responses(
        200, WRITE_SCHEMA, 400, 401, 403, 404, 409, 413, 415, 422)})
    async def update_image(image_id: str, request: Request):
        """Replace an image's content (a photo or a vector; its metadata is kept, updated with
        the given fields), or its metadata alone ('metadata', replaced; merged with 'merge')."""
        auth(request, write=True)
        kind, fields, data, name = await _body(request)
        _only(fields, {"vector", "metadata", "merge"})
        metadata = _object(fields.get("metadata"), "metadata")
        merge = _bool(fields.get("merge"), "merge")
        await service.call(service.require, image_id)
        if data is None and "vector" not in fields:
            if metadata is None:
                raise _bad("send a photo ('image'), a 'vector' or 'metadata'")
            await service.call(service.set_metadata, image_id, metadata, merge)
            return {"id": image_id, "status": "updated"}
        enc = await _encoded(image_id, kind, fields, data, name, metadata)
        status = await service.call(service.write, enc, True)
        return {"id": image_id, "status": "updated" if status == "added" else "unchanged"}

    @app.delete("/images/{image_id}", openapi_extra=_responses(200, WRITE_SCHEMA, 400, 401, 403, 404))
    async def delete_image(image_id: str, request: Request):
        """Remove an image."""
        auth(request, write=True)
        await service.call(service.remove, image_id)
        return {"id": image_id, "status": "removed"}

    # -------------------------------------------------------------- outer layers
    if cors:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors), allow_methods=["GET", "POST", "PUT", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(BodyLimit, limit=max_upload)
    app.add_middleware(ConcurrencyLimit, limit=max_requests)
    app.add_middleware(RequestLog)
    return app


__all__ = ["ApiError", "DEFAULT_MAX_REQUESTS", "DEFAULT_MAX_UPLOAD", "check_token", "create_app", "error_code", "status_of"]

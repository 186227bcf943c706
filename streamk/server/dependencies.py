"""What every route takes from its request, as FastAPI dependencies: the service
(``app.state.service``), the token check (``app.state.token``), and a body sent as JSON or
as a multipart form, validated by the model of its kind (streamk/server/models.py), whose
two models also give the body's OpenAPI description."""

import hmac
import time
from dataclasses import dataclass

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .http_errors import ApiError, bad_request, invalid
from .models import MAX_JSON_VALUES, TooManyValues, loads

MAX_FORM_FIELDS = 20


# ---------------------------------------------------------------- the service, the token
def service_of(request: Request):
    """The Service the app serves, to a route that touches the index: 503 index_replaced
    once the index at its path is another one (:meth:`Service.replaced`), before any work."""
    service = request.app.state.service
    service.check_place()
    return service


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


def _query_names(dependant):
    """The query parameters a route (its endpoint and every dependency of it) declares."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def check_query(request):
    """400 for a query parameter the route does not take, as for a body field it does not
    know: a misspelt ``?treshold=0.3`` would otherwise answer with the default, unsaid."""
    route = request.scope.get("route")
    if route is None or not request.query_params:
        return
    known = _query_names(route.dependant)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        takes = f"it takes {', '.join(sorted(known))}" if known else "it takes none"
        raise bad_request(f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(repr(name[:64]) for name in unknown[:5])}: {takes}")


def may_read(request: Request):
    """A read: the token when the server has one; no query parameter the route does not take."""
    check_token(request, request.app.state.token, write=False)
    check_query(request)


def may_write(request: Request):
    """A write: the token, on a server that has one; no query parameter the route does not take."""
    check_token(request, request.app.state.token, write=True)
    check_query(request)


# ---------------------------------------------------------------- bodies
@dataclass
class Received:
    """A validated body: ``fields`` (the model of its kind), ``kind`` ("json" or
    "multipart"), the uploaded photo's bytes (``data``, or None) and its file name
    (``name``, no path), and when the request started to be read (``started``)."""

    fields: BaseModel
    kind: str
    data: bytes | None = None
    name: str = "upload"
    started: float = 0.0


def _validated(model, values, request):
    try:
        return model.model_validate(values, context={"dim": request.app.state.service.dim})
    except ValidationError as exc:
        raise invalid(exc, model.model_fields) from None


def _upload_name(upload):
    return (upload.filename or "upload").replace("/", "_").replace("\\", "_")[:200] or "upload"


class JsonOrForm:
    """A body sent as ``application/json`` (validated by ``json_model``) or as
    ``multipart/form-data`` (by ``form_model``, whose 'image' is the uploaded photo):
    a FastAPI dependency giving a Received; ``openapi`` describes both for the schema."""

    def __init__(self, json_model, form_model):
        self.json_model = json_model
        self.form_model = form_model

    @property
    def openapi(self):
        content = {"application/json": {"schema": self.json_model.model_json_schema()},
                   "multipart/form-data": {"schema": self.form_model.model_json_schema()}}
        return {"requestBody": {"required": True, "content": content}}

    async def __call__(self, request: Request) -> Received:
        started = time.perf_counter()
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype == "multipart/form-data":
            return await self._form(request, started)
        if ctype == "application/json":
            body = await request.body()
            # parsed and validated in a thread: an 18 MB body takes the event loop ~1 s
            return Received(await run_in_threadpool(self._json, body, request), "json", started=started)
        raise ApiError(415, "unsupported_media_type", "send multipart/form-data (an image upload) or application/json")

    def _json(self, body, request):
        dim = request.app.state.service.dim
        try:  # a vector of the index's dimension, and room for metadata and a filter
            values = loads(body, max_values=MAX_JSON_VALUES + dim)
        except TooManyValues as exc:
            raise bad_request(f"{exc} (a vector of the index's {dim:,} numbers, metadata and a filter hold "
                              f"fewer): send one vector at a time, of {dim:,} numbers") from None
        except ValueError as exc:
            raise bad_request(f"the body is not valid JSON ({exc})") from None
        if not isinstance(values, dict):
            raise bad_request("the JSON body must be an object")
        return _validated(self.json_model, values, request)

    async def _form(self, request, started):
        try:
            form = await request.form(max_files=1, max_fields=MAX_FORM_FIELDS)
        except (ApiError, ClientDisconnect):  # the body over the size limit or too slow; the client gone
            raise
        except StarletteHTTPException as exc:
            raise bad_request(f"malformed multipart body ({exc.detail})") from None
        except Exception as exc:  # python-multipart's parse errors  # noqa: BLE001
            raise bad_request(f"malformed multipart body ({type(exc).__name__})") from None
        try:
            fields = _validated(self.form_model, dict(form.multi_items()), request)
            upload = getattr(fields, "image", None)
            if upload is None:
                return Received(fields, "multipart", started=started)
            return Received(fields, "multipart", await upload.read(), _upload_name(upload), started)
        finally:
            await form.close()


__all__ = ["JsonOrForm", "Received", "check_token", "may_read", "may_write", "service_of"]

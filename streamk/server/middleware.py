"""The outer layers of the app, pure ASGI: a body size limit, time limits on reading the
body and on the whole request, limits on the requests answered at once (uploads apart from
the cheap ones), searches cancelled when their client hangs up, HEAD as GET, and one log
line per request."""

import asyncio
import logging
import time

from ..schema import JSON_SCHEMA_VERSION, SCHEMA_VERSION_HEADER
from .http_errors import ApiError, UploadTooLargeError, error_response

log = logging.getLogger("streamk.server")

CLIENT_GONE = "streamk.client_gone"  # scope key: the request was cancelled, its client gone (RequestLog: 499)
CLIENT_CLOSED_STATUS = 499  # the access log's status of such a request (nginx's "client closed request")
# Requests cancelled when their client hangs up before the answer: reads only. Writes (POST, PUT,
# DELETE /images, /backup) are never: cancelled between their steps (an image described, then
# added; metadata set, then a vector) they would be half done, and a client that hung up on a
# write (its own timeout, a dropped network) must find it done or not done, whole.
CANCELLABLE = frozenset({("POST", "/search")})


class _Limit:
    """An ASGI middleware that bounds HTTP requests by ``limit`` (:meth:`http`); other
    traffic (the lifespan) passes."""

    def __init__(self, app, limit):
        self.app = app
        self.limit = int(limit)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        return await self.http(scope, receive, send)

    async def http(self, scope, receive, send):
        raise NotImplementedError


class BodyLimit(_Limit):
    """Refuse request bodies over ``limit`` bytes: at once from Content-Length, else
    while they stream in."""

    async def http(self, scope, receive, send):
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


class HeaderLimit(_Limit):
    """Refuse a request whose request line and headers hold more than ``limit`` bytes: 431
    ``headers_too_large``, before it takes a slot. uvicorn bounds only headers that arrive in
    parts (h11's incomplete event): a request whose headers came in one read passed with 60 KB."""

    async def http(self, scope, receive, send):
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + \
            sum(len(name) + len(value) + 4 for name, value in scope.get("headers", ()))
        if size > self.limit:
            resp = error_response(431, "headers_too_large", f"the request's headers hold {size:,} bytes; at most "
                                                            f"{self.limit:,}", {"Connection": "close"})
            return await resp(scope, receive, send)
        return await self.app(scope, receive, send)


def is_upload(scope):
    """Whether a request is an upload (a multipart body, or a write under /images), whose
    slots are apart from those of the cheap requests (/health, /stats, reads, searches by
    id or vector, which a JSON body of at most the body limit asks)."""
    if scope.get("method") not in ("POST", "PUT"):
        return False
    if scope.get("path", "").startswith("/images"):
        return True
    ctype = next((v for k, v in scope.get("headers", ()) if k == b"content-type"), b"")
    return ctype.lower().startswith(b"multipart/")


class ConcurrencyLimit:
    """At most ``limit`` cheap requests and ``uploads`` uploads (:func:`is_upload`) at once,
    each kind in slots of its own, so that stalled uploads cannot starve searches (and at
    most that many bodies in memory and images queued for the workers); one more of a kind
    is answered 503 ``busy`` with Retry-After at once. /health is always answered."""

    def __init__(self, app, limit, uploads):
        self.app = app
        self.limits = {False: int(limit), True: int(uploads)}
        self.active = {False: 0, True: 0}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") == "/health":
            return await self.app(scope, receive, send)
        upload = is_upload(scope)
        if self.active[upload] >= self.limits[upload]:
            option = "--max-uploads" if upload else "--max-requests"
            what = "uploads" if upload else "requests"
            resp = error_response(503, "busy", f"the server is answering {self.limits[upload]} {what} already "
                                               f"({option}); try again shortly", {"Retry-After": "1"})
            return await resp(scope, receive, send)
        self.active[upload] += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.active[upload] -= 1


class Deadlines:
    """Time limits on a request: each part of its body within ``body_timeout`` seconds of
    the one before, the whole body within ``body_timeout`` + its length / ``min_rate``
    (bytes per second; a body of unknown length: ``max_body`` / ``min_rate``), else 408
    ``body_timeout``; the answer started within ``request_timeout`` of the request, else
    503 ``timeout``. Either closes the connection; the request's slot is free again."""

    def __init__(self, app, body_timeout, min_rate, request_timeout, max_body):
        self.app = app
        self.body_timeout = float(body_timeout)
        self.min_rate = float(min_rate)
        self.request_timeout = float(request_timeout)
        self.max_body = int(max_body)

    def _body_deadline(self, scope, start):
        length = next((v for k, v in scope.get("headers", ()) if k == b"content-length"), None)
        size = int(length) if length is not None and length.isdigit() else self.max_body
        return start + self.body_timeout + size / self.min_rate

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = self._body_deadline(scope, start)
        body_done, answered = False, False

        async def timed_receive():
            nonlocal body_done
            if body_done:
                return await receive()
            wait = min(self.body_timeout, deadline - loop.time())
            try:
                message = await asyncio.wait_for(receive(), max(wait, 0.0))
            except asyncio.TimeoutError:
                raise ApiError(408, "body_timeout", f"the request body came too slowly: each part within "
                                                    f"{self.body_timeout:g} s, at least {self.min_rate:,.0f} "
                                                    f"bytes/s (--body-timeout, --min-body-rate)",
                               {"Connection": "close"}) from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def sending(message):
            nonlocal answered
            answered = True
            await send(message)
        try:
            await asyncio.wait_for(self.app(scope, timed_receive, sending), self.request_timeout)
        except asyncio.TimeoutError:
            log.warning("%s %s: no answer within %g s (--request-timeout)", scope.get("method"), scope.get("path"),
                        self.request_timeout)
            if not answered:
                resp = error_response(503, "timeout", f"no answer within {self.request_timeout:g} s "
                                                      f"(--request-timeout); a write may have been done: check "
                                                      f"before sending it again", {"Connection": "close"})
                await resp(scope, receive, send)


class CancelOnDisconnect:
    """A request of ``routes`` (method, path) whose client hangs up after sending its body
    and before its answer is cancelled at once: its handler task, and with it what it
    awaits (a describe still waiting for a worker is never run: streamk.server.pool; a
    search still queued for the index thread is dropped); its slot (ConcurrencyLimit,
    outside this) is free as it returns. One log line says so; RequestLog's says 499.

    Once the body is complete this is the one reader of ``receive``: a watcher waits on it
    for ``http.disconnect``, and the app's own later ``receive()`` calls wait for the
    watcher. uvicorn's receive also gives ``http.disconnect`` once the answer is complete:
    a disconnect seen after the answer was sent cancels nothing."""

    def __init__(self, app, routes=CANCELLABLE):
        self.app = app
        self.routes = frozenset(routes)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or (scope.get("method"), scope.get("path")) not in self.routes:
            return await self.app(scope, receive, send)
        loop = asyncio.get_running_loop()
        handler, gone, start = asyncio.current_task(), loop.create_future(), loop.time()
        watcher, answered = None, False

        async def watch():
            while (await receive())["type"] != "http.disconnect":
                pass  # (an empty body part: uvicorn's receive woken for nothing) wait on
            if not answered and not gone.done():
                gone.set_result(loop.time())
                handler.cancel()

        async def receiving():
            nonlocal watcher
            if watcher is not None:  # the body is complete: the watcher reads receive, the app waits for it
                await asyncio.shield(gone)
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                watcher = asyncio.ensure_future(watch())
            return message

        async def sending(message):
            nonlocal answered
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered = True  # from here on, a disconnect is the answer's end, or too late to save anything
            await send(message)
        try:
            await self.app(scope, receiving, sending)
        except asyncio.CancelledError:
            if not gone.done():  # cancelled from outside (the server stopping): not ours to swallow
                raise
            uncancel = getattr(handler, "uncancel", None)  # Python 3.11+: the cancel we asked for is handled
            if uncancel is not None:
                uncancel()
            scope[CLIENT_GONE] = True
            client = scope.get("client") or ("-", 0)
            log.info("%s %s %s: the client closed the connection before its answer; cancelled after %.1f ms, "
                     "its slot free", client[0], scope.get("method"), scope.get("path"),
                     1000 * (gone.result() - start))
        finally:
            if watcher is not None:
                watcher.cancel()


class HeadAsGet:
    """HEAD answered as GET would be, headers only (Content-Length that of the body not
    sent); on a path without GET, the 405 of GET, whose Allow lists what the path takes."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "HEAD":
            return await self.app(scope, receive, send)

        async def headers_only(message):
            if message["type"] == "http.response.body":
                if message.get("more_body"):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)
        return await self.app(dict(scope, method="GET"), receive, headers_only)


class SchemaVersionHeader:
    """Every answer names the version of its JSON (:mod:`streamk.schema`) in the header
    ``Streamk-Schema-Version``: the bodies stay as they were, so no client breaks."""

    def __init__(self, app):
        self.app = app
        self.header = (SCHEMA_VERSION_HEADER.lower().encode(), str(JSON_SCHEMA_VERSION).encode())

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def sending(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), self.header]}
            await send(message)
        return await self.app(scope, receive, sending)


class RequestLog:
    """One log line per request: method, path, status (499: cancelled, its client gone:
    :class:`CancelOnDisconnect`), milliseconds."""

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
            code = CLIENT_CLOSED_STATUS if scope.get(CLIENT_GONE) else status[0]
            log.info("%s %s %s %d %.1f ms", client[0], scope.get("method"), scope.get("path"), code,
                     1000 * (time.perf_counter() - t0))


__all__ = ["BodyLimit", "CANCELLABLE", "CLIENT_CLOSED_STATUS", "CancelOnDisconnect", "ConcurrencyLimit", "Deadlines",
           "HeadAsGet", "HeaderLimit", "RequestLog", "SchemaVersionHeader", "is_upload"]

"""The outer layers of the app, pure ASGI: a body size limit, a limit on the requests
answered at once, and one log line per request."""

import logging
import time

from .http_errors import UploadTooLargeError, error_response

log = logging.getLogger("streamk.server")


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


__all__ = ["BodyLimit", "ConcurrencyLimit", "HeadAsGet", "RequestLog"]

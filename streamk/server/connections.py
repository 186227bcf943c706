"""Limits on connections, below the app: what uvicorn bounds itself, and the time to send
a request's headers, which it does not bound (a client that sends half its headers would
hold its connection for good).

The limits and timeouts of ``streamk serve`` (defaults here; the options in
streamk/cli/serve.py):

* headers within ``--header-timeout`` (10 s) of the connection, or of the first byte of
  the next request on a kept-alive one; else the connection is closed;
* at most MAX_HEADER_BYTES (16 KiB, uvicorn's h11_max_incomplete_event_size) of headers;
  more is answered 400;
* an idle kept-alive connection closed after ``--keep-alive-timeout`` (5 s, uvicorn's);
* at most ``--max-connections`` (512, uvicorn's limit_concurrency) connections; a request
  on one more is answered 503 by uvicorn itself;
* the body: ``--body-timeout`` (10 s) between its parts and at least ``--min-body-rate``
  (64 KiB/s) over the whole, the answer within ``--request-timeout`` (300 s): see
  :class:`~streamk.server.middleware.Deadlines`;
* ``--max-requests`` (64) cheap requests and ``--max-uploads`` (8) uploads at once, in
  slots apart: see :class:`~streamk.server.middleware.ConcurrencyLimit`.
"""

import logging

log = logging.getLogger("streamk.server")

DEFAULT_HEADER_TIMEOUT = 10.0  # seconds to send a request's headers
DEFAULT_KEEP_ALIVE_TIMEOUT = 5  # seconds an idle kept-alive connection stays open (uvicorn's default)
DEFAULT_MAX_CONNECTIONS = 512  # connections at once (uvicorn's limit_concurrency)
MAX_HEADER_BYTES = 16 << 10  # bytes of a request's headers (uvicorn's h11_max_incomplete_event_size)


def header_timed(protocol_class, header_timeout):
    """``protocol_class`` (uvicorn's h11 protocol) with a time limit on receiving a
    request's headers: from the connection, or from the first byte of a next request, until
    the request starts (its headers complete); a connection over it is closed."""

    class HeaderTimedProtocol(protocol_class):
        _header_timer = None

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm()

        def _waiting_for_headers(self):
            return self.cycle is None or self.cycle.response_complete

        def _arm(self):
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._headers_too_slow)

        def _disarm(self):
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def data_received(self, data):
            if self._waiting_for_headers():
                self._arm()
            super().data_received(data)
            if not self._waiting_for_headers():
                self._disarm()

        def on_response_complete(self):
            self._disarm()  # idle now: uvicorn's keep-alive timeout; a next request's first byte arms it again
            super().on_response_complete()

        def connection_lost(self, exc):
            self._disarm()
            super().connection_lost(exc)

        def _headers_too_slow(self):
            self._header_timer = None
            if self._waiting_for_headers() and not self.transport.is_closing():
                client = self.client or ("-", 0)
                log.info("%s: no request headers within %g s (--header-timeout): connection closed", client[0],
                         header_timeout)
                self.transport.close()

    return HeaderTimedProtocol


def uvicorn_limits(header_timeout=DEFAULT_HEADER_TIMEOUT, keep_alive_timeout=DEFAULT_KEEP_ALIVE_TIMEOUT,
                   max_connections=DEFAULT_MAX_CONNECTIONS):
    """The keyword arguments of ``uvicorn.Config`` that bound connections (see the module doc)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return {"http": header_timed(H11Protocol, float(header_timeout)), "timeout_keep_alive": int(keep_alive_timeout),
            "limit_concurrency": int(max_connections), "h11_max_incomplete_event_size": MAX_HEADER_BYTES}


__all__ = ["DEFAULT_HEADER_TIMEOUT", "DEFAULT_KEEP_ALIVE_TIMEOUT", "DEFAULT_MAX_CONNECTIONS", "MAX_HEADER_BYTES",
           "header_timed", "uvicorn_limits"]

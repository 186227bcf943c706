"""Limits on connections, below the app: what uvicorn bounds itself, the time to send a
request's headers, which it does not bound (a client that sends half its headers would
hold its connection for good), and the connections of one client address, which it does
not bound either (one client could hold every connection of ``--max-connections``).

The limits and timeouts of ``streamk serve`` (defaults here; the options in
streamk/cli/serve.py):

* headers within ``--header-timeout`` (10 s) of the connection, or of the first byte of
  the next request on a kept-alive one; else the connection is closed;
* at most MAX_HEADER_BYTES (16 KiB, uvicorn's h11_max_incomplete_event_size) of headers;
  more is answered 400;
* an idle kept-alive connection closed after ``--keep-alive-timeout`` (5 s, uvicorn's);
* at most ``--max-connections`` (512, uvicorn's limit_concurrency) connections; a request
  on one more is answered 503 by uvicorn itself;
* at most ``--max-connections-per-client`` (64) of them open at once from one client
  address (the peer's IP; for IPv6 its /64, in which one host may pick addresses at will):
  one more is closed as it is made, before uvicorn counts it, and
  the log says so once a minute per address at most. 64 is an eighth of the 512, so
  that one address cannot take them all (it takes 8 addresses, as it took 1), and ten
  times what a browser opens to one host (6); pooled HTTP clients keep fewer (requests:
  10; httpx keeps 20 idle). 0 switches the cap off: needed behind a reverse proxy, where
  every client has the proxy's address (the proxy then bounds its clients);
* the body: ``--body-timeout`` (10 s) between its parts and at least ``--min-body-rate``
  (64 KiB/s) over the whole, the answer within ``--request-timeout`` (300 s): see
  :class:`~streamk.server.middleware.Deadlines`;
* ``--max-requests`` (64) cheap requests and ``--max-uploads`` (8) uploads at once, in
  slots apart: see :class:`~streamk.server.middleware.ConcurrencyLimit`.
"""

import ipaddress
import logging
import time

from ..errors import ConfigError

log = logging.getLogger("streamk.server")

DEFAULT_HEADER_TIMEOUT = 10.0  # seconds to send a request's headers
DEFAULT_KEEP_ALIVE_TIMEOUT = 5  # seconds an idle kept-alive connection stays open (uvicorn's default)
DEFAULT_MAX_CONNECTIONS = 512  # connections at once (uvicorn's limit_concurrency)
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = DEFAULT_MAX_CONNECTIONS // 8  # 64 open at once from one client address; 0: off
REFUSED_LOG_INTERVAL = 60.0  # seconds between two log lines about one address's refused connections
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


def client_of(address):
    """The client an address counts for: an IPv4 address itself (also written as an IPv4-mapped
    IPv6 one, as a dual-stack socket sees it), an IPv6 address's /64 (the prefix one host or one
    subscriber is given, and picks its addresses in at will: counted per address, one host
    would have 2^64 caps)."""
    try:
        ip = ipaddress.ip_address(str(address).split("%", 1)[0])  # (a scope id: fe80::1%eth0)
    except ValueError:  # not an IP address: counted as it is
        return str(address)
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def client_capped(protocol_class, max_per_client):
    """``protocol_class`` (an asyncio protocol of uvicorn's) with at most ``max_per_client``
    connections open at once from one client (:func:`client_of` the peer's IP: an IPv6 /64
    counts as one; none for a Unix socket); one more is closed in ``connection_made``, before ``protocol_class`` sees it
    (uvicorn never counts it against ``--max-connections``), and logged once per address
    per REFUSED_LOG_INTERVAL at most. 0: ``protocol_class`` itself, no cap.

    The count of an address is a dict entry, added to in ``connection_made`` and taken
    from in ``connection_lost``, which asyncio calls once for every connection made,
    however it ends (a header or keep-alive timeout, the client's reset, the server's
    shutdown); an entry at 0 is removed, so the dict holds only addresses with connections
    open. Its cost: one dict update when a connection opens, one when it closes."""
    if max_per_client == 0:
        return protocol_class
    open_now = {}  # address -> its connections open now (> 0)
    refused_log = {}  # address -> [time of its last log line, connections refused since]: oldest line first

    def log_refused(address):
        now = time.monotonic()
        entry = refused_log.get(address)
        if entry is not None and now - entry[0] < REFUSED_LOG_INTERVAL:
            entry[1] += 1
            return
        refused_log.pop(address, None)
        while refused_log:  # the entries older than the interval (first, in order of their lines) are dropped
            oldest = next(iter(refused_log))
            if now - refused_log[oldest][0] < REFUSED_LOG_INTERVAL:
                break
            del refused_log[oldest]
        refused_log[address] = [now, 0]
        since = f"; {entry[1]:,} more refused since the last such line" if entry is not None and entry[1] else ""
        log.warning("%s: already %d connections open from this address (--max-connections-per-client): new ones "
                    "are closed at once%s (behind a reverse proxy, every client has its address: "
                    "--max-connections-per-client 0)", address, max_per_client, since)

    class ClientCappedProtocol(protocol_class):
        _address = None  # the address this connection is counted under, until connection_lost
        _refused = False

        def connection_made(self, transport):
            peer = transport.get_extra_info("peername")
            address = client_of(peer[0]) if isinstance(peer, (tuple, list)) and peer else None
            if address is not None:
                n = open_now.get(address, 0)
                if n >= max_per_client:
                    self._refused = True
                    transport.close()  # asyncio calls connection_lost next
                    log_refused(address)
                    return
                open_now[address] = n + 1
                self._address = address
            super().connection_made(transport)

        def data_received(self, data):
            if not self._refused:
                super().data_received(data)

        def connection_lost(self, exc):
            if self._refused:
                return  # never counted, never seen by uvicorn
            address, self._address = self._address, None
            if address is not None:
                n = open_now[address] - 1
                if n:
                    open_now[address] = n
                else:
                    del open_now[address]
            super().connection_lost(exc)

    return ClientCappedProtocol


def uvicorn_limits(header_timeout=DEFAULT_HEADER_TIMEOUT, keep_alive_timeout=DEFAULT_KEEP_ALIVE_TIMEOUT,
                   max_connections=DEFAULT_MAX_CONNECTIONS,
                   max_connections_per_client=DEFAULT_MAX_CONNECTIONS_PER_CLIENT):
    """The keyword arguments of ``uvicorn.Config`` that bound connections (see the module doc);
    a ConfigError for a negative ``max_connections_per_client``. WebSocket upgrades are off
    (the app has no WebSocket route, and an upgraded connection would leave the protocol
    that counts it)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    per_client = max_connections_per_client
    if isinstance(per_client, bool) or not isinstance(per_client, int) or per_client < 0:
        raise ConfigError(f"--max-connections-per-client must be a whole number of connections, 0 (no cap) or "
                          f"more; got {per_client!r}")
    if per_client >= int(max_connections):
        log.warning("--max-connections-per-client %d is not under --max-connections %d: one client address can "
                    "take every connection (give it an eighth of --max-connections, say)", per_client,
                    int(max_connections))
    http = client_capped(header_timed(H11Protocol, float(header_timeout)), per_client)
    return {"http": http, "ws": "none", "timeout_keep_alive": int(keep_alive_timeout),
            "limit_concurrency": int(max_connections), "h11_max_incomplete_event_size": MAX_HEADER_BYTES}


__all__ = ["DEFAULT_HEADER_TIMEOUT", "DEFAULT_KEEP_ALIVE_TIMEOUT", "DEFAULT_MAX_CONNECTIONS",
           "DEFAULT_MAX_CONNECTIONS_PER_CLIENT", "MAX_HEADER_BYTES", "REFUSED_LOG_INTERVAL", "client_capped",
           "client_of", "header_timed", "uvicorn_limits"]

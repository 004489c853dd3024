"""A lean HTTP/1.1 server for the extender: httptools' parser on an asyncio protocol, one write per answer.

kube-scheduler waits for every extender call inside its sequential scheduling cycle,
so the server's own cost per request is part of every pod's scheduling. A general
web framework (routing, middleware chains, request and response objects, a task per
request) cost more CPU per call than our scoring; this server does only what the
extender's protocol needs: parse a request (llhttp, through ``httptools``), hand
method, path and body to a synchronous handler (the handlers do no I/O), and write
status line, headers and body in a single ``write`` on the connection (asyncio sets
``TCP_NODELAY``: no delayed-ACK stall on kept-alive connections).

A server may be given a **fast route** (``agent.extender.fastpath``): compiled code that
answers the one request the scheduler makes most, straight from the connection's
bytes, before the parser sees them; it takes only a strict subset of HTTP/1.1 and hands
anything else, byte for byte, to the parser. While no request is in flight in the
parser, each chunk received is offered to it first; the start of a request it takes
is kept (under the same request timeout) until the request is whole.

HTTP/1.1 keep-alive and pipelining as the client asks; ``Connection: close`` and
HTTP/1.0 close after the answer. Defences, each answered with a JSON ``Error`` and the
connection closed: a body larger than ``max_body_bytes`` (413, as soon as its
Content-Length says so), a request that does not arrive whole within
``REQUEST_TIMEOUT_S`` (408), a malformed request (400). An idle kept-alive connection
is closed after ``IDLE_TIMEOUT_S``; a client that goes away is a DEBUG line.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import ssl
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import NamedTuple, cast

import httptools

logger = logging.getLogger(__name__)

#: A request must arrive whole within this time once it started.
REQUEST_TIMEOUT_S = 10.0
#: A kept-alive connection with no request in flight is closed after this time.
IDLE_TIMEOUT_S = 75.0


class Reply(NamedTuple):
    """An answer: status, content type and the whole body; ``after`` runs once it is written."""

    status: int
    content_type: str
    body: bytes
    allow: str = ""  # the Allow header of a 405
    #: Work the answer does not depend on (bookkeeping, releasing the request's objects): run after the
    #: answer is on the wire, so that the client, which waits for the answer, does not wait for it too.
    after: Callable[[], None] | None = None


#: ``handle(method, path, content_type, body) -> Reply`` (content type lower-cased, '' when not given);
#: runs on the event loop, must not block.
Handler = Callable[[str, str, str, bytes], Reply]

#: Requests answered before the parser sees them (see the module docstring): ``serve(data, write)`` returns
#: None (not one it answers: the parser takes every byte), 0 (the start of one: call again with more), or the
#: bytes it consumed, having passed the whole response to ``write`` and recorded the answer; (consumed, error)
#: when recording failed after the write (it stops answering until armed again).
FastRoute = Callable[[bytes, Callable[[bytes], object]], int | tuple[int, BaseException] | None]


def json_error(status: int, text: str) -> Reply:
    return Reply(status, "application/json", json.dumps({"Error": text}).encode())


def render(reply: Reply, *, close: bool) -> bytes:
    """Status line, headers and body as one piece."""
    head = f"{_status_line(reply.status)}Content-Type: {reply.content_type}\r\nContent-Length: {len(reply.body)}\r\n"
    if reply.allow:
        head += f"Allow: {reply.allow}\r\n"
    if close:
        head += "Connection: close\r\n"
    return (head + "\r\n").encode("latin-1") + reply.body


@functools.lru_cache(maxsize=64)
def _status_line(status: int) -> str:
    """``HTTP/1.1 200 OK\\r\\n``: an enum lookup once per status, not once per answer."""
    return f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"


class HttpProtocol(asyncio.Protocol):
    """One client connection."""

    def __init__(
        self, handle: Handler, max_body_bytes: int, connections: set[HttpProtocol], fast: FastRoute | None = None
    ) -> None:
        self._handle = handle
        self._fast = fast
        #: The start of a request the fast route takes, kept until it is whole.
        self._held: bytearray | None = None
        #: A request is in flight in the parser (from its first byte to its end): the parser takes every byte.
        self._parsing = False
        self._max_body = max_body_bytes
        self._connections = connections
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._body: list[bytes] = []
        self._size = 0
        self._length: int | None = None
        self._content_type = b""
        self._continue = False
        self._closing = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = math.inf
        self._expiry: Reply | None = None

    # --- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio's transport or uvloop's (which implements asyncio.Transport without subclassing it)
        self._transport = cast(asyncio.Transport, transport)
        self._connections.add(self)
        self._deadline = time.monotonic() + IDLE_TIMEOUT_S
        self._set_timer(self._deadline)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if exc is not None:
            logger.debug("extender: a client connection ended: %s", exc)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._fast is not None and not self._parsing:
            data = self._fast_feed(self._fast, data)
            if not data or self._closing:
                return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(json_error(400, "protocol upgrades are not supported"))
        except httptools.HttpParserError as exc:
            if not self._closing:  # a limit already answered and closed
                self._fail(json_error(400, f"malformed HTTP request: {exc}"))

    def close(self) -> None:
        """Close the connection (the server is stopping)."""
        self._closing = True
        if self._transport is not None:
            self._transport.close()

    # --- httptools callbacks -----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url, self._body, self._size, self._length, self._continue = b"", [], 0, None, False
        self._content_type = b""
        self._parsing = True
        if self._expiry is None:  # else it began while the fast route held it: its deadline holds
            self._deadline, self._expiry = time.monotonic() + REQUEST_TIMEOUT_S, _late(REQUEST_TIMEOUT_S)

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" and value.strip().isdigit():  # anything else: llhttp refuses the request
            self._length = int(value)
        elif name == b"content-type":
            self._content_type = value.strip().lower()
        elif name == b"expect" and value.strip().lower() == b"100-continue":
            self._continue = True

    def on_headers_complete(self) -> None:
        if self._length is not None and self._length > self._max_body:
            self._fail(json_error(413, f"the body is larger than {self._max_body} bytes"))
            raise httptools.HttpParserError("body too large")  # stop parsing this connection
        if self._continue and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._max_body:
            self._fail(json_error(413, f"the body is larger than {self._max_body} bytes"))
            raise httptools.HttpParserError("body too large")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._parsing = False
        if self._closing:
            return
        self._disarm()  # answered before the timer can run: this call is synchronous
        method = self._parser.get_method().decode("latin-1")
        path = self._url.split(b"?", 1)[0].decode("latin-1", errors="replace")
        content_type = self._content_type.decode("latin-1", errors="replace")
        reply = self._handle(method, path, content_type, b"".join(self._body))
        self._body = []
        keep_alive = self._parser.should_keep_alive()
        self._write(reply, close=not keep_alive)
        if reply.after is not None:
            try:
                reply.after()
            except Exception:
                logger.exception("extender: the work after answering %s %s failed", method, path)
        if keep_alive:
            self._deadline, self._expiry = time.monotonic() + IDLE_TIMEOUT_S, None

    # --- the fast route ----------------------------------------------------------------------
    def _fast_feed(self, fast: FastRoute, data: bytes) -> bytes:
        """Offer ``data`` (after what is held) to the fast route; the bytes left for the parser."""
        held = self._held
        if held is not None:
            held += data
            data, self._held = bytes(held), None
        transport = self._transport
        if transport is None or transport.is_closing():
            return b""
        while data:
            try:
                answered = fast(data, transport.write)
            except Exception:
                logger.exception("extender: the fast route failed; the request goes to the parser")
                return data
            if answered is None:
                return data
            if not isinstance(answered, int):  # answered, but recording it failed
                consumed, failure = answered
                logger.error("extender: the work after a fast answer failed", exc_info=failure)
            elif answered:
                consumed = answered
            else:  # the start of a request it takes
                self._held = bytearray(data)
                if self._expiry is None:
                    self._deadline, self._expiry = time.monotonic() + REQUEST_TIMEOUT_S, _late(REQUEST_TIMEOUT_S)
                return b""
            self._deadline, self._expiry = time.monotonic() + IDLE_TIMEOUT_S, None
            data = data[consumed:]
        return data

    # --- helpers -----------------------------------------------------------------------------
    def _write(self, reply: Reply, *, close: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(render(reply, close=close))
        if close:
            self._closing = True
            self._disarm()
            transport.close()

    def _fail(self, reply: Reply) -> None:
        self._write(reply, close=True)

    def _set_timer(self, deadline: float) -> None:
        """The connection's one timer, at ``deadline`` or sooner: a request may start any time and must then be
        answered within ``REQUEST_TIMEOUT_S``, so the timer never waits longer than that. A request only notes
        its deadline (``_deadline``, on the loop's clock: ``time.monotonic`` for asyncio's, the same clock in
        milliseconds for uvloop's); the timer sets itself again until the deadline it finds has passed."""
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(min(deadline, time.monotonic() + REQUEST_TIMEOUT_S), self._expire)

    def _disarm(self) -> None:
        self._deadline = math.inf

    def _expire(self) -> None:
        """The timer: at the deadline, answer the stalled request with ``_expiry`` and close, or close an idle
        connection (``_expiry`` None); before it, wait again."""
        self._timer = None
        if self._closing:
            return
        if time.monotonic() < self._deadline:
            self._set_timer(self._deadline)
            return
        reply = self._expiry
        if reply is not None:
            logger.info("extender: %s", json.loads(reply.body)["Error"])
            self._fail(reply)
        else:
            self.close()


@functools.lru_cache(maxsize=4)
def _late(seconds: float) -> Reply:
    return json_error(408, f"the request did not arrive within {seconds:.0f} s")


class HttpServer:
    """A listening server; ``addresses`` as bound, ``cleanup()`` closes the listener and every connection."""

    def __init__(self, server: asyncio.Server, connections: set[HttpProtocol]) -> None:
        self._server = server
        self._connections = connections

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [sock.getsockname()[:2] for sock in self._server.sockets]

    async def cleanup(self) -> None:
        self._server.close()
        for connection in list(self._connections):
            connection.close()
        await self._server.wait_closed()


def tls_context(cert_file: str, key_file: str, client_ca_file: str | None) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2+); with ``client_ca_file``, clients must show a certificate it signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        context.load_verify_locations(client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


async def start_server(
    handle: Handler,
    host: str,
    port: int,
    max_body_bytes: int,
    tls: ssl.SSLContext | None = None,
    fast: FastRoute | None = None,
) -> HttpServer:
    """Listen on ``host:port`` (0: a free port) and serve ``handle`` (and ``fast``, before the parser), over TLS
    when given a context."""
    connections: set[HttpProtocol] = set()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: HttpProtocol(handle, max_body_bytes, connections, fast), host, port, reuse_address=True, ssl=tls
    )
    return HttpServer(server, connections)

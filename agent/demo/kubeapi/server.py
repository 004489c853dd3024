"""The API server stand-in over HTTP on 127.0.0.1: connections, authentication, routing and watch streams
(see :mod:`agent.demo.kubeapi`)."""

from __future__ import annotations

import contextlib
import copy
import json
import select
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from agent.demo.kubeapi.objects import JSON, PATH, ApiError, _parse_rv, status_object
from agent.demo.kubeapi.store import ObjectStore, RecordedRequest, _Watch, _watch_event

#: How often an idle watch checks whether its client is still there.
_DISCONNECT_CHECK_S = 0.05


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler thread
    block_on_close = True
    api: KubeApiStandIn


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.api._connection_opened(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.api._connection_closed(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        self.server.api._handle(self, self.command)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve


class KubeApiStandIn(ObjectStore):
    """The API server stand-in; subclasses see requests in :meth:`_received` and may refuse authenticated ones
    in :meth:`_admit` (raise ApiError)."""

    _server: _Server | None = None
    _thread: threading.Thread | None = None
    _stopping = False

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> Self:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.api = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-apiserver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Cut every watch and connection, stop serving, join every thread."""
        if self._server is None:
            return
        with self._cond:
            self._stopping = True
            for watch in self._watches:
                watch.action = "drop"
            self._cond.notify_all()
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._server.shutdown()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join()
        self._server = None

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def write_kubeconfig(self, path: Path, *, token: str | None = None, namespace: str = "default") -> Path:
        """A kubeconfig (JSON is YAML) pointing at this server with a bearer token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fpga-agent", "user": {"token": self.token if token is None else token}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fpga-agent", "namespace": namespace}}
            ],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config, indent=2))
        return path

    # --- connections --------------------------------------------------------------------

    def _connection_opened(self, conn: socket.socket) -> None:
        with self._cond:
            self._connections.add(conn)
            stopping = self._stopping
            self._cond.notify_all()
        if stopping:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _connection_closed(self, conn: socket.socket) -> None:
        with self._cond:
            self._connections.discard(conn)
            self._cond.notify_all()

    # --- requests -----------------------------------------------------------------------

    def _handle(self, handler: _Handler, method: str) -> None:
        url = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = RecordedRequest(method, url.path, query, {k.lower(): v for k, v in handler.headers.items()}, body)
        self._received(request)
        try:
            self._authenticate(request)
            self._admit(request)
            if request.is_watch and method == "GET":
                self._serve_watch(handler, request)
                return
            code, answer = self._route(request)
        except ApiError as exc:
            code, answer = exc.code, exc.status
        self._send_json(handler, code, answer)

    def _received(self, request: RecordedRequest) -> None:
        """Every request, as it arrives."""

    def _admit(self, request: RecordedRequest) -> None:
        """An authenticated request, before it is served; ApiError answers it instead."""

    def _authenticate(self, request: RecordedRequest) -> None:
        if self.token and request.headers.get("authorization", "") != f"Bearer {self.token}":
            raise ApiError(401, "Unauthorized")

    def _serve_watch(self, handler: _Handler, request: RecordedRequest) -> None:
        match = PATH.match(request.path)
        if not match or match["name"] or match["res"] not in self.resources:
            raise ApiError(404, "the server could not find the requested resource")
        resource, namespace = match["res"], match["ns"]
        self._check_scope(resource, namespace, match["api"])
        matches = self._selector(resource, namespace, request.query)
        version = request.query.get("resourceVersion", "")
        timeout_s = float(request.query.get("timeoutSeconds") or 1800)
        watch = _Watch(resource, request.query)
        pending: list[JSON] = []
        with self._cond:
            if version in ("", "0"):
                cursor = self._rv
                for obj in self._objects[resource].values():
                    if matches(obj):
                        pending.append({"type": "ADDED", "object": copy.deepcopy(obj)})
            else:
                cursor = _parse_rv(version)
                if cursor < self._compacted_rv:
                    message = f"too old resource version: {cursor} ({self._compacted_rv})"
                    expired = {"type": "ERROR", "object": status_object(410, message, "Expired")}
                    self._start_stream(handler)
                    with contextlib.suppress(OSError):
                        _write_events(handler, [expired], end=True)
                    return
            self._watches.append(watch)
            self._cond.notify_all()
        try:
            self._start_stream(handler)
            self._stream(handler, watch, matches, cursor, pending, time.monotonic() + timeout_s)
        except OSError:
            handler.close_connection = True
        finally:
            with self._cond:
                self._watches.remove(watch)
                self._cond.notify_all()

    @staticmethod
    def _start_stream(handler: _Handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

    def _stream(
        self,
        handler: _Handler,
        watch: _Watch,
        matches: Callable[[JSON], bool],
        cursor: int,
        pending: list[JSON],
        deadline: float,
    ) -> None:
        while True:
            _write_events(handler, pending)
            pending = []
            with self._cond:

                def due(since: int = cursor) -> bool:
                    return watch.action is not None or self._rv > since or bool(watch.queued)

                # Wake now and then to notice a client that went away, as the real server does.
                while not self._cond.wait_for(due, timeout=min(_DISCONNECT_CHECK_S, deadline - time.monotonic())):
                    if time.monotonic() >= deadline:
                        watch.action = "end"  # timeoutSeconds passed
                    elif _client_gone(handler.connection):
                        watch.action = "gone"
                if watch.action == "gone":
                    handler.close_connection = True
                    return
                if cursor < self._dropped_rv:  # changes it has not seen are gone from the history
                    watch.expire()
                else:
                    for change in self._history:
                        if change.rv > cursor and change.resource == watch.resource:
                            found = _watch_event(change, matches)
                            pending += [found] if found is not None else []
                pending += watch.queued
                watch.queued.clear()
                cursor = self._rv
                action = watch.action
            if action == "drop":
                handler.close_connection = True
                with contextlib.suppress(OSError):
                    handler.connection.shutdown(socket.SHUT_RDWR)
                return
            if action is not None:
                _write_events(handler, pending, end=True)
                return

    @staticmethod
    def _send_json(handler: _Handler, code: int, body: JSON) -> None:
        data = json.dumps(body).encode()
        try:
            handler.send_response(code)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            handler.close_connection = True


# --- helpers ---------------------------------------------------------------------------------


def _client_gone(conn: socket.socket) -> bool:
    """Whether the client closed its end (readable with nothing to read). A watch client sends nothing."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _write_events(handler: _Handler, events: list[JSON], *, end: bool = False) -> None:
    """Each event as one chunk of the stream; with ``end``, the last chunk after them."""
    for event in events:
        data = json.dumps(event).encode() + b"\n"
        handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    if end:
        handler.wfile.write(b"0\r\n\r\n")

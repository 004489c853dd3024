"""The agent's HTTP endpoint for the kubelet's probes: ``/healthz`` (liveness) and ``/readyz`` (readiness), each
one plain-text line: ok, or 503 and the reason; ``/metrics`` joins through :meth:`HealthServer.add_routes`."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable, Iterable

from aiohttp import web

from agent.config.values import ListenAddress
from agent.errors import ConfigError

logger = logging.getLogger(__name__)

#: A check returns None when all is well, else the reason it is not.
Check = Callable[[], str | None]

#: How long open probe connections may take to finish when the server stops.
SHUTDOWN_TIMEOUT_S = 1.0


class PortInUse(ConfigError):
    """The health port is taken by another process."""


class HealthServer:
    """``/healthz`` and ``/readyz`` on ``address``; ``start()`` binds, ``stop()`` closes."""

    def __init__(self, address: ListenAddress, *, alive: Check, ready: Check, shared: bool = False) -> None:
        """``shared``: the port may be bound by another process as well (SO_REUSEPORT; DRA mode's updates)."""
        self.address = address
        self._shared = shared
        self._alive = alive
        self._ready = ready
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        #: set while the endpoint listens
        self.serving = asyncio.Event()

    def add_routes(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        """More routes on the same port (e.g. ``/metrics``); only before ``start()``."""
        if self._runner is not None:
            raise RuntimeError("routes must be added before the health server starts")
        self.app.router.add_routes(routes)

    async def start(self) -> int:
        """Listen and serve; returns the bound port. A refused bind is a ConfigError naming the flag."""
        sock = _bind(self.address, self._shared)
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        self._runner = runner
        try:
            await web.SockSite(runner, sock).start()
        except BaseException:
            sock.close()
            await self.stop()
            raise
        self.port = int(sock.getsockname()[1])
        self.serving.set()
        logger.info("health endpoint on %s port %d: /healthz, /readyz", self.address.host, self.port)
        return self.port

    async def start_when_free(self, retry_s: float = 2.0) -> None:
        """:meth:`start`, again every ``retry_s`` while the port is taken (:class:`PortInUse`)."""
        said = False
        while True:
            try:
                await self.start()
                return
            except PortInUse as exc:
                if not said:
                    logger.warning("%s; trying again every %.0f s (the old agent of an update holds it)", exc, retry_s)
                said = True
            await asyncio.sleep(retry_s)

    async def stop(self) -> None:
        self.serving.clear()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        return _answer(self._alive(), "ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        return _answer(self._ready(), "ready")


def _answer(problem: str | None, fine: str) -> web.Response:
    if problem is None:
        return web.Response(text=f"{fine}\n")
    return web.Response(status=503, text=f"{problem}\n")


def _bind(address: ListenAddress, shared: bool = False) -> socket.socket:
    """A listening-ready TCP socket on ``address`` (IPv4 or IPv6, as the host says)."""
    where = f"--health-listen {address}"
    try:
        infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"{where}: unknown host: {exc.strerror}") from None
    family, kind, proto, _name, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        error = PortInUse if exc.errno == errno.EADDRINUSE else ConfigError
        raise error(f"{where}: cannot listen: {exc.strerror}") from None
    return sock

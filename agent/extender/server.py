"""The extender's HTTP server: ``POST /filter``, ``POST /prioritize``, ``GET /healthz``.

kube-scheduler calls the extender inside its sequential scheduling cycle, so every
millisecond here is a millisecond of every pod's scheduling. Hence:

* no I/O in a handler: node state comes from the :class:`~agent.extender.cache.NodeCache`
  (names) or from the request's own Node objects, never from the API server;
* the body is parsed once and only the pod's annotations and slot requests are read;
* the answer is one ``bytes`` body with a Content-Length, which aiohttp sends
  together with the headers in a single write, on a socket with ``TCP_NODELAY``
  (with Nagle on, a second small write waits for the peer's delayed ACK, about
  40 ms per call on a kept-alive connection).

Bad input gets a 4xx with a JSON body whose ``Error`` says what is wrong; a bug
gets a 500 with a one-line ``Error`` and the traceback in the log, never in the
answer. With ``ignorable: true`` the scheduler then goes on without us.

``/healthz`` is the readiness check: 200 once the node cache has listed the nodes
(names would all read as "no published state" before that), 503 until then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web

from agent.errors import ExtenderRequestError
from agent.extender.cache import RequestNodes
from agent.extender.metrics import METRICS_PATH, ExtenderMetrics
from agent.extender.ranking import ChangeLog, ScoreBoard, shift_to_floor
from agent.extender.scoring import NodeLookup, ScoreWeights, filter_nodes, prioritize_nodes
from agent.extender.wire import (
    SchedulingRequest,
    encode,
    encode_priorities,
    filter_error,
    filter_result,
    parse_extender_args,
)

logger = logging.getLogger(__name__)

#: Largest request body accepted: 500 full Node objects are about 580 kB; 5000 fit too.
MAX_BODY_BYTES = 16 * 1024 * 1024
FILTER_PATH = "/filter"
PRIORITIZE_PATH = "/prioritize"
HEALTH_PATH = "/healthz"
SHUTDOWN_TIMEOUT_S = 2.0
MAX_BODY_KEY = web.AppKey("max_body_bytes", int)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class NodeSource(ChangeLog, Protocol):
    """Where names are looked up (the node cache), and its changes followed (for the score tables)."""

    def lookup(self) -> NodeLookup: ...
    @property
    def synced(self) -> bool: ...


class Extender:
    """The request handlers, over a node source and the score weights."""

    def __init__(
        self,
        nodes: NodeSource,
        weights: ScoreWeights,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.nodes = nodes
        self.weights = weights
        self._clock = clock
        self._request_nodes = RequestNodes()
        self._board = ScoreBoard(weights)

    def _lookup(self, request: SchedulingRequest) -> NodeLookup:
        if request.node_names is not None:
            return self.nodes.lookup()
        return self._request_nodes.index(request.nodes or ()).get

    async def filter(self, http_request: web.Request) -> web.Response:
        try:
            request = parse_extender_args(await http_request.read())
        except ExtenderRequestError as exc:
            return _json(filter_error(str(exc)), status=400)
        outcome = filter_nodes(request.demand, request.names, self._lookup(request))
        if outcome.failed:
            logger.debug(
                "filter for pod %s: %d of %d nodes fail", request.demand.pod, len(outcome.failed), len(request.names)
            )
        return _json(filter_result(request, outcome))

    async def prioritize(self, http_request: web.Request) -> web.Response:
        try:
            request = parse_extender_args(await http_request.read())
        except ExtenderRequestError as exc:
            return _json({"Error": str(exc)}, status=400)
        if request.node_names is not None:
            scores = self._board.prioritize(
                self.nodes, request.demand, request.node_names, self.nodes.lookup(), self._clock()
            )
        else:
            lookup = self._lookup(request)
            scores = shift_to_floor(
                prioritize_nodes(request.demand, request.names, lookup, self.weights, self._clock())
            )
        return web.Response(body=encode_priorities(scores), content_type="application/json")

    async def healthz(self, _request: web.Request) -> web.Response:
        if self.nodes.synced:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="node cache not synced yet\n")


def _json(body: object, *, status: int = 200) -> web.Response:
    return web.Response(body=encode(body), status=status, content_type="application/json")


@web.middleware
async def _errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error answer carries a JSON ``Error``; a bug's traceback goes to the log only."""
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge as exc:
        limit = request.app[MAX_BODY_KEY]
        return _json({"Error": f"the body is larger than {limit} bytes"}, status=exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _json({"Error": f"{exc.status} {exc.reason}: {request.method} {request.path}"}, status=exc.status)
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception as exc:
        logger.exception("extender: %s %s failed", request.method, request.path)
        return _json({"Error": f"internal error ({type(exc).__name__})"}, status=500)


def build_app(
    extender: Extender, *, max_body_bytes: int = MAX_BODY_BYTES, metrics: ExtenderMetrics | None = None
) -> web.Application:
    """The extender's routes; with ``metrics``, requests are counted and timed and ``/metrics`` is served."""
    middlewares = [_errors_as_json] if metrics is None else [metrics.middleware, _errors_as_json]
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)
    app[MAX_BODY_KEY] = max_body_bytes
    app.router.add_post(FILTER_PATH, extender.filter)
    app.router.add_post(PRIORITIZE_PATH, extender.prioritize)
    app.router.add_get(HEALTH_PATH, extender.healthz)
    if metrics is not None:
        app.router.add_get(METRICS_PATH, metrics.serve)
    return app


def extender_metrics() -> ExtenderMetrics:
    """Metrics labelled by the verbs kube-scheduler calls."""
    return ExtenderMetrics({FILTER_PATH: "filter", PRIORITIZE_PATH: "prioritize"})


async def start(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Bind and serve ``app``; the caller ends it with ``await runner.cleanup()``. Port 0 picks a free port."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, reuse_address=True).start()
    except BaseException:
        await runner.cleanup()
        raise
    logger.info("scheduler extender listening on %s", ", ".join(_address(a) for a in runner.addresses))
    return runner


async def serve(app: web.Application, host: str, port: int, stop: asyncio.Event) -> None:
    """Serve ``app`` on ``host:port`` until ``stop`` is set; connections are closed on the way out."""
    runner = await start(app, host, port)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def bound_port(runner: web.AppRunner) -> int:
    """The TCP port the runner listens on (the one the kernel chose for port 0)."""
    return int(runner.addresses[0][1])


def _address(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)

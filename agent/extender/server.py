"""The extender's HTTP server: ``POST /filter``, ``POST /prioritize``, ``GET /healthz``.

kube-scheduler calls the extender inside its sequential scheduling cycle, so every
millisecond here is a millisecond of every pod's scheduling. Hence:

* no I/O in a handler: node state comes from the :class:`~agent.extender.cache.NodeCache`
  (names) or from the request's own Node objects, never from the API server;
* the body is parsed once and only the pod's annotations and slot requests are read;
* the answer is one ``bytes`` body, sent with its headers in a single write on a
  socket with ``TCP_NODELAY`` (with Nagle on, a second small write waits for the
  peer's delayed ACK, about 40 ms per call on a kept-alive connection), by the lean
  server of ``agent.extender.http``: no framework between the socket and the handler.

Bad input gets a 4xx with a JSON body whose ``Error`` says what is wrong; a bug
gets a 500 with a one-line ``Error`` and the traceback in the log, never in the
answer. With ``ignorable: true`` the scheduler then goes on without us.

``/healthz`` is the readiness check: 200 once the node cache has listed the nodes
(names would all read as "no published state" before that), 503 until then.

When the scheduler's port requires client certificates, the kubelet's probes and
Prometheus (which have none) are answered on a second, plain-HTTP port that serves
only ``GET /healthz`` and ``GET /metrics`` (:func:`build_probe_app`): nothing there
scores, and nothing there is secret.

The admission webhook (``POST /validate``, :func:`build_webhook_app`, see
``agent.extender.admission``) has a port of its own, HTTPS with the same server certificate
but no client certificate asked: the API server calls webhooks without one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Callable
from typing import Protocol

from agent.errors import ExtenderRequestError, shown
from agent.extender import sample
from agent.extender.admission import MAX_REVIEW_BYTES, KnownBitstreams, validator
from agent.extender.cache import RequestNodes
from agent.extender.claimtemplates import ClaimTemplates
from agent.extender.demand import PodDemand
from agent.extender.drapods import dra_demand
from agent.extender.drascoring import prioritize_dra
from agent.extender.http import FastRoute, HttpServer, Reply, json_error, start_server
from agent.extender.metrics import LATENCY_BUCKETS_S, METRICS_PATH, ExtenderMetrics
from agent.extender.ranking import ANSWER_LIMIT, ChangeLog, ScoreBoard, best_ranked, distinct, packing_for, ranks_of
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
VALIDATE_PATH = "/validate"
JSON = "application/json"

Route = Callable[[bytes], Reply]


class NodeSource(ChangeLog, Protocol):
    """Where names are looked up (the node cache), and its changes followed (for the score tables)."""

    def lookup(self) -> NodeLookup: ...
    @property
    def synced(self) -> bool: ...


class Extender:
    """The request handlers, over a node source and the score weights: body in, answer out, no I/O."""

    def __init__(
        self,
        nodes: NodeSource,
        weights: ScoreWeights,
        *,
        clock: Callable[[], float] = time.time,
        answer_limit: int = ANSWER_LIMIT,
        templates: ClaimTemplates | None = None,
    ) -> None:
        self.nodes = nodes
        self.weights = weights
        self._clock = clock
        self._request_nodes = RequestNodes()
        self._board = ScoreBoard(weights, limit=answer_limit)
        #: The ResourceClaimTemplates that DRA pods name (fed by a watch; empty: every DRA pod scores neutrally
        #: unless annotated).
        self.templates = templates if templates is not None else ClaimTemplates()

    def prepare(self) -> None:
        """After a list of every node: what the calls answer from is made current now, not inside the next
        scheduling call (which kube-scheduler waits for)."""
        self._board.prepare(self.nodes, self._clock())

    def _demand(self, request: SchedulingRequest) -> PodDemand:
        """The pod's demand: a DRA pod's from its claims' templates, any other's from its containers."""
        if request.dra is None:
            return request.demand
        return dra_demand(request.dra, self.templates.lookup())

    def _lookup(self, request: SchedulingRequest) -> NodeLookup:
        if request.node_names is not None:
            return self.nodes.lookup()
        return self._request_nodes.index(request.nodes or ()).get

    def filter(self, body: bytes) -> Reply:
        try:
            request = parse_extender_args(body)
        except ExtenderRequestError as exc:
            return Reply(400, JSON, encode(filter_error(str(exc))))
        demand = self._demand(request)
        outcome = filter_nodes(demand, request.names, self._lookup(request))
        if outcome.failed:
            logger.debug("filter for pod %s: %d of %d nodes fail", demand.pod, len(outcome.failed), len(request.names))
        return Reply(200, JSON, encode(filter_result(request, outcome)))

    def fast_path(self, max_body_bytes: int) -> sample.FastPath | None:
        """The compiled fast path for the common prioritize call (``agent.extender.fastpath``), armed by this
        extender's answers; None where the compiled reader is not built or the answer limit is beyond it."""
        if not sample.COMPILED or not 0 < self._board.limit <= sample.MAX_LIMIT:
            return None
        engine = sample.FastPath(PRIORITIZE_PATH, self._clock, self._board.limit, max_body_bytes, LATENCY_BUCKETS_S)
        self._board.use_fast_path(engine)
        return engine

    def nodes_changed(self) -> None:
        """After a node event (the node watch's): what the calls answer from follows it now, the fast path with it
        (``ScoreBoard.follow_nodes``), not in the next scheduling call. A failure leaves it to the next call."""
        try:
            self._board.follow_nodes(self.nodes, self._clock())
        except Exception:
            self._board.disarm_fast_path()
            logger.exception("extender: following a node event failed; the next call follows it")

    def prioritize(self, body: bytes) -> Reply:
        self._board.disarm_fast_path()
        now = self._clock()
        # the common pod (one slot of one bitstream), answered from the body's bytes
        answer = self._board.prioritize_body(self.nodes, body, now)
        if answer is not None:
            return Reply(200, JSON, answer, after=self._board.after_answer)
        try:
            request = parse_extender_args(body)
        except ExtenderRequestError as exc:
            return json_error(400, str(exc))
        demand = self._demand(request)
        if request.node_names is not None:
            scores = self._board.prioritize(self.nodes, demand, request.node_names, self.nodes.lookup(), now)
        else:
            lookup = self._lookup(request)
            names = distinct(request.names)
            if demand.dra is not None:
                scores = prioritize_dra(demand, names, lookup, self.weights, now)
            else:
                scores = prioritize_nodes(demand, names, lookup, self.weights, now)
            ranks = ranks_of(scores, packing_for(demand, lookup))
            scores = best_ranked(names, ranks, self._board.limit, pack_ties=demand.dra is not None)
        return Reply(200, JSON, encode_priorities(scores), after=functools.partial(_answered, self._board, request))

    @property
    def popularity_changes(self) -> int:
        """Changes of the bitstream popularity found so far in the pods scored (``agent.extender.facts``)."""
        return self._board.facts.changes

    def healthz(self, _body: bytes) -> Reply:
        if self.nodes.synced:
            return Reply(200, "text/plain; charset=utf-8", b"ok\n")
        return Reply(503, "text/plain; charset=utf-8", b"node cache not synced yet\n")


def _answered(board: ScoreBoard, _request: SchedulingRequest) -> None:
    """Once the answer is written: the promise it made is recorded, and the request (its 500 names, the pod)
    is released with this call, not before the answer."""
    board.after_answer()


class ExtenderApp:
    """The routes (method, path) -> handler, with metrics for the scheduler's verbs; a bug is a 500."""

    def __init__(
        self,
        routes: dict[tuple[str, str], Route],
        metrics: ExtenderMetrics | None,
        max_body_bytes: int,
        fast: sample.FastPath | None = None,
    ):
        self.routes = routes
        self.max_body_bytes = max_body_bytes
        self._metrics = metrics
        #: Prioritize calls answered before the HTTP parser (``agent.extender.fastpath``), or None.
        self.fast: FastRoute | None = None
        if fast is not None:
            self.fast = fast.serve
            if metrics is not None:
                metrics.count_fast_answers(PRIORITIZE_PATH, lambda: fast.latency)
        self._methods: dict[str, list[str]] = {}
        for method, path in routes:
            self._methods.setdefault(path, []).append(method)

    def handle(self, method: str, path: str, content_type: str, body: bytes) -> Reply:
        route = self.routes.get((method, path))
        if route is None:
            allowed = self._methods.get(path)
            if allowed is None:
                return json_error(404, f"404 Not Found: {method} {shown(path)}")
            reply = json_error(405, f"405 Method Not Allowed: {method} {shown(path)}")
            return reply._replace(allow=", ".join(sorted(allowed)))
        if method == "POST" and content_type not in ("", JSON) and content_type.split(";", 1)[0].strip() != JSON:
            return json_error(415, f"415 Unsupported Media Type: the body must be {JSON}, got {shown(content_type)}")
        started = time.perf_counter()
        try:
            reply = route(body)
        except Exception as exc:
            logger.exception("extender: %s %s failed", method, path)
            reply = json_error(500, f"internal error ({type(exc).__name__})")
        if self._metrics is not None:  # a few counters: cheaper here than a closure to run after the answer
            self._metrics.observe(path, reply.status, time.perf_counter() - started)
        return reply


def build_app(
    extender: Extender, *, max_body_bytes: int = MAX_BODY_BYTES, metrics: ExtenderMetrics | None = None
) -> ExtenderApp:
    """The extender's routes; with ``metrics``, the scheduler's calls are counted and timed and ``/metrics`` served."""
    routes: dict[tuple[str, str], Route] = {
        ("POST", FILTER_PATH): extender.filter,
        ("POST", PRIORITIZE_PATH): extender.prioritize,
        ("GET", HEALTH_PATH): extender.healthz,
    }
    if metrics is not None:
        routes["GET", METRICS_PATH] = metrics.serve
        metrics.count_popularity_changes(lambda: extender.popularity_changes)
    engine = extender.fast_path(max_body_bytes)
    return ExtenderApp(routes, metrics, max_body_bytes, engine)


def build_probe_app(extender: Extender, metrics: ExtenderMetrics | None) -> ExtenderApp:
    """The probe port's routes: ``GET /healthz`` (and ``GET /metrics`` with ``metrics``), nothing that scores."""
    routes: dict[tuple[str, str], Route] = {("GET", HEALTH_PATH): extender.healthz}
    if metrics is not None:
        routes["GET", METRICS_PATH] = metrics.serve
    return ExtenderApp(routes, None, max_body_bytes=0)


def build_webhook_app(known: KnownBitstreams) -> ExtenderApp:
    """The admission webhook's routes: ``POST /validate`` alone (``agent.extender.admission``)."""
    validate = validator(known)

    def route(body: bytes) -> Reply:
        status, answer = validate(body)
        return Reply(status, JSON, answer)

    return ExtenderApp({("POST", VALIDATE_PATH): route}, None, MAX_REVIEW_BYTES)


def extender_metrics() -> ExtenderMetrics:
    """Metrics labelled by the verbs kube-scheduler calls."""
    return ExtenderMetrics({FILTER_PATH: "filter", PRIORITIZE_PATH: "prioritize"})


async def start(app: ExtenderApp, host: str, port: int, tls: ssl.SSLContext | None = None) -> HttpServer:
    """Bind and serve ``app``; the caller ends it with ``await server.cleanup()``. Port 0 picks a free port."""
    server = await start_server(app.handle, host, port, app.max_body_bytes, tls, app.fast)
    scheme = "http" if tls is None else "https" + (" (client certificates required)" if _requires_client(tls) else "")
    where = ", ".join(_address(a) for a in server.addresses)
    path = "compiled fast path" if app.fast is not None else "no compiled fast path"
    logger.info("scheduler extender listening on %s, %s, %s, %s event loop", where, scheme, path, _loop_name())
    return server


async def start_webhook(app: ExtenderApp, host: str, port: int, tls: ssl.SSLContext) -> HttpServer:
    """Bind and serve the admission webhook (HTTPS, no client certificate asked: the API server shows none)."""
    server = await start_server(app.handle, host, port, app.max_body_bytes, tls)
    where = ", ".join(_address(a) for a in server.addresses)
    logger.info("admission webhook listening on %s, https: %s", where, VALIDATE_PATH)
    return server


async def start_probe(app: ExtenderApp, host: str, port: int) -> HttpServer:
    """Bind and serve the probe port (plain HTTP); the caller ends it with ``await server.cleanup()``."""
    server = await start_server(app.handle, host, port, app.max_body_bytes)
    where = ", ".join(_address(a) for a in server.addresses)
    logger.info("extender probe endpoint on %s, http: %s", where, ", ".join(sorted(path for _m, path in app.routes)))
    return server


def _loop_name() -> str:
    """``uvloop`` or ``asyncio``: the event loop serving (``fpga-agent extender --event-loop``)."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


def _requires_client(tls: ssl.SSLContext) -> bool:
    return tls.verify_mode == ssl.CERT_REQUIRED


async def serve(app: ExtenderApp, host: str, port: int, stop: asyncio.Event, tls: ssl.SSLContext | None = None) -> None:
    """Serve ``app`` on ``host:port`` until ``stop`` is set; connections are closed on the way out."""
    server = await start(app, host, port, tls)
    try:
        await stop.wait()
    finally:
        await server.cleanup()


def bound_port(server: HttpServer) -> int:
    """The TCP port the server listens on (the one the kernel chose for port 0)."""
    return int(server.addresses[0][1])


def _address(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"

"""The extender's HTTP servers (aiohttp): the scheduler's port, the probe port, the webhook apart.

Errors are answered with a JSON ``Error``. The admission webhook has its own thread and event loop, so
that a large review never holds up a scheduling call. See docs/scoring.md."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from agent.errors import ExtenderRequestError, shown
from agent.extender.admission import MAX_REVIEW_BYTES, validator
from agent.extender.claimtemplates import ClaimTemplates
from agent.extender.metrics import METRICS_PATH, ExtenderMetrics
from agent.extender.ranking import ANSWER_LIMIT, Scorer
from agent.extender.scoring import ScoreWeights, filter_nodes
from agent.extender.table import StateTable
from agent.extender.wire import (
    encode,
    encode_priorities,
    filter_error,
    filter_result,
    parse_extender_args,
)

logger = logging.getLogger(__name__)

#: Largest request body accepted: 500 full Node objects are about 580 kB; 5000 fit too.
MAX_BODY_BYTES = 16 * 1024 * 1024
#: A request body must arrive whole within this time (408 after it).
REQUEST_TIMEOUT_S = 10.0
FILTER_PATH = "/filter"
PRIORITIZE_PATH = "/prioritize"
HEALTH_PATH = "/healthz"
VALIDATE_PATH = "/validate"
JSON = "application/json"

Answer = tuple[int, bytes]


class Extender:
    """The scheduler's calls over the state table: body in, answer out, no I/O."""

    def __init__(
        self,
        table: StateTable,
        weights: ScoreWeights,
        *,
        clock: Callable[[], float] = time.time,
        answer_limit: int = ANSWER_LIMIT,
        templates: ClaimTemplates | None = None,
    ) -> None:
        self.table = table
        self.scorer = Scorer(weights, answer_limit)
        self._clock = clock
        #: The ResourceClaimTemplates that DRA pods name (fed by a watch).
        self.templates = templates if templates is not None else ClaimTemplates()

    def filter(self, body: bytes) -> Answer:
        try:
            request = parse_extender_args(body, self.templates.get)
        except ExtenderRequestError as exc:
            return 400, encode(filter_error(str(exc)))
        outcome = filter_nodes(request.demand, request.names, self.table.nodes.get)
        return 200, encode(filter_result(request, outcome))

    def prioritize(self, body: bytes) -> Answer:
        try:
            request = parse_extender_args(body, self.templates.get)
        except ExtenderRequestError as exc:
            return 400, error_body(str(exc))
        answer = self.scorer.prioritize(self.table, request.demand, request.names, self._clock())
        return 200, encode_priorities(answer)


def error_body(message: str) -> bytes:
    return json.dumps({"Error": message}).encode()


def _json_error(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=error_body(message), content_type=JSON)


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """aiohttp's own refusals (404, 405, 413) as JSON ``Error`` bodies, as the handlers answer."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        reply = _json_error(exc.status, f"{exc.status} {exc.reason}: {request.method} {shown(request.path)}")
        if isinstance(exc, web.HTTPMethodNotAllowed):
            reply.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        return reply


def _post(
    route: Callable[[bytes], Answer], path: str, metrics: ExtenderMetrics | None, max_body_bytes: int
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        content_type = request.headers.get("Content-Type", "")
        if content_type and content_type.split(";", 1)[0].strip() != JSON:
            return _json_error(415, f"415 Unsupported Media Type: the body must be {JSON}, got {shown(content_type)}")
        if request.content_length is not None and request.content_length > max_body_bytes:
            refused = _json_error(413, f"the body is larger than {max_body_bytes} bytes")  # said before it is sent
            refused.force_close()
            return refused
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                body = await request.read()
        except TimeoutError:
            return _json_error(408, f"408 Request Timeout: the body did not arrive within {REQUEST_TIMEOUT_S:g} s")
        except web.HTTPRequestEntityTooLarge:
            return _json_error(413, f"the body is larger than {max_body_bytes} bytes")
        started = time.perf_counter()
        try:
            status, answer = route(body)
        except Exception as exc:
            logger.exception("extender: POST %s failed", path)
            status, answer = 500, error_body(f"internal error ({type(exc).__name__})")
        if metrics is not None:
            metrics.observe(path, status, time.perf_counter() - started)
        return web.Response(status=status, body=answer, content_type=JSON)

    return handle


def _probes(app: web.Application, extender: Extender, metrics: ExtenderMetrics | None) -> None:
    async def healthz(_request: web.Request) -> web.Response:
        if extender.table.synced:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="node state not synced yet\n")

    app.router.add_get(HEALTH_PATH, healthz, allow_head=False)
    if metrics is not None:

        async def scrape(_request: web.Request) -> web.Response:
            response = web.Response(body=metrics.render())
            response.headers["Content-Type"] = CONTENT_TYPE_LATEST
            return response

        app.router.add_get(METRICS_PATH, scrape, allow_head=False)


def build_app(
    extender: Extender, *, max_body_bytes: int = MAX_BODY_BYTES, metrics: ExtenderMetrics | None = None
) -> web.Application:
    """The scheduler's port; with ``metrics``, its calls are counted and timed and ``/metrics`` served."""
    app = web.Application(client_max_size=max_body_bytes, middlewares=[_errors])
    app.router.add_post(FILTER_PATH, _post(extender.filter, FILTER_PATH, metrics, max_body_bytes))
    app.router.add_post(PRIORITIZE_PATH, _post(extender.prioritize, PRIORITIZE_PATH, metrics, max_body_bytes))
    _probes(app, extender, metrics)
    return app


def build_probe_app(extender: Extender, metrics: ExtenderMetrics | None) -> web.Application:
    """The probe port: ``GET /healthz`` (and ``GET /metrics``), nothing that scores."""
    app = web.Application(client_max_size=1024, middlewares=[_errors])
    _probes(app, extender, metrics)
    return app


def build_webhook_app(known: StateTable) -> web.Application:
    """The admission webhook: ``POST /validate`` alone (``agent.extender.admission``)."""
    app = web.Application(client_max_size=MAX_REVIEW_BYTES, middlewares=[_errors])
    app.router.add_post(VALIDATE_PATH, _post(validator(known), VALIDATE_PATH, None, MAX_REVIEW_BYTES))
    return app


def extender_metrics() -> ExtenderMetrics:
    """Metrics labelled by the verbs kube-scheduler calls."""
    return ExtenderMetrics({FILTER_PATH: "filter", PRIORITIZE_PATH: "prioritize"})


async def start_server(app: web.Application, host: str, port: int, tls: ssl.SSLContext | None = None) -> web.AppRunner:
    """Bind and serve ``app`` (port 0: a free port); ``await cleanup()`` closes it and its connections."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=tls, reuse_address=True).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def start(app: web.Application, host: str, port: int, tls: ssl.SSLContext | None = None) -> web.AppRunner:
    """The scheduler's port."""
    server = await start_server(app, host, port, tls)
    clients = tls is not None and tls.verify_mode == ssl.CERT_REQUIRED
    scheme = "http" if tls is None else "https" + (" (client certificates required)" if clients else "")
    loop = "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
    logger.info("scheduler extender listening on %s, %s, %s event loop", _where(server), scheme, loop)
    return server


async def start_probe(app: web.Application, host: str, port: int) -> web.AppRunner:
    """The probe port (plain HTTP)."""
    server = await start_server(app, host, port)
    logger.info("extender probe endpoint on %s, http: %s, %s", _where(server), HEALTH_PATH, METRICS_PATH)
    return server


class WebhookServer:
    """The admission webhook on a thread of its own with its own event loop; ``await cleanup()`` stops it."""

    def __init__(self, app: web.Application, host: str, port: int, tls: ssl.SSLContext) -> None:
        self._args = (app, host, port, tls)
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.addresses: list[Any] = []
        self._thread = threading.Thread(target=self._run, name="admission-webhook", daemon=True)

    async def start(self) -> WebhookServer:
        self._thread.start()
        await asyncio.to_thread(self._started.wait)
        if self._failure is not None:
            await asyncio.to_thread(self._thread.join)
            raise self._failure
        return self

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            server = await start_server(*self._args)
        except BaseException as exc:
            self._failure = exc
            self._started.set()
            return
        self.addresses = server.addresses
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            await server.cleanup()

    async def cleanup(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        await asyncio.to_thread(self._thread.join)


async def start_webhook(app: web.Application, host: str, port: int, tls: ssl.SSLContext) -> WebhookServer:
    """The admission webhook (HTTPS, no client certificate asked), on its own thread."""
    server = await WebhookServer(app, host, port, tls).start()
    logger.info("admission webhook listening on %s, https: %s (own thread)", _where(server), VALIDATE_PATH)
    return server


def bound_port(server: web.AppRunner | WebhookServer) -> int:
    """The TCP port the server listens on (the one the kernel chose for port 0)."""
    return int(server.addresses[0][1])


def _where(server: web.AppRunner | WebhookServer) -> str:
    return ", ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p, *_ in server.addresses)

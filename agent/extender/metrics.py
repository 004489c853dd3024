"""Prometheus metrics of the extender: requests and latency by verb, served as ``/metrics``.

The latency is what the handler takes, from the request's arrival to its answer;
kube-scheduler waits for exactly this inside its scheduling cycle.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The extender answers in about a millisecond at 500 names, tens of ms at 5000.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5)
METRICS_PATH = "/metrics"


class ExtenderMetrics:
    """The extender's metrics on their own registry."""

    def __init__(self, verbs: dict[str, str]) -> None:
        """``verbs`` maps request paths to the verb label (``/filter`` -> ``filter``)."""
        self._verbs = verbs
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "fpga_slot_extender_requests",
            "Extender requests by verb and HTTP status code",
            ["verb", "code"],
            registry=self.registry,
        )
        self.seconds = Histogram(
            "fpga_slot_extender_request_duration_seconds",
            "Time the extender took to answer, by verb",
            ["verb"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        verb = self._verbs.get(request.path)
        if verb is None:
            return await handler(request)
        started = time.perf_counter()
        code = 500
        try:
            response = await handler(request)
            code = response.status
            return response
        finally:
            self.seconds.labels(verb=verb).observe(time.perf_counter() - started)
            self.requests.labels(verb=verb, code=str(code)).inc()

    async def serve(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

"""Prometheus metrics of the node agent (``/metrics`` on the health address); slot gauges are read at scrape
time."""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import grpc
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from agent.slots.registry import SlotRegistry

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")

#: Reconfiguration times span a few ms (small PR regions) to tens of seconds (full devices).
RECONFIGURE_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
#: Device-plugin RPCs answer in well under a millisecond; PreStartContainer may program.
RPC_BUCKETS_S = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1.0, 5.0, 30.0)


class _SlotCollector(Collector):
    def __init__(self, slots: SlotRegistry, registrations: Callable[[], int]) -> None:
        self._slots = slots
        self._registrations = registrations

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        tally: Tally[tuple[str, str]] = Tally()
        loaded = 0
        for state in self._slots.snapshot():
            tally[(state.health.value, "held" if state.holder is not None else "free")] += 1
            loaded += state.accelerator_id is not None
        slots = GaugeMetricFamily(
            "fpga_slot_slots", "Slots on this node by health and state", labels=["health", "state"]
        )
        for health in ("Healthy", "Unhealthy"):
            for kind in ("free", "held"):
                slots.add_metric([health, kind], tally[(health, kind)])
        yield slots
        yield GaugeMetricFamily("fpga_slot_slots_loaded", "Slots that hold a known accelerator", value=loaded)
        yield CounterMetricFamily(
            "fpga_slot_kubelet_registrations", "Successful registrations with the kubelet", value=self._registrations()
        )


class AgentMetrics:
    """The agent's metrics and the registry they are served from."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reconfigurations = Counter(
            "fpga_slot_reconfigurations",
            "Slot reconfigurations by result (programmed, failed, timeout)",
            ["result"],
            registry=self.registry,
        )
        self.reconfiguration_seconds = Histogram(
            "fpga_slot_reconfiguration_seconds",
            "Time the hardware took to reconfigure a slot",
            buckets=RECONFIGURE_BUCKETS_S,
            registry=self.registry,
        )
        self.cache_lookups = Counter(
            "fpga_slot_cache_lookups",
            "PreStartContainer slot lookups: hit (already loaded) or miss (programmed)",
            ["result"],
            registry=self.registry,
        )
        self.bitstream_pulls = Counter(
            "fpga_slot_bitstream_pulls",
            "Pulls of cluster-declared bitstreams by result (pulled, or why not: unreachable, auth, not_found, "
            "format, hash_mismatch, platform_mismatch, cache_full, storage, conflict, failed)",
            ["result"],
            registry=self.registry,
        )
        self.bitstream_pulled_bytes = Counter(
            "fpga_slot_bitstream_pulled_bytes",
            "Bytes of cluster-declared bitstreams pulled into the node catalog",
            registry=self.registry,
        )
        self.rpc_seconds = Histogram(
            "fpga_slot_rpc_duration_seconds",
            "Device-plugin RPC latency by method, as served",
            ["method"],
            buckets=RPC_BUCKETS_S,
            registry=self.registry,
        )

    def watch_slots(self, slots: SlotRegistry, registrations: Callable[[], int]) -> None:
        """Report slot gauges and the registration count from the live objects at scrape time."""
        self.registry.register(_SlotCollector(slots, registrations))


class RpcTimer(grpc.aio.ServerInterceptor):
    """Times every unary RPC of the device-plugin server (ListAndWatch streams are not timed)."""

    def __init__(self, metrics: AgentMetrics) -> None:
        self._metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[_Req, _Resp] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[_Req, _Resp] | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = handler_call_details.method.rsplit("/", 1)[-1]
        inner = handler.unary_unary
        histogram = self._metrics.rpc_seconds.labels(method=method)

        async def timed(request: Any, context: Any) -> Any:
            started = time.perf_counter()
            try:
                return await inner(request, context)  # type: ignore[misc]  # aio handlers are coroutines
            finally:
                histogram.observe(time.perf_counter() - started)

        return grpc.unary_unary_rpc_method_handler(
            timed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def metrics_route(registry: CollectorRegistry) -> web.RouteDef:
    """``GET /metrics`` in the Prometheus text format, for the agent's HTTP endpoint."""

    async def serve(request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return web.get("/metrics", serve)

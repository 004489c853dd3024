"""Prometheus metrics of the extender: requests and latency by verb, served as ``/metrics``.

The latency is what the handler takes, from the request's arrival to its answer;
kube-scheduler waits for exactly this inside its scheduling cycle. Beside them, how
often the bitstream popularity was found to change (``agent.extender.facts``: each time
the request shares started afresh), read from the extender when scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.extender.http import Reply

#: The extender answers in about a millisecond at 500 names, tens of ms at 5000.
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5)
METRICS_PATH = "/metrics"


class ExtenderMetrics:
    """The extender's metrics on their own registry."""

    def __init__(self, verbs: dict[str, str]) -> None:
        """``verbs`` maps request paths to the verb label (``/filter`` -> ``filter``)."""
        self._verbs = verbs
        self._children: dict[tuple[str, int], tuple[Any, Any]] = {}
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

    def count_popularity_changes(self, read: Callable[[], int]) -> None:
        """Serve ``read()`` (changes of the bitstream popularity found so far) as a counter."""
        self.registry.register(_PopularityChanges(read))

    def observe(self, path: str, code: int, seconds: float) -> None:
        """One answered request (counted only for the scheduler's verbs)."""
        children = self._children.get((path, code))
        if children is None:
            verb = self._verbs.get(path)
            if verb is None:
                return
            # looked up once per verb and code: labels() validates and locks on every call
            children = self._children[path, code] = (
                self.seconds.labels(verb=verb),
                self.requests.labels(verb=verb, code=str(code)),
            )
        latency, requests = children
        latency.observe(seconds)
        requests.inc()

    def serve(self, _body: bytes) -> Reply:
        return Reply(200, CONTENT_TYPE_LATEST, generate_latest(self.registry))


class _PopularityChanges(Collector):
    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "fpga_slot_extender_popularity_changes",
            "Changes of the bitstream popularity found in the pods scored (the request shares started afresh)",
            value=self._read(),
        )

"""Prometheus metrics of the extender: requests and latency (arrival to answer) by verb, on ``/metrics``."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5)
METRICS_PATH = "/metrics"
#: The buckets' ``le`` labels, the last one past every bound.
_BOUNDS = [*(str(bound) for bound in LATENCY_BUCKETS_S), "+Inf"]


class ExtenderMetrics(Collector):
    """The extender's metrics on their own registry, made into Prometheus families only when scraped. Loop-only."""

    def __init__(self, verbs: dict[str, str]) -> None:
        """``verbs`` maps request paths to the verb label (``/filter`` -> ``filter``)."""
        self._verbs = verbs
        #: (verb, code) -> requests answered (a handful of codes per verb).
        self.answered: dict[tuple[str, int], int] = {}
        #: Verb -> requests per latency bucket (the last one past every bound).
        self.buckets: dict[str, list[int]] = {}
        #: Verb -> seconds taken in all.
        self.seconds: dict[str, float] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(self)

    def observe(self, path: str, code: int, seconds: float) -> None:
        """One answered request (counted only for the scheduler's verbs)."""
        verb = self._verbs.get(path)
        if verb is None:
            return
        key = (verb, code)
        self.answered[key] = self.answered.get(key, 0) + 1
        counts = self.buckets.get(verb)
        if counts is None:
            counts = self.buckets[verb] = [0] * (len(LATENCY_BUCKETS_S) + 1)
        counts[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1  # a bound is the largest value its bucket holds
        self.seconds[verb] = self.seconds.get(verb, 0.0) + seconds

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        """The requests and their latency by verb, as counted so far."""
        requests = CounterMetricFamily(
            "fpga_slot_extender_requests", "Extender requests by verb and HTTP status code", labels=["verb", "code"]
        )
        for (verb, code), count in sorted(self.answered.items()):
            requests.add_metric([verb, str(code)], count)
        yield requests
        seconds = HistogramMetricFamily(
            "fpga_slot_extender_request_duration_seconds", "Time the extender took to answer, by verb", labels=["verb"]
        )
        for verb, counts in sorted(self.buckets.items()):
            cumulative = list(accumulate(counts))
            seconds.add_metric([verb], list(zip(_BOUNDS, cumulative, strict=True)), self.seconds[verb])
        yield seconds

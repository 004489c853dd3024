"""Prometheus metrics of the extender: requests and latency by verb, served as ``/metrics``.

The latency is what the handler takes, from the request's arrival to its answer;
kube-scheduler waits for exactly this inside its scheduling cycle. How many prioritize
requests the compiled fast path answered is counted apart too: a cluster whose nodes
change state between most calls leaves more of them to Python. Beside them, how
often the bitstream popularity was found to change (``agent.extender.facts``: each time
the request shares started afresh), read from the extender when scraped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.extender.http import Reply

#: The extender answers in about a millisecond at 500 names, tens of ms at 5000.
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5)
METRICS_PATH = "/metrics"
#: The compiled fast path's count: (answers, seconds in all, answers per bucket, the last past every bound).
FastLatency = tuple[int, float, tuple[int, ...]]
#: The buckets' ``le`` labels, the last one past every bound.
_BOUNDS = [*(str(bound) for bound in LATENCY_BUCKETS_S), "+Inf"]


class ExtenderMetrics:
    """The extender's metrics on their own registry.

    A scheduler call is counted with a few integer additions on plain tables, turned into
    Prometheus families only when scraped (:class:`_Requests`): a labelled
    ``prometheus_client`` histogram and counter take a lock and find the bucket in Python on
    every observation (1.1 us per call for the two, against 0.3 us here). The event loop
    that answers the calls also serves the scrapes, so the tables need no lock.
    """

    def __init__(self, verbs: dict[str, str]) -> None:
        """``verbs`` maps request paths to the verb label (``/filter`` -> ``filter``)."""
        self._verbs = verbs
        #: (verb, code) -> requests answered.
        self.answered: dict[tuple[str, int], int] = {}
        #: Verb -> requests per latency bucket (the last one past every bound).
        self.buckets: dict[str, list[int]] = {}
        #: Verb -> seconds taken in all.
        self.seconds: dict[str, float] = {}
        #: The compiled fast path's own count (``count_fast_answers``): its verb, and how to read it.
        self._fast: tuple[str, Callable[[], FastLatency]] | None = None
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_Requests(self))

    def count_fast_answers(self, path: str, read: Callable[[], FastLatency]) -> None:
        """Add the requests to ``path`` that the compiled fast path answered (``agent.extender.fastpath``), which
        counts them itself (``read()``: answers, seconds in all, answers per bucket of ``LATENCY_BUCKETS_S``),
        to the requests and latency of its verb, answered 200, when scraped; and serve their count apart."""
        self._fast = (self._verbs[path], read)

    def counted(self) -> tuple[dict[tuple[str, int], int], dict[str, list[int]], dict[str, float], int]:
        """The requests, the buckets and the seconds by verb, the fast path's answers added in (read once), and
        how many it answered."""
        answered, seconds = dict(self.answered), dict(self.seconds)
        buckets = {verb: list(counts) for verb, counts in self.buckets.items()}
        if self._fast is None:
            return answered, buckets, seconds, 0
        verb, read = self._fast
        count, spent, counts = read()
        if count:
            answered[verb, 200] = answered.get((verb, 200), 0) + count
            mine = buckets.get(verb, [0] * len(counts))
            buckets[verb] = [a + b for a, b in zip(mine, counts, strict=True)]
            seconds[verb] = seconds.get(verb, 0.0) + spent
        return answered, buckets, seconds, count

    def count_popularity_changes(self, read: Callable[[], int]) -> None:
        """Serve ``read()`` (changes of the bitstream popularity found so far) as a counter."""
        self.registry.register(_PopularityChanges(read))

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

    def serve(self, _body: bytes) -> Reply:
        return Reply(200, CONTENT_TYPE_LATEST, generate_latest(self.registry))


class _Requests(Collector):
    """The requests and their latency by verb, as counted by :class:`ExtenderMetrics`."""

    def __init__(self, metrics: ExtenderMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "fpga_slot_extender_requests", "Extender requests by verb and HTTP status code", labels=["verb", "code"]
        )
        answered, buckets, spent, fast = self._metrics.counted()
        for (verb, code), count in sorted(answered.items()):
            requests.add_metric([verb, str(code)], count)
        yield requests
        seconds = HistogramMetricFamily(
            "fpga_slot_extender_request_duration_seconds", "Time the extender took to answer, by verb", labels=["verb"]
        )
        for verb, counts in sorted(buckets.items()):
            cumulative = list(accumulate(counts))
            seconds.add_metric([verb], list(zip(_BOUNDS, cumulative, strict=True)), spent[verb])
        yield seconds
        yield CounterMetricFamily(
            "fpga_slot_extender_fast_path_answers",
            "Prioritize requests answered by the compiled fast path, without Python (counted in the requests too)",
            value=fast,
        )


class _PopularityChanges(Collector):
    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "fpga_slot_extender_popularity_changes",
            "Changes of the bitstream popularity found in the pods scored (the request shares started afresh)",
            value=self._read(),
        )

"""Workloads for the cluster simulation: a cluster shape and a deterministic pod sequence.

A :class:`Shape` is one point of the workload space: the cluster (nodes, slots per
node, possibly of mixed sizes), the catalog (bitstreams, their Zipf popularity and
sizes), the offered load, how many pods ask for several slots, and how pods arrive:
one by one (Poisson), in bursts (a batch of pods of one job, same bitstream, arriving
together, as a Deployment scaled up or a batch job started), and with popularity that
drifts (every ``drift_s`` seconds the Zipf ranks are dealt out again, as the work of a
cluster changes during a day).
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pod:
    index: int
    arrival: float
    bitstream: int
    slots: int
    duration: float


@dataclass(frozen=True, slots=True)
class Shape:
    """One workload point; ``slots`` is cycled over the nodes (``(2, 4, 8)``: mixed node sizes)."""

    nodes: int = 100
    slots: tuple[int, ...] = (4,)
    bitstreams: int = 40
    zipf: float = 1.1
    load: float = 0.7
    #: Share of pods that ask for more than one slot; those ask 2..max_slots, uniformly.
    multi_share: float = 0.3
    max_slots: int = 2
    #: Mean pods per arrival (1: Poisson one by one; more: bursts of one job, geometric sizes).
    burst: float = 1.0
    #: Every this many seconds the popularity ranks are dealt out again (0: never).
    drift_s: float = 0.0
    pods: int = 20000
    mean_duration_s: float = 300.0
    size_min_mb: float = 20.0
    size_max_mb: float = 80.0
    bandwidth_mb_s: float = 100.0

    @property
    def total_slots(self) -> int:
        return sum(self.node_sizes())

    def node_sizes(self) -> list[int]:
        return [self.slots[n % len(self.slots)] for n in range(self.nodes)]

    def describe(self) -> str:
        sizes = "/".join(str(s) for s in self.slots)
        multi = f"{self.multi_share:.0%} x 2" + (f"-{self.max_slots}" if self.max_slots > 2 else "")
        arrival = "poisson" if self.burst <= 1 else f"bursts~{self.burst:g}"
        if self.drift_s:
            arrival += f", drift {self.drift_s:.0f}s"
        return f"{self.nodes}x{sizes} {self.bitstreams}bs z{self.zipf:g} load {self.load:g} multi {multi} {arrival}"


@dataclass(frozen=True, slots=True)
class Workload:
    shape: Shape
    pods: list[Pod]
    sizes_mb: list[float]
    #: Per bitstream: sorted arrival times of the pods asking for it, and their slot counts (for the oracle).
    uses: list[list[float]]
    use_slots: list[list[int]]
    #: The popularity law itself, as (from this time on, each bitstream's chance per arrival), in time
    #: order: what an online policy could at best learn, for ``bench.sim.informed``.
    popularity: list[tuple[float, list[float]]]

    def chances(self, now: float) -> list[float]:
        """Each bitstream's chance that an arrival at ``now`` asks for it."""
        index = bisect.bisect_right(self.popularity, now, key=lambda epoch: epoch[0]) - 1
        return self.popularity[max(0, index)][1]


def zipf_weights(n: int, s: float) -> list[float]:
    raw = [1.0 / (rank**s) for rank in range(1, n + 1)]
    total = sum(raw)
    return [w / total for w in raw]


def make_workload(shape: Shape, seed: int) -> Workload:
    rng = random.Random(seed)
    weights = zipf_weights(shape.bitstreams, shape.zipf)
    ranks = list(range(shape.bitstreams))  # ranks[r] = the bitstream holding popularity rank r
    multi_mean = (2 + shape.max_slots) / 2
    mean_slots = 1 + shape.multi_share * (multi_mean - 1)
    pod_rate = shape.load * shape.total_slots / (mean_slots * shape.mean_duration_s)
    batch_rate = pod_rate / max(1.0, shape.burst)
    sizes = [rng.uniform(shape.size_min_mb, shape.size_max_mb) for _ in range(shape.bitstreams)]
    uses: list[list[float]] = [[] for _ in range(shape.bitstreams)]
    use_slots: list[list[int]] = [[] for _ in range(shape.bitstreams)]
    pods: list[Pod] = []
    now, next_drift = 0.0, shape.drift_s or float("inf")
    popularity = [(0.0, _chances(ranks, weights))]
    while len(pods) < shape.pods:
        now += rng.expovariate(batch_rate)
        while now >= next_drift:
            rng.shuffle(ranks)
            popularity.append((next_drift, _chances(ranks, weights)))
            next_drift += shape.drift_s
        bitstream = ranks[rng.choices(range(shape.bitstreams), weights)[0]]
        slots = rng.randint(2, shape.max_slots) if rng.random() < shape.multi_share else 1
        batch = 1 if shape.burst <= 1 else _geometric(rng, shape.burst)
        for _ in range(min(batch, shape.pods - len(pods))):
            pods.append(Pod(len(pods), now, bitstream, slots, rng.expovariate(1 / shape.mean_duration_s)))
            uses[bitstream].append(now)
            use_slots[bitstream].append(slots)
    return Workload(shape, pods, sizes, uses, use_slots, popularity)


def _chances(ranks: list[int], weights: list[float]) -> list[float]:
    chances = [0.0] * len(ranks)
    for rank, bitstream in enumerate(ranks):
        chances[bitstream] = weights[rank]
    return chances


def _geometric(rng: random.Random, mean: float) -> int:
    """1, 2, ... with the given mean."""
    p = 1.0 / mean
    count = 1
    while rng.random() > p:
        count += 1
    return count


def cold_miss_bound(workload: Workload) -> int:
    """Sum over bitstreams of the peak number of slots running it at once (unconstrained start).

    Every slot that runs a bitstream at some moment must have been programmed with it
    at least once, so no policy, clairvoyant or not, can do with fewer programmings.
    """
    edges: list[list[tuple[float, int]]] = [[] for _ in range(len(workload.sizes_mb))]
    for pod in workload.pods:
        edges[pod.bitstream] += [(pod.arrival, pod.slots), (pod.arrival + pod.duration, -pod.slots)]
    peak = 0
    for per_bitstream in edges:
        running = best = 0
        for _, delta in sorted(per_bitstream, key=lambda e: (e[0], e[1])):
            running += delta
            best = max(best, running)
        peak += best
    return peak

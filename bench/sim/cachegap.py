"""What clairvoyance is worth in a single cache: the best online rule against Belady's, on one popularity law.

A grid point's free slots behave like one cache of about ``(1 - load) x slots``
entries over its catalog. Where requests are independent draws from a fixed law (the
independent reference model), the best online rule of a cache keeps the most probable
items (A0: on a miss, evict the cached item of least probability; Aho, Denning and
Ullman, "Principles of optimal page replacement", 1971), and no online rule misses
less. Belady's rule (evict the item asked for again latest) knows the requests and
misses least of all. Their ratio is the gap that no estimate, however good, closes:
``python bench/cluster_sim.py --cache-gap`` prints it per grid point. It leaves out
what the cluster adds (busy slots, several copies at once, multi-slot pods, bursts,
drift), so it shows the mechanism, not the cluster's figure.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from bench.sim.workload import Shape, zipf_weights


@dataclass(frozen=True, slots=True)
class CacheGap:
    entries: int
    a0_misses: float
    belady_misses: float

    @property
    def ratio(self) -> float:
        return self.a0_misses / self.belady_misses if self.belady_misses else 1.0


def cache_gap(shape: Shape, seed: int, requests: int = 50_000) -> CacheGap:
    """A0 and Belady's misses per request, from a cold cache of the point's mean free slots."""
    entries = max(1, round((1.0 - shape.load) * shape.total_slots))
    chances = zipf_weights(shape.bitstreams, shape.zipf)
    rng = random.Random(seed)
    asked = rng.choices(range(shape.bitstreams), chances, k=requests)
    return CacheGap(entries, a0(asked, chances, entries) / requests, belady(asked, entries) / requests)


def a0(asked: list[int], chances: list[float], entries: int) -> int:
    """Misses of A0: on a miss with a full cache, evict the cached item of least probability (a miss always
    loads the item asked for, as a pod's slot is always programmed with its bitstream)."""
    cached: list[tuple[float, int]] = []  # a heap of (probability, item)
    held: set[int] = set()
    misses = 0
    for item in asked:
        if item in held:
            continue
        misses += 1
        if len(held) >= entries:
            _, least = heapq.heapreplace(cached, (chances[item], item))
            held.discard(least)
        else:
            heapq.heappush(cached, (chances[item], item))
        held.add(item)
    return misses


def belady(asked: list[int], entries: int) -> int:
    """Misses of Belady's rule: on a miss with a full cache, evict the item asked for again latest."""
    following = [0] * len(asked)
    seen: dict[int, int] = {}
    for i in range(len(asked) - 1, -1, -1):
        following[i] = seen.get(asked[i], len(asked))
        seen[asked[i]] = i
    next_ask: dict[int, int] = {}
    latest: list[tuple[int, int]] = []  # a heap of (-next request, item), stale entries skipped
    misses = 0
    for i, item in enumerate(asked):
        if item not in next_ask:
            misses += 1
            if len(next_ask) >= entries:
                while True:
                    when, victim = heapq.heappop(latest)
                    if next_ask.get(victim) == -when:
                        del next_ask[victim]
                        break
        next_ask[item] = following[i]
        heapq.heappush(latest, (-following[i], item))
    return misses

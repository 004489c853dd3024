"""The online reference: placements told the popularity law itself, not the arrivals.

What it is: the best an online policy of our kind could do with a perfect estimate. It
knows, at every moment, each bitstream's true chance of being asked for by the next
arrival (``Workload.chances``: the Zipf law, dealt out again at every drift), which no
extender can know (it estimates it from the pods it scored), but nothing about which
pod comes next, how large a burst is, or how long a pod runs. Such placements are
run and the best one is the reference:

* ``exact``: for each node where the pod fits, the fewest programmings first (free
  slots holding the bitstream, then empty ones), then the least value overwritten,
  then the fullest node; on the node, the slots of least value, then the least recently
  used. A free copy of bitstream C is worth what ``bench.sim.facts`` estimates,
  ``P(N >= copies)`` with N Poisson of mean ``chance(C) x window x free slots`` of the
  cluster, but from the true chance, and in exact numbers rather than 0..10 scores. It
  is run with each of ``WINDOWS`` (how many pods ahead, per free slot, a copy is
  weighed against): the best window differs from point to point;
* ``(c), told``: the shipped policy (c) whole, its integer scores, recency and packing
  included, with the request shares of its cluster values replaced by the true chances.

Why it is reported: the clairvoyant reference (``bench.sim.oracle``) knows the next
arrivals, which no online policy can know. Where arrivals are independent draws from a
popularity law (the independent reference model), the best online policy of a single
cache keeps the most popular items (Aho, Denning and Ullman, 1971), and the clairvoyant
one (Belady's) still needs far fewer programmings on a flat popularity with many items:
``bench/cluster_sim.py --cache-gap`` measures it. So (r) / oracle is the part of (c)'s
gap that knowing the future would close, and (c) / (r) the part that our estimate and
our scoring leave.

What it is not: a proven online optimum for this placement problem (queues, multi-slot
pods and many nodes have none known); each rule can lose to (c) on some point, which
is why all are run.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping

from agent.extender.nodestate import NodeSlots
from bench.sim.engine import Placement, SimNode, free_copies, programmings
from bench.sim.facts import ClusterFacts, asked_at_least
from bench.sim.oracle import next_use
from bench.sim.policies import EPOCH, bitstream_index
from bench.sim.workload import Pod, Workload

EXACT = "exact"
TOLD = "(c), told"
#: The windows the exact rule is run with (1 is the extender's WINDOW_PER_FREE_SLOT).
WINDOWS = (0.5, 1.0, 2.0, 4.0)


class ToldFacts(ClusterFacts):
    """The extender's cluster values, with each bitstream's request share taken from the popularity law."""

    def __init__(self, workload: Workload) -> None:
        super().__init__()
        self._workload = workload
        self._now = 0.0

    def share(self, bitstream: str) -> float:
        return self._workload.chances(self._now)[bitstream_index(bitstream)]

    def keep_values(self, nodes: Iterable[NodeSlots], now: float) -> Mapping[str, float]:
        self._now = now - EPOCH
        return super().keep_values(nodes, now)


def exact(workload: Workload, rng: random.Random, clairvoyant: bool = False, window: float = 1.0) -> Placement:
    """The ``exact`` rule of the module docstring, weighing a copy against ``window x free slots`` pods ahead.

    ``clairvoyant``: content that no pod arriving after ``now`` asks for is worth no more
    than an empty slot (a rule of the clairvoyant reference, ``bench.sim.oracle``, not an
    online one; pods already waiting are not counted, which can only weaken it).
    """
    later = next_use(workload) if clairvoyant else None

    def place(nodes: list[SimNode], pod: Pod, now: float) -> tuple[SimNode, list[int]] | None:
        chances = workload.chances(now)
        copies, free_slots = free_copies(nodes)
        values: dict[int, float] = {}

        def value(bitstream: int) -> float:
            """What a free copy of the bitstream is worth (worked out once per pod, for the content looked at)."""
            worth = values.get(bitstream)
            if worth is None:
                worth = asked_at_least(copies[bitstream], chances[bitstream] * window * free_slots)
                if later is not None and later(bitstream, now, {}) == math.inf:
                    worth = -1.0
                values[bitstream] = worth
            return worth

        candidates, least = programmings(nodes, pod)
        draw = rng.random
        best: tuple[tuple[float, ...], SimNode, list[int]] | None = None
        for node, count in candidates:
            tie = draw()  # one draw per fitting node, in order, whether or not it can win
            if count > least:  # more programmings than the best: the first part of its key loses
                continue
            free = [i for i, s in enumerate(node.slots) if s.holder is None]
            hits = [i for i in free if node.slots[i].bitstream == pod.bitstream]
            worth = {i: _worth(node.slots[i].bitstream, value) for i in free if i not in hits}
            rest = sorted(worth, key=lambda i: (worth[i], node.slots[i].last_used))
            overwritten = rest[:count]
            packing = (len(node.slots) - len(free) + pod.slots) / len(node.slots)
            key = (count, sum(worth[i] for i in overwritten), -packing, tie)
            if best is None or key < best[0]:
                best = (key, node, (hits + rest)[: pod.slots])
        return None if best is None else (best[1], best[2])

    return place


def _worth(bitstream: int | None, value: Callable[[int], float]) -> float:
    """An empty slot is worth less than any content (-1); content nobody asks for again (clairvoyant) -1 too."""
    return -1.0 if bitstream is None else value(bitstream)

"""The reference: clairvoyant placement and eviction.

What it is: an offline policy that knows every future arrival. For each pod it looks
at every node where the pod fits and takes, in this order, the node that needs the
fewest programmings (free slots already holding the bitstream count first), then the
one whose overwritten content is needed again the latest, then the fullest one
(packing keeps other nodes' free slots, and what they hold, for later pods), or with
the last two the other way round. Two measures of "needed again", each with both
orders, are run and the best result is the reference:

* ``next use``: the next arrival that asks for the bitstream (Belady's rule for one cache);
* ``copies``: the arrival that would use up the free copies of the bitstream in the whole
  cluster (with three free copies, the third next arrival asking for it), so a spare copy
  is overwritten before the last one.

A fifth rule keeps the shipped online placement (the fpga-scheduler profile and the
extender's scores, ``bench.sim.policies.WithExtender``) and makes only the choice of slots
on the chosen node clairvoyant (hits first, then the free slots whose content is needed
again latest): where that placement is already good, knowing the future of each
node's slots still improves on it.

A sixth rule keeps (c) whole (its placement, and the agent's own order of slots on the
node) and adds only what no online policy knows: free slots whose content no later pod
asks for go first. Where the clairvoyant rules above lose to (c) (many copies of few
bitstreams, point 7 of the grid: there the slot that is "needed again latest" is a
poor guide, and overriding (c)'s choices with it costs more programmings than it
saves), this keeps the reference at least about as good as (c), and better wherever
(c) would overwrite content that is never asked for again while other content is.

A seventh and an eighth rule do the same for the two rules of the online reference
(``bench.sim.informed``: placements told the popularity law): its exact-valued rule with
content that no later pod asks for worth no more than an empty slot, and (c) told the law
with (c)'s slot order and that content first. A clairvoyant policy knows the popularity
law as well as the arrivals, and where the law alone places well (one-slot pods, few
bitstreams: points 9 and 18 of the grid, where the first six rules needed 2 to 3 % more
programmings than the told placement) they keep the reference at least as good. Should
the online reference itself still need fewer programmings on some point, it is the
reference there (its placement is one of a clairvoyant policy's options), so that
(r) / oracle never drops below 1 and the share of the gap put down to knowing the future
is, if anything, too small.

What it is not: a lower bound. Placement with queues, multi-slot pods and many nodes
has no known optimal offline rule, and a greedy clairvoyant one can in principle lose
to an online policy; the grid in ``bench.sim.grid`` checks that it does not on any of
its points. The cold-miss bound (``bench.sim.workload.cold_miss_bound``) is a true
lower bound, reported beside it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from itertools import accumulate

from bench.sim.engine import Placement, SimNode, free_copies, programmings
from bench.sim.policies import agent_order
from bench.sim.workload import Pod, Workload

NeedTime = Callable[[int | None, float, dict[int, int]], float]


def next_use(workload: Workload) -> NeedTime:
    def need(bitstream: int | None, now: float, _copies: dict[int, int]) -> float:
        if bitstream is None:
            return math.inf
        times = workload.uses[bitstream]
        i = bisect.bisect_right(times, now)
        return times[i] if i < len(times) else math.inf

    return need


def copies_used_up(workload: Workload) -> NeedTime:
    cumulative = [list(accumulate(slots, initial=0)) for slots in workload.use_slots]

    def need(bitstream: int | None, now: float, copies: dict[int, int]) -> float:
        if bitstream is None:
            return math.inf
        times = workload.uses[bitstream]
        i = bisect.bisect_right(times, now)
        target = cumulative[bitstream][i] + copies.get(bitstream, 1)
        j = bisect.bisect_left(cumulative[bitstream], target)  # cumulative[j] = slots asked by the first j uses
        return times[j - 1] if j - 1 < len(times) else math.inf

    return need


def clairvoyant(workload: Workload, need: NeedTime, pack_first: bool = False) -> Placement:
    def place(nodes: list[SimNode], pod: Pod, now: float) -> tuple[SimNode, list[int]] | None:
        copies, _ = free_copies(nodes)
        candidates, least = programmings(nodes, pod)
        best: tuple[tuple[float, ...], SimNode, list[int]] | None = None
        for node, count in candidates:
            if count > least:  # more programmings than the best: the first part of its key loses
                continue
            free = [i for i, s in enumerate(node.slots) if s.holder is None]
            hits = [i for i in free if node.slots[i].bitstream == pod.bitstream]
            later = {i: need(node.slots[i].bitstream, now, copies) for i in free if i not in hits}
            rest = sorted(later, key=lambda i: -later[i])
            chosen = (hits + rest)[: pod.slots]
            misses = [i for i in chosen if i in later]
            soonest = min((later[i] for i in misses), default=math.inf)
            key = (-len(misses), -len(free), soonest) if pack_first else (-len(misses), soonest, -len(free))
            if best is None or key > best[0]:
                best = (key, node, chosen)
        return None if best is None else (best[1], best[2])

    return place


def clairvoyant_slots(workload: Workload) -> Callable[[SimNode, Pod, float], list[int]]:
    """A slot choice on a given node: free slots holding the bitstream, then those needed again latest."""
    need = next_use(workload)

    def choose(node: SimNode, pod: Pod, now: float) -> list[int]:
        free = node.free()
        hits = [i for i in free if node.slots[i].bitstream == pod.bitstream]
        rest = sorted((i for i in free if i not in hits), key=lambda i: -need(node.slots[i].bitstream, now, {}))
        return (hits + rest)[: pod.slots]

    return choose


def never_again_first(workload: Workload) -> Callable[[SimNode, Pod, float], list[int]]:
    """The agent's slot choice (``bench.sim.policies.ours``), except that content nobody asks for again goes first."""
    need = next_use(workload)

    def choose(node: SimNode, pod: Pod, now: float) -> list[int]:
        order = agent_order(node, pod, now)
        hits = [i for i in order if node.slots[i].bitstream == pod.bitstream]
        rest = [i for i in order if i not in hits]
        rest.sort(key=lambda i: node.slots[i].bitstream is None or need(node.slots[i].bitstream, now, {}) < math.inf)
        return (hits + rest)[: pod.slots]

    return choose


#: name -> (the measure of "needed again", whether packing goes before it)
VARIANTS: dict[str, tuple[Callable[[Workload], NeedTime], bool]] = {
    "next use": (next_use, False),
    "copies": (copies_used_up, False),
    "next use, packing first": (next_use, True),
    "copies, packing first": (copies_used_up, True),
}

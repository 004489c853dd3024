"""(d) DRA placement for the cluster simulation: the scheduler's own allocator, no extender.

What kube-scheduler v1.36 does with the claim of daemonset/examples/dra/cached-first.yaml
(``firstAvailable``: ``cached``, N slots holding the bitstream; else ``any``, N slots of the
platform) and the shipped DRA profile (daemonset/dra-mode/scheduler-config.yaml):

* Filter: a node fits when N of its slots are free; only the nodes the scheduler's search
  finds are filtered and scored (``bench.sim.sampling``).
* Score: DynamicResources gives 8 to a node where the first alternative fits and 7 where
  only the second does, normalised to 0..100 by the highest (100 and 87.5), times the
  profile's weight (25). The other scorers see no slots (DRA devices are not node
  resources) and spread by CPU and memory, which the simulation does not model: they
  break ties at random here.
* Allocation on the chosen node is first fit: the first alternative that fits, and its
  first N matching free devices in the slice's order. The agent lists empty slots first,
  then the least recently used (``lru=True``, what the grid runs); ``lru=False`` is a
  slice in ID order, for comparison.
"""

from __future__ import annotations

import random

from bench.sim.engine import Placement, SimNode
from bench.sim.sampling import Sampler
from bench.sim.workload import Pod

#: daemonset/dra-mode/scheduler-config.yaml
DYNAMIC_RESOURCES_WEIGHT = 25
FIRST, SECOND = 8, 7


def cached_slots(node: SimNode, pod: Pod) -> list[int]:
    return [i for i, s in enumerate(node.slots) if s.holder is None and s.bitstream == pod.bitstream]


def slice_order(node: SimNode, lru: bool) -> list[int]:
    """The node's free slots in the order its slice lists them: by ID, or (``lru``) empty slots first, then
    the least recently used."""
    free = node.free()
    if not lru:
        return free
    return sorted(free, key=lambda i: (node.slots[i].bitstream is not None, node.slots[i].last_used, i))


def dra(
    rng: random.Random, weight: int = DYNAMIC_RESOURCES_WEIGHT, lru: bool = False, sampler: Sampler | None = None
) -> Placement:
    search = sampler if sampler is not None else Sampler()

    def place(nodes: list[SimNode], pod: Pod, now: float) -> tuple[SimNode, list[int]] | None:
        fitting = search.feasible(nodes, lambda n: len(n.free()) >= pod.slots)
        if not fitting:
            return None
        raw = {n.name: FIRST if len(cached_slots(n, pod)) >= pod.slots else SECOND for n in fitting}
        top = max(raw.values())
        node = max(fitting, key=lambda n: raw[n.name] * 100 / top * weight + rng.random())
        cached = cached_slots(node, pod)
        chosen = cached[: pod.slots] if len(cached) >= pod.slots else slice_order(node, lru)[: pod.slots]
        return node, chosen

    return place

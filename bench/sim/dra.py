"""(e) DRA placement for the cluster simulation: the scheduler's own allocator, and the extender's scores.

What kube-scheduler v1.36 does with the claim of daemonset/examples/dra/cached-first.yaml
(``firstAvailable``: ``cached``, N slots holding the bitstream; else ``any``, N slots of the
platform) and the fpga-scheduler's DRA profile (daemonset/dra-mode/scheduler-config.yaml),
which also calls the extender's prioritize for the FPGA pods it serves:

* Filter: a node fits when N of its slots are free; only the nodes the scheduler's search
  finds are filtered and scored (``bench.sim.sampling``).
* Score: DynamicResources gives 8 to a node where the first alternative fits and 7 where
  only the second does, normalised to 0..100 by the highest (100 and 87.5), times the
  profile's weight (25). The extender's answer (``bench.sim.draextender``: the slots the
  allocator will take on each node, valued as the extender values slots, one node listed)
  adds 0..10, scaled to 0..100 and times the extender's weight, as kube-scheduler adds an
  extender's scores; it is asked when two or more nodes fit. The other scorers see no
  slots (DRA devices are not node resources) and spread by CPU and memory, which the
  simulation does not model: they break ties at random here.
* Allocation on the chosen node is first fit: the first alternative that fits, and its
  first N matching free devices in the slice's order. The agent lists empty slots first,
  then the least recently used (``lru=True``, what the grid runs); ``lru=False`` is a
  slice in ID order, for comparison.

Without ``extender`` this is the DRA profile as it was before it called the extender
(the grid's (e') column).
"""

from __future__ import annotations

import random

from bench.sim.draextender import DraExtender
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
    rng: random.Random,
    weight: int = DYNAMIC_RESOURCES_WEIGHT,
    lru: bool = False,
    sampler: Sampler | None = None,
    extender: DraExtender | None = None,
    extender_weight: int = 0,
) -> Placement:
    """DRA placement; with ``extender``, the profile also adds the extender's answer (0..10, scaled x10 x
    ``extender_weight``) when two or more nodes fit, as kube-scheduler adds an extender's scores."""
    search = sampler if sampler is not None else Sampler()

    def place(nodes: list[SimNode], pod: Pod, now: float) -> tuple[SimNode, list[int]] | None:
        fitting = search.feasible(nodes, pod.slots)
        if not fitting:
            return None
        bitstream, need = pod.bitstream, pod.slots
        raw = [FIRST if n.free_held.get(bitstream, 0) >= need else SECOND for n in fitting]
        top = max(raw)
        base = {r: r * 100 / top * weight for r in (FIRST, SECOND)}
        keys = [base[r] for r in raw]
        if extender is not None and len(fitting) >= 2:
            names = [n.name for n in fitting]
            answer = extender.answer(nodes, pod, names, now)
            if answer:
                scale = 10.0 * extender_weight
                at = {name: index for index, name in enumerate(names)}
                for name, score in answer.items():
                    keys[at[name]] += scale * score
        draw = rng.random
        keys = [key + draw() for key in keys]  # ties at random: one draw per node, in the order found
        node = fitting[keys.index(max(keys))]
        cached = cached_slots(node, pod)
        chosen = cached[: pod.slots] if len(cached) >= pod.slots else slice_order(node, lru)[: pod.slots]
        return node, chosen

    return place

"""The discrete-event engine: pods arrive, are placed by a policy, run, and leave.

Deterministic for a workload and a policy. Programming a slot takes the bitstream's
size divided by the configuration bandwidth, and the pod starts after it. The queue
is kube-scheduler's: an arriving pod is tried at once, whether or not others wait; a pod
that fits nowhere waits until slots free up, and whenever a pod leaves, the waiting pods
are tried again in the order they arrived, each on its own (one that still fits nowhere
holds back none behind it). The start delay of a pod is its wait plus its programming.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.sim.workload import Pod, Workload


@dataclass(slots=True)
class SimSlot:
    bitstream: int | None = None
    holder: int | None = None
    last_used: float = 0.0


@dataclass(slots=True)
class SimNode:
    name: str
    slots: list[SimSlot]
    #: Whatever a policy derived from this node's slots (dropped whenever they change).
    cached: object | None = None
    #: Every node whose slots changed, in order, shared by the nodes of one simulation (``changed``).
    journal: list[SimNode] = field(default_factory=list)
    #: Free slots, and bitstream -> free slots holding it: kept by ``changed`` (a policy reads them per node
    #: examined, so that a search costs one attribute read per node rather than a walk of its slots).
    free_count: int = field(init=False, default=0)
    free_held: dict[int, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._count()

    def free(self) -> list[int]:
        return [i for i, s in enumerate(self.slots) if s.holder is None]

    def changed(self) -> None:
        """Drop what policies derived from the slots, count the free slots again, and log the change for those
        that follow the journal. Whoever changes a slot's holder or content calls it."""
        self.cached = None
        self._count()
        self.journal.append(self)

    def _count(self) -> None:
        held: dict[int, int] = {}
        free = 0
        for slot in self.slots:
            if slot.holder is None:
                free += 1
                if slot.bitstream is not None:
                    held[slot.bitstream] = held.get(slot.bitstream, 0) + 1
        self.free_count, self.free_held = free, held


Placement = Callable[[list[SimNode], Pod, float], "tuple[SimNode, list[int]] | None"]


@dataclass(slots=True)
class Result:
    reconfigurations: int = 0
    reconfiguration_s: float = 0.0
    delays: list[float] = field(default_factory=list)
    busy_slot_s: float = 0.0
    #: The last arrival: utilisation is measured up to it, not over the drain at the end.
    horizon: float = 0.0
    end: float = 0.0

    def per_pod(self, pods: int) -> float:
        return self.reconfigurations / pods


def make_nodes(workload: Workload) -> list[SimNode]:
    journal: list[SimNode] = []
    return [
        SimNode(f"node{n:03d}", [SimSlot() for _ in range(size)], journal=journal)
        for n, size in enumerate(workload.shape.node_sizes())
    ]


def simulate(workload: Workload, place: Placement) -> Result:
    shape = workload.shape
    nodes = make_nodes(workload)
    result = Result()
    events: list[tuple[float, int, int, int]] = []  # (time, order, kind 0=leave 1=arrive, pod)
    for pod in workload.pods:
        heapq.heappush(events, (pod.arrival, pod.index, 1, pod.index))
    order = len(workload.pods)
    running: dict[int, tuple[SimNode, list[int]]] = {}
    waiting: list[Pod] = []
    horizon = result.horizon = workload.pods[-1].arrival

    def start(pod: Pod, now: float) -> bool:
        nonlocal order
        where = place(nodes, pod, now)
        if where is None:
            return False
        node, chosen = where
        programming = 0.0
        for i in chosen:
            slot = node.slots[i]
            assert slot.holder is None, f"{node.name} slot {i} given twice"
            if slot.bitstream != pod.bitstream:
                result.reconfigurations += 1
                programming += workload.sizes_mb[pod.bitstream] / shape.bandwidth_mb_s
                slot.bitstream = pod.bitstream
            slot.holder = pod.index
            slot.last_used = now
        node.changed()
        result.reconfiguration_s += programming
        result.delays.append(now - pod.arrival + programming)
        end = now + programming + pod.duration
        # Utilisation is measured while pods keep arriving, not over the drain at the end.
        result.busy_slot_s += max(0.0, min(end, horizon) - now) * len(chosen)
        running[pod.index] = (node, chosen)
        heapq.heappush(events, (end, order, 0, pod.index))
        order += 1
        return True

    while events:
        now, _, kind, index = heapq.heappop(events)
        result.end = now
        if kind == 1:
            pod = workload.pods[index]
            if not start(pod, now):
                waiting.append(pod)
            continue
        node, chosen = running.pop(index)
        for i in chosen:
            node.slots[i].holder = None
            node.slots[i].last_used = now
        node.changed()
        waiting = retry(waiting, start, now)
    return result


def retry(waiting: list[Pod], start: Callable[[Pod, float], bool], now: float) -> list[Pod]:
    """The waiting pods that still do not start, each tried in order.

    A pod fits where enough slots are free, and a pod that did not start changed
    nothing, so one that asks at least as many slots as one that just failed is not
    tried again in the same pass (its search would examine every node and find none).
    """
    still: list[Pod] = []
    failed_at = math.inf
    for pod in waiting:
        if pod.slots >= failed_at or not start(pod, now):
            failed_at = min(failed_at, pod.slots)
            still.append(pod)
    return still


def programmings(nodes: list[SimNode], pod: Pod) -> tuple[list[tuple[SimNode, int]], int]:
    """Each node where the pod fits, with the slots it must program there at least (those it needs beyond the
    free slots holding its bitstream), and the least of them over the nodes: a rule that places by the fewest
    programmings first need only look closer at the nodes that reach it."""
    need, bitstream = pod.slots, pod.bitstream
    found = [(node, max(0, need - node.free_held.get(bitstream, 0))) for node in nodes if node.free_count >= need]
    return found, min((count for _, count in found), default=need)


def best_of(runs: dict[str, Result]) -> tuple[str, Result]:
    """The run with the fewest reconfigurations, and its name."""
    name = min(runs, key=lambda n: runs[n].reconfigurations)
    return name, runs[name]


def free_copies(nodes: list[SimNode]) -> tuple[dict[int, int], int]:
    """Over the cluster: bitstream -> free slots holding it, and the number of free slots."""
    copies: dict[int, int] = {}
    free = 0
    for node in nodes:
        free += node.free_count
        for bitstream, count in node.free_held.items():
            copies[bitstream] = copies.get(bitstream, 0) + count
    return copies, free


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

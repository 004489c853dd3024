"""The slots of the bench's fake nodes for ``bench/placement_scale.py``: what is published, and the truth.

Every fake node of the bench control plane gets 4 slots, all free at the start (no pod
holds one, as the scheduler sees it too). Each slot holds a bitstream drawn from the
same Zipf law the pods ask by, or nothing (``empty_share`` of the slots), and was last
used at a time drawn at random. So a popular bitstream is held free on hundreds of
nodes and a rare one on a handful, as a cluster whose slots followed its demand.

The model is the truth the hit rate is measured against: as each pod is seen bound,
in the order of the binds, it asks whether some node had a free slot holding the
pod's bitstream and whether the pod's node had one, then gives the pod a slot as the
agent does (one holding the bitstream, else an empty one, else the least recently
used), which is then held for the rest of the run (no pod ends in a backlog run).

Published as the agent publishes it: an FpgaNodeState per node (device-plugin mode;
republished after each bind there, as the agent does when a slot is taken), and a
ResourceSlice per node (DRA mode; free slots listed empty first, then least recently
used, as the agent lists them, so that the allocator's first fit is the agent's choice;
held slots need no republishing there, the scheduler tracks its own allocations).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from bench.dra_shapes import node_slice

PLATFORM = "sim-pr-v1"
SLOTS_PER_NODE = 4
#: Epoch seconds around which the slots' last uses are spread (a day before).
EPOCH = 1_700_000_000
DAY_S = 86_400


def bitstream_name(index: int) -> str:
    return f"bs-{index:03d}"


def zipf_weights(count: int, exponent: float) -> list[float]:
    raw = [1.0 / (rank + 1) ** exponent for rank in range(count)]
    total = sum(raw)
    return [w / total for w in raw]


@dataclass(slots=True)
class Slot:
    bitstream: str | None
    last_used: int
    free: bool = True


@dataclass(slots=True)
class Tally:
    """Per pod seen bound: whether a free slot held its bitstream somewhere, and on its node."""

    pods: int = 0
    possible: int = 0
    hits: int = 0
    #: Misses on a node that held the bitstream free at the start, taken by an earlier pod since: the
    #: scheduler's view of that node (the published state, the extender's scores) was behind.
    taken_before: int = 0

    @property
    def rate(self) -> float:
        """Hits among the pods that could have hit."""
        return self.hits / self.possible if self.possible else 1.0


@dataclass(slots=True)
class ClusterState:
    nodes: dict[str, list[Slot]]
    bitstreams: int
    #: Bitstream -> free slots holding it, over the cluster.
    copies: dict[str, int] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    #: (node, bitstream) of every free copy at the start.
    initial: set[tuple[str, str]] = field(default_factory=set)

    @classmethod
    def make(cls, names: list[str], bitstreams: int, exponent: float, empty_share: float, seed: int) -> ClusterState:
        rng = random.Random(seed)
        weights = zipf_weights(bitstreams, exponent)
        nodes: dict[str, list[Slot]] = {}
        for name in sorted(names):
            slots = []
            for _ in range(SLOTS_PER_NODE):
                held = (
                    None if rng.random() < empty_share else bitstream_name(rng.choices(range(bitstreams), weights)[0])
                )
                slots.append(Slot(held, EPOCH - rng.randrange(DAY_S)))
            nodes[name] = slots
        state = cls(nodes, bitstreams)
        state.count_copies()
        state.initial = {(n, s.bitstream) for n, slots in nodes.items() for s in slots if s.bitstream is not None}
        return state

    def count_copies(self) -> None:
        self.copies = {}
        for slots in self.nodes.values():
            for slot in slots:
                if slot.free and slot.bitstream is not None:
                    self.copies[slot.bitstream] = self.copies.get(slot.bitstream, 0) + 1

    def take(self, node: str, bitstream: str, now: int) -> None:
        """The pod bound to ``node`` gets its slot (the agent's choice); counted in the tally first."""
        slots = self.nodes[node]
        free = [s for s in slots if s.free]
        hits = [s for s in free if s.bitstream == bitstream]
        possible = self.copies.get(bitstream, 0) > 0
        self.tally.pods += 1
        self.tally.possible += possible
        self.tally.hits += bool(hits) and possible
        self.tally.taken_before += not hits and possible and (node, bitstream) in self.initial
        if not free:
            return  # the scheduler overfilled the node: nothing to take (counted as a miss)
        chosen = hits[0] if hits else min(free, key=lambda s: (s.bitstream is not None, s.last_used))
        if chosen.bitstream is not None:
            self.copies[chosen.bitstream] -= 1
        chosen.bitstream, chosen.free, chosen.last_used = bitstream, False, now

    def spec(self, node: str) -> dict[str, Any]:
        """The ``spec`` of the node's FpgaNodeState, as its agent writes it."""
        slots = [
            {
                "id": f"{node}-card0-port{k}",
                "card": "0000:af:00.0",
                "numa": 0,
                "platform": PLATFORM,
                "bitstream": slot.bitstream,
                "accelerator": None if slot.bitstream is None else f"accel-{slot.bitstream}",
                "free": slot.free,
                "healthy": True,
                "lastUsed": slot.last_used,
            }
            for k, slot in enumerate(self.nodes[node])
        ]
        catalog = {bitstream_name(b): PLATFORM for b in range(self.bitstreams)}
        return {"nodeName": node, "slots": slots, "bitstreams": catalog}

    def slice_body(self, node: str) -> dict[str, Any]:
        """The node's ResourceSlice as its agent publishes it (the agent's own slice code: free slots, empty
        first, then least recently used)."""
        return node_slice(node, [(slot.bitstream, slot.last_used) for slot in self.nodes[node]])


def wanted(pods: int, bitstreams: int, exponent: float, seed: int) -> list[str]:
    """Each pod's bitstream, by the same law the slots were filled by."""
    rng = random.Random(seed + 1)
    weights = zipf_weights(bitstreams, exponent)
    return [bitstream_name(b) for b in rng.choices(range(bitstreams), weights, k=pods)]

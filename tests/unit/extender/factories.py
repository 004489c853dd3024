"""Published node state as the agent writes it, for extender tests."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from agent.extender.demand import ContainerDemand, PodDemand
from agent.extender.nodestate import NodeSlots, WatchedNode, node_state
from agent.extender.ranking import Scores
from agent.extender.scoring import LRU_HORIZON_S, NodeLookup
from agent.slots.published import parse_state, state_object

PAC = "pac_a10"
N3K = "n3000"
#: The catalog of most test nodes: two bitstreams of one platform, one of another.
CATALOG = {"aes": PAC, "sha": PAC, "fft": N3K}


def slot(
    sid: str,
    *,
    platform: str = PAC,
    bitstream: str | None = None,
    free: bool = True,
    healthy: bool = True,
    last_used: int | None = None,
    card: str = "card0",
    numa: int | None = 0,
    accelerator: str | None = None,
) -> dict[str, Any]:
    """One slot of an FpgaNodeState's ``spec.slots``, as readers see it (loaded slots get an accelerator id unless
    given)."""
    if bitstream is not None and accelerator is None:
        accelerator = f"acc-{bitstream}"
    return {
        "id": sid,
        "card": card,
        "numa": numa,
        "platform": platform,
        "bitstream": bitstream,
        "accelerator": accelerator,
        "free": free,
        "healthy": healthy,
        "last_used": last_used,
    }


def state_object_of(
    name: str, slots: Sequence[Mapping[str, Any]], bitstreams: Mapping[str, str] | None = None, rv: str = "1"
) -> dict[str, Any]:
    """The FpgaNodeState the node's agent writes for these slots and catalog (default: CATALOG)."""
    wire = [{("lastUsed" if k == "last_used" else k): v for k, v in record.items()} for record in slots]
    spec = {"nodeName": name, "slots": wire, "bitstreams": dict(CATALOG if bitstreams is None else bitstreams)}
    obj = state_object(name, "fpga-slot", spec)
    obj["metadata"]["resourceVersion"] = rv
    return obj


def node(
    name: str, slots: Sequence[Mapping[str, Any]], bitstreams: Mapping[str, str] | None = None, rv: str = "1"
) -> NodeSlots:
    return node_state(parse_state(state_object_of(name, slots, bitstreams, rv)))


def demand(*containers: tuple[str, int, str | None] | tuple[str, int, str | None, bool]) -> PodDemand:
    """``demand(("main", 2, "aes"), ("init", 1, "sha", True))``."""
    return PodDemand.of("default/p", [ContainerDemand(*c) for c in containers])


def expected_answer(
    scores: Sequence[tuple[str, int]], pod: PodDemand, lookup: NodeLookup, limit: int, pack_ties: bool = False
) -> Scores:
    """A prioritize answer by its definition, for comparing: the lowest score becomes 0 and is left out, then
    the best ``limit`` entries (0: all) by score, then by the node's packing for the pod, ties in order.
    ``pack_ties`` (DRA pods): when every score is the floor, the best packed nodes at 1 (none if all pack alike)."""
    if not scores:
        return []
    app = sum(c.slots for c in pod.containers if not c.init)  # kube-scheduler: app containers together,
    count = max([app, *(c.slots for c in pod.containers if c.init)])  # or the largest init container

    def packing(name: str) -> int:
        node = lookup(name)
        return 0 if node is None else node.packing(count)

    floor = min(score for _, score in scores)
    if pack_ties and all(score == floor for _, score in scores):
        best = max(packing(name) for name, _ in scores)
        if all(packing(name) == best for name, _ in scores):
            return []
        packed = [(name, 1) for name, _ in scores if packing(name) == best]
        return packed if limit <= 0 else packed[:limit]
    shifted = [(name, score - floor) for name, score in scores if score != floor]
    if limit <= 0:
        return shifted
    return sorted(shifted, key=lambda entry: (-entry[1], -packing(entry[0])))[:limit]


def random_node(
    rng: random.Random, name: str, now: float, catalogs: list[dict[str, str]], fitting: bool = False
) -> WatchedNode:
    """A node with random slots; ``fitting``: each slot holds only bitstreams of its own platform (as an agent
    publishes them; DRA's allocator matches a slot by its bitstream whatever the platform, so only such states
    compare)."""
    slots = []
    for i in range(rng.randint(0, 5)):
        platform = rng.choice([PAC, PAC, N3K])
        held = [b for b, p in {**CATALOG, "big": PAC}.items() if p == platform or not fitting]
        slots.append(
            slot(
                f"s{i}",
                platform=platform,
                bitstream=rng.choice([None, *held]),
                free=rng.random() < 0.7,
                healthy=rng.random() < 0.9,
                last_used=rng.choice([None, int(now - rng.uniform(0, 2 * LRU_HORIZON_S))]),
            )
        )
    return WatchedNode(name, node(name, slots, rng.choice(catalogs), rv=str(rng.random())))

"""Prioritize for DRA pods: the node's score is what the slots the scheduler's allocator takes there cost.

In DRA mode the scheduler, not the extender and not the agent, chooses the slots on a
node: its allocator walks the node's ResourceSlice in order and takes the first free
devices that match. The cache-aware claim (``daemonset/examples/dra/cached-first.yaml``)
first asks for slots holding the bitstream, then for any slot of the platform. So for
each request of the pod (``PodDemand.dra``, in allocation order), on a node:

* when N or more free healthy slots hold the bitstream, the first N of them (in slice
  order) are taken: a cache hit, each worth ``loaded``;
* otherwise the first N free healthy slots of the bitstream's platform in slice order are
  taken and programmed. The slice order is ``agent.slots.eviction_key``'s, the same one
  the agent lists its slots in: empty slots first, then the least recently used, then by
  slot ID. Each is worth what overwriting it costs, by the value the extender gives a
  victim slot (``agent.extender.scoring.overwrite_score``: ``empty`` for an empty slot,
  down to ``evict`` for a slot whose content is likely wanted again soon); a slot among
  them that already holds the bitstream is not programmed and is worth ``loaded``.

Slots taken by one request are not there for the next. The node's score is the mean
over all the pod's slots, rounded, less ``DOWNLOAD_PENALTY`` when the node must pull a
bitstream first; 0 when its catalog cannot program one, or it has too few free slots of
the platform. Unlike a device-plugin pod (``scoring.score_single``: the cheapest victim
first), the victim here is the one the allocator takes, cheap or not: a node whose first
free slot in order holds a popular bitstream scores below one whose first free slot is empty.

Copies promised to other pods (``agent.extender.promises``) are taken off first: the
allocator gives them to those pods' claims.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from agent.extender.demand import PodDemand
from agent.extender.nodestate import LoadedSlot, NodeSlots, PublishedSlot
from agent.extender.promises import free_copies
from agent.extender.scoring import (
    CLOCK_STEP_S,
    DOWNLOAD_PENALTY,
    MAX_SCORE,
    NO_VALUES,
    NodeLookup,
    ScoreWeights,
    overwrite_score,
    remember,
)

#: No copies promised anywhere.
NONE_PROMISED: Mapping[str, int] = {}


#: Entries an answer for a DRA pod lists: one, the best by score and then by packing of the slots. In DRA mode no
#: scheduler plugin packs FPGA slots (devices are not node resources) and of the nodes an answer ranks equal the
#: scheduler picks at random; the one best node carries the packing that device-plugin mode's MostAllocated
#: profile gives. In the cluster simulation's workload grid this takes DRA placement from 1.19 x the extender's
#: reconfigurations at the worst point (16 entries) to 1.04 x (bench/RESULTS.md). For the same reason, when every
#: node asked scores alike, the answer still lists the best packed, at 1 (``best_ranked``'s ``pack_ties``).
DRA_ANSWER_LIMIT = 1


def dra_allocation(
    requests: Sequence[tuple[str, int]], node: NodeSlots, promised: int = 0
) -> list[tuple[PublishedSlot, str]] | None:
    """(slot, bitstream it gets) of each slot the allocator takes for ``requests`` on ``node``, in order; None
    when a request does not fit. ``promised``: free copies of the first request's bitstream promised to
    other pods (the first that many in order are not there)."""
    skip: dict[str, int] = {requests[0][0]: promised} if promised and requests else {}
    free: list[PublishedSlot] = []
    for slot in node.free_order:
        if slot.bitstream is not None and skip.get(slot.bitstream, 0) > 0:
            skip[slot.bitstream] -= 1
            continue
        free.append(slot)
    taken: list[tuple[PublishedSlot, str]] = []
    for bitstream, count in requests:
        platform = node.bitstreams.get(bitstream)
        if platform is None:
            return None
        holding = [slot for slot in free if slot.bitstream == bitstream]
        if len(holding) >= count:
            chosen = holding[:count]
        else:
            chosen = [slot for slot in free if slot.platform == platform][:count]
            if len(chosen) < count:
                return None
        taken.extend((slot, bitstream) for slot in chosen)
        ids = {slot.id for slot in chosen}
        free = [slot for slot in free if slot.id not in ids]
    return taken


def slot_value(
    slot: PublishedSlot, bitstream: str, weights: ScoreWeights, now: float, keep: Mapping[str, float]
) -> float:
    """What giving ``slot`` to a request for ``bitstream`` is worth: ``loaded`` when it holds it, ``empty``
    when it holds nothing, else the value of overwriting its content (``scoring.overwrite_score``)."""
    if slot.bitstream == bitstream:
        return float(weights.loaded)
    if slot.bitstream is None and slot.accelerator is None:
        return float(weights.empty)
    return overwrite_score(LoadedSlot(slot.last_used or 0, slot.bitstream), weights, now, keep)


def dra_base(node: NodeSlots, platform: str, weights: ScoreWeights, now: float, keep: Mapping[str, float]) -> int:
    """What a one-slot DRA pod scores on ``node`` when none of its free slots holds the pod's bitstream (of
    ``platform``): the first free slot of the platform in slice order, valued as :func:`score_dra` does; 0 when
    there is none. Penalty for a download left out (the caller applies it)."""
    for slot in node.free_order:
        if slot.platform == platform:
            return max(0, min(MAX_SCORE, math.floor(slot_value(slot, "", weights, now, keep) + 0.5)))
    return 0


def score_dra(
    demand: PodDemand,
    node: NodeSlots | None,
    weights: ScoreWeights,
    now: float,
    keep: Mapping[str, float] = NO_VALUES,
    promised: int = 0,
) -> int:
    """0..10 for placing the DRA pod on this node (see the module docstring); ``neutral`` when nothing is known."""
    if node is None or not demand.dra:
        return weights.neutral
    taken = dra_allocation(demand.dra, node, promised)
    if taken is None:
        return 0
    total = sum(slot_value(slot, bitstream, weights, now, keep) for slot, bitstream in taken)
    score = max(0, min(MAX_SCORE, math.floor(total / len(taken) + 0.5)))
    if node.downloads and any(bitstream in node.downloads for bitstream, _ in demand.dra):
        return max(0, score - DOWNLOAD_PENALTY)
    return score


def prioritize_dra(
    demand: PodDemand,
    names: Sequence[str],
    lookup: NodeLookup,
    weights: ScoreWeights,
    now: float,
    keep: Mapping[str, float] = NO_VALUES,
    keep_version: int = 0,
    promised: Mapping[str, int] = NONE_PROMISED,
) -> list[tuple[str, int]]:
    """(name, score) of every name asked, in order; ``promised``: node -> copies of the pod's bitstream
    promised to other pods there. The clock is read in steps of CLOCK_STEP_S; a node state remembers its
    score for each kind of DRA pod within a step (``keep_version`` must change whenever ``keep`` does)."""
    if not demand.dra:
        return [(name, weights.neutral) for name in names]
    step = int(now // CLOCK_STEP_S)
    now = float(step * CLOCK_STEP_S)
    key = f"dra|{demand.dra}|{weights}|{step}|{keep_version}"
    # A one-slot pod on a node with more free copies than are promised still gets one: scored as if none were.
    first = demand.dra[0][0] if len(demand.dra) == 1 and demand.dra[0][1] == 1 else None
    scores: list[tuple[str, int]] = []
    for name in names:
        node = lookup(name)
        if node is None:
            scores.append((name, weights.neutral))
            continue
        held = promised.get(name, 0)
        if held and (first is None or free_copies(node, first) <= held):  # the copies it would take are promised
            scores.append((name, score_dra(demand, node, weights, now, keep, held)))
            continue
        memo = node.memo
        score = memo.get(key)
        if score is None:
            score = score_dra(demand, node, weights, now, keep)
            remember(memo, key, score)
        scores.append((name, score))  # type: ignore[arg-type]
    return scores

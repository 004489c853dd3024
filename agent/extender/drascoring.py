"""Scores for DRA pods: the slots the scheduler's allocator would take on a node, each valued as
:mod:`agent.extender.scoring` values one. See docs/dra.md."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from agent.extender.demand import DraRequest, PodDemand
from agent.extender.nodestate import LoadedSlot, NodeSlots
from agent.extender.scoring import DOWNLOAD_PENALTY, MAX_SCORE, NO_VALUES, ScoreWeights, overwrite_score
from agent.slots.published import PublishedSlot

#: Entries an answer for a DRA pod lists: one, the best by score then packing (no scheduler plugin packs DRA slots).
DRA_ANSWER_LIMIT = 1


def dra_allocation(
    requests: Sequence[DraRequest | tuple[str, int]], node: NodeSlots, promised: int = 0
) -> list[tuple[PublishedSlot, str]] | None:
    """(slot, bitstream it gets) of each slot the allocator takes for ``requests`` on ``node``, in order; None
    when a request does not fit. Per request: N free slots holding the bitstream if there are N, else the
    first N free of its platform in slice order; for whole cards, every slot of N wholly free cards, those
    holding the bitstream first. ``promised``: free copies of the first request's bitstream not there."""
    asked = [DraRequest(*request) for request in requests]
    skip: dict[str, int] = {asked[0].bitstream: promised} if promised and asked else {}
    free: list[PublishedSlot] = []
    for slot in node.free_order:
        if slot["bitstream"] is not None and skip.get(slot["bitstream"], 0) > 0:
            skip[slot["bitstream"]] -= 1
            continue
        free.append(slot)
    taken: list[tuple[PublishedSlot, str]] = []
    for bitstream, count, whole_card in asked:
        platform = node.bitstreams.get(bitstream)
        if platform is None:
            return None
        chosen = (
            _cards(node, free, bitstream, platform, count) if whole_card else _slots(free, bitstream, platform, count)
        )
        if chosen is None:
            return None
        taken.extend((slot, bitstream) for slot in chosen)
        ids = {slot["id"] for slot in chosen}
        free = [slot for slot in free if slot["id"] not in ids]
    return taken


def _slots(free: Sequence[PublishedSlot], bitstream: str, platform: str, count: int) -> list[PublishedSlot] | None:
    holding = [slot for slot in free if slot["bitstream"] == bitstream]
    if len(holding) >= count:
        return holding[:count]
    chosen = [slot for slot in free if slot["platform"] == platform][:count]
    return chosen if len(chosen) == count else None


def _cards(
    node: NodeSlots, free: Sequence[PublishedSlot], bitstream: str, platform: str, count: int
) -> list[PublishedSlot] | None:
    """Every slot of ``count`` cards of ``platform`` whose slots are all free: those holding the image first."""
    free_ids = {slot["id"] for slot in free}
    cards: dict[str, list[PublishedSlot]] = {}
    for slot in node.slots:
        cards.setdefault(slot["card"], []).append(slot)
    whole = [
        group
        for group in cards.values()
        if all(slot["id"] in free_ids and slot["platform"] == platform for slot in group)
    ]
    whole.sort(key=lambda group: not all(slot["bitstream"] == bitstream for slot in group))
    if len(whole) < count:
        return None
    return [slot for group in whole[:count] for slot in group]


def slot_value(
    slot: PublishedSlot, bitstream: str, weights: ScoreWeights, now: float, keep: Mapping[str, float]
) -> float:
    """What ``slot`` is worth to a request for ``bitstream``: ``loaded``, ``empty``, else ``overwrite_score``."""
    if slot["bitstream"] == bitstream:
        return float(weights.loaded)
    if slot["bitstream"] is None and slot["accelerator"] is None:
        return float(weights.empty)
    return overwrite_score(LoadedSlot(slot["last_used"] or 0, slot["bitstream"]), weights, now, keep)


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
    if node.downloads and any(request.bitstream in node.downloads for request in demand.dra):
        return max(0, score - DOWNLOAD_PENALTY)
    return score

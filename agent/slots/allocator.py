"""Which slots to prefer for a container: the policy behind GetPreferredAllocation.

Pure and deterministic. The kubelet offers ``available`` IDs, some of which it must
include; we fill up to ``size`` preferring slots that already hold the wanted
accelerator (no reconfiguration: the cache), keeping a multi-slot container on one
card (then one NUMA node), then empty slots (nothing useful is evicted), then the
least recently used, then the ID for a stable order. Without a wanted accelerator
the policy is the neutral one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from agent.errors import AllocationSizeError, DuplicateSlotError, UnknownSlotError, shown
from agent.slots.registry import SlotState


def choose_preferred(
    states: Mapping[str, SlotState],
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    wanted: str | None = None,
) -> list[str]:
    """Return exactly ``size`` IDs from ``available``, containing all of ``must_include``.

    ``wanted`` is the accelerator id the container will be programmed with, when known.

    Raises AllocationSizeError, UnknownSlotError or DuplicateSlotError when the
    request cannot be met as asked.
    """
    _check_request(states, available, must_include, size)
    chosen = list(must_include)
    taken = set(chosen)
    candidates = [slot_id for slot_id in available if slot_id not in taken]
    remaining = size - len(chosen)
    if remaining == 0:
        return chosen

    cards = {states[slot_id].slot.card for slot_id in chosen}
    numas = {states[slot_id].slot.numa for slot_id in chosen}
    hits = {s for s in candidates if wanted is not None and states[s].accelerator_id == wanted}
    if not cards:
        if hits:  # start where most of the wanted accelerator already sits
            per_card = Counter(states[s].slot.card for s in hits)
            anchor = min(per_card, key=lambda card: (-per_card[card], card))
        else:
            anchor = _anchor_card(states, candidates, remaining)
        cards = {anchor}
        numas = {states[s].slot.numa for s in candidates if states[s].slot.card == anchor}

    def rank(slot_id: str) -> tuple[bool, bool, bool, bool, float, str]:
        state = states[slot_id]
        return (
            slot_id not in hits,
            state.slot.card not in cards,
            state.slot.numa not in numas,
            state.accelerator_id is not None,
            state.last_used if state.last_used is not None else float("-inf"),
            slot_id,
        )

    chosen.extend(sorted(candidates, key=rank)[:remaining])
    return chosen


def _anchor_card(states: Mapping[str, SlotState], candidates: Sequence[str], needed: int) -> str:
    """The card to start on: the smallest one that fits the request, else the largest.

    Best fit keeps big blocks of free slots for later multi-slot containers.
    """
    per_card = Counter(states[slot_id].slot.card for slot_id in candidates)
    fitting = [(count, card) for card, count in per_card.items() if count >= needed]
    if fitting:
        return min(fitting)[1]
    return min(per_card, key=lambda card: (-per_card[card], card))


def _check_request(
    states: Mapping[str, SlotState], available: Sequence[str], must_include: Sequence[str], size: int
) -> None:
    for label, ids in (("available", available), ("must_include", must_include)):
        seen: set[str] = set()
        for slot_id in ids:
            if slot_id in seen:
                raise DuplicateSlotError(f"slot {shown(slot_id)} appears twice in {label}")
            seen.add(slot_id)
            if slot_id not in states:
                raise UnknownSlotError(f"slot {shown(slot_id)} in {label} is not advertised by this node")
    missing = [slot_id for slot_id in must_include if slot_id not in set(available)]
    if missing:
        raise AllocationSizeError(f"must_include slot {shown(missing[0])} is not among the available slots")
    if size < 1:
        raise AllocationSizeError(f"allocation_size must be at least 1, got {size}")
    if size < len(must_include):
        raise AllocationSizeError(f"allocation_size {size} is smaller than the {len(must_include)} must_include slots")
    if size > len(available):
        raise AllocationSizeError(f"allocation_size {size} exceeds the {len(available)} available slots")

"""Which slots to prefer for a container: the policy behind GetPreferredAllocation (pure, deterministic).

Prefers slots holding the wanted accelerator, then one card (then one NUMA node), then empty slots,
then the least recently used, then the ID."""

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
    """Exactly ``size`` IDs from ``available``, all of ``must_include`` among them; ``wanted``: the accelerator
    id, when known. AllocationSizeError, UnknownSlotError or DuplicateSlotError when that cannot be met."""
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
    if not cards:  # start where most of the wanted accelerator sits, else on the smallest card that fits
        per_card = Counter(states[s].slot.card for s in (hits or candidates))
        fitting = [(count, card) for card, count in per_card.items() if count >= remaining and not hits]
        anchor = min(fitting)[1] if fitting else min(per_card, key=lambda card: (-per_card[card], card))
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

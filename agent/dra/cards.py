"""Whole cards beside their slots (``--whole-cards``): one card offered whole or as its slots, never both,
through shared counters; the card device has the NoSchedule taint ``CARD_TAINT``. See docs/dra.md, "Whole cards".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agent.dra.constants import DRIVER_NAME
from agent.dra.naming import NameClash, device_names
from agent.kube.resourceslices import MAX_COUNTERS, CounterSet
from agent.slots.model import Health, Slot
from agent.slots.registry import SlotState

#: The taint of every card device: a claim for a whole card tolerates it (daemonset/examples/dra/whole-card.yaml).
CARD_TAINT = f"{DRIVER_NAME}/whole-card"
#: The capacity every card device has (the slot devices' is ``fpga.example.com/slot``).
CARD_CAPACITY = f"{DRIVER_NAME}/card"


def card_key(card: str) -> str:
    """The name a card takes among slot IDs (none has a ``:``) in :func:`agent.dra.device_names`."""
    return f"card:{card}"


@dataclass(frozen=True, slots=True)
class OfferedCard:
    """A card offered whole: its name and its slots' states (by slot ID)."""

    card: str
    states: tuple[SlotState, ...]

    @property
    def slots(self) -> list[Slot]:
        return [state.slot for state in self.states]

    @property
    def bitstream(self) -> str:
        """The whole-card image every slot reports as its card's ("" when none, unknown, or being programmed)."""
        held = {s.bitstream if s.slot.whole_card and s.programming is None else None for s in self.states}
        return (held.pop() or "") if len(held) == 1 else ""

    @property
    def health(self) -> Health:
        unhealthy = any(state.health is not Health.HEALTHY for state in self.states)
        return Health.UNHEALTHY if unhealthy else Health.HEALTHY

    @property
    def reason(self) -> str:
        return "; ".join(f"slot {s.slot.id}: {s.reason}" for s in self.states if s.health is not Health.HEALTHY)


def offered_cards(states: Sequence[SlotState], can_program: Callable[[Sequence[Slot]], bool]) -> list[OfferedCard]:
    """The cards offered whole: every slot present, of one platform, at most ``MAX_COUNTERS`` of them, and
    programmable as one card (``can_program``); by card name."""
    by_card: dict[str, list[SlotState]] = {}
    for state in states:
        by_card.setdefault(state.slot.card, []).append(state)
    cards = []
    for card, group in sorted(by_card.items()):
        slots = [s.slot for s in group]
        if (
            all(s.present for s in group)
            and len({slot.platform for slot in slots}) == 1
            and len(group) <= MAX_COUNTERS
            and can_program(slots)
        ):
            cards.append(OfferedCard(card, tuple(sorted(group, key=lambda s: s.slot.id))))
    return cards


def offered(states: Sequence[SlotState], cards: Sequence[OfferedCard] = ()) -> tuple[dict[str, str], list[NameClash]]:
    """Slot ID (or :func:`card_key` of an offered card) -> device name of the devices offered
    (:func:`agent.dra.device_names`), and the clashes that gave devices a name of their own."""
    names, clashes = device_names([*(s.slot.id for s in states), *(card_key(c.card) for c in cards)])
    return {key: name for name, key in names.items()}, clashes


def counter_sets(cards: Sequence[OfferedCard], names: Mapping[str, str]) -> list[CounterSet]:
    """One counter set per offered card, one counter per slot, named as their devices (``names``)."""
    return [
        CounterSet(names[card_key(c.card)], tuple(names[s.slot.id] for s in c.states))
        for c in cards
        if card_key(c.card) in names and all(s.slot.id in names for s in c.states)
    ]

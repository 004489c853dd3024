"""The slot domain: what a slot is, who holds it, and which slots to hand out (standard library only)."""

from agent.slots.allocator import choose_preferred
from agent.slots.model import (
    MAX_SLOT_ID_LEN,
    DeviceNode,
    Health,
    Holder,
    Slot,
    SlotId,
    eviction_key,
    make_slot_id,
)
from agent.slots.registry import SlotRegistry, SlotState

__all__ = [
    "MAX_SLOT_ID_LEN",
    "DeviceNode",
    "Health",
    "Holder",
    "Slot",
    "SlotId",
    "SlotRegistry",
    "SlotState",
    "choose_preferred",
    "eviction_key",
    "make_slot_id",
]

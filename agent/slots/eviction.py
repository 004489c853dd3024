"""Which free slot is overwritten first: empty ones, then the least recently used, then by slot ID.

In DRA mode the agent lists its node's slots in its ResourceSlice in this order, and the
scheduler's allocator takes the first free devices that match a claim: so a claim that
must program a slot gets an empty one if there is one, else the one whose content was
used longest ago. The scheduler extender scores DRA pods by the slots the allocator will
take, so it sorts a node's published slots with the same key. One rule, here, for both
sides (and for anything that models them).
"""

from __future__ import annotations


def eviction_key(bitstream: str | None, last_used: float | None, slot_id: str) -> tuple[bool, float, str]:
    """The sort key of a slot: empty (or unknown content, ``bitstream`` None) first, then the least recently
    used (``last_used`` in epoch seconds; None or 0 for never, which sorts first), then the slot ID."""
    return bitstream is not None, float(last_used or 0.0), slot_id

"""Which free slot is overwritten first: empty ones, then the least recently used, then by slot ID.

The DRA ResourceSlice lists slots in this order and the scheduler extender sorts by the same key."""

from __future__ import annotations


def eviction_key(bitstream: str | None, last_used: float | None, slot_id: str) -> tuple[bool, float, str]:
    """The sort key of a slot: empty (``bitstream`` None) first, then the least recently used (``last_used`` in
    epoch seconds, None for never), then the slot ID."""
    return bitstream is not None, float(last_used or 0.0), slot_id

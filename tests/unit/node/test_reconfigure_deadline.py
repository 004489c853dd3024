"""A start that finds its slot still being programmed for another start gives up at its own deadline."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.errors import ProgrammingTimeout
from agent.programming.catalogentry import CatalogEntry
from agent.slots.model import Slot
from agent.slots.registry import SlotRegistry
from tests.unit.reconfigure_support import make_slot
from tests.unit.reconfigure_support import reconfigurer as configured


class NeverCalled:
    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        raise AssertionError("the slot is busy: nothing may be programmed")


async def test_busy_slot_times_out_at_the_callers_deadline_and_changes_nothing() -> None:
    registry = SlotRegistry()
    slot = make_slot()
    registry.replace_all([slot])

    async def read_hardware() -> list[Slot]:
        return [slot]

    reconfigurer = configured(registry, NeverCalled(), read_hardware)
    entry = CatalogEntry("accel", "accel.bin", 1, "0" * 64, "p", "acc", "2026-01-01T00:00:00Z")
    lock = reconfigurer.loader._slot_locks.setdefault(slot.id, asyncio.Lock())
    await lock.acquire()  # another start is programming this slot and does not let go
    version = registry.version
    try:
        with pytest.raises(ProgrammingTimeout, match="still being programmed"):
            await reconfigurer.loader._program_locked(
                None,
                "pod ns/p container c (slots card0-slot0)",
                entry,
                b"x",
                [slot],
                time.monotonic() + 0.05,
                False,
            )
    finally:
        lock.release()
    assert registry.version == version
    state = registry.get(slot.id)
    assert state is not None
    assert state.taint is None

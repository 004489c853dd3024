"""A start that finds its slot still being programmed for another start gives up at its own deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from agent.errors import ProgrammingTimeout
from agent.programming.catalog import CatalogEntry
from agent.reconfigure import Reconfigurer
from agent.slots import DeviceNode, Health, Slot, SlotId, SlotRegistry


def make_slot() -> Slot:
    return Slot(
        id=SlotId("card0-slot0"),
        card="card0",
        region="slot0",
        numa=0,
        device_nodes=(DeviceNode("/dev/x", "/dev/x"),),
        platform="p",
        loaded=None,
        health=Health.HEALTHY,
        backend="sim",
    )


class NoContainers:
    async def find_container(self, device_ids: Sequence[str]) -> None:
        return None

    async def list_containers(self) -> list[object]:
        return []


class NeverCalled:
    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        raise AssertionError("the slot is busy: nothing may be programmed")


async def test_busy_slot_times_out_at_the_callers_deadline_and_changes_nothing() -> None:
    registry = SlotRegistry()
    slot = make_slot()
    registry.replace_all([slot])

    async def read_hardware() -> list[Slot]:
        return [slot]

    reconfigurer = Reconfigurer(
        registry,
        NoContainers(),  # type: ignore[arg-type]
        pods=None,
        catalog=None,
        programmers={"sim": NeverCalled()},
        read_hardware=read_hardware,
        events=None,
        timeout_s=5.0,
    )
    entry = CatalogEntry("accel", "accel.bin", 1, "0" * 64, "p", "acc", "2026-01-01T00:00:00Z")
    lock = reconfigurer._slot_locks.setdefault(slot.id, asyncio.Lock())
    await lock.acquire()  # another start is programming this slot and does not let go
    version = registry.version
    try:
        with pytest.raises(ProgrammingTimeout, match="still being programmed"):
            await reconfigurer._program_one(
                None,  # type: ignore[arg-type]
                "pod ns/p container c (slots card0-slot0)",
                entry,
                b"x",
                slot,
                time.monotonic() + 0.05,
            )
    finally:
        lock.release()
    assert registry.version == version
    state = registry.get(slot.id)
    assert state is not None
    assert state.taint is None

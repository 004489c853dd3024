"""A programmer that fails with an OSError (no space to stage the image, a scratch directory that
cannot be removed) fails the programming like any other failure: the slot is tainted, and recovered."""

from __future__ import annotations

import errno
import time

import pytest

from agent.errors import ProgrammingError
from agent.programming.catalogentry import CatalogEntry
from agent.slots.model import Slot
from agent.slots.registry import SlotRegistry
from tests.unit.reconfigure_support import make_slot
from tests.unit.reconfigure_support import reconfigurer as configured


class DiskFull:
    def __init__(self) -> None:
        self.calls = 0

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        self.calls += 1
        raise OSError(errno.ENOSPC, "No space left on device")


async def test_an_os_error_of_the_programmer_is_a_failed_programming_that_taints_the_slot() -> None:
    registry = SlotRegistry()
    slot = make_slot()
    registry.replace_all([slot])

    async def read_hardware() -> list[Slot]:
        return [slot]

    programmer = DiskFull()
    reconfigurer = configured(registry, programmer, read_hardware)
    entry = CatalogEntry("accel", "accel.bin", 1, "0" * 64, "p", "acc", "2026-01-01T00:00:00Z")
    who = "pod ns/p container c (slots card0-slot0)"
    try:
        with pytest.raises(ProgrammingError, match=r"programming slot card0-slot0 with accel failed: .*No space left"):
            await reconfigurer.loader._program_locked(None, who, entry, b"x", [slot], time.monotonic() + 5, False)
        state = registry.get(slot.id)
        assert state is not None
        assert state.taint is not None
        assert "No space left on device" in state.taint
        assert programmer.calls == 1
    finally:
        await reconfigurer.loader.close()

"""A slot that another start is still programming is not a cache hit, whatever it held before."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from agent.node.reconfigure import Reconfigurer
from agent.programming.catalogentry import CatalogEntry
from agent.slots.model import Slot
from agent.slots.registry import SlotRegistry
from tests.unit.reconfigure_support import make_slot
from tests.unit.reconfigure_support import reconfigurer as make_reconfigurer

OLD = CatalogEntry("old", "old.bin", 1, "0" * 64, "p", "acc-old", "2026-01-01T00:00:00Z")
NEW = CatalogEntry("new", "new.bin", 1, "1" * 64, "p", "acc-new", "2026-01-01T00:00:00Z")
WHO = "pod ns/p2 container c (slots card0-slot0)"


class Recorder:
    def __init__(self) -> None:
        self.loaded: list[str] = []

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        self.loaded.append(accelerator_id)
        return 0.001


def reconfigurer(registry: SlotRegistry, programmer: Recorder) -> Reconfigurer:
    async def read_hardware() -> list[Slot]:
        held = registry.get(make_slot().id)
        assert held is not None
        return [replace(held.slot, loaded=programmer.loaded[-1] if programmer.loaded else held.slot.loaded)]

    configured = make_reconfigurer(registry, programmer, read_hardware)
    configured.loader._read_image = lambda entry: b"image"  # type: ignore[method-assign]
    return configured


@pytest.mark.parametrize(("other", "programmed"), [(NEW, ["acc-old"]), (OLD, [])])
async def test_a_start_waits_for_the_programming_under_way_then_checks_again(
    other: CatalogEntry, programmed: list[str]
) -> None:
    """The slot held ``old``; another start (a pod force-deleted, say) is loading ``other`` into it when this
    start asks for ``old``. It must not take the slot as holding ``old``: it waits, then programs ``old``
    unless the other start loaded exactly that."""
    registry = SlotRegistry()
    slot = replace(make_slot(), loaded=OLD.accelerator_id)  # as DFL reports it: the old id until a new one reads
    registry.replace_all([slot])
    registry.record_content(slot.id, OLD.name, OLD.accelerator_id)
    programmer = Recorder()
    agent = reconfigurer(registry, programmer)
    lock = agent.loader._slot_locks.setdefault(slot.id, asyncio.Lock())
    await lock.acquire()  # the other start programs the slot
    registry.begin_programming(slot.id, other.name, other.accelerator_id)

    start = asyncio.create_task(agent.loader.load(None, WHO, OLD, [slot], time.monotonic() + 5))
    await asyncio.sleep(0.05)
    assert not start.done()  # not a hit: it waits for the slot
    registry.upsert(replace(slot, loaded=other.accelerator_id))  # the other start ends: the slot reads back
    registry.record_content(slot.id, other.name, other.accelerator_id)
    lock.release()
    await start

    assert programmer.loaded == programmed
    state = registry.get(slot.id)
    assert state is not None
    assert (state.bitstream, state.taint, state.programming) == ("old", None, None)

"""The interface every discovery backend implements, and several backends side by side (``--backend auto``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent.slots.model import Slot
from agent.slots.registry import SlotRegistry


@dataclass(frozen=True, slots=True)
class Skipped:
    """A device that looked like an FPGA slot but was not taken, and why."""

    device: str
    reason: str


@dataclass(frozen=True, slots=True)
class Enumeration:
    """The result of one full scan."""

    slots: list[Slot]
    skipped: list[Skipped] = field(default_factory=list)


class DeviceSource(Protocol):
    """Finds slots and reports every later change; no polling."""

    name: str

    async def enumerate(self) -> Enumeration:
        """Scan once and return every slot (and every skipped device)."""
        ...

    async def watch(self, sink: SlotRegistry) -> None:
        """Report a fresh enumeration, then each change, until cancelled."""
        ...


class CompositeSource:
    """Reports the union of its sources; each one replaces only its own slots."""

    def __init__(self, name: str, sources: Sequence[DeviceSource]) -> None:
        self.name = name
        self.sources = tuple(sources)

    async def enumerate(self) -> Enumeration:
        """Each source in turn (umockdev 0.17 breaks on two libudev enumerations in parallel threads)."""
        results = [await source.enumerate() for source in self.sources]
        return Enumeration(
            slots=[slot for result in results for slot in result.slots],
            skipped=[skip for result in results for skip in result.skipped],
        )

    async def watch(self, sink: SlotRegistry) -> None:
        async with asyncio.TaskGroup() as group:
            for source in self.sources:
                group.create_task(source.watch(sink), name=f"discovery {source.name}")

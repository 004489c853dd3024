"""The interface every discovery backend implements."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from agent.slots import Slot, SlotId


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


class SlotSink(Protocol):
    """Where a backend reports changes (the agent's SlotRegistry)."""

    def replace_all(self, slots: Iterable[Slot], backend: str | None = None) -> None: ...
    def upsert(self, slot: Slot) -> None: ...
    def remove(self, slot_id: SlotId) -> None: ...


class DeviceSource(Protocol):
    """Finds slots and reports every later change; no polling."""

    name: str

    async def enumerate(self) -> Enumeration:
        """Scan once and return every slot (and every skipped device)."""
        ...

    async def watch(self, sink: SlotSink) -> None:
        """Report a fresh enumeration, then each change, until cancelled."""
        ...

"""A reconfigurer over one simulated slot, for unit tests of its decisions (no kubelet, no API server)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agent.node.reconfigure import Reconfigurer
from agent.programming.catalog import Catalog
from agent.slots.model import Slot
from agent.slots.registry import SlotRegistry
from tests.unit.slots.factories import make_slot as slot_factory


def make_slot() -> Slot:
    """The one slot: card0-slot0 of platform "p", programmed by the "sim" programmer."""
    return slot_factory(platform="p", backend="sim")


class NoContainers:
    async def find_container(self, device_ids: Sequence[str]) -> None:
        return None

    async def list_containers(self) -> list[object]:
        return []


def reconfigurer(
    registry: SlotRegistry,
    programmer: Any,
    read_hardware: Callable[[], Awaitable[list[Slot]]],
    catalog: Catalog | None = None,
    backend: str = "sim",
) -> Reconfigurer:
    """The agent's reconfigurer for the registry's slots, programming through ``programmer`` (slots of ``backend``)."""
    return Reconfigurer(
        registry,
        NoContainers(),  # type: ignore[arg-type]
        pods=None,
        catalog=catalog,
        programmers={backend: programmer},
        read_hardware=read_hardware,
        events=None,
        timeout_s=5.0,
    )

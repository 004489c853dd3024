"""Running one DeviceSource's watch loop into a SlotRegistry, without the device plugin."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from agent.discovery.base import DeviceSource
from agent.slots.registry import SlotRegistry

TIMEOUT_S = 5.0


@contextlib.asynccontextmanager
async def watching(source: DeviceSource) -> AsyncIterator[SlotRegistry]:
    """Run ``source.watch`` into a fresh registry; cancel it (closing its monitor) afterwards."""
    registry = SlotRegistry()
    task = asyncio.create_task(source.watch(registry), name=f"watch {source.name} under test")
    try:
        yield registry
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wait_registry(registry: SlotRegistry, predicate: Callable[[], bool]) -> None:
    """Wait (on the registry's change notification) until ``predicate()`` holds."""
    async with asyncio.timeout(TIMEOUT_S):
        while not predicate():
            await registry.wait_for_change(registry.version)

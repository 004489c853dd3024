"""Several backends side by side (``--backend auto``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agent.discovery.base import DeviceSource, Enumeration, SlotSink


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

    async def watch(self, sink: SlotSink) -> None:
        async with asyncio.TaskGroup() as group:
            for source in self.sources:
                group.create_task(source.watch(sink), name=f"discovery {source.name}")

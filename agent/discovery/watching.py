"""The watch loop shared by the udev-backed sources: scan, report, wait for uevents, full rescan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from agent.discovery.base import Enumeration
from agent.discovery.udev import UdevMonitor
from agent.errors import DiscoveryError
from agent.slots.registry import SlotRegistry

logger = logging.getLogger(__name__)

#: After a failed rescan, how long to wait for a uevent before trying again anyway.
RESCAN_RETRY_S = 5.0


class UdevSource:
    """A DeviceSource defined by a blocking ``scan`` and the subsystems whose events matter."""

    def __init__(self, name: str, scan: Callable[[], Enumeration], subsystems: Iterable[str] | None) -> None:
        self.name = name
        self._scan = scan
        self._subsystems = None if subsystems is None else tuple(subsystems)

    async def enumerate(self) -> Enumeration:
        return await asyncio.to_thread(self._scan)

    async def watch(self, sink: SlotRegistry) -> None:
        async with UdevMonitor(self._subsystems, self.name) as monitor:
            reported: set[tuple[str, str]] = set()
            failing = False
            while True:
                try:
                    enumeration = await self.enumerate()
                except DiscoveryError as exc:
                    if not failing:
                        logger.error("backend %s: rescan failed, keeping the last known slots: %s", self.name, exc)
                    failing = True
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(RESCAN_RETRY_S):
                            await monitor.changed()
                    continue
                if failing:
                    logger.info("backend %s: rescan works again", self.name)
                    failing = False
                sink.replace_all(enumeration.slots, backend=self.name)
                skipped = {(s.device, s.reason) for s in enumeration.skipped}
                for device, reason in sorted(skipped - reported):
                    logger.warning("backend %s skipped %s: %s", self.name, device, reason)
                reported = skipped
                await monitor.changed()

"""A rescan that fails keeps the last known slots and does not end discovery."""

from __future__ import annotations

import asyncio

from agent.discovery.base import Enumeration
from agent.discovery.dfl import scan_dfl
from agent.discovery.watching import UdevSource
from agent.errors import DiscoveryError
from tests.integration.udev.sourcewatch import wait_registry, watching
from tests.udevbed import ALL_ONES, UdevTestbed, two_dfl_cards


async def test_failed_rescan_keeps_slots_and_the_next_event_recovers(udevbed: UdevTestbed) -> None:
    card, other = two_dfl_cards()
    udevbed.add(card.record())
    udevbed.add(other.record())
    calls = {"n": 0, "fail": False}
    loop = asyncio.get_running_loop()
    failed = asyncio.Event()

    def flaky_scan() -> Enumeration:  # runs in a worker thread
        calls["n"] += 1
        if calls["fail"]:
            calls["fail"] = False
            loop.call_soon_threadsafe(failed.set)
            raise DiscoveryError("udev enumeration of subsystem 'platform' failed: injected")
        return scan_dfl()

    source = UdevSource("dfl", flaky_scan, ("platform", "pci", "fpga_region"))
    async with watching(source) as registry:
        await wait_registry(registry, lambda: len(registry.snapshot()) == 5)
        port = card.port_path(card.port_indexes[0])

        calls["fail"] = True
        udevbed.set_attribute(port, "afu_id", ALL_ONES)
        udevbed.uevent(port, "change")
        async with asyncio.timeout(5):
            await failed.wait()
        # The failed rescan left the last known state in place.
        assert len(registry.snapshot()) == 5
        assert all(state.slot.health.value == "Healthy" for state in registry.snapshot())

        udevbed.uevent(port, "change")
        slot_id = card.slot_id(0)
        await wait_registry(registry, lambda: registry.get(slot_id).health.value == "Unhealthy")  # type: ignore[union-attr]

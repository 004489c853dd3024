"""SimSource: simulated cards reported through the DeviceSource contract."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agent.discovery.sim import CONTAINER_DEV_DIR, SimSource, slot_from_sim
from agent.simfpga import SimFabric, SimSlotInfo
from agent.simfpga.fabric import PLATFORM, Listener
from agent.slots.model import DeviceNode, Health, SlotId
from agent.slots.registry import SlotRegistry, SlotState

WAIT_S = 5.0


@pytest.fixture
def fabric(tmp_path: Path) -> SimFabric:
    return SimFabric(tmp_path / "dev", cards=2, slots_per_card=2, program_s=0)


@pytest.fixture
def registry() -> SlotRegistry:
    return SlotRegistry()


@pytest.fixture
async def watching(fabric: SimFabric, registry: SlotRegistry) -> AsyncIterator[asyncio.Task[None]]:
    """SimSource.watch feeding the registry, cancelled (and awaited) after the test."""
    task = asyncio.create_task(SimSource(fabric).watch(registry), name="sim-watch")
    try:
        await wait_until(registry, lambda: len(registry.snapshot()) == 4)
        yield task
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def wait_until(registry: SlotRegistry, predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        seen = registry.version
        while not predicate():
            seen = await registry.wait_for_change(seen)


def state(registry: SlotRegistry, slot_id: str) -> SlotState:
    found = registry.get(SlotId(slot_id))
    assert found is not None, f"{slot_id} not listed"
    return found


# ------------------------------------------------------------------ translation
@pytest.mark.parametrize(
    ("healthy", "reason", "health"),
    [
        pytest.param(True, "", Health.HEALTHY, id="healthy"),
        pytest.param(False, "CRC error", Health.UNHEALTHY, id="unhealthy"),
    ],
)
def test_slot_from_sim(healthy: bool, reason: str, health: Health) -> None:
    info = SimSlotInfo(
        card="simcard1",
        region="slot3",
        numa=1,
        device_path="/tmp/dev/fpga-sim-simcard1-slot3",
        platform=PLATFORM,
        loaded="aes-v1",
        healthy=healthy,
        reason=reason,
    )
    slot = slot_from_sim(info)
    assert slot.id == "simcard1-slot3"
    assert (slot.card, slot.region, slot.numa, slot.platform, slot.loaded) == (
        "simcard1",
        "slot3",
        1,
        PLATFORM,
        "aes-v1",
    )
    assert slot.device_nodes == (DeviceNode("/tmp/dev/fpga-sim-simcard1-slot3", f"{CONTAINER_DEV_DIR}/simcard1-slot3"),)
    assert (slot.health, slot.reason, slot.backend) == (health, reason, "sim")


async def test_enumerate_reports_every_slot(fabric: SimFabric) -> None:
    enumeration = await SimSource(fabric).enumerate()
    assert [slot.id for slot in enumeration.slots] == [
        "simcard0-slot0",
        "simcard0-slot1",
        "simcard1-slot0",
        "simcard1-slot1",
    ]
    assert enumeration.skipped == []
    assert [slot.device_nodes[0].host_path for slot in enumeration.slots] == [
        info.device_path for info in fabric.slots()
    ]


async def test_enumerate_without_cards_is_empty(tmp_path: Path) -> None:
    fabric = SimFabric(tmp_path / "dev", cards=0, slots_per_card=1, program_s=0)
    assert (await SimSource(fabric).enumerate()).slots == []


async def test_enumerate_sees_programmed_content(fabric: SimFabric) -> None:
    await fabric.program("simcard1", "slot0", "fft")
    slots = {slot.id: slot for slot in (await SimSource(fabric).enumerate()).slots}
    assert slots[SlotId("simcard1-slot0")].loaded == "fft"


# ---------------------------------------------------------------------- watch
@pytest.mark.usefixtures("watching")
async def test_watch_reports_health_changes(fabric: SimFabric, registry: SlotRegistry) -> None:
    fabric.set_health("simcard0", "slot1", healthy=False, reason="CRC error")
    await wait_until(registry, lambda: state(registry, "simcard0-slot1").health is Health.UNHEALTHY)
    assert state(registry, "simcard0-slot1").slot.reason == "CRC error"
    fabric.set_health("simcard0", "slot1", healthy=True)
    await wait_until(registry, lambda: state(registry, "simcard0-slot1").health is Health.HEALTHY)


@pytest.mark.usefixtures("watching")
async def test_watch_reports_programmed_content(fabric: SimFabric, registry: SlotRegistry) -> None:
    await fabric.program("simcard1", "slot1", "aes-v1")
    await wait_until(registry, lambda: state(registry, "simcard1-slot1").slot.loaded == "aes-v1")


@pytest.mark.usefixtures("watching")
async def test_watch_reports_unplug_and_plug(fabric: SimFabric, registry: SlotRegistry) -> None:
    registry.assign([["simcard1-slot0"]])
    fabric.unplug("simcard1")
    await wait_until(registry, lambda: registry.get(SlotId("simcard1-slot1")) is None)
    held = state(registry, "simcard1-slot0")
    assert not held.present
    assert held.health is Health.UNHEALTHY

    fabric.plug("simcard1")
    await wait_until(registry, lambda: len(registry.snapshot()) == 4 and all(s.present for s in registry.snapshot()))
    assert state(registry, "simcard1-slot0").health is Health.HEALTHY
    assert state(registry, "simcard1-slot0").holder is not None


async def test_watch_starts_with_a_full_enumeration(fabric: SimFabric, registry: SlotRegistry) -> None:
    registry.upsert(slot_from_sim(fabric.slots()[0]))
    fabric.unplug("simcard1")  # before the watch starts: only the enumeration can tell
    task = asyncio.create_task(SimSource(fabric).watch(registry))
    try:
        await wait_until(registry, lambda: len(registry.snapshot()) == 2)
        assert [s.slot.id for s in registry.snapshot()] == ["simcard0-slot0", "simcard0-slot1"]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_watch_unsubscribes_when_cancelled(
    fabric: SimFabric, registry: SlotRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    subscribed: list[Listener] = []
    unsubscribed: list[Listener] = []
    real_subscribe = fabric.subscribe

    def spy(listener: Listener) -> Callable[[], None]:
        unsubscribe = real_subscribe(listener)
        subscribed.append(listener)

        def spied_unsubscribe() -> None:
            unsubscribed.append(listener)
            unsubscribe()

        return spied_unsubscribe

    monkeypatch.setattr(fabric, "subscribe", spy)
    task = asyncio.create_task(SimSource(fabric).watch(registry))
    await wait_until(registry, lambda: len(registry.snapshot()) == 4)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(subscribed) == 1
    assert unsubscribed == subscribed

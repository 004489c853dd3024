"""Hot-plug end to end: uevents from umockdev reach the kubelet stand-in's ListAndWatch stream.

A real agent (udev backend, real gRPC over unix sockets) runs against the kubelet
stand-in; the test bed plugs, unplugs and changes devices and sends the uevents the
kernel would. Nothing polls: every wait is on the stand-in's change notification.

umockdev aborts the process when a monitor socket holds more than 10 unread events,
so no step here sends more than that before the agent gets to read them.
"""

from __future__ import annotations

import errno
import os
import statistics
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pyudev

from agent.discovery.dfl import dfl_source
from agent.slots.model import Health, SlotId
from tests.fakes import RESOURCE_NAME, AgentHarness
from tests.integration.udev.sourcewatch import wait_registry, watching
from tests.udevbed import ALL_ONES, FakeDflCard, FakeFpgaManager, UdevTestbed, two_dfl_cards

pytestmark = pytest.mark.udev

TIMEOUT_S = 5.0
Cards = tuple[FakeDflCard, FakeDflCard]


@pytest.fixture
def cards(udevbed: UdevTestbed) -> Cards:
    """Two DFL cards (2 + 3 ports) plugged in before the agent starts."""
    plugged = two_dfl_cards()
    for card in plugged:
        udevbed.add(card.record())
    return plugged


@pytest.fixture(params=["dfl", "auto"])
async def card_agent(request: pytest.FixtureRequest, cards: Cards, sock_dir: Path) -> AsyncIterator[AgentHarness]:
    """A real agent over the two cards, with the dfl backend alone or every backend (auto)."""
    async with AgentHarness.running(sock_dir, expected_devices=5, backend=request.param) as harness:
        yield harness


def every_port(cards: Cards) -> list[tuple[FakeDflCard, int]]:
    return [(card, number) for card in cards for number in range(len(card.port_indexes))]


def health(harness: AgentHarness) -> dict[str, str]:
    return {device_id: device.health for device_id, device in harness.conn.devices.items()}


async def wait_until(harness: AgentHarness, predicate: Callable[[], bool]) -> None:
    await harness.kubelet.wait_for(predicate, TIMEOUT_S)


async def wait_health(harness: AgentHarness, slot_id: str, expected: str | None) -> None:
    """Wait until the stand-in lists ``slot_id`` with ``expected`` health (None: not listed)."""
    await wait_until(harness, lambda: health(harness).get(slot_id) == expected)


# ---------------------------------------------------------------- discovery
async def test_registers_and_lists_every_port(card_agent: AgentHarness, cards: Cards) -> None:
    devices = card_agent.conn.devices

    assert card_agent.kubelet.registrations[0].resource_name == RESOURCE_NAME
    assert sorted(devices) == sorted(card.slot_id(n) for card, n in every_port(cards))
    for card, number in every_port(cards):
        device = devices[card.slot_id(number)]
        assert device.health == "Healthy"
        assert [node.ID for node in device.topology.nodes] == [card.numa]


async def test_allocate_hands_out_the_port_node_only(card_agent: AgentHarness, cards: Cards) -> None:
    admitted = await card_agent.kubelet.admit("default", "pod-a", "main", RESOURCE_NAME, 1)

    (slot_id,) = admitted.device_ids
    port = next(card.port_indexes[n] for card, n in every_port(cards) if card.slot_id(n) == slot_id)
    assert [(d.host_path, d.container_path, d.permissions) for d in admitted.response.devices] == [
        (f"/dev/dfl-port.{port}", f"/dev/dfl-port.{port}", "rw")
    ]
    assert admitted.response.envs["FPGA_SLOTS"] == slot_id


# ------------------------------------------------------------------- health
async def test_crashed_afu_turns_unhealthy_and_recovers_by_itself(
    card_agent: AgentHarness, cards: Cards, udevbed: UdevTestbed
) -> None:
    card = cards[1]
    path, slot_id = card.port_path(card.port_indexes[1]), card.slot_id(1)

    udevbed.set_attribute(path, "afu_id", ALL_ONES)
    udevbed.uevent(path, "change")
    await wait_health(card_agent, slot_id, "Unhealthy")

    assert {i: h for i, h in health(card_agent).items() if i != slot_id} == {
        c.slot_id(n): "Healthy" for c, n in every_port(cards) if c.slot_id(n) != slot_id
    }
    state = card_agent.agent.registry.get(SlotId(slot_id))
    assert state is not None
    assert "afu_id" in state.slot.reason

    udevbed.set_attribute(path, "afu_id", card.afu_ids[1])
    udevbed.uevent(path, "change")
    await wait_health(card_agent, slot_id, "Healthy")


async def test_crashed_interface_turns_the_whole_card_unhealthy(
    card_agent: AgentHarness, cards: Cards, udevbed: UdevTestbed
) -> None:
    first, second = cards

    udevbed.set_attribute(second.fme_region_path, "compat_id", ALL_ONES)
    udevbed.uevent(second.fme_region_path, "change")
    await wait_until(card_agent, lambda: all(health(card_agent)[second.slot_id(n)] == "Unhealthy" for n in range(3)))

    assert [health(card_agent)[first.slot_id(n)] for n in range(2)] == ["Healthy", "Healthy"]

    udevbed.set_attribute(second.fme_region_path, "compat_id", second.interface_id)
    udevbed.uevent(second.fme_region_path, "change")
    await wait_until(card_agent, lambda: set(health(card_agent).values()) == {"Healthy"})


# ----------------------------------------------------------------- hot-plug
async def test_unplugged_free_port_disappears_and_comes_back(
    card_agent: AgentHarness, cards: Cards, udevbed: UdevTestbed
) -> None:
    card = cards[0]
    path, slot_id = card.port_path(card.port_indexes[1]), card.slot_id(1)

    udevbed.remove(path)
    await wait_health(card_agent, slot_id, None)
    assert len(card_agent.conn.devices) == 4
    assert set(health(card_agent).values()) == {"Healthy"}

    udevbed.add(card.port_record(1))
    udevbed.uevent(path, "add")
    await wait_health(card_agent, slot_id, "Healthy")
    assert len(card_agent.conn.devices) == 5


async def test_unplugged_card_takes_all_its_ports(card_agent: AgentHarness, cards: Cards, udevbed: UdevTestbed) -> None:
    first, second = cards

    for index in second.port_indexes:
        udevbed.remove(second.port_path(index))
    udevbed.remove(second.fme_region_path)
    udevbed.remove(second.fme_manager_path)
    udevbed.remove(second.fme_path)
    udevbed.remove(second.region_path)
    udevbed.remove(second.pci_path)
    await wait_until(card_agent, lambda: sorted(card_agent.conn.devices) == [first.slot_id(0), first.slot_id(1)])


async def test_held_port_that_vanishes_stays_listed_unhealthy(
    card_agent: AgentHarness, cards: Cards, udevbed: UdevTestbed
) -> None:
    admitted = await card_agent.kubelet.admit("default", "pod-a", "main", RESOURCE_NAME, 1)
    (slot_id,) = admitted.device_ids
    card, number = next((c, n) for c, n in every_port(cards) if c.slot_id(n) == slot_id)
    path = card.port_path(card.port_indexes[number])
    registry = card_agent.agent.registry

    udevbed.remove(path)
    await wait_health(card_agent, slot_id, "Unhealthy")
    assert len(card_agent.conn.devices) == 5
    state = registry.get(SlotId(slot_id))
    assert state is not None
    assert not state.present
    assert state.holder is not None

    # plugged back while still held: present and healthy again
    udevbed.add(card.port_record(number))
    udevbed.uevent(path, "add")
    await wait_health(card_agent, slot_id, "Healthy")

    # gone again, then released: it leaves the list
    udevbed.remove(path)
    await wait_health(card_agent, slot_id, "Unhealthy")
    registry.release([SlotId(slot_id)])
    await wait_health(card_agent, slot_id, None)
    assert len(card_agent.conn.devices) == 4


async def test_auto_on_an_empty_node_picks_up_hotplugged_hardware(udevbed: UdevTestbed, sock_dir: Path) -> None:
    card = two_dfl_cards()[0]
    manager = FakeFpgaManager("fpga7", "Xilinx Zynq FPGA Manager", "operating", ("region7", "region8"))

    async with AgentHarness.running(sock_dir, expected_devices=0, backend="auto") as harness:
        assert harness.conn.devices == {}

        udevbed.add(card.record())  # adding announces every device of the card
        await wait_until(harness, lambda: health(harness) == {card.slot_id(0): "Healthy", card.slot_id(1): "Healthy"})

        udevbed.add(manager.record())
        await wait_until(harness, lambda: len(harness.conn.devices) == 4)
        assert health(harness)["fpga7-region7"] == "Healthy"

        udevbed.set_attribute(manager.manager_path, "state", "write error")
        udevbed.uevent(manager.manager_path, "change")
        await wait_until(
            harness,
            lambda: (
                health(harness)
                == {
                    card.slot_id(0): "Healthy",
                    card.slot_id(1): "Healthy",
                    "fpga7-region7": "Unhealthy",
                    "fpga7-region8": "Unhealthy",
                }
            ),
        )


# ------------------------------------------------------------------ latency
async def test_every_change_reaches_list_and_watch(
    card_agent: AgentHarness, cards: Cards, udevbed: UdevTestbed
) -> None:
    """Flip one port's health repeatedly; each flip is seen. Prints the latency (not asserted)."""
    card = cards[0]
    path, slot_id = card.port_path(card.port_indexes[0]), card.slot_id(0)
    latencies_ms: list[float] = []

    for flip in range(40):
        expected = "Unhealthy" if flip % 2 == 0 else "Healthy"
        udevbed.set_attribute(path, "afu_id", ALL_ONES if expected == "Unhealthy" else card.afu_ids[0])
        seen = len(card_agent.conn.updates)
        sent = time.monotonic()
        udevbed.uevent(path, "change")
        await wait_health(card_agent, slot_id, expected)
        arrived = next(
            at
            for at, devices in card_agent.conn.updates[seen:]
            if {device.ID: device.health for device in devices}.get(slot_id) == expected
        )
        latencies_ms.append((arrived - sent) * 1000)

    print(
        f"\nudev change event -> ListAndWatch update over {len(latencies_ms)} events: "
        f"median {statistics.median(latencies_ms):.2f} ms, max {max(latencies_ms):.2f} ms"
    )


# ------------------------------------------------------------------ monitor
async def test_lost_events_lead_to_a_rescan(
    cards: Cards, udevbed: UdevTestbed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the kernel drops uevents (ENOBUFS on the netlink socket), the source rescans anyway."""
    card = cards[0]
    path, slot_id = card.port_path(card.port_indexes[0]), SlotId(card.slot_id(0))
    real_poll = pyudev.Monitor.poll
    dropped: list[object] = []

    def overflowing_poll(self: pyudev.Monitor, timeout: float | None = None) -> pyudev.Device | None:
        if not dropped:
            dropped.append(real_poll(self, timeout))  # this event is lost...
            raise OSError(errno.ENOBUFS, os.strerror(errno.ENOBUFS))  # ...and the socket says so
        return real_poll(self, timeout)

    async with watching(dfl_source()) as registry:
        await wait_registry(registry, lambda: len(registry.snapshot()) == 5)
        monkeypatch.setattr(pyudev.Monitor, "poll", overflowing_poll)

        udevbed.set_attribute(path, "afu_id", ALL_ONES)
        udevbed.uevent(path, "change")

        await wait_registry(registry, lambda: getattr(registry.get(slot_id), "health", None) is Health.UNHEALTHY)
        assert len(dropped) == 1
        assert dropped[0] is not None

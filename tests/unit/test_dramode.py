"""The slots as the ResourceSlice and the resource-health stream show them."""

from __future__ import annotations

from agent.dra import DeviceHealth
from agent.dramode import device_health, slice_devices
from agent.kube.resourceslices import slice_spec
from agent.slots import DeviceNode, Health, Slot, SlotId, SlotRegistry


def make_slot(card: str, region: str, *, numa: int | None = 0, health: Health = Health.HEALTHY) -> Slot:
    return Slot(
        id=SlotId(f"{card}-{region}".replace(":", "-")),
        card=card,
        region=region,
        numa=numa,
        device_nodes=(DeviceNode(f"/dev/{card}", f"/dev/{card}"),),
        platform="a10-pr-v1",
        loaded=None,
        health=health,
        backend="sim",
        reason="" if health is Health.HEALTHY else "port error",
    )


def test_each_slot_is_one_device_with_what_it_holds() -> None:
    registry = SlotRegistry()
    registry.replace_all([make_slot("c0", "p0"), make_slot("0000-3b-00.0", "p1", numa=None)])
    registry.record_content(SlotId("c0-p0"), "fft", "acc-fft")
    devices = {d.name: dict(d.attributes) for d in slice_devices(registry.snapshot())}
    assert devices == {
        "c0-p0": {
            "platform": "a10-pr-v1",
            "card": "c0",
            "region": "p0",
            "numa": 0,
            "bitstream": "fft",
            "accelerator": "acc-fft",
            "healthy": True,
        },
        "0000-3b-00-0-p1": {  # the dot of the PCI address is not in a DNS label; no NUMA node known: none said
            "platform": "a10-pr-v1",
            "card": "0000-3b-00.0",
            "region": "p1",
            "bitstream": "",
            "accelerator": "",
            "healthy": True,
        },
    }
    slice_spec("fpga.example.com", "node-a", slice_devices(registry.snapshot()))  # within the API's limits


def test_a_slot_being_programmed_shows_no_bitstream_and_an_unhealthy_one_says_why() -> None:
    registry = SlotRegistry()
    registry.replace_all([make_slot("c0", "p0"), make_slot("c0", "p1", health=Health.UNHEALTHY)])
    registry.record_content(SlotId("c0-p0"), "fft", "acc-fft")
    registry.begin_programming(SlotId("c0-p0"), "aes", "acc-aes")
    devices = {d.name: d.attributes for d in slice_devices(registry.snapshot())}
    assert (devices["c0-p0"]["bitstream"], devices["c0-p0"]["accelerator"]) == ("", "")
    assert devices["c0-p1"]["healthy"] is False
    assert device_health("node-a", registry.snapshot()) == [
        DeviceHealth("node-a", "c0-p0", True, ""),
        DeviceHealth("node-a", "c0-p1", False, "port error"),
    ]

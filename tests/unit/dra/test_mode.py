"""The slots as the ResourceSlice and the resource-health stream show them."""

from __future__ import annotations

import dataclasses

from agent.dra.health import DeviceHealth
from agent.dra.mode import SLOT_CAPACITY, UNHEALTHY_TAINT, bitstream_capacity, device_health, slice_devices
from agent.dra.naming import disambiguated_name
from agent.extender.nodestate import read_published_state
from agent.kube.resourceslices import DeviceTaint, SliceDevice, slice_spec
from agent.slots.model import Health, SlotId
from agent.slots.published import state_object, state_spec
from agent.slots.registry import SlotRegistry
from tests.unit.slots.factories import make_slot


def test_each_slot_is_one_device_with_what_it_holds() -> None:
    registry = SlotRegistry()
    registry.replace_all([make_slot("c0", "p0"), make_slot("0000:3b:00.0", "p1", numa=None)])
    registry.record_content(SlotId("c0-p0"), "fft", "acc-fft")
    devices = {d.name: dict(d.attributes) for d in slice_devices(registry.snapshot())}
    # Only what claims select on: each attribute costs the scheduler a conversion per CEL evaluation.
    assert devices == {
        "c0-p0": {"platform": "test-pr", "card": "c0", "numa": 0, "bitstream": "fft"},
        # the dot of the PCI address is not in a DNS label; no NUMA node known: none said
        "0000-3b-00-0-p1": {"platform": "test-pr", "card": "0000:3b:00.0", "bitstream": ""},
    }
    slice_spec("fpga.example.com", "node-a", slice_devices(registry.snapshot()))  # within the API's limits


def test_every_device_has_the_slot_capacity_and_the_capacity_of_the_bitstream_it_holds() -> None:
    """A claim asks for a slot, or for a slot holding a bitstream, by capacity (no CEL); a slot being programmed
    holds nothing yet, and a bitstream name too long for a capacity name has none."""
    registry = SlotRegistry()
    registry.replace_all([make_slot("c0", f"p{i}") for i in range(4)])
    registry.record_content(SlotId("c0-p0"), "aes-v1", "acc-aes")
    registry.record_content(SlotId("c0-p1"), "fft", "acc-fft")
    registry.begin_programming(SlotId("c0-p1"), "aes-v1", "acc-aes")
    registry.record_content(SlotId("c0-p2"), "x" * 30, "acc-x")
    devices = {d.name: dict(d.capacity) for d in slice_devices(registry.snapshot())}
    assert devices == {
        "c0-p0": {SLOT_CAPACITY: 1, "fpga.example.com/bs_aes_dv1": 1},
        "c0-p1": {SLOT_CAPACITY: 1},
        "c0-p2": {SLOT_CAPACITY: 1},
        "c0-p3": {SLOT_CAPACITY: 1},
    }


def test_bitstream_capacity_names_are_one_per_bitstream_and_within_the_api_limit() -> None:
    names = ["a-b", "a_b", "a.b", "a__b", "a_db", "a-_b", "ab", "a--b", "a.-b", "a", "0", "z" * 26]
    keys = [bitstream_capacity(name) for name in names]
    assert None not in keys
    assert len(set(keys)) == len(names)  # escaping keeps names apart
    assert bitstream_capacity("a-b") == "fpga.example.com/bs_a_db"
    assert bitstream_capacity("z" * 29) is not None  # bs_ and 29 characters: 32, the most a name may have
    assert bitstream_capacity("z" * 30) is None
    assert bitstream_capacity("z" * 28 + "-") is None  # escaped, it is 30 characters long
    devices = [SliceDevice("s", {}, capacity={key: 1}) for key in keys if key]
    slice_spec("fpga.example.com", "node-a", devices)  # every key is a name the API takes


def test_a_slot_being_programmed_shows_no_bitstream_and_an_unhealthy_one_says_why() -> None:
    registry = SlotRegistry()
    registry.replace_all([make_slot("c0", "p0"), make_slot("c0", "p1", health=Health.UNHEALTHY, reason="port error")])
    registry.record_content(SlotId("c0-p0"), "fft", "acc-fft")
    registry.begin_programming(SlotId("c0-p0"), "aes", "acc-aes")
    devices = {d.name: d for d in slice_devices(registry.snapshot())}
    assert devices["c0-p0"].attributes["bitstream"] == ""
    assert (devices["c0-p0"].taints, devices["c0-p1"].taints) == ((), (DeviceTaint(UNHEALTHY_TAINT),))
    assert "healthy" not in devices["c0-p1"].attributes  # the taint says it
    assert device_health("node-a", registry.snapshot()) == [
        DeviceHealth("node-a", "c0-p0", True, ""),
        DeviceHealth("node-a", "c0-p1", False, "port error"),
    ]


def test_the_slice_lists_empty_slots_first_then_the_least_recently_used() -> None:
    clock = [100.0]
    registry = SlotRegistry(clock=lambda: clock[0])
    registry.replace_all([make_slot("c0", f"p{i}") for i in range(4)])
    for slot_id, bitstream, used_at in (("c0-p0", "fft", 300.0), ("c0-p1", "aes", 200.0), ("c0-p3", "fft", 400.0)):
        clock[0] = used_at
        registry.record_content(SlotId(slot_id), bitstream, f"acc-{bitstream}")
    # The allocator takes the first free matching devices: a slot to program is the empty one, then the LRU.
    assert [d.name for d in slice_devices(registry.snapshot())] == ["c0-p2", "c0-p1", "c0-p0", "c0-p3"]


def test_two_slots_with_one_plain_device_name_are_both_devices_and_in_the_health_list() -> None:
    registry = SlotRegistry()
    # Cards named so that the slot IDs differ only in a '.' and a '-': one DNS label for both.
    registry.replace_all([make_slot("0000:3b:00.0", "p1"), make_slot("0000:3b:00-0", "p1"), make_slot("c0", "p0")])
    dotted = disambiguated_name("0000-3b-00.0-p1")
    assert sorted(d.name for d in slice_devices(registry.snapshot())) == sorted(["0000-3b-00-0-p1", dotted, "c0-p0"])
    assert sorted((h.device, h.healthy) for h in device_health("node-a", registry.snapshot())) == sorted(
        [("0000-3b-00-0-p1", True), (dotted, True), ("c0-p0", True)]
    )
    slice_spec("fpga.example.com", "node-a", slice_devices(registry.snapshot()))  # the API takes it: no duplicate


def test_an_unhealthy_slot_carries_the_no_schedule_taint_and_loses_it_when_it_recovers() -> None:
    registry = SlotRegistry()
    registry.replace_all([make_slot("c0", "p0"), make_slot("c0", "p1", health=Health.UNHEALTHY, reason="crashed")])
    taints = {d.name: d.taints for d in slice_devices(registry.snapshot())}
    assert taints == {"c0-p0": (), "c0-p1": (DeviceTaint(UNHEALTHY_TAINT, "NoSchedule"),)}
    spec = slice_spec("fpga.example.com", "node-a", slice_devices(registry.snapshot()))
    rendered = {d["name"]: d.get("taints") for d in spec["devices"]}
    assert rendered == {"c0-p0": None, "c0-p1": [{"key": "fpga.example.com/unhealthy", "effect": "NoSchedule"}]}
    registry.upsert(make_slot("c0", "p1"))  # healthy again
    assert all(d.taints == () for d in slice_devices(registry.snapshot()))


def test_the_slice_lists_free_slots_in_the_order_the_extender_scores_dra_pods_by() -> None:
    """One rule (agent.slots.eviction_key) for the slice the scheduler's allocator walks and for the extender,
    which reads the same slots from the FpgaNodeState (last use in whole seconds) and predicts what it takes."""
    registry = SlotRegistry()
    registry.replace_all([make_slot("c0", f"p{i}") for i in range(5)])
    for slot_id, bitstream in (("c0-p0", "aes"), ("c0-p1", "sha"), ("c0-p3", "gz"), ("c0-p4", "fft")):
        registry.record_content(SlotId(slot_id), bitstream, f"acc-{bitstream}")
    used = {"c0-p0": 1_700_000_300.0, "c0-p1": 1_700_000_100.0, "c0-p3": 1_700_000_300.0}
    states = [dataclasses.replace(s, last_used=used.get(str(s.slot.id))) for s in registry.snapshot()]
    in_slice = [device.name for device in slice_devices(states)]
    published = state_object("node-a", "fpga-slot", state_spec("node-a", states, {"aes": "test-pr"}))
    _, node = read_published_state(published)
    assert node is not None
    assert [slot["id"] for slot in node.free_order] == in_slice == ["c0-p2", "c0-p4", "c0-p1", "c0-p0", "c0-p3"]

"""The dfl backend over fake DFL cards: real libudev enumeration, the kernel's sysfs layout."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from agent.discovery import udev
from agent.discovery.dfl import scan_dfl
from agent.slots.model import DeviceNode, Health, Slot
from tests.udevbed import (
    AFU_DMA,
    AFU_NLB,
    ALL_ONES,
    INTERFACE_N3000,
    FakeDflCard,
    UdevTestbed,
    two_dfl_cards,
)

pytestmark = pytest.mark.udev


def by_id(slots: list[Slot]) -> dict[str, Slot]:
    return {slot.id: slot for slot in slots}


def add_cards(bed: UdevTestbed, *cards: FakeDflCard) -> None:
    for card in cards:
        bed.add(card.record())


def without_block(record: str, sys_path: str) -> str:
    """The record minus the device at ``sys_path``."""
    blocks = record.split("\n\n")
    kept = [block for block in blocks if not block.startswith(f"P: {sys_path}\n")]
    assert len(kept) == len(blocks) - 1, f"no device {sys_path} in the record"
    return "\n\n".join(kept)


def without_lines(record: str, *prefixes: str) -> str:
    return "\n".join(line for line in record.splitlines() if not line.startswith(prefixes)) + "\n"


# ------------------------------------------------------------------- layout
def test_two_cards_list_every_port_with_stable_ids(udevbed: UdevTestbed) -> None:
    first, second = two_dfl_cards()
    add_cards(udevbed, first, second)

    enumeration = scan_dfl()

    assert enumeration.skipped == []
    assert sorted(by_id(enumeration.slots)) == [
        "0000-e1-00.0-port0",
        "0000-e1-00.0-port1",
        "0000-e2-00.0-port0",
        "0000-e2-00.0-port1",
        "0000-e2-00.0-port2",
    ]


@pytest.mark.parametrize(
    ("card_number", "port_number", "port_index", "numa", "fme", "afu"),
    [
        pytest.param(0, 0, 0, 0, 0, AFU_NLB, id="card0-port0"),
        pytest.param(0, 1, 1, 0, 0, AFU_DMA, id="card0-port1"),
        pytest.param(1, 0, 2, 1, 1, AFU_DMA, id="card1-port0"),
        pytest.param(1, 2, 4, 1, 1, AFU_DMA, id="card1-port2"),
    ],
)
def test_port_slot_fields_come_from_sysfs(
    udevbed: UdevTestbed, card_number: int, port_number: int, port_index: int, numa: int, fme: int, afu: str
) -> None:
    cards = two_dfl_cards()
    add_cards(udevbed, *cards)
    card = cards[card_number]

    slot = by_id(scan_dfl().slots)[card.slot_id(port_number)]

    assert slot.card == card.pci
    assert slot.region == f"port{port_number}"
    assert slot.numa == numa
    assert slot.device_nodes == (DeviceNode(f"/dev/dfl-port.{port_index}", f"/dev/dfl-port.{port_index}"),)
    assert slot.platform == INTERFACE_N3000
    assert slot.loaded == afu
    assert slot.control_node == f"/dev/dfl-fme.{fme}"
    assert slot.health is Health.HEALTHY
    assert slot.reason == ""
    assert slot.backend == "dfl"


def test_fme_node_is_never_handed_to_containers(udevbed: UdevTestbed) -> None:
    add_cards(udevbed, *two_dfl_cards())

    slots = scan_dfl().slots

    handed = {path for slot in slots for node in slot.device_nodes for path in (node.host_path, node.container_path)}
    assert len(slots) == 5
    assert not any(path.startswith("/dev/dfl-fme") for path in handed)
    assert {slot.control_node for slot in slots} == {"/dev/dfl-fme.0", "/dev/dfl-fme.1"}


def test_ids_do_not_depend_on_enumeration_order_or_port_indexes(udevbed: UdevTestbed) -> None:
    # Same card, kernel numbered its ports differently (another boot): the slot IDs stay.
    card = FakeDflCard("0000:e3:00.0", numa=0, fme_index=7, port_indexes=(12, 9), afu_ids=(AFU_NLB, AFU_DMA))
    add_cards(udevbed, card)

    slots = by_id(scan_dfl().slots)

    assert sorted(slots) == ["0000-e3-00.0-port0", "0000-e3-00.0-port1"]
    assert slots["0000-e3-00.0-port0"].device_nodes[0].host_path == "/dev/dfl-port.12"
    assert slots["0000-e3-00.0-port1"].device_nodes[0].host_path == "/dev/dfl-port.9"


def test_out_of_tree_driver_interface_id_is_normalised(udevbed: UdevTestbed) -> None:
    uuid = "9346116D-9A2B-5C36-B5FD-3B1E2E6C2D7A"
    card = FakeDflCard(
        "0000:e1:00.0",
        numa=0,
        fme_index=0,
        port_indexes=(0,),
        afu_ids=(AFU_NLB,),
        interface_id=uuid,
        out_of_tree=True,
    )
    add_cards(udevbed, card)

    enumeration = scan_dfl()

    assert enumeration.skipped == []
    (slot,) = enumeration.slots
    assert slot.platform == INTERFACE_N3000
    assert slot.health is Health.HEALTHY


def test_fme_region_compat_id_wins_over_pr_interface_id(udevbed: UdevTestbed) -> None:
    card = FakeDflCard("0000:e1:00.0", numa=0, fme_index=0, port_indexes=(0,), afu_ids=(AFU_NLB,))
    udevbed.add(card.record())
    udevbed.set_attribute(card.fme_path, "pr/interface_id", "0" * 32)
    fme = next(d for d in udev.list_devices("platform", ("pr/interface_id",)) if d.sys_path == card.fme_path)
    assert fme.attr("pr/interface_id") == "0" * 32

    (slot,) = scan_dfl().slots

    assert slot.platform == INTERFACE_N3000


@pytest.mark.parametrize(
    ("numa_line", "numa"),
    [
        pytest.param("A: numa_node=-1", None, id="minus-one"),
        pytest.param("A: numa_node=3", 3, id="three"),
        pytest.param("A: numa_node=junk", None, id="junk"),
        pytest.param("", None, id="missing"),
    ],
)
def test_numa_node_of_the_pci_device(udevbed: UdevTestbed, numa_line: str, numa: int | None) -> None:
    card = FakeDflCard("0000:e1:00.0", numa=0, fme_index=0, port_indexes=(0, 1), afu_ids=(AFU_NLB, AFU_DMA))
    udevbed.add(card.record().replace("A: numa_node=0", numa_line))

    slots = scan_dfl().slots

    assert [slot.numa for slot in slots] == [numa, numa]
    assert all(slot.health is Health.HEALTHY for slot in slots)


def test_empty_bed_has_no_slots(udevbed: UdevTestbed) -> None:
    enumeration = scan_dfl()

    assert enumeration.slots == []
    assert enumeration.skipped == []


# ------------------------------------------------------------------- health
def test_crashed_afu_makes_only_that_port_unhealthy(udevbed: UdevTestbed) -> None:
    first, second = two_dfl_cards()
    udevbed.add(first.record({1: {"afu_id": ALL_ONES}}))
    udevbed.add(second.record())

    slots = by_id(scan_dfl().slots)

    crashed = slots[first.slot_id(1)]
    assert crashed.health is Health.UNHEALTHY
    assert "afu_id" in crashed.reason
    assert "crashed" in crashed.reason
    assert crashed.loaded == ALL_ONES
    others = [slot for slot_id, slot in slots.items() if slot_id != first.slot_id(1)]
    assert len(others) == 4
    assert all(slot.health is Health.HEALTHY and slot.reason == "" for slot in others)


def test_crashed_interface_makes_every_port_of_the_card_unhealthy(udevbed: UdevTestbed) -> None:
    first, second = two_dfl_cards()
    second = dataclasses.replace(second, interface_id=ALL_ONES)
    add_cards(udevbed, first, second)

    slots = scan_dfl().slots

    health = {slot.id: slot.health for slot in slots}
    assert health == {
        first.slot_id(0): Health.HEALTHY,
        first.slot_id(1): Health.HEALTHY,
        second.slot_id(0): Health.UNHEALTHY,
        second.slot_id(1): Health.UNHEALTHY,
        second.slot_id(2): Health.UNHEALTHY,
    }
    for slot in slots:
        if slot.card == second.pci:
            assert "interface id" in slot.reason
            assert "crashed" in slot.reason


def test_crashed_out_of_tree_interface_is_unhealthy(udevbed: UdevTestbed) -> None:
    card = FakeDflCard(
        "0000:e1:00.0",
        numa=0,
        fme_index=0,
        port_indexes=(0,),
        afu_ids=(AFU_NLB,),
        interface_id="ffffffff-ffff-ffff-ffff-ffffffffffff",
        out_of_tree=True,
    )
    add_cards(udevbed, card)

    (slot,) = scan_dfl().slots

    assert slot.health is Health.UNHEALTHY
    assert "interface id" in slot.reason


# ---------------------------------------------------------------- malformed
@pytest.mark.parametrize(
    ("attrs", "named"),
    [
        pytest.param({"afu_id": None}, "afu_id", id="afu_id-missing"),
        pytest.param({"afu_id": "not an accelerator id"}, "afu_id", id="afu_id-garbage"),
        pytest.param({"afu_id": "d8424dc4a4a3c413"}, "afu_id", id="afu_id-too-short"),
        pytest.param({"afu_id": AFU_NLB + "0"}, "afu_id", id="afu_id-too-long"),
        pytest.param({"afu_id": ""}, "afu_id", id="afu_id-empty"),
        pytest.param({"id": None}, "port id", id="id-missing"),
        pytest.param({"id": "one"}, "port id", id="id-garbage"),
        pytest.param({"id": ""}, "port id", id="id-empty"),
        pytest.param({"id": "-1"}, "port id", id="id-negative"),
        pytest.param({"id": "4"}, "port id", id="id-4"),
        pytest.param({"id": "17"}, "port id", id="id-17"),
    ],
)
def test_malformed_port_is_skipped_with_reason(udevbed: UdevTestbed, attrs: dict[str, str | None], named: str) -> None:
    first, second = two_dfl_cards()
    udevbed.add(first.record({1: attrs}))
    udevbed.add(second.record())

    enumeration = scan_dfl()

    assert [skip.device for skip in enumeration.skipped] == [first.port_path(1)]
    assert named in enumeration.skipped[0].reason
    assert sorted(by_id(enumeration.slots)) == sorted(
        [first.slot_id(0), second.slot_id(0), second.slot_id(1), second.slot_id(2)]
    )


def test_undecodable_afu_id_is_skipped_with_reason(udevbed: UdevTestbed) -> None:
    first, _ = two_dfl_cards()
    # H: is umockdev's binary attribute: bytes that are not UTF-8
    udevbed.add(first.record().replace(f"A: afu_id={AFU_NLB}", "H: afu_id=FFFE00"))

    enumeration = scan_dfl()

    assert [skip.device for skip in enumeration.skipped] == [first.port_path(0)]
    assert "afu_id" in enumeration.skipped[0].reason
    assert [slot.id for slot in enumeration.slots] == [first.slot_id(1)]


@pytest.mark.parametrize(
    "compat_id",
    [
        pytest.param("garbage", id="garbage"),
        pytest.param("9346116d9a2b", id="too-short"),
        pytest.param("", id="empty"),
    ],
)
def test_malformed_interface_id_skips_every_port_of_that_card(udevbed: UdevTestbed, compat_id: str) -> None:
    first, second = two_dfl_cards()
    udevbed.add(first.record())
    udevbed.add(second.record().replace(f"A: compat_id={INTERFACE_N3000}", f"A: compat_id={compat_id}"))

    enumeration = scan_dfl()

    assert sorted(skip.device for skip in enumeration.skipped) == [second.port_path(i) for i in (2, 3, 4)]
    assert all("compat_id" in skip.reason for skip in enumeration.skipped)
    assert sorted(by_id(enumeration.slots)) == [first.slot_id(0), first.slot_id(1)]


def test_missing_interface_id_skips_the_card(udevbed: UdevTestbed) -> None:
    first, second = two_dfl_cards()
    udevbed.add(first.record())
    udevbed.add(without_block(second.record(), second.fme_region_path))

    enumeration = scan_dfl()

    assert len(enumeration.skipped) == 3
    assert all("interface id" in skip.reason for skip in enumeration.skipped)
    assert sorted(by_id(enumeration.slots)) == [first.slot_id(0), first.slot_id(1)]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        pytest.param(lambda c: without_block(c.record(), c.fme_path), "0 FME devices", id="no-fme"),
        pytest.param(
            lambda c: without_lines(c.record(), "N: dfl-fme", "E: DEVNAME=/dev/dfl-fme"),
            "FME dfl-fme.0 has no device node",
            id="fme-without-node",
        ),
        pytest.param(
            lambda c: without_lines(c.record(), "N: dfl-port", "E: DEVNAME=/dev/dfl-port"),
            "port has no device node",
            id="port-without-node",
        ),
    ],
)
def test_broken_card_layout_is_skipped_with_reason(
    udevbed: UdevTestbed, damage: Callable[[FakeDflCard], str], reason: str
) -> None:
    first, second = two_dfl_cards()
    udevbed.add(damage(first))
    udevbed.add(second.record())

    enumeration = scan_dfl()

    assert sorted(skip.device for skip in enumeration.skipped) == [first.port_path(0), first.port_path(1)]
    assert all(reason in skip.reason for skip in enumeration.skipped)
    assert len(enumeration.slots) == 3


def test_card_with_two_fmes_is_skipped(udevbed: UdevTestbed) -> None:
    card = FakeDflCard("0000:e1:00.0", numa=0, fme_index=0, port_indexes=(0,), afu_ids=(AFU_NLB,))
    udevbed.add(card.record())
    udevbed.add(f"P: {card.region_path}/dfl-fme.5\nE: SUBSYSTEM=platform\nE: DRIVER=dfl-fme\n")

    enumeration = scan_dfl()

    assert enumeration.slots == []
    assert [skip.device for skip in enumeration.skipped] == [card.port_path(0)]
    assert "2 FME devices" in enumeration.skipped[0].reason


def test_port_outside_any_pci_device_is_skipped(udevbed: UdevTestbed) -> None:
    udevbed.add(
        "P: /sys/devices/platform/dfl-port.9\nE: SUBSYSTEM=platform\nE: DEVNAME=/dev/dfl-port.9\n"
        f"N: dfl-port.9\nA: id=0\nA: afu_id={AFU_NLB}\n"
    )

    enumeration = scan_dfl()

    assert enumeration.slots == []
    assert [(s.device, s.reason) for s in enumeration.skipped] == [
        ("/sys/devices/platform/dfl-port.9", "no PCI device above the port")
    ]


def test_more_than_four_ports_on_a_card_skips_the_extras(udevbed: UdevTestbed) -> None:
    # The kernel never numbers a fifth port below 4, so the extra one repeats a number.
    card = FakeDflCard("0000:e1:00.0", numa=0, fme_index=0, port_indexes=(0, 1, 2, 3, 4), afu_ids=(AFU_NLB,) * 5)
    udevbed.add(card.record({4: {"id": "0"}}))

    enumeration = scan_dfl()

    assert sorted(by_id(enumeration.slots)) == [card.slot_id(n) for n in range(4)]
    assert by_id(enumeration.slots)[card.slot_id(0)].device_nodes[0].host_path == "/dev/dfl-port.0"
    assert [skip.device for skip in enumeration.skipped] == [card.port_path(4)]
    assert "more than 4 ports" in enumeration.skipped[0].reason


def test_fifth_port_numbered_four_is_skipped(udevbed: UdevTestbed) -> None:
    card = FakeDflCard("0000:e1:00.0", numa=0, fme_index=0, port_indexes=(0, 1, 2, 3, 4), afu_ids=(AFU_NLB,) * 5)
    udevbed.add(card.record())

    enumeration = scan_dfl()

    assert len(enumeration.slots) == 4
    assert [skip.device for skip in enumeration.skipped] == [card.port_path(4)]


def test_two_ports_with_the_same_number_keep_one_slot(udevbed: UdevTestbed) -> None:
    card = FakeDflCard("0000:e1:00.0", numa=0, fme_index=0, port_indexes=(0, 1), afu_ids=(AFU_NLB, AFU_DMA))
    udevbed.add(card.record({1: {"id": "0"}}))

    enumeration = scan_dfl()

    assert [slot.id for slot in enumeration.slots] == [card.slot_id(0)]
    assert [skip.device for skip in enumeration.skipped] == [card.port_path(1)]
    assert "already taken" in enumeration.skipped[0].reason

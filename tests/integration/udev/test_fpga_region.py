"""The fpga-region backend over fake FPGA managers (Zynq-style) and DFL cards."""

from __future__ import annotations

import pytest

from agent.discovery.fpga_region import scan_fpga_regions
from agent.slots.model import Health
from tests.udevbed import INTERFACE_N3000, FakeFpgaManager, UdevTestbed, two_dfl_cards

pytestmark = pytest.mark.udev

ZYNQ = "Xilinx Zynq FPGA Manager"


def zynq(state: str = "operating", regions: tuple[str, ...] = ("region7", "region8")) -> FakeFpgaManager:
    return FakeFpgaManager("fpga7", ZYNQ, state, regions)


def test_operating_manager_gives_a_healthy_slot_per_region(udevbed: UdevTestbed) -> None:
    manager = zynq()
    udevbed.add(manager.record())

    enumeration = scan_fpga_regions()

    assert enumeration.skipped == []
    assert [slot.id for slot in enumeration.slots] == ["fpga7-region7", "fpga7-region8"]
    for slot, region in zip(enumeration.slots, manager.regions, strict=True):
        assert slot.card == "fpga7"
        assert slot.region == region
        assert slot.platform == ZYNQ
        assert slot.loaded is None
        assert slot.numa is None
        assert slot.device_nodes == ()
        assert slot.health is Health.HEALTHY
        assert slot.reason == ""
        assert slot.backend == "fpga-region"
        assert slot.control_node == manager.manager_path


def test_region_compat_id_is_the_platform(udevbed: UdevTestbed) -> None:
    manager = zynq()
    udevbed.add(manager.record())
    udevbed.set_attribute(manager.region_path("region8"), "compat_id", INTERFACE_N3000.upper())

    platforms = {slot.id: slot.platform for slot in scan_fpga_regions().slots}

    assert platforms == {"fpga7-region7": ZYNQ, "fpga7-region8": INTERFACE_N3000}


def test_malformed_region_compat_id_skips_that_region(udevbed: UdevTestbed) -> None:
    manager = zynq()
    udevbed.add(manager.record())
    udevbed.set_attribute(manager.region_path("region8"), "compat_id", "not-an-id")

    enumeration = scan_fpga_regions()

    assert [slot.id for slot in enumeration.slots] == ["fpga7-region7"]
    assert [skip.device for skip in enumeration.skipped] == [manager.region_path("region8")]
    assert "compat_id" in enumeration.skipped[0].reason


@pytest.mark.parametrize(
    "state",
    [
        pytest.param("write error", id="write-error"),
        pytest.param("write init error", id="write-init-error"),
        pytest.param("firmware request error", id="firmware-request-error"),
        pytest.param("unknown", id="unknown"),
        pytest.param("power off", id="power-off"),
    ],
)
def test_bad_manager_state_makes_its_regions_unhealthy(udevbed: UdevTestbed, state: str) -> None:
    udevbed.add(zynq(state).record())

    slots = scan_fpga_regions().slots

    assert len(slots) == 2
    for slot in slots:
        assert slot.health is Health.UNHEALTHY
        assert state in slot.reason
        assert "fpga7" in slot.reason


@pytest.mark.parametrize(
    "state",
    [
        pytest.param("operating", id="operating"),
        pytest.param("write complete", id="write-complete"),
    ],
)
def test_good_manager_state_is_healthy(udevbed: UdevTestbed, state: str) -> None:
    udevbed.add(zynq(state).record())

    assert [slot.health for slot in scan_fpga_regions().slots] == [Health.HEALTHY, Health.HEALTHY]


def test_manager_without_state_is_unhealthy(udevbed: UdevTestbed) -> None:
    udevbed.add(zynq().record().replace("A: state=operating\n", ""))

    slots = scan_fpga_regions().slots

    assert [slot.health for slot in slots] == [Health.UNHEALTHY, Health.UNHEALTHY]
    assert all("no state" in slot.reason for slot in slots)


def test_manager_without_name_skips_its_regions(udevbed: UdevTestbed) -> None:
    manager = zynq()
    udevbed.add(manager.record().replace(f"A: name={ZYNQ}\n", ""))

    enumeration = scan_fpga_regions()

    assert enumeration.slots == []
    assert [skip.device for skip in enumeration.skipped] == [manager.region_path(r) for r in manager.regions]
    assert all("has no name" in skip.reason for skip in enumeration.skipped)


def test_two_managers_are_matched_to_regions_by_parent(udevbed: UdevTestbed) -> None:
    # Region names say nothing about their manager: only the sysfs parent does.
    first = FakeFpgaManager("fpga7", ZYNQ, "operating", ("region3",))
    second = FakeFpgaManager(
        "fpga8",
        "Xilinx Versal FPGA Manager",
        "write error",
        ("region1", "region2"),
        parent="/sys/devices/platform/soc-e8/a0000000.pl",
    )
    udevbed.add(first.record())
    udevbed.add(second.record())

    enumeration = scan_fpga_regions()

    assert enumeration.skipped == []
    found = {slot.id: (slot.card, slot.platform, slot.health) for slot in enumeration.slots}
    assert found == {
        "fpga7-region3": ("fpga7", ZYNQ, Health.HEALTHY),
        "fpga8-region1": ("fpga8", "Xilinx Versal FPGA Manager", Health.UNHEALTHY),
        "fpga8-region2": ("fpga8", "Xilinx Versal FPGA Manager", Health.UNHEALTHY),
    }


def test_region_elsewhere_with_a_single_manager_belongs_to_it(udevbed: UdevTestbed) -> None:
    # Device-tree overlays put the region at /sys/devices/platform/fpga-full, not under the manager.
    udevbed.add(zynq(regions=()).record())
    udevbed.add("P: /sys/devices/platform/fpga-full-e7/fpga_region/region0\nE: SUBSYSTEM=fpga_region\n")

    (slot,) = scan_fpga_regions().slots

    assert slot.id == "fpga7-region0"
    assert slot.health is Health.HEALTHY


def test_region_elsewhere_with_two_managers_is_skipped(udevbed: UdevTestbed) -> None:
    udevbed.add(FakeFpgaManager("fpga7", ZYNQ, "operating", ()).record())
    udevbed.add(
        FakeFpgaManager("fpga8", ZYNQ, "operating", (), parent="/sys/devices/platform/soc-e8/a0000000.pl").record()
    )
    region = "/sys/devices/platform/fpga-full-e7/fpga_region/region0"
    udevbed.add(f"P: {region}\nE: SUBSYSTEM=fpga_region\n")

    enumeration = scan_fpga_regions()

    assert enumeration.slots == []
    assert [skip.device for skip in enumeration.skipped] == [region]
    assert "2 FPGA managers" in enumeration.skipped[0].reason


def test_regions_without_manager_are_skipped_with_reason(udevbed: UdevTestbed) -> None:
    manager = zynq()
    udevbed.add(f"P: {manager.parent}\nE: SUBSYSTEM=platform\n")
    for region in manager.regions:
        udevbed.add(f"P: {manager.region_path(region)}\nE: SUBSYSTEM=fpga_region\n")

    enumeration = scan_fpga_regions()

    assert enumeration.slots == []
    assert [skip.device for skip in enumeration.skipped] == [manager.region_path(r) for r in manager.regions]
    assert all("no FPGA manager" in skip.reason for skip in enumeration.skipped)


def test_dfl_regions_are_left_to_the_dfl_backend(udevbed: UdevTestbed) -> None:
    for card in two_dfl_cards():
        udevbed.add(card.record())

    enumeration = scan_fpga_regions()

    assert enumeration.slots == []
    assert enumeration.skipped == []


def test_dfl_cards_next_to_a_manager_do_not_disturb_its_regions(udevbed: UdevTestbed) -> None:
    for card in two_dfl_cards():
        udevbed.add(card.record())
    udevbed.add(zynq().record())

    enumeration = scan_fpga_regions()

    assert [slot.id for slot in enumeration.slots] == ["fpga7-region7", "fpga7-region8"]
    assert enumeration.skipped == []


def test_empty_bed_has_no_slots(udevbed: UdevTestbed) -> None:
    enumeration = scan_fpga_regions()

    assert enumeration.slots == []
    assert enumeration.skipped == []


def test_dfl_fme_manager_does_not_claim_other_regions(udevbed: UdevTestbed) -> None:
    # A DFL card's FME registers an FPGA manager too; a device-tree region elsewhere
    # still belongs to the one SoC manager. (Class names are unique: the card has region0.)
    udevbed.add(two_dfl_cards()[0].record())
    udevbed.add(zynq(regions=()).record())
    udevbed.add("P: /sys/devices/platform/fpga-full-e7/fpga_region/region5\nE: SUBSYSTEM=fpga_region\n")

    enumeration = scan_fpga_regions()

    assert enumeration.skipped == []
    assert [(slot.id, slot.platform) for slot in enumeration.slots] == [("fpga7-region5", ZYNQ)]


# ------------------------------------------------------------------------------------ base and child regions
FULL = "/sys/devices/platform/fpga-full"
BASE = f"{FULL}/fpga_region/region0"


def child_region(index: int) -> str:
    return f"{FULL}/fpga-pr{index}/fpga_region/region{index}"


def base_with_children(state: str = "operating", children: tuple[int, ...] = (1, 2)) -> str:
    """A device-tree layout: the base region's platform device holds the manager, the base region and one
    platform device per child region (as an overlay on the base region adds them)."""
    blocks = [
        f"P: {FULL}\nE: SUBSYSTEM=platform\n",
        f"P: {FULL}/fpga_manager/fpga3\nE: SUBSYSTEM=fpga_manager\nA: name={ZYNQ}\nA: state={state}\n",
        f"P: {BASE}\nE: SUBSYSTEM=fpga_region\n",
    ]
    for index in children:
        blocks += [
            f"P: {FULL}/fpga-pr{index}\nE: SUBSYSTEM=platform\n",
            f"P: {child_region(index)}\nE: SUBSYSTEM=fpga_region\n",
        ]
    return "\n".join(blocks)


def test_the_child_regions_of_a_base_region_are_the_slots_and_name_their_base(udevbed: UdevTestbed) -> None:
    udevbed.add(base_with_children())

    slots = scan_fpga_regions().slots

    assert [slot.id for slot in slots] == ["fpga3-region1", "fpga3-region2"]
    assert {slot.parent_region for slot in slots} == {BASE}
    assert {slot.card for slot in slots} == {"fpga3"}
    assert all(not slot.whole_card for slot in slots)


def test_a_base_region_holding_a_whole_card_image_reports_its_children_as_they_were(udevbed: UdevTestbed) -> None:
    udevbed.add(base_with_children())
    before = scan_fpga_regions().slots
    held = {BASE: tuple(before)}
    for index in (1, 2):  # the full load removed the child regions
        udevbed.remove(child_region(index))
        udevbed.remove(f"{FULL}/fpga-pr{index}")

    assert [slot.id for slot in scan_fpga_regions().slots] == ["fpga3-region0"]  # nothing held: a plain region
    slots = scan_fpga_regions(lambda: held).slots

    assert [slot.id for slot in slots] == ["fpga3-region1", "fpga3-region2"]
    assert all(slot.whole_card and slot.health is Health.HEALTHY for slot in slots)
    udevbed.set_attribute(f"{FULL}/fpga_manager/fpga3", "state", "write error")
    assert all(slot.health is Health.UNHEALTHY for slot in scan_fpga_regions(lambda: held).slots)


def test_children_still_shown_while_their_base_holds_a_card_image_are_reported_once(udevbed: UdevTestbed) -> None:
    udevbed.add(base_with_children())
    held = {BASE: tuple(scan_fpga_regions().slots)}

    slots = scan_fpga_regions(lambda: held).slots

    assert [slot.id for slot in slots] == ["fpga3-region1", "fpga3-region2"]
    assert all(slot.whole_card for slot in slots)


def test_sibling_regions_of_one_device_are_no_base_and_child(udevbed: UdevTestbed) -> None:
    udevbed.add(zynq().record())

    assert {slot.parent_region for slot in scan_fpga_regions().slots} == {""}

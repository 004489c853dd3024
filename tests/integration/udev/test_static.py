"""The static backend: slots declared in the configuration, healthy while their nodes exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.config import Config, load_config
from agent.errors import ConfigError
from agent.node.backend import build_backend
from agent.slots.model import DeviceNode, Health, SlotId
from agent.slots.registry import SlotRegistry
from tests.integration.udev.sourcewatch import wait_registry, watching
from tests.udevbed import AFU_NLB, FakeDflCard, UdevTestbed

pytestmark = pytest.mark.udev

PLATFORM = "xilinx_u250_gen3x16_xdma_shell_4_1"


def static_config(slots: object, backend: str = "static") -> Config:
    return load_config({"backend": backend, "static_slots": json.dumps(slots)}, env={})


def add_node(bed: UdevTestbed, name: str) -> str:
    """A character device /dev/<name> in the bed; returns its sysfs path."""
    sys_path = f"/sys/devices/virtual/fpga-static/{name}"
    bed.add(f"P: {sys_path}\nE: SUBSYSTEM=fpga-static\nE: DEVNAME=/dev/{name}\nN: {name}\n")
    return sys_path


def board(region: str, *devices: str, numa: int | None = 0) -> dict[str, object]:
    return {"card": "u250-e5", "region": region, "devices": list(devices), "numa": numa, "platform": PLATFORM}


async def test_declared_slot_with_present_nodes_is_healthy(udevbed: UdevTestbed) -> None:
    add_node(udevbed, "xfpga-e5-0")
    add_node(udevbed, "xfpga-e5-0-mgmt")
    config = static_config([board("slot0", "/dev/xfpga-e5-0", "/dev/xfpga-e5-0-mgmt", numa=1)])

    enumeration = await build_backend(config).source.enumerate()

    assert enumeration.skipped == []
    (slot,) = enumeration.slots
    assert slot.id == "u250-e5-slot0"
    assert slot.card == "u250-e5"
    assert slot.region == "slot0"
    assert slot.numa == 1
    assert slot.platform == PLATFORM
    assert slot.loaded is None
    assert slot.backend == "static"
    assert slot.device_nodes == (
        DeviceNode("/dev/xfpga-e5-0", "/dev/xfpga-e5-0"),
        DeviceNode("/dev/xfpga-e5-0-mgmt", "/dev/xfpga-e5-0-mgmt"),
    )
    assert slot.health is Health.HEALTHY
    assert slot.reason == ""


async def test_missing_node_makes_the_slot_unhealthy(udevbed: UdevTestbed) -> None:
    add_node(udevbed, "xfpga-e5-0")
    config = static_config(
        [board("slot0", "/dev/xfpga-e5-0"), board("slot1", "/dev/xfpga-e5-0", "/dev/xfpga-e5-1", numa=None)]
    )

    slots = {slot.id: slot for slot in (await build_backend(config).source.enumerate()).slots}

    assert slots["u250-e5-slot0"].health is Health.HEALTHY
    missing = slots["u250-e5-slot1"]
    assert missing.health is Health.UNHEALTHY
    assert "/dev/xfpga-e5-1" in missing.reason
    assert "/dev/xfpga-e5-0" not in missing.reason
    assert missing.numa is None


async def test_yaml_and_a_single_device_string_are_accepted(udevbed: UdevTestbed) -> None:
    add_node(udevbed, "xfpga-e5-0")
    yaml_text = f"- card: u250-e5\n  region: slot0\n  devices: /dev/xfpga-e5-0\n  platform: {PLATFORM}\n"
    config = load_config({"backend": "static", "static_slots": yaml_text}, env={})

    (slot,) = (await build_backend(config).source.enumerate()).slots

    assert slot.device_nodes == (DeviceNode("/dev/xfpga-e5-0", "/dev/xfpga-e5-0"),)
    assert slot.numa is None
    assert slot.health is Health.HEALTHY


async def test_config_file_list_is_accepted(udevbed: UdevTestbed, tmp_path: Path) -> None:
    add_node(udevbed, "xfpga-e5-0")
    config_file = tmp_path / "agent.yaml"
    config_file.write_text(
        "backend: static\n"
        "static-slots:\n"
        f"  - {{card: u250-e5, region: slot0, devices: [/dev/xfpga-e5-0], numa: 0, platform: {PLATFORM}}}\n"
    )
    config = load_config({"config": str(config_file)}, env={})

    (slot,) = (await build_backend(config).source.enumerate()).slots

    assert (slot.id, slot.health) == ("u250-e5-slot0", Health.HEALTHY)


async def test_auto_lists_static_slots_next_to_dfl_ports(udevbed: UdevTestbed) -> None:
    card = FakeDflCard("0000:e1:00.0", numa=0, fme_index=0, port_indexes=(0,), afu_ids=(AFU_NLB,))
    udevbed.add(card.record())
    add_node(udevbed, "xfpga-e5-0")
    config = static_config([board("slot0", "/dev/xfpga-e5-0")], backend="auto")

    enumeration = await build_backend(config).source.enumerate()

    assert sorted((slot.id, slot.backend) for slot in enumeration.slots) == [
        (card.slot_id(0), "dfl"),
        ("u250-e5-slot0", "static"),
    ]


async def test_auto_without_static_slots_ignores_the_static_backend(udevbed: UdevTestbed) -> None:
    add_node(udevbed, "xfpga-e5-0")
    config = load_config({"backend": "auto"}, env={})

    enumeration = await build_backend(config).source.enumerate()

    assert enumeration.slots == []


VALID = board("slot0", "/dev/xfpga-e5-0")


@pytest.mark.parametrize(
    ("static_slots", "fragments"),
    [
        pytest.param(json.dumps({"card": "u250-e5"}), ("must be a list",), id="not-a-list"),
        pytest.param(json.dumps([VALID, "slot1"]), ("[1]", "mapping"), id="entry-not-a-mapping"),
        pytest.param(
            json.dumps([VALID, {k: v for k, v in board("slot1", "/dev/x").items() if k != "card"}]),
            ("[1].card",),
            id="missing-card",
        ),
        pytest.param(json.dumps([VALID, board("slot1", "")]), ("[1].devices",), id="empty-device"),
        pytest.param(json.dumps([VALID, board("slot1", "dev/xfpga")]), ("[1].devices", "dev/xfpga"), id="relative"),
        pytest.param(json.dumps([VALID, board("slot1", "/sys/x")]), ("[1].devices", "/sys/x"), id="not-under-dev"),
        pytest.param(json.dumps([VALID, board("slot1")]), ("[1].devices",), id="no-devices"),
        pytest.param(json.dumps([VALID, board("slot1", "/dev/x", numa=-1)]), ("[1].numa", "-1"), id="negative-numa"),
        pytest.param(json.dumps([VALID, board("slot1", "/dev/x", numa=True)]), ("[1].numa",), id="bool-numa"),
        pytest.param(json.dumps([VALID, board("slot1", "/dev/x", numa="0")]), ("[1].numa",), id="string-numa"),
        pytest.param(json.dumps([VALID, VALID]), ("[1]", "u250-e5-slot0", "twice"), id="duplicate-id"),
        pytest.param(
            json.dumps([VALID, {**board("slot0", "/dev/x"), "card": "U250:E5"}]),
            ("[1]", "u250-e5-slot0", "twice"),
            id="duplicate-id-after-normalising",
        ),
        pytest.param(
            json.dumps([VALID, {**board("slot1", "/dev/x"), "colour": "red"}]),
            ("[1]", "colour"),
            id="unknown",
        ),
        pytest.param(json.dumps([VALID, board("x" * 60, "/dev/x")]), ("[1]", "63"), id="id-too-long"),
        pytest.param("[{card: [", ("YAML",), id="not-yaml"),
    ],
)
def test_bad_static_slots_name_the_flag_and_entry(static_slots: str, fragments: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"backend": "static", "static_slots": static_slots}, env={})

    message = str(caught.value)
    assert message.startswith("--static-slots:")
    for fragment in fragments:
        assert fragment in message


def test_bad_static_slots_from_the_environment_say_so() -> None:
    with pytest.raises(ConfigError, match=r"--static-slots: \[0\]\.numa .*environment FPGA_AGENT_STATIC_SLOTS"):
        load_config({}, env={"FPGA_AGENT_STATIC_SLOTS": json.dumps([board("slot0", "/dev/x", numa=-2)])})


# ------------------------------------------------------------------ watching
async def wait_health(registry: SlotRegistry, slot_id: str, health: Health) -> None:
    def reached() -> bool:
        state = registry.get(SlotId(slot_id))
        return state is not None and state.health is health

    await wait_registry(registry, reached)


async def test_node_that_appears_or_vanishes_changes_health(udevbed: UdevTestbed) -> None:
    config = static_config([board("slot0", "/dev/xfpga-e5-0")])

    async with watching(build_backend(config).source) as registry:
        await wait_health(registry, "u250-e5-slot0", Health.UNHEALTHY)

        sys_path = add_node(udevbed, "xfpga-e5-0")
        await wait_health(registry, "u250-e5-slot0", Health.HEALTHY)

        udevbed.remove(sys_path)
        await wait_health(registry, "u250-e5-slot0", Health.UNHEALTHY)
        state = registry.get(SlotId("u250-e5-slot0"))
        assert state is not None
        assert "/dev/xfpga-e5-0" in state.slot.reason

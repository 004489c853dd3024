"""Static slots programmed by a vendor tool (the command programmer), over the real agent and the kubelet stand-in.

The tools are the stand-ins in daemonset/examples/command-programmer (``xbutil``,
``fpgaconf``, ``fpgautil`` as the stacks spell them); their "card" is a directory the
test reads and steers (``behaviour``: ok, fail, hang, partial, disagree).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

import agent.node.slotloader
from agent.deviceplugin.servicer import status_for
from agent.discovery.static import parse_static_slots
from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.programming.commandspec import parse_command_programmers
from agent.slots.model import SlotId
from tests.fakes import RESOURCE_NAME, AgentHarness, Catalog, NodePods, run_fpga_agent
from tests.integration.reconfigure.support import events_of, wait_registry, wants
from tests.udevbed import UdevTestbed
from tests.unit.programming.gbs_files import ACCELERATOR_ID, INTERFACE_ID, build_gbs

pytestmark = pytest.mark.udev

REPO = Path(__file__).resolve().parents[3]
TOOLS = REPO / "daemonset" / "examples" / "command-programmer"
NS = "default"
PLATFORM = "xilinx_u250_gen3x16_xdma_shell_4_1"
BDF = "0000:e5:00.1"
SLOT = "u250-e5-user"
DEVICE = "/dev/xfpga-cmd0"
ACCEL = "8e2c4a5f-1b3d-4c6e-9f01-23456789abcd"
ACCEL_ID = ACCEL.replace("-", "")


@pytest.fixture(autouse=True)
def _fast_recovery(monkeypatch: pytest.MonkeyPatch, no_leaked_tasks: None) -> None:
    monkeypatch.setattr(agent.node.slotloader, "RECOVERY_DELAY_S", 0.05)


@dataclass
class Card:
    """The stand-in tools' card: what they were asked, and how the next programming goes."""

    directory: Path

    def behave(self, mode: str) -> None:
        (self.directory / "behaviour").write_text(mode)

    def calls(self) -> list[str]:
        path = self.directory / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def loaded(self, device: str = BDF) -> str | None:
        path = self.directory / f"{device}.loaded"
        return path.read_text().strip() if path.exists() else None


def xrt_entry(card: Card, **changes: object) -> dict[str, object]:
    """The XRT recipe of docs/command-programmer.md with the stand-in xbutil."""
    xbutil = str(TOOLS / "xbutil")
    entry: dict[str, object] = {
        "platform": PLATFORM,
        "program": [xbutil, "program", "--device", "{control_node}", "--user", "{image}"],
        "read-back": [xbutil, "examine", "--device", "{control_node}", "--report", "dynamic-regions"],
        "read-back-pattern": r"Xclbin UUID:\s*([0-9a-fA-F-]{36})",
        "reset": [xbutil, "reset", "--device", "{control_node}", "--force"],
        "environment": {"FAKE_FPGA_DIR": str(card.directory)},
    }
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not None}


def static_overrides(entry: dict[str, object], **more: object) -> dict[str, object]:
    slots = [
        {"card": "u250-e5", "region": "user", "devices": [DEVICE], "platform": PLATFORM, "control-node": BDF},
    ]
    return {
        "backend": "static",
        "static_slots": parse_static_slots(slots),
        "command_programmers": parse_command_programmers([entry]),
        **more,
    }


@pytest.fixture
def card(sock_dir: Path) -> Card:
    directory = sock_dir / "card"
    directory.mkdir()
    return Card(directory)


@pytest.fixture
def catalog(sock_dir: Path) -> Catalog:
    """A catalog with ``vadd`` (an xclbin stand-in naming its UUID) for the slot's platform."""
    catalog = Catalog(sock_dir / "catalog")
    source = sock_dir / "vadd.xclbin"
    source.write_bytes(f"xclbin2\0uuid={ACCEL}\n".encode() + bytes(range(256)) * 16)
    catalog.add(source, "vadd", platform=PLATFORM, accelerator_id=ACCEL)
    return catalog


def add_node(bed: UdevTestbed, device: str) -> None:
    """A character device ``device`` (/dev/<name>) in the test bed."""
    name = device.removeprefix("/dev/")
    bed.add(f"P: /sys/devices/virtual/fpga-static/{name}\nE: SUBSYSTEM=fpga-static\nE: DEVNAME={device}\nN: {name}\n")


@asynccontextmanager
async def running(
    udevbed: UdevTestbed, sock_dir: Path, catalog: Catalog, pods: NodePods, overrides: dict[str, object]
) -> AsyncIterator[AgentHarness]:
    add_node(udevbed, DEVICE)
    async with AgentHarness.running(sock_dir, expected_devices=1, catalog=catalog, pods=pods, **overrides) as harness:
        yield harness


def image_path(catalog: Catalog) -> str:
    return str(catalog.directory / catalog.resolve("vadd").file)


async def failed_start(harness: AgentHarness, pod: str) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await harness.kubelet.admit(NS, pod, "main", RESOURCE_NAME, 1, wants("vadd"))
    return info.value


def live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that still run (zombies waiting for their reaper do not count)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


async def recovered(harness: AgentHarness) -> None:
    registry = harness.agent.registry

    def healthy() -> bool:
        state = registry.get(SlotId(SLOT))
        return state is not None and state.taint is None and state.accelerator_id == ACCEL_ID

    await wait_registry(registry, healthy, timeout_s=30.0)


# ---------------------------------------------------------------------------------- tests
async def test_command_programmer_programs_the_catalog_file_then_a_cache_hit_skips_the_tool(
    udevbed: UdevTestbed, sock_dir: Path, card: Card, catalog: Catalog
) -> None:
    pods = NodePods()
    async with running(udevbed, sock_dir, catalog, pods, static_overrides(xrt_entry(card))) as harness:
        first = await harness.kubelet.admit(NS, "vadd-1", "main", RESOURCE_NAME, 1, wants("vadd"))
        assert first.device_ids == [SLOT]
        # The read-back at start found the slot empty; the tool got the catalog's verified file by path and the
        # slot's control node; then the read-back confirmed the accelerator.
        assert card.calls() == [
            f"xbutil examine --device {BDF} --report dynamic-regions",
            f"xbutil program --device {BDF} --user {image_path(catalog)}",
            f"xbutil examine --device {BDF} --report dynamic-regions",
        ]
        assert card.loaded() == ACCEL
        assert [(e.reason, e.type) for e in events_of(pods, "vadd-1")] == [("FpgaSlotProgrammed", "Normal")]
        state = harness.agent.registry.get(SlotId(SLOT))
        assert state is not None
        assert state.slot.loaded == ACCEL_ID  # what the read-back said, reported by the static backend
        assert state.bitstream == "vadd"

        harness.kubelet.delete_pod(NS, "vadd-1")
        await harness.kubelet.admit(NS, "vadd-2", "main", RESOURCE_NAME, 1, wants("vadd"))
        assert [e.reason for e in events_of(pods, "vadd-2")] == ["FpgaSlotCacheHit"]
        assert len(card.calls()) == 3  # the hit ran no tool


async def test_command_programmer_failure_puts_the_tools_message_in_the_event_then_resets_and_recovers(
    udevbed: UdevTestbed, sock_dir: Path, card: Card, catalog: Catalog
) -> None:
    pods = NodePods()
    card.behave("fail")
    async with running(udevbed, sock_dir, catalog, pods, static_overrides(xrt_entry(card))) as harness:
        error = await failed_start(harness, "vadd-1")
        details = error.details() or ""
        assert error.code() is status_for(ProgrammingError("probe"))
        assert "exited with status 1" in details
        assert "the PR region is locked (error -16)" in details
        (event,) = [e for e in events_of(pods, "vadd-1") if e.type == "Warning"]
        assert event.reason == "FpgaSlotProgrammingFailed"
        assert "ERROR: Failed to program device 0000:e5:00.1: the PR region is locked (error -16)" in event.message
        state = harness.agent.registry.get(SlotId(SLOT))
        assert state is not None
        assert state.taint is not None

        card.behave("ok")
        await recovered(harness)
        calls = card.calls()
        # The reset ran after the failure, before the card's next programming; the recovery programmed it again.
        reset = calls.index(f"xbutil reset --device {BDF} --force")
        assert calls[1].startswith("xbutil program")
        assert reset > 1
        assert any(call.startswith("xbutil program") for call in calls[reset + 1 :])
        assert card.loaded() == ACCEL


async def test_command_programmer_deadline_kills_the_tools_whole_process_group(
    udevbed: UdevTestbed, sock_dir: Path, card: Card, catalog: Catalog
) -> None:
    pods = NodePods()
    card.behave("partial")  # prints progress, starts a helper in its group, never returns
    overrides = static_overrides(xrt_entry(card), program_timeout_s=1.0)
    async with running(udevbed, sock_dir, catalog, pods, overrides) as harness:
        error = await failed_start(harness, "vadd-1")
        details = error.details() or ""
        assert error.code() is status_for(ProgrammingTimeout("probe"))
        assert "did not finish within the deadline; its process group was killed" in details
        assert "Programming: 40% done" in details  # the output it had printed
        pid, pgid, helper = map(int, (card.directory / "pids").read_text().split())
        assert pgid == pid  # the tool led its own group, so the whole group could be killed
        assert live_members(pgid) == []  # the tool and its helper (pid {helper}) alike
        assert helper != pid
        (event,) = [e for e in events_of(pods, "vadd-1") if e.type == "Warning"]
        assert "its process group was killed" in event.message

        card.behave("ok")
        await recovered(harness)


async def test_command_programmer_read_back_mismatch_is_a_failed_programming(
    udevbed: UdevTestbed, sock_dir: Path, card: Card, catalog: Catalog
) -> None:
    pods = NodePods()
    card.behave("disagree")
    async with running(udevbed, sock_dir, catalog, pods, static_overrides(xrt_entry(card, reset=None))) as harness:
        error = await failed_start(harness, "vadd-1")
        details = error.details() or ""
        assert error.code() is status_for(ProgrammingError("probe"))
        assert "the read-back reports accelerator 0badc0de000040008000000000000bad after programming" in details
        assert f"expected {ACCEL_ID}" in details
        (event,) = [e for e in events_of(pods, "vadd-1") if e.type == "Warning"]
        assert event.reason == "FpgaSlotProgrammingFailed"
        state = harness.agent.registry.get(SlotId(SLOT))
        assert state is not None
        assert state.taint is not None
        await harness.kubelet.wait_for(lambda: harness.conn.devices[SLOT].health == "Unhealthy", 5.0)

        card.behave("ok")
        await recovered(harness)


async def test_command_programmer_learns_what_a_slot_holds_at_start(
    udevbed: UdevTestbed, sock_dir: Path, card: Card, catalog: Catalog
) -> None:
    (card.directory / f"{BDF}.loaded").write_text(ACCEL + "\n")  # loaded before the agent started
    pods = NodePods()
    async with running(udevbed, sock_dir, catalog, pods, static_overrides(xrt_entry(card))) as harness:
        state = harness.agent.registry.get(SlotId(SLOT))
        assert state is not None
        assert state.accelerator_id == ACCEL_ID
        await harness.kubelet.admit(NS, "vadd-1", "main", RESOURCE_NAME, 1, wants("vadd"))
        assert [e.reason for e in events_of(pods, "vadd-1")] == ["FpgaSlotCacheHit"]
        assert card.calls() == [f"xbutil examine --device {BDF} --report dynamic-regions"]


async def test_command_programmer_fpgautil_failure_line_with_exit_status_0_is_a_failure(
    udevbed: UdevTestbed, sock_dir: Path, card: Card, catalog: Catalog
) -> None:
    fpgautil = str(TOOLS / "fpgautil")
    entry = {
        "slots": [SLOT],
        "program": [fpgautil, "-b", "{image}", "-f", "Partial"],
        "failure-pattern": "loading through FPGA manager failed",
        "environment": {"FAKE_FPGA_DIR": str(card.directory)},
    }
    pods = NodePods()
    card.behave("fail")
    async with running(udevbed, sock_dir, catalog, pods, static_overrides(entry)) as harness:
        error = await failed_start(harness, "vadd-1")
        assert "printed 'loading through FPGA manager failed'" in (error.details() or "")
        card.behave("ok")
        await recovered(harness)
        assert card.calls()[-1] == f"fpgautil -b {image_path(catalog)} -f Partial"
        assert card.loaded("fpga0") == ACCEL


def test_command_programmer_tool_missing_from_the_image_is_an_error_at_start(tmp_path: Path) -> None:
    slots = [{"card": "u250-e5", "region": "user", "devices": ["/dev/null"], "platform": PLATFORM}]
    entry = {"platform": PLATFORM, "program": ["/opt/xilinx/xrt/bin/xbutil", "program", "--user", "{image}"]}
    env = {k: v for k, v in os.environ.items() if not k.startswith("FPGA_AGENT_")}
    env.update(PYTHONWARNINGS="error", KUBECONFIG=str(tmp_path / "none"))
    result = run_fpga_agent(
        REPO,
        env,
        "run",
        "--backend=static",
        f"--static-slots={json.dumps(slots)}",
        f"--command-programmers={json.dumps([entry])}",
        f"--state-dir={tmp_path / 'state'}",
        f"--device-plugin-dir={tmp_path / 'dp'}",
        f"--pod-resources-socket={tmp_path / 'pr.sock'}",
        f"--bitstream-dir={tmp_path / 'catalog'}",
        "--health-listen=",
    )
    assert result.returncode == 2, result.stderr  # a configuration error, as every other bad option
    assert (
        "--command-programmers [0].program: /opt/xilinx/xrt/bin/xbutil is not in this image (no such file)"
        in result.stderr
    )
    assert not (tmp_path / "dp" / "fpga-slot.sock").exists()  # it never served the kubelet


async def test_command_programmer_request_for_a_static_slot_without_a_programmer_changes_nothing(
    udevbed: UdevTestbed, sock_dir: Path, card: Card, catalog: Catalog
) -> None:
    add_node(udevbed, "/dev/xfpga-cmd1")
    overrides = static_overrides(xrt_entry(card, platform=None, slots=[SLOT]))
    overrides["static_slots"] = parse_static_slots(
        [
            {"card": "u250-e5", "region": "user", "devices": [DEVICE], "platform": PLATFORM, "control-node": BDF},
            {"card": "u250-e5", "region": "spare", "devices": ["/dev/xfpga-cmd1"], "platform": PLATFORM},
        ]
    )
    pods = NodePods()
    add_node(udevbed, DEVICE)
    async with AgentHarness.running(sock_dir, expected_devices=2, catalog=catalog, pods=pods, **overrides) as harness:
        before = {s.slot.id: (s.content, s.taint) for s in harness.agent.registry.snapshot()}
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await harness.kubelet.admit(NS, "both", "main", RESOURCE_NAME, 2, wants("vadd"))
        assert "slot u250-e5-spare (static) cannot be programmed by this agent" in (info.value.details() or "")
        assert [e.reason for e in events_of(pods, "both")] == ["FpgaBitstreamRejected"]
        assert {s.slot.id: (s.content, s.taint) for s in harness.agent.registry.snapshot()} == before
        assert card.calls() == [f"xbutil examine --device {BDF} --report dynamic-regions"]  # at start only


async def test_command_programmer_fpgaconf_gets_the_whole_gbs_file_and_sysfs_afu_id_reads_it_back(
    udevbed: UdevTestbed, sock_dir: Path, card: Card
) -> None:
    catalog = Catalog(sock_dir / "gbs-catalog")
    source = sock_dir / "nlb.gbs"
    source.write_bytes(build_gbs())
    catalog.add(source, "nlb", platform=None, accelerator_id=None)  # both read from the GBS header
    fpgaconf = str(TOOLS / "fpgaconf")
    entry = {
        "platform": INTERFACE_ID,
        "program": [fpgaconf, "-B", "{control_node}", "{image}"],
        "read-back": ["/bin/cat", f"{card.directory}/bus{{control_node}}.afu_id"],
        "environment": {"FAKE_FPGA_DIR": str(card.directory)},
    }
    (card.directory / "bus0x5e.afu_id").write_text("\n")  # the port holds nothing yet
    overrides = static_overrides(entry)
    overrides["static_slots"] = parse_static_slots(
        [{"card": "pac-5e", "region": "port0", "devices": [DEVICE], "platform": INTERFACE_ID, "control-node": "0x5e"}]
    )
    pods = NodePods()
    async with running(udevbed, sock_dir, catalog, pods, overrides) as harness:
        await harness.kubelet.admit(NS, "nlb-1", "main", RESOURCE_NAME, 1, wants("nlb"))
        assert [e.reason for e in events_of(pods, "nlb-1")] == ["FpgaSlotProgrammed"]
        # The stand-in read the accelerator from the GBS header: the file went over whole, header included.
        assert card.calls() == [f"fpgaconf -B 0x5e {catalog.directory / catalog.resolve('nlb').file}"]
        assert (card.directory / "bus0x5e.afu_id").read_text().strip() == ACCELERATOR_ID
        state = harness.agent.registry.get(SlotId("pac-5e-port0"))
        assert state is not None
        assert state.slot.loaded == ACCELERATOR_ID

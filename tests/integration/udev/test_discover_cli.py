"""``fpga-agent discover`` as a subprocess, reading the test bed through real libudev.

The child inherits umockdev's LD_PRELOAD; UMOCKDEV_DIR is set only at C level in
this process, so it is passed to the child explicitly.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import run_fpga_agent
from tests.udevbed import AFU_NLB, INTERFACE_N3000, UdevTestbed, two_dfl_cards

pytestmark = pytest.mark.udev

REPO = Path(__file__).resolve().parents[3]


def discover(bed: UdevTestbed, state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FPGA_AGENT_")}
    env.update(UMOCKDEV_DIR=bed.root_dir, FPGA_AGENT_STATE_DIR=str(state_dir), PYTHONWARNINGS="error")
    return run_fpga_agent(REPO, env, "discover", *args)


def discover_json(bed: UdevTestbed, state_dir: Path, *args: str) -> dict[str, Any]:
    result = discover(bed, state_dir, *args, "--json")
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


@pytest.fixture
def two_cards(udevbed: UdevTestbed) -> UdevTestbed:
    for card in two_dfl_cards():
        udevbed.add(card.record())
    return udevbed


@pytest.mark.parametrize("backend", ["dfl", "auto"])
def test_json_lists_every_port(two_cards: UdevTestbed, tmp_path: Path, backend: str) -> None:
    report = discover_json(two_cards, tmp_path, "--backend", backend)

    assert report["backend"] == backend
    assert report["skipped"] == []
    expected = [
        {
            "id": card.slot_id(number),
            "card": card.pci,
            "numa": card.numa,
            "device": f"/dev/dfl-port.{index}",
            "platform": INTERFACE_N3000,
            "loaded": card.afu_ids[number],
            "health": "Healthy",
            "reason": "",
        }
        for card in two_dfl_cards()
        for number, index in enumerate(card.port_indexes)
    ]
    assert sorted(report["slots"], key=lambda row: row["id"]) == expected


def test_json_reports_a_malformed_port_as_skipped(udevbed: UdevTestbed, tmp_path: Path) -> None:
    first, second = two_dfl_cards()
    udevbed.add(first.record({0: {"afu_id": "garbage"}}))
    udevbed.add(second.record())

    report = discover_json(udevbed, tmp_path, "--backend", "dfl")

    assert [row["id"] for row in report["slots"]] == [first.slot_id(1)] + [second.slot_id(n) for n in range(3)]
    assert len(report["skipped"]) == 1
    assert report["skipped"][0]["device"] == first.port_path(0)
    assert "afu_id" in report["skipped"][0]["reason"]


def test_json_shows_an_unhealthy_port_with_its_reason(udevbed: UdevTestbed, tmp_path: Path) -> None:
    first, _ = two_dfl_cards()
    udevbed.add(first.record({1: {"afu_id": "f" * 32}}))

    rows = {row["id"]: row for row in discover_json(udevbed, tmp_path, "--backend", "dfl")["slots"]}

    assert rows[first.slot_id(0)]["health"] == "Healthy"
    assert rows[first.slot_id(1)]["health"] == "Unhealthy"
    assert "afu_id" in rows[first.slot_id(1)]["reason"]


def test_table_prints_ids_and_skipped_lines(udevbed: UdevTestbed, tmp_path: Path) -> None:
    first, second = two_dfl_cards()
    udevbed.add(first.record())
    udevbed.add(second.record({2: {"id": "9"}}))

    result = discover(udevbed, tmp_path, "--backend", "dfl")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "CARD", "NUMA", "DEVICE", "PLATFORM", "LOADED", "HEALTH"]
    rows = [line.split() for line in lines[1:] if not line.startswith("skipped ")]
    assert [row[0] for row in rows] == [
        first.slot_id(0),
        first.slot_id(1),
        second.slot_id(0),
        second.slot_id(1),
    ]
    assert rows[0] == [
        first.slot_id(0),
        first.pci,
        "0",
        "/dev/dfl-port.0",
        INTERFACE_N3000,
        AFU_NLB,
        "Healthy",
    ]
    skipped = [line for line in lines if line.startswith("skipped ")]
    assert len(skipped) == 1
    assert skipped[0].startswith(f"skipped {second.port_path(4)}: ")
    assert "port id '9'" in skipped[0]


def test_auto_on_an_empty_node_prints_no_slots(udevbed: UdevTestbed, tmp_path: Path) -> None:
    table = discover(udevbed, tmp_path, "--backend", "auto")
    report = discover_json(udevbed, tmp_path, "--backend", "auto")

    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines() == ["ID  CARD  NUMA  DEVICE  PLATFORM  LOADED  HEALTH"]
    assert "no FPGA slots on this node: backend auto found no usable DFL port" in table.stderr
    assert "registering" not in table.stderr  # discover registers nothing
    assert report == {"backend": "auto", "slots": [], "skipped": []}


def test_static_slots_from_the_command_line(udevbed: UdevTestbed, tmp_path: Path) -> None:
    udevbed.add(
        "P: /sys/devices/virtual/fpga-static/xfpga0\nE: SUBSYSTEM=fpga-static\nE: DEVNAME=/dev/xfpga0\nN: xfpga0\n"
    )
    declared = [
        {"card": "board0", "region": "slot0", "devices": ["/dev/xfpga0"], "numa": 0, "platform": "shell-a"},
        {"card": "board0", "region": "slot1", "devices": ["/dev/xfpga1"], "platform": "shell-a"},
    ]

    report = discover_json(udevbed, tmp_path, "--backend", "static", "--static-slots", json.dumps(declared))

    health = {row["id"]: (row["health"], row["reason"]) for row in report["slots"]}
    assert health == {
        "board0-slot0": ("Healthy", ""),
        "board0-slot1": ("Unhealthy", "device /dev/xfpga1 is missing"),
    }


def test_bad_static_slots_exit_2_naming_the_flag(udevbed: UdevTestbed, tmp_path: Path) -> None:
    result = discover(udevbed, tmp_path, "--backend", "static", "--static-slots", '[{"card": "b"}]')

    assert result.returncode == 2
    assert result.stdout == ""
    assert "--static-slots: [0]" in result.stderr

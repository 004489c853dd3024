"""CDI specs of prepared claims: what containerd reads, written whole or not at all, never through a link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent.dra.cdi import CdiSpecs
from agent.errors import ProgrammingError
from agent.slots.model import DeviceNode, Health, Slot, SlotId
from tests.fakes import CdiReader

UID = "0f8e6b1c-2d3a-4b5c-8d9e-0a1b2c3d4e5f"
OTHER = "11111111-2222-4333-8444-555555555555"


def slot(index: int, numa: int | None = 0) -> Slot:
    return Slot(
        id=SlotId(f"card0-port{index}"),
        card="card0",
        region=f"port{index}",
        numa=numa,
        device_nodes=(DeviceNode(f"/dev/dfl-port.{index}", f"/dev/dfl-port.{index}"),),
        platform="pac_a10",
        loaded=None,
        health=Health.HEALTHY,
        backend="sim",
    )


def test_a_claims_spec_names_each_slot_with_its_device_node_and_the_claims_env(tmp_path: Path) -> None:
    specs = CdiReader(tmp_path, "fpga.example.com")
    ids = specs.write(UID, [slot(0), slot(1, numa=None)])
    assert ids == [f"fpga.example.com/slot={UID}-card0-port0", f"fpga.example.com/slot={UID}-card0-port1"]
    spec = json.loads((tmp_path / f"fpga.example.com-{UID}.json").read_text())
    assert spec["cdiVersion"] == "0.6.0"
    assert spec["kind"] == "fpga.example.com/slot"
    first, second = spec["devices"]
    assert first["name"] == f"{UID}-card0-port0"
    assert first["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/dfl-port.0", "hostPath": "/dev/dfl-port.0", "permissions": "rw"}
    ]
    env = dict(item.split("=", 1) for item in second["containerEdits"]["env"])
    assert env["FPGA_SLOTS"] == "card0-port0,card0-port1"
    assert env["FPGA_SLOT_1_DEVICE"] == "/dev/dfl-port.1"
    assert env["FPGA_SLOT_0_NUMA"] == "0"
    assert "FPGA_SLOT_1_NUMA" not in env
    assert specs.read(UID) == spec


def test_specs_are_replaced_listed_and_removed(tmp_path: Path) -> None:
    specs = CdiReader(tmp_path)
    specs.write(UID, [slot(0)])
    specs.write(UID, [slot(1)])
    specs.write(OTHER, [slot(2)])
    (tmp_path / "other-vendor.json").write_text("{}")
    (tmp_path / f"{specs.driver}-not-a-uid.json").write_text("{}")
    assert specs.claims() == {UID, OTHER}
    (device,) = specs.read(UID)["devices"]  # type: ignore[index]
    assert device["name"] == f"{UID}-card0-port1"
    specs.remove(UID)
    specs.remove(UID)  # released twice: still fine
    assert specs.claims() == {OTHER}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{specs.driver}-{OTHER}.json", "other-vendor.json", f"{specs.driver}-not-a-uid.json"]
    )


@pytest.mark.parametrize("bad", ["../../etc/passwd", "", "0F8E6B1C-2D3A-4B5C-8D9E-0A1B2C3D4E5F", UID + "\n"])
def test_a_uid_that_is_not_one_never_reaches_a_file_name(tmp_path: Path, bad: str) -> None:
    specs = CdiSpecs(tmp_path)
    with pytest.raises(ProgrammingError, match="is not a UID"):
        specs.write(bad, [slot(0)])
    with pytest.raises(ProgrammingError, match="is not a UID"):
        specs.remove(bad)
    assert list(tmp_path.iterdir()) == []


def test_a_planted_link_is_replaced_not_followed(tmp_path: Path) -> None:
    specs = CdiSpecs(tmp_path / "cdi")
    target = tmp_path / "victim"
    target.write_text("keep me")
    (tmp_path / "cdi").mkdir()
    specs.path(UID).symlink_to(target)
    specs.write(UID, [slot(0)])
    assert target.read_text() == "keep me"
    assert not specs.path(UID).is_symlink()
    assert [p.name for p in (tmp_path / "cdi").iterdir()] == [specs.path(UID).name]  # no temporary file left


def test_a_spec_that_cannot_be_written_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    blocked = tmp_path / "cdi"
    blocked.write_text("a file where the directory should be")
    with pytest.raises(ProgrammingError, match="cannot write the CDI spec"):
        CdiSpecs(blocked).write(UID, [slot(0)])
    assert blocked.read_text() == "a file where the directory should be"
    assert os.listdir(tmp_path) == ["cdi"]

"""After the node restarts, a recorded content is trusted only where the slot itself reports it."""

from __future__ import annotations

import json

import pytest

from agent.slots import checkpoint
from agent.slots.registry import SlotRegistry
from tests.unit.slots.factories import make_slot

REGION = make_slot("card0", "region0")  # an fpga-region: reports nothing about its content
PORT = make_slot("card1", "port0", loaded="acc-aes")  # a DFL port: reports its accelerator


def written(boot_id: str | None, monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setattr(checkpoint, "current_boot_id", lambda: boot_id)
    registry = SlotRegistry()
    registry.replace_all([REGION, PORT])
    registry.record_content(REGION.id, "aes", "acc-aes")
    registry.record_content(PORT.id, "aes", "acc-aes")
    return checkpoint.encode(registry.snapshot())


def restored(data: bytes, boot_id: str | None, monkeypatch: pytest.MonkeyPatch) -> SlotRegistry:
    monkeypatch.setattr(checkpoint, "current_boot_id", lambda: boot_id)
    registry = SlotRegistry()
    registry.replace_all([REGION, PORT])
    checkpoint.restore_into(registry, checkpoint.decode(data))
    return registry


def bitstreams(registry: SlotRegistry) -> dict[str, str | None]:
    return {state.slot.id: state.bitstream for state in registry.snapshot()}


def test_the_same_boot_keeps_every_recorded_content(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = restored(written("boot-1", monkeypatch), "boot-1", monkeypatch)
    assert bitstreams(registry) == {REGION.id: "aes", PORT.id: "aes"}


def test_after_a_restart_only_what_the_slot_reports_is_kept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    registry = restored(written("boot-1", monkeypatch), "boot-2", monkeypatch)
    assert bitstreams(registry) == {REGION.id: None, PORT.id: "aes"}
    assert "written before the node restarted" in caplog.text


def test_a_checkpoint_without_a_boot_id_is_taken_as_written_before_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    document = json.loads(written("boot-1", monkeypatch))
    del document["boot_id"]  # as an older agent wrote it
    registry = restored(json.dumps(document).encode(), "boot-1", monkeypatch)
    assert bitstreams(registry) == {REGION.id: None, PORT.id: "aes"}


def test_where_the_boot_cannot_be_read_the_record_is_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = restored(written(None, monkeypatch), None, monkeypatch)
    assert bitstreams(registry) == {REGION.id: "aes", PORT.id: "aes"}


def test_the_boot_id_is_read_from_the_kernel() -> None:
    boot_id = checkpoint.current_boot_id()
    assert boot_id is not None
    assert len(boot_id) == 36  # a UUID

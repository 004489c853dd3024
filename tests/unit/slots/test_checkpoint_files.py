"""The checkpoint's files on a hostile disk: planted symbolic links, leftovers of killed writers."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from agent.files.atomic import remove_stale_temp_files
from agent.slots import checkpoint
from agent.slots.registry import SlotRegistry
from tests.unit.slots.factories import make_slot


def saved_registry() -> bytes:
    registry = SlotRegistry()
    registry.replace_all([make_slot("card0", "slot0")])
    return checkpoint.encode(registry.snapshot())


@pytest.fixture
def state(tmp_path: Path) -> tuple[Path, Path]:
    """The state directory and a file outside it that must never change."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    return state_dir, outside


def test_links_planted_at_temporary_names_are_never_written_through(state: tuple[Path, Path]) -> None:
    state_dir, outside = state
    path = state_dir / checkpoint.FILE_NAME
    for pid in range(os.getpid() - 50, os.getpid() + 50):  # every name a writer could once predict
        (state_dir / f".{checkpoint.FILE_NAME}.{pid}.tmp").symlink_to(outside)
    checkpoint.write_atomically(path, saved_registry())
    assert outside.read_text() == "precious"
    assert path.is_file()
    assert not path.is_symlink()
    assert checkpoint.decode(path.read_bytes())


def test_a_link_planted_as_the_checkpoint_is_replaced_not_followed(state: tuple[Path, Path]) -> None:
    state_dir, outside = state
    path = state_dir / checkpoint.FILE_NAME
    path.symlink_to(outside)
    checkpoint.write_atomically(path, saved_registry())
    assert outside.read_text() == "precious"
    assert not path.is_symlink()


def test_a_checkpoint_that_is_a_link_is_refused_and_set_aside(
    state: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    state_dir, _ = state
    real = state_dir / "elsewhere.json"
    real.write_bytes(saved_registry())  # even a valid checkpoint is not read through a link
    path = state_dir / checkpoint.FILE_NAME
    path.symlink_to(real)
    assert checkpoint.load(path) == {}
    assert not path.exists()
    assert [p.name for p in state_dir.iterdir() if p.name.startswith(f"{checkpoint.FILE_NAME}.bad-")]
    assert any("symbolic link" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    assert real.read_bytes() == saved_registry()


def test_start_up_removes_the_temporary_files_of_killed_writers_only(state: tuple[Path, Path]) -> None:
    state_dir, _ = state
    path = state_dir / checkpoint.FILE_NAME
    old = [state_dir / f".{checkpoint.FILE_NAME}.{suffix}.tmp" for suffix in ("a1b2c3", "123")]
    for leftover in old:
        leftover.write_bytes(b"half a checkpoint")
        an_hour_ago = time.time() - 3600
        os.utime(leftover, (an_hour_ago, an_hour_ago))
    fresh = state_dir / f".{checkpoint.FILE_NAME}.d4e5f6.tmp"  # another agent writing right now
    fresh.write_bytes(b"being written")
    unrelated = state_dir / "notes.tmp"
    unrelated.write_bytes(b"not ours")

    assert remove_stale_temp_files(path) == 2
    assert not any(leftover.exists() for leftover in old)
    assert fresh.exists()
    assert unrelated.exists()
    assert remove_stale_temp_files(state_dir / "missing-dir" / checkpoint.FILE_NAME) == 0


def test_a_failed_write_leaves_no_temporary_file(state: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    state_dir, _ = state

    def full_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.write_atomically(state_dir / checkpoint.FILE_NAME, saved_registry())
    assert list(state_dir.iterdir()) == []


def test_an_older_snapshot_never_replaces_a_newer_one(state: tuple[Path, Path]) -> None:
    state_dir, _ = state
    file = checkpoint.CheckpointFile(state_dir / checkpoint.FILE_NAME)
    registry = SlotRegistry()
    registry.replace_all([make_slot("card0", "slot0")])
    old_states, old_version = registry.snapshot(), registry.version
    registry.begin_programming(make_slot("card0", "slot0").id, "aes", "acc-aes")
    file.write(registry.snapshot(), registry.version)  # the programming mark, written first
    file.write(old_states, old_version)  # the periodic writer's older snapshot, written late: not written
    (record,) = checkpoint.decode(file.path.read_bytes()).values()
    assert record.programming is not None
    assert record.programming.bitstream == "aes"

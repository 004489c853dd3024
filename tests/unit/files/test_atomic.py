"""The one atomic writer: a staged file that cannot be written is removed (the error that stopped the write is the
one raised); a replaced file keeps its mode, is never written through a link, and a killed write is swept later."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest

from agent.files.atomic import TEMP_PREFIX, StagedFile, remove_stale_temp_files, write_atomically


class FullDisk(io.RawIOBase):
    """What a file on a full disk does: every write fails with ENOSPC."""

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_write_that_fails_on_a_full_disk_leaves_no_temp_file(tmp_path: Path) -> None:
    staged = StagedFile(tmp_path)
    staged.stream.close()
    staged.stream = io.BufferedWriter(FullDisk())  # the data waits in the buffer until the file is closed

    def write_then_fail() -> None:
        with staged:
            staged.stream.write(b"x" * 100)
            raise RuntimeError("the pull failed")  # e.g. a hash mismatch: discarding must not raise over it

    with pytest.raises(RuntimeError, match="the pull failed"):
        write_then_fail()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(TEMP_PREFIX)] == []


def test_an_installed_file_stays(tmp_path: Path) -> None:
    with StagedFile(tmp_path) as staged:
        staged.stream.write(b"data")
        staged.install("target")
    assert (tmp_path / "target").read_bytes() == b"data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]


@pytest.mark.parametrize("mode", [0o600, 0o644], ids=["private", "readable"])
def test_a_replaced_file_has_the_mode_asked_for_in_a_directory_made_for_it(tmp_path: Path, mode: int) -> None:
    target = tmp_path / "state" / "file.json"
    write_atomically(target, b"old", mode)
    write_atomically(target, b"new", mode)
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == mode
    assert os.listdir(target.parent) == ["file.json"]


def test_a_link_at_the_target_is_replaced_never_written_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"not ours")
    target = tmp_path / "file.json"
    target.symlink_to(elsewhere)
    write_atomically(target, b"ours")
    assert not target.is_symlink()
    assert target.read_bytes() == b"ours"
    assert elsewhere.read_bytes() == b"not ours"


def test_the_temp_file_of_a_killed_write_is_found_and_swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "file.json"

    def killed(*args: object) -> None:
        raise KeyboardInterrupt  # stands in for the kill: nothing after the write runs

    monkeypatch.setattr(os, "replace", killed)
    monkeypatch.setattr(StagedFile, "discard", lambda self: None)  # a killed process cleans nothing up
    with pytest.raises(KeyboardInterrupt):
        write_atomically(target, b"half")
    monkeypatch.undo()
    (leftover,) = tmp_path.iterdir()
    assert remove_stale_temp_files(target, older_than_s=0) == 1
    assert list(tmp_path.iterdir()) == []
    assert leftover.name.startswith(".file.json.")

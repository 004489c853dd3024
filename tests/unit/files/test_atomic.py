"""A staged file that cannot be written is removed, and the error that stopped the write is the one raised."""

from __future__ import annotations

import errno
import io
from pathlib import Path

import pytest

from agent.files.atomic import TEMP_PREFIX, StagedFile


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

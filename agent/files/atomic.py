"""Atomic file installation: a reader sees the old file or the whole new one, never a part.

Write to a temp file in the target's directory, fsync it, rename it to the target,
fsync the directory. On any failure the temp file is removed, so a failed write
leaves nothing behind. Standard library only: the catalog, the programmers and the
pulls all install files this way.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

TEMP_PREFIX = ".tmp-"


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StagedFile:
    """A temp file in ``directory`` (open ``w+b``, named ``prefix...``), installed under a name chosen after writing.

    Use as a context manager: leaving the block without :meth:`install` (or with an
    exception) removes the temp file.
    """

    def __init__(self, directory: Path, mode: int = 0o644, prefix: str = TEMP_PREFIX) -> None:
        self.directory = directory
        fd, temp_name = tempfile.mkstemp(prefix=prefix, dir=directory)
        self._temp = Path(temp_name)
        try:
            os.fchmod(fd, mode)
            self.stream: BinaryIO = os.fdopen(fd, "w+b")
        except BaseException:
            os.close(fd)
            self._temp.unlink(missing_ok=True)
            raise
        self._installed = False

    def install(self, name: str) -> Path:
        """fsync the data, rename it to ``directory/name`` (replacing it), fsync the directory."""
        target = self.directory / name
        self.stream.flush()
        os.fsync(self.stream.fileno())
        self.stream.close()
        os.replace(self._temp, target)
        self._installed = True
        fsync_directory(self.directory)
        return target

    def discard(self) -> None:
        """Close and remove the temp file unless it was installed.

        Closing flushes what is still buffered; on a full disk that fails again (the file
        is closed all the same). The file is being thrown away, so that error is not
        raised over the one that got here, and the file is removed either way.
        """
        if self._installed:
            return  # install closed it
        with contextlib.suppress(OSError):
            self.stream.close()
        self._temp.unlink(missing_ok=True)

    def __enter__(self) -> StagedFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.discard()


def write_atomically(target: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``target`` with ``data`` atomically."""
    with StagedFile(target.parent, mode) as staged:
        staged.stream.write(data)
        staged.install(target.name)

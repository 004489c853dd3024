"""Atomic file installation: a reader (or a crash) sees the old file or the whole new one, never a part.

A temp file beside the target, fsynced and renamed into place; a failed write leaves nothing behind."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

TEMP_PREFIX = ".tmp-"
#: The ending of :func:`write_atomically`'s temporary files (see :func:`remove_stale_temp_files`).
TEMP_SUFFIX = ".tmp"
#: A temporary file older than this at start is a leftover of a killed writer (a write takes milliseconds).
STALE_TEMP_S = 60.0

logger = logging.getLogger(__name__)


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StagedFile:
    """A temp file in ``directory`` (open ``w+b``), installed under a name chosen after writing; leaving its
    ``with`` block without :meth:`install` removes it."""

    def __init__(self, directory: Path, mode: int = 0o644, prefix: str = TEMP_PREFIX, suffix: str = "") -> None:
        self.directory = directory
        fd, temp_name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
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
        """Close and remove the temp file unless it was installed (a failing close is not raised)."""
        if self._installed:
            return
        with contextlib.suppress(OSError):
            self.stream.close()
        self._temp.unlink(missing_ok=True)

    def __enter__(self) -> StagedFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.discard()


def write_atomically(target: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``target`` (never what a link there points to) with ``data``, atomically; makes its directory."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with StagedFile(target.parent, mode, prefix=_temp_prefix(target), suffix=TEMP_SUFFIX) as staged:
        staged.stream.write(data)
        staged.install(target.name)


def _temp_prefix(target: Path) -> str:
    return f".{target.name}."


def remove_stale_temp_files(target: Path, older_than_s: float = STALE_TEMP_S) -> int:
    """Remove the temporary files of ``target`` that killed writers left behind; how many were removed."""
    removed = 0
    now = time.time()
    try:
        names = os.listdir(target.parent)
    except OSError:
        return 0
    prefix = _temp_prefix(target)
    for name in names:
        if not (name.startswith(prefix) and name.endswith(TEMP_SUFFIX)):
            continue
        leftover = target.parent / name
        with contextlib.suppress(OSError):
            if now - os.lstat(leftover).st_mtime >= older_than_s:
                leftover.unlink()
                removed += 1
    if removed:
        logger.info("removed %d temporary file(s) of %s left by a writer that was killed", removed, target.name)
    return removed


def read_no_follow(path: Path) -> bytes:
    """The file's bytes; OSError (ELOOP) when ``path`` is a symbolic link, which is never followed."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()

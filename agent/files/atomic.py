"""Atomic file installation: a reader (or a crash) sees the old file or the whole new one, never a part.

A temp file beside the target, fsynced and renamed into place; a failed write leaves nothing behind. A server's
unix socket is placed the same way: bound under a one-off name, then renamed."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import BinaryIO, Protocol

TEMP_PREFIX = ".tmp-"
#: The ending of :func:`write_atomically`'s temporary files (see :func:`remove_stale_temp_files`).
TEMP_SUFFIX = ".tmp"
#: A temporary file older than this at start is a leftover of a killed writer (a write takes milliseconds).
STALE_TEMP_S = 60.0

logger = logging.getLogger(__name__)
_BIND_COUNTER = itertools.count()


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


class SocketServer(Protocol):
    """What :func:`serve_in_place` needs of a server (a ``grpc.aio.Server``)."""

    def add_insecure_port(self, address: str) -> int: ...

    async def start(self) -> None: ...


async def serve_in_place(server: SocketServer, path: Path) -> tuple[int, int]:
    """Bind ``server`` under a one-off name beside ``path`` (0600 from the start), start it and rename its socket to
    ``path``, replacing what is there (never unlinked: whoever serves there sees no deletion); the socket's
    :func:`identity`. OSError when it cannot be bound. gRPC may unlink a stopped server's path late: not ``path``."""
    # A short, random dot name (the kubelet's plugin watcher skips them): a socket path has at most 107 bytes.
    bound = path.with_name(f".bind-{secrets.token_hex(6)}-{next(_BIND_COUNTER)}")
    old_umask = os.umask(0o177)  # created 0600, never briefly wider; only around the bind (process-wide)
    try:
        try:
            port = server.add_insecure_port(f"unix://{bound}")
        finally:
            os.umask(old_umask)
        if port == 0:
            raise OSError(f"cannot bind {bound}")
        await server.start()
    except RuntimeError as exc:  # grpc reports a failed bind this way too
        raise OSError(f"cannot bind {bound}: {exc}") from exc
    os.chmod(bound, 0o600)
    os.replace(bound, path)
    st = os.stat(path)
    return st.st_dev, st.st_ino


def identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what ``path`` names, None when nothing: tells what was renamed there from its successor."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino

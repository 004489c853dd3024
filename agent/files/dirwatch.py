"""Watch a directory with inotify (ctypes on libc), bridged into asyncio."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import struct
from collections.abc import Callable
from enum import Enum
from pathlib import Path

logger = logging.getLogger(__name__)

_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_DELETE_SELF = 0x00000400
_IN_Q_OVERFLOW = 0x00004000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_EVENT_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


class DirEvent(Enum):
    """What happened to a name in the watched directory."""

    CREATED = "created"
    DELETED = "deleted"
    OVERFLOW = "overflow"  # events were lost: re-check everything


Callback = Callable[[DirEvent, str], None]


class DirWatcher:
    """Calls ``callback(event, name)`` from the event loop for creates and deletes in ``path``."""

    def __init__(self, path: Path, callback: Callback) -> None:
        self._path = path
        self._callback = callback
        self._fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Begin watching; raises OSError when inotify is unavailable."""
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        mask = _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_DELETE_SELF
        if libc.inotify_add_watch(fd, os.fsencode(self._path), mask) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"inotify_add_watch {self._path}: {os.strerror(err)}")
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._on_readable)

    def stop(self) -> None:
        if self._fd >= 0:
            if self._loop is not None:
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        offset = 0
        while offset + _EVENT_HEADER.size <= len(data):
            _wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
            raw = data[offset + _EVENT_HEADER.size : offset + _EVENT_HEADER.size + length]
            offset += _EVENT_HEADER.size + length
            name = os.fsdecode(raw.rstrip(b"\0"))
            if mask & _IN_Q_OVERFLOW or mask & _IN_DELETE_SELF:
                self._callback(DirEvent.OVERFLOW, name)
            elif mask & (_IN_CREATE | _IN_MOVED_TO):
                self._callback(DirEvent.CREATED, name)
            elif mask & (_IN_DELETE | _IN_MOVED_FROM):
                self._callback(DirEvent.DELETED, name)

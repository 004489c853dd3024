"""One DRA call at a time on the node, across agent processes: an exclusive ``flock`` on a file.

During an update two agent pods serve the driver at once (each on its own sockets), and
the kubelet may call either. Both keep their prepared claims in one record on the host,
so each call runs under this lock, as the Go helper does with its ``serialize.lock``.
The lock goes with the process: a killed agent never leaves it taken.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock on ``path`` (created 0600 if missing) for the block; blocks until it is free."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

"""Stream a download into a temp file, checking size and sha256 as the bytes arrive.

The temp file lives in the catalog directory (so adopting it is a rename on one file
system) under a dot-name the catalog never reads. It grows no larger than the
declared size: a source that sends more is cut off at once. On any failure, or if
the caller is cancelled, the temp file is removed: nothing half-written stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from agent.errors import PulledHashMismatch

#: Temp files of pulls start with this (the catalog skips dot-files and removes these at start).
TEMP_PREFIX = ".tmp-pull-"
#: Bytes gathered before one write (in a worker thread).
WRITE_BATCH_BYTES = 4 << 20


async def download_verified(chunks: AsyncIterator[bytes], directory: Path, size: int, sha256: str, what: str) -> Path:
    """Write ``chunks`` to a new temp file in ``directory``; return it once it is ``size`` bytes with ``sha256``."""
    fd, name = await asyncio.to_thread(tempfile.mkstemp, prefix=TEMP_PREFIX, dir=directory)
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as stream:
            digest = hashlib.sha256()
            written = 0
            batch: list[bytes] = []
            batched = 0
            async for chunk in chunks:
                written += len(chunk)
                if written > size:
                    raise PulledHashMismatch(f"{what}: the source sends more than the declared {size} bytes")
                batch.append(chunk)
                batched += len(chunk)
                if batched >= WRITE_BATCH_BYTES:
                    await asyncio.to_thread(_write, stream, digest, batch)
                    batch, batched = [], 0
            await asyncio.to_thread(_write, stream, digest, batch)
            await asyncio.to_thread(_sync, stream)
        if written != size:
            raise PulledHashMismatch(f"{what}: the source sent {written} bytes, the declaration says {size}")
        actual = digest.hexdigest()
        if actual != sha256:
            raise PulledHashMismatch(f"{what}: the pulled file has sha256 {actual}, the declaration says {sha256}")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)  # at once, even when cancelled: no await between failure and cleanup
        raise
    return path


def _write(stream: BinaryIO, digest: hashlib._Hash, batch: list[bytes]) -> None:
    for chunk in batch:
        digest.update(chunk)
        stream.write(chunk)


def _sync(stream: BinaryIO) -> None:
    stream.flush()
    os.fsync(stream.fileno())

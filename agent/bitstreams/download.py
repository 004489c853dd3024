"""Stream a download into a staged file, checking size and sha256 as the bytes arrive.

A source that sends more than the declared size is cut off at once; writes happen in worker threads."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import BinaryIO

from agent.errors import PulledHashMismatch

#: Bytes gathered before one write (in a worker thread).
WRITE_BATCH_BYTES = 4 << 20


async def download_verified(chunks: AsyncIterator[bytes], stream: BinaryIO, size: int, sha256: str, what: str) -> None:
    """Write ``chunks`` to ``stream``; return once they were ``size`` bytes with ``sha256``, else PulledHashMismatch."""
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
    if written != size:
        raise PulledHashMismatch(f"{what}: the source sent {written} bytes, the declaration says {size}")
    actual = digest.hexdigest()
    if actual != sha256:
        raise PulledHashMismatch(f"{what}: the pulled file has sha256 {actual}, the declaration says {sha256}")


def _write(stream: BinaryIO, digest: hashlib._Hash, batch: list[bytes]) -> None:
    for chunk in batch:
        digest.update(chunk)
        stream.write(chunk)

"""Streaming into a staged file: size and sha256 checked on the way; any failure leaves no file."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.bitstreams.puller import download_verified
from agent.errors import PulledHashMismatch
from agent.files.atomic import StagedFile

DATA = bytes(range(256)) * 64
SHA = hashlib.sha256(DATA).hexdigest()


async def chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def download(data: AsyncIterator[bytes], directory: Path) -> None:
    """As the puller does: into a staged file, installed (as the catalog would) once verified."""
    with StagedFile(directory) as staged:
        await download_verified(data, staged.stream, len(DATA), SHA, "test")
        staged.install("pulled.bin")


async def test_a_matching_download_is_kept(tmp_path: Path) -> None:
    await download(chunks(DATA), tmp_path)
    assert os.listdir(tmp_path) == ["pulled.bin"]
    assert (tmp_path / "pulled.bin").read_bytes() == DATA


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(DATA + b"x", "sends more than the declared", id="too-long"),
        pytest.param(DATA[:-1], "sent 16383 bytes, the declaration says 16384", id="too-short"),
        pytest.param(DATA[:-1] + b"x", f"declaration says {SHA}", id="tampered"),
    ],
)
async def test_a_mismatch_is_refused_and_nothing_is_left(tmp_path: Path, data: bytes, message: str) -> None:
    with pytest.raises(PulledHashMismatch, match=message):
        await download(chunks(data), tmp_path)
    assert os.listdir(tmp_path) == []


async def test_a_cancelled_download_leaves_nothing(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def stalls() -> AsyncIterator[bytes]:
        yield DATA[:100]
        started.set()
        await asyncio.Event().wait()
        yield b""  # pragma: no cover

    task = asyncio.create_task(download(stalls(), tmp_path))
    await started.wait()
    assert len(os.listdir(tmp_path)) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert os.listdir(tmp_path) == []

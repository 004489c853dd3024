"""The checkpoint writer when it is stopped while a write is still running in its thread."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from agent.slots import checkpoint
from agent.slots.registry import SlotRegistry
from tests.unit.slots.factories import make_slot

WAIT_S = 5.0


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def loop_turn() -> None:
    """Return after every callback already scheduled on the loop has run (no time passes)."""
    turn = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(turn.set_result, None)
    await turn


async def test_final_write_is_not_overtaken_by_a_write_still_in_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / checkpoint.FILE_NAME
    slot = make_slot()
    registry = SlotRegistry()
    registry.replace_all([slot])

    loop = asyncio.get_running_loop()
    thread_writing = asyncio.Event()
    release, thread_done = threading.Event(), threading.Event()
    original = checkpoint.write_atomically

    def slow_write_atomic(target: Path, data: bytes, mode: int = 0o644) -> None:
        if threading.current_thread() is threading.main_thread():
            original(target, data, mode)
            return
        loop.call_soon_threadsafe(thread_writing.set)
        release.wait(WAIT_S)  # a slow disk
        try:
            original(target, data, mode)
        finally:
            thread_done.set()

    monkeypatch.setattr(checkpoint, "write_atomically", slow_write_atomic)
    writer = asyncio.create_task(checkpoint.keep_checkpoint(checkpoint.CheckpointFile(path), registry))
    async with asyncio.timeout(WAIT_S):
        await thread_writing.wait()
    # The state changes while that (older) write is still on its way, then the agent stops.
    registry.set_holder([slot.id], "default", "web", "main")
    writer.cancel()
    await loop_turn()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(writer, WAIT_S)
    assert await asyncio.to_thread(thread_done.wait, WAIT_S)

    # The file holds the final state, not the older write that finished last.
    record = checkpoint.decode(path.read_bytes())[slot.id]
    assert record.holder is not None
    assert record.holder.pod == "web"
    assert files_in(tmp_path) == [checkpoint.FILE_NAME]  # no temp file left behind

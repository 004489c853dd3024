"""The checkpoint writer of an agent that another agent took over from writes nothing, not even at the end."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.slots import checkpoint
from agent.slots.registry import SlotRegistry
from tests.unit.slots.factories import make_slot

WAIT_S = 5.0


class Writes:
    """Records every checkpoint write (in the thread or at the end) and wakes a waiter."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pods: list[str | None] = []
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        original = checkpoint.write_atomically

        def recording(target: Path, data: bytes, mode: int = 0o644) -> None:
            original(target, data, mode)
            (record,) = checkpoint.decode(data).values()
            self._loop.call_soon_threadsafe(self._record, record.holder.pod if record.holder else None)

        monkeypatch.setattr(checkpoint, "write_atomically", recording)

    def _record(self, pod: str | None) -> None:
        self.pods.append(pod)
        self._changed.set()

    async def wait_count(self, count: int) -> None:
        async with asyncio.timeout(WAIT_S):
            while len(self.pods) < count:
                self._changed.clear()
                await self._changed.wait()


async def stop(writer: asyncio.Task[None]) -> None:
    writer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(writer, WAIT_S)


async def test_no_write_once_taken_over_not_even_the_final_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(checkpoint, "WRITE_INTERVAL_S", 0.0)
    writes = Writes(monkeypatch)
    path = tmp_path / checkpoint.FILE_NAME
    slot = make_slot()
    registry = SlotRegistry()
    registry.replace_all([slot])
    ours = True
    writer = asyncio.create_task(
        checkpoint.keep_checkpoint(checkpoint.CheckpointFile(path), registry, owned=lambda: ours)
    )
    registry.set_holder([slot.id], "default", "before", "main")
    await writes.wait_count(1)
    assert writes.pods == ["before"]

    ours = False  # a newer agent serves the node now and writes its own checkpoint
    registry.set_holder([slot.id], "default", "after", "main")
    caplog.set_level("INFO", logger="agent.slots.checkpoint")
    await stop(writer)
    assert writes.pods == ["before"]
    assert checkpoint.decode(path.read_bytes())[slot.id].holder.pod == "before"  # type: ignore[union-attr]
    assert f"checkpoint {path} left to the agent that took over" in caplog.messages


@pytest.mark.parametrize("owned", [True, False], ids=["ours", "taken-over"])
async def test_final_write_only_while_ours(tmp_path: Path, owned: bool) -> None:
    path = tmp_path / checkpoint.FILE_NAME
    slot = make_slot()
    registry = SlotRegistry()
    registry.replace_all([slot])
    started = asyncio.Event()
    writer = asyncio.create_task(
        checkpoint.keep_checkpoint(checkpoint.CheckpointFile(path), registry, owned=lambda: started.set() or owned)
    )
    await asyncio.wait_for(started.wait(), WAIT_S)  # a task cancelled before its first step runs nothing
    await stop(writer)
    assert path.exists() is owned

"""Fault files: a deployed simulated node's slot fails its next programming, or is unhealthy, on a file's word."""

from __future__ import annotations

import asyncio
import contextlib
import errno
from pathlib import Path

import pytest

from agent.simfpga import SimFabric
from agent.simfpga.faultfiles import FAULTS_DIR, follow_fault_files


@pytest.fixture
def fabric(tmp_path: Path) -> SimFabric:
    return SimFabric(tmp_path / "dev", cards=1, slots_per_card=2, program_s=0)


def health(fabric: SimFabric) -> dict[str, tuple[bool, str]]:
    return {f"{i.card}-{i.region}": (i.healthy, i.reason) for i in fabric.slots()}


async def next_look(changes: asyncio.Queue[None]) -> None:
    async with asyncio.timeout(5):
        await changes.get()


async def test_a_fail_next_file_fails_one_programming_and_an_unhealthy_file_holds_while_it_is_there(
    fabric: SimFabric,
) -> None:
    faults = fabric.dev_dir / FAULTS_DIR
    faults.mkdir()
    changes: asyncio.Queue[None] = asyncio.Queue()
    fabric.subscribe(lambda _event, _info: changes.put_nowait(None))
    (faults / "simcard0-slot1.fail-next").write_text("bitstream CRC error\n")
    (faults / "simcard0-slot0.unhealthy").write_text("configuration\nCRC error")
    task = asyncio.create_task(follow_fault_files(fabric, poll_s=0.01))
    try:
        await next_look(changes)
        assert health(fabric) == {"simcard0-slot0": (False, "configuration CRC error"), "simcard0-slot1": (True, "")}
        assert not (faults / "simcard0-slot1.fail-next").exists()  # armed in the same look, and consumed
        with pytest.raises(OSError, match="bitstream CRC error") as failed:
            await fabric.program("simcard0", "slot1", "acc-a")
        assert failed.value.errno == errno.EIO
        await fabric.program("simcard0", "slot1", "acc-a")  # consumed: the next one works
        (faults / "simcard0-slot0.unhealthy").unlink()
        while health(fabric)["simcard0-slot0"] != (True, ""):
            await next_look(changes)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

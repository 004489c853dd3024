"""SimProgrammer: fabric failures mapped to ProgrammingError / ProgrammingTimeout naming the slot."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from agent.discovery.sim import slot_from_sim
from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.programming.sim import SimProgrammer
from agent.simfpga import SimEvent, SimFabric, SimSlotInfo
from agent.slots.model import Slot

IMAGE = b"\x00bitstream"


@pytest.fixture
def fabric(tmp_path: Path) -> SimFabric:
    return SimFabric(tmp_path / "dev", cards=2, slots_per_card=2, program_s=0)


def sim_slot(fabric: SimFabric, card: str, region: str) -> Slot:
    (info,) = [i for i in fabric.slots() if (i.card, i.region) == (card, region)]
    return slot_from_sim(info)


def content(fabric: SimFabric, card: str, region: str) -> str | None:
    (info,) = [i for i in fabric.slots() if (i.card, i.region) == (card, region)]
    return info.loaded


async def test_program_loads_the_accelerator(fabric: SimFabric) -> None:
    took = await SimProgrammer(fabric).program(sim_slot(fabric, "simcard1", "slot0"), IMAGE, "aes-v1", 5.0)
    assert took >= 0.0
    assert content(fabric, "simcard1", "slot0") == "aes-v1"
    assert content(fabric, "simcard0", "slot0") is None


async def test_empty_image_is_rejected_before_touching_the_card(fabric: SimFabric) -> None:
    await fabric.program("simcard0", "slot1", "old")
    events: list[tuple[SimEvent, SimSlotInfo]] = []
    fabric.subscribe(lambda event, info: events.append((event, info)))
    with pytest.raises(ProgrammingError, match=r"^slot simcard0-slot1: bitstream image is empty$"):
        await SimProgrammer(fabric).program(sim_slot(fabric, "simcard0", "slot1"), b"", "aes-v1", 5.0)
    assert events == []
    assert content(fabric, "simcard0", "slot1") == "old"


async def test_failure_becomes_programming_error(fabric: SimFabric) -> None:
    fabric.fail_next_program("simcard0", "slot0", reason="bitstream CRC mismatch")
    with pytest.raises(ProgrammingError) as info:
        await SimProgrammer(fabric).program(sim_slot(fabric, "simcard0", "slot0"), IMAGE, "aes-v1", 5.0)
    assert type(info.value) is ProgrammingError
    message = str(info.value)
    assert message.startswith("slot simcard0-slot0: programming aes-v1 failed")
    assert "bitstream CRC mismatch" in message
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == errno.EIO
    assert content(fabric, "simcard0", "slot0") is None


async def test_hang_becomes_programming_timeout(fabric: SimFabric) -> None:
    fabric.hang_next_program("simcard1", "slot1")
    programmer = SimProgrammer(fabric)
    expected = r"^slot simcard1-slot1: programming fft did not finish within 0\.1 s$"
    with pytest.raises(ProgrammingTimeout, match=expected):
        await programmer.program(sim_slot(fabric, "simcard1", "slot1"), IMAGE, "fft", 0.05)
    assert content(fabric, "simcard1", "slot1") is None
    # the card is usable again afterwards
    await programmer.program(sim_slot(fabric, "simcard1", "slot1"), IMAGE, "fft", 5.0)
    assert content(fabric, "simcard1", "slot1") == "fft"


async def test_timeout_is_a_programming_error_too(fabric: SimFabric) -> None:
    fabric.hang_next_program("simcard0", "slot0")
    with pytest.raises(ProgrammingError):
        await SimProgrammer(fabric).program(sim_slot(fabric, "simcard0", "slot0"), IMAGE, "aes", 0.01)


async def test_unplugged_card_becomes_programming_error(fabric: SimFabric) -> None:
    slot = sim_slot(fabric, "simcard1", "slot0")
    fabric.unplug("simcard1")
    expected = r"^slot simcard1-slot0: programming aes failed: .*simcard1 is not present"
    with pytest.raises(ProgrammingError, match=expected):
        await SimProgrammer(fabric).program(slot, IMAGE, "aes", 5.0)


async def test_slot_the_fabric_does_not_have(tmp_path: Path, fabric: SimFabric) -> None:
    other = SimFabric(tmp_path / "other", cards=4, slots_per_card=4, program_s=0)
    (info,) = [i for i in other.slots() if (i.card, i.region) == ("simcard3", "slot3")]
    with pytest.raises(ProgrammingError, match=r"^slot simcard3-slot3: programming aes failed"):
        await SimProgrammer(fabric).program(slot_from_sim(info), IMAGE, "aes", 5.0)

"""The command programmer on its own: staged bytes, one tool per card at a time, a busy card, read-back parsing."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.programming.command import CommandProgrammer
from agent.programming.commandspec import parse_command_programmers
from agent.slots.model import Health, Slot, SlotId
from tests.unit.programming.cardlocks import busy

ACCEL = "0123456789abcdef0123456789abcdef"


def slot(card: str, region: str) -> Slot:
    return Slot(
        id=SlotId(f"{card}-{region}"),
        card=card,
        region=region,
        numa=None,
        device_nodes=(),
        platform="p",
        loaded=None,
        health=Health.HEALTHY,
        backend="static",
        control_node=f"ctl-{card}",
    )


def programmer(**entry: object) -> CommandProgrammer:
    return CommandProgrammer(parse_command_programmers([{"platform": "p", **entry}]))


async def test_command_programmer_stages_bytes_in_a_private_file_for_the_tool(tmp_path: Path) -> None:
    out = tmp_path / "seen"
    script = 'cat "$1" > "$2"; stat -c %a "$1" >> "$2"'
    tool = programmer(program=["/bin/sh", "-c", script, "sh", "{image}", str(out)])
    await tool.program(slot("c0", "r0"), b"bitstream bytes\n", ACCEL, 30.0)
    assert out.read_text() == "bitstream bytes\n600\n"


async def test_command_programmer_runs_one_tool_per_card_at_a_time(tmp_path: Path) -> None:
    log = tmp_path / "log"
    script = 'echo "start $1" >> "$2"; sleep 0.2; echo "end $1" >> "$2"'
    tool = programmer(program=["/bin/sh", "-c", script, "sh", "{slot}", str(log)])
    await asyncio.gather(*(tool.program_file(slot("c0", r), tmp_path / "x", ACCEL, 30.0) for r in ("r0", "r1")))
    lines = log.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["start", "end", "start", "end"]
    assert lines[0].split()[1] == lines[1].split()[1]


async def test_command_programmer_card_busy_for_the_whole_deadline_is_a_timeout(tmp_path: Path) -> None:
    started = tmp_path / "started"
    tool = programmer(program=["/bin/sh", "-c", 'touch "$1"; exec sleep 3600', "sh", str(started)])
    first = asyncio.create_task(tool.program_file(slot("c0", "r0"), tmp_path / "x", ACCEL, 60.0))
    async with asyncio.timeout(30):  # the tool runs: it holds the card (not a measurement: a hang guard)
        while True:
            if await asyncio.to_thread(started.exists):
                break
            await asyncio.sleep(0.01)
    assert busy(tool._cards, "c0")
    with pytest.raises(ProgrammingTimeout, match="card c0 was busy with another programming operation"):
        await tool.program_file(slot("c0", "r1"), tmp_path / "x", ACCEL, 0.2)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert not busy(tool._cards, "c0")


@pytest.mark.parametrize(
    ("printed", "pattern", "outcome"),
    [
        ("0123-4567-89ab-cdef-0123456789ABCDEF\n", None, None),
        ("id: 01234567-89ab-cdef-0123-456789abcdef\n", r"id: (\S+)", None),
        ("nothing loaded\n", r"id: (\S+)", "the read-back reports no accelerator after programming"),
        ("id: something-else\n", r"id: (\S+)", "the read-back reports accelerator something-else after programming"),
    ],
    ids=["whole-output", "pattern-group", "no-match", "other-accelerator"],
)
async def test_command_programmer_read_back_decides_whether_programming_worked(
    tmp_path: Path, printed: str, pattern: str | None, outcome: str | None
) -> None:
    (tmp_path / "out").write_text(printed)
    entry: dict[str, object] = {"program": ["/bin/true"], "read-back": ["/bin/cat", str(tmp_path / "out")]}
    if pattern is not None:
        entry["read-back-pattern"] = pattern
    tool = programmer(**entry)
    target = slot("c0", "r0")
    if outcome is None:
        await tool.program_file(target, tmp_path / "x", ACCEL, 30.0)
        assert tool.reported(target.id) == ACCEL
    else:
        with pytest.raises(ProgrammingError, match=outcome):
            await tool.program_file(target, tmp_path / "x", ACCEL, 30.0)
        assert tool.reported(target.id) is None


async def test_command_programmer_leaves_slots_of_other_backends_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    tool = programmer(program=["/bin/sh", "-c", 'echo ran > "$1"', "sh", str(out)], **{"read-back": ["/bin/true"]})
    dfl = dataclasses.replace(slot("c0", "port0"), backend="dfl")  # the same platform, but the kernel's slot
    assert not tool.can_program(dfl)
    await tool.read_back_all([dfl])
    assert tool.reported(dfl.id) is None
    with pytest.raises(ProgrammingError, match="no command programmer is configured for it"):
        await tool.program_file(dfl, tmp_path / "x", ACCEL, 30.0)
    assert not await asyncio.to_thread(out.exists)


async def test_a_whole_card_image_is_loaded_by_program_card_and_a_slot_after_it_restores_the_base(
    tmp_path: Path,
) -> None:
    log = tmp_path / "log"
    record = ["/bin/sh", "-c", 'echo "$*" >> "$0"', str(log)]
    tool = programmer(
        program=[*record, "slot", "{slot}"],
        **{"program-card": [*record, "card", "{card}", "{accelerator}"], "restore-base": [*record, "base", "{card}"]},
    )
    slots = [slot("c0", "r0"), slot("c0", "r1")]
    assert tool.can_program_card(slots)
    assert not tool.can_program_card([*slots, slot("c1", "r0")])
    await tool.program_card(slots, b"full image", ACCEL, 30.0)
    assert tool.whole_card("c0")
    assert [tool.reported(s.id) for s in slots] == [ACCEL, ACCEL]
    await tool.program_file(slots[0], tmp_path / "x", ACCEL, 30.0)
    assert not tool.whole_card("c0")
    assert tool.reported(slots[1].id) is None  # its part of the card's image is gone
    assert log.read_text().splitlines() == [f"card c0 {ACCEL}", "base c0", "slot c0-r0"]
    await tool.program_file(slots[1], tmp_path / "x", ACCEL, 30.0)  # the base is there: no restore again
    assert log.read_text().splitlines()[-1] == "slot c0-r1"


def test_an_entry_without_program_card_offers_no_whole_card() -> None:
    tool = programmer(program=["/bin/true"])
    assert not tool.can_program_card([slot("c0", "r0"), slot("c0", "r1")])


async def test_a_failed_program_card_names_the_card_and_leaves_the_slots_unknown(tmp_path: Path) -> None:
    tool = programmer(program=["/bin/true"], **{"program-card": ["/bin/sh", "-c", "echo no fabric >&2; exit 3"]})
    slots = [slot("c0", "r0"), slot("c0", "r1")]
    with pytest.raises(ProgrammingError, match=r"card c0: programming .* with sh: /bin/sh exited with status 3"):
        await tool.program_card(slots, b"full image", ACCEL, 30.0)
    assert not tool.whole_card("c0")
    assert [tool.reported(s.id) for s in slots] == [None, None]

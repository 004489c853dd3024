"""SimFabric: device files, persistent content, injected faults, per-card serialisation."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import stat
from pathlib import Path

import pytest

from agent.simfpga import SimEvent, SimFabric, SimSlotInfo
from agent.simfpga.fabric import PLATFORM, STATE_FILE


class Recorder:
    """A listener that keeps every event as (event, card, region, loaded, healthy)."""

    def __init__(self) -> None:
        self.events: list[tuple[SimEvent, str, str, str | None, bool]] = []

    def __call__(self, event: SimEvent, info: SimSlotInfo) -> None:
        self.events.append((event, info.card, info.region, info.loaded, info.healthy))


def device_files(dev_dir: Path) -> list[str]:
    return sorted(p.name for p in dev_dir.iterdir() if p.name.startswith("fpga-sim-"))


def loaded(fabric: SimFabric) -> dict[str, str | None]:
    return {f"{info.card}/{info.region}": info.loaded for info in fabric.slots()}


@pytest.fixture
def fabric(tmp_path: Path) -> SimFabric:
    return SimFabric(tmp_path / "dev", cards=2, slots_per_card=2, program_s=0)


@pytest.fixture
def recorder(fabric: SimFabric) -> Recorder:
    recorder = Recorder()
    fabric.subscribe(recorder)
    return recorder


# ---------------------------------------------------------------- the cards
def test_reports_every_slot_with_its_device_file(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    fabric = SimFabric(dev, cards=3, slots_per_card=2, program_s=0)
    infos = fabric.slots()
    assert [(i.card, i.region, i.numa) for i in infos] == [
        ("simcard0", "slot0", 0),
        ("simcard0", "slot1", 0),
        ("simcard1", "slot0", 1),
        ("simcard1", "slot1", 1),
        ("simcard2", "slot0", 0),
        ("simcard2", "slot1", 0),
    ]
    assert all(i.platform == PLATFORM and i.loaded is None and i.healthy and i.reason == "" for i in infos)
    assert all(Path(i.device_path).parent == dev and Path(i.device_path).is_file() for i in infos)
    assert len({i.device_path for i in infos}) == 6
    assert device_files(dev) == sorted(Path(i.device_path).name for i in infos)


def test_device_nodes_are_character_devices_a_runtime_accepts(tmp_path: Path) -> None:
    """With device_nodes (the DaemonSet, as root): char devices with /dev/null's numbers, else a clear EPERM."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "fpga-sim-simcard0-slot0").write_text("")  # a regular file left by a run without device nodes
    if os.geteuid() != 0:
        with pytest.raises(PermissionError):
            SimFabric(dev, cards=1, slots_per_card=2, program_s=0, device_nodes=True)
        return
    fabric = SimFabric(dev, cards=1, slots_per_card=2, program_s=0, device_nodes=True)
    for info in fabric.slots():
        st = os.stat(info.device_path)
        assert stat.S_ISCHR(st.st_mode), info.device_path
        assert st.st_rdev == os.stat("/dev/null").st_rdev
        assert stat.S_IMODE(st.st_mode) == 0o666
    fabric.unplug("simcard0")
    assert device_files(dev) == []
    fabric.plug("simcard0")
    assert all(stat.S_ISCHR(os.stat(i.device_path).st_mode) for i in fabric.slots())


def test_no_cards_is_a_valid_fabric(tmp_path: Path) -> None:
    assert SimFabric(tmp_path / "dev", cards=0, slots_per_card=1, program_s=0).slots() == []


@pytest.mark.parametrize(
    ("cards", "slots_per_card"),
    [pytest.param(-1, 1, id="negative-cards"), pytest.param(1, 0, id="no-slots")],
)
def test_rejects_impossible_shapes(tmp_path: Path, cards: int, slots_per_card: int) -> None:
    with pytest.raises(ValueError, match="need cards >= 0 and slots_per_card >= 1"):
        SimFabric(tmp_path, cards=cards, slots_per_card=slots_per_card, program_s=0)


def test_unplug_removes_device_files_and_reports_remove(fabric: SimFabric, recorder: Recorder, tmp_path: Path) -> None:
    fabric.unplug("simcard1")
    assert device_files(tmp_path / "dev") == ["fpga-sim-simcard0-slot0", "fpga-sim-simcard0-slot1"]
    assert [(i.card, i.region) for i in fabric.slots()] == [("simcard0", "slot0"), ("simcard0", "slot1")]
    assert [(e, c, r) for e, c, r, *_ in recorder.events] == [
        (SimEvent.REMOVE, "simcard1", "slot0"),
        (SimEvent.REMOVE, "simcard1", "slot1"),
    ]
    fabric.unplug("simcard1")  # already gone: nothing happens
    assert len(recorder.events) == 2


def test_plug_recreates_device_files_and_reports_add(fabric: SimFabric, recorder: Recorder, tmp_path: Path) -> None:
    fabric.unplug("simcard0")
    fabric.plug("simcard0")
    assert len(device_files(tmp_path / "dev")) == 4
    assert all(Path(i.device_path).exists() for i in fabric.slots())
    assert [(e, c, r) for e, c, r, *_ in recorder.events[2:]] == [
        (SimEvent.ADD, "simcard0", "slot0"),
        (SimEvent.ADD, "simcard0", "slot1"),
    ]
    fabric.plug("simcard0")  # already there: nothing happens
    assert len(recorder.events) == 4


def test_set_health_reports_change(fabric: SimFabric, recorder: Recorder) -> None:
    fabric.set_health("simcard0", "slot1", healthy=False, reason="CRC error")
    fabric.set_health("simcard1", "slot0", healthy=False)
    by_slot = {(i.card, i.region): i for i in fabric.slots()}
    assert (by_slot["simcard0", "slot1"].healthy, by_slot["simcard0", "slot1"].reason) == (False, "CRC error")
    assert by_slot["simcard1", "slot0"].reason == "injected fault"
    fabric.set_health("simcard0", "slot1", healthy=True, reason="ignored when healthy")
    assert fabric.slots()[1].healthy
    assert fabric.slots()[1].reason == ""
    assert recorder.events == [
        (SimEvent.CHANGE, "simcard0", "slot1", None, False),
        (SimEvent.CHANGE, "simcard1", "slot0", None, False),
        (SimEvent.CHANGE, "simcard0", "slot1", None, True),
    ]


def test_an_unplugged_card_reports_nothing_until_plugged(fabric: SimFabric, recorder: Recorder) -> None:
    fabric.unplug("simcard1")
    fabric.set_health("simcard1", "slot0", healthy=False, reason="dead")
    assert [e for e, *_ in recorder.events] == [SimEvent.REMOVE, SimEvent.REMOVE]
    fabric.plug("simcard1")
    assert recorder.events[-2] == (SimEvent.ADD, "simcard1", "slot0", None, False)


def test_unsubscribe_stops_events(fabric: SimFabric) -> None:
    recorder = Recorder()
    unsubscribe = fabric.subscribe(recorder)
    fabric.set_health("simcard0", "slot0", healthy=False)
    unsubscribe()
    fabric.set_health("simcard0", "slot0", healthy=True)
    assert len(recorder.events) == 1


# ------------------------------------------------------------------ program
async def test_program_loads_and_reports_both_edges(fabric: SimFabric, recorder: Recorder) -> None:
    await fabric.program("simcard0", "slot1", "aes-v1")
    assert loaded(fabric)["simcard0/slot1"] == "aes-v1"
    assert recorder.events == [
        (SimEvent.CHANGE, "simcard0", "slot1", None, True),  # content undefined while reconfiguring
        (SimEvent.CHANGE, "simcard0", "slot1", "aes-v1", True),
    ]


async def test_a_whole_card_image_replaces_its_slots_and_survives_a_new_fabric(
    fabric: SimFabric, tmp_path: Path
) -> None:
    await fabric.program("simcard0", "slot1", "aes-v1")
    await fabric.program_card("simcard0", "full-v1")
    card0 = [info for info in fabric.slots() if info.card == "simcard0"]
    assert [(i.loaded, i.whole_card) for i in card0] == [("full-v1", True), ("full-v1", True)]
    assert all(not i.whole_card for i in fabric.slots() if i.card == "simcard1")
    again = SimFabric(tmp_path / "dev", cards=2, slots_per_card=2, program_s=0)
    assert [(i.loaded, i.whole_card) for i in again.slots() if i.card == "simcard0"] == [("full-v1", True)] * 2


async def test_programming_a_slot_of_a_whole_card_restores_the_base_layout_first(
    fabric: SimFabric, recorder: Recorder
) -> None:
    await fabric.program_card("simcard0", "full-v1")
    recorder.events.clear()
    await fabric.program("simcard0", "slot0", "aes-v1")
    assert loaded(fabric) == {
        "simcard0/slot0": "aes-v1",
        "simcard0/slot1": None,
        "simcard1/slot0": None,
        "simcard1/slot1": None,
    }
    assert (SimEvent.CHANGE, "simcard0", "slot1", None, True) in recorder.events  # the other slot told too
    assert not any(i.whole_card for i in fabric.slots())


async def test_a_failed_whole_card_programming_leaves_every_slot_unknown(fabric: SimFabric) -> None:
    await fabric.program("simcard0", "slot0", "aes-v1")
    fabric.fail_next_program("simcard0", "slot1", "bad image")
    with pytest.raises(OSError, match="bad image"):
        await fabric.program_card("simcard0", "full-v1")
    assert [(i.loaded, i.whole_card) for i in fabric.slots() if i.card == "simcard0"] == [(None, False)] * 2


async def test_programmed_content_survives_a_new_fabric(fabric: SimFabric, tmp_path: Path) -> None:
    await fabric.program("simcard0", "slot1", "aes-v1")
    await fabric.program("simcard1", "slot0", "fft-v2")
    await fabric.program("simcard0", "slot1", "aes-v2")
    saved = json.loads((tmp_path / "dev" / STATE_FILE).read_text())
    assert saved == {"version": 1, "loaded": {"simcard0/slot1": "aes-v2", "simcard1/slot0": "fft-v2"}, "cards": {}}

    again = SimFabric(tmp_path / "dev", cards=2, slots_per_card=2, program_s=0)
    assert loaded(again) == {
        "simcard0/slot0": None,
        "simcard0/slot1": "aes-v2",
        "simcard1/slot0": "fft-v2",
        "simcard1/slot1": None,
    }


def test_restore_ignores_entries_for_slots_that_do_not_exist(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / STATE_FILE).write_text(
        json.dumps(
            {
                "loaded": {
                    "simcard0/slot0": "aes",
                    "simcard9/slot0": "x",
                    "simcard0/slot7": "y",
                    "simcard0/slot1": 5,
                }
            }
        )
    )
    fabric = SimFabric(dev, cards=1, slots_per_card=2, program_s=0)
    assert loaded(fabric) == {"simcard0/slot0": "aes", "simcard0/slot1": None}


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("{not json", id="not-json"),
        pytest.param("[]", id="list"),
        pytest.param("null", id="null"),
        pytest.param('{"version": 1}', id="no-loaded"),
        pytest.param('{"loaded": ["simcard0/slot0"]}', id="loaded-not-object"),
        pytest.param("\udcff", id="not-utf8"),
    ],
)
def test_corrupt_state_is_tolerated(tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    state = dev / STATE_FILE
    state.write_bytes(content.encode("utf-8", "surrogateescape"))
    with caplog.at_level(logging.WARNING, logger="agent.simfpga.fabric"):
        fabric = SimFabric(dev, cards=1, slots_per_card=2, program_s=0)
    assert set(loaded(fabric).values()) == {None}
    assert len(device_files(dev)) == 2
    (record,) = [r for r in caplog.records if r.name == "agent.simfpga.fabric"]
    assert record.levelno == logging.WARNING
    assert str(state) in record.getMessage()
    assert "starting with empty slots" in record.getMessage()


async def test_a_corrupt_state_is_overwritten_by_the_next_program(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / STATE_FILE).write_text("garbage")
    fabric = SimFabric(dev, cards=1, slots_per_card=1, program_s=0)
    await fabric.program("simcard0", "slot0", "aes")
    assert loaded(SimFabric(dev, cards=1, slots_per_card=1, program_s=0)) == {"simcard0/slot0": "aes"}


@pytest.mark.parametrize(
    ("card", "region"),
    [
        pytest.param("simcard7", "slot0", id="unknown-card"),
        pytest.param("simcard0", "slot9", id="unknown-slot"),
    ],
)
async def test_program_of_an_unknown_slot(fabric: SimFabric, card: str, region: str) -> None:
    with pytest.raises(FileNotFoundError, match=f"{card}/{region}"):
        await fabric.program(card, region, "aes")


async def test_program_of_an_unplugged_card_fails_with_enodev(fabric: SimFabric) -> None:
    fabric.unplug("simcard1")
    with pytest.raises(OSError, match="not present") as info:
        await fabric.program("simcard1", "slot0", "aes")
    assert info.value.errno == errno.ENODEV


async def test_injected_failure_leaves_the_slot_empty(fabric: SimFabric, recorder: Recorder, tmp_path: Path) -> None:
    await fabric.program("simcard0", "slot0", "aes-v1")
    fabric.fail_next_program("simcard0", "slot0", reason="bitstream CRC mismatch")
    with pytest.raises(OSError, match="bitstream CRC mismatch") as info:
        await fabric.program("simcard0", "slot0", "aes-v2")
    assert info.value.errno == errno.EIO
    assert loaded(fabric)["simcard0/slot0"] is None
    assert recorder.events[-1] == (SimEvent.CHANGE, "simcard0", "slot0", None, True)
    assert loaded(SimFabric(tmp_path / "dev", cards=2, slots_per_card=2, program_s=0))["simcard0/slot0"] is None

    await fabric.program("simcard0", "slot0", "aes-v2")  # the fault fires once
    assert loaded(fabric)["simcard0/slot0"] == "aes-v2"


async def test_injected_failure_is_per_slot(fabric: SimFabric) -> None:
    fabric.fail_next_program("simcard0", "slot0")
    await fabric.program("simcard0", "slot1", "aes")
    await fabric.program("simcard1", "slot0", "aes")
    with pytest.raises(OSError, match="injected failure"):
        await fabric.program("simcard0", "slot0", "aes")


async def test_injected_hang_never_completes_and_frees_the_card(fabric: SimFabric, recorder: Recorder) -> None:
    await fabric.program("simcard0", "slot0", "aes-v1")
    fabric.hang_next_program("simcard0", "slot0")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await fabric.program("simcard0", "slot0", "aes-v2")
    assert loaded(fabric)["simcard0/slot0"] is None
    assert recorder.events[-1] == (SimEvent.CHANGE, "simcard0", "slot0", None, True)
    # the card's lock was released and the hang fired only once
    await fabric.program("simcard0", "slot1", "fft")
    await fabric.program("simcard0", "slot0", "aes-v2")
    assert loaded(fabric)["simcard0/slot0"] == "aes-v2"


async def test_card_unplugged_while_programming(fabric: SimFabric, tmp_path: Path) -> None:
    def unplug_when_started(event: SimEvent, info: SimSlotInfo) -> None:
        if event is SimEvent.CHANGE and info.card == "simcard0" and info.loaded is None:
            fabric.unplug("simcard0")

    recorder = Recorder()
    fabric.subscribe(unplug_when_started)
    fabric.subscribe(recorder)
    with pytest.raises(OSError, match="vanished while programming") as info:
        await fabric.program("simcard0", "slot0", "aes")
    assert info.value.errno == errno.ENODEV
    # no change event after the removal: a gone device reports nothing
    assert [e for e, *_ in recorder.events] == [SimEvent.REMOVE, SimEvent.REMOVE, SimEvent.CHANGE]
    fabric.plug("simcard0")
    assert loaded(fabric)["simcard0/slot0"] is None


# ------------------------------------------------------------- concurrency
class ProgressTracker:
    """Follows which slots are being reconfigured, from the fabric's own events."""

    def __init__(self) -> None:
        self.busy: set[tuple[str, str]] = set()
        self.max_busy_per_card: dict[str, int] = {}
        self.overlapping_cards: set[frozenset[str]] = set()
        self.order: list[tuple[str, str, str]] = []

    def __call__(self, event: SimEvent, info: SimSlotInfo) -> None:
        key = (info.card, info.region)
        if event is not SimEvent.CHANGE:
            return
        if info.loaded is None:
            self.busy.add(key)
            self.order.append(("start", *key))
        else:
            self.busy.discard(key)
            self.order.append(("end", *key))
        for card in {c for c, _ in self.busy}:
            count = sum(1 for c, _ in self.busy if c == card)
            self.max_busy_per_card[card] = max(self.max_busy_per_card.get(card, 0), count)
        cards = frozenset(c for c, _ in self.busy)
        if len(cards) > 1:
            self.overlapping_cards.add(cards)


async def test_one_reconfiguration_per_card_while_cards_run_in_parallel(tmp_path: Path) -> None:
    fabric = SimFabric(tmp_path / "dev", cards=2, slots_per_card=3, program_s=0.001)
    tracker = ProgressTracker()
    fabric.subscribe(tracker)
    jobs = [(card, f"slot{s}") for s in range(3) for card in ("simcard0", "simcard1")]
    async with asyncio.timeout(10):
        await asyncio.gather(*(fabric.program(card, region, f"acc-{card}-{region}") for card, region in jobs))

    assert tracker.max_busy_per_card == {"simcard0": 1, "simcard1": 1}
    assert frozenset({"simcard0", "simcard1"}) in tracker.overlapping_cards
    for card in ("simcard0", "simcard1"):
        steps = [(step, region) for step, c, region in tracker.order if c == card]
        assert steps == [(step, f"slot{s}") for s in range(3) for step in ("start", "end")]
    assert set(loaded(fabric).values()) == {f"acc-{c}-{r}" for c, r in jobs}


async def test_a_hung_card_blocks_only_itself(fabric: SimFabric) -> None:
    tracker = ProgressTracker()
    fabric.subscribe(tracker)
    fabric.hang_next_program("simcard0", "slot0")
    hung = asyncio.create_task(fabric.program("simcard0", "slot0", "aes"))
    queued = asyncio.create_task(fabric.program("simcard0", "slot1", "fft"))
    try:
        async with asyncio.timeout(10):
            await fabric.program("simcard1", "slot0", "aes")  # another card: not blocked
        assert ("start", "simcard0", "slot0") in tracker.order
        assert ("start", "simcard0", "slot1") not in tracker.order  # waits for the card
        assert not queued.done()
    finally:
        hung.cancel()
    with pytest.raises(asyncio.CancelledError):
        await hung
    async with asyncio.timeout(10):
        await queued
    assert loaded(fabric) == {
        "simcard0/slot0": None,
        "simcard0/slot1": "fft",
        "simcard1/slot0": "aes",
        "simcard1/slot1": None,
    }


def test_the_state_file_is_never_read_or_written_through_a_symbolic_link(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"version": 1, "loaded": {"simcard0/slot0": "planted"}}))
    (dev / STATE_FILE).symlink_to(outside)
    fabric = SimFabric(dev, cards=1, slots_per_card=1, program_s=0)
    assert loaded(fabric) == {"simcard0/slot0": None}  # the planted content is not believed
    asyncio.run(fabric.program("simcard0", "slot0", "aes"))
    assert json.loads(outside.read_text())["loaded"] == {"simcard0/slot0": "planted"}
    assert not (dev / STATE_FILE).is_symlink()
    assert loaded(SimFabric(dev, cards=1, slots_per_card=1, program_s=0)) == {"simcard0/slot0": "aes"}

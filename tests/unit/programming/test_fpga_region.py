"""FpgaRegionProgrammer over a fake sysfs tree: firmware staged, name written, state followed."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.programming import fpga_region
from agent.programming.fpga_region import FpgaRegionProgrammer, firmware_name
from agent.slots.model import Health, Slot, make_slot_id
from tests.unit.programming.cardlocks import busy

IMAGE = b"\xaa\x99\x55\x66" + bytes(range(200))
ACCELERATOR = "fir-filter"
MANAGER_PARENT = "sys/devices/platform/axi/axi:fpga-manager"


class FakeManager:
    """An FPGA manager's sysfs directory whose attributes the test drives."""

    def __init__(self, root: Path, name: str, state: str, flags: bool = True, status: str | None = None) -> None:
        self.sys_path = f"/{MANAGER_PARENT}-{name}/fpga_manager/{name}"
        self.path = root / self.sys_path.lstrip("/")
        self.path.mkdir(parents=True)
        (self.path / "name").write_text("Xilinx ZynqMP FPGA Manager\n")
        (self.path / "firmware").write_text("")
        if flags:
            (self.path / "flags").write_text("0\n")
        if status is not None:
            (self.path / "status").write_text(status + "\n")
        self.state = state

    @property
    def state(self) -> str:
        return (self.path / "state").read_text().strip()

    @state.setter
    def state(self, value: str) -> None:
        (self.path / "state").write_text(value + "\n")

    def attribute(self, name: str) -> str | None:
        path = self.path / name
        return path.read_text() if path.exists() else None


def exists(path: Path) -> bool:
    return path.exists()


class Kernel:
    """Plays the kernel between two polls of ``state``: the programmer's injected sleep."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.steps: list[Callable[[], None]] = []
        self.release = asyncio.Event()
        self.waiting = 0
        self.all_waiting = asyncio.Event()
        self.expected_waiters = 0

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.steps:
            self.steps.pop(0)()
            return
        self.waiting += 1
        if self.waiting == self.expected_waiters:
            self.all_waiting.set()
        await self.release.wait()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "root"


@pytest.fixture
def firmware_dir(tmp_path: Path) -> Path:
    return tmp_path / "lib" / "firmware"


@pytest.fixture
def kernel() -> Kernel:
    return Kernel()


@pytest.fixture
def programmer(root: Path, firmware_dir: Path, kernel: Kernel) -> FpgaRegionProgrammer:
    return FpgaRegionProgrammer(firmware_dir=firmware_dir, sysfs_root=root, poll_interval_s=0.01, sleep=kernel.sleep)


def region_slot(manager: FakeManager, region: str = "region0") -> Slot:
    card = manager.path.name
    return Slot(
        id=make_slot_id(card, region),
        card=card,
        region=region,
        numa=None,
        device_nodes=(),
        platform="Xilinx ZynqMP FPGA Manager",
        loaded=None,
        health=Health.HEALTHY,
        backend="fpga-region",
        control_node=manager.sys_path,
    )


def set_state(manager: FakeManager, state: str) -> Callable[[], None]:
    return lambda: setattr(manager, "state", state)


async def test_synchronous_load(
    root: Path, firmware_dir: Path, kernel: Kernel, programmer: FpgaRegionProgrammer
) -> None:
    manager = FakeManager(root, "fpga0", "operating")
    slot = region_slot(manager)
    took = await programmer.program(slot, IMAGE, ACCELERATOR, 5.0)
    assert took >= 0.0
    name = firmware_name(slot)
    assert name == "fpga-slot-fpga0-region0.bin"
    assert (firmware_dir / name).read_bytes() == IMAGE
    assert manager.attribute("firmware") == name
    assert manager.attribute("flags") == "1"
    assert kernel.sleeps == []
    assert sorted(os.listdir(firmware_dir)) == [name]  # no temp files left


async def test_state_is_followed_until_operating(root: Path, kernel: Kernel, programmer: FpgaRegionProgrammer) -> None:
    manager = FakeManager(root, "fpga0", "firmware request")
    kernel.steps = [set_state(manager, "write init"), set_state(manager, "write"), set_state(manager, "operating")]
    await programmer.program(region_slot(manager), IMAGE, ACCELERATOR, 5.0)
    assert kernel.sleeps == [0.01, 0.01, 0.01]
    assert not busy(programmer._cards, manager.sys_path)


@pytest.mark.parametrize(
    ("state", "status"),
    [
        pytest.param("firmware request error", None, id="firmware-request-error"),
        pytest.param("write init error", "incompatible image", id="write-init-error"),
        pytest.param("write error", "reconfig CRC error", id="write-error"),
        pytest.param("write complete error", None, id="write-complete-error"),
        pytest.param("power off", None, id="power-off"),
    ],
)
async def test_error_states(
    root: Path, kernel: Kernel, programmer: FpgaRegionProgrammer, state: str, status: str | None
) -> None:
    manager = FakeManager(root, "fpga0", "write", status=status)
    kernel.steps = [set_state(manager, state)]
    slot = region_slot(manager)
    with pytest.raises(ProgrammingError) as info:
        await programmer.program(slot, IMAGE, ACCELERATOR, 5.0)
    assert type(info.value) is ProgrammingError
    expected = (
        f"slot {slot.id}: programming {ACCELERATOR} through FPGA manager fpga0 failed: manager state is {state!r}"
    )
    if status:
        expected += f"; status {status!r}"
    assert str(info.value) == expected


async def test_timeout_names_the_last_state(root: Path, kernel: Kernel, programmer: FpgaRegionProgrammer) -> None:
    manager = FakeManager(root, "fpga0", "write")
    slot = region_slot(manager)
    expected = (
        rf"^slot {slot.id}: programming {ACCELERATOR} through FPGA manager fpga0 did not finish within 0\.1 s "
        r"\(state 'write'\); the manager stays busy until the kernel returns$"
    )
    with pytest.raises(ProgrammingTimeout, match=expected):
        await programmer.program(slot, IMAGE, ACCELERATOR, 0.05)
    assert not busy(programmer._cards, manager.sys_path)  # nothing was left running in a thread


async def test_manager_without_flags(root: Path, programmer: FpgaRegionProgrammer) -> None:
    manager = FakeManager(root, "fpga0", "operating", flags=False)
    await programmer.program(region_slot(manager), IMAGE, ACCELERATOR, 5.0)
    assert manager.attribute("flags") is None


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        pytest.param(
            lambda m, fw: (m.path / "firmware").unlink(),
            r"failed: writing 'fpga-slot-fpga0-region0\.bin' to .*/fpga0/firmware: No such file or directory",
            id="no-firmware-attribute",
        ),
        pytest.param(
            lambda m, fw: (m.path / "state").unlink(),
            r"failed: manager state is None",
            id="no-state-attribute",
        ),
        pytest.param(
            lambda m, fw: (fw.parent.mkdir(parents=True), fw.write_text("not a directory")),
            r"failed: cannot write .*/lib/firmware/fpga-slot-fpga0-region0\.bin",
            id="firmware-dir-unusable",
        ),
    ],
)
async def test_sysfs_and_firmware_failures(
    root: Path,
    firmware_dir: Path,
    programmer: FpgaRegionProgrammer,
    break_it: Callable[[FakeManager, Path], object],
    message: str,
) -> None:
    manager = FakeManager(root, "fpga0", "operating")
    break_it(manager, firmware_dir)
    slot = region_slot(manager)
    with pytest.raises(ProgrammingError, match=rf"^slot {re.escape(slot.id)}: programming {ACCELERATOR} .*{message}"):
        await programmer.program(slot, IMAGE, ACCELERATOR, 5.0)


@pytest.mark.parametrize(
    ("changes", "image", "message"),
    [
        pytest.param({"control_node": ""}, IMAGE, "no FPGA manager to program it through", id="no-manager"),
        pytest.param({}, b"", "bitstream image is empty", id="empty-image"),
    ],
)
async def test_refused_before_touching_anything(
    root: Path,
    firmware_dir: Path,
    programmer: FpgaRegionProgrammer,
    changes: dict[str, str],
    image: bytes,
    message: str,
) -> None:
    manager = FakeManager(root, "fpga0", "operating")
    slot = dataclasses.replace(region_slot(manager), **changes)  # type: ignore[arg-type]
    with pytest.raises(ProgrammingError, match=f"^slot {slot.id}: {message}$"):
        await programmer.program(slot, image, ACCELERATOR, 5.0)
    assert not exists(firmware_dir)
    assert manager.attribute("firmware") == ""


async def test_one_load_at_a_time_per_manager(
    root: Path, firmware_dir: Path, kernel: Kernel, programmer: FpgaRegionProgrammer
) -> None:
    manager = FakeManager(root, "fpga0", "write")
    first, second = region_slot(manager, "region0"), region_slot(manager, "region1")
    kernel.expected_waiters = 1
    task_a = asyncio.create_task(programmer.program(first, IMAGE, ACCELERATOR, 30.0))
    await kernel.all_waiting.wait()  # the first load is in progress
    task_b = asyncio.create_task(programmer.program(second, IMAGE[::-1], "other", 30.0))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not task_b.done()
    assert not exists(firmware_dir / firmware_name(second))
    assert manager.attribute("firmware") == firmware_name(first)

    manager.state = "operating"
    kernel.release.set()
    await asyncio.gather(task_a, task_b)
    assert manager.attribute("firmware") == firmware_name(second)
    assert (firmware_dir / firmware_name(second)).read_bytes() == IMAGE[::-1]


async def test_different_managers_in_parallel(root: Path, kernel: Kernel, programmer: FpgaRegionProgrammer) -> None:
    managers = [FakeManager(root, f"fpga{n}", "write") for n in range(2)]
    kernel.expected_waiters = 2
    tasks = [asyncio.create_task(programmer.program(region_slot(m), IMAGE, ACCELERATOR, 30.0)) for m in managers]
    await kernel.all_waiting.wait()  # both loads are in progress at once
    assert all(busy(programmer._cards, m.sys_path) for m in managers)
    for manager in managers:
        manager.state = "operating"
    kernel.release.set()
    await asyncio.gather(*tasks)
    assert not any(busy(programmer._cards, m.sys_path) for m in managers)


# ------------------------------------------------------------------------------------ whole cards
class RecordingManager(FakeManager):
    """A manager whose kernel loads synchronously, as most FPGA manager drivers do: each write of ``firmware`` is
    recorded with the ``flags`` it was made under, and the write returns with ``state`` operating (or, for the
    firmware ``fail_on``, ``write error``)."""

    def __init__(self, root: Path, name: str, monkeypatch: pytest.MonkeyPatch, fail_on: str = "") -> None:
        super().__init__(root, name, "operating")
        self.loads: list[tuple[str, str]] = []
        self.fail_on = fail_on
        write = fpga_region._write_attribute

        def kernel_write(path: Path, value: str) -> None:
            write(path, value)
            if path == self.path / "firmware":
                self.loads.append((self.attribute("flags") or "", value))
                self.state = "write error" if value == self.fail_on else "operating"

        monkeypatch.setattr(fpga_region, "_write_attribute", kernel_write)


BASE_REGION = "/sys/devices/platform/fpga-full/fpga_region/region0"


def child_slots(manager: FakeManager, count: int = 2, parent: str = BASE_REGION) -> list[Slot]:
    return [dataclasses.replace(region_slot(manager, f"region{i + 1}"), parent_region=parent) for i in range(count)]


@pytest.fixture
def recording(root: Path, monkeypatch: pytest.MonkeyPatch) -> RecordingManager:
    return RecordingManager(root, "fpga0", monkeypatch, fail_on="broken.bin")


def card_programmer(root: Path, firmware_dir: Path, base: str = "base.bin") -> FpgaRegionProgrammer:
    return FpgaRegionProgrammer(firmware_dir=firmware_dir, sysfs_root=root, base_images={"fpga0": base})


def test_a_card_is_offered_only_as_every_child_of_one_base_region_with_a_base_image(
    root: Path, firmware_dir: Path
) -> None:
    manager = FakeManager(root, "fpga0", "operating")
    children = child_slots(manager)
    assert card_programmer(root, firmware_dir).can_program_card(children)
    no_base = FpgaRegionProgrammer(firmware_dir=firmware_dir, sysfs_root=root)
    assert not no_base.can_program_card(children)
    assert not card_programmer(root, firmware_dir).can_program_card([region_slot(manager)])  # no base region
    mixed = [children[0], dataclasses.replace(children[1], parent_region="/sys/devices/other/region9")]
    assert not card_programmer(root, firmware_dir).can_program_card(mixed)
    assert not card_programmer(root, firmware_dir).can_program_card([])


async def test_a_card_image_is_a_full_load_and_the_next_slot_gets_the_base_layout_back_first(
    root: Path, firmware_dir: Path, recording: RecordingManager
) -> None:
    programmer = card_programmer(root, firmware_dir)
    children = child_slots(recording)
    await programmer.program_card(children, IMAGE, "full-card", 5.0)
    assert recording.loads == [("0", "fpga-slot-card-fpga0.bin")]
    assert (firmware_dir / "fpga-slot-card-fpga0.bin").read_bytes() == IMAGE
    assert programmer.held() == {BASE_REGION: tuple(children)}

    await programmer.program(children[1], IMAGE[:50], ACCELERATOR, 5.0)
    assert recording.loads[1:] == [("0", "base.bin"), ("1", "fpga-slot-fpga0-region2.bin")]
    assert programmer.held() == {}

    await programmer.program(children[0], IMAGE[:60], ACCELERATOR, 5.0)  # the base layout is there: no restore
    assert recording.loads[3:] == [("1", "fpga-slot-fpga0-region1.bin")]


async def test_a_failed_base_restore_fails_the_slot_naming_it_and_is_tried_again_next_time(
    root: Path, firmware_dir: Path, recording: RecordingManager
) -> None:
    programmer = card_programmer(root, firmware_dir, base="broken.bin")
    children = child_slots(recording)
    await programmer.program_card(children, IMAGE, "full-card", 5.0)
    with pytest.raises(ProgrammingError, match=r"restoring the base layout \(broken.bin\).*'write error'"):
        await programmer.program(children[0], IMAGE, ACCELERATOR, 5.0)
    assert programmer.held() == {BASE_REGION: tuple(children)}  # still the card's image (or unknown)
    recording.fail_on = ""
    recording.state = "operating"
    await programmer.program(children[0], IMAGE, ACCELERATOR, 5.0)
    assert [name for _flags, name in recording.loads] == [
        "fpga-slot-card-fpga0.bin", "broken.bin", "broken.bin", "fpga-slot-fpga0-region1.bin"
    ]  # fmt: skip
    assert programmer.held() == {}


async def test_a_card_that_cannot_be_programmed_whole_is_refused_naming_the_option(
    root: Path, firmware_dir: Path, recording: RecordingManager
) -> None:
    programmer = FpgaRegionProgrammer(firmware_dir=firmware_dir, sysfs_root=root)
    with pytest.raises(ProgrammingError, match="--fpga-region-base-images"):
        await programmer.program_card(child_slots(recording), IMAGE, "full-card", 5.0)
    assert recording.loads == []
    assert programmer.held() == {}


async def test_the_record_of_whole_card_images_outlives_a_restart(
    root: Path, firmware_dir: Path, recording: RecordingManager, tmp_path: Path
) -> None:
    record = tmp_path / "state" / "fpga-region-cards.json"
    children = child_slots(recording)
    first = FpgaRegionProgrammer(
        firmware_dir=firmware_dir, sysfs_root=root, base_images={"fpga0": "base.bin"}, held_file=record
    )
    await first.program_card(children, IMAGE, "full-card", 5.0)

    again = FpgaRegionProgrammer(
        firmware_dir=firmware_dir, sysfs_root=root, base_images={"fpga0": "base.bin"}, held_file=record
    )
    assert again.held() == {BASE_REGION: tuple(children)}
    await again.program(children[0], IMAGE, ACCELERATOR, 5.0)  # restores the base layout first, as before
    assert [name for _flags, name in recording.loads][-2:] == ["base.bin", "fpga-slot-fpga0-region1.bin"]
    assert FpgaRegionProgrammer(held_file=record).held() == {}


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"/sys/x": [{"id": 1}]}', '{"/sys/x": ["a"]}'])
def test_an_unreadable_record_holds_nothing_and_says_so(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    record = tmp_path / "fpga-region-cards.json"
    record.write_text(text)
    assert FpgaRegionProgrammer(held_file=record).held() == {}
    assert "ignoring the record of whole-card images" in caplog.text

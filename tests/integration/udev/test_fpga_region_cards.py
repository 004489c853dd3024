"""Whole cards on fpga-region: the real Reconfigurer and slot loader over udev (umockdev) and the FPGA manager's
sysfs attributes. The fake kernel loads synchronously; a full load into the base region removes its child regions,
the base image brings them back, as device-tree overlays on a base region do."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agent.discovery.fpga_region import scan_fpga_regions
from agent.errors import CatalogError
from agent.node.reconfigure import Reconfigurer
from agent.programming import fpga_region
from agent.programming.catalog import Catalog
from agent.programming.fpga_region import FpgaRegionProgrammer
from agent.slots.model import Slot, SlotId
from agent.slots.registry import SlotRegistry
from tests.integration.udev.test_fpga_region import BASE, FULL, ZYNQ, base_with_children, child_region
from tests.udevbed import UdevTestbed
from tests.unit import reconfigure_support

pytestmark = pytest.mark.udev

MANAGER = f"{FULL}/fpga_manager/fpga3"
SLOTS = [SlotId("fpga3-region1"), SlotId("fpga3-region2")]


class Kernel:
    """The FPGA manager's side of ``firmware`` writes: loads recorded, children removed and brought back."""

    def __init__(self, udevbed: UdevTestbed, monkeypatch: pytest.MonkeyPatch) -> None:
        self.udevbed = udevbed
        self.loads: list[tuple[str, str]] = []
        root = Path(udevbed.root_dir)
        self.manager = root / MANAGER.lstrip("/")
        write = fpga_region._write_attribute

        def kernel_write(path: Path, value: str) -> None:
            write(path, value)
            if path == self.manager / "firmware":
                flags = (self.manager / "flags").read_text().strip()
                self.loads.append((flags, value))
                if flags == "0":
                    self._full_load(value)

        monkeypatch.setattr(fpga_region, "_write_attribute", kernel_write)

    def _full_load(self, name: str) -> None:
        for index in (1, 2):
            self.udevbed.remove(child_region(index))
            self.udevbed.remove(f"{FULL}/fpga-pr{index}")
        if name == "base.bin":
            for index in (1, 2):
                self.udevbed.add(f"P: {FULL}/fpga-pr{index}\nE: SUBSYSTEM=platform\n")
                self.udevbed.add(f"P: {child_region(index)}\nE: SUBSYSTEM=fpga_region\n")


@pytest.fixture
def kernel(udevbed: UdevTestbed, monkeypatch: pytest.MonkeyPatch) -> Kernel:
    layout = base_with_children().replace("A: state=operating\n", "A: state=operating\nA: flags=1\nA: firmware=\n")
    udevbed.add(layout)
    return Kernel(udevbed, monkeypatch)


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    catalog = Catalog(tmp_path / "catalog")
    for name, scope in (("full-card", "card"), ("fir", "slot")):
        source = tmp_path / f"{name}.bin"
        source.write_bytes(name.encode() * 100)
        catalog.add(source, name, platform=ZYNQ, accelerator_id=f"{name}-accel", scope=scope)
    return catalog


@pytest.fixture
def node(udevbed: UdevTestbed, kernel: Kernel, catalog: Catalog, tmp_path: Path) -> tuple[Reconfigurer, SlotRegistry]:
    programmer = FpgaRegionProgrammer(
        firmware_dir=tmp_path / "firmware", sysfs_root=Path(udevbed.root_dir), base_images={"fpga3": "base.bin"}
    )

    async def read_hardware() -> list[Slot]:
        return list((await asyncio.to_thread(scan_fpga_regions, programmer.held)).slots)

    registry = SlotRegistry()
    registry.replace_all(scan_fpga_regions(programmer.held).slots)
    return reconfigure_support.reconfigurer(registry, programmer, read_hardware, catalog, "fpga-region"), registry


def contents(registry: SlotRegistry) -> dict[str, tuple[str | None, bool]]:
    return {s.slot.id: (s.bitstream, s.slot.whole_card) for s in registry.snapshot()}


async def test_a_whole_card_image_then_a_slot_image_from_the_restored_base_layout(
    kernel: Kernel, node: tuple[Reconfigurer, SlotRegistry]
) -> None:
    reconfigurer, registry = node
    slots = [registry.get(s) for s in SLOTS]
    assert reconfigurer.loader.can_program_card([s.slot for s in slots if s is not None])

    await reconfigurer.load_card(None, "full-card", list(SLOTS), "claim big", time.monotonic() + 5)

    assert kernel.loads == [("0", "fpga-slot-card-fpga3.bin")]
    assert contents(registry) == {s: ("full-card", True) for s in SLOTS}  # the children as they were
    await reconfigurer.load_card(None, "full-card", list(SLOTS), "claim again", time.monotonic() + 5)
    assert len(kernel.loads) == 1  # held already: a cache hit

    await reconfigurer.load_many(None, {"fir": [SLOTS[1]]}, "claim small", time.monotonic() + 5)

    assert kernel.loads[1:] == [("0", "base.bin"), ("1", "fpga-slot-fpga3-region2.bin")]
    assert contents(registry) == {SLOTS[0]: (None, False), SLOTS[1]: ("fir", False)}
    assert sorted(s.id for s in scan_fpga_regions().slots) == SLOTS  # the kernel shows the children again
    assert {s.slot.parent_region for s in registry.snapshot()} == {BASE}


async def test_the_wrong_kind_of_image_is_refused_either_way_and_nothing_is_loaded(
    kernel: Kernel, node: tuple[Reconfigurer, SlotRegistry]
) -> None:
    reconfigurer, registry = node
    before = contents(registry)
    with pytest.raises(CatalogError, match="fir"):
        await reconfigurer.load_card(None, "fir", list(SLOTS), "claim big", time.monotonic() + 5)
    with pytest.raises(CatalogError, match="full-card"):
        await reconfigurer.load_many(None, {"full-card": [SLOTS[0]]}, "claim small", time.monotonic() + 5)
    assert kernel.loads == []
    assert contents(registry) == before

"""fpga-region programmer: load a bitstream through the Linux FPGA manager's sysfs interface.

The image goes into the firmware directory, its name is written to the manager's ``firmware`` (after
``flags``), and ``state`` is polled until ``operating`` or an error. Whole-card images need a base image
(``base_images``) to restore the layout; which base regions hold one is kept in ``held_file``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.files.atomic import write_atomically
from agent.programming.cardlock import CardLease, CardLocks
from agent.slots.model import Health, Slot

logger = logging.getLogger(__name__)

DEFAULT_FIRMWARE_DIR = Path("/lib/firmware")
OPERATING = "operating"
POLL_INTERVAL_S = 0.05
_FAILED_STATES = ("power off",)
PARTIAL_RECONFIG_FLAG = "1"
FULL_RECONFIG_FLAG = "0"
#: What the record of whole-card images keeps of each slot.
_HELD_FIELDS = ("id", "card", "region", "platform", "control_node", "parent_region")


def firmware_name(slot: Slot) -> str:
    """The firmware file name used for a slot (slot IDs are ``[a-z0-9.-]``)."""
    return f"fpga-slot-{slot.id}.bin"


def _write_attribute(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read_attribute(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return None


def _status_detail(manager: Path) -> str:
    status = _read_attribute(manager / "status")
    return f"; status {status!r}" if status else ""


@dataclass(slots=True)
class _Load:
    """One firmware load in progress; ``state`` is the manager's last reported state."""

    manager: Path
    what: str
    state: str | None = None


class FpgaRegionProgrammer:
    """Programs fpga-region slots through their FPGA manager's ``firmware`` attribute."""

    def __init__(
        self,
        firmware_dir: Path = DEFAULT_FIRMWARE_DIR,
        sysfs_root: Path = Path("/"),
        poll_interval_s: float = POLL_INTERVAL_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        base_images: Mapping[str, str] | None = None,
        held_file: Path | None = None,
    ) -> None:
        self._firmware_dir = firmware_dir
        self._sysfs_root = sysfs_root
        self._poll_interval_s = poll_interval_s
        self._sleep = sleep
        self._cards = CardLocks()
        #: manager name -> the firmware (in the firmware directory) that restores its base region's child regions
        self._base_images = dict(base_images or {})
        #: base region -> its children's slots while it holds a whole-card image (replaced, never changed in
        #: place: read from a worker thread)
        self._held: dict[str, tuple[Slot, ...]] = _read_held(held_file)
        self._held_file = held_file

    def held(self) -> Mapping[str, tuple[Slot, ...]]:
        """Base region -> its children's slots, for the base regions holding a whole-card image."""
        return self._held

    def can_program_card(self, slots: Sequence[Slot]) -> bool:
        """Whether ``slots`` are every child region of one base region whose manager has a base image."""
        first = slots[0] if slots else None
        return (
            first is not None
            and bool(first.parent_region)
            and os.path.basename(first.control_node) in self._base_images
            and all(s.parent_region == first.parent_region and s.control_node == first.control_node for s in slots)
        )

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        if not image:
            raise ProgrammingError(f"slot {slot.id}: bitstream image is empty")
        what = f"slot {slot.id}: programming {accelerator_id}"
        took = await self._run(slot, what, timeout_s, lambda lease, load: self._program_slot(lease, load, slot, image))
        logger.info("slot %s programmed with %s in %.0f ms", slot.id, accelerator_id, took * 1000)
        return took

    async def program_card(self, slots: Sequence[Slot], image: bytes, accelerator_id: str, timeout_s: float) -> float:
        """Load a whole-card image into the base region of ``slots`` (a full load)."""
        first = slots[0]
        if not self.can_program_card(slots):
            raise ProgrammingError(
                f"card {first.card}: its regions are not every child of one base region whose FPGA manager has a "
                "base image (--fpga-region-base-images)"
            )
        if not image:
            raise ProgrammingError(f"card {first.card}: bitstream image is empty")
        what = f"card {first.card}: programming {accelerator_id}"

        async def load(lease: CardLease, load: _Load) -> float:
            await lease.run_in_thread(lambda: self._keep_held({**self._held, first.parent_region: tuple(slots)}))
            name = f"fpga-slot-card-{load.manager.name}.bin"
            return await self._load(lease, load, name, image, partial=False)

        took = await self._run(first, what, timeout_s, load)
        logger.info("card %s programmed with %s in %.0f ms", first.card, accelerator_id, took * 1000)
        return took

    def _keep_held(self, held: dict[str, tuple[Slot, ...]]) -> None:
        """Record the whole-card images in memory and ``held_file`` (in a worker thread)."""
        self._held = held
        if self._held_file is not None:
            record = {base: [{f: getattr(s, f) for f in _HELD_FIELDS} for s in slots] for base, slots in held.items()}
            write_atomically(self._held_file, json.dumps(record, sort_keys=True).encode())

    async def _program_slot(self, lease: CardLease, load: _Load, slot: Slot, image: bytes) -> float:
        """A slot of a base region holding a whole-card image gets the base layout back first."""
        took = 0.0
        if slot.parent_region in self._held:
            base = self._base_images.get(load.manager.name)
            if base is None:
                raise ProgrammingError(f"{load.what}: no base image restores {load.manager.name}'s regions")
            load.what = f"slot {slot.id}: restoring the base layout ({base})"
            took += await self._load(lease, load, base, None, partial=False)
            left = {k: v for k, v in self._held.items() if k != slot.parent_region}
            await lease.run_in_thread(lambda: self._keep_held(left))
            load.what = f"slot {slot.id}: programming"
        return took + await self._load(lease, load, firmware_name(slot), image, partial=True)

    async def _run(
        self, slot: Slot, what: str, timeout_s: float, operation: Callable[[CardLease, _Load], Awaitable[float]]
    ) -> float:
        """``operation`` under the manager's lease, by the deadline; errors name the manager and its state."""
        if not slot.control_node:
            raise ProgrammingError(f"slot {slot.id}: no FPGA manager to program it through")
        manager = self._sysfs_root / slot.control_node.lstrip("/")
        load = _Load(manager, f"{what} through FPGA manager {manager.name}")
        try:
            async with self._cards.hold(
                slot.control_node, timeout_s, f"slot {slot.id}: FPGA manager {manager.name}"
            ) as lease:
                return await operation(lease, load)
        except TimeoutError as exc:
            raise ProgrammingTimeout(
                f"{load.what} did not finish within {timeout_s:.1f} s (state {load.state!r}); "
                "the manager stays busy until the kernel returns"
            ) from exc
        except OSError as exc:  # reading the manager's state or status
            raise ProgrammingError(f"{load.what} failed: {exc.strerror or exc}") from exc

    async def _load(self, lease: CardLease, load: _Load, name: str, image: bytes | None, partial: bool) -> float:
        """Stage ``image`` as firmware ``name`` (None: it is there already), have the manager load it, wait."""
        manager, what = load.manager, load.what
        if image is not None:
            firmware = self._firmware_dir / name
            try:
                await lease.run_in_thread(lambda: write_atomically(firmware, image))
            except OSError as exc:
                raise ProgrammingError(f"{what} failed: cannot write {firmware}: {exc.strerror or exc}") from exc
        started = time.monotonic()
        try:
            await lease.run_in_thread(lambda: self._trigger(manager, name, partial))
        except OSError as exc:
            detail = await lease.run_in_thread(lambda: _status_detail(manager))
            raise ProgrammingError(
                f"{what} failed: writing {name!r} to {manager / 'firmware'}: {exc.strerror or exc}{detail}"
            ) from exc
        async with asyncio.timeout_at(lease.deadline):
            while True:
                load.state = state = await lease.run_in_thread(lambda: _read_attribute(manager / "state"))
                if state == OPERATING:
                    return time.monotonic() - started
                if state is None or "error" in state or state in _FAILED_STATES:
                    detail = await lease.run_in_thread(lambda: _status_detail(manager))
                    raise ProgrammingError(f"{what} failed: manager state is {state!r}{detail}")
                await self._sleep(self._poll_interval_s)

    def _trigger(self, manager: Path, name: str, partial: bool) -> None:
        if (manager / "flags").exists():
            _write_attribute(manager / "flags", PARTIAL_RECONFIG_FLAG if partial else FULL_RECONFIG_FLAG)
        _write_attribute(manager / "firmware", name)


def _read_held(path: Path | None) -> dict[str, tuple[Slot, ...]]:
    """The record ``_keep_held`` wrote (none, or unreadable: nothing held, said once)."""
    if path is None or not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
        return {
            base: tuple(
                Slot(
                    **{f: entry[f] for f in _HELD_FIELDS},
                    numa=None,
                    device_nodes=(),
                    loaded=None,
                    health=Health.HEALTHY,
                    backend="fpga-region",
                )
                for entry in entries
            )
            for base, entries in record.items()
        }
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        logger.warning("ignoring the record of whole-card images %s: %s", path, exc)
        return {}

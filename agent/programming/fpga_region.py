"""fpga-region programmer: load a bitstream through the Linux FPGA manager's sysfs interface.

The FPGA manager (``/sys/class/fpga_manager/fpgaN``, the slot's ``control_node``)
loads firmware by name, Xilinx-style: the image is placed in the firmware directory
(``/lib/firmware``) under a name derived from the slot, ``flags`` is set to 1
(partial bitstream) where the manager has that attribute, and the name is written
to ``firmware``. The manager's ``state`` then reads ``operating`` on success or one
of the ``... error`` states (``status`` says more where the kernel has it).
Drivers that load synchronously finish inside the write; for others ``state`` is
polled until it settles or the deadline passes.

One operation at a time per manager. The firmware directory and the sysfs root are
injectable, so tests use a temp tree with a fake manager whose ``state`` they drive.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.files.atomic import write_atomically
from agent.programming.cardlock import CardLease, CardLocks
from agent.slots import Slot

logger = logging.getLogger(__name__)

DEFAULT_FIRMWARE_DIR = Path("/lib/firmware")
OPERATING = "operating"
POLL_INTERVAL_S = 0.05
_FAILED_STATES = ("power off",)
PARTIAL_RECONFIG_FLAG = "1"


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


@dataclass(slots=True)
class _Load:
    """One firmware load in progress; ``state`` is the manager's last reported state."""

    slot: Slot
    manager: Path
    what: str
    state: str | None = None


class FpgaRegionProgrammer:
    """Programs fpga-region slots through their FPGA manager's ``firmware`` attribute."""

    def __init__(
        self,
        firmware_dir: Path = DEFAULT_FIRMWARE_DIR,
        sysfs_root: Path = Path("/"),
        partial: bool = True,
        poll_interval_s: float = POLL_INTERVAL_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._firmware_dir = firmware_dir
        self._sysfs_root = sysfs_root
        self._partial = partial
        self._poll_interval_s = poll_interval_s
        self._sleep = sleep
        self._managers = CardLocks()

    def busy(self, control_node: str) -> bool:
        """True while an operation on this FPGA manager runs or still waits for the kernel."""
        return self._managers.busy(control_node)

    def manager_dir(self, slot: Slot) -> Path:
        """The manager's sysfs directory under the (injectable) root."""
        return self._sysfs_root / slot.control_node.lstrip("/")

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        if not slot.control_node:
            raise ProgrammingError(f"slot {slot.id}: no FPGA manager to program it through")
        if not image:
            raise ProgrammingError(f"slot {slot.id}: bitstream image is empty")
        manager = self.manager_dir(slot)
        what = f"slot {slot.id}: programming {accelerator_id} through FPGA manager {manager.name}"
        deadline = asyncio.get_running_loop().time() + timeout_s
        load = _Load(slot, manager, what)
        started = False
        try:
            async with self._managers.hold(slot.control_node, deadline) as lease:
                started = True
                took = await self._load(lease, load, image)
        except TimeoutError as exc:
            if not started:
                raise ProgrammingTimeout(
                    f"slot {slot.id}: FPGA manager {manager.name} was busy with another programming "
                    f"operation for the whole {timeout_s:.1f} s deadline"
                ) from exc
            raise ProgrammingTimeout(
                f"{what} did not finish within {timeout_s:.1f} s (state {load.state!r}); "
                "the manager stays busy until the kernel returns"
            ) from exc
        except OSError as exc:  # reading the manager's state or status
            raise ProgrammingError(f"{what} failed: {exc.strerror or exc}") from exc
        logger.info("slot %s programmed with %s in %.0f ms", slot.id, accelerator_id, took * 1000)
        return took

    async def _load(self, lease: CardLease, load: _Load, image: bytes) -> float:
        manager, what = load.manager, load.what
        name = firmware_name(load.slot)
        firmware = self._firmware_dir / name
        try:
            await lease.run_in_thread(lambda: self._stage_firmware(firmware, image))
        except OSError as exc:
            raise ProgrammingError(f"{what} failed: cannot write {firmware}: {exc.strerror or exc}") from exc
        started = time.monotonic()
        try:
            await lease.run_in_thread(lambda: self._trigger(manager, name))
        except OSError as exc:
            status = await lease.run_in_thread(lambda: _read_attribute(manager / "status"))
            detail = f"; status {status!r}" if status else ""
            raise ProgrammingError(
                f"{what} failed: writing {name!r} to {manager / 'firmware'}: {exc.strerror or exc}{detail}"
            ) from exc
        async with asyncio.timeout_at(lease.deadline):
            while True:
                load.state = state = await lease.run_in_thread(lambda: _read_attribute(manager / "state"))
                if state == OPERATING:
                    return time.monotonic() - started
                if state is None or "error" in state or state in _FAILED_STATES:
                    status = await lease.run_in_thread(lambda: _read_attribute(manager / "status"))
                    detail = f"; status {status!r}" if status else ""
                    raise ProgrammingError(f"{what} failed: manager state is {state!r}{detail}")
                await self._sleep(self._poll_interval_s)

    def _stage_firmware(self, firmware: Path, image: bytes) -> None:
        firmware.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(firmware, image)

    def _trigger(self, manager: Path, name: str) -> None:
        if self._partial and (manager / "flags").exists():
            _write_attribute(manager / "flags", PARTIAL_RECONFIG_FLAG)
        _write_attribute(manager / "firmware", name)

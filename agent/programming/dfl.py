"""DFL programmer: partial reconfiguration of one port through its card's FME.

Issues the ``DFL_FPGA_FME_PORT_PR`` ioctl on the FME device node (the slot's ``control_node``) for port
``port<N>`` with the raw image, in a worker thread under the card lock. ``open_node``/``ioctl`` are injectable."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import fcntl
import logging
import os
import re
import time
from collections.abc import Callable

from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.programming.cardlock import CardLocks
from agent.programming.dfl_uapi import DFL_FPGA_FME_PORT_PR, pack_port_pr
from agent.slots import Slot

logger = logging.getLogger(__name__)

IoctlFunction = Callable[[int, int, bytearray], object]
OpenFunction = Callable[[str], int]

_PORT_REGION = re.compile(r"port(\d+)")
MAX_IMAGE_BYTES = 0xFFFF_FFFF  # buffer_size is a __u32
_ERRNO_HINTS = {
    errno.EIO: "the card reported a partial-reconfiguration error (see the FME's errors)",
    errno.EBUSY: "the port or the FME is in use",
    errno.EINVAL: "the driver rejected the request (bitstream not for this port or interface?)",
    errno.ENOENT: "the FME device node is gone",
    errno.ENODEV: "the card is gone",
    errno.EACCES: "no permission to open the FME device node",
    errno.EPERM: "no permission to reconfigure the card",
}


def open_fme(path: str) -> int:
    """Open an FME device node for the PR ioctl."""
    return os.open(path, os.O_RDWR | os.O_CLOEXEC)


def port_id_of(slot: Slot) -> int:
    """The DFL port number of a slot whose region is ``port<N>``."""
    match = _PORT_REGION.fullmatch(slot.region)
    if match is None:
        raise ProgrammingError(f"slot {slot.id}: region {slot.region!r} is not a DFL port (port<N>)")
    return int(match.group(1))


def describe_errno(exc: OSError) -> str:
    """'EBUSY (Device or resource busy): hint' for an OSError from open or ioctl."""
    code = exc.errno or 0
    name = errno.errorcode.get(code, f"errno {code}")
    text = f"{name} ({os.strerror(code)})" if code else str(exc)
    hint = _ERRNO_HINTS.get(code)
    return f"{text}: {hint}" if hint else text


class DflProgrammer:
    """Programs DFL ports with the FME's partial-reconfiguration ioctl."""

    def __init__(
        self,
        ioctl: IoctlFunction = fcntl.ioctl,
        open_node: OpenFunction = open_fme,
        close_node: Callable[[int], None] = os.close,
    ) -> None:
        self._ioctl = ioctl
        self._open = open_node
        self._close = close_node
        self._cards = CardLocks()

    def busy(self, control_node: str) -> bool:
        """True while an operation on this FME runs or still waits for the kernel."""
        return self._cards.busy(control_node)

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        port_id = port_id_of(slot)
        node = slot.control_node
        if not node:
            raise ProgrammingError(f"slot {slot.id}: no FME device node to program it through")
        if not image:
            raise ProgrammingError(f"slot {slot.id}: bitstream image is empty")
        if len(image) > MAX_IMAGE_BYTES:
            raise ProgrammingError(f"slot {slot.id}: bitstream image of {len(image)} bytes exceeds 4 GiB")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        busy = (
            f"slot {slot.id}: card {slot.card} was busy with another programming operation "
            f"through {node} for the whole {timeout_s:.1f} s deadline"
        )
        try:
            async with self._cards.hold(node, deadline, busy) as card:
                logger.info("slot %s: programming %s through %s port %d", slot.id, accelerator_id, node, port_id)
                took = await card.run_in_thread(lambda: self._reconfigure(node, port_id, image))
        except TimeoutError as exc:
            raise ProgrammingTimeout(
                f"slot {slot.id}: programming {accelerator_id} through {node} did not finish within "
                f"{timeout_s:.1f} s; the card stays busy until the kernel returns"
            ) from exc
        except OSError as exc:
            raise ProgrammingError(
                f"slot {slot.id}: programming {accelerator_id} through {node} port {port_id} failed: "
                f"{describe_errno(exc)}"
            ) from exc
        logger.info("slot %s programmed with %s in %.0f ms", slot.id, accelerator_id, took * 1000)
        return took

    def _reconfigure(self, node: str, port_id: int, image: bytes) -> float:
        """Blocking: open the FME, issue the PR ioctl, close; the ioctl's duration."""
        buffer = ctypes.create_string_buffer(image, len(image))
        argument = pack_port_pr(port_id, ctypes.addressof(buffer), len(image))
        fd = self._open(node)
        try:
            started = time.monotonic()
            self._ioctl(fd, DFL_FPGA_FME_PORT_PR, argument)
            return time.monotonic() - started
        finally:
            self._close(fd)

"""DFL programmer: partial reconfiguration of port ``port<N>`` by the ``DFL_FPGA_FME_PORT_PR`` ioctl on its card's
FME device node (the slot's ``control_node``), in a worker thread under the card lock."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import os
import platform
import re
import time
from collections.abc import Callable

from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.programming.cardlock import CardLocks
from agent.slots.model import Slot

logger = logging.getLogger(__name__)

IoctlFunction = Callable[[int, int, bytearray], object]

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

# The kernel's DFL partial-reconfiguration ABI (include/uapi/linux/fpga-dfl.h).
DFL_FPGA_MAGIC = 0xB6
DFL_FME_BASE = 0x80
#: Architectures whose _IOC_NONE is 1 with a 3-bit direction field at bit 29 (elsewhere 0, at bit 30).
_IOC_NONE_IS_ONE = ("ppc", "ppc64", "ppc64le", "powerpc", "mips", "mips64", "sparc", "sparc64", "alpha")


def io_request(type_: int, nr: int, machine: str | None = None) -> int:
    """The kernel's ``_IO(type, nr)`` (no data direction or size) on ``machine`` (default: this one)."""
    none_is_one = (machine or platform.machine()).lower().startswith(_IOC_NONE_IS_ONE)
    return (1 << 29 if none_is_one else 0) | (type_ << 8) | nr  # _IOC_TYPESHIFT 8, _IOC_NRSHIFT 0


DFL_FPGA_FME_PORT_PR = io_request(DFL_FPGA_MAGIC, DFL_FME_BASE + 0)


class DflFpgaFmePortPr(ctypes.Structure):
    """``struct dfl_fpga_fme_port_pr`` with the platform's native alignment."""

    _fields_ = (
        ("argsz", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("port_id", ctypes.c_uint32),
        ("buffer_size", ctypes.c_uint32),
        ("buffer_address", ctypes.c_uint64),
    )


def pack_port_pr(port_id: int, buffer_address: int, buffer_size: int) -> bytearray:
    """The ioctl argument for ``DFL_FPGA_FME_PORT_PR`` as a mutable buffer."""
    request = DflFpgaFmePortPr(
        argsz=ctypes.sizeof(DflFpgaFmePortPr),
        flags=0,
        port_id=port_id,
        buffer_size=buffer_size,
        buffer_address=buffer_address,
    )
    return bytearray(bytes(request))


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

    def __init__(self, ioctl: IoctlFunction = fcntl.ioctl) -> None:
        self._ioctl = ioctl
        self._cards = CardLocks()

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        port_id = port_id_of(slot)
        node = slot.control_node
        if not node:
            raise ProgrammingError(f"slot {slot.id}: no FME device node to program it through")
        if not image:
            raise ProgrammingError(f"slot {slot.id}: bitstream image is empty")
        if len(image) > MAX_IMAGE_BYTES:
            raise ProgrammingError(f"slot {slot.id}: bitstream image of {len(image)} bytes exceeds 4 GiB")
        try:
            async with self._cards.hold(
                node, timeout_s, f"slot {slot.id}: card {slot.card}", f" through {node}"
            ) as card:
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
        fd = os.open(node, os.O_RDWR | os.O_CLOEXEC)
        try:
            started = time.monotonic()
            self._ioctl(fd, DFL_FPGA_FME_PORT_PR, argument)
            return time.monotonic() - started
        finally:
            os.close(fd)

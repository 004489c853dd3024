"""The kernel's DFL partial-reconfiguration ABI (include/uapi/linux/fpga-dfl.h), in ctypes:
``struct dfl_fpga_fme_port_pr`` and ``DFL_FPGA_FME_PORT_PR = _IO(0xB6, 0x80 + 0)``, whose encoding
depends on the architecture."""

from __future__ import annotations

import ctypes
import platform

DFL_FPGA_MAGIC = 0xB6
DFL_FME_BASE = 0x80

_IOC_NRSHIFT = 0
_IOC_TYPESHIFT = 8
#: Architectures whose _IOC_NONE is 1 with a 3-bit direction field at bit 29.
_IOC_NONE_IS_ONE = ("ppc", "ppc64", "ppc64le", "powerpc", "mips", "mips64", "sparc", "sparc64", "alpha")


def ioc_none(machine: str | None = None) -> tuple[int, int]:
    """(_IOC_NONE, _IOC_DIRSHIFT) of ``machine`` (default: this one)."""
    machine = (machine or platform.machine()).lower()
    if machine.startswith(_IOC_NONE_IS_ONE):
        return 1, 29
    return 0, 30


def io_request(type_: int, nr: int, machine: str | None = None) -> int:
    """The kernel's ``_IO(type, nr)``: an ioctl request without data direction or size."""
    none, dir_shift = ioc_none(machine)
    return (none << dir_shift) | (type_ << _IOC_TYPESHIFT) | (nr << _IOC_NRSHIFT)


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

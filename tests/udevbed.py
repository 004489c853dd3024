"""Real libudev over a fake sysfs: a ctypes driver for umockdev's test bed.

The process must run under ``umockdev-wrapper`` (it preloads
``libumockdev-preload.so.0``, which has to be present when Python starts);
:func:`require_umockdev` fails loudly otherwise, so CI cannot silently skip.

Builders at the bottom describe the Linux FPGA layouts (DFL cards, FPGA-manager
regions) in umockdev's record format, using unusual PCI addresses and device
numbers so nothing collides with the host's udev database.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass

import pytest

_lib = ctypes.CDLL("libumockdev.so.0")
_gobject = ctypes.CDLL("libgobject-2.0.so.0")
_lib.umockdev_testbed_new.restype = ctypes.c_void_p
_lib.umockdev_testbed_get_root_dir.argtypes = [ctypes.c_void_p]
_lib.umockdev_testbed_get_root_dir.restype = ctypes.c_char_p
_lib.umockdev_testbed_add_from_string.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_lib.umockdev_testbed_add_from_string.restype = ctypes.c_bool
_lib.umockdev_testbed_uevent.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
_lib.umockdev_testbed_set_attribute.argtypes = [
    ctypes.c_void_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
]
_lib.umockdev_testbed_remove_device.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_gobject.g_object_unref.argtypes = [ctypes.c_void_p]


def under_umockdev() -> bool:
    """True when the umockdev preload library was loaded at process start."""
    return "libumockdev-preload" in os.environ.get("LD_PRELOAD", "")


def require_umockdev() -> None:
    """Fail (never skip) when the tests cannot reach umockdev's fake udev."""
    if not under_umockdev():
        pytest.fail(
            "udev tests need real libudev over umockdev: run them under umockdev-wrapper "
            "(scripts/check does; Debian package 'umockdev')",
            pytrace=False,
        )


class UdevTestbed:
    """One umockdev test bed; devices added here are what libudev (and pyudev) see."""

    def __init__(self) -> None:
        require_umockdev()
        self._tb = _lib.umockdev_testbed_new()
        if not self._tb:
            raise RuntimeError("umockdev_testbed_new failed")
        self._nodes_made: set[str] = set()

    @property
    def root_dir(self) -> str:
        """The fake root (what UMOCKDEV_DIR must name for a subprocess to see this bed)."""
        return os.fsdecode(_lib.umockdev_testbed_get_root_dir(self._tb))

    def add(self, record: str) -> None:
        """Add devices from umockdev record text (P:, E:, A:, N: lines; blank line between devices).

        ``P:`` lines may name the full /sys path; the record format wants it without /sys.
        umockdev aborts when asked for the same device node twice (a device plugged
        back in after :meth:`remove`): such a node is made here as a plain file instead.
        """
        lines: list[str] = []
        again: list[str] = []
        for line in record.splitlines():
            if line.startswith("P: /sys/"):
                line = "P: " + line[len("P: /sys") :]
            elif line.startswith("N: "):
                node = line[len("N: ") :].split("=", 1)[0]
                if node in self._nodes_made:
                    again.append(node)
                    continue
                self._nodes_made.add(node)
            lines.append(line)
        record = "\n".join(lines)
        for node in again:
            path = os.path.join(self.root_dir, "dev", node)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb"):
                pass
        if not _lib.umockdev_testbed_add_from_string(self._tb, (record + "\n").encode(), None):
            raise RuntimeError(f"umockdev rejected the record:\n{record}")

    def uevent(self, sys_path: str, action: str) -> None:
        """Send a uevent (add, change, remove) for a device."""
        _lib.umockdev_testbed_uevent(self._tb, sys_path.encode(), action.encode())

    def set_attribute(self, sys_path: str, name: str, value: str) -> None:
        """Change a sysfs attribute (send a 'change' uevent to announce it)."""
        _lib.umockdev_testbed_set_attribute(self._tb, sys_path.encode(), name.encode(), value.encode())

    def remove(self, sys_path: str) -> None:
        """Unplug a device: 'remove' uevent first (removal itself sends none), then delete it.

        Its /dev node goes too, as devtmpfs does (umockdev leaves it behind).
        """
        node = self._device_node(sys_path)
        self.uevent(sys_path, "remove")
        _lib.umockdev_testbed_remove_device(self._tb, sys_path.encode())
        if node is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.root_dir, "dev", node))

    def _device_node(self, sys_path: str) -> str | None:
        """The DEVNAME (relative to /dev) in the device's uevent file, if any."""
        try:
            with open(os.path.join(self.root_dir, sys_path.lstrip("/"), "uevent")) as uevent:
                lines = uevent.read().splitlines()
        except FileNotFoundError:
            return None
        for line in lines:
            if line.startswith("DEVNAME="):
                return line[len("DEVNAME=") :].removeprefix("/dev/")
        return None

    def close(self) -> None:
        """Destroy the bed (its fake root is removed)."""
        if self._tb:
            _gobject.g_object_unref(self._tb)
            self._tb = None


# ------------------------------------------------------------------ layouts
AFU_NLB = "d8424dc4a4a3c413f89e433683f9040b"
AFU_DMA = "331db30c988541ea9f4e6d8b6e8c8f3c"
INTERFACE_N3000 = "9346116d9a2b5c36b5fd3b1e2e6c2d7a"
ALL_ONES = "f" * 32


@dataclass(frozen=True)
class FakeDflCard:
    """A DFL card as the upstream driver lays it out in sysfs."""

    pci: str  # e.g. "0000:e1:00.0"
    numa: int
    fme_index: int
    port_indexes: tuple[int, ...]
    afu_ids: tuple[str, ...]
    interface_id: str = INTERFACE_N3000
    major: int = 487
    #: the out-of-tree OPAE driver: no FME region, the FME has ``pr/interface_id`` instead
    out_of_tree: bool = False

    @property
    def pci_path(self) -> str:
        return f"/sys/devices/pci0000:e0/0000:e0:02.0/{self.pci}"

    @property
    def region_path(self) -> str:
        return f"{self.pci_path}/fpga_region/region{self.fme_index * 10}"

    @property
    def fme_path(self) -> str:
        return f"{self.region_path}/dfl-fme.{self.fme_index}"

    @property
    def fme_region_path(self) -> str:
        """The FME's own region, whose ``compat_id`` is the PR interface id (upstream driver)."""
        return f"{self.fme_path}/dfl-fme-region.{self.fme_index}/fpga_region/region{self.fme_index * 10 + 1}"

    @property
    def fme_manager_path(self) -> str:
        """The FME's FPGA manager (in the fpga_manager class, like every FPGA manager)."""
        return f"{self.fme_path}/dfl-fme-mgr.{self.fme_index}/fpga_manager/fpga{self.fme_index + 40}"

    def port_path(self, port_index: int) -> str:
        return f"{self.region_path}/dfl-port.{port_index}"

    def slot_id(self, port_number: int) -> str:
        return f"{self.pci.replace(':', '-')}-port{port_number}"

    def record(self, port_attrs: dict[int, dict[str, str | None]] | None = None) -> str:
        """The card's devices; ``port_attrs`` overrides (None removes) attributes per port number."""
        fme_attrs = f"A: pr/interface_id={self.interface_id}\n" if self.out_of_tree else ""
        blocks = [
            f"P: {self.pci_path}\nE: SUBSYSTEM=pci\nE: DRIVER=dfl-pci\nE: PCI_SLOT_NAME={self.pci}\n"
            f"A: numa_node={self.numa}\n",
            f"P: {self.region_path}\nE: SUBSYSTEM=fpga_region\n",
            f"P: {self.fme_path}\nE: SUBSYSTEM=platform\nE: DRIVER=dfl-fme\n"
            f"E: DEVNAME=/dev/dfl-fme.{self.fme_index}\nN: dfl-fme.{self.fme_index}\n"
            f"A: dev={self.major}:{self.fme_index * 10}\n{fme_attrs}",
        ]
        blocks.append(
            f"P: {self.fme_manager_path}\nE: SUBSYSTEM=fpga_manager\nA: name=DFL FME FPGA Manager\nA: state=operating\n"
        )
        if not self.out_of_tree:
            blocks.append(f"P: {self.fme_region_path}\nE: SUBSYSTEM=fpga_region\nA: compat_id={self.interface_id}\n")
        blocks += [self.port_record(number, (port_attrs or {}).get(number)) for number in range(len(self.port_indexes))]
        return "\n".join(blocks)

    def port_record(self, port_number: int, attrs: dict[str, str | None] | None = None) -> str:
        """One port's device alone (to plug it back in after a remove); ``attrs`` as in :meth:`record`."""
        index = self.port_indexes[port_number]
        merged: dict[str, str | None] = {
            "id": str(port_number),
            "afu_id": self.afu_ids[port_number],
            "dev": f"{self.major + 1}:{index}",
        }
        merged.update(attrs or {})
        lines = [
            f"P: {self.port_path(index)}",
            "E: SUBSYSTEM=platform",
            "E: DRIVER=dfl-port",
            f"E: DEVNAME=/dev/dfl-port.{index}",
            f"N: dfl-port.{index}",
        ]
        lines += [f"A: {name}={value}" for name, value in merged.items() if value is not None]
        return "\n".join(lines) + "\n"


def two_dfl_cards() -> tuple[FakeDflCard, FakeDflCard]:
    """Two cards on different NUMA nodes, 2 and 3 ports."""
    return (
        FakeDflCard("0000:e1:00.0", numa=0, fme_index=0, port_indexes=(0, 1), afu_ids=(AFU_NLB, AFU_DMA)),
        FakeDflCard("0000:e2:00.0", numa=1, fme_index=1, port_indexes=(2, 3, 4), afu_ids=(AFU_DMA,) * 3),
    )


@dataclass(frozen=True)
class FakeFpgaManager:
    """An FPGA-manager device with regions (Zynq-style), not on PCI."""

    name: str  # sysfs name of the manager, e.g. "fpga7"
    label: str  # its 'name' attribute
    state: str
    regions: tuple[str, ...]  # sysfs names, e.g. ("region7",)
    parent: str = "/sys/devices/platform/soc-e7/f8007000.devcfg"

    @property
    def manager_path(self) -> str:
        return f"{self.parent}/fpga_manager/{self.name}"

    def region_path(self, region: str) -> str:
        return f"{self.parent}/fpga-full/fpga_region/{region}"

    def record(self) -> str:
        blocks = [
            f"P: {self.parent}\nE: SUBSYSTEM=platform\n",
            f"P: {self.manager_path}\nE: SUBSYSTEM=fpga_manager\nA: name={self.label}\nA: state={self.state}\n",
        ]
        blocks += [f"P: {self.region_path(r)}\nE: SUBSYSTEM=fpga_region\n" for r in self.regions]
        return "\n".join(blocks)

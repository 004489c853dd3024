"""fpga-region backend: the Linux FPGA manager framework (Zynq, Versal, SoC FPGAs).

Each ``/sys/class/fpga_region/regionN`` is a slot, programmed through an FPGA
manager (``/sys/class/fpga_manager/fpgaN``, attributes ``name`` and ``state``) whose
``state`` drives the slot's health: ``operating`` is healthy, error states,
``unknown`` and ``power off`` are not. Regions and managers that belong to a DFL
card are left to the ``dfl`` backend. The framework does not report what a region
holds, so a slot starts with nothing known loaded.
"""

from __future__ import annotations

import os

from agent.discovery import udev
from agent.discovery.base import Enumeration, Skipped
from agent.discovery.hexid import parse_id128
from agent.discovery.udev import DeviceRecord
from agent.discovery.watching import UdevSource
from agent.slots import Health, Slot, make_slot_id

NAME = "fpga-region"
SUBSYSTEMS = ("fpga_region", "fpga_manager")
_UNHEALTHY_STATES = ("unknown", "power off")


def manager_health(manager: DeviceRecord) -> tuple[Health, str]:
    """Health of every region a manager programs, from its ``state``."""
    state = manager.attr("state")
    if state is None:
        return Health.UNHEALTHY, f"FPGA manager {manager.sys_name} reports no state"
    if "error" in state or state in _UNHEALTHY_STATES:
        return Health.UNHEALTHY, f"FPGA manager {manager.sys_name} state is {state!r}"
    return Health.HEALTHY, ""


def _owned_by_dfl(region: DeviceRecord, pcis: dict[str, DeviceRecord]) -> bool:
    for path in region.ancestors:
        if os.path.basename(path).startswith("dfl-"):
            return True
        pci = pcis.get(path)
        if pci is not None and pci.driver == "dfl-pci":
            return True
    return False


def _manager_for(region: DeviceRecord, managers: list[DeviceRecord]) -> DeviceRecord:
    for manager in managers:
        parent = manager.ancestors[0] if manager.ancestors else None
        if parent is not None and parent in region.ancestors:
            return manager
    if len(managers) == 1:
        return managers[0]
    raise ValueError(f"cannot tell which of {len(managers)} FPGA managers programs this region")


def scan_fpga_regions() -> Enumeration:
    """Enumerate FPGA-manager regions through udev (blocking)."""
    return build_region_slots(
        regions=udev.list_devices("fpga_region", ("compat_id",)),
        managers=udev.list_devices("fpga_manager", ("name", "state")),
        pcis={d.sys_path: d for d in udev.list_devices("pci")},
    )


def build_region_slots(
    regions: list[DeviceRecord], managers: list[DeviceRecord], pcis: dict[str, DeviceRecord]
) -> Enumeration:
    """Turn udev records into slots; a region that cannot be used is skipped with its reason."""
    slots: list[Slot] = []
    skipped: list[Skipped] = []
    # A DFL card's FME has an FPGA manager too; it programs only that card's ports.
    managers = [manager for manager in managers if not _owned_by_dfl(manager, pcis)]
    for region in sorted(regions, key=lambda d: d.sys_path):
        if _owned_by_dfl(region, pcis):
            continue
        try:
            if not managers:
                raise ValueError("no FPGA manager on this node")
            manager = _manager_for(region, managers)
            name = manager.attr("name")
            if not name:
                raise ValueError(f"FPGA manager {manager.sys_name} has no name")
            platform = name
            if region.attr("compat_id") is not None:
                platform = parse_id128(region.attr("compat_id"), "compat_id")
            health, reason = manager_health(manager)
            slot = Slot(
                id=make_slot_id(manager.sys_name, region.sys_name),
                card=manager.sys_name,
                region=region.sys_name,
                numa=None,
                device_nodes=(),
                platform=platform,
                loaded=None,
                health=health,
                backend=NAME,
                reason=reason,
                control_node=manager.sys_path,
            )
        except ValueError as exc:
            skipped.append(Skipped(region.sys_path, str(exc)))
            continue
        slots.append(slot)
    return Enumeration(slots, skipped)


def fpga_region_source() -> UdevSource:
    """The fpga-region DeviceSource."""
    return UdevSource(NAME, scan_fpga_regions, SUBSYSTEMS)

"""fpga-region backend: the Linux FPGA manager framework (Zynq, Versal, SoC FPGAs).

Each ``fpga_region`` (not a DFL card's, not a base region with children) is a slot whose health is its
FPGA manager's ``state``. While a base region holds a whole-card image, its removed children are
reported as they were (``held``: the programmer's record)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence

from agent.discovery import udev
from agent.discovery.base import Enumeration, Skipped
from agent.discovery.udev import DeviceRecord
from agent.discovery.watching import UdevSource
from agent.slots.model import Health, Slot, make_slot_id

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
    return any(
        os.path.basename(path).startswith("dfl-") or (path in pcis and pcis[path].driver == "dfl-pci")
        for path in region.ancestors
    )


def _manager_for(region: DeviceRecord, managers: list[DeviceRecord]) -> DeviceRecord:
    for manager in managers:
        parent = manager.ancestors[0] if manager.ancestors else None
        if parent is not None and parent in region.ancestors:
            return manager
    if len(managers) == 1:
        return managers[0]
    raise ValueError(f"cannot tell which of {len(managers)} FPGA managers programs this region")


#: Base region sysfs path -> the slots of its child regions, while it holds a whole-card image.
HeldCards = Callable[[], Mapping[str, Sequence[Slot]]]


def _parents(regions: Sequence[DeviceRecord]) -> dict[str, str]:
    """Region sysfs path -> its base region: the nearest ancestor that is a region, or whose device holds
    exactly one region."""
    owners: dict[str, list[str]] = {}
    for region in regions:
        owners.setdefault(region.sys_path, []).append(region.sys_path)
        if region.ancestors:
            owners.setdefault(region.ancestors[0], []).append(region.sys_path)
    parents: dict[str, str] = {}
    for region in regions:
        for depth, path in enumerate(region.ancestors):
            found = [r for r in owners.get(path, ()) if r != region.sys_path and (depth > 0 or r == path)]
            if found:
                if len(found) == 1:
                    parents[region.sys_path] = found[0]
                break
    return parents


def scan_fpga_regions(held_cards: HeldCards | None = None) -> Enumeration:
    """Enumerate FPGA-manager regions through udev (blocking), skipping unusable regions."""
    all_regions = udev.list_devices("fpga_region", ("compat_id",))
    all_managers = udev.list_devices("fpga_manager", ("name", "state"))
    pcis = {d.sys_path: d for d in udev.list_devices("pci")}
    held = {} if held_cards is None else held_cards()
    slots: list[Slot] = []
    skipped: list[Skipped] = []
    managers = [manager for manager in all_managers if not _owned_by_dfl(manager, pcis)]
    regions = [region for region in all_regions if not _owned_by_dfl(region, pcis)]
    parents = _parents(regions)
    bases = set(parents.values())
    for region in sorted(regions, key=lambda d: d.sys_path):
        if region.sys_path in held:
            slots += _held_slots(region, held[region.sys_path], managers)
            continue
        if region.sys_path in bases or parents.get(region.sys_path) in held:
            continue
        try:
            if not managers:
                raise ValueError("no FPGA manager on this node")
            manager = _manager_for(region, managers)
            name = manager.attr("name")
            if not name:
                raise ValueError(f"FPGA manager {manager.sys_name} has no name")
            platform = name if region.attr("compat_id") is None else region.id128("compat_id")
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
                parent_region=parents.get(region.sys_path, ""),
            )
        except ValueError as exc:
            skipped.append(Skipped(region.sys_path, str(exc)))
            continue
        slots.append(slot)
    return Enumeration(slots, skipped)


def _held_slots(base: DeviceRecord, slots: Sequence[Slot], managers: list[DeviceRecord]) -> list[Slot]:
    """A base region's child slots while it holds a whole-card image: healthy as their manager is."""
    manager = next((m for m in managers if m.sys_path == slots[0].control_node), None) if slots else None
    gone = (Health.UNHEALTHY, f"FPGA manager of {base.sys_name} is gone")
    health, reason = gone if manager is None else manager_health(manager)
    return [dataclasses.replace(slot, health=health, reason=reason, whole_card=True) for slot in slots]


def fpga_region_source(held: HeldCards | None = None) -> UdevSource:
    """The fpga-region DeviceSource; ``held`` is the programmer's record of whole-card images."""
    return UdevSource(NAME, lambda: scan_fpga_regions(held), SUBSYSTEMS)

"""DFL backend: Intel PAC / N3000-class cards driven by the upstream Linux DFL driver.

Each ``dfl-port.N`` under a ``dfl-pci`` device is a slot, programmed through the card's ``dfl-fme.N``;
the platform is the FME region's ``compat_id`` (or the OPAE driver's ``pr/interface_id``)."""

from __future__ import annotations

import re
from collections import defaultdict

from agent.discovery import udev
from agent.discovery.base import Enumeration, Skipped
from agent.discovery.udev import DeviceRecord
from agent.discovery.watching import UdevSource
from agent.slots.model import DeviceNode, Health, Slot, make_slot_id

NAME = "dfl"
MAX_PORTS_PER_CARD = 4
_PORT = re.compile(r"dfl-port\.\d+")
_FME = re.compile(r"dfl-fme\.\d+")
_PORT_OR_FME = re.compile(r"dfl-(?:port|fme)\.\d+")
SUBSYSTEMS = ("platform", "pci", "fpga_region")


def _nearest(candidates: dict[str, DeviceRecord], device: DeviceRecord) -> DeviceRecord | None:
    return next((candidates[path] for path in device.ancestors if path in candidates), None)


def _numa(pci: DeviceRecord) -> int | None:
    try:
        node = int(pci.attr("numa_node") or "-1")
    except ValueError:
        return None
    return node if node >= 0 else None


def _interface_id(fme: DeviceRecord, regions: list[DeviceRecord]) -> str:
    for region in regions:
        if fme.sys_path in region.ancestors and region.attr("compat_id") is not None:
            return region.id128("compat_id", "compat_id of the FME region")
    return fme.id128("pr/interface_id", "PR interface id (compat_id or pr/interface_id)")


def scan_dfl() -> Enumeration:
    """Enumerate DFL ports through udev (blocking); a malformed device is skipped with its reason."""
    platform = udev.list_devices("platform", ("id", "afu_id", "pr/interface_id"), _PORT_OR_FME)
    pcis = {d.sys_path: d for d in udev.list_devices("pci", ("numa_node",))}
    regions = udev.list_devices("fpga_region", ("compat_id",))
    fmes_by_card: dict[str, list[DeviceRecord]] = defaultdict(list)
    for fme in (d for d in platform if _FME.fullmatch(d.sys_name)):
        pci = _nearest(pcis, fme)
        if pci is not None:
            fmes_by_card[pci.sys_path].append(fme)

    slots: list[Slot] = []
    skipped: list[Skipped] = []
    ports_per_card: dict[str, int] = defaultdict(int)
    for port in sorted((d for d in platform if _PORT.fullmatch(d.sys_name)), key=lambda d: d.sys_path):
        try:
            slot = _port_slot(port, pcis, fmes_by_card, regions)
        except ValueError as exc:
            skipped.append(Skipped(port.sys_path, str(exc)))
            continue
        ports_per_card[slot.card] += 1
        if ports_per_card[slot.card] > MAX_PORTS_PER_CARD:
            skipped.append(Skipped(port.sys_path, f"card {slot.card} has more than {MAX_PORTS_PER_CARD} ports"))
        elif any(existing.id == slot.id for existing in slots):
            skipped.append(Skipped(port.sys_path, f"slot id {slot.id} is already taken by another port"))
        else:
            slots.append(slot)
    return Enumeration(slots, skipped)


def _port_slot(
    port: DeviceRecord,
    pcis: dict[str, DeviceRecord],
    fmes_by_card: dict[str, list[DeviceRecord]],
    regions: list[DeviceRecord],
) -> Slot:
    pci = _nearest(pcis, port)
    if pci is None:
        raise ValueError("no PCI device above the port")
    fmes = fmes_by_card.get(pci.sys_path, [])
    if len(fmes) != 1:
        raise ValueError(f"card {pci.sys_name} has {len(fmes)} FME devices, expected 1")
    fme = fmes[0]
    if not fme.device_node:
        raise ValueError(f"FME {fme.sys_name} has no device node")
    if not port.device_node:
        raise ValueError("port has no device node")
    raw_id = port.attr("id")
    if raw_id is None or not raw_id.isdigit() or int(raw_id) >= MAX_PORTS_PER_CARD:
        raise ValueError(f"port id {raw_id!r} is not a port number 0-{MAX_PORTS_PER_CARD - 1}")
    afu_id = port.id128("afu_id")
    interface_id = _interface_id(fme, regions)
    health, reason = Health.HEALTHY, ""
    if set(interface_id) == {"f"}:  # an id of all ones: the firmware crashed
        health, reason = Health.UNHEALTHY, "firmware crashed: PR interface id is all ones"
    elif set(afu_id) == {"f"}:
        health, reason = Health.UNHEALTHY, "firmware crashed: afu_id is all ones"
    region = f"port{int(raw_id)}"
    return Slot(
        id=make_slot_id(pci.sys_name, region),
        card=pci.sys_name,
        region=region,
        numa=_numa(pci),
        device_nodes=(DeviceNode(port.device_node, port.device_node),),
        platform=interface_id,
        loaded=afu_id,
        health=health,
        backend=NAME,
        reason=reason,
        control_node=fme.device_node,
    )


def dfl_source() -> UdevSource:
    return UdevSource(NAME, scan_dfl, SUBSYSTEMS)

"""static backend: slots declared in the configuration, for boards the kernel does not describe.

A slot is healthy while its device nodes exist (re-checked on any uevent); what it holds is what
``reported`` says (a command programmer's last read-back)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.discovery.base import Enumeration
from agent.discovery.watching import UdevSource
from agent.slots.model import DeviceNode, Health, Slot, SlotId, make_slot_id

NAME = "static"
_NAMES_SOMETHING = re.compile(r"[A-Za-z0-9]")
_FIELDS = {"card", "region", "devices", "numa", "platform", "control-node"}
#: What a slot holds by its id (None: empty or unknown).
ReportedContent = Callable[[SlotId], str | None]


@dataclass(frozen=True, slots=True)
class StaticSlotSpec:
    """One slot as the configuration declares it."""

    card: str
    region: str
    devices: tuple[str, ...]
    numa: int | None
    platform: str
    control_node: str = ""

    @property
    def slot_id(self) -> SlotId:
        return make_slot_id(self.card, self.region)


def _text(entry: dict[str, object], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}.{key} must be a non-empty string, got {value!r}")
    return _not_an_option(value.strip(), key, where)


def _not_an_option(value: str, key: str, where: str) -> str:
    """``value``, unless it starts with '-' (a vendor tool would read it as an option)."""
    if value.startswith("-"):
        raise ValueError(f"{where}.{key} {value!r} starts with '-', which a vendor tool would read as an option")
    return value


def parse_static_slots(data: object) -> tuple[StaticSlotSpec, ...]:
    """Validate the ``static-slots`` list; errors name the entry and field."""
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ValueError(f"must be a list of slots, got {type(data).__name__}")
    specs: list[StaticSlotSpec] = []
    seen: set[str] = set()
    for index, entry in enumerate(data):
        where = f"[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a mapping with card, region, devices, platform")
        unknown = set(map(str, entry)) - _FIELDS
        if unknown:
            raise ValueError(f"{where} has unknown field(s) {', '.join(sorted(unknown))}")
        card, region, platform = (_text(entry, k, where) for k in ("card", "region", "platform"))
        raw_devices = entry.get("devices")
        devices = (raw_devices,) if isinstance(raw_devices, str) else raw_devices
        if not isinstance(devices, list | tuple) or not devices:
            raise ValueError(f"{where}.devices must be a device path or a non-empty list of them")
        for device in devices:
            if not isinstance(device, str) or not device.startswith("/dev/"):
                raise ValueError(f"{where}.devices: {device!r} is not a path under /dev/")
        numa = entry.get("numa")
        if numa is not None and (not isinstance(numa, int) or isinstance(numa, bool) or numa < 0):
            raise ValueError(f"{where}.numa must be a NUMA node number >= 0, got {numa!r}")
        for key, value in (("card", card), ("region", region)):
            if not _NAMES_SOMETHING.search(value):
                raise ValueError(f"{where}.{key} {value!r} has no letter or digit, so it cannot name the slot")
        try:
            slot_id = make_slot_id(card, region)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if slot_id in seen:
            raise ValueError(f"{where}: slot id {slot_id} is declared twice")
        seen.add(slot_id)
        control_node = entry.get("control-node", "")
        if not isinstance(control_node, str) or "\0" in control_node:
            raise ValueError(
                f"{where}.control-node must be a string (a PCI address, a device node), got {control_node!r}"
            )
        control_node = _not_an_option(control_node.strip(), "control-node", where)
        specs.append(StaticSlotSpec(card, region, tuple(devices), numa, platform, control_node))
    return tuple(specs)


def static_source(
    specs: Sequence[StaticSlotSpec],
    reported: ReportedContent | None = None,
    whole_card: Callable[[str], bool] | None = None,
) -> UdevSource:
    """The static DeviceSource: slots healthy while their device nodes exist, re-checked on any uevent."""
    frozen = tuple(specs)

    def scan() -> Enumeration:
        return Enumeration([_static_slot(spec, reported, whole_card) for spec in frozen])

    return UdevSource(NAME, scan, None)


def _static_slot(
    spec: StaticSlotSpec, reported: ReportedContent | None, whole_card: Callable[[str], bool] | None
) -> Slot:
    missing = [device for device in spec.devices if not os.path.exists(device)]
    return Slot(
        id=spec.slot_id,
        card=spec.card,
        region=spec.region,
        numa=spec.numa,
        device_nodes=tuple(DeviceNode(device, device) for device in spec.devices),
        platform=spec.platform,
        loaded=None if reported is None else reported(spec.slot_id),
        health=Health.UNHEALTHY if missing else Health.HEALTHY,
        backend=NAME,
        reason=f"device {missing[0]} is missing" if missing else "",
        control_node=spec.control_node,
        whole_card=whole_card is not None and whole_card(spec.card),
    )

"""The name of a slot as a DRA device.

A device name in a ResourceSlice is a DNS label (lower case, digits and ``-``, at most
63 characters). Slot IDs may hold dots (PCI addresses such as ``0000:3b:00.0`` become
``0000-3b-00.0``), so each character a label forbids is written as ``-``. Slot IDs are
at most 63 characters already, and lower case.

Two slot IDs that differ only there (``0000-3b-00.0-p1`` and ``0000-3b-00-0-p1``) would
be one device name: the scheduler could not tell them apart, and a claim for one could
be prepared on the other. :func:`device_names` gives the name to one of them only (the
slot whose ID is the name itself, else the first by ID) and reports the other as a clash.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_NOT_IN_LABEL = re.compile(r"[^a-z0-9-]")


def device_name(slot_id: str) -> str:
    """The DRA device name of the slot ``slot_id``."""
    return _NOT_IN_LABEL.sub("-", slot_id.lower()).strip("-")


@dataclass(frozen=True, slots=True)
class NameClash:
    """Two slots with one device name: ``kept`` is the device, ``left_out`` is not offered."""

    name: str
    kept: str
    left_out: str


def device_names(slot_ids: Iterable[str]) -> tuple[dict[str, str], list[NameClash]]:
    """Device name -> slot ID for every slot that has a name of its own, and the slots left out.

    Which slot keeps a contested name does not depend on the order given: the one whose ID is
    the name, else the first by ID."""
    slots: dict[str, str] = {}
    clashes = []
    for slot_id in sorted(set(slot_ids), key=lambda s: (device_name(s) != s, s)):
        name = device_name(slot_id)
        if name in slots:
            clashes.append(NameClash(name, slots[name], slot_id))
        else:
            slots[name] = slot_id
    return slots, clashes

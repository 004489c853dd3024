"""The name of a slot as a DRA device.

A device name in a ResourceSlice is a DNS label (lower case, digits and ``-``, at most
63 characters). Slot IDs may hold dots (PCI addresses such as ``0000:3b:00.0`` become
``0000-3b-00.0``), so each character a label forbids is written as ``-``. Slot IDs are
at most 63 characters already, and lower case.
"""

from __future__ import annotations

import re

_NOT_IN_LABEL = re.compile(r"[^a-z0-9-]")


def device_name(slot_id: str) -> str:
    """The DRA device name of the slot ``slot_id``."""
    return _NOT_IN_LABEL.sub("-", slot_id.lower()).strip("-")

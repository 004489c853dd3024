"""Value types of the slot domain.

A slot is one partially reconfigurable region (or DFL port) of one FPGA card. Its ID
is what the kubelet sees: stable across restarts and reboots, derived from the card's
identity (PCI address, sysfs name) and the region, never from a list index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import NewType

SlotId = NewType("SlotId", str)

#: The kubelet's limit on a device ID (the device-plugin API says 63 characters).
MAX_SLOT_ID_LEN = 63

_ID_UNSAFE = re.compile(r"[^a-z0-9.-]+")


class Health(Enum):
    """Slot health, spelled as the kubelet expects it on the wire."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


def make_slot_id(card: str, region: str) -> SlotId:
    """Build a stable slot ID from a card identity and a region name.

    Lower-cases, replaces characters outside ``[a-z0-9.-]`` with ``-`` (so PCI
    addresses such as ``0000:3b:00.0`` stay readable) and rejects IDs longer than
    the kubelet accepts instead of truncating them into collisions.
    """
    card_part = _ID_UNSAFE.sub("-", card.lower()).strip("-")
    region_part = _ID_UNSAFE.sub("-", region.lower()).strip("-")
    if not card_part or not region_part:
        raise ValueError(f"slot id needs a card and a region, got card={card!r} region={region!r}")
    slot_id = f"{card_part}-{region_part}"
    if len(slot_id) > MAX_SLOT_ID_LEN:
        raise ValueError(
            f"slot id {slot_id!r} is {len(slot_id)} characters; the kubelet accepts at most {MAX_SLOT_ID_LEN}"
        )
    return SlotId(slot_id)


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A device file the container gets for a slot (read-write)."""

    host_path: str
    container_path: str


@dataclass(frozen=True, slots=True)
class Slot:
    """One FPGA slot as a discovery backend reports it.

    ``loaded`` is the accelerator the hardware reports in the slot (None when empty
    or unknown); ``platform`` is the partial-reconfiguration interface it accepts.
    """

    id: SlotId
    card: str
    region: str
    numa: int | None
    device_nodes: tuple[DeviceNode, ...]
    platform: str
    loaded: str | None
    health: Health
    backend: str
    reason: str = ""
    #: Device node the agent itself uses to program the slot (e.g. the DFL FME);
    #: never handed to containers.
    control_node: str = ""
    #: ``loaded`` is an image of the slot's whole card (all its slots as one region), not the slot's own.
    whole_card: bool = False
    #: fpga-region: the sysfs path of the base region whose child region this slot is (a whole-card image is
    #: loaded there); empty elsewhere.
    parent_region: str = ""

    def __post_init__(self) -> None:
        if len(self.id) > MAX_SLOT_ID_LEN:
            raise ValueError(f"slot id {self.id!r} longer than {MAX_SLOT_ID_LEN} characters")


@dataclass(frozen=True, slots=True)
class Holder:
    """Who a slot was handed to.

    Allocate carries only device IDs, so right after Allocate the pod is unknown
    (``pod`` is None); PreStartContainer fills it in from the pod-resources API.
    """

    allocated_at: float
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None

    def describe(self) -> str:
        """Human-readable name of the holder for logs and tables."""
        if self.pod is None:
            return "allocated (pod not yet known)"
        return f"{self.namespace}/{self.pod}/{self.container}"

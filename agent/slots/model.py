"""Value types of the slot domain: a slot is one reconfigurable region (or DFL port) of one FPGA card."""

from __future__ import annotations

import re
from collections.abc import Sequence
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
    """A stable slot ID from a card identity and a region: lower case, ``[a-z0-9.-]`` (others become ``-``);
    ValueError when longer than the kubelet accepts."""
    card_part, region_part = (_ID_UNSAFE.sub("-", part.lower()).strip("-") for part in (card, region))
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
    """One FPGA slot as a discovery backend reports it; ``loaded``: the accelerator reported (None: empty or
    unknown), ``platform``: the PR interface it accepts."""

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
    #: Device node the agent itself programs the slot through (e.g. the DFL FME); never handed to containers.
    control_node: str = ""
    #: ``loaded`` is an image of the slot's whole card (all its slots as one region), not the slot's own.
    whole_card: bool = False
    #: fpga-region: the sysfs path of the base region this slot is a child of; empty elsewhere.
    parent_region: str = ""

    def __post_init__(self) -> None:
        if len(self.id) > MAX_SLOT_ID_LEN:
            raise ValueError(f"slot id {self.id!r} longer than {MAX_SLOT_ID_LEN} characters")


@dataclass(frozen=True, slots=True)
class Holder:
    """Who a slot was handed to; ``pod`` is None until PreStartContainer fills it in."""

    allocated_at: float
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None

    def describe(self) -> str:
        """Human-readable name of the holder for logs and tables."""
        if self.pod is None:
            return "allocated (pod not yet known)"
        return f"{self.namespace}/{self.pod}/{self.container}"


def eviction_key(bitstream: str | None, last_used: float | None, slot_id: str) -> tuple[bool, float, str]:
    """Which free slot is overwritten first (the DRA ResourceSlice's order, the extender's sort): empty ones
    (``bitstream`` None), then the least recently used (``last_used`` in epoch seconds, None for never), then by ID."""
    return bitstream is not None, float(last_used or 0.0), slot_id


def container_env(slots: Sequence[Slot]) -> dict[str, str]:
    """What a container given ``slots`` sees, device plugin or DRA: ``FPGA_SLOTS=<id>,<id>`` and, per slot in
    order, its ID, platform, device nodes and NUMA node."""
    envs = {"FPGA_SLOTS": ",".join(slot.id for slot in slots)}
    for index, slot in enumerate(slots):
        envs[f"FPGA_SLOT_{index}_ID"] = slot.id
        envs[f"FPGA_SLOT_{index}_PLATFORM"] = slot.platform
        envs[f"FPGA_SLOT_{index}_DEVICE"] = ",".join(node.container_path for node in slot.device_nodes)
        if slot.numa is not None:
            envs[f"FPGA_SLOT_{index}_NUMA"] = str(slot.numa)
    return envs

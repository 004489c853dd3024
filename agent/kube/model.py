"""What the agent keeps of a pod: a small frozen value parsed once from the API's JSON.

The API server sends whole Pod objects (often tens of kilobytes with managed
fields and status). The agent needs only who the pod is, where and in which phase
it is, its annotations (the bitstream it wants) and how many slots each container
asks for, so :func:`parse_pod` copies exactly that and the rest is dropped right after
the read, in the worker thread that read it.

Parsing is tolerant: the API server only ever sends valid pods, but fields that
are unset are simply absent in JSON, so every field has a neutral default.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, NamedTuple

#: The extended resource the agent advertises (the same name the device plugin registers).
SLOT_RESOURCE = "example.com/fpga-slot"

PodEventKind = Literal["ADDED", "MODIFIED", "DELETED"]
PodKey = tuple[str, str]

_DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_BINARY_SUFFIXES = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


class ContainerSlots(NamedTuple):
    """One container and the number of slots it asks for (0 when it asks for none)."""

    name: str
    slots: int


@dataclass(frozen=True, slots=True)
class PodInfo:
    """The part of a Pod the agent uses. ``deleted`` is set on the last state of a removed pod."""

    namespace: str
    name: str
    uid: str
    node_name: str
    phase: str
    created: float
    annotations: Mapping[str, str] = field(default_factory=dict, hash=False)
    containers: tuple[ContainerSlots, ...] = ()
    deleted: bool = False
    init_containers: tuple[ContainerSlots, ...] = ()

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    @property
    def requested_slots(self) -> int:
        """Slots the pod holds at most at once: app containers run together, init containers one by one."""
        app = sum(c.slots for c in self.containers)
        init = max((c.slots for c in self.init_containers), default=0)
        return max(app, init)

    def as_deleted(self) -> PodInfo:
        return dataclasses.replace(self, deleted=True)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_quantity(value: object) -> int:
    """A Kubernetes quantity as a whole number (``"2"``, ``2``, ``"1k"``, ``"2000m"``).

    Extended resources are whole numbers (the API server rejects anything else),
    so a fractional or negative value is a ValueError.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, str):
        number = _parse_quantity_text(value.strip())
    else:
        raise ValueError(f"not a quantity: {value!r}")
    if number < 0 or number != number.to_integral_value():
        raise ValueError(f"not a whole, non-negative count: {value!r}")
    return int(number)


def _parse_quantity_text(text: str) -> Decimal:
    digits_end = 0
    while digits_end < len(text) and (text[digits_end].isdigit() or text[digits_end] in "+-."):
        digits_end += 1
    number_text, suffix = text[:digits_end], text[digits_end:]
    try:
        number = Decimal(number_text)
    except InvalidOperation:
        raise ValueError(f"not a quantity: {text!r}") from None
    if suffix in _BINARY_SUFFIXES:
        return number * _BINARY_SUFFIXES[suffix]
    if suffix in _DECIMAL_SUFFIXES:
        return number * _DECIMAL_SUFFIXES[suffix]
    if suffix[:1] in ("e", "E"):
        try:
            return number * (Decimal(10) ** int(suffix[1:]))
        except ValueError:
            pass
    raise ValueError(f"not a quantity: {text!r}")


def parse_timestamp(value: object) -> float:
    """An RFC 3339 time (``2024-05-01T10:00:00Z``) as seconds since the epoch; 0.0 when unset or bad."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return 0.0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _container_slots(container: Mapping[str, Any]) -> ContainerSlots:
    resources = _mapping(container.get("resources"))
    # For extended resources a limit is required and a request, if given, must equal it.
    raw = _mapping(resources.get("limits")).get(SLOT_RESOURCE)
    if raw is None:
        raw = _mapping(resources.get("requests")).get(SLOT_RESOURCE)
    try:
        slots = parse_quantity(raw) if raw is not None else 0
    except ValueError:
        slots = 0
    return ContainerSlots(str(container.get("name", "")), slots)


def _containers(value: object) -> tuple[ContainerSlots, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(_container_slots(c) for c in value if isinstance(c, Mapping))


def parse_pod(obj: Mapping[str, Any], *, deleted: bool = False) -> PodInfo:
    """Copy what the agent needs out of a Pod as the API sends it (JSON, camelCase).

    Raises ValueError when the object has no name (not a pod at all).
    """
    meta = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    status = _mapping(obj.get("status"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("object has no metadata.name")
    annotations = {
        str(key): value for key, value in _mapping(meta.get("annotations")).items() if isinstance(value, str)
    }
    return PodInfo(
        namespace=str(meta.get("namespace") or ""),
        name=name,
        uid=str(meta.get("uid") or ""),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        created=parse_timestamp(meta.get("creationTimestamp")),
        annotations=types.MappingProxyType(annotations),
        containers=_containers(spec.get("containers")),
        deleted=deleted,
        init_containers=_containers(spec.get("initContainers")),
    )

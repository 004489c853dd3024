"""The published slot state of one node: the FpgaNodeState object, written by its agent, read by the rest.

One schema for the writer and every reader; readers ignore fields they do not know."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from agent.slots.model import Health
from agent.slots.registry import SlotState

GROUP = "example.com"
VERSION = "v1alpha1"
KIND = "FpgaNodeState"
PLURAL = "fpganodestates"
API_VERSION = f"{GROUP}/{VERSION}"
#: The label every FpgaNodeState carries (the extender and the cluster view select by it).
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "fpga-node-state"
#: Bounds, also in the CRD's schema (daemonset/fpganodestate-crd.yaml).
MAX_SLOTS = 128
MAX_BITSTREAMS = 1024
MAX_NAME_LEN = 256  # platform and accelerator ids, as the catalog and FpgaBitstream take them


class PublishedSlot(TypedDict):
    """One slot as readers see it (on the wire ``last_used`` is ``lastUsed``)."""

    id: str
    card: str
    numa: int | None
    platform: str
    bitstream: str | None
    accelerator: str | None
    free: bool
    healthy: bool
    last_used: int | None


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node's published state: its slots (sorted by id) and its catalog, bitstream name -> platform."""

    node: str
    version: str
    slots: tuple[PublishedSlot, ...]
    bitstreams: Mapping[str, str]


# --------------------------------------------------------------------------- writing
def published_slot(state: SlotState) -> PublishedSlot:
    slot = state.slot
    return {
        "id": str(slot.id),
        "card": slot.card,
        "numa": slot.numa,
        "platform": slot.platform,
        "bitstream": state.bitstream,
        "accelerator": state.accelerator_id,
        "free": state.holder is None,
        "healthy": state.health is Health.HEALTHY,
        "last_used": int(state.last_used) if state.last_used is not None else None,
    }


def state_spec(node: str, states: Iterable[SlotState], bitstreams: Mapping[str, str]) -> dict[str, Any]:
    """The ``spec`` of a node's FpgaNodeState: slots by id, catalog by name, each cut at its bound."""
    records = sorted((published_slot(state) for state in states), key=lambda record: record["id"])
    slots = [_wire_slot(record) for record in records[:MAX_SLOTS]]
    catalog = dict(sorted(bitstreams.items())[:MAX_BITSTREAMS])
    return {"nodeName": node, "slots": slots, "bitstreams": catalog}


def dropped(states: int, bitstreams: int) -> tuple[int, int]:
    """How many slots and bitstreams :func:`state_spec` leaves out of a node with that many."""
    return max(0, states - MAX_SLOTS), max(0, bitstreams - MAX_BITSTREAMS)


def state_object(
    node: str, namespace: str, spec: Mapping[str, Any], owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A whole FpgaNodeState, named after its node; ``owner``: an ownerReference (the agent's DaemonSet)."""
    metadata: dict[str, Any] = {"name": node, "namespace": namespace, "labels": {COMPONENT_LABEL: COMPONENT}}
    if owner is not None:
        metadata["ownerReferences"] = [dict(owner)]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": dict(spec)}


def _wire_slot(record: PublishedSlot) -> dict[str, Any]:
    wire: dict[str, Any] = dict(record)
    wire["lastUsed"] = wire.pop("last_used")
    return wire


# --------------------------------------------------------------------------- reading
def parse_state(obj: Mapping[str, Any]) -> NodeState:
    """A whole FpgaNodeState as the API server sends it; ValueError naming what is wrong."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        raise ValueError("no metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("no metadata.name")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError(f"FpgaNodeState {name}: no spec")
    node = spec.get("nodeName", name)
    if node != name:
        raise ValueError(f"FpgaNodeState {name}: spec.nodeName {node!r} differs from its name")
    try:
        slots = parse_slots(spec.get("slots", []))
        bitstreams = parse_bitstreams(spec.get("bitstreams", {}))
    except ValueError as exc:
        raise ValueError(f"FpgaNodeState {name}: {exc}") from None
    return NodeState(name, str(metadata.get("resourceVersion") or ""), slots, bitstreams)


def parse_slots(data: object) -> tuple[PublishedSlot, ...]:
    """The slots of a ``spec.slots`` list, sorted by id; ValueError naming what is wrong."""
    if not isinstance(data, list):
        raise ValueError(f"slots: {_json_type(data)}, not a list")
    if len(data) > MAX_SLOTS:
        raise ValueError(f"slots: {len(data)} of them, more than {MAX_SLOTS}")
    slots = [_parse_slot(item, index) for index, item in enumerate(data)]
    ids = [slot["id"] for slot in slots]
    if len(set(ids)) != len(ids):
        raise ValueError("slots: an id is listed twice")
    return tuple(sorted(slots, key=lambda slot: slot["id"]))


def parse_bitstreams(data: object) -> dict[str, str]:
    """The catalog of a ``spec.bitstreams`` object, name -> platform; ValueError naming what is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError(f"bitstreams: {_json_type(data)}, not an object")
    if len(data) > MAX_BITSTREAMS:
        raise ValueError(f"bitstreams: {len(data)} of them, more than {MAX_BITSTREAMS}")
    catalog: dict[str, str] = {}
    for name, platform in data.items():
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_LEN:
            raise ValueError(f"bitstreams: a name is empty or longer than {MAX_NAME_LEN}")
        if not isinstance(platform, str) or len(platform) > MAX_NAME_LEN:
            raise ValueError(f"bitstream {name!r}: platform is {_json_type(platform)} or too long")
        catalog[name] = platform
    return catalog


def _parse_slot(item: object, index: int) -> PublishedSlot:
    if not isinstance(item, Mapping):
        raise ValueError(f"slot {index}: {_json_type(item)}, not an object")
    where = f"slot {item['id']!r}" if isinstance(item.get("id"), str) else f"slot {index}"
    slot: PublishedSlot = {
        "id": _field(item, "id", str, where, required=True),
        "card": _field(item, "card", str, where, required=True),
        "numa": _field(item, "numa", int, where),
        "platform": _field(item, "platform", str, where, required=True),
        "bitstream": _field(item, "bitstream", str, where),
        "accelerator": _field(item, "accelerator", str, where),
        "free": _field(item, "free", bool, where, required=True),
        "healthy": _field(item, "healthy", bool, where, required=True),
        "last_used": _field(item, "lastUsed", int, where),
    }
    if not slot["id"]:
        raise ValueError(f"{where}: empty 'id'")
    return slot


def _field(item: Mapping[str, Any], key: str, kind: type, where: str, *, required: bool = False) -> Any:
    value = item.get(key)
    if value is None:
        if required:
            raise ValueError(f"{where}: no {key!r}")
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}: {key!r} is {_json_type(value)}, not {_TYPE_NAMES[kind]}")
    if isinstance(value, str) and len(value) > MAX_NAME_LEN:
        raise ValueError(f"{where}: {key!r} is longer than {MAX_NAME_LEN} characters")
    return value


_TYPE_NAMES: dict[type, str] = {str: "a string", int: "an integer", bool: "true or false"}


def _json_type(value: object) -> str:
    kinds = ((bool, "true or false"), (int | float, "a number"), (str, "a string"), (list, "a list"))
    return "null" if value is None else next((name for kind, name in kinds if isinstance(value, kind)), "an object")

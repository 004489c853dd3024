"""The kube-scheduler extender wire format: reading a request into what scoring needs, encoding the answer.

``k8s.io/kube-scheduler/extender/v1`` types have no JSON tags: keys are the Go field names, matched
case-insensitively at the top level as Go's decoder does. A request carries ``NodeNames``
(``nodeCacheCapable: true``) or whole ``Nodes``, and the filter answer follows the form asked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import orjson

from agent.errors import ExtenderRequestError, shown
from agent.extender.demand import ContainerDemand, PodDemand
from agent.extender.drapods import DraPod, read_dra_pod
from agent.extender.scoring import FilterOutcome
from agent.slots.quantity import parse_count

SLOT_RESOURCE = "example.com/fpga-slot"
BITSTREAM_ANNOTATION = "example.com/fpga-bitstream"


class NodeList(TypedDict, total=False):
    """A v1.NodeList: ``items`` may be null when the list is empty (Go's nil slice)."""

    metadata: dict[str, Any]
    items: list[Any] | None


class ExtenderFilterResult(TypedDict):
    """The answer to filter (``extenderv1.ExtenderFilterResult``)."""

    Nodes: NodeList | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    """One entry of the answer to prioritize (``extenderv1.HostPriority``); Score 0..10."""

    Host: str
    Score: int


HostPriorityList = list[HostPriority]


@dataclass(frozen=True, slots=True)
class SchedulingRequest:
    """A parsed extender call: the pod's demand, and the candidates as names or as Node objects."""

    demand: PodDemand
    #: Candidate names (``nodeCacheCapable: true``); None when the request carried Node objects.
    node_names: Sequence[str] | None
    #: The request's Node objects as parsed (``nodeCacheCapable: false``), not copied.
    nodes: Sequence[Mapping[str, Any]] | None = None
    #: A DRA pod's claims: its demand is read from their templates (``agent.extender.drapods``), not ``demand``.
    dra: DraPod | None = None

    @property
    def names(self) -> Sequence[str]:
        if self.node_names is not None:
            return self.node_names
        return [node_name(node) for node in self.nodes or ()]


def parse_extender_args(body: bytes) -> SchedulingRequest:
    """Read an ExtenderArgs body; ExtenderRequestError saying what is wrong if it is not one."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:  # invalid UTF-8 and NaN included
        if "depth limit" in str(exc) or "recursion" in str(exc):
            raise ExtenderRequestError("the body is nested too deeply (more than 1024 levels)") from None
        raise ExtenderRequestError(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ExtenderRequestError(f"the body must be a JSON object (ExtenderArgs), got {_kind(data)}")
    return _read_args(data)


def _read_args(data: dict[str, Any]) -> SchedulingRequest:
    pod = _field(data, "Pod")
    if not isinstance(pod, dict):
        raise ExtenderRequestError(f"Pod must be an object, got {_kind(pod)}")
    demand = read_pod_demand(pod)
    dra = read_pod_claims(pod)
    names = _field(data, "NodeNames")
    if names is not None:
        if not isinstance(names, list):
            raise ExtenderRequestError("NodeNames must be a list of strings")
        try:
            "".join(names)  # every entry a string, checked in C
        except TypeError:
            raise ExtenderRequestError("NodeNames must be a list of strings") from None
        return SchedulingRequest(demand, names, dra=dra)
    nodes = _field(data, "Nodes")
    if nodes is None:
        raise ExtenderRequestError("neither NodeNames nor Nodes is given")
    if not isinstance(nodes, dict):
        raise ExtenderRequestError(f"Nodes must be a NodeList object, got {_kind(nodes)}")
    items = nodes.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise ExtenderRequestError(f"Nodes.items must be a list, got {_kind(items)}")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ExtenderRequestError(f"Nodes.items[{index}] must be a Node object, got {_kind(item)}")
        meta = item.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise ExtenderRequestError(f"Nodes.items[{index}] has no metadata.name")
    return SchedulingRequest(demand, None, items, dra)


def read_pod_demand(pod: Mapping[str, Any]) -> PodDemand:
    """The pod's slot requests per container, each with the bitstream it wants."""
    meta = _object(pod.get("metadata"), "Pod.metadata")
    spec = _object(pod.get("spec"), "Pod.spec")
    annotations = _object(meta.get("annotations"), "Pod.metadata.annotations")
    for key, value in annotations.items():
        if not isinstance(value, str):
            raise ExtenderRequestError(f"Pod.metadata.annotations[{shown(key)}] must be a string, got {_kind(value)}")
    name = f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"
    containers: list[ContainerDemand] = []
    for field_name, init in (("initContainers", True), ("containers", False)):
        listed = spec.get(field_name)
        if listed is None:
            continue
        if not isinstance(listed, list):
            raise ExtenderRequestError(f"Pod.spec.{field_name} must be a list, got {_kind(listed)}")
        for index, container in enumerate(listed):
            if not isinstance(container, dict):
                raise ExtenderRequestError(f"Pod.spec.{field_name}[{index}] must be an object, got {_kind(container)}")
            cname = container.get("name")
            cname = cname if isinstance(cname, str) else ""
            slots = _container_slots(container, field_name, index)
            if slots:
                bitstream = annotations.get(f"{BITSTREAM_ANNOTATION}.{cname}") or annotations.get(BITSTREAM_ANNOTATION)
                containers.append(ContainerDemand(cname, slots, bitstream or None, init))
    return PodDemand.of(name, containers)


def read_pod_claims(pod: Mapping[str, Any]) -> DraPod | None:
    """A DRA pod's claims, else None; call after :func:`read_pod_demand` (which checks the pod's shape)."""
    spec = _object(pod.get("spec"), "Pod.spec")
    if not spec.get("resourceClaims"):
        return None
    meta = _object(pod.get("metadata"), "Pod.metadata")
    annotations = _object(meta.get("annotations"), "Pod.metadata.annotations")
    namespace = meta.get("namespace")
    namespace = namespace if isinstance(namespace, str) and namespace else "default"
    name = f"{namespace}/{meta.get('name') or '?'}"
    return read_dra_pod(name, namespace, spec, annotations.get(BITSTREAM_ANNOTATION) or None)


def _container_slots(container: Mapping[str, Any], field_name: str, index: int) -> int:
    """The container's ``example.com/fpga-slot`` count (0: none)."""
    resources = container.get("resources")
    if resources is None:
        return 0
    if not isinstance(resources, dict):
        _object(resources, f"Pod.spec.{field_name}[{index}].resources")  # raises, naming the place
    # An extended resource must have a limit; a request, if given, equals it.
    for kind in ("limits", "requests"):
        values = resources.get(kind)
        if values is None:
            continue
        if not isinstance(values, dict):
            _object(values, f"Pod.spec.{field_name}[{index}].resources.{kind}")  # raises, naming the place
        raw = values.get(SLOT_RESOURCE)
        if raw is not None:
            try:
                return parse_count(raw)
            except ValueError as exc:
                where = f"Pod.spec.{field_name}[{index}].resources.{kind}[{SLOT_RESOURCE}]"
                raise ExtenderRequestError(f"{where}: {exc}") from None
    return 0


def node_name(node: Mapping[str, Any]) -> str:
    """The name of a Node object from a request (checked by :func:`parse_extender_args`)."""
    return str(node["metadata"]["name"])


def filter_result(request: SchedulingRequest, outcome: FilterOutcome) -> ExtenderFilterResult:
    """The answer in the form asked: names for names, the passing Node objects (not copies) for objects."""
    if request.node_names is not None:
        return {
            "Nodes": None,
            "NodeNames": outcome.passed,
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": outcome.failed,
            "Error": "",
        }
    passed = set(outcome.passed)
    items: list[Any] = [node for node in request.nodes or () if node_name(node) in passed]
    return {
        "Nodes": {"metadata": {}, "items": items},
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": outcome.failed,
        "Error": "",
    }


def filter_error(message: str) -> ExtenderFilterResult:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def priority_list(scores: Sequence[tuple[str, int]]) -> HostPriorityList:
    return [{"Host": host, "Score": score} for host, score in scores]


def encode(value: object) -> bytes:
    """Compact JSON, as one bytes object (written in one piece). ASCII: a lone surrogate cannot break it."""
    return json.dumps(value, separators=(",", ":")).encode()


def encode_priorities(scores: Sequence[tuple[str, int]]) -> bytes:
    """The HostPriorityList as JSON, UTF-8; a name that is not valid Unicode (a lone surrogate) is escaped."""
    entries = priority_list(scores)
    try:
        return orjson.dumps(entries)
    except TypeError:
        return encode(entries)


def _field(data: Mapping[str, Any], name: str) -> Any:
    """A top-level field by its Go name, matched as Go's decoder does: exactly first, then ignoring case."""
    if name in data:
        return data[name]
    lowered = name.lower()
    for key, value in data.items():
        if key.lower() == lowered:
            return value
    return None


def _object(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ExtenderRequestError(f"{where} must be an object, got {_kind(value)}")
    return value


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )

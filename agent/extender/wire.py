"""The kube-scheduler extender wire format: reading a request into what scoring needs, encoding the answer.

``k8s.io/kube-scheduler/extender/v1`` types have no JSON tags: keys are the Go field names. A request
carries ``NodeNames`` (``nodeCacheCapable: true``) or whole ``Nodes``; the filter answer takes the same form."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import orjson

from agent.errors import ExtenderRequestError, shown
from agent.extender.claimtemplates import MAX_NAME_CHARS, TemplateLookup, TemplateRequest
from agent.extender.demand import ContainerDemand, DraRequest, PodDemand
from agent.extender.scoring import FilterOutcome
from agent.slots.bitstreamrequest import BITSTREAM_ANNOTATION, SLOT_RESOURCE
from agent.slots.quantity import parse_count

#: Claims read of one pod at most (the API server allows 32); the others add nothing.
MAX_POD_CLAIMS = 32


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

    @property
    def names(self) -> Sequence[str]:
        if self.node_names is not None:
            return self.node_names
        return [node_name(node) for node in self.nodes or ()]


def parse_extender_args(body: bytes, templates: TemplateLookup | None = None) -> SchedulingRequest:
    """An ExtenderArgs body, a DRA pod's claims through ``templates``; ExtenderRequestError naming what is wrong."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:  # invalid UTF-8 and NaN included
        if "depth limit" in str(exc) or "recursion" in str(exc):
            raise ExtenderRequestError("the body is nested too deeply (more than 1024 levels)") from None
        raise ExtenderRequestError(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ExtenderRequestError(f"the body must be a JSON object (ExtenderArgs), got {_kind(data)}")
    pod = _field(data, "Pod")
    if not isinstance(pod, dict):
        raise ExtenderRequestError(f"Pod must be an object, got {_kind(pod)}")
    demand = read_pod_demand(pod, templates)
    names = _field(data, "NodeNames")
    if names is not None:
        if not isinstance(names, list):
            raise ExtenderRequestError("NodeNames must be a list of strings")
        try:
            "".join(names)  # every entry a string, checked in C
        except TypeError:
            raise ExtenderRequestError("NodeNames must be a list of strings") from None
        return SchedulingRequest(demand, names)
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
    return SchedulingRequest(demand, None, items)


def read_pod_demand(pod: Mapping[str, Any], templates: TemplateLookup | None = None) -> PodDemand:
    """The pod's slot requests per container, each with the bitstream it wants; a DRA pod's: :func:`dra_demand`."""
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
    claims = spec.get("resourceClaims")
    if not isinstance(claims, list) or not claims:
        return PodDemand.of(name, containers)
    namespace = meta.get("namespace")
    namespace = namespace if isinstance(namespace, str) and namespace else "default"
    pod_name = f"{namespace}/{meta.get('name') or '?'}"
    return dra_demand(pod_name, namespace, claims, annotations.get(BITSTREAM_ANNOTATION) or None, templates)


def dra_demand(
    pod: str, namespace: str, claims: list[Any], bitstream: str | None, templates: TemplateLookup | None
) -> PodDemand:
    """A DRA pod's demand; no requests when nothing is known. With the annotation ``bitstream``: that bitstream
    in as many slots as its templates' FPGA requests add up to (1 when no template is known); otherwise each
    FPGA request's own bitstream, in allocation order. A claim named directly (or unreadable) adds nothing."""
    known = False  # some template is known
    requests: list[TemplateRequest] = []
    for claim in claims[:MAX_POD_CLAIMS]:
        name = claim.get("resourceClaimTemplateName") if isinstance(claim, dict) else None
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS or templates is None:
            continue
        template = templates(namespace, name)
        if template is not None and template.error is None:
            known = True
            requests.extend([r for r in template.requests if r.ours] or template.requests)
    if bitstream is not None:
        return PodDemand.of_claims(pod, [(bitstream, sum(r.count for r in requests) if known else 1)])
    return PodDemand.of_claims(
        pod, [DraRequest(r.bitstream, r.count, r.whole_card) for r in requests if r.bitstream is not None]
    )


def _container_slots(container: Mapping[str, Any], field_name: str, index: int) -> int:
    """The container's ``example.com/fpga-slot`` count (0: none)."""
    where = f"Pod.spec.{field_name}[{index}].resources"
    resources = _object(container.get("resources"), where)
    # An extended resource must have a limit; a request, if given, equals it.
    for kind in ("limits", "requests"):
        raw = _object(resources.get(kind), f"{where}.{kind}").get(SLOT_RESOURCE)
        if raw is not None:
            try:
                return parse_count(raw)
            except ValueError as exc:
                raise ExtenderRequestError(f"{where}.{kind}[{SLOT_RESOURCE}]: {exc}") from None
    return 0


def node_name(node: Mapping[str, Any]) -> str:
    """The name of a Node object from a request (checked by :func:`parse_extender_args`)."""
    return str(node["metadata"]["name"])


def filter_result(request: SchedulingRequest, outcome: FilterOutcome) -> ExtenderFilterResult:
    """The answer in the form asked: names for names, the passing Node objects (not copies) for objects."""
    answer = filter_error("")
    answer["FailedAndUnresolvableNodes"] = outcome.failed
    if request.node_names is not None:
        answer["NodeNames"] = outcome.passed
    else:
        passed = set(outcome.passed)
        items: list[Any] = [node for node in request.nodes or () if node_name(node) in passed]
        answer["Nodes"] = {"metadata": {}, "items": items}
    return answer


def filter_error(message: str) -> ExtenderFilterResult:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def encode(value: object) -> bytes:
    """Compact JSON, as one bytes object (written in one piece). ASCII: a lone surrogate cannot break it."""
    return json.dumps(value, separators=(",", ":")).encode()


def encode_priorities(scores: Sequence[tuple[str, int]]) -> bytes:
    """The HostPriorityList as JSON, UTF-8; a name that is not valid Unicode (a lone surrogate) is escaped."""
    entries: HostPriorityList = [{"Host": host, "Score": score} for host, score in scores]
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

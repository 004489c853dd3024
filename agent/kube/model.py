"""What the agent keeps of a pod: a small frozen value parsed once from the API's JSON.

Parsing is tolerant: unset fields are absent in JSON, so every field has a neutral default.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from agent.kube.nodefields import as_mapping
from agent.slots.bitstreamrequest import SLOT_RESOURCE as SLOT_RESOURCE  # the extended resource the agent advertises
from agent.slots.bitstreamrequest import slots_asked

PodEventKind = Literal["ADDED", "MODIFIED", "DELETED"]
PodKey = tuple[str, str]


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
    #: For a pod given slots through DRA's extended-resource bridge: the request of the claim the scheduler
    #: made -> the container it serves (``status.extendedResourceClaimStatus.requestMappings``).
    request_containers: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    def as_deleted(self) -> PodInfo:
        return dataclasses.replace(self, deleted=True)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


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


def _containers(value: object) -> tuple[ContainerSlots, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(ContainerSlots(str(c.get("name", "")), slots_asked(c)) for c in value if isinstance(c, Mapping))


def parse_pod(obj: Mapping[str, Any], *, deleted: bool = False) -> PodInfo:
    """The PodInfo of a Pod as the API sends it (JSON, camelCase); ValueError when it has no name."""
    meta = as_mapping(obj.get("metadata"))
    spec = as_mapping(obj.get("spec"))
    status = as_mapping(obj.get("status"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("object has no metadata.name")
    annotations = {
        str(key): value for key, value in as_mapping(meta.get("annotations")).items() if isinstance(value, str)
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
        request_containers=types.MappingProxyType(_request_containers(status)),
    )


def _request_containers(status: Mapping[str, Any]) -> dict[str, str]:
    found = {}
    for mapping in as_mapping(status.get("extendedResourceClaimStatus")).get("requestMappings") or []:
        mapping = as_mapping(mapping)
        request, container = mapping.get("requestName"), mapping.get("containerName")
        if mapping.get("resourceName") == SLOT_RESOURCE and isinstance(request, str) and isinstance(container, str):
            found[request] = container
    return found

"""The fake API server's objects: kinds, paths, Status errors, and the nodes tests and demos make (see
:mod:`agent.demo.kubeapi`)."""

from __future__ import annotations

import copy
import datetime
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

SLOT_RESOURCE = "example.com/fpga-slot"

JSON = dict[str, Any]
_Key = tuple[str, str]

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
#: The namespaces the fake server starts with (fpga-slot: where the agents' FpgaNodeStates go).
DEFAULT_NAMESPACES = ("default", "kube-system", "fpga-slot")


@dataclass(frozen=True, slots=True)
class Kind:
    """A resource the stand-in serves: its kind, scope, path prefix, and the fields a fieldSelector may name
    besides ``metadata.name`` (and ``metadata.namespace`` when namespaced)."""

    kind: str
    namespaced: bool
    api: str
    fields: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return self.api.removeprefix("/api/").removeprefix("/apis/")

    def selectable(self, field: str) -> bool:
        return field in self.fields or field == "metadata.name" or (self.namespaced and field == "metadata.namespace")


#: The DRA group (``/apis/resource.k8s.io/v1``): its kinds and their apiVersion.
RESOURCE_API = "resource.k8s.io/v1"
#: What the agent reads and writes (the tests add the cluster objects of ``fpga-agent uninstall`` and the like).
RESOURCES = {
    "pods": Kind("Pod", True, "/api/v1", ("spec.nodeName", "status.phase", "spec.schedulerName")),
    "nodes": Kind("Node", False, "/api/v1", ("spec.unschedulable",)),
    "events": Kind(
        "Event",
        True,
        "/api/v1",
        (
            "involvedObject.kind",
            "involvedObject.name",
            "involvedObject.namespace",
            "involvedObject.uid",
            "reason",
            "type",
            "source",
            "reportingComponent",
        ),
    ),
    "fpgabitstreams": Kind("FpgaBitstream", False, "/apis/example.com/v1alpha1"),
    "fpganodestates": Kind("FpgaNodeState", True, "/apis/example.com/v1alpha1"),
    "resourceslices": Kind("ResourceSlice", False, f"/apis/{RESOURCE_API}", ("spec.nodeName", "spec.driver")),
    "resourceclaims": Kind("ResourceClaim", True, f"/apis/{RESOURCE_API}"),
}
#: A collection or an object of a resource, in a namespace or not.
PATH = re.compile(
    r"^(?P<api>/api/v1|/apis/[^/]+/[^/]+)/(?:namespaces/(?P<ns>[^/]+)/)?(?P<res>[a-z]+)(?:/(?P<name>[^/]+))?$"
)


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_object(code: int, message: str, reason: str | None = None, details: JSON | None = None) -> JSON:
    """A ``Status`` as the API server sends it with an error (and inside watch ERROR events)."""
    body: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or _REASONS.get(code, "InternalError"),
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """Answer the request with this Status."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: JSON | None = None) -> None:
        super().__init__(message)
        self.status = status_object(code, message, reason, details)
        self.code = code


def make_node(
    name: str, *, labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None
) -> JSON:
    """A Node shaped as the API server returns it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid4()),
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", **(annotations or {})},
        },
        "spec": {"podCIDR": "10.244.0.0/24"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", SLOT_RESOURCE: "8"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", SLOT_RESOURCE: "8"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}, {"type": "Hostname", "address": name}],
        },
    }


def _parse_rv(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, f"invalid resource version: {text!r}") from None


#: One term of a selector: key, operator, value.
SELECTOR_TERM = re.compile(r"([^=!]+)(==|=|!=)(.*)")


def _lookup(obj: JSON, dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _field_test(name: str, op: str, value: str) -> Callable[[JSON], bool]:
    return lambda o: (_lookup(o, name) == value) != (op == "!=")


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result

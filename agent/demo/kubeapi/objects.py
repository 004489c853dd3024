"""The fake API server's objects: kinds, paths, Status errors, and the pods, nodes and
ResourceClaims tests and demos make (see :mod:`agent.demo.kubeapi`)."""

from __future__ import annotations

import datetime
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SLOT_RESOURCE = "example.com/fpga-slot"
DEFAULT_NODE = "node-a"

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
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


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


def make_pod(
    name: str,
    *,
    namespace: str = "default",
    node: str | None = DEFAULT_NODE,
    slots: Mapping[str, int] | Iterable[tuple[str, int]] = (("main", 1),),
    init_slots: Mapping[str, int] | Iterable[tuple[str, int]] = (),
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    phase: str = "Pending",
    uid: str | None = None,
) -> JSON:
    """A Pod shaped as the API server returns it (the fields a real pod has, not only ours)."""

    def container(cname: str, count: int) -> JSON:
        limits: JSON = {"cpu": "500m", "memory": "256Mi"}
        requests: JSON = {"cpu": "250m", "memory": "128Mi"}
        if count:
            limits[SLOT_RESOURCE] = str(count)
            requests[SLOT_RESOURCE] = str(count)
        return {
            "name": cname,
            "image": "registry.example/fpga-app:1.0",
            "resources": {"limits": limits, "requests": requests},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
        }

    pairs = list(slots.items()) if isinstance(slots, Mapping) else list(slots)
    init_pairs = list(init_slots.items()) if isinstance(init_slots, Mapping) else list(init_slots)
    spec: JSON = {
        "containers": [container(c, n) for c, n in pairs],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if init_pairs:
        spec["initContainers"] = [container(c, n) for c, n in init_pairs]
    if node:
        spec["nodeName"] = node
    meta: JSON = {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    status: JSON = {"phase": phase, "qosClass": "Burstable"}
    if node:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


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


def make_resource_claim(
    name: str,
    *,
    namespace: str = "default",
    driver: str,
    devices: Iterable[tuple[str, str, str]] = (),
    parameters: Mapping[str, Any] | None = None,
    configs: Iterable[tuple[Sequence[str], Mapping[str, Any]]] = (),
    first_available: Mapping[str, Sequence[str]] | None = None,
    device_class: str = "fpga-slot",
    reserved_for: Iterable[tuple[str, str]] = (),
) -> JSON:
    """A ResourceClaim as the scheduler leaves it allocated (no ``devices`` and no pods: not allocated).

    ``devices``: (request, pool, device) each, a ``first_available`` request naming its subrequest
    (``fpga/any``); ``parameters`` configure every request, ``configs`` (requests, parameters) the named ones."""
    choices = {request: list(subrequests) for request, subrequests in (first_available or {}).items()}
    devices = list(devices)
    parents: dict[str, None] = {}
    for request, _, _ in devices:
        parent, _, subrequest = request.partition("/")
        if (subrequest or parent in choices) and subrequest not in choices.get(parent, ()):
            raise ValueError(f"result for {request!r}: request {parent!r} has subrequests {choices.get(parent)}")
        parents[parent] = None
    requests = [
        {"name": r, "firstAvailable": [{"name": sub, "deviceClassName": device_class} for sub in subs]}
        for r, subs in choices.items()
    ] + [{"name": r, "exactly": {"deviceClassName": device_class}} for r in parents if r not in choices]
    opaque: list[tuple[tuple[str, ...], Mapping[str, Any]]] = [((), parameters)] if parameters is not None else []
    opaque += [(tuple(r), p) for r, p in configs]
    config = [
        {**({"requests": list(r)} if r else {}), "opaque": {"driver": driver, "parameters": dict(p)}} for r, p in opaque
    ]
    claim: JSON = {
        "metadata": {"name": name, "namespace": namespace},
        "kind": "ResourceClaim",
        "spec": {"devices": {"requests": requests, "config": config}},
    }
    results = [{"request": r, "driver": driver, "pool": p, "device": d} for r, p, d in devices]
    if results:
        claim["status"] = {
            "allocation": {"devices": {"results": results, "config": [{"source": "FromClaim", **c} for c in config]}},
            "reservedFor": [{"resource": "pods", "name": n, "uid": u} for n, u in reserved_for],
        }
    return claim

"""The fake API server's objects: kinds, paths, Status errors, and the pods, nodes and
ResourceClaims tests and demos make (see :mod:`agent.demo.kubeapi`)."""

from __future__ import annotations

import datetime
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
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
#: resource -> (kind, namespaced, path prefix: core/v1, the CRDs' group and version, DRA's, ...)
_RESOURCE_TABLE = {
    "pods": ("Pod", True, "/api/v1"),
    "nodes": ("Node", False, "/api/v1"),
    "events": ("Event", True, "/api/v1"),
    "fpgabitstreams": ("FpgaBitstream", False, "/apis/example.com/v1alpha1"),
    "fpganodestates": ("FpgaNodeState", True, "/apis/example.com/v1alpha1"),
    "secrets": ("Secret", True, "/api/v1"),
    "daemonsets": ("DaemonSet", True, "/apis/apps/v1"),
    "resourceslices": ("ResourceSlice", False, "/apis/resource.k8s.io/v1"),
    "resourceclaims": ("ResourceClaim", True, "/apis/resource.k8s.io/v1"),
    "resourceclaimtemplates": ("ResourceClaimTemplate", True, "/apis/resource.k8s.io/v1"),
    "validatingwebhookconfigurations": (
        "ValidatingWebhookConfiguration",
        False,
        "/apis/admissionregistration.k8s.io/v1",
    ),
    "serviceaccounts": ("ServiceAccount", True, "/api/v1"),
    "namespaces": ("Namespace", False, "/api/v1"),
    "clusterroles": ("ClusterRole", False, "/apis/rbac.authorization.k8s.io/v1"),
    "clusterrolebindings": ("ClusterRoleBinding", False, "/apis/rbac.authorization.k8s.io/v1"),
}
_KINDS = {resource: kind for resource, (kind, _, _) in _RESOURCE_TABLE.items()}
_NAMESPACED = {resource: namespaced for resource, (_, namespaced, _) in _RESOURCE_TABLE.items()}
_API = {resource: api for resource, (_, _, api) in _RESOURCE_TABLE.items()}
#: The DRA group (``/apis/resource.k8s.io/v1``): its kinds and their apiVersion.
RESOURCE_API = "resource.k8s.io/v1"
_RESOURCE_PATH = re.compile(
    r"^/apis/resource\.k8s\.io/v1/(?:namespaces/(?P<ns>[^/]+)/)?(?P<res>resourceslices|resourceclaims)"
    r"(?:/(?P<name>[^/]+))?$"
)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_FIELDS = {
    "pods": {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "spec.schedulerName"},
    "nodes": {"metadata.name", "spec.unschedulable"},
    "fpgabitstreams": {"metadata.name"},
    "fpganodestates": {"metadata.name", "metadata.namespace"},
    "secrets": {"metadata.name", "metadata.namespace", "type"},
    "daemonsets": {"metadata.name", "metadata.namespace"},
    "resourceslices": {"metadata.name", "spec.nodeName", "spec.driver"},
    "resourceclaims": {"metadata.name", "metadata.namespace"},
    "resourceclaimtemplates": {"metadata.name", "metadata.namespace"},
    "serviceaccounts": {"metadata.name", "metadata.namespace"},
    "namespaces": {"metadata.name", "status.phase"},
    "clusterroles": {"metadata.name"},
    "clusterrolebindings": {"metadata.name"},
    "events": {
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.name",
        "involvedObject.namespace",
        "involvedObject.uid",
        "reason",
        "type",
        "source",
        "reportingComponent",
    },
}
#: Lists merged by key in a strategic merge patch (the real server knows this from the schema).
_MERGE_KEYS = {
    "conditions": "type",
    "addresses": "type",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
}
#: How often an idle watch checks whether its client is still there.
_DISCONNECT_CHECK_S = 0.05
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PREFIX = (
    r"(?P<api>/api/v1|/apis/example\.com/v1alpha1|/apis/apps/v1|/apis/resource\.k8s\.io/v1"
    r"|/apis/admissionregistration\.k8s\.io/v1|/apis/rbac\.authorization\.k8s\.io/v1)"
)
_RESOURCES = (
    r"(?P<res>pods|nodes|events|fpgabitstreams|fpganodestates|secrets|daemonsets|resourceclaimtemplates|serviceaccounts|namespaces"
    r"|clusterrolebindings|clusterroles|validatingwebhookconfigurations)"
)
_COLLECTION = re.compile(rf"^{_PREFIX}/(?:namespaces/(?P<ns>[^/]+)/)?{_RESOURCES}$")
_ITEM = re.compile(rf"^{_PREFIX}/(?:namespaces/(?P<ns>[^/]+)/)?{_RESOURCES}/(?P<name>[^/]+)$")


def _api_version(resource: str) -> str:
    return _API[resource].removeprefix("/api/").removeprefix("/apis/")


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

"""The API server stand-in (:mod:`agent.demo.kubeapi`) with what only the tests use: pods as the server returns
them (:func:`make_pod`), ResourceClaims as the scheduler leaves them (:func:`make_resource_claim`), label
selectors, every patch type and finalizers (:mod:`tests.fakeapi_requests`), every request recorded, faults
injected, watches expired, ended, dropped or sent a bookmark, history compacted, objects put, changed and deleted
directly (each a new resourceVersion watchers see), the cluster objects of :mod:`tests.fakeapi_cluster`,
``wait_for``/``until`` a condition instead of sleeping; and AdmissionReviews as kube-apiserver sends them to a
validating webhook (the stand-in calls no webhook itself)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.demo.kubeapi.objects import (
    DEFAULT_NAMESPACES,
    JSON,
    RESOURCE_API,
    SLOT_RESOURCE,
    ApiError,
    make_node,
    now_rfc3339,
    status_object,
)
from agent.demo.kubeapi.store import RecordedRequest
from tests.fakeapi_cluster import ClusterObjects

__all__ = [
    "DEFAULT_NODE",
    "JSON",
    "RESOURCE_API",
    "SLOT_RESOURCE",
    "ApiError",
    "FakeKubeApiServer",
    "RecordedRequest",
    "claim_template_review",
    "make_node",
    "make_pod",
    "make_resource_claim",
    "now_rfc3339",
    "running_apiserver",
    "status_object",
]


DEFAULT_NODE = "node-a"


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


@dataclass
class _Fault:
    method: str
    path: str
    watch: bool | None
    times: int
    status: JSON


class FakeKubeApiServer(ClusterObjects):
    """The stand-in with the tests' controls; :func:`running_apiserver` starts and stops it."""

    def __init__(self, *, token: str = "test-token", namespaces: Iterable[str] = DEFAULT_NAMESPACES) -> None:
        super().__init__(token=token, namespaces=namespaces)
        self._faults: list[_Fault] = []
        self._requests: list[RecordedRequest] = []

    def __enter__(self) -> FakeKubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _received(self, request: RecordedRequest) -> None:
        with self._cond:
            self._requests.append(request)
            self._cond.notify_all()

    def _admit(self, request: RecordedRequest) -> None:
        self._inject_fault(request)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Block until ``predicate()`` (evaluated under the server's lock) holds; TimeoutError if not."""
        with self._cond:
            if not self._cond.wait_for(predicate, timeout_s):
                raise TimeoutError(f"fake API server: condition not met within {timeout_s}s")

    async def until(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """``wait_for`` from async code, without blocking the event loop."""
        await asyncio.to_thread(self.wait_for, predicate, timeout_s)

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def requests(self, method: str | None = None, path: str | None = None) -> list[RecordedRequest]:
        with self._cond:
            return [
                r for r in self._requests if (method is None or r.method == method) and (path is None or r.path == path)
            ]

    def watch_requests(self, resource: str = "pods") -> list[RecordedRequest]:
        return [r for r in self.requests("GET") if r.is_watch and r.path.endswith("/" + resource)]

    def list_requests(self, resource: str = "pods") -> list[RecordedRequest]:
        return [r for r in self.requests("GET") if not r.is_watch and r.path.endswith("/" + resource)]

    def active_watches(self, resource: str = "pods") -> int:
        with self._cond:
            return sum(1 for w in self._watches if w.resource == resource and w.action is None)

    def add_pod(self, name: str, **kwargs: Any) -> JSON:
        """Create a pod (see :func:`make_pod` for the keywords); returns it as stored."""
        return self.put_pod(make_pod(name, **kwargs))

    def put_pod(self, pod: JSON) -> JSON:
        """Create or replace a pod given as JSON."""
        pod = copy.deepcopy(pod)
        meta = pod.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        with self._cond:
            self.namespaces.add(meta["namespace"])
            return self._store("pods", (meta["namespace"], meta["name"]), pod)

    def pod(self, namespace: str, name: str) -> JSON | None:
        with self._cond:
            pod = self._objects["pods"].get((namespace, name))
            return copy.deepcopy(pod) if pod else None

    def node(self, name: str) -> JSON | None:
        with self._cond:
            node = self._objects["nodes"].get(("", name))
            return copy.deepcopy(node) if node else None

    def node_state(self, namespace: str, name: str) -> JSON | None:
        """The FpgaNodeState ``namespace/name`` as stored, None when there is none."""
        with self._cond:
            state = self._objects["fpganodestates"].get((namespace, name))
            return copy.deepcopy(state) if state else None

    def put_node_state(self, state: JSON) -> JSON:
        """Create or replace an FpgaNodeState as someone else would (a newer resourceVersion)."""
        state = copy.deepcopy(state)
        meta = state["metadata"]
        with self._cond:
            self.namespaces.add(meta["namespace"])
            return self._store("fpganodestates", (meta["namespace"], meta["name"]), state)

    def delete_node_state(self, namespace: str, name: str) -> JSON:
        with self._cond:
            self._get("fpganodestates", (namespace, name))
            return self._remove("fpganodestates", (namespace, name))

    def modify_pod(
        self,
        namespace: str,
        name: str,
        *,
        phase: str | None = None,
        node: str | None = None,
        annotations: Mapping[str, str | None] | None = None,
        mutate: Callable[[JSON], None] | None = None,
    ) -> JSON:
        """Change a pod: phase, node (binding), annotations (None removes one), or anything via ``mutate``."""
        with self._cond:
            pod = copy.deepcopy(self._get("pods", (namespace, name)))
            if phase is not None:
                pod.setdefault("status", {})["phase"] = phase
            if node is not None:
                pod.setdefault("spec", {})["nodeName"] = node
            if annotations is not None:
                current = pod["metadata"].setdefault("annotations", {})
                for key, value in annotations.items():
                    if value is None:
                        current.pop(key, None)
                    else:
                        current[key] = value
            if mutate is not None:
                mutate(pod)
            return self._store("pods", (namespace, name), pod)

    def touch_pod(self, namespace: str, name: str) -> JSON:
        """A status-only update (as the kubelet makes all the time): new resourceVersion, same fields we keep."""

        def bump(pod: JSON) -> None:
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            conditions.append({"type": "Probe", "status": "True", "lastProbeTime": now_rfc3339()})

        return self.modify_pod(namespace, name, mutate=bump)

    def delete_pod(self, namespace: str, name: str) -> JSON:
        with self._cond:
            self._get("pods", (namespace, name))
            return self._remove("pods", (namespace, name))

    def delete_node(self, name: str) -> JSON:
        with self._cond:
            self._get("nodes", ("", name))
            return self._remove("nodes", ("", name))

    def put_fpga_bitstream(self, obj: JSON) -> JSON:
        """Create or replace an FpgaBitstream (cluster-scoped custom resource), as ``kubectl apply`` would."""
        with self._cond:
            return self._store("fpgabitstreams", ("", obj["metadata"]["name"]), copy.deepcopy(obj))

    def delete_fpga_bitstream(self, name: str) -> JSON:
        with self._cond:
            self._get("fpgabitstreams", ("", name))
            return self._remove("fpgabitstreams", ("", name))

    def compact(self) -> int:
        """Compact history up to now, as etcd does: a new watch or exact list from an older version gets 410.

        Open watches go on (the real server's watch cache keeps feeding them).
        """
        with self._cond:
            self._compacted_rv = self._rv
            return self._rv

    def expire_watches(self, resource: str = "pods") -> int:
        """Send an ERROR event with a 410 Expired Status to every open watch, then end them."""
        return self._act(resource, lambda watch: watch.expire())

    def end_watches(self, resource: str = "pods") -> int:
        """End every open watch cleanly (as ``timeoutSeconds`` does)."""
        return self._act(resource, lambda watch: setattr(watch, "action", "end"))

    def drop_watches(self, resource: str = "pods") -> int:
        """Cut every open watch's connection mid-stream (no end of the chunked body)."""
        return self._act(resource, lambda watch: setattr(watch, "action", "drop"))

    def bookmark(self) -> int:
        """Send a BOOKMARK at the current resourceVersion to watches that allow bookmarks."""
        with self._cond:
            for watch in self._watches:
                if watch.query.get("allowWatchBookmarks") in ("true", "1"):
                    kind = self.resources[watch.resource]
                    meta = {"resourceVersion": str(self._rv)}
                    bookmark = {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": meta}
                    watch.queued.append({"type": "BOOKMARK", "object": bookmark})
            self._cond.notify_all()
            return self._rv

    def fail_next(
        self,
        method: str,
        path: str,
        code: int,
        *,
        times: int = 1,
        watch: bool | None = None,
        message: str = "injected failure",
        reason: str | None = None,
    ) -> None:
        """Answer the next ``times`` requests to ``method path`` (list or watch if given) with this error."""
        with self._cond:
            self._faults.append(_Fault(method, path, watch, times, status_object(code, message, reason)))

    def clear_faults(self) -> None:
        with self._cond:
            self._faults.clear()

    def put_resource_claim_template(self, template: JSON) -> JSON:
        """Create or replace a ResourceClaimTemplate given as JSON (as ``kubectl apply`` would); listed and
        watched like the other kinds (``/apis/resource.k8s.io/v1/[namespaces/{ns}/]resourceclaimtemplates``)."""
        template = copy.deepcopy(template)
        meta = template.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        template["apiVersion"] = RESOURCE_API
        with self._cond:
            self.namespaces.add(meta["namespace"])
            return self._store("resourceclaimtemplates", (meta["namespace"], meta["name"]), template)

    def delete_resource_claim_template(self, namespace: str, name: str) -> JSON:
        with self._cond:
            self._get("resourceclaimtemplates", (namespace, name))
            return self._remove("resourceclaimtemplates", (namespace, name))

    def delete_resource_claim(self, namespace: str, name: str) -> JSON:
        with self._cond:
            self._get("resourceclaims", (namespace, name))
            return self._remove("resourceclaims", (namespace, name))

    def delete_resource_slice(self, name: str) -> JSON:
        """Delete a slice (as the kubelet does at its start and 30 s after a driver left)."""
        with self._cond:
            self._get("resourceslices", ("", name))
            return self._remove("resourceslices", ("", name))

    def _act(self, resource: str, action: Callable[[Any], None]) -> int:
        """``action`` on every open watch of ``resource``; how many there were."""
        with self._cond:
            watches = [w for w in self._watches if w.resource == resource and w.action is None]
            for watch in watches:
                action(watch)
            self._cond.notify_all()
            return len(watches)

    def _inject_fault(self, request: RecordedRequest) -> None:
        with self._cond:
            for fault in self._faults:
                if (
                    fault.method == request.method
                    and fault.path == request.path
                    and fault.times > 0
                    and (fault.watch is None or fault.watch == request.is_watch)
                ):
                    fault.times -= 1
                    if fault.times == 0:
                        self._faults.remove(fault)
                    raise ApiError(fault.status["code"], fault.status["message"], fault.status["reason"])


@contextlib.contextmanager
def running_apiserver(**kwargs: Any) -> Iterator[FakeKubeApiServer]:
    """A started fake API server, stopped (threads joined) afterwards."""
    server = FakeKubeApiServer(**kwargs).start()
    try:
        yield server
    finally:
        server.stop()


DEFAULT_REVIEW_UID = "b8e5a3c6-0b1d-4d43-9a5e-1d2f7a8c9e01"


def claim_template_review(bitstream: str, uid: str = DEFAULT_REVIEW_UID) -> JSON:
    """The review of ``kubectl apply`` of a ResourceClaimTemplate ``fpga`` (namespace ``default``) whose one
    request is configured for the driver with ``bitstream``."""
    config = [{"requests": ["fpga"], "opaque": {"driver": "fpga.example.com", "parameters": {"bitstream": bitstream}}}]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "fpga", "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "fpga", "exactly": {"deviceClassName": "fpga-slot", "count": 1}}],
                    "config": config,
                }
            }
        },
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaimTemplate"},
            "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaimtemplates"},
            "requestKind": {"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaimTemplate"},
            "name": "fpga",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": template,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "fieldManager": "kubectl"},
        },
    }

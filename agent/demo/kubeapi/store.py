"""The fake API server's store: objects with resourceVersions and history, and the calls that
change or read them directly, as a test or demo does (see :mod:`agent.demo.kubeapi`)."""

from __future__ import annotations

import asyncio
import base64
import copy
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.demo.kubeapi.objects import (
    _KINDS,
    DEFAULT_NAMESPACES,
    JSON,
    RESOURCE_API,
    ApiError,
    _api_version,
    _Key,
    make_node,
    make_pod,
    now_rfc3339,
    status_object,
)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")


@dataclass
class _Change:
    rv: int
    resource: str
    key: _Key
    old: JSON | None
    new: JSON | None


@dataclass
class _Fault:
    method: str
    path: str
    watch: bool | None
    times: int
    status: JSON


@dataclass
class _Watch:
    resource: str
    query: dict[str, str]
    action: str | None = None
    bookmarks_seen: int = 0


class ObjectStore:
    """The objects, their history and the open watches, under one lock."""

    def __init__(self, *, token: str = "test-token", namespaces: Iterable[str] = DEFAULT_NAMESPACES) -> None:  # noqa: S107
        self.token = token
        self.namespaces: set[str] = set(namespaces)
        self._cond = threading.Condition(threading.RLock())
        self._rv = 1000
        self._objects: dict[str, dict[_Key, JSON]] = {resource: {} for resource in _KINDS}
        self._history: list[_Change] = []
        self._compacted_rv = 0
        self._watches: list[_Watch] = []
        self._bookmarks = 0
        self._faults: list[_Fault] = []
        self._connections: set[socket.socket] = set()
        self._requests: list[RecordedRequest] = []

    # --- waiting ------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Block until ``predicate()`` (evaluated under the server's lock) holds; TimeoutError if not."""
        with self._cond:
            if not self._cond.wait_for(predicate, timeout_s):
                raise TimeoutError(f"fake API server: condition not met within {timeout_s}s")

    async def until(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """``wait_for`` from async code, without blocking the event loop."""
        await asyncio.to_thread(self.wait_for, predicate, timeout_s)

    # --- state for tests ----------------------------------------------------------------

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

    def events(self, namespace: str | None = None) -> list[JSON]:
        """Events posted so far, oldest first."""
        with self._cond:
            found = [e for (ns, _), e in self._objects["events"].items() if namespace in (None, ns)]
            return copy.deepcopy(sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"])))

    # --- changes for tests (each one is a new resourceVersion that watchers see) --------

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

    def add_node(self, name: str, **kwargs: Any) -> JSON:
        with self._cond:
            return self._store("nodes", ("", name), make_node(name, **kwargs))

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

    def put_validating_webhook_configuration(self, obj: JSON) -> JSON:
        """Create or replace a ValidatingWebhookConfiguration (cluster-scoped), as ``kubectl apply`` would."""
        obj = copy.deepcopy(obj)
        key = ("", obj["metadata"]["name"])
        with self._cond:
            current = self._objects["validatingwebhookconfigurations"].get(key)
            obj["metadata"]["uid"] = current["metadata"]["uid"] if current else str(uuid.uuid4())
            return self._store("validatingwebhookconfigurations", key, obj)

    def get_validating_webhook_configuration(self, name: str) -> JSON:
        with self._cond:
            return copy.deepcopy(self._get("validatingwebhookconfigurations", ("", name)))

    def put_secret(self, namespace: str, name: str, data: Mapping[str, bytes], secret_type: str = "Opaque") -> JSON:  # noqa: S107
        """Create or replace a Secret; ``data`` is stored base64-encoded, as the API server serves it."""
        encoded = {key: base64.b64encode(value).decode("ascii") for key, value in data.items()}
        obj: JSON = {"metadata": {"name": name, "namespace": namespace}, "type": secret_type, "data": encoded}
        with self._cond:
            return self._store("secrets", (namespace, name), obj)

    def put_daemonset(self, namespace: str, name: str, *, deleting: bool = False) -> JSON:
        """Create or replace a DaemonSet (metadata only; ``deleting``: with a deletionTimestamp)."""
        meta: JSON = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())}
        if deleting:
            meta["deletionTimestamp"] = now_rfc3339()
        with self._cond:
            self.namespaces.add(namespace)
            return self._store("daemonsets", (namespace, name), {"metadata": meta})

    def put_service_account(
        self, namespace: str, name: str, *, finalizers: Sequence[str] = (), deleting: bool = False
    ) -> JSON:
        """Create or replace a ServiceAccount (``deleting``: with a deletionTimestamp, kept by its finalizers)."""
        meta: JSON = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "finalizers": list(finalizers)}
        if deleting:
            meta["deletionTimestamp"] = now_rfc3339()
        with self._cond:
            self.namespaces.add(namespace)
            return self._store("serviceaccounts", (namespace, name), {"metadata": meta})

    def service_account(self, namespace: str, name: str) -> JSON | None:
        with self._cond:
            found = self._objects["serviceaccounts"].get((namespace, name))
            return copy.deepcopy(found) if found else None

    def cluster_object(self, resource: str, name: str) -> JSON | None:
        """A stored ClusterRole or ClusterRoleBinding (``resource``: ``clusterroles``, ``clusterrolebindings``)."""
        with self._cond:
            found = self._objects[resource].get(("", name))
            return copy.deepcopy(found) if found else None

    def delete_daemonset(self, namespace: str, name: str) -> None:
        with self._cond:
            self._remove("daemonsets", (namespace, name))

    def compact(self) -> int:
        """Compact history up to now, as etcd does: a new watch or exact list from an older version gets 410.

        Open watches go on (the real server's watch cache keeps feeding them).
        """
        with self._cond:
            self._compacted_rv = self._rv
            return self._rv

    def expire_watches(self, resource: str = "pods") -> int:
        """Send an ERROR event with a 410 Expired Status to every open watch, then end them."""
        return self._act(resource, "expire")

    def end_watches(self, resource: str = "pods") -> int:
        """End every open watch cleanly (as ``timeoutSeconds`` does)."""
        return self._act(resource, "end")

    def drop_watches(self, resource: str = "pods") -> int:
        """Cut every open watch's connection mid-stream (no end of the chunked body)."""
        return self._act(resource, "drop")

    def bookmark(self) -> int:
        """Send a BOOKMARK at the current resourceVersion to watches that allow bookmarks."""
        with self._cond:
            self._bookmarks += 1
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

    # --- DRA objects (resource.k8s.io/v1) -------------------------------------------------

    def put_resource_claim(self, claim: JSON) -> JSON:
        """Create or replace a ResourceClaim given as JSON (see :func:`make_resource_claim`).

        As the real server's create and update: a new claim gets a UID, a replaced one keeps its UID
        and creation time (a body naming another UID is a 409), and either gets a new resourceVersion.
        A claim deleted and made again (:meth:`delete_resource_claim` first) has a new UID."""
        claim = copy.deepcopy(claim)
        meta = claim.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        claim["apiVersion"] = RESOURCE_API
        key = (meta["namespace"], meta["name"])
        with self._cond:
            current = self._objects["resourceclaims"].get(key)
            if current is None:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta["creationTimestamp"] = now_rfc3339()
            else:
                uid = current["metadata"]["uid"]
                if meta.setdefault("uid", uid) != uid:
                    raise ApiError(
                        409, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta['uid']}"
                    )
                meta["creationTimestamp"] = current["metadata"]["creationTimestamp"]
            self.namespaces.add(meta["namespace"])
            return self._store("resourceclaims", key, claim)

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

    def resource_slice(self, name: str) -> JSON | None:
        with self._cond:
            found = self._objects["resourceslices"].get(("", name))
            return copy.deepcopy(found) if found else None

    def delete_resource_slice(self, name: str) -> JSON:
        """Delete a slice (as the kubelet does at its start and 30 s after a driver left)."""
        with self._cond:
            self._get("resourceslices", ("", name))
            return self._remove("resourceslices", ("", name))

    # --- store --------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _get(self, resource: str, key: _Key) -> JSON:
        obj = self._objects[resource].get(key)
        if obj is None:
            raise ApiError(404, f'{resource} "{key[1]}" not found', details={"name": key[1], "kind": resource})
        return obj

    def _store(self, resource: str, key: _Key, obj: JSON) -> JSON:
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        obj.setdefault("kind", _KINDS[resource])
        obj.setdefault("apiVersion", _api_version(resource))
        old = self._objects[resource].get(key)
        self._objects[resource][key] = obj
        self._history.append(_Change(rv, resource, key, copy.deepcopy(old), copy.deepcopy(obj)))
        self._cond.notify_all()
        return copy.deepcopy(obj)

    def _remove(self, resource: str, key: _Key) -> JSON:
        rv = self._next_rv()
        old = self._objects[resource].pop(key)
        self._history.append(_Change(rv, resource, key, copy.deepcopy(old), None))
        self._cond.notify_all()
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(rv)
        return gone

    def _state_at(self, resource: str, rv: int) -> dict[_Key, JSON]:
        """The objects as they were at ``rv`` (undoing later history)."""
        state = dict(self._objects[resource])
        for change in reversed(self._history):
            if change.rv <= rv:
                break
            if change.resource != resource:
                continue
            if change.old is None:
                state.pop(change.key, None)
            else:
                state[change.key] = change.old
        return state

    def _act(self, resource: str, action: str) -> int:
        with self._cond:
            count = 0
            for watch in self._watches:
                if watch.resource == resource and watch.action is None:
                    watch.action = action
                    count += 1
            self._cond.notify_all()
            return count

    def secret(self, namespace: str, name: str) -> JSON | None:
        """A stored Secret as the server serves it (data base64-encoded), None when there is none."""
        with self._cond:
            found = self._objects["secrets"].get((namespace, name))
            return copy.deepcopy(found) if found else None

"""A small fake kube-apiserver at the HTTP level, for the real ``kubernetes`` client to talk to.

No API server can be installed here, and mocking the client's methods would test
nothing of what breaks in practice (serialisation, query parameters, chunked
watch streams, resourceVersion handling, error bodies). So this serves the few
endpoints the agent uses, over real HTTP on 127.0.0.1, with the behaviour of
the real server where the agent depends on it:

* ``GET /api/v1/pods``, ``/api/v1/namespaces/{ns}/pods``, ``/api/v1/nodes``,
  ``/api/v1/namespaces/{ns}/events``: lists with ``metadata.resourceVersion``
  (items without kind/apiVersion, as the server sends them), ``fieldSelector``
  (``=``, ``==``, ``!=``; unsupported fields are a 400 as on the real server) and
  equality/existence ``labelSelector``; ``resourceVersion`` with
  ``resourceVersionMatch`` ``NotOlderThan`` (504 when newer than the store) or
  ``Exact`` (the state at that version from history; 410 once compacted);
* the same paths with ``watch=true``: a chunked stream of JSON lines
  ``{"type": ..., "object": ...}``; without resourceVersion (or ``0``) it starts
  with synthetic ADDED events for what exists; from a resourceVersion it replays
  history after it, or sends an ERROR event with a ``410 Expired`` Status if
  that version was compacted; objects entering or leaving a selector show as
  ADDED/DELETED (a pod bound to the node appears as ADDED); ``timeoutSeconds``
  ends the stream cleanly; BOOKMARK events on request;
* ``GET /api/v1/namespaces/{ns}/secrets/{name}``: Secrets the test put (data base64-encoded);
  ``POST /api/v1/namespaces/{ns}/secrets``: created (name, namespace, base64 data and, for
  ``kubernetes.io/tls``, its two keys checked), 409 AlreadyExists when one of that name exists;
* ``GET /apis/apps/v1/namespaces/{ns}/daemonsets/{name}``: DaemonSets the test put (metadata only);
* ``GET /apis/example.com/v1alpha1/fpgabitstreams`` (the FpgaBitstream custom resource,
  cluster-scoped): list and watch as above, objects put and deleted by the test;
* ``GET``/``PATCH`` of single pods and nodes: strategic merge patch, JSON merge
  patch, JSON patch; a ``metadata.resourceVersion`` in the patch is a
  precondition (409 Conflict);
* ``POST /api/v1/namespaces/{ns}/events``: validated (see :meth:`_validate_event`),
  stored, 201 with the stored object; 409 on a duplicate name, 404 for an unknown
  namespace;
* bearer-token authentication (401 without the kubeconfig's token);
* errors as ``Status`` objects with the real reasons and codes.

Test controls: pods and nodes are added, changed and deleted directly (each a
new resourceVersion that watchers see), watches can be expired (410), ended
cleanly or dropped (connection cut mid-stream), history compacted, faults
injected for the next requests, and every request is recorded. ``wait_for``
and ``until`` wait on a condition instead of sleeping.

Not emulated: pagination (``limit``/``continue`` are ignored, as a server may),
``sendInitialEvents``, server-side apply, ``$patch`` directives of strategic merge
patch (list merge keys are known by field name only, see ``_MERGE_KEYS``), TLS,
and any resource not listed above.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import datetime
import json
import re
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

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
_KINDS = {
    "pods": "Pod",
    "nodes": "Node",
    "events": "Event",
    "fpgabitstreams": "FpgaBitstream",
    "secrets": "Secret",
    "resourceslices": "ResourceSlice",
    "resourceclaims": "ResourceClaim",
    "daemonsets": "DaemonSet",
}
_NAMESPACED = {
    "pods": True,
    "nodes": False,
    "events": True,
    "fpgabitstreams": False,
    "secrets": True,
    "resourceslices": False,
    "resourceclaims": True,
    "daemonsets": True,
}
#: The path prefix (and apiVersion) of each resource: core/v1, the FpgaBitstream CRD's group and version, DRA's.
_API = {
    "pods": "/api/v1",
    "nodes": "/api/v1",
    "events": "/api/v1",
    "secrets": "/api/v1",
    "fpgabitstreams": "/apis/example.com/v1alpha1",
    "resourceslices": "/apis/resource.k8s.io/v1",
    "resourceclaims": "/apis/resource.k8s.io/v1",
    "daemonsets": "/apis/apps/v1",
}
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
    "secrets": {"metadata.name", "metadata.namespace", "type"},
    "resourceslices": {"metadata.name", "spec.nodeName", "spec.driver"},
    "resourceclaims": {"metadata.name", "metadata.namespace"},
    "daemonsets": {"metadata.name", "metadata.namespace"},
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
_PREFIX = r"(?P<api>/api/v1|/apis/example\.com/v1alpha1|/apis/apps/v1)"
_RESOURCES = r"(?P<res>pods|nodes|events|fpgabitstreams|secrets|daemonsets)"
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


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler thread
    block_on_close = True
    api: FakeKubeApiServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.api._connection_opened(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.api._connection_closed(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.api._handle(self, "GET")

    def do_POST(self) -> None:
        self.server.api._handle(self, "POST")

    def do_PATCH(self) -> None:
        self.server.api._handle(self, "PATCH")

    def do_PUT(self) -> None:
        self.server.api._handle(self, "PUT")

    def do_DELETE(self) -> None:
        self.server.api._handle(self, "DELETE")


class FakeKubeApiServer:
    """The fake API server; ``with FakeKubeApiServer() as api:`` starts it and stops it cleanly."""

    def __init__(self, *, token: str = "test-token", namespaces: Iterable[str] = ("default", "kube-system")) -> None:
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
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> FakeKubeApiServer:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.api = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-apiserver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Cut every watch and connection, stop serving, join every thread."""
        if self._server is None:
            return
        with self._cond:
            self._stopping = True
            for watch in self._watches:
                watch.action = "drop"
            self._cond.notify_all()
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._server.shutdown()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join()
        self._server = None

    def __enter__(self) -> FakeKubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def write_kubeconfig(self, path: Path, *, token: str | None = None, namespace: str = "default") -> Path:
        """A kubeconfig (JSON is YAML) pointing at this server with a bearer token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fpga-agent", "user": {"token": self.token if token is None else token}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fpga-agent", "namespace": namespace}}
            ],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config, indent=2))
        return path

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

    def put_secret(self, namespace: str, name: str, data: Mapping[str, bytes], secret_type: str = "Opaque") -> JSON:
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

    def _route_resource(
        self, request: RecordedRequest, resource: str, namespace: str | None, name: str | None
    ) -> tuple[int, JSON]:
        self._check_scope(resource, namespace, _API[resource])
        method = request.method
        with self._cond:
            if name is None:
                if method == "GET":
                    listed = self._list(resource, namespace, request.query)
                    listed["apiVersion"] = RESOURCE_API
                    return 200, listed
                if method == "POST" and resource == "resourceslices":
                    return 201, self._create_resource_slice(request.body)
            else:
                key = (namespace or "", name)
                if method == "GET":
                    return 200, copy.deepcopy(self._get(resource, key))
                if method == "PUT" and resource == "resourceslices":
                    return 200, self._replace_resource_slice(name, request.body)
                if method == "DELETE" and resource == "resourceslices":
                    self._get(resource, key)
                    return 200, self._remove(resource, key)
        raise ApiError(405, f"the server does not allow this method on the requested resource ({resource})")

    def _create_resource_slice(self, body: object) -> JSON:
        obj = _valid_resource_slice(body)
        name = obj["metadata"].get("name", "")
        if ("", name) in self._objects["resourceslices"]:
            raise ApiError(
                409,
                f'resourceslices.resource.k8s.io "{name}" already exists',
                "AlreadyExists",
                {"name": name, "group": "resource.k8s.io", "kind": "resourceslices"},
            )
        obj["metadata"]["uid"] = str(uuid.uuid4())
        obj["metadata"]["creationTimestamp"] = now_rfc3339()
        obj["metadata"].pop("resourceVersion", None)
        return self._store("resourceslices", ("", name), obj)

    def _replace_resource_slice(self, name: str, body: object) -> JSON:
        obj = _valid_resource_slice(body)
        if obj["metadata"].get("name") != name:
            raise ApiError(400, f"the name of the object ({obj['metadata'].get('name')}) does not match the URL")
        current = self._get("resourceslices", ("", name))
        sent = obj["metadata"].get("resourceVersion")
        if sent is not None and sent != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on resourceslices.resource.k8s.io "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        obj["metadata"]["uid"] = current["metadata"]["uid"]
        obj["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"]
        return self._store("resourceslices", ("", name), obj)

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

    # --- connections --------------------------------------------------------------------

    def _connection_opened(self, conn: socket.socket) -> None:
        with self._cond:
            self._connections.add(conn)
            stopping = self._stopping
            self._cond.notify_all()
        if stopping:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _connection_closed(self, conn: socket.socket) -> None:
        with self._cond:
            self._connections.discard(conn)
            self._cond.notify_all()

    # --- requests -----------------------------------------------------------------------

    def _handle(self, handler: _Handler, method: str) -> None:
        url = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = RecordedRequest(method, url.path, query, {k.lower(): v for k, v in handler.headers.items()}, body)
        with self._cond:
            self._requests.append(request)
            self._cond.notify_all()
        try:
            self._authenticate(request)
            self._inject_fault(request)
            if request.is_watch and method == "GET":
                self._serve_watch(handler, request)
                return
            code, answer = self._route(request)
        except ApiError as exc:
            code, answer = exc.code, exc.status
        self._send_json(handler, code, answer)

    def _authenticate(self, request: RecordedRequest) -> None:
        if self.token and request.headers.get("authorization", "") != f"Bearer {self.token}":
            raise ApiError(401, "Unauthorized")

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

    def _route(self, request: RecordedRequest) -> tuple[int, JSON]:
        match = _RESOURCE_PATH.match(request.path)
        if match:
            return self._route_resource(request, match["res"], match["ns"], match["name"])
        match = _COLLECTION.match(request.path)
        if match:
            resource, namespace = match["res"], match["ns"]
            self._check_scope(resource, namespace, match["api"])
            if request.method == "GET":
                return 200, self._list(resource, namespace, request.query)
            if request.method == "POST" and resource == "events":
                # Without a Content-Type the API server reads its first media type, JSON.
                content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
                if content_type != "application/json":
                    raise ApiError(415, f"unsupported media type {content_type!r} (this fake reads JSON only)")
                return 201, self._create_event(namespace, request.body)
            if request.method == "POST" and resource == "secrets" and namespace is not None:
                return 201, self._create_secret(namespace, request.body)
            raise ApiError(405, f"the server does not allow this method on the requested resource ({resource})")
        match = _ITEM.match(request.path)
        if match:
            resource, namespace, name = match["res"], match["ns"], match["name"]
            self._check_scope(resource, namespace, match["api"])
            key = (namespace or "", name)
            with self._cond:
                if request.method == "GET":
                    return 200, copy.deepcopy(self._get(resource, key))
                if request.method == "PATCH" and resource in ("pods", "nodes"):
                    return 200, self._patch(resource, key, request)
            raise ApiError(405, f"the server does not allow this method on the requested resource ({resource})")
        raise ApiError(404, "the server could not find the requested resource")

    def _check_scope(self, resource: str, namespace: str | None, api: str = "/api/v1") -> None:
        if _API[resource] != api:
            raise ApiError(404, "the server could not find the requested resource")
        if namespace is not None and not _NAMESPACED[resource]:
            raise ApiError(404, "the server could not find the requested resource")
        if resource == "events" and namespace is None:
            return
        if namespace is not None and namespace not in self.namespaces:
            raise ApiError(
                404, f'namespaces "{namespace}" not found', details={"name": namespace, "kind": "namespaces"}
            )

    # --- list and watch -----------------------------------------------------------------

    def _list(self, resource: str, namespace: str | None, query: Mapping[str, str]) -> JSON:
        matches = _selector(resource, namespace, query)
        version = query.get("resourceVersion", "")
        mode = query.get("resourceVersionMatch", "")
        if mode and not version:
            raise ApiError(400, "resourceVersionMatch is forbidden unless resourceVersion is provided")
        if mode not in ("", "NotOlderThan", "Exact"):
            raise ApiError(400, f"resourceVersionMatch: Unsupported value: {mode!r}")
        with self._cond:
            state = self._objects[resource]
            rv = self._rv
            if version not in ("", "0"):
                wanted = _parse_rv(version)
                if wanted > self._rv:
                    raise ApiError(
                        504,
                        f"Too large resource version: {wanted}, current: {self._rv}",
                        details={
                            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
                        },
                    )
                if mode == "Exact":
                    if wanted < self._compacted_rv:
                        raise ApiError(410, f"too old resource version: {wanted} ({self._compacted_rv})")
                    state, rv = self._state_at(resource, wanted), wanted
            items = []
            for obj in state.values():
                if matches(obj):
                    item = copy.deepcopy(obj)
                    item.pop("kind", None)  # list items come without their type meta
                    item.pop("apiVersion", None)
                    items.append(item)
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return {
            "kind": _KINDS[resource] + "List",
            "apiVersion": _api_version(resource),
            "metadata": {"resourceVersion": str(rv)},
            "items": items,
        }

    def _serve_watch(self, handler: _Handler, request: RecordedRequest) -> None:
        match = _COLLECTION.match(request.path)
        if not match:
            raise ApiError(404, "the server could not find the requested resource")
        resource, namespace = match["res"], match["ns"]
        self._check_scope(resource, namespace, match["api"])
        matches = _selector(resource, namespace, request.query)
        version = request.query.get("resourceVersion", "")
        timeout_s = float(request.query.get("timeoutSeconds") or 1800)
        bookmarks = request.query.get("allowWatchBookmarks") in ("true", "1")
        watch = _Watch(resource, request.query)
        pending: list[JSON] = []
        with self._cond:
            if version in ("", "0"):
                cursor = self._rv
                for obj in self._objects[resource].values():
                    if matches(obj):
                        pending.append({"type": "ADDED", "object": copy.deepcopy(obj)})
            else:
                cursor = _parse_rv(version)
                if cursor < self._compacted_rv:
                    # The real server answers 200 and sends the 410 as the stream's only event.
                    message = f"too old resource version: {cursor} ({self._compacted_rv})"
                    expired = {"type": "ERROR", "object": status_object(410, message, "Expired")}
                    self._start_stream(handler)
                    with contextlib.suppress(OSError):
                        _write_chunk(handler, json.dumps(expired).encode() + b"\n")
                        handler.wfile.write(b"0\r\n\r\n")
                    return
            watch.bookmarks_seen = self._bookmarks
            self._watches.append(watch)
            self._cond.notify_all()
        try:
            self._start_stream(handler)
            self._stream(handler, watch, matches, cursor, pending, bookmarks, time.monotonic() + timeout_s)
        except OSError:
            handler.close_connection = True
        finally:
            with self._cond:
                self._watches.remove(watch)
                self._cond.notify_all()

    @staticmethod
    def _start_stream(handler: _Handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

    def _stream(
        self,
        handler: _Handler,
        watch: _Watch,
        matches: Callable[[JSON], bool],
        cursor: int,
        pending: list[JSON],
        bookmarks: bool,
        deadline: float,
    ) -> None:
        while True:
            for event in pending:
                _write_chunk(handler, json.dumps(event).encode() + b"\n")
            pending = []
            with self._cond:
                while True:
                    # Wake now and then to notice a client that went away, as the real server does.
                    woken = self._cond.wait_for(
                        lambda since=cursor: (
                            watch.action is not None
                            or self._rv > since
                            or (bookmarks and self._bookmarks > watch.bookmarks_seen)
                        ),
                        timeout=min(_DISCONNECT_CHECK_S, max(0.0, deadline - time.monotonic())),
                    )
                    if woken:
                        break
                    if time.monotonic() >= deadline:
                        watch.action = "end"  # timeoutSeconds passed
                        break
                    if _client_gone(handler.connection):
                        watch.action = "gone"
                        break
                if watch.action == "gone":
                    handler.close_connection = True
                    return
                for change in self._history:
                    if change.rv > cursor and change.resource == watch.resource:
                        event = _watch_event(change, matches)
                        if event is not None:
                            pending.append(event)
                cursor = self._rv
                if bookmarks and self._bookmarks > watch.bookmarks_seen:
                    watch.bookmarks_seen = self._bookmarks
                    kind = _KINDS[watch.resource]
                    pending.append(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": kind,
                                "apiVersion": _api_version(watch.resource),
                                "metadata": {"resourceVersion": str(self._rv)},
                            },
                        }
                    )
                action = watch.action
            if action is None:
                continue
            if action == "expire":
                pending.append({"type": "ERROR", "object": status_object(410, "too old resource version", "Expired")})
            if action == "drop":
                handler.close_connection = True
                with contextlib.suppress(OSError):
                    handler.connection.shutdown(socket.SHUT_RDWR)
                return
            for event in pending:
                _write_chunk(handler, json.dumps(event).encode() + b"\n")
            handler.wfile.write(b"0\r\n\r\n")
            return

    # --- writes -------------------------------------------------------------------------

    def _patch(self, resource: str, key: _Key, request: RecordedRequest) -> JSON:
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        current = copy.deepcopy(self._get(resource, key))
        patch = request.body
        if content_type == "application/json-patch+json":
            if not isinstance(patch, list):
                raise ApiError(400, "json patch must be a list of operations")
            patched = _json_patch(current, patch)
        elif content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            if not isinstance(patch, dict):
                raise ApiError(400, "patch body must be a JSON object")
            wanted_rv = (
                patch.get("metadata", {}).get("resourceVersion") if isinstance(patch.get("metadata"), dict) else None
            )
            if wanted_rv is not None and wanted_rv != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    f'Operation cannot be fulfilled on {resource} "{key[1]}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                    "Conflict",
                )
            strategic = content_type == "application/strategic-merge-patch+json"
            patched = _merge_patch(current, patch, strategic=strategic)
        else:
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, "
                "application/strategic-merge-patch+json",
            )
        if not isinstance(patched, dict) or patched.get("metadata", {}).get("name") != key[1]:
            raise ApiError(422, f'{_KINDS[resource]} "{key[1]}" is invalid: metadata.name: Invalid value')
        patched["metadata"]["uid"] = current["metadata"]["uid"]
        return self._store(resource, key, patched)

    def secret(self, namespace: str, name: str) -> JSON | None:
        """A stored Secret as the server serves it (data base64-encoded), None when there is none."""
        with self._cond:
            found = self._objects["secrets"].get((namespace, name))
            return copy.deepcopy(found) if found else None

    def _create_secret(self, namespace: str, body: Any) -> JSON:
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise ApiError(400, "the body is not a Secret")
        name = body["metadata"].get("name", "")
        if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            raise ApiError(422, f'Secret "{name}" is invalid: metadata.name: Invalid value', "Invalid")
        if body["metadata"].get("namespace", namespace) != namespace:
            raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
        data = body.get("data") or {}
        for key, value in data.items():
            try:
                base64.b64decode(value, validate=True)
            except (ValueError, TypeError):
                raise ApiError(400, f"data[{key}]: illegal base64 data") from None
        if body.get("type") == "kubernetes.io/tls" and not {"tls.crt", "tls.key"} <= set(data):
            raise ApiError(422, f'Secret "{name}" is invalid: data[tls.crt], data[tls.key]: Required value', "Invalid")
        with self._cond:
            if (namespace, name) in self._objects["secrets"]:
                raise ApiError(
                    409, f'secrets "{name}" already exists', "AlreadyExists", {"name": name, "kind": "secrets"}
                )
            obj = copy.deepcopy(body)
            obj["metadata"]["namespace"] = namespace
            obj["metadata"]["uid"] = str(uuid.uuid4())
            obj["metadata"]["creationTimestamp"] = now_rfc3339()
            return self._store("secrets", (namespace, name), obj)

    def _create_event(self, namespace: str | None, body: Any) -> JSON:
        assert namespace is not None
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request is not a JSON object")
        event = copy.deepcopy(body)
        meta = event.setdefault("metadata", {})
        if meta.get("namespace") not in (None, "", namespace):
            raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
        meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        self._validate_event(event)
        key = (namespace, meta["name"])
        with self._cond:
            if key in self._objects["events"]:
                raise ApiError(
                    409,
                    f'events "{meta["name"]}" already exists',
                    "AlreadyExists",
                    details={"name": meta["name"], "kind": "events"},
                )
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            return self._store("events", key, event)

    @staticmethod
    def _validate_event(event: JSON) -> None:
        """The real server's checks for a core/v1 Event, plus a few where it is laxer (marked *).

        Real: name required and a DNS subdomain; kind Event; involvedObject.namespace
        equal to the Event's (unless eventTime is set); with eventTime set,
        reportingComponent, reportingInstance, action and reason required.
        Stricter here (*): involvedObject kind and name, reason, a Normal/Warning
        type, a source or reporting component, RFC 3339 timestamps, count >= 1.
        """
        meta = event["metadata"]
        errors: list[tuple[str, str]] = []
        name = meta.get("name") or ""
        if not name:
            errors.append(("metadata.name", "Required value: name or generateName is required"))
        elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            errors.append(("metadata.name", f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain"))
        if event.get("kind", "Event") != "Event":
            errors.append(("kind", f"Invalid value: {event.get('kind')!r}"))
        involved = event.get("involvedObject")
        if not isinstance(involved, dict):
            errors.append(("involvedObject", "Required value"))
            involved = {}
        for key in ("kind", "name"):
            if not involved.get(key):
                errors.append((f"involvedObject.{key}", "Required value"))
        if not event.get("eventTime"):
            if (involved.get("namespace") or "") != meta["namespace"] and not (
                not involved.get("namespace") and meta["namespace"] == "default"
            ):
                errors.append(
                    (
                        "involvedObject.namespace",
                        f"Invalid value: {involved.get('namespace')!r}: does not match event.namespace",
                    )
                )
        else:
            for key in ("reportingComponent", "reportingInstance", "action"):
                if not event.get(key):
                    errors.append((key, "Required value"))
        reason = event.get("reason") or ""
        if not reason:
            errors.append(("reason", "Required value"))
        elif len(reason) > 128:
            errors.append(("reason", "Too long: may not be longer than 128"))
        if event.get("type") not in ("Normal", "Warning"):
            errors.append(("type", f'Unsupported value: {event.get("type")!r}: supported values: "Normal", "Warning"'))
        source = event.get("source") or {}
        if not (isinstance(source, dict) and source.get("component")) and not event.get("reportingComponent"):
            errors.append(("source.component", "Required value"))
        for key in ("firstTimestamp", "lastTimestamp"):
            value = event.get(key)
            if value is not None:
                try:
                    datetime.datetime.fromisoformat(str(value))
                except ValueError:
                    errors.append((key, f"Invalid value: {value!r}: not an RFC 3339 time"))
        count = event.get("count")
        if count is not None and (not isinstance(count, int) or count < 1):
            errors.append(("count", f"Invalid value: {count!r}"))
        if errors:
            text = ", ".join(f"{f}: {m}" for f, m in errors)
            raise ApiError(
                422,
                f'Event "{name}" is invalid: [{text}]',
                details={
                    "name": name,
                    "kind": "Event",
                    "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in errors],
                },
            )

    @staticmethod
    def _send_json(handler: _Handler, code: int, body: JSON) -> None:
        data = json.dumps(body).encode()
        try:
            handler.send_response(code)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            handler.close_connection = True


# --- helpers ---------------------------------------------------------------------------------


def _client_gone(conn: socket.socket) -> bool:
    """Whether the client closed its end (readable with nothing to read). A watch client sends nothing."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _write_chunk(handler: _Handler, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def _parse_rv(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, f"invalid resource version: {text!r}") from None


def _lookup(obj: JSON, dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _selector(resource: str, namespace: str | None, query: Mapping[str, str]) -> Callable[[JSON], bool]:
    """A predicate for the request's namespace, fieldSelector and labelSelector (400 when unsupported)."""
    tests: list[Callable[[JSON], bool]] = []
    if namespace is not None:
        tests.append(lambda o: o["metadata"].get("namespace") == namespace)
    for term in filter(None, query.get("fieldSelector", "").split(",")):
        m = re.fullmatch(r"([^=!]+)(==|=|!=)(.*)", term)
        if not m:
            raise ApiError(400, f"invalid field selector: {term!r}")
        name, op, value = m.groups()
        if name not in _FIELDS[resource]:
            raise ApiError(400, f"field label not supported: {name}")
        tests.append(_field_test(name, op, value))
    for term in filter(None, query.get("labelSelector", "").split(",")):
        tests.append(_label_test(term.strip()))
    return lambda obj: all(t(obj) for t in tests)


def _field_test(name: str, op: str, value: str) -> Callable[[JSON], bool]:
    if op == "!=":
        return lambda o: _lookup(o, name) != value
    return lambda o: _lookup(o, name) == value


def _label_test(term: str) -> Callable[[JSON], bool]:
    def labels(o: JSON) -> dict[str, str]:
        return o["metadata"].get("labels") or {}

    m = re.fullmatch(r"([^=!]+)(==|=|!=)(.*)", term)
    if m:
        key, op, value = m.groups()
        if op == "!=":
            return lambda o: labels(o).get(key) != value
        return lambda o: labels(o).get(key) == value
    if term.startswith("!"):
        return lambda o: term[1:] not in labels(o)
    if re.fullmatch(r"[A-Za-z0-9./_-]+", term):
        return lambda o: term in labels(o)
    raise ApiError(400, f"unable to parse requirement: {term!r}")


def _watch_event(change: _Change, matches: Callable[[JSON], bool]) -> JSON | None:
    """What a watcher with this selector sees of a change (objects entering/leaving it included)."""
    was = change.old is not None and matches(change.old)
    now = change.new is not None and matches(change.new)
    if change.new is None:
        if not was:
            return None
        assert change.old is not None
        gone = copy.deepcopy(change.old)
        gone["metadata"]["resourceVersion"] = str(change.rv)
        return {"type": "DELETED", "object": gone}
    if now:
        return {"type": "MODIFIED" if was else "ADDED", "object": copy.deepcopy(change.new)}
    if was:
        return {"type": "DELETED", "object": copy.deepcopy(change.new)}
    return None


def _merge_patch(target: Any, patch: Any, *, strategic: bool) -> Any:
    """RFC 7386 JSON merge patch; with ``strategic``, lists in ``_MERGE_KEYS`` merge by their key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif strategic and key in _MERGE_KEYS and isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, _MERGE_KEYS[key])
        else:
            result[key] = _merge_patch(result.get(key), value, strategic=strategic)
    return result


def _merge_list(current: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    merged = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise ApiError(422, f"strategic merge patch: list item without merge key {merge_key!r}")
        for index, existing in enumerate(merged):
            if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]:
                merged[index] = _merge_patch(existing, item, strategic=True)
                break
        else:
            merged.append(copy.deepcopy(item))
    return merged


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ApiError(422, f"json patch: invalid path {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _json_patch(doc: JSON, operations: list[Any]) -> JSON:
    """RFC 6902 with add, remove, replace and test."""
    doc = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "path" not in op:
            raise ApiError(400, "json patch: an operation needs op and path")
        *parents, last = _pointer(op["path"])
        parent: Any = doc
        for part in parents:
            parent = parent[int(part)] if isinstance(parent, list) else parent.get(part)
            if parent is None:
                raise ApiError(422, f"json patch: missing path {op['path']!r}")
        kind = op.get("op")
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, f"json patch: test failed at {op['path']!r}")
        elif kind in ("add", "replace"):
            if kind == "replace" and isinstance(parent, dict) and last not in parent:
                raise ApiError(422, f"json patch: replace of a missing key {op['path']!r}")
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op.get("value"))
                elif kind == "add":
                    parent.insert(int(last), op.get("value"))
                else:
                    parent[int(last)] = op.get("value")
            else:
                parent[last] = op.get("value")
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise ApiError(422, f"json patch: remove of a missing key {op['path']!r}")
        else:
            raise ApiError(422, f"json patch: unsupported op {kind!r}")
    return doc


@contextlib.contextmanager
def running_apiserver(**kwargs: Any) -> Iterator[FakeKubeApiServer]:
    """A started fake API server, stopped (threads joined) afterwards."""
    server = FakeKubeApiServer(**kwargs).start()
    try:
        yield server
    finally:
        server.stop()


def _invalid(name: str, field: str, detail: str) -> ApiError:
    return ApiError(422, f'ResourceSlice.resource.k8s.io "{name}" is invalid: {field}: {detail}')


def _valid_resource_slice(body: object) -> JSON:
    """The slice if the real server's validation takes it (the parts a driver can get wrong); else 422 naming
    the field."""
    if not isinstance(body, dict) or body.get("kind") != "ResourceSlice" or body.get("apiVersion") != RESOURCE_API:
        raise ApiError(400, f"the body is not a {RESOURCE_API} ResourceSlice")
    obj = copy.deepcopy(body)
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    if not isinstance(name, str) or not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise _invalid(str(name), "metadata.name", "Invalid value")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise _invalid(name, "spec", "Required value")
    if not isinstance(spec.get("driver"), str) or not _DNS_SUBDOMAIN.match(spec["driver"]):
        raise _invalid(name, "spec.driver", "Invalid value")
    pool = spec.get("pool") or {}
    if not pool.get("name") or not isinstance(pool.get("generation"), int) or pool.get("resourceSliceCount", 0) < 1:
        raise _invalid(name, "spec.pool", "Invalid value: name, generation and resourceSliceCount >= 1 are required")
    if sum(1 for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)) != 1:
        raise _invalid(name, "spec", "Invalid value: exactly one of nodeName, nodeSelector, allNodes, ...")
    devices = spec.get("devices") or []
    if len(devices) > 128:
        raise _invalid(name, "spec.devices", f"Too many: {len(devices)}: must have at most 128 items")
    seen: set[str] = set()
    for index, device in enumerate(devices):
        where = f"spec.devices[{index}]"
        dname = device.get("name", "")
        if not isinstance(dname, str) or not _DNS_LABEL.match(dname):
            raise _invalid(name, f"{where}.name", f"Invalid value: {dname!r}: a lowercase RFC 1123 label")
        if dname in seen:
            raise _invalid(name, f"{where}.name", f"Duplicate value: {dname!r}")
        seen.add(dname)
        attributes = device.get("attributes") or {}
        if len(attributes) > 32:
            raise _invalid(name, f"{where}.attributes", "Too many: must have at most 32 attributes")
        for key, value in attributes.items():
            if not _C_IDENTIFIER.match(key.rsplit("/", 1)[-1]):
                raise _invalid(name, f"{where}.attributes[{key}]", "Invalid value: a C identifier of <= 32")
            kinds = [k for k in ("string", "int", "bool", "version") if k in (value or {})]
            if len(kinds) != 1:
                raise _invalid(name, f"{where}.attributes[{key}]", "Invalid value: exactly one value must be given")
            if kinds[0] == "string" and len(value["string"]) > 64:
                raise _invalid(name, f"{where}.attributes[{key}].string", "Too long: may not be more than 64 bytes")
        taints = device.get("taints") or []
        if len(taints) > 16:
            raise _invalid(name, f"{where}.taints", "Too many: must have at most 16 items")
        for t_index, taint in enumerate(taints):
            at = f"{where}.taints[{t_index}]"
            if not _QUALIFIED_NAME.match(str(taint.get("key", ""))):
                raise _invalid(name, f"{at}.key", "Invalid value: a qualified name")
            if taint.get("effect") not in ("NoSchedule", "NoExecute"):
                raise _invalid(name, f"{at}.effect", 'Unsupported value: supported values: "NoExecute", "NoSchedule"')
            if "value" in taint and not re.match(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$", taint["value"]):
                raise _invalid(name, f"{at}.value", "Invalid value: a label value")
    return obj


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
    """A ResourceClaim as the scheduler leaves it allocated, with the spec it was allocated from.

    ``devices``: (request, pool, device) of ``driver`` each; a request of ``first_available``
    (request -> its subrequests in order, e.g. ``{"fpga": ["cached", "any"]}``) names the
    subrequest that was used (``fpga/any``), any other request is ``exactly`` one device of
    ``device_class``. Opaque configs of the claim: ``parameters`` for every request, then
    ``configs`` as (requests, parameters) each, for the requests named (none: every request).
    Reserved for the pods (name, uid) given. No ``devices`` and no pods: not allocated."""
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
    opaque = [((), parameters)] if parameters is not None else []
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

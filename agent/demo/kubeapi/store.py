"""The API server stand-in's store and what it does with a request: objects with resourceVersions and history,
the open watches, routing, scope checks, lists, patches, the objects clients create (ResourceSlices, Events), and
the few direct reads and writes the demos make (see :mod:`agent.demo.kubeapi`)."""

from __future__ import annotations

import copy
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agent.demo.kubeapi.objects import (
    DEFAULT_NAMESPACES,
    JSON,
    PATH,
    RESOURCE_API,
    RESOURCES,
    SELECTOR_TERM,
    ApiError,
    Kind,
    _field_test,
    _Key,
    _merge_patch,
    make_node,
    now_rfc3339,
    status_object,
)

#: Changes kept for watches and exact lists. Older ones are dropped, as etcd compacts: a client asking from
#: before them gets 410 Expired, and so does a watch that fell that far behind.
HISTORY_LIMIT = 10_000
MERGE = "application/merge-patch+json"


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
class _Watch:
    """An open watch: its events to send besides the changes, and why it ends (drop, end or gone; None: open)."""

    resource: str
    query: dict[str, str]
    action: str | None = None
    queued: list[JSON] = field(default_factory=list)

    def expire(self) -> None:
        """End with an ERROR event of a 410 Expired Status (the changes it would need are gone)."""
        if self.action is None:
            self.queued.append({"type": "ERROR", "object": status_object(410, "too old resource version", "Expired")})
            self.action = "end"


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


class ObjectStore:
    """The objects, their history and the open watches, under one lock; requests served over them."""

    resources: ClassVar[Mapping[str, Kind]] = RESOURCES

    def __init__(self, *, token: str = "test-token", namespaces: Iterable[str] = DEFAULT_NAMESPACES) -> None:  # noqa: S107
        self.token = token
        self.namespaces: set[str] = set(namespaces)
        self._cond = threading.Condition(threading.RLock())
        self._rv = 1000
        self._objects: dict[str, dict[_Key, JSON]] = {resource: {} for resource in self.resources}
        self._history: list[_Change] = []
        #: Lists and watches from before this resourceVersion get 410, as after etcd compacts (the tests compact).
        self._compacted_rv = 0
        #: The newest change dropped from the history (HISTORY_LIMIT); a watch behind it has missed events.
        self._dropped_rv = 0
        self._watches: list[_Watch] = []
        self._connections: set[socket.socket] = set()

    def events(self, namespace: str | None = None) -> list[JSON]:
        """Events posted so far, oldest first."""
        with self._cond:
            found = [e for (ns, _), e in self._objects["events"].items() if namespace in (None, ns)]
            return copy.deepcopy(sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"])))

    def add_pod(self, name: str, *, namespace: str = "default", node: str) -> JSON:
        """Create a pod of one container on ``node``, Pending; returns it as stored."""
        meta = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "creationTimestamp": now_rfc3339()}
        pod: JSON = {
            "metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example/fpga-app:1.0"}]},
            "status": {"phase": "Pending"},
        }
        with self._cond:
            self.namespaces.add(namespace)
            return self._store("pods", (namespace, name), pod)

    def add_node(self, name: str, **kwargs: Any) -> JSON:
        with self._cond:
            return self._store("nodes", ("", name), make_node(name, **kwargs))

    def put_resource_claim(self, claim: JSON) -> JSON:
        """Create or replace a ResourceClaim given as JSON, as the real server does (a replaced claim keeps
        its UID; a body naming another UID is a 409)."""
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

    def resource_slice(self, name: str) -> JSON | None:
        with self._cond:
            found = self._objects["resourceslices"].get(("", name))
            return copy.deepcopy(found) if found else None

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
        obj.setdefault("kind", self.resources[resource].kind)
        obj.setdefault("apiVersion", self.resources[resource].api_version)
        old = self._objects[resource].get(key)
        self._objects[resource][key] = obj
        self._record(_Change(rv, resource, key, copy.deepcopy(old), copy.deepcopy(obj)))
        return copy.deepcopy(obj)

    def _remove(self, resource: str, key: _Key) -> JSON:
        rv = self._next_rv()
        old = self._objects[resource].pop(key)
        self._record(_Change(rv, resource, key, copy.deepcopy(old), None))
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(rv)
        return gone

    def _record(self, change: _Change) -> None:
        """Keep ``change`` for the watches (the oldest half goes once HISTORY_LIMIT is passed) and wake them."""
        self._history.append(change)
        if len(self._history) > HISTORY_LIMIT:
            dropped = len(self._history) - HISTORY_LIMIT // 2
            self._dropped_rv = self._history[dropped - 1].rv
            self._compacted_rv = max(self._compacted_rv, self._dropped_rv)
            del self._history[:dropped]
        self._cond.notify_all()

    # --- requests -----------------------------------------------------------------------

    def _route(self, request: RecordedRequest) -> tuple[int, JSON]:
        match = PATH.match(request.path)
        if not match or match["res"] not in self.resources:
            raise ApiError(404, "the server could not find the requested resource")
        resource, namespace, name = match["res"], match["ns"], match["name"]
        self._check_scope(resource, namespace, match["api"])
        method, key = request.method, (namespace or "", name or "")
        with self._cond:
            if name is None:
                if method == "GET":
                    return 200, self._list(resource, namespace, request.query)
                if method == "POST" and resource == "events":
                    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
                    if content_type != "application/json":
                        raise ApiError(415, f"unsupported media type {content_type!r} (this fake reads JSON only)")
                    return 201, self._create_event(namespace, request.body)
                if method == "POST" and resource == "resourceslices":
                    return 201, self._create_resource_slice(request.body)
            elif method == "GET":
                return 200, copy.deepcopy(self._get(resource, key))
            elif method == "PUT" and resource == "resourceslices":
                return 200, self._replace_resource_slice(name, request.body)
            elif method == "DELETE" and resource in ("fpganodestates", "resourceslices"):
                self._get(resource, key)
                return 200, self._remove(resource, key)
            elif method == "PATCH" and resource in ("pods", "nodes"):
                return 200, self._patch(resource, key, request)
        raise ApiError(405, f"the server does not allow this method on the requested resource ({resource})")

    def _create_resource_slice(self, body: object) -> JSON:
        obj = self._valid_resource_slice(body)
        name = obj["metadata"].get("name", "")
        if ("", name) in self._objects["resourceslices"]:
            raise _already_exists("resourceslices", name, "resource.k8s.io")
        obj["metadata"]["uid"] = str(uuid.uuid4())
        obj["metadata"]["creationTimestamp"] = now_rfc3339()
        obj["metadata"].pop("resourceVersion", None)
        return self._store("resourceslices", ("", name), obj)

    def _replace_resource_slice(self, name: str, body: object) -> JSON:
        obj = self._valid_resource_slice(body)
        if obj["metadata"].get("name") != name:
            raise ApiError(400, f"the name of the object ({obj['metadata'].get('name')}) does not match the URL")
        current = self._get("resourceslices", ("", name))
        sent = obj["metadata"].get("resourceVersion")
        if sent is not None and sent != current["metadata"]["resourceVersion"]:
            raise _conflict("resourceslices.resource.k8s.io", name)
        obj["metadata"]["uid"] = current["metadata"]["uid"]
        obj["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"]
        return self._store("resourceslices", ("", name), obj)

    def _check_scope(self, resource: str, namespace: str | None, api: str) -> None:
        kind = self.resources[resource]
        if kind.api != api or (namespace is not None and not kind.namespaced):
            raise ApiError(404, "the server could not find the requested resource")
        if resource == "events" and namespace is None:
            return
        if namespace is not None and namespace not in self.namespaces:
            raise ApiError(
                404, f'namespaces "{namespace}" not found', details={"name": namespace, "kind": "namespaces"}
            )

    # --- list and watch -----------------------------------------------------------------

    def _selector(self, resource: str, namespace: str | None, query: Mapping[str, str]) -> Callable[[JSON], bool]:
        """A predicate for the request's namespace and fieldSelector (400 when unsupported)."""
        tests: list[Callable[[JSON], bool]] = []
        if namespace is not None:
            tests.append(lambda o: o["metadata"].get("namespace") == namespace)
        for term in filter(None, query.get("fieldSelector", "").split(",")):
            m = SELECTOR_TERM.fullmatch(term)
            if not m:
                raise ApiError(400, f"invalid field selector: {term!r}")
            name, op, value = m.groups()
            if not self.resources[resource].selectable(name):
                raise ApiError(400, f"field label not supported: {name}")
            tests.append(_field_test(name, op, value))
        return lambda obj: all(t(obj) for t in tests)

    def _list(self, resource: str, namespace: str | None, query: Mapping[str, str]) -> JSON:
        matches = self._selector(resource, namespace, query)
        with self._cond:
            state, rv = self._listed_state(resource, query)
            items = []
            for obj in state.values():
                if matches(obj):
                    item = copy.deepcopy(obj)
                    item.pop("kind", None)  # list items come without their type meta
                    item.pop("apiVersion", None)
                    items.append(item)
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        kind = self.resources[resource]
        metadata = {"resourceVersion": str(rv)}
        return {"kind": kind.kind + "List", "apiVersion": kind.api_version, "metadata": metadata, "items": items}

    def _listed_state(self, resource: str, query: Mapping[str, str]) -> tuple[dict[_Key, JSON], int]:
        """The objects a list reads and their resourceVersion: the newest (the tests' server reads older ones)."""
        return self._objects[resource], self._rv

    # --- writes -------------------------------------------------------------------------

    def _patch(self, resource: str, key: _Key, request: RecordedRequest) -> JSON:
        current = copy.deepcopy(self._get(resource, key))
        patched = self._patched(request, current)
        meta = request.body.get("metadata") if isinstance(request.body, dict) else None
        if isinstance(meta, dict) and meta.get("resourceVersion") not in (None, current["metadata"]["resourceVersion"]):
            raise _conflict(resource, key[1])
        if not isinstance(patched, dict) or patched.get("metadata", {}).get("name") != key[1]:
            raise ApiError(422, f'{self.resources[resource].kind} "{key[1]}" is invalid: metadata.name: Invalid value')
        patched["metadata"]["uid"] = current["metadata"]["uid"]
        return self._store(resource, key, patched)

    def _patched(self, request: RecordedRequest, current: JSON) -> Any:
        """``current`` as the request's patch changes it: a JSON merge patch (what the agent sends)."""
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        if content_type != MERGE:
            raise ApiError(415, f"the body of the request was in an unknown format - accepted media types: {MERGE}")
        if not isinstance(request.body, dict):
            raise ApiError(400, "patch body must be a JSON object")
        return _merge_patch(current, request.body)

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
                raise _already_exists("events", meta["name"])
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            return self._store("events", key, event)

    def _valid_resource_slice(self, body: object) -> JSON:
        """The slice as sent (the tests' server checks its fields as the real server does)."""
        if not isinstance(body, dict) or body.get("kind") != "ResourceSlice" or body.get("apiVersion") != RESOURCE_API:
            raise ApiError(400, f"the body is not a {RESOURCE_API} ResourceSlice")
        return copy.deepcopy(body)

    def _validate_event(self, event: JSON) -> None:
        """Only that the Event is named (the tests' server checks it as the real server does)."""
        if not event["metadata"].get("name"):
            raise ApiError(422, 'Event "" is invalid: metadata.name: Required value: name or generateName is required')


def _already_exists(resource: str, name: str, group: str = "") -> ApiError:
    details = {"name": name, "group": group, "kind": resource} if group else {"name": name, "kind": resource}
    what = f"{resource}.{group}" if group else resource
    return ApiError(409, f'{what} "{name}" already exists', "AlreadyExists", details)


def _conflict(what: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {what} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
    )

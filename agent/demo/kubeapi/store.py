"""The API server stand-in's store: objects with resourceVersions and history, the open watches, and the few
direct reads and writes the demos make (see :mod:`agent.demo.kubeapi`)."""

from __future__ import annotations

import copy
import socket
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from agent.demo.kubeapi.objects import (
    DEFAULT_NAMESPACES,
    JSON,
    RESOURCE_API,
    RESOURCES,
    ApiError,
    Kind,
    _Key,
    make_node,
    make_pod,
    now_rfc3339,
)

#: Changes kept for watches and exact lists. Older ones are dropped, as etcd compacts: a client asking from
#: before them gets 410 Expired, and so does a watch that fell that far behind.
HISTORY_LIMIT = 10_000


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
    resource: str
    query: dict[str, str]
    action: str | None = None
    bookmarks_seen: int = 0


class ObjectStore:
    """The objects, their history and the open watches, under one lock."""

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
        self._bookmarks = 0
        self._connections: set[socket.socket] = set()

    def events(self, namespace: str | None = None) -> list[JSON]:
        """Events posted so far, oldest first."""
        with self._cond:
            found = [e for (ns, _), e in self._objects["events"].items() if namespace in (None, ns)]
            return copy.deepcopy(sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"])))

    def add_pod(self, name: str, **kwargs: Any) -> JSON:
        """Create a pod (see :func:`make_pod` for the keywords); returns it as stored."""
        pod = make_pod(name, **kwargs)
        meta = pod["metadata"]
        meta["creationTimestamp"] = now_rfc3339()
        with self._cond:
            self.namespaces.add(meta["namespace"])
            return self._store("pods", (meta["namespace"], meta["name"]), pod)

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

"""What the API server stand-in does with a request: routing, scope checks, lists, patches, and the
objects clients create (ResourceSlices, FpgaNodeStates, Events), validated as the real server does."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from agent.demo.kubeapi.matching import SELECTOR_TERM, _field_test, _merge_patch, _parse_rv
from agent.demo.kubeapi.nodestates import valid_node_state
from agent.demo.kubeapi.objects import JSON, PATH, RESOURCE_API, ApiError, _Key, now_rfc3339
from agent.demo.kubeapi.store import ObjectStore, RecordedRequest

MERGE = "application/merge-patch+json"


class RequestHandling(ObjectStore):
    """Routing, lists, patches and creations over the store."""

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
                if method == "POST" and resource == "fpganodestates" and namespace is not None:
                    return 201, self._create_node_state(namespace, request.body)
                if method == "POST" and resource == "resourceslices":
                    return 201, self._create_resource_slice(request.body)
            elif method == "GET":
                return 200, copy.deepcopy(self._get(resource, key))
            elif method == "PUT" and resource == "fpganodestates":
                return 200, self._replace_node_state(key, request.body)
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

    def _create_node_state(self, namespace: str, body: object) -> JSON:
        obj = valid_node_state(body, namespace)
        key = (namespace, obj["metadata"]["name"])
        if key in self._objects["fpganodestates"]:
            raise _already_exists("fpganodestates", key[1], "example.com")
        obj["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
        return self._store("fpganodestates", key, obj)

    def _replace_node_state(self, key: _Key, body: object) -> JSON:
        obj = valid_node_state(body, key[0])
        if obj["metadata"]["name"] != key[1]:
            raise ApiError(400, "the name of the object does not match the name on the URL", "BadRequest")
        current = self._get("fpganodestates", key)
        version = obj["metadata"].get("resourceVersion")
        if not version:
            raise ApiError(422, "metadata.resourceVersion: Invalid value: 0: must be specified for an update")
        if version != current["metadata"]["resourceVersion"]:
            raise _conflict("fpganodestates.example.com", key[1])
        for field in ("uid", "creationTimestamp"):
            obj["metadata"][field] = current["metadata"][field]
        changed = obj.get("spec") != current.get("spec")
        obj["metadata"]["generation"] = current["metadata"].get("generation", 1) + (1 if changed else 0)
        return self._store("fpganodestates", key, obj)

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
        metadata = {"resourceVersion": str(rv)}
        if query.get("limit"):  # pages: the continue token is the offset of the next item
            start = int(query.get("continue") or 0)
            end = start + int(query["limit"])
            if end < len(items):
                metadata["continue"] = str(end)
            items = items[start:end]
        kind = self.resources[resource]
        return {"kind": kind.kind + "List", "apiVersion": kind.api_version, "metadata": metadata, "items": items}

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

"""What the tests' API server serves beyond what the demo's agent sends (:mod:`agent.demo.kubeapi`): label
selectors, lists of an exact (past) resourceVersion and in pages, JSON patches (RFC 6902) and strategic merge
patches, the finalizers of an object being deleted, FpgaNodeStates written, and ResourceSlices, Events and
FpgaNodeStates checked as the real server checks them (:mod:`tests.fakeapi_validation`)."""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from agent.demo.kubeapi.objects import JSON, PATH, SELECTOR_TERM, ApiError, _Key, _parse_rv, now_rfc3339
from agent.demo.kubeapi.server import KubeApiStandIn
from agent.demo.kubeapi.store import RecordedRequest, _already_exists, _conflict
from tests.fakeapi_validation import valid_node_state, valid_resource_slice, validate_event

#: Lists merged by key in a strategic merge patch (the real server knows this from the schema).
MERGE_KEYS = {
    "conditions": "type",
    "addresses": "type",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
}


class FullRequests(KubeApiStandIn):
    """The stand-in with label selectors, every patch type, finalizers and the real server's checks."""

    def _route(self, request: RecordedRequest) -> tuple[int, JSON]:
        match = PATH.match(request.path)
        if match and match["res"] == "fpganodestates" and request.method in ("POST", "PUT"):
            namespace, name = match["ns"], match["name"]
            self._check_scope("fpganodestates", namespace, match["api"])
            with self._cond:
                if request.method == "POST" and name is None and namespace is not None:
                    return 201, self._create_node_state(namespace, request.body)
                if request.method == "PUT" and name is not None:
                    return 200, self._replace_node_state((namespace or "", name), request.body)
        return super()._route(request)

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

    def _list(self, resource: str, namespace: str | None, query: Mapping[str, str]) -> JSON:
        """The list in pages when asked (``limit``): the continue token is the offset of the next item."""
        body = super()._list(resource, namespace, query)
        if query.get("limit"):
            start = int(query.get("continue") or 0)
            end = start + int(query["limit"])
            if end < len(body["items"]):
                body["metadata"]["continue"] = str(end)
            body["items"] = body["items"][start:end]
        return body

    def _listed_state(self, resource: str, query: Mapping[str, str]) -> tuple[dict[_Key, JSON], int]:
        """A list's resourceVersion and resourceVersionMatch checked, and an ``Exact`` one read from the history."""
        version = query.get("resourceVersion", "")
        mode = query.get("resourceVersionMatch", "")
        if mode and not version:
            raise ApiError(400, "resourceVersionMatch is forbidden unless resourceVersion is provided")
        if mode not in ("", "NotOlderThan", "Exact"):
            raise ApiError(400, f"resourceVersionMatch: Unsupported value: {mode!r}")
        if version in ("", "0"):
            return super()._listed_state(resource, query)
        wanted = _parse_rv(version)
        if wanted > self._rv:
            raise ApiError(
                504,
                f"Too large resource version: {wanted}, current: {self._rv}",
                details={"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]},
            )
        if mode != "Exact":
            return super()._listed_state(resource, query)
        if wanted < self._compacted_rv:
            raise ApiError(410, f"too old resource version: {wanted} ({self._compacted_rv})")
        state = dict(self._objects[resource])  # undo the history after ``wanted``
        for change in reversed(self._history):
            if change.rv <= wanted:
                break
            if change.resource == resource:
                if change.old is None:
                    state.pop(change.key, None)
                else:
                    state[change.key] = change.old
        return state, wanted

    def _valid_resource_slice(self, body: object) -> JSON:
        return valid_resource_slice(body)

    def _validate_event(self, event: JSON) -> None:
        validate_event(event)

    def _selector(self, resource: str, namespace: str | None, query: Mapping[str, str]) -> Callable[[JSON], bool]:
        tests = [super()._selector(resource, namespace, query)]
        tests += [_label_test(term.strip()) for term in filter(None, query.get("labelSelector", "").split(","))]
        return lambda obj: all(t(obj) for t in tests)

    def _patched(self, request: RecordedRequest, current: JSON) -> Any:
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        if content_type == "application/json-patch+json":
            if not isinstance(request.body, list):
                raise ApiError(400, "json patch must be a list of operations")
            return _json_patch(current, request.body)
        if content_type == "application/strategic-merge-patch+json":
            if not isinstance(request.body, dict):
                raise ApiError(400, "patch body must be a JSON object")
            return _strategic_merge(current, request.body)
        return super()._patched(request, current)

    def _patch(self, resource: str, key: _Key, request: RecordedRequest) -> JSON:
        """An object being deleted takes no new finalizer, and goes when its last one is removed."""
        current = self._get(resource, key)
        if current["metadata"].get("deletionTimestamp"):
            patched = self._patched(request, copy.deepcopy(current))
            before = current["metadata"].get("finalizers") or []
            after = patched.get("metadata", {}).get("finalizers") or [] if isinstance(patched, dict) else before
            added = [f for f in after if f not in before]
            if added:
                raise ApiError(
                    422,
                    f'{self.resources[resource].kind} "{key[1]}" is invalid: metadata.finalizers: Forbidden: no new '
                    f"finalizers can be added if the object is being deleted, found new finalizers {added}",
                    "Invalid",
                )
            if not after:
                return self._remove(resource, key)
        return super()._patch(resource, key, request)


def _label_test(term: str) -> Callable[[JSON], bool]:
    def labels(o: JSON) -> dict[str, str]:
        return o["metadata"].get("labels") or {}

    m = SELECTOR_TERM.fullmatch(term)
    if m:
        key, op, value = m.groups()
        return lambda o: (labels(o).get(key) == value) != (op == "!=")
    if term.startswith("!"):
        return lambda o: term[1:] not in labels(o)
    if re.fullmatch(r"[A-Za-z0-9./_-]+", term):
        return lambda o: term in labels(o)
    raise ApiError(400, f"unable to parse requirement: {term!r}")


def _strategic_merge(target: Any, patch: Any) -> Any:
    """A JSON merge patch whose lists in ``MERGE_KEYS`` merge by their key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif key in MERGE_KEYS and isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, MERGE_KEYS[key])
        else:
            result[key] = _strategic_merge(result.get(key), value)
    return result


def _merge_list(current: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    merged = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise ApiError(422, f"strategic merge patch: list item without merge key {merge_key!r}")
        for index, existing in enumerate(merged):
            if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]:
                merged[index] = _strategic_merge(existing, item)
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
            if isinstance(parent, list) and not 0 <= int(last) < len(parent):
                raise ApiError(422, f"json patch: test of a missing index {op['path']!r}")
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
                if not 0 <= int(last) < len(parent):
                    raise ApiError(422, f"json patch: remove of a missing index {op['path']!r}")
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise ApiError(422, f"json patch: remove of a missing key {op['path']!r}")
        else:
            raise ApiError(422, f"json patch: unsupported op {kind!r}")
    return doc

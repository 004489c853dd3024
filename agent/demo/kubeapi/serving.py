"""What the API server stand-in does with a request once routed: lists, scope checks, patches, and the
objects clients create (ResourceSlices, FpgaNodeStates, Events), validated as the real server does."""

from __future__ import annotations

import copy
import datetime
import uuid
from collections.abc import Mapping
from typing import Any

from agent.demo.kubeapi.matching import _json_patch, _merge_patch, _parse_rv, _selector
from agent.demo.kubeapi.nodestates import valid_node_state
from agent.demo.kubeapi.objects import (
    _API,
    _DNS_SUBDOMAIN,
    _KINDS,
    _NAMESPACED,
    JSON,
    RESOURCE_API,
    ApiError,
    _api_version,
    _Key,
    now_rfc3339,
)
from agent.demo.kubeapi.slices import _valid_resource_slice
from agent.demo.kubeapi.store import ObjectStore, RecordedRequest


class RequestHandling(ObjectStore):
    """Lists, patches and creations over the store."""

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
            raise _already_exists("resourceslices", name, "resource.k8s.io")
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
        metadata = {"resourceVersion": str(rv)}
        if query.get("limit"):  # pages: the continue token is the offset of the next item
            start = int(query.get("continue") or 0)
            end = start + int(query["limit"])
            if end < len(items):
                metadata["continue"] = str(end)
            items = items[start:end]
        return {
            "kind": _KINDS[resource] + "List",
            "apiVersion": _api_version(resource),
            "metadata": metadata,
            "items": items,
        }

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
                raise _conflict(resource, key[1])
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
        before, after = current["metadata"].get("finalizers") or [], patched["metadata"].get("finalizers") or []
        if current["metadata"].get("deletionTimestamp"):
            added = [f for f in after if f not in before]
            if added:
                raise ApiError(
                    422,
                    f'{_KINDS[resource]} "{key[1]}" is invalid: metadata.finalizers: Forbidden: no new finalizers '
                    f"can be added if the object is being deleted, found new finalizers {added}",
                    "Invalid",
                )
            if not after:  # the last finalizer of an object being deleted went: the object goes
                return self._remove(resource, key)
        return self._store(resource, key, patched)

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

    @staticmethod
    def _validate_event(event: JSON) -> None:
        """The real server's checks for a core/v1 Event, plus stricter ones: involvedObject kind and name,
        reason, a Normal/Warning type, a source or reporting component, RFC 3339 timestamps, count >= 1."""
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

"""What the tests' API server checks of the objects the agent writes, as the real server does (refused with 422
naming the field): ResourceSlices (devices, their attributes, taints and counter uses; shared counters),
core/v1 Events and FpgaNodeStates (as the CRD's schema, daemonset/fpganodestate-crd.yaml, does)."""

from __future__ import annotations

import copy
import datetime
import re
from typing import Any

from agent.demo.kubeapi.objects import JSON, RESOURCE_API, ApiError
from agent.slots.published import MAX_BITSTREAMS, MAX_SLOTS

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _invalid(name: str, field: str, detail: str) -> ApiError:
    return ApiError(422, f'ResourceSlice.resource.k8s.io "{name}" is invalid: {field}: {detail}')


def valid_resource_slice(body: object) -> JSON:
    """The slice if the real server's validation takes it; else 422 naming the field."""
    if not isinstance(body, dict) or body.get("kind") != "ResourceSlice" or body.get("apiVersion") != RESOURCE_API:
        raise ApiError(400, f"the body is not a {RESOURCE_API} ResourceSlice")
    obj = copy.deepcopy(body)
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    if not isinstance(name, str) or not name or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        raise _invalid(str(name), "metadata.name", "Invalid value")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise _invalid(name, "spec", "Required value")
    if not isinstance(spec.get("driver"), str) or not DNS_SUBDOMAIN.match(spec["driver"]):
        raise _invalid(name, "spec.driver", "Invalid value")
    pool = spec.get("pool") or {}
    if not pool.get("name") or not isinstance(pool.get("generation"), int) or pool.get("resourceSliceCount", 0) < 1:
        raise _invalid(name, "spec.pool", "Invalid value: name, generation and resourceSliceCount >= 1 are required")
    if sum(1 for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)) != 1:
        raise _invalid(name, "spec", "Invalid value: exactly one of nodeName, nodeSelector, allNodes, ...")
    devices = spec.get("devices") or []
    counter_sets = spec.get("sharedCounters") or []
    if devices and counter_sets:
        raise _invalid(name, "spec", "Invalid value: only one of devices or sharedCounters may be set")
    _check_counter_sets(name, counter_sets)
    limit = 64 if any(d.get("consumesCounters") or d.get("taints") for d in devices) else 128
    if len(devices) > limit:
        raise _invalid(name, "spec.devices", f"Too many: {len(devices)}: must have at most {limit} items")
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
        uses = device.get("consumesCounters") or []
        if len(uses) > 2:
            raise _invalid(name, f"{where}.consumesCounters", "Too many: must have at most 2 items")
        for u_index, use in enumerate(uses):
            if not _DNS_LABEL.match(str(use.get("counterSet", ""))) or not use.get("counters"):
                raise _invalid(name, f"{where}.consumesCounters[{u_index}]", "Invalid value: counterSet and counters")
    return obj


def _check_counter_sets(name: str, counter_sets: list[Any]) -> None:
    """The API's limits on a slice's shared counters: at most 8 sets of at most 32 counters, all DNS labels."""
    if len(counter_sets) > 8:
        raise _invalid(name, "spec.sharedCounters", f"Too many: {len(counter_sets)}: must have at most 8 items")
    for index, counter_set in enumerate(counter_sets):
        where = f"spec.sharedCounters[{index}]"
        if not _DNS_LABEL.match(str(counter_set.get("name", ""))):
            raise _invalid(name, f"{where}.name", "Invalid value: a lowercase RFC 1123 label")
        counters = counter_set.get("counters") or {}
        if not counters or len(counters) > 32:
            raise _invalid(name, f"{where}.counters", "Invalid value: 1 to 32 counters")
        if not all(_DNS_LABEL.match(c) for c in counters):
            raise _invalid(name, f"{where}.counters", "Invalid value: counter names are lowercase RFC 1123 labels")


def validate_event(event: JSON) -> None:
    """The real server's checks for a core/v1 Event, plus stricter ones: involvedObject kind and name,
    reason, a Normal/Warning type, a source or reporting component, RFC 3339 timestamps, count >= 1."""
    meta = event["metadata"]
    errors: list[tuple[str, str]] = []
    name = meta.get("name") or ""
    if not name:
        errors.append(("metadata.name", "Required value: name or generateName is required"))
    elif len(name) > 253 or not DNS_SUBDOMAIN.match(name):
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


def valid_node_state(body: object, namespace: str) -> JSON:
    """An FpgaNodeState as the CRD's schema admits it (its shape; the agent's schema module checks the rest)."""
    if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
        raise ApiError(400, "the body is not an object with metadata", "BadRequest")
    obj = copy.deepcopy(body)
    meta = obj["metadata"]
    name = meta.get("name")
    if not isinstance(name, str) or not DNS_SUBDOMAIN.match(name) or len(name) > 253:
        raise ApiError(422, f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must be given")
    if meta.setdefault("namespace", namespace) != namespace:
        raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
    spec = obj.get("spec")
    if (
        not isinstance(spec, dict)
        or not isinstance(spec.get("slots"), list)
        or not isinstance(spec.get("bitstreams"), dict)
    ):
        raise ApiError(422, "spec: Required value: spec.slots (a list) and spec.bitstreams (an object)")
    if len(spec["slots"]) > MAX_SLOTS or len(spec["bitstreams"]) > MAX_BITSTREAMS:
        raise ApiError(422, f"spec: Too many: spec.slots at most {MAX_SLOTS}, spec.bitstreams at most {MAX_BITSTREAMS}")
    return obj

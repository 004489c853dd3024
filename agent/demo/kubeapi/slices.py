"""ResourceSlices as the API server stand-in validates them: the parts a driver can get wrong, refused with 422
naming the field as the real server does (devices, their attributes, taints and counter uses; shared counters)."""

from __future__ import annotations

import copy
import re
from typing import Any

from agent.demo.kubeapi.objects import (
    _C_IDENTIFIER,
    _DNS_LABEL,
    _DNS_SUBDOMAIN,
    _QUALIFIED_NAME,
    JSON,
    RESOURCE_API,
    ApiError,
)


def _invalid(name: str, field: str, detail: str) -> ApiError:
    return ApiError(422, f'ResourceSlice.resource.k8s.io "{name}" is invalid: {field}: {detail}')


def _valid_resource_slice(body: object) -> JSON:
    """The slice if the real server's validation takes it; else 422 naming the field."""
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

"""ResourceClaims as a DRA driver reads them at NodePrepareResources, and its entries in their ``status.devices[]``.

:func:`parse_claim` keeps the allocated devices and configs of one driver (a claim's config wins over
its class's; within a source the later wins); the parameters stay as the API server gave them.
:class:`ClaimStatusWriter` patches only our own entries, guarded by the resourceVersion read (retried when the
claim changed).
"""

from __future__ import annotations

import datetime
import json
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiClient

from agent.errors import KubeError, is_object_name, shown, shown_claim
from agent.kube.client import REQUEST_TIMEOUT_S, api_status, describe_api_error
from agent.kube.core import CoreCalls

_SOURCES = {"FromClass": 0, "FromClaim": 1}
#: Limits of the API (ResourceClaim status validation).
MAX_CONDITIONS = 8
MAX_DATA_BYTES = 10 * 1024
MAX_MESSAGE = 32768
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]{0,1022}[A-Za-z0-9_])?")
#: Reads and patches of one write, when the claim changes between the two.
WRITE_ATTEMPTS = 4


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One device allocated to the claim: the request it serves (``request/subrequest`` for a choice)."""

    request: str
    pool: str
    device: str

    @property
    def parent(self) -> str:
        """The claim's request this device serves, without the subrequest of a ``firstAvailable`` choice."""
        return self.request.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """What a claim holds for one driver."""

    namespace: str
    name: str
    uid: str
    devices: tuple[AllocatedDevice, ...]
    #: (requests it applies to, empty: all; opaque parameters), class configs first, each in the API's order.
    configs: tuple[tuple[tuple[str, ...], Mapping[str, Any]], ...]
    #: (name, uid) of the pods that use the claim.
    reserved_for: tuple[tuple[str, str], ...]

    def parameters_for(self, device: AllocatedDevice) -> dict[str, Any]:
        """The driver's parameters for ``device``'s request, merged key by key, the winning config last."""
        merged: dict[str, Any] = {}
        for requests, parameters in self.configs:
            if not requests or device.request in requests or device.parent in requests:
                merged.update(parameters)
        return merged


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KubeError(f"{where} is not an object")
    return value


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise KubeError(f"{where} is not a list")
    return value


def parse_claim(raw: Mapping[str, Any], driver: str) -> ClaimInfo:
    """The claim's devices and configs of ``driver``; KubeError when it is malformed or not allocated."""
    meta = _mapping(raw.get("metadata"), "metadata")
    namespace, name, uid = (str(meta.get(k) or "") for k in ("namespace", "name", "uid"))
    who = shown_claim(namespace, name)
    status = _mapping(raw.get("status"), f"{who}: status")
    allocation = status.get("allocation")
    if allocation is None:
        raise KubeError(f"{who} is not allocated")
    devices_status = _mapping(_mapping(allocation, f"{who}: allocation").get("devices"), f"{who}: allocation.devices")
    devices = []
    for index, result in enumerate(_list(devices_status.get("results"), f"{who}: allocation.devices.results")):
        result = _mapping(result, f"{who}: allocation.devices.results[{index}]")
        if result.get("driver") != driver:
            continue
        request, pool, device = (result.get(k) for k in ("request", "pool", "device"))
        if not (isinstance(request, str) and isinstance(pool, str) and isinstance(device, str)) or not (
            request and pool and device
        ):
            raise KubeError(f"{who}: allocation.devices.results[{index}] lacks request, pool or device")
        devices.append(AllocatedDevice(request, pool, device))
    configs: list[tuple[int, int, tuple[str, ...], Mapping[str, Any]]] = []
    for index, config in enumerate(_list(devices_status.get("config"), f"{who}: allocation.devices.config")):
        where = f"{who}: allocation.devices.config[{index}]"
        config = _mapping(config, where)
        opaque = _mapping(config.get("opaque"), f"{where}.opaque")
        if opaque.get("driver") != driver:
            continue
        requests = tuple(str(r) for r in _list(config.get("requests"), f"{where}.requests"))
        parameters = _mapping(opaque.get("parameters"), f"{where}.opaque.parameters")
        source = _SOURCES.get(str(config.get("source")))
        if source is None:
            raise KubeError(f"{where} has source {shown(config.get('source'))}, not FromClass or FromClaim")
        configs.append((source, index, requests, types.MappingProxyType(dict(parameters))))
    configs.sort(key=lambda c: (c[0], c[1]))
    reserved = []
    for index, consumer in enumerate(_list(status.get("reservedFor"), f"{who}: status.reservedFor")):
        consumer = _mapping(consumer, f"{who}: status.reservedFor[{index}]")
        if consumer.get("resource") == "pods" and not consumer.get("apiGroup"):
            reserved.append((str(consumer.get("name") or ""), str(consumer.get("uid") or "")))
    return ClaimInfo(namespace, name, uid, tuple(devices), tuple((r, p) for _, _, r, p in configs), tuple(reserved))


class ClaimReader:
    """Reads the claim the kubelet names (blocking; call it off the event loop)."""

    def __init__(self, api_client: ApiClient, driver: str) -> None:
        self._calls = CoreCalls(api_client)
        self._driver = driver

    def read(self, namespace: str, name: str, uid: str) -> ClaimInfo:
        """The claim; KubeError when it is gone, was replaced (another UID), or is not allocated."""
        who = shown_claim(namespace, name)
        claim = parse_claim(self.read_raw(namespace, name), self._driver)
        if claim.uid != uid:
            raise KubeError(f"{who} was replaced: its UID is {shown(claim.uid)}, the kubelet asked for {shown(uid)}")
        return claim

    def read_raw(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The claim as the API server sends it (JSON); KubeError when it cannot exist, is gone or unreadable."""
        who = shown_claim(namespace, name)
        if not (is_object_name(namespace) and is_object_name(name)):
            raise KubeError(f"{who} cannot exist: a namespace and a claim name are DNS names")
        try:
            raw: Mapping[str, Any] = self._calls.read_namespaced_resource_claim(
                name, namespace, _request_timeout=REQUEST_TIMEOUT_S
            )
        except Exception as exc:
            if api_status(exc) == 404:
                raise KubeError(f"{who} does not exist (any more)") from None
            raise KubeError(f"{who} cannot be read: {describe_api_error(exc)[1]}") from exc
        return raw


@dataclass(frozen=True, slots=True)
class Condition:
    """One condition of a device entry (a metav1.Condition)."""

    type: str
    status: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """Our entry for one allocated device of the pool ``pool``."""

    pool: str
    device: str
    conditions: tuple[Condition, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)


def _condition(entry: DeviceStatus, condition: Condition, at: str) -> dict[str, Any]:
    if not _REASON.fullmatch(condition.reason):
        raise KubeError(f"device {shown(entry.device)}: condition reason {shown(condition.reason)} is not CamelCase")
    return {
        "type": condition.type,
        "status": "True" if condition.status else "False",
        "reason": condition.reason,
        "message": condition.message[:MAX_MESSAGE],
        "lastTransitionTime": at,
    }


def render_entry(driver: str, entry: DeviceStatus, at: str) -> dict[str, Any]:
    """One ``status.devices[]`` entry; KubeError naming the device when it breaks the API's limits."""
    rendered: dict[str, Any] = {"driver": driver, "pool": entry.pool, "device": entry.device}
    if len(entry.conditions) > MAX_CONDITIONS:
        raise KubeError(f"device {shown(entry.device)}: more than {MAX_CONDITIONS} conditions")
    if entry.conditions:
        rendered["conditions"] = [_condition(entry, c, at) for c in entry.conditions]
    if entry.data:
        size = len(json.dumps(dict(entry.data), separators=(",", ":")))
        if size > MAX_DATA_BYTES:
            raise KubeError(f"device {shown(entry.device)}: data of {size} bytes, more than {MAX_DATA_BYTES}")
        rendered["data"] = dict(entry.data)
    return rendered


def status_patch(claim: Mapping[str, Any], driver: str, entries: Sequence[DeviceStatus]) -> list[dict[str, Any]]:
    """The JSON patch that puts ``entries`` into ``claim`` (as read): each replaces our entry for its device (its
    conditions kept when it has none), or is added; guarded by the claim's resourceVersion."""
    at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rendered = [render_entry(driver, entry, at) for entry in entries]
    metadata = claim.get("metadata") or {}
    status = claim.get("status")
    if not isinstance(status, dict):
        raise KubeError(f"{shown_claim(str(metadata.get('namespace')), str(metadata.get('name')))} is not allocated")
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": metadata.get("resourceVersion")}
    ]
    existing = status.get("devices")
    if not isinstance(existing, list):
        return [*ops, {"op": "add", "path": "/status/devices", "value": rendered}]
    # status.devices is a list map: one entry per (driver, pool, device)
    indexes = {
        (e.get("driver"), e.get("pool"), e.get("device")): i for i, e in enumerate(existing) if isinstance(e, dict)
    }
    for entry in rendered:
        index = indexes.get((driver, entry["pool"], entry["device"]))
        if index is None:
            ops.append({"op": "add", "path": "/status/devices/-", "value": entry})
        else:
            ops.append({"op": "replace", "path": f"/status/devices/{index}", "value": {**existing[index], **entry}})
    return ops


class ClaimStatusWriter(ClaimReader):
    """Applies our device entries to a claim's status (blocking; call it off the event loop)."""

    def __init__(self, api_client: ApiClient, driver: str, field_manager: str) -> None:
        """``field_manager``: whose fields these are (entries applied again replace only that manager's)."""
        super().__init__(api_client, driver)
        self._manager = field_manager

    def apply(self, namespace: str, name: str, uid: str, entries: Sequence[DeviceStatus]) -> None:
        """KubeError when the claim is gone, was replaced (another UID) or the write is refused."""
        who = shown_claim(namespace, name)
        for attempt in range(WRITE_ATTEMPTS):
            claim = self.read_raw(namespace, name)
            if (claim.get("metadata") or {}).get("uid") != uid:
                raise KubeError(f"{who} was replaced: its UID is not {shown(uid)}")
            patch = status_patch(claim, self._driver, entries)
            try:
                self._calls.patch_namespaced_resource_claim_status(
                    name,
                    namespace,
                    patch,
                    field_manager=self._manager,
                    _request_timeout=REQUEST_TIMEOUT_S,
                )
                return
            except Exception as exc:
                status = api_status(exc)
                if status == 404:
                    raise KubeError(f"{who} does not exist (any more)") from None
                changed = status == 409 or (status == 422 and "test" in describe_api_error(exc)[1])
                if changed and attempt + 1 < WRITE_ATTEMPTS:
                    continue  # the claim changed since it was read: read it again
                raise KubeError(f"{who}: device status not written: {describe_api_error(exc)[1]}") from exc

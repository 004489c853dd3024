"""The driver's entries in a ResourceClaim's ``status.devices[]``: conditions and data, by JSON patch.

Only our own entries are patched, guarded by the resourceVersion read (retried when the claim changed).
:class:`ClaimWatcher` lists and watches every claim.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubernetes.client import ApiClient

from agent.errors import KubeError, shown, shown_claim
from agent.kube.claims import ClaimReader
from agent.kube.client import api_status, describe_api_error
from agent.kube.core import CoreCalls
from agent.kube.reflector import Reflector

T = TypeVar("T")

REQUEST_TIMEOUT_S = 10.0
#: Limits of the API (ResourceClaim status validation).
MAX_CONDITIONS = 8
MAX_DATA_BYTES = 10 * 1024
MAX_MESSAGE = 32768
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]{0,1022}[A-Za-z0-9_])?")
_JSON_PATCH = "application/json-patch+json"
#: Reads and patches of one write, when the claim changes between the two.
WRITE_ATTEMPTS = 4


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


class ClaimStatusWriter:
    """Applies our device entries to a claim's status (blocking; call it off the event loop)."""

    def __init__(self, api_client: ApiClient, driver: str, field_manager: str) -> None:
        """``field_manager``: whose fields these are (entries applied again replace only that manager's)."""
        self._calls = CoreCalls(api_client)
        self._reader = ClaimReader(api_client, driver)
        self._driver = driver
        self._manager = field_manager

    def apply(self, namespace: str, name: str, uid: str, entries: Sequence[DeviceStatus]) -> None:
        """KubeError when the claim is gone, was replaced (another UID) or the write is refused."""
        who = shown_claim(namespace, name)
        for attempt in range(WRITE_ATTEMPTS):
            claim = self._reader.read_raw(namespace, name)
            if (claim.get("metadata") or {}).get("uid") != uid:
                raise KubeError(f"{who} was replaced: its UID is not {shown(uid)}")
            patch = status_patch(claim, self._driver, entries)
            try:
                self._calls.patch_namespaced_resource_claim_status(
                    name,
                    namespace,
                    patch,
                    field_manager=self._manager,
                    _content_type=_JSON_PATCH,
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


class ClaimWatcher(Reflector[T]):
    """All ResourceClaims, in every namespace (each parsed by the caller, in the worker thread)."""

    def __init__(self, api_client: ApiClient, *, parse: Callable[[Mapping[str, Any]], T], **options: Any) -> None:
        core = CoreCalls(api_client)
        super().__init__(
            name="resourceclaims",
            description="ResourceClaims",
            list_func=core.list_resource_claim_for_all_namespaces,
            parse=parse,
            **options,
        )

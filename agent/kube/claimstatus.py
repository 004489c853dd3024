"""The driver's entries in a ResourceClaim's ``status.devices[]``: conditions and data, by server-side apply.

Each entry names one allocated device (driver, pool, device) and carries at most 8
conditions and a ``data`` object of at most 10 KiB. The agent writes them with a
server-side apply of the ``status`` subresource under a field manager of its own, so
entries of other drivers, and fields written under another of our managers, stay as
they are. :class:`ClaimWatcher` lists and watches every claim (the binding-condition
path reads the allocations of this node's pool from it).
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubernetes.client import ApiClient

from agent.errors import KubeError, is_object_name, shown, shown_claim
from agent.kube.client import api_status, describe_api_error
from agent.kube.core import CoreCalls
from agent.kube.objectwatch import ObjectWatcher

T = TypeVar("T")

REQUEST_TIMEOUT_S = 10.0
#: Limits of the API (ResourceClaim status validation).
MAX_CONDITIONS = 8
MAX_DATA_BYTES = 10 * 1024
MAX_MESSAGE = 32768
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]{0,1022}[A-Za-z0-9_])?")
_APPLY = "application/apply-patch+yaml"


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


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def status_apply(driver: str, namespace: str, name: str, uid: str, entries: Sequence[DeviceStatus]) -> dict[str, Any]:
    """The apply body for ``entries``; KubeError naming the device when one breaks the API's limits."""
    at = _now()
    devices = []
    for entry in entries:
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
        devices.append(rendered)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "status": {"devices": devices},
    }


class ClaimStatusWriter:
    """Applies our device entries to a claim's status (blocking; call it off the event loop)."""

    def __init__(self, api_client: ApiClient, driver: str, field_manager: str) -> None:
        """``field_manager``: whose fields these are (entries applied again replace only that manager's)."""
        self._calls = CoreCalls(api_client)
        self._driver = driver
        self._manager = field_manager

    def apply(self, namespace: str, name: str, uid: str, entries: Sequence[DeviceStatus]) -> None:
        """KubeError when the claim is gone, was replaced (another UID) or the write is refused."""
        who = shown_claim(namespace, name)
        if not (is_object_name(namespace) and is_object_name(name)):
            raise KubeError(f"{who} cannot exist: a namespace and a claim name are DNS names")
        body = json.dumps(status_apply(self._driver, namespace, name, uid, entries))
        try:
            self._calls.patch_namespaced_resource_claim_status(
                name,
                namespace,
                body,
                field_manager=self._manager,
                force=True,
                _content_type=_APPLY,
                _request_timeout=REQUEST_TIMEOUT_S,
            )
        except Exception as exc:
            if api_status(exc) == 404:
                raise KubeError(f"{who} does not exist (any more)") from None
            raise KubeError(f"{who}: device status not written: {describe_api_error(exc)[1]}") from exc


class ClaimWatcher(ObjectWatcher[T]):
    """All ResourceClaims, in every namespace (each parsed by the caller, in the worker thread)."""

    def __init__(self, api_client: ApiClient, *, parse: Callable[[Mapping[str, Any]], T], **options: Any) -> None:
        core = CoreCalls(api_client)
        super().__init__(
            "resourceclaims",
            "ResourceClaims",
            list_func=core.list_resource_claim_for_all_namespaces,
            parse=parse,
            **options,
        )

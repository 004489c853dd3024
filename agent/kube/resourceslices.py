"""This node's DRA devices as a ResourceSlice (``resource.k8s.io/v1``), kept in place.

One pool per node in one slice ``<node>-<driver>``, owned by the Node, a device per slot.
The slice is created when missing and replaced in place (same pool generation) when its
devices differ. The kubelet deletes a node's slices when it starts and a driver's 30 s after
its last connection drops, so the publisher checks every ``interval_s`` and after every
change, and puts it back. An unhealthy slot carries a ``DeviceTaint``. Attribute names and
values are checked against the API's limits here, so a bad value is a clear error naming the
device, not a refused slice.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiClient

from agent.errors import KubeError, shown
from agent.kube.client import api_status, describe_api_error
from agent.kube.core import CoreCalls

logger = logging.getLogger(__name__)

GROUP_VERSION = "resource.k8s.io/v1"
#: Limits of the API (ResourceSlice validation).
MAX_DEVICES = 128
MAX_ATTRIBUTES = 32
MAX_STRING = 64
MAX_TAINTS = 16
MAX_BINDING_CONDITIONS = 4
_ATTRIBUTE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
#: A capacity name as we publish them: the driver's domain (a DNS subdomain), "/", a C identifier of <= 32.
_CAPACITY_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?/[A-Za-z_][A-Za-z0-9_]{0,31}")
_DEVICE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: How often the slice is checked without a change of the devices: a safety net only, since a kubelet
#: that restarts (and deletes the node's slices) registers the driver again, and the registration hook
#: republishes the slice at once.
CHECK_INTERVAL_S = 60.0
REQUEST_TIMEOUT_S = 10.0

AttributeValue = str | int | bool


#: The effects a device taint may have: NoSchedule keeps new claims off the device, NoExecute also evicts.
TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A taint on a device (DRADeviceTaints, beta in 1.36): the scheduler allocates no claim to a device with a
    NoSchedule taint the claim does not tolerate, without any CEL in the class."""

    key: str
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device of the pool: its name (a DNS label), its attributes, its taints and its capacities."""

    name: str
    attributes: Mapping[str, AttributeValue]
    taints: tuple[DeviceTaint, ...] = ()
    #: Capacity name (``<domain>/<C identifier>``) -> amount.
    capacity: Mapping[str, int] = field(default_factory=dict)
    #: Binding conditions (DRADeviceBindingConditions): the scheduler binds the pod once all are True on the
    #: claim's device status, and gives the allocation back when a failure condition is; with ``bindsToNode``.
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()


def _attribute(device: str, name: str, value: AttributeValue) -> dict[str, AttributeValue]:
    if not _ATTRIBUTE_NAME.fullmatch(name):
        raise KubeError(f"device {shown(device)}: attribute name {shown(name)} is not a C identifier of <= 32")
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if len(value) > MAX_STRING:
        raise KubeError(f"device {shown(device)}: attribute {name} is {len(value)} characters, more than {MAX_STRING}")
    return {"string": value}


def _capacity(device: str, name: str, value: int) -> dict[str, str]:
    if not _CAPACITY_NAME.fullmatch(name):
        raise KubeError(f"device {shown(device)}: capacity name {shown(name)} is not <domain>/<C identifier of <= 32>")
    if value < 0:
        raise KubeError(f"device {shown(device)}: capacity {name} is negative")
    return {"value": str(value)}


def slice_spec(driver: str, node: str, devices: Sequence[SliceDevice]) -> dict[str, Any]:
    """The slice's ``spec`` for these devices; KubeError naming the device when one breaks the API's limits."""
    if len(devices) > MAX_DEVICES:
        raise KubeError(f"{len(devices)} devices do not fit one ResourceSlice (at most {MAX_DEVICES})")
    rendered = []
    for device in devices:
        if not _DEVICE_NAME.fullmatch(device.name):
            raise KubeError(f"device name {shown(device.name)} is not a DNS label")
        if len(device.attributes) + len(device.capacity) > MAX_ATTRIBUTES:
            raise KubeError(f"device {shown(device.name)} has more than {MAX_ATTRIBUTES} attributes and capacities")
        attributes = {k: _attribute(device.name, k, v) for k, v in sorted(device.attributes.items())}
        entry: dict[str, Any] = {"name": device.name, "attributes": attributes}
        if device.capacity:
            entry["capacity"] = {k: _capacity(device.name, k, v) for k, v in sorted(device.capacity.items())}
        if device.taints:
            if len(device.taints) > MAX_TAINTS or any(t.effect not in TAINT_EFFECTS for t in device.taints):
                raise KubeError(
                    f"device {shown(device.name)}: at most {MAX_TAINTS} taints, each NoSchedule or NoExecute"
                )
            entry["taints"] = [{"key": t.key, "effect": t.effect} for t in device.taints]
        if device.binding_conditions:
            if (
                not device.binding_failure_conditions
                or max(len(device.binding_conditions), len(device.binding_failure_conditions)) > MAX_BINDING_CONDITIONS
            ):
                raise KubeError(
                    f"device {shown(device.name)}: binding conditions need failure conditions, "
                    f"at most {MAX_BINDING_CONDITIONS} of each"
                )
            entry["bindsToNode"] = True
            entry["bindingConditions"] = list(device.binding_conditions)
            entry["bindingFailureConditions"] = list(device.binding_failure_conditions)
        rendered.append(entry)
    return {
        "driver": driver,
        "nodeName": node,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": rendered,
    }


class ResourceSlicePublisher:
    """Keeps ``<node>-<driver>`` equal to the devices last set (see the module docstring)."""

    def __init__(self, api_client: ApiClient, driver: str, node: str, *, interval_s: float | None = None) -> None:
        """``interval_s``: how often the slice is checked without a change (default ``CHECK_INTERVAL_S``)."""
        self._calls = CoreCalls(api_client)
        self.driver = driver
        self.node = node
        self.name = f"{node}-{driver}"
        self._interval_s = CHECK_INTERVAL_S if interval_s is None else interval_s
        self._lock = threading.Lock()
        self._spec: dict[str, Any] | None = None
        self._changed = asyncio.Event()
        self._owner: dict[str, Any] | None = None
        #: While this says True, the slice is left alone (a newer instance of the driver keeps it: an update).
        self.standby: Callable[[], bool] = lambda: False

    def set_devices(self, devices: Sequence[SliceDevice]) -> None:
        """The devices to publish, on the event loop (checked now: KubeError naming the bad one; the last
        good set stays)."""
        spec = slice_spec(self.driver, self.node, devices)
        with self._lock:
            if spec == self._spec:
                return
            self._spec = spec
        self._changed.set()

    def refresh(self) -> None:
        """Check the slice now (on the event loop): the kubelet has just registered the driver, and a kubelet
        that starts deletes the node's slices."""
        self._changed.set()

    def reconcile(self) -> str:
        """One check (blocking): ``created``, ``replaced``, ``unchanged`` or ``nothing to publish``."""
        with self._lock:
            spec = self._spec
        if spec is None:
            return "nothing to publish"
        if self.standby():
            return "left to a newer instance"
        timeout = REQUEST_TIMEOUT_S
        try:
            current = self._calls.read_resource_slice(self.name, _request_timeout=timeout)
        except Exception as exc:
            if api_status(exc) != 404:
                raise
            current = None
        if current is None:
            body = {"apiVersion": GROUP_VERSION, "kind": "ResourceSlice", "metadata": self._metadata(), "spec": spec}
            self._calls.create_resource_slice(body, _request_timeout=timeout)
            logger.info("ResourceSlice %s created with %d device(s)", self.name, len(spec["devices"]))
            return "created"
        if current.get("spec") == spec:
            return "unchanged"
        current["spec"] = spec
        self._calls.replace_resource_slice(self.name, current, _request_timeout=timeout)
        logger.info("ResourceSlice %s updated: %d device(s)", self.name, len(spec["devices"]))
        return "replaced"

    def _metadata(self) -> dict[str, Any]:
        if self._owner is None:
            try:
                node = self._calls.read_node(self.node, _request_timeout=REQUEST_TIMEOUT_S)
                uid = node["metadata"]["uid"]
                self._owner = {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid, "controller": True}
            except Exception as exc:  # no owner: the slice still works, it only outlives a deleted Node
                logger.warning("ResourceSlice %s: Node %s not readable (%s)", self.name, self.node, exc)
        meta: dict[str, Any] = {"name": self.name}
        if self._owner is not None:
            meta["ownerReferences"] = [self._owner]
        return meta

    async def run(self, stop: asyncio.Event) -> None:
        """Reconcile at once, after every change of the devices and every ``interval_s``, until ``stop``."""
        failing = False
        while not stop.is_set():
            self._changed.clear()
            try:
                await asyncio.to_thread(self.reconcile)
                if failing:
                    logger.info("ResourceSlice %s published again", self.name)
                failing = False
            except Exception as exc:
                if not failing:  # logged once per outage
                    kind, text = describe_api_error(exc)
                    logger.warning("ResourceSlice %s not published (%s: %s); retrying", self.name, kind, text)
                failing = True
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._changed.wait())]
            await asyncio.wait(waiters, timeout=self._interval_s, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()

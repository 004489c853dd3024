"""This node's DRA devices as a ResourceSlice (``resource.k8s.io/v1``), kept in place.

One pool per node: slice ``<node>-<driver>`` (owned by the Node, a device per slot) and, when devices
share counters, ``<node>-<driver>-counters``. Slices are created when missing, replaced when they differ,
and checked periodically since the kubelet deletes them. Values are checked against the API's limits here.
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
from agent.kube.client import REQUEST_TIMEOUT_S, api_status, describe_api_error
from agent.kube.core import CoreCalls

logger = logging.getLogger(__name__)

GROUP_VERSION = "resource.k8s.io/v1"
#: Limits of the API (ResourceSlice validation).
MAX_DEVICES = 128
#: ... when a device consumes counters or has taints; counter sets per slice, counters per set, uses per device.
MAX_DEVICES_WITH_COUNTERS = 64
MAX_COUNTER_SETS = 8
MAX_COUNTERS = 32
MAX_COUNTER_USES = 2
MAX_ATTRIBUTES = 32
MAX_STRING = 64
MAX_TAINTS = 16
MAX_BINDING_CONDITIONS = 4
#: The effects a device taint may have: NoSchedule keeps new claims off the device, NoExecute also evicts.
TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_ATTRIBUTE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
#: A capacity name as we publish them: the driver's domain (a DNS subdomain), "/", a C identifier of <= 32.
_CAPACITY_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?/[A-Za-z_][A-Za-z0-9_]{0,31}")
_DEVICE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: How often the slice is checked without a change of the devices (a safety net: registration republishes).
CHECK_INTERVAL_S = 60.0

AttributeValue = str | int | bool


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A taint on a device (DRADeviceTaints)."""

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
    #: Counters the device consumes while allocated: (counter set, counter names), one of each counter.
    consumes: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class CounterSet:
    """Counters devices of the pool share (DRAPartitionableDevices): ``name`` and its counters, one unit each."""

    name: str
    counters: tuple[str, ...]


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


def counters_spec(driver: str, node: str, sets: Sequence[CounterSet]) -> dict[str, Any]:
    """The spec of the pool's second slice, holding its counter sets; KubeError naming a set that breaks a limit."""
    if len(sets) > MAX_COUNTER_SETS:
        raise KubeError(f"{len(sets)} counter sets do not fit one ResourceSlice (at most {MAX_COUNTER_SETS})")
    rendered = []
    for counter_set in sets:
        names = (counter_set.name, *counter_set.counters)
        if not all(_DEVICE_NAME.fullmatch(n) for n in names) or not 0 < len(counter_set.counters) <= MAX_COUNTERS:
            raise KubeError(f"counter set {shown(counter_set.name)}: 1 to {MAX_COUNTERS} counters, all DNS labels")
        counters = {name: {"value": "1"} for name in counter_set.counters}
        rendered.append({"name": counter_set.name, "counters": counters})
    return {"driver": driver, "nodeName": node, "pool": _pool(node, 2), "sharedCounters": rendered}


def _pool(node: str, slices: int) -> dict[str, Any]:
    return {"name": node, "generation": 1, "resourceSliceCount": slices}


def slice_spec(driver: str, node: str, devices: Sequence[SliceDevice], *, slices: int = 1) -> dict[str, Any]:
    """The slice's ``spec`` for these devices (``slices``: how many slices the pool has); KubeError naming the
    device when one breaks the API's limits."""
    limit = MAX_DEVICES_WITH_COUNTERS if any(d.consumes or d.taints for d in devices) else MAX_DEVICES
    if len(devices) > limit:
        raise KubeError(f"{len(devices)} devices do not fit one ResourceSlice (at most {limit})")
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
        if device.consumes:
            if len(device.consumes) > MAX_COUNTER_USES:
                raise KubeError(f"device {shown(device.name)} consumes more than {MAX_COUNTER_USES} counter sets")
            entry["consumesCounters"] = [
                {"counterSet": name, "counters": {c: {"value": "1"} for c in counters}}
                for name, counters in device.consumes
            ]
        rendered.append(entry)
    return {"driver": driver, "nodeName": node, "pool": _pool(node, slices), "devices": rendered}


class ResourceSlicePublisher:
    """Keeps the pool's slices equal to the devices last set."""

    def __init__(self, api_client: ApiClient, driver: str, node: str, *, interval_s: float = CHECK_INTERVAL_S) -> None:
        self._calls = CoreCalls(api_client)
        self.driver = driver
        self.node = node
        self.name = f"{node}-{driver}"
        self.counters_name = f"{self.name}-counters"
        self._interval_s = interval_s
        self._lock = threading.Lock()
        #: slice name -> spec, the devices' slice first; None until devices are set
        self._specs: dict[str, dict[str, Any]] | None = None
        #: Whether a counters' slice may be there (one of an earlier instance too): checked once, then tracked.
        self._counters_left = True
        self._changed = asyncio.Event()
        self._owner: dict[str, Any] | None = None
        #: While this says True, the slice is left alone (a newer instance of the driver keeps it: an update).
        self.standby: Callable[[], bool] = lambda: False

    def set_devices(self, devices: Sequence[SliceDevice], counters: Sequence[CounterSet] = ()) -> None:
        """The devices (and counter sets) to publish, on the event loop; KubeError naming a bad one (the last good
        set stays)."""
        specs = {self.name: slice_spec(self.driver, self.node, devices, slices=2 if counters else 1)}
        if counters:
            specs[self.counters_name] = counters_spec(self.driver, self.node, counters)
            self._counters_left = True
        with self._lock:
            if specs == self._specs:
                return
            self._specs = specs
        self._changed.set()

    def refresh(self) -> None:
        """Check the slice now (on the event loop), as after the kubelet registered the driver."""
        self._changed.set()

    def reconcile(self) -> str:
        """One check (blocking): what was done to the slices (``created``, ``replaced``, ``deleted``, comma-separated),
        ``unchanged`` or ``nothing to publish``. The counters come first: a device never names a set not there."""
        with self._lock:
            specs = self._specs
        if specs is None:
            return "nothing to publish"
        if self.standby():
            return "left to a newer instance"
        done = [self._put(name, specs[name]) for name in sorted(specs, key=lambda n: n != self.counters_name)]
        if self.counters_name not in specs and self._counters_left:
            try:
                self._calls.delete_resource_slice(self.counters_name, _request_timeout=REQUEST_TIMEOUT_S)
            except Exception as exc:
                if api_status(exc) != 404:
                    raise
            else:
                logger.info("ResourceSlice %s deleted: no counters to share", self.counters_name)
                done.append("deleted")
            self._counters_left = False
        changed = [d for d in done if d != "unchanged"]
        return ",".join(changed) if changed else "unchanged"

    def _put(self, name: str, spec: dict[str, Any]) -> str:
        timeout = REQUEST_TIMEOUT_S
        try:
            current = self._calls.read_resource_slice(name, _request_timeout=timeout)
        except Exception as exc:
            if api_status(exc) != 404:
                raise
            current = None
        what = (
            f"{len(spec['devices'])} device(s)"
            if "devices" in spec
            else f"{len(spec['sharedCounters'])} counter set(s)"
        )
        if current is None:
            body = {
                "apiVersion": GROUP_VERSION,
                "kind": "ResourceSlice",
                "metadata": self._metadata(name),
                "spec": spec,
            }
            self._calls.create_resource_slice(body, _request_timeout=timeout)
            logger.info("ResourceSlice %s created with %s", name, what)
            return "created"
        if current.get("spec") == spec:
            return "unchanged"
        current["spec"] = spec
        self._calls.replace_resource_slice(name, current, _request_timeout=timeout)
        logger.info("ResourceSlice %s updated: %s", name, what)
        return "replaced"

    def _metadata(self, name: str) -> dict[str, Any]:
        if self._owner is None:
            try:
                node = self._calls.read_node(self.node, _request_timeout=REQUEST_TIMEOUT_S)
                uid = node["metadata"]["uid"]
                self._owner = {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid, "controller": True}
            except Exception as exc:  # no owner: the slice still works, it only outlives a deleted Node
                logger.warning("ResourceSlice %s: Node %s not readable (%s)", self.name, self.node, exc)
        meta: dict[str, Any] = {"name": name}
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

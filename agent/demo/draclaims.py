"""The cluster's part in ``fpga-agent demo dra``: the published slice as the scheduler reads it, claims
allocated from it as the cache-aware claim asks, and the kubelet's prepare and unprepare of them."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.app import Agent
from agent.demo.kubeapi.objects import JSON
from agent.demo.kubeapi.server import KubeApiStandIn
from agent.demo.kubelet.dra import DraKubelet
from agent.dra.constants import DRIVER_NAME
from agent.output.tables import format_table
from agent.simfpga.fabric import PLATFORM

NAMESPACE = "default"
#: The request of the claim and its alternatives, in the order the allocator tries them.
REQUEST = "fpga"
ALTERNATIVES = ("cached", "any")
#: The (selector-less) class both alternatives name.
DEVICE_CLASS = "fpga-slot-cached"
WAIT_S = 15.0
POLL_S = 0.02
#: The slice's attributes in the order the device table shows them.
COLUMNS = ["name", "platform", "card", "numa", "bitstream"]

Attributes = dict[str, str | int | bool]


async def until(what: str, check: Callable[[], bool]) -> None:
    """Wait until ``check()`` holds; the demo polls what it does not own (files, other threads' state)."""
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"demo: {what} did not happen within {WAIT_S:.0f} s")
        await asyncio.sleep(POLL_S)


class SliceView:
    """The node's ResourceSlice as the API server stand-in holds it."""

    def __init__(self, api: KubeApiStandIn, name: str) -> None:
        self.api = api
        self.name = name

    def _entries(self) -> list[dict[str, Any]]:
        found = self.api.resource_slice(self.name)
        return [] if found is None else list(found["spec"]["devices"])

    def devices(self) -> dict[str, Attributes]:
        """Device name -> attribute values, in slice order (the order the allocator tries them)."""
        return {
            device["name"]: {key: next(iter(value.values())) for key, value in device.get("attributes", {}).items()}
            for device in self._entries()
        }

    def attribute(self, device: str, key: str) -> str | int | bool | None:
        return self.devices().get(device, {}).get(key)

    def taints(self, device: str) -> list[str]:
        """The device's taints as ``key:effect`` (what keeps the scheduler from allocating it)."""
        return [
            f"{taint['key']}:{taint['effect']}"
            for entry in self._entries()
            if entry["name"] == device
            for taint in entry.get("taints") or []
        ]

    def summary(self) -> str:
        found = self.api.resource_slice(self.name)
        assert found is not None
        spec = found["spec"]
        return (
            f"ResourceSlice {self.name}: driver {spec['driver']}, node {spec['nodeName']}, "
            f"pool {spec['pool']['name']} (generation {spec['pool']['generation']}), {len(spec['devices'])} devices"
        )

    def table(self) -> str:
        rows: list[dict[str, object]] = [{"name": name, **attrs} for name, attrs in self.devices().items()]
        for row in rows:
            row["bitstream"] = row.get("bitstream") or None
        return format_table(COLUMNS, rows)


def allocate(devices: dict[str, Attributes], bitstream: str, taken: Collection[str]) -> tuple[str, str]:
    """(device, subrequest) of the cache-aware claim: the first free device holding ``bitstream`` (``cached``),
    else the first free one (``any``)."""
    selectors: dict[str, Callable[[Attributes], bool]] = {
        "cached": lambda attrs: attrs.get("bitstream") == bitstream,
        "any": lambda attrs: attrs.get("platform") == PLATFORM,
    }
    for subrequest in ALTERNATIVES:
        for name, attrs in devices.items():
            if name not in taken and selectors[subrequest](attrs):
                return name, subrequest
    raise RuntimeError(f"demo: no free device for a claim of {bitstream}")


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    """A claim the kubelet asked the driver to prepare, and the answer."""

    name: str
    uid: str
    device: str
    subrequest: str
    cdi_ids: tuple[str, ...]
    error: str
    took_ms: float


class ClaimRun:
    """Pods with a claim each: made in the API server, allocated, prepared and released through the kubelet."""

    def __init__(self, api: KubeApiStandIn, kubelet: DraKubelet, agent: Agent, node: str) -> None:
        self.api = api
        self.kubelet = kubelet
        self.agent = agent
        self.node = node
        #: device -> claim name, for the claims prepared and not yet released
        self.allocated: dict[str, str] = {}

    async def prepare(self, name: str, device: str, subrequest: str, bitstream: str) -> PreparedClaim:
        """Bind a pod whose claim was allocated ``device`` through ``subrequest``, and prepare the claim."""
        pod = self.api.add_pod(f"{name}-pod", namespace=NAMESPACE, node=self.node)
        kube = self.agent.kube
        assert kube is not None  # DRA mode has API access
        await until(
            f"pod {pod['metadata']['name']} in the agent's pod cache",
            lambda: kube.pods.get(NAMESPACE, f"{name}-pod") is not None,
        )
        claim = self.api.put_resource_claim(cached_first_claim(name, self.node, device, subrequest, bitstream, pod))
        uid: str = claim["metadata"]["uid"]
        started = time.monotonic()
        answer: Any = await asyncio.to_thread(self.kubelet.prepare, (NAMESPACE, uid, name))
        took_ms = (time.monotonic() - started) * 1000
        result = answer.claims[uid]
        cdi_ids = tuple(cdi for d in result.devices for cdi in d.cdi_device_ids)
        if not result.error:
            self.allocated[device] = name
        return PreparedClaim(name, uid, device, subrequest, cdi_ids, result.error, took_ms)

    async def unprepare(self, claim: PreparedClaim) -> str:
        """The pod ended: the kubelet releases its claim. Returns the driver's error ("" when released)."""
        answer: Any = await asyncio.to_thread(self.kubelet.unprepare, (NAMESPACE, claim.uid, claim.name))
        error: str = answer.claims[claim.uid].error
        if not error:
            self.allocated.pop(claim.device, None)
        return error

    def holder(self, device: str) -> str:
        """Who the agent says holds the slot of ``device`` ("nobody" when free)."""
        state = next((s for s in self.agent.registry.snapshot() if s.slot.id == device), None)
        return "unknown slot" if state is None else state.holder.describe() if state.holder is not None else "nobody"

    def loaded(self, device: str) -> str:
        """The bitstream the agent says the slot holds ("nothing" when empty)."""
        state = next((s for s in self.agent.registry.snapshot() if s.slot.id == device), None)
        return "unknown slot" if state is None else state.bitstream or "nothing"


def cached_first_claim(name: str, node: str, device: str, subrequest: str, bitstream: str, pod: JSON) -> JSON:
    """The claim ``daemonset/examples/dra/cached-first.yaml`` makes, as the scheduler leaves it allocated."""
    config = {"requests": [REQUEST], "opaque": {"driver": DRIVER_NAME, "parameters": {"bitstream": bitstream}}}
    alternatives = [{"name": sub, "deviceClassName": DEVICE_CLASS} for sub in ALTERNATIVES]
    result = {"request": f"{REQUEST}/{subrequest}", "driver": DRIVER_NAME, "pool": node, "device": device}
    return {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "kind": "ResourceClaim",
        "spec": {"devices": {"requests": [{"name": REQUEST, "firstAvailable": alternatives}], "config": [config]}},
        "status": {
            "allocation": {"devices": {"results": [result], "config": [{"source": "FromClaim", **config}]}},
            "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}],
        },
    }


class CdiView:
    """The CDI specs the driver writes for the container runtime, one file per prepared claim."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, uid: str) -> Path:
        return self.directory / f"{DRIVER_NAME}-{uid}.json"

    def exists(self, uid: str) -> bool:
        return self.path(uid).exists()

    def describe(self, uid: str) -> list[str]:
        """What the container of a prepared claim gets: its device nodes and environment."""
        spec = json.loads(self.path(uid).read_text())
        lines = [f"CDI spec {self.path(uid).name}: kind {spec['kind']}"]
        for device in spec["devices"]:
            edits = device["containerEdits"]
            for node in edits.get("deviceNodes", []):
                lines.append(f"device {node['hostPath']} -> {node['path']} ({node['permissions']})")
            lines.extend(f"env {entry}" for entry in edits.get("env", []))
        return lines

"""Helpers for the reconfiguration tests: what the fabric did, what the checkpoint says, agent restarts."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp
from agent.app import Agent
from agent.bitstreams.declaration import Declaration
from agent.bitstreams.publish import push_bitstream
from agent.bitstreams.reference import parse_reference
from agent.bitstreams.registry import RegistryClient
from agent.config import Config
from agent.demo.kubelet.nodepods import NodePods, PostedEvent
from agent.programming.catalog import Catalog
from agent.simfpga import SimEvent, SimFabric, SimSlotInfo
from agent.slots import checkpoint
from agent.slots.model import SlotId
from agent.slots.registry import SlotRegistry, SlotState
from tests.fakes import RESOURCE_NAME, KubeletStandIn
from tests.integration.bitstreams.servers import Registry

WAIT_S = 5.0
NS = "default"
ANNOTATION = "example.com/fpga-bitstream"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"


def slot(card: int, region: int) -> str:
    return f"simcard{card}-slot{region}"


@dataclass(frozen=True, slots=True)
class Bitstream:
    """A catalog entry the tests ask for, with what a slot reports once it is loaded."""

    name: str
    accelerator_id: str


@dataclass(frozen=True, slots=True)
class Bitstreams:
    """The node catalog of a test and the bitstreams in it."""

    catalog: Catalog
    accel_a: Bitstream
    accel_b: Bitstream
    accel_c: Bitstream
    #: built for another platform than the simulated slots'
    foreign: Bitstream

    def path_of(self, name: str) -> Path:
        """The stored file of a catalog entry."""
        return self.catalog.directory / self.catalog.resolve(name).file


async def push_artifact(
    session: aiohttp.ClientSession, registry: Registry, path: Path, name: str, platform: str, **spec: object
) -> Declaration:
    """Push ``path`` to the registry as ``catalog push`` does (accelerator ``accel-<name>``); its declaration,
    with ``spec`` fields (e.g. ``prefetch``) changed."""
    reference = parse_reference(f"{registry.address}/fpga/{name}:1.0")
    client = RegistryClient(session, [registry.address])
    pushed = await push_bitstream(client, path, name, platform, f"accel-{name}", reference, None)
    return dataclasses.replace(pushed, **spec)  # type: ignore[arg-type]


def wants(name: str) -> dict[str, str]:
    """Pod annotations asking for ``name`` for every container."""
    return {ANNOTATION: name}


# ------------------------------------------------------------------- the fabric
@dataclass(frozen=True, slots=True)
class FabricChange:
    """One add/change/remove the simulated hardware reported."""

    event: SimEvent
    slot: str
    loaded: str | None


class FabricLog:
    """Everything a fabric reports, in order, and every reconfiguration asked of it.

    A reconfiguration shows as two changes of one slot: the content becomes unknown
    (loaded None) when it starts, and the result (the accelerator, or None after a
    failure) when it ends. Waiters are woken on each report.
    """

    def __init__(self, fabric: SimFabric) -> None:
        self.changes: list[FabricChange] = []
        #: slots in the order their reconfiguration was asked for
        self.programs: list[str] = []
        self.hooks: list[Callable[[FabricChange], None]] = []
        self._changed = asyncio.Event()
        self._fabric = fabric
        self._unsubscribe = fabric.subscribe(self._record)
        program = fabric.program

        async def counted_program(card_name: str, region: str, accelerator_id: str) -> None:
            self.programs.append(f"{card_name}-{region}")
            await program(card_name, region, accelerator_id)

        fabric.program = counted_program  # type: ignore[method-assign]

    def _record(self, event: SimEvent, info: SimSlotInfo) -> None:
        change = FabricChange(event, f"{info.card}-{info.region}", info.loaded)
        self.changes.append(change)
        for hook in list(self.hooks):
            hook(change)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def close(self) -> None:
        self._unsubscribe()
        del self._fabric.program

    def programming(self, since: int = 0) -> list[FabricChange]:
        """The reconfiguration steps (changes) reported since index ``since``."""
        return [c for c in self.changes[since:] if c.event is SimEvent.CHANGE]

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        async with asyncio.timeout(timeout_s):
            while not predicate():
                changed = self._changed
                await changed.wait()


@contextlib.contextmanager
def fabric_log(fabric: SimFabric) -> Iterator[FabricLog]:
    log = FabricLog(fabric)
    try:
        yield log
    finally:
        log.close()


# --------------------------------------------------------------- the registry
async def until(what: str, check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """Wait for ``check`` on what the loop is not told of (files on disk, the API server's store)."""
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                if check():
                    return
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"no {what} within {timeout_s} s") from None


async def wait_registry(registry: SlotRegistry, predicate: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """Wait (on the registry's change notifications) until ``predicate()`` holds."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await registry.wait_for_change(registry.version)


def state(registry: SlotRegistry, slot_id: str) -> SlotState:
    found = registry.get(SlotId(slot_id))
    assert found is not None, f"slot {slot_id} is not listed"
    return found


def observable(registry: SlotRegistry) -> dict[str, tuple[object, ...]]:
    """Per slot, what programming may change: hardware view, content, taint, health."""
    return {
        s.slot.id: (s.slot, s.present, s.content, s.taint, s.health, s.accelerator_id, s.bitstream)
        for s in registry.snapshot()
    }


# ---------------------------------------------------------------- the kubelet
def held_by(kubelet: KubeletStandIn, pod: str, container: str) -> list[str]:
    """The device IDs the stand-in allocated to a container."""
    return list(kubelet.assignments[(NS, pod)][container][RESOURCE_NAME])


def ever_unhealthy(kubelet: KubeletStandIn, slot_id: str) -> bool:
    """Some ListAndWatch update on the current connection listed ``slot_id`` Unhealthy."""
    conn = kubelet.plugins[RESOURCE_NAME]
    return any(slot_id == d.ID and d.health == UNHEALTHY for _, devices in conn.updates for d in devices)


async def pre_start(kubelet: KubeletStandIn, device_ids: list[str]) -> dp.PreStartContainerResponse:
    """A PreStartContainer as the kubelet sends it (e.g. when it retries a container start)."""
    stub = kubelet.plugins[RESOURCE_NAME].stub
    return await stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=device_ids), timeout=30.0)


def rpc_error(exc: BaseException) -> grpc.aio.AioRpcError:
    assert isinstance(exc, grpc.aio.AioRpcError), exc
    return exc


def events_of(pods: NodePods, pod: str) -> list[PostedEvent]:
    return [e for e in pods.events if (e.namespace, e.pod) == (NS, pod)]


# ------------------------------------------------------------- the checkpoint
class CheckpointWatch:
    """Wakes waiters whenever the agent's checkpoint writer has replaced the file."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._loop = asyncio.get_running_loop()
        self._written = asyncio.Event()
        original = checkpoint.write_atomically

        def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
            original(path, data, mode)
            self._loop.call_soon_threadsafe(self._notify)

        monkeypatch.setattr(checkpoint, "write_atomically", write_atomically)

    def _notify(self) -> None:
        written, self._written = self._written, asyncio.Event()
        written.set()

    async def wait_for(
        self, path: Path, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = WAIT_S
    ) -> dict[str, Any]:
        """The checkpoint's slots (raw JSON) once ``predicate`` holds for them."""
        async with asyncio.timeout(timeout_s):
            while True:
                written = self._written
                slots = read_checkpoint(path) if is_file(path) else None
                if slots is not None and predicate(slots):
                    return slots
                await written.wait()


def is_file(path: Path) -> bool:
    return path.is_file()


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The slots of the checkpoint as written (raw JSON)."""
    data = path.read_bytes()
    document = json.loads(data)
    assert document["version"] == checkpoint.VERSION
    slots = document["slots"]
    assert isinstance(slots, dict)
    return slots


# -------------------------------------------------------------- agent restarts
@contextlib.asynccontextmanager
async def kubelet_running(config: Config, pods: NodePods) -> AsyncIterator[KubeletStandIn]:
    """One kubelet stand-in that outlives the agents started against it."""
    kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket, pods)
    await kubelet.start()
    try:
        yield kubelet
    finally:
        await kubelet.stop()


@dataclass(slots=True)
class RunningAgent:
    agent: Agent
    stop: asyncio.Event
    task: asyncio.Task[None]

    @property
    def fabric(self) -> SimFabric:
        assert self.agent.backend.fabric is not None
        return self.agent.backend.fabric

    async def shut_down(self) -> None:
        """Stop the agent as SIGTERM does and wait until it has ended."""
        self.stop.set()
        async with asyncio.timeout(10):
            await self.task


@contextlib.asynccontextmanager
async def agent_running(
    config: Config, kubelet: KubeletStandIn, catalog: Catalog, pods: NodePods
) -> AsyncIterator[RunningAgent]:
    """A new agent on ``config``'s state, registered with ``kubelet`` and listing every slot."""
    registrations = len(kubelet.registrations)
    agent = Agent(config, catalog=catalog, pods=pods, events=pods)
    stop = asyncio.Event()
    running = RunningAgent(agent, stop, asyncio.create_task(agent.run(stop), name="agent-under-test"))
    expected = config.sim_cards * config.sim_slots_per_card
    try:
        await kubelet.wait_registered(registrations + 1)
        await kubelet.wait_for(
            lambda: (
                bool(kubelet.plugins[RESOURCE_NAME].updates) and len(kubelet.plugins[RESOURCE_NAME].devices) == expected
            ),
            WAIT_S,
        )
        yield running
    finally:
        await running.shut_down()

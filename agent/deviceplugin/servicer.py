"""The five DevicePlugin RPCs, answered from the slot registry; domain errors become gRPC status codes here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import grpc

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp
from agent._proto.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from agent.deviceplugin.constants import RESOURCE_NAME
from agent.errors import (
    SHOWN_ITEMS,
    CatalogError,
    FpgaSlotError,
    InvalidBitstreamName,
    KubeletError,
    PodLookupError,
    ProgrammingError,
    ProgrammingTimeout,
    PullInProgress,
    RequestError,
    UnhealthySlotError,
    UnknownBitstream,
    shown_list,
)
from agent.slots.allocator import choose_preferred
from agent.slots.model import Slot, container_env
from agent.slots.registry import SlotRegistry, SlotState

logger = logging.getLogger(__name__)

OPTIONS = dp.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=True)


class ContainerHooks(Protocol):
    """What the plugin asks of the rest of the agent: in PreStartContainer, make the slots ready (find the pod,
    program what it asked for); in GetPreferredAllocation, the accelerator the next container wants, if known."""

    async def prepare(self, device_ids: list[str]) -> None: ...

    async def wanted_accelerator(self) -> str | None: ...


#: Longest status message: it travels in a size-limited header (else RESOURCE_EXHAUSTED).
MAX_STATUS_CHARS = 1024


def status_text(error: object) -> str:
    """A status message of bounded length (the values in it are already shown bounded)."""
    text = str(error)
    return text if len(text) <= MAX_STATUS_CHARS else f"{text[:MAX_STATUS_CHARS]}... ({len(text)} characters)"


#: Domain errors -> gRPC status codes, most specific first.
_STATUS: tuple[tuple[type[FpgaSlotError], grpc.StatusCode], ...] = (
    (UnhealthySlotError, grpc.StatusCode.FAILED_PRECONDITION),
    (RequestError, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidBitstreamName, grpc.StatusCode.INVALID_ARGUMENT),
    (UnknownBitstream, grpc.StatusCode.NOT_FOUND),
    (PullInProgress, grpc.StatusCode.UNAVAILABLE),
    (CatalogError, grpc.StatusCode.FAILED_PRECONDITION),
    (PodLookupError, grpc.StatusCode.NOT_FOUND),
    (ProgrammingTimeout, grpc.StatusCode.DEADLINE_EXCEEDED),
    (ProgrammingError, grpc.StatusCode.INTERNAL),
    (KubeletError, grpc.StatusCode.UNAVAILABLE),
)


def status_for(exc: FpgaSlotError) -> grpc.StatusCode:
    """The gRPC status code a domain error is reported with."""
    return next((code for kind, code in _STATUS if isinstance(exc, kind)), grpc.StatusCode.INTERNAL)


def device_list(states: list[SlotState]) -> dp.ListAndWatchResponse:
    """What ListAndWatch sends: every listed slot with health and NUMA node."""
    devices = []
    for state in states:
        topology = None
        if state.slot.numa is not None:
            topology = dp.TopologyInfo(nodes=[dp.NUMANode(ID=state.slot.numa)])
        devices.append(dp.Device(ID=state.slot.id, health=state.health.value, topology=topology))
    return dp.ListAndWatchResponse(devices=devices)


def container_response(slots: list[Slot], cdi: bool) -> dp.ContainerAllocateResponse:
    """Device nodes (rw), FPGA_SLOTS and per-slot env, and optionally CDI names."""
    specs = [
        dp.DeviceSpec(container_path=node.container_path, host_path=node.host_path, permissions="rw")
        for slot in slots
        for node in slot.device_nodes
    ]
    response = dp.ContainerAllocateResponse(envs=container_env(slots), devices=specs)
    if cdi:
        response.cdi_devices.extend(dp.CDIDevice(name=f"{RESOURCE_NAME}={slot.id}") for slot in slots)
    return response


class DevicePluginServicer(dp_grpc.DevicePluginServicer):
    """RPC behaviour only; serving and registering live in :mod:`lifecycle`."""

    def __init__(self, registry: SlotRegistry, hooks: ContainerHooks | None, cdi: bool) -> None:
        self._registry = registry
        self._hooks = hooks
        self._cdi = cdi
        self._closing = asyncio.Event()
        #: The registration streams opened now belong to (:meth:`begin_generation`).
        self.generation = 0
        self._streams: dict[int, int] = {}  # stream number -> registration generation
        self._next_stream = 0
        self.on_stream_closed: Callable[[int], None] | None = None

    # ---------------------------------------------------------- lifecycle hooks
    def begin_generation(self) -> None:
        """A new registration starts: streams opened from now on belong to it."""
        self.generation += 1

    def open_streams(self) -> None:
        """A new server starts: streams may be opened again."""
        self._closing = asyncio.Event()

    def close_streams(self) -> None:
        """End every ListAndWatch stream cleanly (before the server stops)."""
        self._closing.set()

    def active_streams(self, generation: int) -> int:
        """Open ListAndWatch streams that belong to ``generation``."""
        return sum(1 for gen in self._streams.values() if gen == generation)

    # --------------------------------------------------------------------- RPCs
    async def GetDevicePluginOptions(
        self, request: dp.Empty, context: grpc.aio.ServicerContext[dp.Empty, dp.DevicePluginOptions]
    ) -> dp.DevicePluginOptions:
        return OPTIONS

    async def ListAndWatch(
        self, request: dp.Empty, context: grpc.aio.ServicerContext[dp.Empty, dp.ListAndWatchResponse]
    ) -> AsyncIterator[dp.ListAndWatchResponse]:
        stream, generation, closing = self._next_stream, self.generation, self._closing
        self._next_stream += 1
        self._streams[stream] = generation
        logger.info("ListAndWatch stream %d opened (registration %d)", stream, generation)
        closing_wait = asyncio.ensure_future(closing.wait())
        change: asyncio.Future[int] | None = None
        try:
            last: dp.ListAndWatchResponse | None = None
            while True:
                version = self._registry.device_version
                response = device_list(self._registry.snapshot())
                if response != last:
                    yield response
                    last = response
                change = asyncio.ensure_future(self._registry.wait_for_device_change(version))
                done, _ = await asyncio.wait({change, closing_wait}, return_when=asyncio.FIRST_COMPLETED)
                if closing_wait in done:
                    return
        finally:
            closing_wait.cancel()
            if change is not None:
                change.cancel()
            del self._streams[stream]
            ours = closing.is_set()  # ended by the plugin (an event is set once, never cleared), else by the kubelet
            logger.info("ListAndWatch stream %d %s", stream, "ended by the plugin" if ours else "closed by the kubelet")
            if not ours and self.on_stream_closed is not None:
                self.on_stream_closed(generation)

    async def GetPreferredAllocation(
        self,
        request: dp.PreferredAllocationRequest,
        context: grpc.aio.ServicerContext[dp.PreferredAllocationRequest, dp.PreferredAllocationResponse],
    ) -> dp.PreferredAllocationResponse:
        wanted = await self._hooks.wanted_accelerator() if self._hooks is not None else None
        states: dict[str, SlotState] = {state.slot.id: state for state in self._registry.snapshot()}
        responses = []
        for index, req in enumerate(request.container_requests):
            try:
                chosen = choose_preferred(
                    states,
                    list(req.available_deviceIDs),
                    list(req.must_include_deviceIDs),
                    req.allocation_size,
                    wanted,
                )
            except RequestError as exc:
                logger.warning("GetPreferredAllocation rejected (container request %d): %s", index, exc)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, status_text(f"container request {index}: {exc}"))
            responses.append(dp.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return dp.PreferredAllocationResponse(container_responses=responses)

    async def Allocate(
        self,
        request: dp.AllocateRequest,
        context: grpc.aio.ServicerContext[dp.AllocateRequest, dp.AllocateResponse],
    ) -> dp.AllocateResponse:
        groups = [list(req.devices_ids) for req in request.container_requests]
        try:
            assigned = self._registry.assign(groups)
        except RequestError as exc:
            logger.warning("Allocate rejected %s: %s", [shown_list(group) for group in groups][:SHOWN_ITEMS], exc)
            await context.abort(status_for(exc), status_text(exc))
        for slots in assigned:
            logger.info("allocated slots %s", ",".join(slot.id for slot in slots))
        return dp.AllocateResponse(container_responses=[container_response(s, self._cdi) for s in assigned])

    async def PreStartContainer(
        self,
        request: dp.PreStartContainerRequest,
        context: grpc.aio.ServicerContext[dp.PreStartContainerRequest, dp.PreStartContainerResponse],
    ) -> dp.PreStartContainerResponse:
        ids = list(request.devices_ids)
        try:
            self._registry.validate(ids)
            if self._hooks is not None:
                await self._hooks.prepare(ids)
        except FpgaSlotError as exc:
            code = status_for(exc)
            logger.warning("PreStartContainer for slots %s failed (%s): %s", shown_list(ids), code.name, exc)
            await context.abort(code, status_text(exc))
        return dp.PreStartContainerResponse()

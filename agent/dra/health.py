"""Device health for the kubelet's DRA resource-health stream (``v1alpha1.DRAResourceHealth``); each stream
repeats the list before the kubelet's timeout, so a quiet device does not go Unknown."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc

from agent._proto.drahealth.v1alpha1 import api_pb2 as pb
from agent._proto.drahealth.v1alpha1 import api_pb2_grpc as pb_grpc

#: How long the kubelet may go without news of a device before it calls it Unknown (sent with each device).
HEALTH_TIMEOUT_S = 60
#: Each stream repeats the list this often even without a change.
REPEAT_S = HEALTH_TIMEOUT_S / 3


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    """One device of the driver's pools; ``healthy`` None: not known."""

    pool: str
    device: str
    healthy: bool | None
    message: str = ""


class HealthBoard:
    """The current device list and its version, for the streams to follow (used on the agent's event loop)."""

    def __init__(self) -> None:
        self._devices: tuple[DeviceHealth, ...] = ()
        self._version = 0
        self._closed = False
        self._changed = asyncio.Event()

    def set(self, devices: Sequence[DeviceHealth]) -> None:
        """Publish the full list; streams are woken only when it differs from the last one."""
        devices = tuple(devices)
        if devices == self._devices:
            return
        self._devices = devices
        self._version += 1
        self._wake()

    def close(self) -> None:
        """End every stream (the server is stopping)."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def follow(self) -> AsyncIterator[tuple[tuple[DeviceHealth, ...], float]]:
        """The list now, then on every change and at least every ``REPEAT_S``, until closed."""
        seen = -1  # the version last sent
        while True:
            if self._version == seen:  # wait for a change or the close, or REPEAT_S (then the list is sent again)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(REPEAT_S):
                        await self._changed.wait()
            if self._closed:
                return
            seen = self._version
            yield self._devices, time.time()  # the board is kept current: this is its health as of now


_STATUS = {True: pb.HEALTHY, False: pb.UNHEALTHY, None: pb.UNKNOWN}


class HealthServicer(pb_grpc.DRAResourceHealthServicer):
    def __init__(self, board: HealthBoard) -> None:
        self._board = board

    async def NodeWatchResources(
        self,
        request: pb.NodeWatchResourcesRequest,
        context: grpc.aio.ServicerContext[pb.NodeWatchResourcesRequest, pb.NodeWatchResourcesResponse],
    ) -> AsyncIterator[pb.NodeWatchResourcesResponse]:
        async for devices, updated in self._board.follow():
            yield pb.NodeWatchResourcesResponse(
                devices=[
                    pb.DeviceHealth(
                        device=pb.DeviceIdentifier(pool_name=d.pool, device_name=d.device),
                        health=_STATUS[d.healthy],
                        last_updated_time=int(updated),
                        health_check_timeout_seconds=HEALTH_TIMEOUT_S,
                        message=d.message,
                    )
                    for d in devices
                ]
            )

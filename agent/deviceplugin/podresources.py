"""Client of the kubelet's pod-resources API: which pod/container holds which slot."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc

from agent._proto.podresources.v1 import api_pb2 as pr
from agent._proto.podresources.v1 import api_pb2_grpc as pr_grpc
from agent.deviceplugin.constants import FRESH_CHANNEL_OPTIONS
from agent.errors import KubeletError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """A container and the device IDs of our resource it holds."""

    namespace: str
    pod: str
    container: str
    device_ids: frozenset[str]


def containers_from_pods(pods: Iterable[pr.PodResources], resource_name: str) -> list[ContainerRef]:
    """Every container holding devices of ``resource_name``, entries merged per container."""
    refs: list[ContainerRef] = []
    for pod in pods:
        for container in pod.containers:
            ids = {
                device_id
                for devices in container.devices
                if devices.resource_name == resource_name
                for device_id in devices.device_ids
            }
            if ids:
                refs.append(ContainerRef(pod.namespace, pod.name, container.name, frozenset(ids)))
    return refs


class PodResourcesClient:
    """Asks the kubelet's PodResourcesLister over its unix socket."""

    def __init__(self, socket_path: Path, resource_name: str, timeout_s: float) -> None:
        self._socket_path = socket_path
        self._resource_name = resource_name
        self._timeout_s = timeout_s
        self._channel: grpc.aio.Channel | None = None

    async def list_containers(self) -> list[ContainerRef]:
        """All containers on the node that hold our resource."""
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(f"unix://{self._socket_path}", options=FRESH_CHANNEL_OPTIONS)
        channel = self._channel
        stub = pr_grpc.PodResourcesListerStub(channel)
        try:
            response = await stub.List(pr.ListPodResourcesRequest(), timeout=self._timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.UNAVAILABLE and self._channel is channel:
                self._channel = None  # a new channel skips gRPC's reconnect backoff
                await channel.close()
            raise KubeletError(
                f"pod-resources List on {self._socket_path} failed: {exc.code().name} {exc.details()}"
            ) from exc
        return containers_from_pods(response.pod_resources, self._resource_name)

    async def find_container(self, device_ids: Iterable[str]) -> ContainerRef | None:
        """The container that holds all of ``device_ids``, or None if none does (yet)."""
        wanted = frozenset(device_ids)
        for ref in await self.list_containers():
            if wanted <= ref.device_ids:
                return ref
        return None

    async def close(self) -> None:
        """Close the channel (a new one is opened on the next call)."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

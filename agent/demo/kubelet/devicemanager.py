"""The stand-in kubelet: Registration server, plugin client and pod-resources server (reporting what the
stand-in allocated), behaving as the kubelet's device manager (one ListAndWatch stream per resource, no reconnect
when it ends; ``restart()`` deletes every socket and makes a new ``kubelet.sock``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp
from agent._proto.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from agent._proto.podresources.v1 import api_pb2 as pr
from agent._proto.podresources.v1 import api_pb2_grpc as pr_grpc
from agent.demo.kubelet.nodepods import NodePods

if TYPE_CHECKING:
    from agent._proto.deviceplugin.v1beta1.api_pb2_grpc import DevicePluginAsyncStub

logger = logging.getLogger(__name__)

SUPPORTED_VERSIONS = ("v1beta1",)
DIAL_TIMEOUT_S = 5.0
PRE_START_TIMEOUT_S = 30.0


@dataclass(slots=True)
class PluginConnection:
    """The stand-in's view of one registered plugin."""

    request: dp.RegisterRequest
    options: dp.DevicePluginOptions
    channel: grpc.aio.Channel
    stub: DevicePluginAsyncStub
    devices: dict[str, dp.Device] = field(default_factory=dict)
    updates: list[tuple[float, list[dp.Device]]] = field(default_factory=list)
    stream_ended: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def healthy(self) -> list[str]:
        return sorted(i for i, d in self.devices.items() if d.health == "Healthy")


@dataclass(frozen=True, slots=True)
class AdmittedContainer:
    """What the stand-in did to start one container."""

    namespace: str
    pod: str
    container: str
    device_ids: list[str]
    preferred: list[str] | None
    response: dp.ContainerAllocateResponse


class KubeletStandIn:
    """Serves ``<plugin_dir>/kubelet.sock`` and the pod-resources socket."""

    def __init__(self, plugin_dir: Path, pod_resources_socket: Path, pods: NodePods | None = None) -> None:
        self.plugin_dir = plugin_dir
        self.pod_resources_socket = pod_resources_socket
        #: the API server's view of the node's pods, when one is kept (demo, tests)
        self.pods = pods
        self.registrations: list[dp.RegisterRequest] = []
        self.plugins: dict[str, PluginConnection] = {}
        # (namespace, pod) -> container -> resource -> device IDs
        self.assignments: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}
        self._servers: list[grpc.aio.Server] = []
        self._bind_count = 0
        self._register_lock = asyncio.Lock()
        self._changed = asyncio.Event()

    # ---------------------------------------------------------------- running
    async def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
        registration = grpc.aio.server()
        dp_grpc.add_RegistrationServicer_to_server(_Registration(self), registration)
        await self._serve(registration, self.plugin_dir / "kubelet.sock")
        pod_resources = grpc.aio.server()
        pr_grpc.add_PodResourcesListerServicer_to_server(_PodResources(self), pod_resources)
        await self._serve(pod_resources, self.pod_resources_socket)

    def read_assignments(self) -> dict[tuple[str, str], dict[str, dict[str, list[str]]]]:
        """What pod-resources List and Get report (the tests count the calls)."""
        return self.assignments

    async def stop(self) -> None:
        """Stop serving and drop every plugin connection (sockets stay, as after a crash)."""
        for resource in list(self.plugins):
            await self._disconnect(resource)
        for server in self._servers:
            await server.stop(0)
        self._servers.clear()

    async def restart(self) -> None:
        """Stop, delete every socket in the device-plugin directory, start again."""
        await self.stop()
        for path in self.plugin_dir.iterdir():  # a few local unlinks: cheap enough to do on the loop
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()
        with contextlib.suppress(FileNotFoundError):
            self.pod_resources_socket.unlink()
        logger.info("kubelet stand-in restarted: sockets in %s deleted", self.plugin_dir)
        await self.start()

    async def _serve(self, server: grpc.aio.Server, path: Path) -> None:
        # gRPC may unlink a stopped server's path late: bind under a one-off name, then rename into place
        self._bind_count += 1
        bound = path.with_name(f".{path.name}.{self._bind_count}")
        server.add_insecure_port(f"unix://{bound}")
        await server.start()
        os.replace(bound, path)
        self._servers.append(server)

    # ----------------------------------------------------------- registration
    async def handle_register(self, request: dp.RegisterRequest) -> str | None:
        """Validate, dial and connect; return an error message or None."""
        if request.version not in SUPPORTED_VERSIONS:
            return f"unsupported device plugin API version {request.version!r}"
        if "/" not in request.resource_name or request.resource_name.startswith("kubernetes.io/"):
            return f"invalid extended resource name {request.resource_name!r}"
        if not request.endpoint or "/" in request.endpoint:
            return f"invalid endpoint {request.endpoint!r}"
        async with self._register_lock:
            await self._disconnect(request.resource_name)
            # a fresh connection per registration, as the kubelet makes
            channel = grpc.aio.insecure_channel(
                f"unix://{self.plugin_dir / request.endpoint}",
                options=(("grpc.use_local_subchannel_pool", 1),),
            )
            stub = dp_grpc.DevicePluginStub(channel)
            try:
                options = await stub.GetDevicePluginOptions(dp.Empty(), timeout=DIAL_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                await channel.close()
                return f"cannot dial plugin endpoint {request.endpoint}: {exc.code().name} {exc.details()}"
            conn = PluginConnection(request, options, channel, stub)
            conn.task = asyncio.create_task(self._watch(conn), name=f"listandwatch {request.resource_name}")
            self.plugins[request.resource_name] = conn
            self.registrations.append(request)
            self._notify()
        return None

    async def _disconnect(self, resource: str) -> None:
        conn = self.plugins.pop(resource, None)
        if conn is None:
            return
        if conn.task is not None:
            conn.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await conn.task
        await conn.channel.close()

    async def _watch(self, conn: PluginConnection) -> None:
        call = conn.stub.ListAndWatch(dp.Empty())
        try:
            async for response in call:
                devices = list(response.devices)
                conn.devices = {d.ID: d for d in devices}
                conn.updates.append((time.monotonic(), devices))
                self._notify()
        except grpc.aio.AioRpcError as exc:
            logger.info("ListAndWatch for %s ended: %s", conn.request.resource_name, exc.code().name)
        finally:
            call.cancel()
            for device_id, device in conn.devices.items():
                conn.devices[device_id] = dp.Device(ID=device.ID, health="Unhealthy", topology=device.topology)
            conn.stream_ended.set()
            self._notify()

    # ---------------------------------------------------------------- waiting
    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Wait until ``predicate()`` holds; TimeoutError after ``timeout_s``."""
        async with asyncio.timeout(timeout_s):
            while not predicate():
                await self._changed.wait()

    async def wait_registered(self, count: int, timeout_s: float = 5.0) -> None:
        """Wait until ``count`` registrations were accepted in total."""
        await self.wait_for(lambda: len(self.registrations) >= count, timeout_s)

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # ------------------------------------------------------------------- pods
    async def admit(
        self,
        namespace: str,
        pod: str,
        container: str,
        resource: str,
        count: int,
        annotations: dict[str, str] | None = None,
    ) -> AdmittedContainer:
        """Start one container that requests ``count`` devices, as the kubelet would (and mark its pod in
        NodePods, if any, Pending then Running)."""
        conn = self.plugins[resource]
        if self.pods is not None and self.pods.get(namespace, pod) is None:
            self.pods.add(namespace, pod, {container: count}, annotations)
        in_use = {
            device_id
            for containers in self.assignments.values()
            for resources in containers.values()
            for device_id in resources.get(resource, [])
        }
        free = [device_id for device_id in conn.healthy() if device_id not in in_use]
        if len(free) < count:
            raise RuntimeError(f"{resource}: {count} requested, {len(free)} free")
        preferred = None
        chosen = free[:count]
        if conn.options.get_preferred_allocation_available:
            answer = await conn.stub.GetPreferredAllocation(
                dp.PreferredAllocationRequest(
                    container_requests=[
                        dp.ContainerPreferredAllocationRequest(available_deviceIDs=free, allocation_size=count)
                    ]
                )
            )
            preferred = list(answer.container_responses[0].deviceIDs)
            if len(preferred) == count and set(preferred) <= set(free):
                chosen = preferred
        allocated = await conn.stub.Allocate(
            dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=chosen)])
        )
        pod_entry = self.assignments.setdefault((namespace, pod), {})
        pod_entry.setdefault(container, {})[resource] = list(chosen)
        if conn.options.pre_start_required:
            await conn.stub.PreStartContainer(
                dp.PreStartContainerRequest(devices_ids=chosen), timeout=PRE_START_TIMEOUT_S
            )
        if self.pods is not None:
            self.pods.set_phase(namespace, pod, "Running")
        return AdmittedContainer(namespace, pod, container, list(chosen), preferred, allocated.container_responses[0])

    def delete_pod(self, namespace: str, pod: str) -> None:
        """Forget a pod: its devices are free for the next admission."""
        self.assignments.pop((namespace, pod), None)
        if self.pods is not None:
            self.pods.delete(namespace, pod)

    def allocatable(self) -> dict[str, list[str]]:
        return {resource: sorted(conn.devices) for resource, conn in self.plugins.items()}


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, kubelet: KubeletStandIn) -> None:
        self._kubelet = kubelet

    async def Register(
        self, request: dp.RegisterRequest, context: grpc.aio.ServicerContext[dp.RegisterRequest, dp.Empty]
    ) -> dp.Empty:
        error = await self._kubelet.handle_register(request)
        if error is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, error)
        return dp.Empty()


def _devices(resources: dict[str, list[str]]) -> list[pr.ContainerDevices]:
    """One ContainerDevices entry per device ID, as the kubelet reports them."""
    return [pr.ContainerDevices(resource_name=r, device_ids=[i]) for r, ids in resources.items() for i in ids]


def _pod_message(namespace: str, name: str, containers: dict[str, dict[str, list[str]]]) -> pr.PodResources:
    """One pod as the kubelet reports it."""
    return pr.PodResources(
        name=name,
        namespace=namespace,
        containers=[pr.ContainerResources(name=c, devices=_devices(resources)) for c, resources in containers.items()],
    )


class _PodResources(pr_grpc.PodResourcesListerServicer):
    """List, Get and GetAllocatableResources: what the stand-in allocated."""

    def __init__(self, kubelet: KubeletStandIn) -> None:
        self._kubelet = kubelet

    async def List(
        self,
        request: pr.ListPodResourcesRequest,
        context: grpc.aio.ServicerContext[pr.ListPodResourcesRequest, pr.ListPodResourcesResponse],
    ) -> pr.ListPodResourcesResponse:
        pods = [
            _pod_message(ns, name, containers) for (ns, name), containers in self._kubelet.read_assignments().items()
        ]
        return pr.ListPodResourcesResponse(pod_resources=pods)

    async def Get(
        self,
        request: pr.GetPodResourcesRequest,
        context: grpc.aio.ServicerContext[pr.GetPodResourcesRequest, pr.GetPodResourcesResponse],
    ) -> pr.GetPodResourcesResponse:
        key = (request.pod_namespace, request.pod_name)
        containers = self._kubelet.read_assignments().get(key)
        if containers is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"pod {request.pod_name} not found in namespace {request.pod_namespace}",
            )
        return pr.GetPodResourcesResponse(pod_resources=_pod_message(key[0], key[1], containers))

    async def GetAllocatableResources(
        self,
        request: pr.AllocatableResourcesRequest,
        context: grpc.aio.ServicerContext[pr.AllocatableResourcesRequest, pr.AllocatableResourcesResponse],
    ) -> pr.AllocatableResourcesResponse:
        return pr.AllocatableResourcesResponse(devices=_devices(self._kubelet.allocatable()))

"""The stand-in's PodResourcesLister: reports what the stand-in allocated."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import grpc

from agent._proto.podresources.v1 import api_pb2 as pr
from agent._proto.podresources.v1 import api_pb2_grpc as pr_grpc

#: (namespace, pod) -> container -> resource -> device IDs
Assignments = Mapping[tuple[str, str], Mapping[str, Mapping[str, list[str]]]]


def _devices(resources: Mapping[str, list[str]]) -> list[pr.ContainerDevices]:
    """One ContainerDevices entry per device ID, as the kubelet reports them."""
    return [pr.ContainerDevices(resource_name=r, device_ids=[i]) for r, ids in resources.items() for i in ids]


def pod_message(namespace: str, name: str, containers: Mapping[str, Mapping[str, list[str]]]) -> pr.PodResources:
    """One pod as the kubelet reports it."""
    return pr.PodResources(
        name=name,
        namespace=namespace,
        containers=[pr.ContainerResources(name=c, devices=_devices(resources)) for c, resources in containers.items()],
    )


class PodResourcesServicer(pr_grpc.PodResourcesListerServicer):
    """List, Get and GetAllocatableResources over the stand-in's state."""

    def __init__(self, assignments: Callable[[], Assignments], allocatable: Callable[[], dict[str, list[str]]]):
        self._assignments = assignments
        self._allocatable = allocatable

    async def List(
        self,
        request: pr.ListPodResourcesRequest,
        context: grpc.aio.ServicerContext[pr.ListPodResourcesRequest, pr.ListPodResourcesResponse],
    ) -> pr.ListPodResourcesResponse:
        pods = [pod_message(ns, name, containers) for (ns, name), containers in self._assignments().items()]
        return pr.ListPodResourcesResponse(pod_resources=pods)

    async def Get(
        self,
        request: pr.GetPodResourcesRequest,
        context: grpc.aio.ServicerContext[pr.GetPodResourcesRequest, pr.GetPodResourcesResponse],
    ) -> pr.GetPodResourcesResponse:
        key = (request.pod_namespace, request.pod_name)
        containers = self._assignments().get(key)
        if containers is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"pod {request.pod_name} not found in namespace {request.pod_namespace}",
            )
        return pr.GetPodResourcesResponse(pod_resources=pod_message(key[0], key[1], containers))

    async def GetAllocatableResources(
        self,
        request: pr.AllocatableResourcesRequest,
        context: grpc.aio.ServicerContext[pr.AllocatableResourcesRequest, pr.AllocatableResourcesResponse],
    ) -> pr.AllocatableResourcesResponse:
        return pr.AllocatableResourcesResponse(devices=_devices(self._allocatable()))

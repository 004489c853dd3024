"""The stand-in's PodResourcesLister: reports what the stand-in allocated."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import grpc

from agent._proto.podresources.v1 import api_pb2 as pr
from agent._proto.podresources.v1 import api_pb2_grpc as pr_grpc

#: (namespace, pod) -> container -> resource -> device IDs
Assignments = Mapping[tuple[str, str], Mapping[str, Mapping[str, list[str]]]]


def pod_message(namespace: str, name: str, containers: Mapping[str, Mapping[str, list[str]]]) -> pr.PodResources:
    """One pod as the kubelet reports it: one ContainerDevices entry per device ID, as observed."""
    return pr.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            pr.ContainerResources(
                name=container,
                devices=[
                    pr.ContainerDevices(resource_name=resource, device_ids=[device_id])
                    for resource, ids in resources.items()
                    for device_id in ids
                ],
            )
            for container, resources in containers.items()
        ],
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
        return pr.AllocatableResourcesResponse(
            devices=[
                pr.ContainerDevices(resource_name=resource, device_ids=[device_id])
                for resource, ids in self._allocatable().items()
                for device_id in ids
            ]
        )

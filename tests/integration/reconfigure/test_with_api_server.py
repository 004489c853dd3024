"""The whole path through the real kubernetes client: pod annotations from a watch, Events posted.

The agent gets its Kubernetes access exactly as ``fpga-agent run`` does
(``connect_kube`` from a kubeconfig) and talks to the HTTP-level fake API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp
from agent.app import Agent, connect_kube
from agent.node.reconfigure import ANNOTATION
from tests.fakeapi import DEFAULT_NODE, FakeKubeApiServer, running_apiserver
from tests.fakes import RESOURCE_NAME, KubeletStandIn, test_config
from tests.integration.reconfigure.support import Bitstreams, wait_registry

WAIT_S = 10.0


def reasons(api: FakeKubeApiServer, pod: str) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in api.events() if e["involvedObject"]["name"] == pod]


@contextlib.asynccontextmanager
async def agent_with_api(
    sock_dir: Path, bitstreams: Bitstreams
) -> AsyncIterator[tuple[FakeKubeApiServer, KubeletStandIn, Agent]]:
    """The fake API server, the kubelet stand-in, and the agent with API access as ``fpga-agent run`` has it,
    registered."""
    with running_apiserver() as api:
        kubeconfig = api.write_kubeconfig(sock_dir / "kubeconfig")
        config = dataclasses.replace(test_config(sock_dir, node_name=DEFAULT_NODE), kubeconfig=kubeconfig)
        kube = connect_kube(config)
        assert kube is not None
        kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket)
        await kubelet.start()
        agent = Agent(config, catalog=bitstreams.catalog, kube=kube)
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        try:
            await kubelet.wait_registered(1, WAIT_S)
            yield api, kubelet, agent
        finally:
            stop.set()
            async with asyncio.timeout(WAIT_S):
                await task
            await kubelet.stop()


async def test_annotation_from_the_api_server_is_programmed_and_events_are_posted(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    async with agent_with_api(sock_dir, bitstreams) as (api, kubelet, agent):
        await kubelet.wait_for(lambda: len(kubelet.plugins[RESOURCE_NAME].healthy()) == 8, WAIT_S)
        api.add_pod("inference", annotations={ANNOTATION: bitstreams.accel_a.name})
        admitted = await kubelet.admit("default", "inference", "main", RESOURCE_NAME, 1)
        (slot_id,) = admitted.device_ids
        state = agent.registry.get(slot_id)  # type: ignore[arg-type]
        assert state is not None
        assert state.bitstream == bitstreams.accel_a.name
        assert state.slot.loaded == bitstreams.accel_a.accelerator_id
        await api.until(lambda: len(reasons(api, "inference")) == 1, WAIT_S)
        ((kind, reason, message),) = reasons(api, "inference")
        assert (kind, reason) == ("Normal", "FpgaSlotProgrammed")
        assert message.startswith(f"Programmed slot {slot_id} with {bitstreams.accel_a.name} in ")

        api.add_pod("typo", annotations={ANNOTATION: "no-such-bitstream"})
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await kubelet.admit("default", "typo", "main", RESOURCE_NAME, 1)
        assert failure.value.code() is grpc.StatusCode.NOT_FOUND
        assert "pod default/typo" in (failure.value.details() or "")
        await api.until(lambda: len(reasons(api, "typo")) == 1, WAIT_S)
        assert reasons(api, "typo")[0][:2] == ("Warning", "FpgaBitstreamRejected")

        # Deleting the pod (API watch) releases its slot; the bitstream stays loaded.
        kubelet.delete_pod("default", "inference")
        api.delete_pod("default", "inference")
        await wait_registry(agent.registry, lambda: agent.registry.get(slot_id).holder is None)  # type: ignore[arg-type, union-attr]
        assert agent.registry.get(slot_id).bitstream == bitstreams.accel_a.name  # type: ignore[arg-type, union-attr]


async def test_preference_waits_for_the_watch_to_deliver_the_pod_being_admitted(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    """The kubelet may ask for a preference before the agent's pod watch has the pod: the agent waits a
    moment for it instead of choosing blind (which would overwrite an empty slot beside a loaded one)."""
    async with agent_with_api(sock_dir, bitstreams) as (api, kubelet, agent):
        conn = kubelet.plugins[RESOURCE_NAME]
        await kubelet.wait_for(lambda: len(conn.healthy()) == 8, WAIT_S)
        api.add_pod("first", annotations={ANNOTATION: bitstreams.accel_b.name})
        (loaded,) = (await kubelet.admit("default", "first", "main", RESOURCE_NAME, 1)).device_ids
        kubelet.delete_pod("default", "first")
        api.delete_pod("default", "first")
        await wait_registry(agent.registry, lambda: agent.registry.get(loaded).holder is None)  # type: ignore[arg-type, union-attr]

        # The kubelet asks first; the API server learns of the pod 0.2 s later.
        available = sorted(conn.devices)
        request = dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=1)
            ]
        )
        asking = asyncio.ensure_future(conn.stub.GetPreferredAllocation(request, timeout=WAIT_S))
        await asyncio.sleep(0.2)
        api.add_pod("second", annotations={ANNOTATION: bitstreams.accel_b.name})
        answer = await asking
        assert list(answer.container_responses[0].deviceIDs) == [loaded]


async def test_without_api_access_slots_are_served_and_the_agent_says_why_once(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = dataclasses.replace(test_config(sock_dir), kubeconfig=sock_dir / "missing-kubeconfig")
    with caplog.at_level(logging.WARNING, logger="agent.app"):
        kube = connect_kube(config)
    assert kube is None
    (record,) = [r for r in caplog.records if "no API server access" in r.getMessage()]
    assert "missing-kubeconfig" in record.getMessage()
    kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket)
    await kubelet.start()
    agent = Agent(config, kube=kube)
    assert agent.distribution is None  # nothing to watch declarations with: the local catalog only
    assert agent.reconfigurer.fetch_bitstream is None
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await kubelet.wait_registered(1, WAIT_S)
        await kubelet.wait_for(lambda: len(kubelet.plugins[RESOURCE_NAME].healthy()) == 8, WAIT_S)
        admitted = await kubelet.admit("default", "plain", "main", RESOURCE_NAME, 1)
        state = agent.registry.get(admitted.device_ids[0])  # type: ignore[arg-type]
        assert state is not None
        assert state.holder is not None
        assert state.holder.pod == "plain"
        assert state.bitstream is None
    finally:
        stop.set()
        async with asyncio.timeout(WAIT_S):
            await task
        await kubelet.stop()

"""The agent's published slot state, end to end: allocation, programming, health and release show in its
FpgaNodeState, and the Node is written once (its platform labels).

A real agent (simulated cards) with its API access from a kubeconfig, as ``fpga-agent run``
gets it, against the HTTP-level fake API server; the kubelet stand-in admits pods. At the
end, ``fpga-agent cluster`` (a real process) reads back what the agent published.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from agent.app import Agent, connect_kube
from agent.kube.nodefields import PLATFORM_LABEL, PLATFORM_LABEL_PREFIX
from agent.node.reconfigure import ANNOTATION
from agent.simfpga.fabric import PLATFORM
from agent.slots.published import parse_state
from tests.fakeapi import DEFAULT_NODE, FakeKubeApiServer, running_apiserver
from tests.fakes import RESOURCE_NAME, KubeletStandIn, test_config
from tests.integration.reconfigure.support import Bitstreams

WAIT_S = 10.0
NODE_PATH = f"/api/v1/nodes/{DEFAULT_NODE}"
NAMESPACE = "fpga-slot"


def published(api: FakeKubeApiServer) -> dict[str, dict[str, Any]]:
    """The slots of the node's FpgaNodeState by id ({} before the first write)."""
    state = api.node_state(NAMESPACE, DEFAULT_NODE)
    return {slot["id"]: dict(slot) for slot in parse_state(state).slots} if state else {}


def catalog(api: FakeKubeApiServer) -> dict[str, str]:
    state = api.node_state(NAMESPACE, DEFAULT_NODE)
    assert state is not None
    return dict(parse_state(state).bitstreams)


async def test_the_node_state_follows_allocation_programming_health_and_release(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    with running_apiserver() as api:
        api.namespaces.add(NAMESPACE)
        api.add_node(DEFAULT_NODE, labels={"team": "fpga"}, annotations={"owner": "ops"})
        kubeconfig = api.write_kubeconfig(sock_dir / "kubeconfig")
        config = dataclasses.replace(test_config(sock_dir, node_name=DEFAULT_NODE), kubeconfig=kubeconfig)
        kube = connect_kube(config)
        assert kube is not None
        kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket)
        await kubelet.start()
        agent = Agent(config, catalog=bitstreams.catalog, kube=kube)
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop), name="agent-under-test")
        try:
            await kubelet.wait_registered(1, WAIT_S)
            await kubelet.wait_for(lambda: len(kubelet.plugins[RESOURCE_NAME].healthy()) == 8, WAIT_S)
            await api.until(lambda: len(published(api)) == 8, WAIT_S)
            assert all(s["free"] and s["healthy"] and s["bitstream"] is None for s in published(api).values())
            await api.until(lambda: bool(api.requests("PATCH", NODE_PATH)), WAIT_S)
            node = api.node(DEFAULT_NODE)
            assert node is not None
            assert catalog(api) == {
                "accel-a": PLATFORM,
                "accel-b": PLATFORM,
                "accel-c.v2": PLATFORM,
                "foreign": "other-pr-v9",
            }
            assert node["metadata"]["annotations"]["owner"] == "ops"
            assert node["metadata"]["labels"]["team"] == "fpga"
            assert node["metadata"]["labels"][PLATFORM_LABEL] == PLATFORM
            assert node["metadata"]["labels"][PLATFORM_LABEL_PREFIX + PLATFORM] == "true"

            # Allocation and programming: the slot is held and holds the pod's bitstream.
            api.add_pod("inference", annotations={ANNOTATION: bitstreams.accel_a.name})
            admitted = await kubelet.admit("default", "inference", "main", RESOURCE_NAME, 1)
            (slot_id,) = admitted.device_ids
            await api.until(lambda: published(api)[slot_id]["bitstream"] == bitstreams.accel_a.name, WAIT_S)
            slot = published(api)[slot_id]
            assert slot["free"] is False
            assert slot["accelerator"] == bitstreams.accel_a.accelerator_id
            assert isinstance(slot["last_used"], int)

            # Health: the hardware reports a slot unhealthy.
            card, region = slot_id.rsplit("-", 1)
            agent.backend.fabric.set_health(card, region, False, "test: overheated")  # type: ignore[union-attr]
            await api.until(lambda: not published(api)[slot_id]["healthy"], WAIT_S)
            agent.backend.fabric.set_health(card, region, True)  # type: ignore[union-attr]
            await api.until(lambda: published(api)[slot_id]["healthy"], WAIT_S)

            # Release: the pod is gone, the slot free, the bitstream still loaded (what the extender scores).
            kubelet.delete_pod("default", "inference")
            api.delete_pod("default", "inference")
            await api.until(lambda: published(api)[slot_id]["free"], WAIT_S)
            assert published(api)[slot_id]["bitstream"] == bitstreams.accel_a.name

            # The agent wrote its own Node once, its labels, with a merge patch; the pod's life went to the object.
            node_writes = [r for r in api.requests() if r.path.startswith("/api/v1/nodes")]
            assert {(r.method, r.path) for r in node_writes} == {("GET", NODE_PATH), ("PATCH", NODE_PATH)}
            [patch] = api.requests("PATCH", NODE_PATH)
            assert set(patch.body) == {"metadata"}
            assert set(patch.body["metadata"]) == {"labels"}
            assert len(api.requests("PUT")) >= 4  # held, programmed, unhealthy, healthy, free

            # What an operator sees: the cluster view reads the same state back.
            rows = await cluster_json(kubeconfig, sock_dir)
            assert rows == {"nodes": [{**rows["nodes"][0], "name": DEFAULT_NODE, "errors": []}]}
            assert {s["id"]: s for s in rows["nodes"][0]["slots"]} == published(api)
            assert rows["nodes"][0]["bitstreams"] == catalog(api)
        finally:
            stop.set()
            async with asyncio.timeout(WAIT_S):
                await task
            await kubelet.stop()


async def cluster_json(kubeconfig: Path, cwd: Path) -> dict[str, Any]:
    """``fpga-agent cluster --json`` as a real process, without blocking the agent's loop."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FPGA_AGENT_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent.cli.main",
        "cluster",
        "--json",
        "--kubeconfig",
        str(kubeconfig),
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    document: dict[str, Any] = json.loads(stdout)
    return document

"""A rolling update of the agent in DRA mode: the new pod serves beside the old one on sockets of its own
(named after its pod UID), the kubelet may call either, and what one prepared the other releases.

Both agents run on the same host paths (state directory, plugin directories, simulated cards) with the
HTTP-level fake API server; each has its own stand-in of the kubelet's DRA side dialling its sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

from agent.app import Agent
from agent.demo.kubelet.dra import DraKubelet
from agent.dra.constants import DRIVER_NAME
from agent.dra.server import PluginSockets
from tests.fakeapi import DEFAULT_NODE, FakeKubeApiServer, make_resource_claim, running_apiserver
from tests.integration.reconfigure.support import Bitstreams, slot, state
from tests.integration.reconfigure.test_dra_mode import (
    NS,
    agent_running,
    config_for,
    device_plugin_kubelet,
    until,
)

OLD_UID = "0a0a0a0a-0000-4000-8000-000000000001"
NEW_UID = "0b0b0b0b-0000-4000-8000-000000000002"


def claim(api: FakeKubeApiServer, name: str, device: str, bitstream: str) -> tuple[str, str, str]:
    pod = api.add_pod(f"{name}-pod", namespace=NS)
    body = make_resource_claim(
        name,
        namespace=NS,
        driver=DRIVER_NAME,
        devices=[("fpga", DEFAULT_NODE, device)],
        parameters={"bitstream": bitstream},
        reserved_for=[(pod["metadata"]["name"], pod["metadata"]["uid"])],
    )
    return NS, api.put_resource_claim(body)["metadata"]["uid"], name


@contextlib.asynccontextmanager
async def instance(
    root: Path, api: FakeKubeApiServer, bitstreams: Bitstreams, uid: str
) -> AsyncIterator[tuple[Agent, DraKubelet]]:
    """One agent pod: its own sockets (pod UID ``uid``), registered by its own kubelet stand-in."""
    config = dataclasses.replace(config_for(root, api), pod_uid=uid)
    async with agent_running(config, bitstreams) as agent:
        kubelet = DraKubelet(config.dra_registry_dir)
        sockets = PluginSockets(config.dra_registry_dir, config.dra_plugins_dir, DRIVER_NAME, uid)
        await until("its registration socket", sockets.registration.is_socket)
        await asyncio.to_thread(kubelet.register, sockets.registration)
        yield agent, kubelet


def recorded(root: Path) -> list[str]:
    return [c["name"] for c in json.loads((root / "state" / "dra-claims.json").read_text())["claims"]]


def live_sockets(registry_dir: Path) -> list[str]:
    return sorted(p.name for p in registry_dir.iterdir() if not p.name.startswith("."))


async def test_the_new_pod_serves_beside_the_old_one_and_releases_what_the_old_one_prepared(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    with running_apiserver() as api:
        api.add_node(DEFAULT_NODE)
        api.namespaces.add("fpga-slot")
        registry_dir = sock_dir / "plugins_registry"
        async with device_plugin_kubelet(config_for(sock_dir, api)), contextlib.AsyncExitStack() as old_pod:
            old, old_kubelet = await old_pod.enter_async_context(instance(sock_dir, api, bitstreams, OLD_UID))
            before = claim(api, "before", slot(0, 0), bitstreams.accel_a.name)
            assert (await asyncio.to_thread(old_kubelet.prepare, before)).claims[before[1]].error == ""
            async with instance(sock_dir, api, bitstreams, NEW_UID) as (new, new_kubelet):
                assert live_sockets(registry_dir) == [
                    f"{DRIVER_NAME}-{OLD_UID}-reg.sock",
                    f"{DRIVER_NAME}-{NEW_UID}-reg.sock",
                ]
                assert old.dra is not None
                assert new.dra is not None
                assert old.dra.server.superseded()
                assert not new.dra.server.superseded()
                # The old pod leaves the Node's state (and the slice) to the new one.
                assert old.kube is not None
                assert new.kube is not None
                assert old.kube.nodes.standby()
                assert not new.kube.nodes.standby()
                # A call the old pod still had in flight when the new one came: the new one learns of it.
                during = claim(api, "during", slot(1, 0), bitstreams.accel_b.name)
                answer = await asyncio.to_thread(old_kubelet.prepare, during)
                assert answer.claims[during[1]].error == ""
                # The new pod follows the shared record between calls too: the slot is held there at once.
                await until(
                    "the old pod's claim held by the new pod",
                    lambda: state(new.registry, slot(1, 0)).holder is not None,
                )
                # The old pod stops (SIGTERM): its sockets go, the new pod's stay, the node keeps its slot state.
                await old_pod.aclose()
                assert live_sockets(registry_dir) == [f"{DRIVER_NAME}-{NEW_UID}-reg.sock"]
                assert api.node_state("fpga-slot", DEFAULT_NODE) is not None
                # The kubelet calls the new pod: it releases both claims the old pod prepared.
                for ref in (before, during):
                    answer = await asyncio.to_thread(new_kubelet.unprepare, ref)
                    assert answer.claims[ref[1]].error == ""
                assert recorded(sock_dir) == []
                assert state(new.registry, slot(0, 0)).holder is None
                assert state(new.registry, slot(1, 0)).holder is None
                # What the old pod programmed is known to the new one: the next claim for it is a hit.
                assert state(new.registry, slot(1, 0)).bitstream == bitstreams.accel_b.name
                after = claim(api, "after", slot(1, 0), bitstreams.accel_b.name)
                assert (await asyncio.to_thread(new_kubelet.prepare, after)).claims[after[1]].error == ""
                assert recorded(sock_dir) == ["after"]
                assert [e["reason"] for e in api.events() if e["involvedObject"]["name"] == "after-pod"] == [
                    "FpgaSlotCacheHit"
                ]


async def test_the_sockets_a_killed_instance_left_are_removed_by_the_next_one(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    registry_dir = sock_dir / "plugins_registry"
    registry_dir.mkdir(parents=True)
    dead = PluginSockets(registry_dir, sock_dir / "plugins", DRIVER_NAME, OLD_UID)
    dead.dra.parent.mkdir(parents=True)
    for path in (dead.registration, dead.dra):  # bound and closed: a socket file nobody listens on
        with socket.socket(socket.AF_UNIX) as left:
            left.bind(str(path))
    with running_apiserver() as api:
        api.add_node(DEFAULT_NODE)
        async with device_plugin_kubelet(config_for(sock_dir, api)), instance(sock_dir, api, bitstreams, NEW_UID):
            assert live_sockets(registry_dir) == [f"{DRIVER_NAME}-{NEW_UID}-reg.sock"]
            assert not dead.dra.exists()

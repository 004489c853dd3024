"""``fpga-agent demo``: the device-plugin lifecycle on simulated slots, narrated, against the kubelet stand-in."""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp
from agent.app import Agent
from agent.config import Config
from agent.demo import ms_since, say
from agent.demo.kubelet.devicemanager import KubeletStandIn, PluginConnection
from agent.demo.kubelet.nodepods import NodePods
from agent.deviceplugin.constants import RESOURCE_NAME
from agent.node.reconfigure import ANNOTATION
from agent.output.tables import format_table
from agent.programming.catalog import Catalog
from agent.simfpga.fabric import PLATFORM
from agent.simfpga.sample import SAMPLE_ACCELERATOR, SAMPLE_NAME

WAIT_S = 10.0


def sim_setup(base: Config, root: Path, **changes: Any) -> tuple[Config, Catalog]:
    """``base`` on simulated slots with every path under ``root``, and a catalog holding the sample bitstream."""
    config = dataclasses.replace(
        base,
        backend="sim",
        sim_device_nodes="file",  # the demo needs no root and starts no container
        device_plugin_dir=root / "device-plugins",
        pod_resources_socket=root / "pod-resources" / "kubelet.sock",
        state_dir=root / "state",
        health_listen=None,  # the demo is not probed: take no port
        **changes,
    )
    catalog = Catalog(root / "bitstreams")
    image = root / f"{SAMPLE_NAME}.bin"
    image.write_bytes(bytes(range(256)) * 64)
    catalog.add(image, SAMPLE_NAME, platform=PLATFORM, accelerator_id=SAMPLE_ACCELERATOR)
    return config, catalog


async def run_demo(base: Config) -> int:
    """Run the narrated demo; returns the process exit code."""
    with tempfile.TemporaryDirectory(prefix="fpga-slot-demo-") as tmp:
        config, catalog = sim_setup(base, Path(tmp))
        pods = NodePods()
        kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket, pods)
        await kubelet.start()
        agent = Agent(config, catalog=catalog, pods=pods, events=pods)
        stop = asyncio.Event()
        try:
            await _narrate(config, kubelet, agent, pods, stop)
        finally:
            stop.set()
            await kubelet.stop()
    return 0


async def _narrate(config: Config, kubelet: KubeletStandIn, agent: Agent, pods: NodePods, stop: asyncio.Event) -> None:
    say("1. Start the agent on simulated slots")
    shape = f"{config.sim_cards} cards x {config.sim_slots_per_card} slots"
    say("", f"{shape}, kubelet stand-in in {config.device_plugin_dir}")
    started = time.monotonic()
    task = asyncio.create_task(agent.run(stop), name="agent")
    await kubelet.wait_registered(1, WAIT_S)
    request = kubelet.registrations[0]
    say(
        "",
        f"registered after {ms_since(started)}: resource {request.resource_name}, version {request.version},",
    )
    say(
        "",
        f"endpoint {request.endpoint}, pre_start_required={request.options.pre_start_required}, "
        f"get_preferred_allocation_available={request.options.get_preferred_allocation_available}",
    )

    conn = kubelet.plugins[RESOURCE_NAME]
    expected = config.sim_cards * config.sim_slots_per_card
    await kubelet.wait_for(lambda: len(conn.devices) == expected, WAIT_S)
    say("2. ListAndWatch: the slots the kubelet sees")
    print(_device_table(conn), flush=True)

    say("3. A pod asks for 2 slots: GetPreferredAllocation, Allocate, PreStartContainer")
    admitted = await kubelet.admit("default", "fpga-inference", "main", RESOURCE_NAME, 2)
    say("", f"preferred allocation: {admitted.preferred} (one card, one NUMA node)")
    for spec in admitted.response.devices:
        say("", f"device {spec.host_path} -> {spec.container_path} ({spec.permissions})")
    for key, value in sorted(admitted.response.envs.items()):
        say("", f"env {key}={value}")
    for state in agent.registry.snapshot():
        if state.slot.id in admitted.device_ids and state.holder is not None:
            say("", f"agent records slot {state.slot.id} held by {state.holder.describe()}")

    say(f"4. A pod asks for bitstream {SAMPLE_NAME}: the slot is programmed before the container starts")
    wants = {ANNOTATION: SAMPLE_NAME}
    started = time.monotonic()
    first = await kubelet.admit("default", "aes-1", "main", RESOURCE_NAME, 1, wants)
    say("", f"pod default/aes-1 got {first.device_ids[0]}; PreStartContainer returned after {ms_since(started)}")
    _show_events(pods, "aes-1")

    say(f"5. The pod ends; a second pod asks for {SAMPLE_NAME}: the loaded slot is preferred, nothing is programmed")
    kubelet.delete_pod("default", "aes-1")
    started = time.monotonic()
    second = await kubelet.admit("default", "aes-2", "main", RESOURCE_NAME, 1, wants)
    say("", f"preferred allocation {second.preferred}; PreStartContainer returned after {ms_since(started)}")
    _show_events(pods, "aes-2")

    say("6. Bad requests fail clearly and change nothing")
    try:
        await conn.stub.Allocate(
            dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=["no-such-slot"])])
        )
    except grpc.aio.AioRpcError as exc:
        say("", f"Allocate(['no-such-slot']) -> {exc.code().name}: {exc.details()}")
    try:
        await kubelet.admit("default", "typo", "main", RESOURCE_NAME, 1, {ANNOTATION: "aes-v9"})
    except grpc.aio.AioRpcError as exc:
        say("", f"pod asking for aes-v9: PreStartContainer -> {exc.code().name}: {exc.details()}")
    _show_events(pods, "typo")
    kubelet.delete_pod("default", "typo")

    say("7. The kubelet restarts (deletes every socket, recreates kubelet.sock)")
    restarted = time.monotonic()
    await kubelet.restart()
    await kubelet.wait_registered(2, WAIT_S)
    say("", f"agent registered again after {ms_since(restarted)}")
    conn = kubelet.plugins[RESOURCE_NAME]
    await kubelet.wait_for(lambda: len(conn.healthy()) == expected, WAIT_S)
    say("", f"kubelet sees {len(conn.healthy())} healthy slots again")

    fabric = agent.backend.fabric
    if fabric is not None and config.sim_cards > 0:
        victim = sorted(conn.devices)[-1]
        card, _, region = victim.rpartition("-")
        say("8. A slot fails and recovers (event-driven health)")
        failed = time.monotonic()
        fabric.set_health(card, region, healthy=False, reason="demo: configuration CRC error")
        await kubelet.wait_for(lambda: conn.devices[victim].health == "Unhealthy", WAIT_S)
        say("", f"{victim} Unhealthy at the kubelet after {ms_since(failed)}")
        recovered = time.monotonic()
        fabric.set_health(card, region, healthy=True)
        await kubelet.wait_for(lambda: conn.devices[victim].health == "Healthy", WAIT_S)
        say("", f"{victim} Healthy again after {ms_since(recovered)}")

    say("9. SIGTERM: stop serving and remove the socket")
    stop.set()
    await task
    socket = config.device_plugin_dir / "fpga-slot.sock"
    say("", f"socket {socket} exists: {socket.exists()}")
    say("done")


def _show_events(pods: NodePods, pod: str) -> None:
    for event in pods.events:
        if event.pod == pod:
            say("", f"event on {event.namespace}/{event.pod}: {event.type} {event.reason}: {event.message}")


def _device_table(conn: PluginConnection) -> str:
    rows: list[dict[str, object]] = [
        {
            "id": device.ID,
            "health": device.health,
            "numa": ",".join(str(n.ID) for n in device.topology.nodes) if device.HasField("topology") else None,
        }
        for device in conn.devices.values()
    ]
    return format_table(["id", "health", "numa"], sorted(rows, key=lambda r: str(r["id"])))

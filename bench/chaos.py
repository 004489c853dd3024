"""SIGKILL storm: ``fpga-agent run`` killed at random moments while pods come and go and slots are programmed.

A real agent process (sim backend, 2 cards x 4 slots, 150 ms per programming, API access to
the fake API server from the tests) against the kubelet stand-in; the stand-in and the API
server stay up, as a node's kubelet and the cluster do. Each round: start the agent, wait until
it serves, run an allocation storm (pods with one of eight bitstreams or none, one or two slots,
deleted again at random) and SIGKILL the agent after a random 0.1-1.5 s, seven times in ten
aimed at a container being admitted (its slot being programmed). After each kill the checks are:

* the checkpoint on disk decodes (never half-written);
* the restarted agent registers, and accepts every slot the kubelet still holds (Allocate);
* no slot is held by two live containers (the kubelet's assignments);
* no slot's content is reported wrongly: every slot the agent publishes on its Node as holding a
  bitstream holds that accelerator on the (simulated) card.

Usage: python bench/chaos.py [--kills 50] [--seed 1] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp  # noqa: E402
from agent.simfpga.fabric import PLATFORM, STATE_FILE  # noqa: E402
from agent.slots import checkpoint  # noqa: E402
from bench.table import Row, emit  # noqa: E402
from tests.fakeapi import DEFAULT_NODE, running_apiserver  # noqa: E402
from tests.fakes import RESOURCE_NAME, Catalog, KubeletStandIn  # noqa: E402
from tests.integration.test_rolling_update import Node, agent_process, wait_serving  # noqa: E402

BITSTREAMS = {f"accel-{i}": f"{i:x}" * 32 for i in range(8)}  # more than slots: misses are common


def make_catalog(root: Path) -> None:
    catalog = Catalog(root / "bitstreams")
    for index, (name, accelerator) in enumerate(BITSTREAMS.items()):
        image = root / f"{name}.bin"
        image.write_bytes(bytes([index]) * 4096)
        catalog.add(image, name, platform=PLATFORM, accelerator_id=accelerator)


async def storm(
    node: Node, rng: random.Random, serial: list[int], live: list[str], admitting: list[bool], began: asyncio.Event
) -> None:
    """Pods arrive (bitstream or none, 1-2 slots) and leave, until cancelled; ``admitting[0]`` while a
    container is being admitted (Allocate, then PreStartContainer programming its slots). A pod whose
    container could not start is deleted, as its owner would after the failure; ``live`` outlasts a kill
    (the kubelet keeps a pod cut off mid-start and its slots: the next round deletes it like any other)."""
    while True:
        if live and (rng.random() < 0.5 or len(live) > 3):
            delete(node, live.pop(rng.randrange(len(live))))
        else:
            serial[0] += 1
            pod = f"p{serial[0]}"
            live.append(pod)
            admitting[0] = True
            began.set()
            try:
                await node.admit(pod, rng.choice([1, 1, 2]), rng.choice([*BITSTREAMS, None]))
            except Exception:  # no slot free, or the agent just died
                live.remove(pod)
                delete(node, pod)
            finally:
                admitting[0] = False
        await asyncio.sleep(rng.uniform(0.01, 0.1))


def delete(node: Node, pod: str) -> None:
    node.kubelet.delete_pod("default", pod)
    with contextlib.suppress(Exception):
        node.api.delete_pod("default", pod)


def wrong_contents(node: Node) -> list[str]:
    """Slots the agent publishes as holding a bitstream whose accelerator the card does not hold."""
    state = node.api.node_state("fpga-slot", DEFAULT_NODE)
    published = state["spec"]["slots"] if state else []
    state_file = node.root / "state" / "sim-dev" / STATE_FILE
    on_card = json.loads(state_file.read_text()).get("loaded", {}) if state_file.exists() else {}
    wrong = []
    for slot in published:
        if slot.get("bitstream"):
            card, region = slot["id"].rsplit("-", 1)
            if on_card.get(f"{card}/{region}") != BITSTREAMS.get(slot["bitstream"]):
                wrong.append(
                    f"{slot['id']}: published {slot['bitstream']}, card holds {on_card.get(f'{card}/{region}')}"
                )
    return wrong


def double_holders(node: Node) -> list[str]:
    seen: dict[str, str] = {}
    doubles = []
    for pod, containers in node.kubelet.assignments.items():
        for container, resources in containers.items():
            for device in resources.get(RESOURCE_NAME, []):
                owner = f"{pod}/{container}"
                if device in seen and seen[device] != owner:
                    doubles.append(f"{device}: {seen[device]} and {owner}")
                seen[device] = owner
    return doubles


async def run(kills: int, seed: int) -> list[Row]:
    rng = random.Random(seed)
    serial = [0]
    corrupt = not_registered = refused_held = doubles = wrong = mid_admission = 0
    admitting = [False]
    live: list[str] = []
    began = asyncio.Event()
    with tempfile.TemporaryDirectory(prefix="fs-chaos-", dir="/tmp") as tmp, running_apiserver() as api:
        root = Path(tmp)
        api.add_node(DEFAULT_NODE)
        make_catalog(root)
        kubelet = KubeletStandIn(root / "device-plugins", root / "pod-resources" / "kubelet.sock")
        await kubelet.start()
        node = Node(root, kubelet, api, api.write_kubeconfig(root / "kubeconfig"))
        env = node.env
        node.env = lambda: {**env(), "FPGA_AGENT_SIM_PROGRAM_MS": "150"}  # type: ignore[method-assign]
        try:
            for round_index in range(kills + 1):
                async with agent_process(node, f"agent {round_index}") as agent:
                    try:
                        await wait_serving(node, agent, len(kubelet.registrations) + 1)
                    except (TimeoutError, AssertionError) as exc:
                        not_registered += 1
                        print(f"round {round_index}: not serving: {str(exc)[:300]}", file=sys.stderr)
                        continue
                    conn = kubelet.plugins[RESOURCE_NAME]
                    held = [device for containers in kubelet.assignments.values() for r in containers.values()
                            for device in r.get(RESOURCE_NAME, [])]  # fmt: skip
                    for device in held:
                        try:
                            await conn.stub.Allocate(
                                dp.AllocateRequest(
                                    container_requests=[dp.ContainerAllocateRequest(devices_ids=[device])]
                                ),
                                timeout=10,
                            )
                        except grpc.aio.AioRpcError as exc:
                            refused_held += 1
                            print(f"round {round_index}: held {device} refused: {exc.details()}", file=sys.stderr)
                    await asyncio.sleep(0.6)  # the node state is published (at most twice a second)
                    problems = wrong_contents(node)
                    wrong += len(problems)
                    for problem in problems:
                        print(f"round {round_index}: wrong content {problem}", file=sys.stderr)
                    if round_index == kills:
                        break
                    storming = asyncio.create_task(storm(node, rng, serial, live, admitting, began))
                    await asyncio.sleep(rng.uniform(0.1, 1.5))
                    if rng.random() < 0.7:  # most kills aimed at an admission under way (programming)
                        began.clear()
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(2):
                                await began.wait()
                        await asyncio.sleep(rng.uniform(0.005, 0.05))  # Allocate done, programming (150 ms) under way
                    mid_admission += admitting[0]
                    agent.proc.kill()  # SIGKILL: no final checkpoint, no socket removed
                    await agent.proc.wait()
                    storming.cancel()
                    await asyncio.gather(storming, return_exceptions=True)
                try:
                    if node.checkpoint.exists():
                        checkpoint.decode(node.checkpoint.read_bytes())
                except checkpoint.CheckpointError as exc:
                    corrupt += 1
                    print(f"round {round_index}: corrupt checkpoint: {exc}", file=sys.stderr)
                found = double_holders(node)
                doubles += len(found)
                for problem in found:
                    print(f"round {round_index}: {problem}", file=sys.stderr)
        finally:
            await kubelet.stop()
    return [
        (f"SIGKILLs during an allocation storm ({kills})", f"{kills - not_registered}/{kills} served again", "all"),
        ("slots the kubelet still held refused after a restart", str(refused_held), "0"),
        ("slots held by two live containers", str(doubles), "0"),
        ("slots published with a content the card does not hold", str(wrong), "0"),
        ("corrupt checkpoints", str(corrupt), "0"),
        ("pods started in the storm", str(serial[0]), "-"),
        ("kills that landed while a container was being admitted (programming)", str(mid_admission), "-"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    started = time.monotonic()
    rows = asyncio.run(run(args.kills, args.seed))
    rows.append(("chaos duration", f"{time.monotonic() - started:.0f} s", "-"))
    emit(rows, as_json=args.json)


if __name__ == "__main__":
    main()

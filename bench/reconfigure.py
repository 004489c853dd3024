"""Agent overhead around programming at PreStartContainer, for cache misses and hits.

A real agent (sim backend) runs in this process against the kubelet stand-in over
real unix sockets. For each pod the stand-in does GetPreferredAllocation, Allocate
and then PreStartContainer; we time the PreStartContainer round trip and subtract
the time the (simulated) hardware spent programming, measured inside the programmer.
What is left is the agent's overhead: pod-resources lookup, annotation, catalog
resolve, image read + sha256, verification, bookkeeping, Events.

Usage: python bench/reconfigure.py [--pods 200 --program-ms 20 --image-kb 4096]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp  # noqa: E402
from agent.app import Agent  # noqa: E402
from agent.deviceplugin import RESOURCE_NAME  # noqa: E402
from agent.kubeletsim import KubeletStandIn, NodePods  # noqa: E402
from agent.programming.catalog import Catalog  # noqa: E402
from agent.reconfigure import ANNOTATION  # noqa: E402
from agent.simfpga.fabric import PLATFORM  # noqa: E402
from agent.slots import Slot  # noqa: E402
from bench.table import emit, p50_p99  # noqa: E402
from tests.fakes import test_config  # noqa: E402


class TimedProgrammer:
    """Wraps a programmer and records how long the hardware took."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.spent: list[float] = []

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        started = time.perf_counter()
        took = await self.inner.program(slot, image, accelerator_id, timeout_s)  # type: ignore[attr-defined]
        self.spent.append(time.perf_counter() - started)
        return float(took)


async def measure(pods_n: int, program_ms: int, image_kb: int) -> dict[str, list[float]]:
    root = Path(tempfile.mkdtemp(prefix="fs-reconf-", dir="/tmp"))
    try:
        catalog = Catalog(root / "bitstreams")
        names = []
        for i in range(16):  # more bitstreams than slots, so that pods also miss
            image = root / f"img{i}.bin"
            image.write_bytes(bytes([i]) * (image_kb * 1024))
            names.append(f"bench-{i}")
            catalog.add(image, names[-1], platform=PLATFORM, accelerator_id=f"{i:032x}")
        config = test_config(root, sim_program_ms=program_ms)
        pods = NodePods()
        kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket, pods)
        await kubelet.start()
        agent = Agent(config, catalog=catalog, pods=pods, events=pods)
        timed = TimedProgrammer(agent.backend.programmers["sim"])
        agent.reconfigurer._programmers = {"sim": timed}  # measure what the hardware spends
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        results: dict[str, list[float]] = {"miss": [], "hit": []}
        try:
            await kubelet.wait_registered(1, 10)
            conn = kubelet.plugins[RESOURCE_NAME]
            await kubelet.wait_for(lambda: len(conn.devices) == 8, 10)
            for i in range(pods_n):
                # Alternate: two pods in a row want the same bitstream (miss, then hit).
                name = names[(i // 2) % len(names)]
                pod = f"p{i}"
                pods.add("bench", pod, {"main": 1}, {ANNOTATION: name})
                free = conn.healthy()
                preferred = await conn.stub.GetPreferredAllocation(
                    dp.PreferredAllocationRequest(
                        container_requests=[
                            dp.ContainerPreferredAllocationRequest(available_deviceIDs=free, allocation_size=1)
                        ]
                    )
                )
                chosen = list(preferred.container_responses[0].deviceIDs)
                await conn.stub.Allocate(
                    dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=chosen)])
                )
                kubelet.assignments[("bench", pod)] = {"main": {RESOURCE_NAME: chosen}}
                before = len(timed.spent)
                started = time.perf_counter()
                await conn.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=chosen), timeout=30)
                elapsed = time.perf_counter() - started
                hardware = sum(timed.spent[before:])
                results["miss" if len(timed.spent) > before else "hit"].append((elapsed - hardware) * 1000)
                kubelet.delete_pod("bench", pod)
            return results
        finally:
            stop.set()
            await task
            await kubelet.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="agent overhead around programming")
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--program-ms", type=int, default=20)
    parser.add_argument("--image-kb", type=int, default=4096)
    parser.add_argument("--json", action="store_true", help="one machine-readable line (for bench/run)")
    args = parser.parse_args()
    results = asyncio.run(measure(args.pods, args.program_ms, args.image_kb))
    rows = [
        (
            f"PreStartContainer overhead, cache {case} ({len(samples)}, {args.image_kb} KiB)",
            p50_p99(samples, digits=2),
            "<= 5 ms",
        )
        for case, samples in results.items()
        if samples
    ]
    emit(rows, args.json)


if __name__ == "__main__":
    main()

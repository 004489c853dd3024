"""Agent overhead around programming at PreStartContainer, for cache misses and hits.

A real agent runs in this process against the kubelet stand-in over real unix sockets.
For each pod the stand-in does GetPreferredAllocation, Allocate and then
PreStartContainer; we time the PreStartContainer round trip and subtract the time
spent inside the programmer. What is left is the agent's overhead: pod-resources
lookup, annotation, catalog resolve, image read + sha256, verification, bookkeeping,
Events. Two programmers, each in its own rounds:

* ``sim``: the built-in programmer of simulated cards (8 slots; ``--program-ms`` of
  simulated hardware time);
* ``command``: the command programmer on 8 static slots, with the smallest real tools
  (program: ``/bin/sh -c 'echo ACCELERATOR > FILE'``, read-back: ``/bin/cat FILE``).
  Its own cost, two tool runs per miss (fork/exec in a new session, pipes, reaping,
  the group kill), is reported on a row of its own.

Each round is a fresh agent; the table gives the median of the rounds' p50 and p99
and, in brackets, their range over the rounds.

Usage: python bench/reconfigure.py [--pods 200 --rounds 3 --program-ms 20 --image-kb 4096 --programmer both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp  # noqa: E402
from agent.app import Agent  # noqa: E402
from agent.config import Config  # noqa: E402
from agent.demo.kubelet.devicemanager import KubeletStandIn  # noqa: E402
from agent.demo.kubelet.nodepods import NodePods  # noqa: E402
from agent.deviceplugin.constants import RESOURCE_NAME  # noqa: E402
from agent.discovery.static import parse_static_slots  # noqa: E402
from agent.node.reconfigure import ANNOTATION  # noqa: E402
from agent.programming.catalog import Catalog  # noqa: E402
from agent.programming.commandspec import parse_command_programmers  # noqa: E402
from agent.simfpga.fabric import PLATFORM  # noqa: E402
from agent.slots.model import Slot  # noqa: E402
from bench.table import emit, pct  # noqa: E402
from tests.fakes import test_config  # noqa: E402

SLOTS = 8


class TimedProgrammer:
    """Wraps a programmer and records how long it took (the hardware, or the tool runs)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.spent: list[float] = []

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        started = time.perf_counter()
        took = await self.inner.program(slot, image, accelerator_id, timeout_s)  # type: ignore[attr-defined]
        self.spent.append(time.perf_counter() - started)
        return float(took)


class TimedFileProgrammer(TimedProgrammer):
    """The same for a programmer that is handed the catalog's file."""

    async def program_file(self, slot: Slot, image_file: Path, accelerator_id: str, timeout_s: float) -> float:
        started = time.perf_counter()
        took = await self.inner.program_file(slot, image_file, accelerator_id, timeout_s)  # type: ignore[attr-defined]
        self.spent.append(time.perf_counter() - started)
        return float(took)


def command_config(root: Path) -> Config:
    """8 static slots (4 cards x 2 regions) programmed by /bin/sh and read back by /bin/cat."""
    card_dir = root / "card"
    card_dir.mkdir()
    slots = [
        {"card": f"card{c}", "region": f"r{r}", "devices": ["/dev/null"], "platform": PLATFORM}
        for c in range(SLOTS // 2)
        for r in range(2)
    ]
    for slot in parse_static_slots(slots):
        (card_dir / slot.slot_id).touch()  # empty: the read-back at start finds no accelerator
    entry = {
        "platform": PLATFORM,
        "program": ["/bin/sh", "-c", 'echo "$1" > "$2"', "sh", "{accelerator}", f"{card_dir}/{{slot}}"],
        "read-back": ["/bin/cat", f"{card_dir}/{{slot}}"],
    }
    return test_config(
        root,
        backend="static",
        static_slots=parse_static_slots(slots),
        command_programmers=parse_command_programmers([entry]),
    )


async def measure(kind: str, pods_n: int, program_ms: int, image_kb: int) -> dict[str, list[float]]:
    root = Path(tempfile.mkdtemp(prefix="fs-reconf-", dir="/tmp"))
    try:
        catalog = Catalog(root / "bitstreams")
        names = []
        for i in range(16):  # more bitstreams than slots, so that pods also miss
            image = root / f"img{i}.bin"
            image.write_bytes(bytes([i]) * (image_kb * 1024))
            names.append(f"bench-{i}")
            catalog.add(image, names[-1], platform=PLATFORM, accelerator_id=f"{i + 1:032x}")
        config = test_config(root, sim_program_ms=program_ms) if kind == "sim" else command_config(root)
        pods = NodePods()
        kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket, pods)
        await kubelet.start()
        agent = Agent(config, catalog=catalog, pods=pods, events=pods)
        backend = "sim" if kind == "sim" else "static"
        inner = agent.backend.programmers[backend]
        timed = TimedProgrammer(inner) if kind == "sim" else TimedFileProgrammer(inner)
        agent.reconfigurer.loader._programmers = {backend: timed}  # measure what the programmer spends
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        results: dict[str, list[float]] = {"miss": [], "hit": [], "tool": []}
        try:
            await kubelet.wait_registered(1, 10)
            conn = kubelet.plugins[RESOURCE_NAME]
            await kubelet.wait_for(lambda: len(conn.devices) == SLOTS, 10)
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
                spent = sum(timed.spent[before:])
                results["miss" if len(timed.spent) > before else "hit"].append((elapsed - spent) * 1000)
                if len(timed.spent) > before:
                    results["tool"].append(spent * 1000)
                kubelet.delete_pod("bench", pod)
            return results
        finally:
            stop.set()
            await task
            await kubelet.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def summary(rounds: list[list[float]]) -> str:
    """Median over the rounds of p50 and p99, each with its range over the rounds."""
    p50s = [pct(samples, 0.5) for samples in rounds]
    p99s = [pct(samples, 0.99) for samples in rounds]
    return (
        f"p50 {statistics.median(p50s):.2f} ms [{min(p50s):.2f}-{max(p50s):.2f}] / "
        f"p99 {statistics.median(p99s):.2f} ms [{min(p99s):.2f}-{max(p99s):.2f}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="agent overhead around programming")
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--program-ms", type=int, default=20)
    parser.add_argument("--image-kb", type=int, default=4096)
    parser.add_argument("--programmer", choices=("sim", "command", "both"), default="both")
    parser.add_argument("--json", action="store_true", help="one machine-readable line (for bench/run)")
    args = parser.parse_args()
    kinds = ["sim", "command"] if args.programmer == "both" else [args.programmer]
    collected: dict[tuple[str, str], list[list[float]]] = {}
    for _ in range(args.rounds):
        for kind in kinds:  # interleaved, so that a busy moment of the machine hits both
            for case, samples in asyncio.run(measure(kind, args.pods, args.program_ms, args.image_kb)).items():
                if samples:
                    collected.setdefault((kind, case), []).append(samples)
    labels = {
        "miss": "PreStartContainer overhead, cache miss",
        "hit": "PreStartContainer overhead, cache hit",
        "tool": "command programmer's own time per miss (2 tool runs)",
    }
    rows = []
    for (kind, case), rounds in collected.items():
        if kind == "sim" and case == "tool":
            continue
        n = sum(len(samples) for samples in rounds)
        what = f"{labels[case]} [{kind}] ({len(rounds)} rounds, {n} samples, {args.image_kb} KiB)"
        rows.append((what, summary(rounds), "<= 5 ms" if case != "tool" else "-"))
    emit(rows, args.json)
    if not args.json:
        print(json.dumps({"rounds": args.rounds, "pods_per_round": args.pods}), file=sys.stderr)


if __name__ == "__main__":
    main()

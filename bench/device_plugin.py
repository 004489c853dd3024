"""Device-plugin benchmarks against a real agent process, printed as a table.

Starts ``fpga-agent run`` (sim backend, 64 slots by default) as a subprocess, with
the in-process kubelet stand-in on the other end of real unix sockets, and measures:

* launch to registered (process start until the stand-in accepted Register);
* agent RSS after start and after the RPC load;
* Allocate and GetPreferredAllocation round trips (p50/p99) as the kubelet sees them;
* re-registration after a kubelet restart (sockets deleted, kubelet.sock recreated).

Usage: python bench/device_plugin.py [--slots-per-card 8 --cards 8 --calls 2000 --restarts 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp  # noqa: E402
from agent.demo.kubelet.devicemanager import KubeletStandIn  # noqa: E402
from agent.deviceplugin.constants import RESOURCE_NAME  # noqa: E402
from bench.table import emit, p50_p99  # noqa: E402
from tests.fakeapi import FakeKubeApiServer, running_apiserver  # noqa: E402

NODE = "bench-node"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def bench(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """The agent as it runs on a node: with API access (here the fake API server from the tests)."""
    with running_apiserver() as api:
        api.add_node(NODE)
        return await bench_agent(args, api)


async def bench_agent(args: argparse.Namespace, api: FakeKubeApiServer) -> list[tuple[str, str, str]]:
    root = Path(tempfile.mkdtemp(prefix="fs-bench-", dir="/tmp"))
    kubeconfig = api.write_kubeconfig(root / "kubeconfig")
    kubelet = KubeletStandIn(root / "dp", root / "pr" / "kubelet.sock")
    await kubelet.start()
    env = dict(os.environ, GRPC_VERBOSITY="ERROR")
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent.cli.main", "run", "--backend", "sim",
        "--sim-cards", str(args.cards), "--sim-slots-per-card", str(args.slots_per_card),
        "--device-plugin-dir", str(root / "dp"), "--pod-resources-socket", str(root / "pr" / "kubelet.sock"),
        "--state-dir", str(root / "state"), "--sim-device-nodes", "file", "--log-level", "warning",
        "--kubeconfig", str(kubeconfig), "--node-name", NODE, "--health-listen", "127.0.0.1:0",
        env=env,
    )  # fmt: skip
    rows: list[tuple[str, str, str]] = []
    try:
        total = args.cards * args.slots_per_card
        await kubelet.wait_registered(1, 30)
        launch_ms = (time.monotonic() - started) * 1000
        conn = kubelet.plugins[RESOURCE_NAME]
        await kubelet.wait_for(lambda: len(conn.devices) == total, 10)
        rows.append(("launch to registered", f"{launch_ms:.0f} ms", "<= 1000 ms"))
        rows.append(("agent RSS after start (with API access)", f"{rss_mb(proc.pid):.1f} MiB", "<= 80 MB"))

        ids = sorted(conn.devices)
        alloc: list[float] = []
        for i in range(args.calls):
            request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=[ids[i % total]])])
            t = time.perf_counter()
            await conn.stub.Allocate(request)
            alloc.append((time.perf_counter() - t) * 1000)
        rows.append(
            (
                f"Allocate round trip, {total} slots",
                p50_p99(alloc),
                "p99 <= 1.2 ms",
            )
        )

        # The kubelet asks for a preference while it admits a pod that requests slots: the API
        # server knows that pod (Pending, on this node), and the agent looks at it.
        api.add_pod("admitted", node=NODE, slots={"main": 2})
        pref: list[float] = []
        request = dp.PreferredAllocationRequest(
            container_requests=[dp.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=2)]
        )
        for _ in range(args.calls):
            t = time.perf_counter()
            await conn.stub.GetPreferredAllocation(request)
            pref.append((time.perf_counter() - t) * 1000)
        rows.append(
            (
                f"GetPreferredAllocation (2 of {total})",
                p50_p99(pref),
                "-",
            )
        )
        rows.append(("agent RSS after load", f"{rss_mb(proc.pid):.1f} MiB", "<= 80 MB"))

        rereg: list[float] = []
        for n in range(args.restarts):
            t = time.monotonic()
            await kubelet.restart()
            await kubelet.wait_registered(n + 2, 10)
            rereg.append((time.monotonic() - t) * 1000)
        rows.append(
            (
                "re-registration after kubelet restart",
                f"p50 {statistics.median(rereg):.1f} ms / max {max(rereg):.1f} ms",
                "< 1000 ms",
            )
        )
    finally:
        proc.terminate()
        code = await proc.wait()
        await kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
    rows.append(("exit code after SIGTERM", str(code), "0"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=8)
    parser.add_argument("--slots-per-card", type=int, default=8)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--restarts", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="one machine-readable line (for bench/run)")
    args = parser.parse_args()
    emit(asyncio.run(bench(args)), args.json)


if __name__ == "__main__":
    main()

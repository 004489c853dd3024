"""The scheduler benchmark's calls replayed against the extender and the do-nothing extender, CPU per call.

``bench/scheduler.py`` measures throughput with the real kube-scheduler, but on two
shared cores its figures move by +-15 % from run to run. This replays the same kind
of calls without the scheduler: the node population of the bundled Kubernetes'
scheduler benchmark (5000 nodes, 4 slots, 40 bitstreams; ``bench/extender_handler.py``)
served by the fake API server, 500 names per call, pods with the benchmark's
bitstream mix, one call at a time on one kept-alive connection (as kube-scheduler
calls). Each server is pinned to one CPU and the caller to the other; the table gives
each server's CPU time per call, the figure that adds to every pod's scheduling.

* ``fpga-agent extender``: ours, as shipped, on each event loop it serves on
  (``--event-loop``: uvloop, the default, and asyncio's own);
* ``do-nothing extender``: ``bench/noop_extender.py`` (reads the request, answers ``[]``)
  on the same loops: the protocol's floor in Python.

Each round runs every server once (``--rounds``), medians reported.

Usage: python bench/extender_replay.py [--calls 2000] [--rounds 3] [--loops uvloop,asyncio] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.config import EVENT_LOOPS  # noqa: E402
from bench.extender import RawConnection, Server, start_server  # noqa: E402
from bench.extender_handler import NODES, node_state, request_body  # noqa: E402
from bench.table import Row, emit  # noqa: E402
from tests.fakeapi import FakeKubeApiServer  # noqa: E402

NOOP = ROOT / "bench" / "noop_extender.py"


async def start_noop(cpu: int, loop: str) -> Server:
    with socket.socket() as probe:  # a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        "taskset", "-c", str(cpu), sys.executable, str(NOOP), "--port", str(port), "--loop", loop,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    server = Server(process, f"http://127.0.0.1:{port}")
    for _ in range(100):
        try:
            conn = await RawConnection.open(server.url)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        await conn.close()
        return server
    raise RuntimeError("the do-nothing extender did not start")


async def replay(server: Server, bodies: list[bytes]) -> float:
    """Server CPU seconds per call, calls one after another on one connection."""
    conn = await RawConnection.open(server.url)
    requests = [conn.request_bytes("/prioritize", body) for body in bodies]
    try:
        for request in requests[:50]:  # warm-up: connection, first tables
            await conn.call(request)
        before = server.cpu_s()
        for request in requests:
            await conn.call(request)
        return (server.cpu_s() - before) / len(requests)
    finally:
        await conn.close()


async def bench(args: argparse.Namespace) -> list[Row]:
    rng = random.Random(args.seed)
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = cpus[0], cpus[-1]
    os.sched_setaffinity(0, {client_cpu})
    names = [f"bench-node-{i:05d}" for i in range(NODES)]
    bodies = [request_body(rng, i, names) for i in range(args.calls)]
    servers: dict[tuple[str, str], Server] = {}
    runs: dict[tuple[str, str], list[float]] = {}
    with FakeKubeApiServer() as api:
        for i, name in enumerate(names):
            api.add_node(name)
            api.put_node_state(node_state(i, name))
        kubeconfig = api.write_kubeconfig(Path(args.workdir) / "kubeconfig")
        try:
            for loop in args.loops:
                servers["fpga-agent", loop] = await start_server(kubeconfig, server_cpu, "--event-loop", loop)
                servers["do-nothing", loop] = await start_noop(server_cpu, loop)
            for _ in range(args.rounds):
                for key, server in servers.items():
                    runs.setdefault(key, []).append(await replay(server, bodies) * 1e6)
        finally:
            for server in servers.values():
                server.process.terminate()
                await server.process.wait()
    rows: list[Row] = []
    for loop in args.loops:
        ours_us, noop_us = runs["fpga-agent", loop], runs["do-nothing", loop]
        ours_median, noop_median = statistics.median(ours_us), statistics.median(noop_us)
        pairs = " ".join(f"{a:.0f}/{b:.0f}" for a, b in zip(ours_us, noop_us, strict=True))
        asked = "prioritize, 500 of 5000 names"
        rows += [
            (f"{asked}, fpga-agent extender on {loop}: CPU per call", f"{ours_median:.0f} us", ""),
            (f"{asked}, do-nothing extender on {loop}: CPU per call", f"{noop_median:.0f} us", ""),
            (f"  runs on {loop} (ours / do-nothing)", pairs, ""),
            (f"ours beyond the do-nothing extender on {loop}, per call", f"{ours_median - noop_median:.0f} us", ""),
        ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loops", default="uvloop,asyncio", help="event loops to serve on, comma-separated")
    parser.add_argument("--json", action="store_true", help="machine-readable rows (for bench/run)")
    args = parser.parse_args()
    args.loops = args.loops.split(",")
    unknown = sorted(set(args.loops) - set(EVENT_LOOPS))
    if unknown:
        parser.error(f"--loops: {', '.join(unknown)} is not one of {', '.join(EVENT_LOOPS)}")
    with tempfile.TemporaryDirectory(prefix="fs-replay-") as tmp:
        args.workdir = tmp
        rows = asyncio.run(bench(args))
    emit(rows, as_json=args.json)


if __name__ == "__main__":
    main()

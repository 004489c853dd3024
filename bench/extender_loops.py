"""The extender's CPU per call over real HTTP, on each event loop, beside the do-nothing extender.

Each server is a process of its own on a loopback port: the do-nothing extender
(``bench/noop_extender.py``) and ours (the real HTTP server and handler over the node
states of ``bench/extender_handler.py``: 5000 nodes, pods asking one slot of one of 40
bitstreams, 500 names a call), each on asyncio's own loop and on uvloop's
(``fpga-agent extender --event-loop``). One client in this process sends the calls back
to back on one kept-alive connection, with the headers Go's client sends, a new pod each
call (as kube-scheduler sends them): a warm-up, then the calls timed. A server's CPU is
read from the kernel's per-thread run time (``/proc/PID/task/*/schedstat``, nanoseconds).

Rounds rotate the order of the servers; the table gives each one's median and range over
the rounds. This is the cost of a call in the extender's process alone; what the real
scheduler gains from it is measured by ``bench/scheduler.py``.

Usage: python bench/extender_loops.py [--rounds 5] [--calls 3000] [--warm-up 1000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.extender_handler import NODES, node_annotations, request_body  # noqa: E402
from bench.table import Row, emit  # noqa: E402

SERVERS = (("do-nothing", "asyncio"), ("do-nothing", "uvloop"), ("fpga-agent", "asyncio"), ("fpga-agent", "uvloop"))
PORT = 18950
STARTUP_TIMEOUT_S = 60.0


def serve(kind: str, loop: str, port: int) -> None:
    """Server mode: ``kind`` on ``loop`` at 127.0.0.1:``port`` until killed."""
    import uvloop

    if kind == "do-nothing":
        from bench.noop_extender import main as noop_main

        with asyncio.Runner(loop_factory=uvloop.new_event_loop if loop == "uvloop" else None) as runner:
            runner.run(noop_main(port))
        return
    from agent.extender.cache import NodeCache, WatchedNode
    from agent.extender.http import start_server
    from agent.extender.nodestate import read_node_slots
    from agent.extender.scoring import ScoreWeights
    from agent.extender.server import Extender, build_app, extender_metrics

    names = node_names()
    cache = NodeCache()
    cache.replace(WatchedNode(n, read_node_slots(n, "1", node_annotations(i, n))) for i, n in enumerate(names))
    extender = Extender(cache, ScoreWeights())
    extender.prepare()
    app = build_app(extender, metrics=extender_metrics())

    async def run() -> None:
        await start_server(app.handle, "127.0.0.1", port, app.max_body_bytes)
        await asyncio.Event().wait()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop if loop == "uvloop" else None) as runner:
        runner.run(run())


def node_names() -> list[str]:
    return [f"bench-node-{i:05d}" for i in range(NODES)]


def cpu_ns(pid: int) -> int:
    """The process's run time so far, all its threads, in nanoseconds."""
    return sum(int(path.read_text().split()[0]) for path in Path(f"/proc/{pid}/task").glob("*/schedstat"))


@contextlib.contextmanager
def server(kind: str, loop: str, port: int) -> Iterator[subprocess.Popen[bytes]]:
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", kind, loop, str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            if process.poll() is not None or time.monotonic() > deadline:
                stderr = process.stderr.read().decode() if process.stderr else ""
                raise SystemExit(f"{kind} on {loop} did not start: {stderr.strip()[-500:]}")
            time.sleep(0.1)
        yield process
    finally:
        process.kill()
        process.wait()


class Caller:
    """One kept-alive connection; a call sends the request and reads the whole answer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, body: bytes) -> None:
        head = (
            f"POST /prioritize HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: Go-http-client/1.1\r\n"
            f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n"
        )
        self.sock.sendall(head.encode() + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += self.receive()
        head_bytes, _, rest = answer.partition(b"\r\n\r\n")
        status = head_bytes.split(b" ", 2)[1]
        if status != b"200":
            raise SystemExit(f"the server answered {status.decode()}: {head_bytes.decode(errors='replace')}")
        lines = head_bytes.split(b"\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length"))
        while len(rest) < length:
            rest += self.receive()

    def receive(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise SystemExit("the server closed the connection")
        return data

    def close(self) -> None:
        self.sock.close()


def measure(kind: str, loop: str, bodies: list[bytes], warm_up: int, port: int) -> tuple[float, float]:
    """(server CPU, wall time) per timed call (the bodies after the first ``warm_up``), in microseconds."""
    with server(kind, loop, port) as process:
        caller = Caller(port)
        try:
            for body in bodies[:warm_up]:
                caller.call(body)
            timed = bodies[warm_up:]
            cpu_before, started = cpu_ns(process.pid), time.perf_counter()
            for body in timed:
                caller.call(body)
            wall = time.perf_counter() - started
            cpu = cpu_ns(process.pid) - cpu_before
        finally:
            caller.close()
    return cpu / 1e3 / len(timed), wall * 1e6 / len(timed)


def spread(values: list[float]) -> str:
    median = statistics.median(values)
    return f"{median:.1f} us (range {min(values):.1f}-{max(values):.1f}, {len(values)} rounds)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (each server once per round)")
    parser.add_argument("--calls", type=int, default=3000, help="timed calls per server and round")
    parser.add_argument("--warm-up", type=int, default=1000, help="calls before the timed ones")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one machine-readable line (for bench/run)")
    parser.add_argument("--serve", nargs=3, metavar=("KIND", "LOOP", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        kind, loop, port = args.serve
        serve(kind, loop, int(port))
        return
    if args.rounds < 1 or args.calls < 1 or args.warm_up < 0:
        raise SystemExit("--rounds and --calls must be at least 1, --warm-up at least 0")
    rng = random.Random(args.seed)
    names = node_names()
    bodies = [request_body(rng, index, names) for index in range(args.warm_up + args.calls)]
    results: dict[tuple[str, str], list[tuple[float, float]]] = {config: [] for config in SERVERS}
    port = PORT
    for round_index in range(args.rounds):
        shift = round_index % len(SERVERS)
        for kind, loop in SERVERS[shift:] + SERVERS[:shift]:
            port += 1  # a fresh port each run: no wait for the last one's TIME_WAIT
            cpu, wall = measure(kind, loop, bodies, args.warm_up, port)
            results[kind, loop].append((cpu, wall))
            print(f"round {round_index + 1}: {kind} on {loop}: {cpu:.1f} us CPU, {wall:.1f} us wall", file=sys.stderr)
    rows: list[Row] = []
    for (kind, loop), runs in results.items():
        rows.append((f"{kind} extender on {loop}: server CPU per call", spread([c for c, _w in runs]), ""))
        rows.append((f"{kind} extender on {loop}: wall per call", spread([w for _c, w in runs]), ""))
    for loop in ("asyncio", "uvloop"):
        extra = [a[0] - b[0] for a, b in zip(results["fpga-agent", loop], results["do-nothing", loop], strict=True)]
        rows.append((f"fpga-agent minus do-nothing CPU per call, both on {loop}, per round", spread(extra), ""))
    for kind in ("fpga-agent", "do-nothing"):
        saved = [a[0] - b[0] for a, b in zip(results[kind, "asyncio"], results[kind, "uvloop"], strict=True)]
        rows.append((f"{kind} extender, CPU per call on asyncio minus on uvloop, per round", spread(saved), ""))
    emit(rows, args.json)


if __name__ == "__main__":
    main()

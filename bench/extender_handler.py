"""The extender's prioritize handler in one process: what one call costs before any HTTP.

Node states and pods as in the real-scheduler benchmark (``bench/scheduler.py`` on the
bundled Kubernetes' bench control plane): 5000 nodes, 4 slots each, two thirds free,
four fifths of the slots holding one of 40 bitstreams, the rest empty, last used long
ago, every catalog with all 40; pods that ask for one slot and one bitstream, small
bitstream numbers more often. Each call names 500 random nodes, as kube-scheduler does
at 5000 nodes.
The same 2000 request bodies are replayed against ``Extender.prioritize``:

* cold: a new extender (no score tables), the clock moving at 150 pods/s (the real
  scheduler's rate in bench/scheduler.py), so that the cluster's values of free copies
  (agent.extender.facts, worked out every 10 s) are in play from the 1500th call on, as in
  a real run: the nodes' scores then spread and answers list most of the names;
* warm: the same bodies again, tables filled, the clock standing still;
* long-running: a fresh extender scores 6000 pods first, so that what fills with time
  (the pods counted once each, 4096 at most; the promises of the last 15 s) is at its
  steady size, then new pods are timed;

and the pieces of a warm call are timed alone (parsing, the score board, encoding).
No HTTP, no other process: the floor under what ``bench/extender.py`` and
``bench/scheduler.py`` measure around it.

Usage: python bench/extender_handler.py [--calls 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.extender.cache import NodeCache, WatchedNode  # noqa: E402
from agent.extender.nodestate import BITSTREAMS_ANNOTATION, SLOTS_ANNOTATION, read_node_slots  # noqa: E402
from agent.extender.scoring import ScoreWeights  # noqa: E402
from agent.extender.server import Extender, build_app  # noqa: E402
from agent.extender.wire import encode_priorities, parse_extender_args  # noqa: E402
from agent.node.reconfigure import ANNOTATION  # noqa: E402
from bench.table import Row, emit  # noqa: E402

NODES = 5000
NAMES = 500
BITSTREAMS = 40
PLATFORM = "sim-pr-v1"
LONG_AGO = 1_700_000_000
NOW = 1_800_000_000.0
#: Pods scored before the long-running row is timed: more than the score board counts (4096), and 15 s of promises.
LONG_RUN_PODS = 6000


def node_annotations(index: int, name: str) -> dict[str, str]:
    """The fake nodes of the bundled Kubernetes' scheduler benchmark: slot k of node i holds bitstream
    (7i + 13k) mod 50 when that is below 40 (else nothing), and is free unless (i + k) mod 3 == 0."""
    slots = []
    for k in range(4):
        b = (index * 7 + k * 13) % (BITSTREAMS + 10)
        bitstream = f"bs-{b}" if b < BITSTREAMS else None
        slots.append(
            {
                "id": f"{name}-slot{k}",
                "card": "0000:af:00.0",
                "numa": 0,
                "platform": PLATFORM,
                "bitstream": bitstream,
                "accelerator": f"acc-{bitstream}" if bitstream else None,
                "free": (index + k) % 3 != 0,
                "healthy": True,
                "last_used": LONG_AGO + (index * 31 + k) % 86400,
            }
        )
    catalog = {f"bs-{b}": PLATFORM for b in range(BITSTREAMS)}
    return {SLOTS_ANNOTATION: json.dumps(slots), BITSTREAMS_ANNOTATION: json.dumps(catalog)}


def request_body(rng: random.Random, index: int, names: list[str]) -> bytes:
    """Pod i of that benchmark asks for bitstream ((i^2 + 7i) mod 40) mod (1 + i mod 40): small numbers more often."""
    bitstream = f"bs-{(index * index + 7 * index) % BITSTREAMS % (1 + index % BITSTREAMS)}"
    pod = {
        "metadata": {"name": f"pod-{index}", "namespace": "bench", "annotations": {ANNOTATION: bitstream}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"example.com/fpga-slot": "1"}}}]},
    }
    # compact, as kube-scheduler's Go encoder writes it
    body = {"Pod": pod, "Nodes": None, "NodeNames": rng.sample(names, NAMES)}
    return json.dumps(body, separators=(",", ":")).encode()


def per_call_us(bodies: list[bytes], call: Callable[[int, bytes], object], repeat: int = 1) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        for index, body in enumerate(bodies):
            call(index, body)
    return (time.perf_counter() - started) / (len(bodies) * repeat) * 1e6


def cache_flusher(flush_mb: int) -> Callable[[], None]:
    """A call that writes ``flush_mb`` MB of memory, one write per cache line: the extender's tables out of the
    CPU caches, as the API server, etcd and the scheduler leave them between two calls in a real run."""
    scratch = bytearray(flush_mb << 20)
    zeros = bytes(len(scratch) // 64)

    def flush() -> None:
        scratch[::64] = zeros

    return flush


def flushed_us(bodies: list[bytes], call: Callable[[int, bytes], object], flush_mb: int) -> float:
    """Per call, with ``flush_mb`` MB of memory written before each (timed apart, ``cache_flusher``)."""
    flush = cache_flusher(flush_mb)
    spent = 0.0
    for index, body in enumerate(bodies):
        flush()
        started = time.perf_counter()
        call(index, body)
        spent += time.perf_counter() - started
    return spent / len(bodies) * 1e6


class PodClock:
    """The extender's clock here: each reading (one per call) moves it by ``pace`` seconds, 150 pods/s as the real
    scheduler schedules in bench/scheduler.py; a pace of 0 stands it still."""

    def __init__(self) -> None:
        self.now = NOW
        self.pace = 1 / 150

    def __call__(self) -> float:
        self.now += self.pace
        return self.now


def long_running_us(rng: random.Random, names: list[str], cache: NodeCache, calls: int) -> float:
    """Per call, for ``calls`` new pods once a fresh extender has scored ``LONG_RUN_PODS`` others at 150 pods/s: the
    memories that fill with time (the pods counted once each, the promises of the last 15 s) at their sizes."""
    extender = Extender(cache, ScoreWeights(), clock=PodClock())
    for index in range(LONG_RUN_PODS):
        extender.prioritize(request_body(rng, index, names))
    bodies = [request_body(rng, LONG_RUN_PODS + index, names) for index in range(calls)]
    return per_call_us(bodies, lambda _i, body: extender.prioritize(body))


def fast_path_us(
    rng: random.Random, names: list[str], cache: NodeCache, calls: int, flush_mb: int
) -> tuple[float, float | None, int] | None:
    """Per call through the compiled fast path (``agent.extender.fastpath``), new pods: (warm, with ``flush_mb`` MB
    written between calls (0: not run), the calls it answered), each from the request's bytes to the response
    written and the answer recorded (``_fastbooks.c``); None where it is not built. Python answers the calls it
    leaves, untimed: the first ones, which arm it for each bitstream, as a served extender's first calls do."""
    clock = PodClock()
    extender = Extender(cache, ScoreWeights(), clock=clock)
    app = build_app(extender)
    serve = app.fast
    if serve is None:
        return None
    written: list[bytes] = []

    def request(index: int) -> bytes:
        body = request_body(rng, index, names)
        return b"POST /prioritize HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    def answer(data: bytes) -> float | None:
        """The time the fast path took, or None: it left the call to Python."""
        started = time.perf_counter()
        answered = serve(data, written.append)
        spent = time.perf_counter() - started
        written.clear()
        if answered:
            return spent
        reply = app.handle("POST", "/prioritize", "application/json", data.partition(b"\r\n\r\n")[2])
        if reply.after is not None:
            reply.after()
        return None

    for index in range(LONG_RUN_PODS):  # what fills with time at its steady size, as in long_running_us
        answer(request(index))
    clock.pace = 0.0  # warm: the clock stands still
    requests = [request(LONG_RUN_PODS + index) for index in range(calls)]  # made first: not in the caches' way
    timed = [spent for data in requests if (spent := answer(data)) is not None]
    if not timed:
        raise SystemExit("the fast path answered none of the calls")
    flushed = None
    if flush_mb:
        flush = cache_flusher(flush_mb)
        spent_flushed = []
        for data in [request(LONG_RUN_PODS + calls + index) for index in range(calls)]:
            flush()  # untimed
            if (spent := answer(data)) is not None:
                spent_flushed.append(spent)
        flushed = statistics.mean(spent_flushed) * 1e6 if spent_flushed else None
    return statistics.mean(timed) * 1e6, flushed, len(timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one machine-readable line (for bench/run)")
    parser.add_argument(
        "--flush-mb", type=int, default=8, help="memory written between calls for the cache-flushed row (0: none)"
    )
    args = parser.parse_args()

    rng = random.Random(args.seed)
    names = [f"bench-node-{i:05d}" for i in range(NODES)]
    cache = NodeCache()
    cache.replace(WatchedNode(n, read_node_slots(n, "1", node_annotations(i, n))) for i, n in enumerate(names))
    bodies = [request_body(rng, i, names) for i in range(args.calls)]
    clock = PodClock()
    extender = Extender(cache, ScoreWeights(), clock=clock)
    cold = per_call_us(bodies, lambda _i, body: extender.prioritize(body))
    clock.pace = 0.0  # warm: the clock (and with it the cluster's values) stands still
    per_call_us(bodies, lambda _i, body: extender.prioritize(body))
    warm = per_call_us(bodies, lambda _i, body: extender.prioritize(body), repeat=2)
    flushed = flushed_us(bodies, lambda _i, body: extender.prioritize(body), args.flush_mb) if args.flush_mb else None
    steady = long_running_us(rng, names, cache, args.calls)
    fast = fast_path_us(rng, names, cache, args.calls, args.flush_mb)
    requests = [parse_extender_args(body) for body in bodies]
    board = extender._board  # the score board alone, for the breakdown
    lookup = cache.lookup()
    answers = [board.prioritize(cache, r.demand, r.node_names or [], lookup, clock.now) for r in requests]
    parse = per_call_us(bodies, lambda _i, body: parse_extender_args(body), repeat=2)
    score = per_call_us(
        bodies,
        lambda i, _b: board.prioritize(cache, requests[i].demand, requests[i].node_names or [], lookup, clock.now),
        repeat=2,
    )
    encode = per_call_us(bodies, lambda i, _b: encode_priorities(answers[i]), repeat=2)
    entries = sum(len(a) for a in answers) / len(answers)
    rows: list[Row] = [
        (f"prioritize handler, {NAMES} of {NODES} names, cold (no score tables)", f"{cold:.0f} us", ""),
        (f"prioritize handler, {NAMES} of {NODES} names, warm", f"{warm:.0f} us", ""),
        *(
            [(f"  the same, {args.flush_mb} MB written between calls (caches flushed)", f"{flushed:.0f} us", "")]
            if flushed is not None
            else []
        ),
        (
            f"  the same, new pods after {LONG_RUN_PODS} (pods counted and promises at their steady numbers)",
            f"{steady:.0f} us",
            "",
        ),
        *(
            [
                (
                    f"  the same, compiled fast path ({fast[2]} of {args.calls} calls): request in, answer out and "
                    "recorded",
                    f"{fast[0]:.1f} us",
                    "",
                ),
                *(
                    [(f"  the same, fast path, {args.flush_mb} MB written between calls", f"{fast[1]:.1f} us", "")]
                    if fast[1] is not None
                    else []
                ),
            ]
            if fast is not None
            else []
        ),
        ("  of it: parsing the request", f"{parse:.0f} us", ""),
        ("  of it: the score board", f"{score:.0f} us", ""),
        ("  of it: encoding the answer", f"{encode:.1f} us", ""),
        ("entries in an answer (nodes above the call's floor), mean", f"{entries:.1f}", ""),
    ]
    emit(rows, as_json=args.json)


if __name__ == "__main__":
    main()

"""The extender's prioritize handler in one process: what one call costs before any HTTP.

Node states and pods as in the real-scheduler benchmark (``bench/scheduler.py`` on the
bundled Kubernetes' bench control plane): 5000 nodes, 4 slots each, two thirds free,
four fifths of the slots holding one of 40 bitstreams, the rest empty, last used long
ago, every catalog with all 40; pods that ask for one slot and one bitstream, small
bitstream numbers more often. Each call names 500 random nodes, as kube-scheduler does
at 5000 nodes. The same request bodies are replayed against ``Extender.prioritize``
(new pods each, promises made as they go), then with a few MB written between calls
(caches flushed), and the three steps of a call are timed alone (parse, score, encode).
No HTTP, no other process: the floor under what ``bench/extender.py`` and
``bench/scheduler.py`` measure around it.

Usage: python bench/extender_handler.py [--calls 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.extender.nodestate import read_published_state  # noqa: E402
from agent.extender.scoring import ScoreWeights  # noqa: E402
from agent.extender.server import Extender  # noqa: E402
from agent.extender.table import StateTable  # noqa: E402
from agent.extender.wire import encode_priorities, parse_extender_args  # noqa: E402
from agent.node.reconfigure import ANNOTATION  # noqa: E402
from agent.slots.published import state_object  # noqa: E402
from bench.table import Row, emit  # noqa: E402

NODES = 5000
NAMES = 500
BITSTREAMS = 40
PLATFORM = "sim-pr-v1"
LONG_AGO = 1_700_000_000
NOW = 1_800_000_000.0
#: Where the agents of an install publish (the shipped namespace).
NAMESPACE = "fpga-slot"


def node_state(index: int, name: str) -> dict[str, Any]:
    """The FpgaNodeState of the bundled Kubernetes' scheduler benchmark's fake node ``index``: slot k holds
    bitstream (7i + 13k) mod 50 when that is below 40 (else nothing), and is free unless (i + k) mod 3 == 0."""
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
                "lastUsed": LONG_AGO + (index * 31 + k) % 86400,
            }
        )
    catalog = {f"bs-{b}": PLATFORM for b in range(BITSTREAMS)}
    obj = state_object(name, NAMESPACE, {"nodeName": name, "slots": slots, "bitstreams": catalog})
    obj["metadata"]["resourceVersion"] = "1"
    return obj


def state_table(names: list[str]) -> StateTable:
    """The state table of those nodes, as the extender's watch fills it."""
    table = StateTable()
    table.replace(dict(read_published_state(node_state(i, n)) for i, n in enumerate(names)))
    return table


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
    table = state_table(names)
    bodies = [request_body(rng, i, names) for i in range(args.calls)]
    extender = Extender(table, ScoreWeights(), clock=lambda: NOW)
    cold = per_call_us(bodies, lambda _i, body: extender.prioritize(body))
    warm = per_call_us(bodies, lambda _i, body: extender.prioritize(body), repeat=2)
    flushed = flushed_us(bodies, lambda _i, body: extender.prioritize(body), args.flush_mb) if args.flush_mb else None
    requests = [parse_extender_args(body) for body in bodies]
    scorer = extender.scorer
    answers = [scorer.prioritize(table, r.demand, r.node_names or [], NOW) for r in requests]
    parse = per_call_us(bodies, lambda _i, body: parse_extender_args(body), repeat=2)
    score = per_call_us(
        bodies, lambda i, _b: scorer.prioritize(table, requests[i].demand, requests[i].node_names or [], NOW), repeat=2
    )
    encode = per_call_us(bodies, lambda i, _b: encode_priorities(answers[i]), repeat=2)
    entries = sum(len(a) for a in answers) / len(answers)
    rows: list[Row] = [
        (f"prioritize handler, {NAMES} of {NODES} names, first pass", f"{cold:.0f} us", ""),
        (f"prioritize handler, {NAMES} of {NODES} names, again", f"{warm:.0f} us", ""),
        *(
            [(f"  the same, {args.flush_mb} MB written between calls (caches flushed)", f"{flushed:.0f} us", "")]
            if flushed is not None
            else []
        ),
        ("  of it: parsing the request", f"{parse:.0f} us", ""),
        ("  of it: scoring and ranking", f"{score:.0f} us", ""),
        ("  of it: encoding the answer", f"{encode:.1f} us", ""),
        ("entries in an answer (nodes above the call's floor), mean", f"{entries:.1f}", ""),
    ]
    emit(rows, as_json=args.json)


if __name__ == "__main__":
    main()

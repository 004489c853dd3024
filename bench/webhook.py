"""The bitstream admission webhook's handler in one process: what one AdmissionReview costs before any HTTP.

The extender's state table as in ``bench/extender_handler.py`` (5000 nodes, every catalog with
the same 40 bitstreams) plus 20 declared bitstreams. Three reviews, as the API server sends
them for ``kubectl apply`` of a claim template or the creation of a pod:

* a template naming a bitstream of the catalogs (found on the first node looked at);
* a template naming a declared bitstream (one dictionary lookup);
* a template naming an unknown bitstream: the refusal, which looks at every node's catalog
  (the worst case; the answer also carries the message);

each replayed ``--calls`` times per round through the route the webhook port serves
(``validator``: parse, check, encode), ``--rounds`` rounds; the table gives, per review, the
median over rounds of the per-call p50 and p99, and the spread of the round p50s.

Usage: python bench/webhook.py [--calls 2000] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.extender.admission import validator  # noqa: E402
from agent.extender.table import StateTable  # noqa: E402
from bench.extender_handler import NODES, PLATFORM, state_table  # noqa: E402
from bench.table import Row, emit, pct  # noqa: E402
from tests.fakeapi import claim_template_review  # noqa: E402

DECLARED = 20


@dataclass(frozen=True)
class Declared:
    name: str
    platform: str
    scope: str = "slot"


def review(bitstream: str) -> bytes:
    """An AdmissionReview v1 of a claim template with one config for the driver naming ``bitstream``."""
    return json.dumps(claim_template_review(bitstream)).encode()


def build_cache() -> StateTable:
    cache = state_table([f"node-{index:05d}" for index in range(NODES)])
    cache.replace_declared([Declared(f"declared-{d}", PLATFORM) for d in range(DECLARED)])
    return cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="one line of rows for bench/run")
    args = parser.parse_args()
    validate = validator(build_cache())
    cases = {
        "in a catalog": (review("bs-7"), True),
        "declared": (review("declared-3"), True),
        "unknown (refused)": (review("bs-unknown"), False),
    }
    rows: list[Row] = []
    for label, (body, allowed) in cases.items():
        status, answer = validate(body)
        if status != 200 or json.loads(answer)["response"]["allowed"] is not allowed:
            raise SystemExit(f"webhook bench: unexpected answer for {label}: {status} {answer[:200]!r}")
        p50s, p99s = [], []
        for _ in range(args.rounds):
            samples = []
            for _ in range(args.calls):
                started = time.perf_counter()
                validate(body)
                samples.append((time.perf_counter() - started) * 1000)
            p50s.append(pct(samples, 0.5))
            p99s.append(pct(samples, 0.99))
        rows.append(
            (
                f"webhook /validate handler, template, bitstream {label}, {NODES} nodes",
                f"p50 {statistics.median(p50s):.3f} ms / p99 {statistics.median(p99s):.3f} ms "
                f"(round p50s {min(p50s):.3f}-{max(p50s):.3f} ms, {args.rounds} rounds x {args.calls})",
                "- (timeoutSeconds 2)",
            )
        )
    emit(rows, args.json)


if __name__ == "__main__":
    main()

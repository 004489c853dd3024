"""Bitstream pulls against hostile sources, as a table: each must end in bounded time and memory, with
nothing installed (or, where the source is only awkward, the right file), and the cache budget intact.

The source is tests/integration/bitstreams/hostile.py (an OCI registry front and file server over real TLS
and plain HTTP on local ports); the puller is the agent's (``BitstreamPuller`` with its registry and HTTPS
clients and a catalog in a temp directory), with the agent's floor rate (1 MiB/s) and a 2 s allowance
instead of the agent's 60 s, so that a round of the drip takes seconds. Cases, ``rounds`` times each:

* **slow drip**: the file 1 byte every 10 ms (100 B/s; the silence limit never trips): ends at the deadline;
* **split writes**: a 12 KB manifest and the token reply each in two writes 200 ms apart: pulled whole;
* **endless body**: the blob without Content-Length and without end: cut at the declared size;
* **redirect down**: the HTTPS file redirected to ``http://``: refused before any plain request;
* **plain-HTTP realm**: an HTTPS registry asking for a token from an ``http://`` realm: refused, no
  credentials sent.

Usage: python bench/hostile_pulls.py [--rounds 5] [--json]  (bench/soak.py runs it too)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.bitstreams.cache import CacheBudget  # noqa: E402
from agent.bitstreams.declaration import Credentials, Declaration  # noqa: E402
from agent.bitstreams.http import HttpsSource  # noqa: E402
from agent.bitstreams.puller import BitstreamPuller  # noqa: E402
from agent.bitstreams.reference import parse_reference  # noqa: E402
from agent.bitstreams.registry import RegistryClient  # noqa: E402
from agent.errors import PullError  # noqa: E402
from agent.programming.catalog import Catalog  # noqa: E402
from bench.table import Row, emit  # noqa: E402
from tests.integration.bitstreams.hostile import (  # noqa: E402
    PASSWORD,
    REPOSITORY,
    USER,
    HostileSource,
    serving_hostile,
)
from tests.integration.bitstreams.servers import make_certificate  # noqa: E402

SIZE = 1 << 20
ALLOWANCE_S = 2.0
BUDGET_BYTES = 4 * SIZE
#: Slack on top of the deadline for "bounded time" (a busy 2-core machine).
SLACK_S = 2.0
#: Growth of the process's RSS over a case's rounds that still counts as "bounded memory" (a body held
#: in memory would add its size per round; the endless one would grow without end).
RSS_GROWTH_MB = 32


@dataclass(frozen=True)
class Case:
    name: str
    arrange: Callable[[HostileSource], None]
    oci: bool
    #: the pull must succeed (an awkward but honest source), else fail with a PullError
    succeeds: bool


def _drip(source: HostileSource) -> None:
    source.drip_interval_s, source.drip_bytes = 0.01, 1


def _split(source: HostileSource) -> None:
    manifest = json.loads(source.manifest_body())
    manifest["annotations"] = {f"org.example.note.{i}": "x" * 100 for i in range(95)}
    source.manifest = json.dumps(manifest).encode()
    source.realm = source.url("token")
    source.split_s = 0.2


def _endless(source: HostileSource) -> None:
    source.endless = True


def _redirect_down(source: HostileSource) -> None:
    source.redirect_to = source.url("file.bin", tls=False)


def _plain_realm(source: HostileSource) -> None:
    source.realm = source.url("token", tls=False)


CASES = [
    Case("slow drip (1 B / 10 ms over HTTPS)", _drip, oci=False, succeeds=False),
    Case("split writes (12 KB manifest, token reply; 200 ms apart)", _split, oci=True, succeeds=True),
    Case("endless body (blob, no Content-Length)", _endless, oci=True, succeeds=False),
    Case("redirect down (https:// file -> http://)", _redirect_down, oci=False, succeeds=False),
    Case("plain-HTTP token realm (HTTPS registry)", _plain_realm, oci=True, succeeds=False),
]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def one_round(case: Case, cert: tuple[Path, Path], directory: Path) -> tuple[float, float, int, list[str]]:
    """One pull of ``case``: (seconds, deadline, bytes the source wrote, problems)."""
    data = os.urandom(SIZE)
    problems: list[str] = []
    async with serving_hostile(HostileSource(data), *cert) as source:
        case.arrange(source)
        trusted = ssl.create_default_context(cafile=str(cert[0]))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as session:

            async def lookup(name: str, host: str) -> Credentials | None:
                return Credentials(USER, PASSWORD)

            catalog = Catalog(directory)
            budget = CacheBudget(BUDGET_BYTES)
            puller = BitstreamPuller(
                catalog, RegistryClient(session), HttpsSource(session), budget, lookup, allowance_s=ALLOWANCE_S
            )
            await puller.start()
            if case.oci:
                reference = parse_reference(f"{source.address()}/{REPOSITORY}:1")
                declaration = Declaration("nlb", "p", "a", source.sha256, SIZE, oci=reference, pull_secret="creds")
            else:
                declaration = Declaration("nlb", "p", "a", source.sha256, SIZE, https=source.url("moved/file.bin"))
            puller.declare(declaration)
            started = time.monotonic()
            try:
                entry = await puller.ensure("nlb")
                if not case.succeeds:
                    problems.append("pulled")
                elif catalog.read_image(catalog.resolve("nlb")) != data:
                    problems.append("wrong bytes installed")
                _ = entry
            except PullError as exc:
                if case.succeeds:
                    problems.append(f"failed: {exc}")
            seconds = time.monotonic() - started
            await puller.close()
            listing = sorted(os.listdir(directory))
            if not case.succeeds and listing:
                problems.append(f"left {listing}")
            if budget.in_use() or budget.used_bytes([]):
                problems.append("budget reservation held")
            if any(scheme == "http" for scheme, _, _ in source.requests):
                problems.append("a plain-HTTP request was made")
    return seconds, puller.deadline_s(SIZE), source.sent, problems


async def soak_hostile_sources(rounds: int) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fs-hostile-", dir="/tmp") as tmp:
        root = Path(tmp)
        cert = make_certificate(root)
        for case in CASES:
            before = rss_mb()
            times: list[float] = []
            deadline, sent, problems = 0.0, 0, []
            for index in range(rounds):
                seconds, deadline, wrote, found = await one_round(case, cert, root / f"{case.name[:5]}-{index}")
                times.append(seconds)
                sent = max(sent, wrote)
                problems += found
            slowest = max(times)
            after = rss_mb()
            bounded = slowest <= deadline + SLACK_S
            if after - before > RSS_GROWTH_MB:
                problems.append(f"RSS grew by {after - before:.0f} MB")
            outcome = "pulled whole" if case.succeeds else "refused, nothing installed"
            verdict = "yes" if bounded and not problems else "NO: " + "; ".join(sorted(set(problems)))[:200]
            rows.append(
                (
                    f"hostile source: {case.name} ({rounds}x)",
                    f"{outcome}; {min(times):.1f}-{slowest:.1f} s (deadline {deadline:.0f} s); the source wrote "
                    f"<= {sent / 1024:.1f} KiB; RSS {before:.0f} -> "
                    f"{after:.0f} MB; bounded time and memory, nothing installed, budget intact: {verdict}",
                    "yes",
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    emit(asyncio.run(soak_hostile_sources(args.rounds)), as_json=args.json)


if __name__ == "__main__":
    main()

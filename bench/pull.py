"""Pull-and-verify throughput from a real OCI registry: agent/bitstreams against ``oras`` (oras-py).

A CNCF distribution registry (Debian's docker-registry) runs on a free local port;
one artifact of ``--mb`` random MB is pushed with ``fpga-agent catalog push``'s own
code. Each run pulls it into a fresh catalog: manifest, streamed blob, size and
sha256 checked on the way, fsync, rename, record (``BitstreamPuller.ensure``). For
comparison, ``--oras-python`` names a Python with oras-py installed (it is not a
dependency of the project): ``OrasClient.pull`` of the same reference into a temp
directory, plus the sha256 of the file, which is what the agent would still have to
check. Runs are interleaved; medians compared.

Usage: python bench/pull.py [--mb 64 --runs 5 --oras-python /path/to/python]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from agent.bitstreams.cache import CacheBudget  # noqa: E402
from agent.bitstreams.declaration import Declaration  # noqa: E402
from agent.bitstreams.http import HttpsSource  # noqa: E402
from agent.bitstreams.publish import push_bitstream  # noqa: E402
from agent.bitstreams.puller import BitstreamPuller  # noqa: E402
from agent.bitstreams.reference import parse_reference  # noqa: E402
from agent.bitstreams.registry import RegistryClient  # noqa: E402
from agent.programming.catalog import Catalog  # noqa: E402
from bench.table import Row, emit  # noqa: E402
from tests.integration.bitstreams.servers import running_registry  # noqa: E402

ORAS_PULL = """
import hashlib, shutil, sys, tempfile, time
import oras.client
client = oras.client.OrasClient(hostname=sys.argv[1], insecure=True)
target = tempfile.mkdtemp()
started = time.perf_counter()
files = client.pull(target=sys.argv[2], outdir=target)
digest = hashlib.sha256()
with open(files[0], "rb") as stream:
    while chunk := stream.read(1 << 20):
        digest.update(chunk)
print(time.perf_counter() - started, digest.hexdigest())
shutil.rmtree(target)
"""


async def push(address: str, path: Path) -> Declaration:
    async with aiohttp.ClientSession() as session:
        client = RegistryClient(session, [address])
        return await push_bitstream(client, path, "bench", "p", "a", parse_reference(f"{address}/fpga/bench:1"))


async def pull_once(address: str, declaration: Declaration, directory: Path) -> float:
    async with aiohttp.ClientSession() as session:
        store = Catalog(directory)
        puller = BitstreamPuller(store, RegistryClient(session, [address]), HttpsSource(session), CacheBudget(1 << 40))
        await puller.start()
        puller.declare(declaration)
        started = time.perf_counter()
        await puller.ensure("bench")
        took = time.perf_counter() - started
        await puller.close()
    shutil.rmtree(directory)
    return took


def oras_once(python: str, address: str, declaration: Declaration) -> float:
    done = subprocess.run(
        [python, "-c", ORAS_PULL, address, f"{address}/fpga/bench:1"], capture_output=True, text=True, check=True
    )
    took, sha256 = done.stdout.split()
    assert sha256 == declaration.sha256, "oras pulled other bytes"
    return float(took)


def main() -> None:
    parser = argparse.ArgumentParser(description="bitstream pull throughput")
    parser.add_argument("--mb", type=int, default=64, help="artifact size in MB")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--oras-python", default="", help="a Python with oras-py installed, for the comparison")
    parser.add_argument("--json", action="store_true", help="one machine-readable line (for bench/run)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pull-bench-"))
    try:
        (root / "registry").mkdir()
        with running_registry(root / "registry") as registry:
            blob = root / "bench.bin"
            blob.write_bytes(os.urandom(args.mb * 1_000_000))
            declaration = asyncio.run(push(registry.address, blob))
            ours: list[float] = []
            theirs: list[float] = []
            for run in range(args.runs):  # interleaved, so both see the same machine
                ours.append(asyncio.run(pull_once(registry.address, declaration, root / f"catalog-{run}")))
                if args.oras_python:
                    theirs.append(oras_once(args.oras_python, registry.address, declaration))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows: list[Row] = [_row("pull + verify + adopt (agent/bitstreams)", args.mb, ours)]
    if theirs:
        rows.append(_row("oras-py pull + sha256 of the file", args.mb, theirs))
    emit(rows, args.json)
    if not args.json:
        print(json.dumps({"ours_s": ours, "oras_s": theirs}))


def _row(what: str, mb: int, samples: list[float]) -> Row:
    median = statistics.median(samples)
    return (f"{what}, {mb} MB", f"{mb / median:.0f} MB/s (median of {len(samples)}: {median * 1000:.0f} ms)", "-")


if __name__ == "__main__":
    main()

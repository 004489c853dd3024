"""``fpga-agent demo pull``: a bitstream pushed to a registry, declared, pulled into a node catalog, narrated
(the real client, puller and catalog against :mod:`agent.demo.registry`)."""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

from agent.bitstreams.cache import CacheBudget
from agent.bitstreams.declaration import declaration_object, parse_declaration
from agent.bitstreams.http import HttpsSource
from agent.bitstreams.publish import push_bitstream
from agent.bitstreams.puller import BitstreamPuller
from agent.bitstreams.reference import parse_reference
from agent.bitstreams.registry import RegistryClient
from agent.demo import say
from agent.demo.registry import DemoRegistry
from agent.errors import PullError
from agent.output.tables import format_table
from agent.programming.catalog import Catalog
from agent.simfpga.fabric import PLATFORM
from agent.simfpga.sample import SAMPLE_ACCELERATOR, SAMPLE_NAME

CACHE_BYTES = 64 << 20


async def run_pull_demo() -> int:
    """Push, declare, pull, refuse a tampered copy; returns the process exit code."""
    registry = DemoRegistry()
    address = await registry.start()
    try:
        with tempfile.TemporaryDirectory(prefix="fpga-slot-pull-demo-") as tmp:
            await _narrate(registry, address, Path(tmp))
    finally:
        await registry.stop()
    say("done")
    return 0


async def _narrate(registry: DemoRegistry, address: str, root: Path) -> None:
    image = root / f"{SAMPLE_NAME}.bin"
    image.write_bytes(bytes((i * 37 + 11) % 256 for i in range(64 << 10)))
    catalog = Catalog(root / "node-catalog")
    async with aiohttp.ClientSession() as session:
        client = RegistryClient(session, [address])
        say("1. A publisher pushes a bitstream to a registry (fpga-agent catalog push)")
        say("", f"registry at {address} (in this process, plain HTTP)")
        reference = parse_reference(f"{address}/fpga/{SAMPLE_NAME}:1")
        declaration = await push_bitstream(client, image, SAMPLE_NAME, PLATFORM, SAMPLE_ACCELERATOR, reference)
        say("", f"pushed {image.stat().st_size} bytes as {declaration.oci}")
        say("2. ... and declares it in the cluster: the FpgaBitstream the push prints")
        obj = declaration_object(declaration)
        print(yaml.safe_dump(obj, sort_keys=False).rstrip(), flush=True)

        say("3. A pod on a node without the file asks for it: the agent pulls it into the node's catalog")
        puller = BitstreamPuller(catalog, client, HttpsSource(session), CacheBudget(CACHE_BYTES))
        await puller.start()
        try:
            puller.declare(parse_declaration(obj))
            started = time.monotonic()
            entry = await puller.ensure(SAMPLE_NAME, platform=PLATFORM)
            took_ms = (time.monotonic() - started) * 1000
            say("", f"pulled {entry.size} bytes in {took_ms:.1f} ms, size and sha256 checked on the way")
            rows: list[dict[str, object]] = [
                {"name": e.name, "platform": e.platform, "size": e.size, "sha256": e.sha256[:12], "source": e.source}
                for e in catalog.scan().entries
            ]
            print(format_table(["name", "platform", "size", "sha256", "source"], rows), flush=True)

            say("4. The registry serves a corrupted copy: the pull is refused and nothing is installed")
            layer_digest = "sha256:" + declaration.sha256
            registry.tamper(layer_digest)
            copy = dataclasses.replace(parse_declaration(obj), name="aes-v1-copy")
            puller.declare(copy)
            try:
                await puller.ensure(copy.name, platform=PLATFORM)
            except PullError as exc:
                say("", f"{type(exc).__name__}: {exc}")
            names = sorted(e.name for e in catalog.scan().entries)
            say("", f"the node's catalog holds: {', '.join(names)}")
        finally:
            await puller.close()

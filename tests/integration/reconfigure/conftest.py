"""Fixtures of the reconfiguration tests: a node catalog, the pod directory, fast background timers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

import agent.node.reconfigure
import agent.node.slotloader
from agent.simfpga.fabric import PLATFORM
from agent.slots import checkpoint
from tests.fakes import Catalog, NodePods
from tests.integration.bitstreams.servers import Registry, make_certificate, running_registry
from tests.integration.reconfigure.support import Bitstream, Bitstreams


@pytest.fixture(autouse=True)
def _no_leaked_tasks(no_leaked_tasks: None) -> None:
    """Every reconfiguration test checks that its tasks finished."""


@pytest.fixture(autouse=True)
def fast_background(monkeypatch: pytest.MonkeyPatch) -> None:
    """Recovery retries and checkpoint writes come quickly; fresh holders are not protected.

    Tests that depend on the recovery not having happened yet say so themselves.
    """
    monkeypatch.setattr(agent.node.slotloader, "RECOVERY_DELAY_S", 0.05)
    monkeypatch.setattr(agent.node.reconfigure, "RECONCILE_GRACE_S", 0.0)
    monkeypatch.setattr(checkpoint, "WRITE_INTERVAL_S", 0.01)


@pytest.fixture
def pods() -> NodePods:
    """This node's pods as the API server knows them, and the Events posted about them."""
    return NodePods()


@pytest.fixture
def bitstreams(sock_dir: Path) -> Bitstreams:
    """A catalog (inside the test's temp dir) with three bitstreams for the simulated slots and one foreign."""
    sources = sock_dir / "sources"
    sources.mkdir()
    catalog = Catalog(sock_dir / "catalog")

    def add(name: str, platform: str, accelerator_id: str) -> Bitstream:
        source = sources / f"{name}.bin"
        source.write_bytes(f"bitstream {name} for {platform}\n".encode() * 64)
        entry = catalog.add(source, name, platform=platform, accelerator_id=accelerator_id)
        return Bitstream(entry.name, entry.accelerator_id)

    return Bitstreams(
        catalog=catalog,
        accel_a=add("accel-a", PLATFORM, "sim-accel-a"),
        accel_b=add("accel-b", PLATFORM, "sim-accel-b"),
        accel_c=add("accel-c.v2", PLATFORM, "sim-accel-c"),
        foreign=add("foreign", "other-pr-v9", "other-accel"),
    )


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A real CNCF distribution registry (docker-registry) on loopback, plain HTTP, for the module's pulls."""
    with running_registry(tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate (and key) for 127.0.0.1, for HTTPS sources."""
    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """The publisher's HTTP client (what ``catalog push`` uses)."""
    async with aiohttp.ClientSession() as client:
        yield client

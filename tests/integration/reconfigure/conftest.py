"""Fixtures of the reconfiguration tests: a node catalog, the pod directory, fast background timers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import agent.reconfigure
from agent.simfpga.fabric import PLATFORM
from agent.slots import checkpoint
from tests.fakes import Catalog, NodePods
from tests.integration.reconfigure.support import Bitstream, Bitstreams

#: How long tasks still running after teardown may take to finish before they count as leaked.
LEAK_GRACE_S = 1.0


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Every task a test (or its agent) started has finished by the end of the test."""
    before = asyncio.all_tasks()
    yield
    leftover = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()]
    if leftover:
        _, still_running = await asyncio.wait(leftover, timeout=LEAK_GRACE_S)
        assert not still_running, f"tasks left running: {still_running}"


@pytest.fixture(autouse=True)
def fast_background(monkeypatch: pytest.MonkeyPatch) -> None:
    """Recovery retries and checkpoint writes come quickly; fresh holders are not protected.

    Tests that depend on the recovery not having happened yet say so themselves.
    """
    monkeypatch.setattr(agent.reconfigure, "RECOVERY_DELAY_S", 0.05)
    monkeypatch.setattr(agent.reconfigure, "RECONCILE_GRACE_S", 0.0)
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

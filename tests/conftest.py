"""Shared fixtures: short temp dirs (socket paths) and a running agent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fakes import AgentHarness, short_tmpdir


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short temp directory for unix sockets, removed afterwards."""
    with short_tmpdir() as path:
        yield path


@pytest.fixture
async def harness(sock_dir: Path) -> AsyncIterator[AgentHarness]:
    """A real agent (2 simulated cards x 4 slots) registered with the kubelet stand-in."""
    async with AgentHarness.running(sock_dir) as running:
        yield running

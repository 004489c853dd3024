"""Shared fixtures: short temp dirs (socket paths) and a running agent."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from agent.kube.client import build_api_client
from tests.fakeapi import FakeKubeApiServer, running_apiserver
from tests.fakes import AgentHarness, short_tmpdir


def pytest_addoption(parser: pytest.Parser) -> None:
    """Options of the opt-in end-to-end suite (tests/e2e), which skips itself without --e2e and KUBECONFIG."""
    group = parser.getgroup("e2e", "end-to-end tests against a real cluster (tests/e2e)")
    group.addoption("--e2e", action="store_true", help="run tests/e2e against the cluster in $KUBECONFIG")
    group.addoption("--e2e-image", default="fpga-slot:0.1.0", help="image with fpga-agent, already on the node")
    group.addoption("--e2e-node", default="", help="node to test on (default: the first Ready Linux node)")
    group.addoption(
        "--e2e-kubelet-restart",
        default="systemctl restart kubelet",
        help="shell command, run where pytest runs, that restarts the node's kubelet "
        "(e.g. 'ssh NODE sudo systemctl restart kubelet', 'docker exec kind-control-plane systemctl restart kubelet')",
    )
    group.addoption(
        "--e2e-overlay",
        default="overlays/sim",
        help="kustomize overlay of daemonset/ that the deployment tests apply (overlays/sim-hostnet on a cluster "
        "without DNS and kube-proxy)",
    )


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


#: How long tasks still running after a test may take to finish before they count as leaked.
LEAK_GRACE_S = 1.0


@pytest.fixture
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Every task a test (or its agent) started has finished by the end of the test.

    gRPC's own per-call tasks may need a few more loop iterations after ``server.stop()``
    has returned, so leftovers get a moment to finish; anything still running is a leak.
    """
    before = asyncio.all_tasks()
    yield
    leftover = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()]
    if leftover:
        _, still_running = await asyncio.wait(leftover, timeout=LEAK_GRACE_S)
        assert not still_running, f"tasks left running: {still_running}"


@pytest.fixture
def no_leaked_threads() -> Iterator[None]:
    """Every thread a test starts (watch workers, server handlers) has ended when it is over."""
    before = set(threading.enumerate())
    yield
    leaked = [  # the event loop's default executor (asyncio's or uvloop's) ends with the loop
        t
        for t in threading.enumerate()
        if t not in before and t.is_alive() and not t.name.startswith(("asyncio_", "uvloop_"))
    ]
    assert not leaked, f"threads left running: {[t.name for t in leaked]}"


@pytest.fixture
def apiserver() -> Iterator[FakeKubeApiServer]:
    """The HTTP-level fake API server (agent/demo/kubeapi), stopped with its threads afterwards."""
    with running_apiserver() as server:
        yield server


@pytest.fixture
def kubeconfig(apiserver: FakeKubeApiServer, tmp_path: Path) -> Path:
    """A kubeconfig for the fake API server."""
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api_client(kubeconfig: Path) -> Iterator[client.ApiClient]:
    """A real kubernetes ApiClient talking to the fake API server, closed afterwards."""
    api_client = build_api_client(kubeconfig)
    try:
        yield api_client
    finally:
        api_client.close()

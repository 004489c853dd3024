"""The agent's probes over real HTTP: ready only while registered, alive while its tasks run."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from agent.app import Agent
from agent.config import Config
from agent.discovery.sim import SimSource
from agent.node.backend import Backend
from agent.programming.sim import SimProgrammer
from agent.simfpga import SimFabric
from agent.slots.registry import SlotRegistry
from tests.fakes import AgentHarness, KubeletStandIn, test_config

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

WAIT_S = 10.0


async def probe(agent: Agent, path: str) -> tuple[int, str]:
    assert agent.health is not None
    await asyncio.wait_for(agent.health.serving.wait(), WAIT_S)
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{agent.health.port}{path}") as response,
    ):
        return response.status, await response.text()


@contextlib.asynccontextmanager
async def agent_running(agent: Agent) -> AsyncIterator[asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop), name="agent-under-test")
    try:
        yield task
    finally:
        stop.set()
        async with asyncio.timeout(WAIT_S):
            await task


async def test_ready_once_registered(harness: AgentHarness) -> None:
    assert await probe(harness.agent, "/readyz") == (200, "ready\n")
    assert await probe(harness.agent, "/healthz") == (200, "ok\n")


async def test_not_ready_without_a_kubelet_then_ready_once_it_comes(sock_dir: Path) -> None:
    config = test_config(sock_dir)
    agent = Agent(config)
    async with agent_running(agent):
        assert await probe(agent, "/readyz") == (503, "not registered with the kubelet\n")
        assert await probe(agent, "/healthz") == (200, "ok\n")
        kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket)
        await kubelet.start()
        try:
            await kubelet.wait_registered(1, WAIT_S)
            async with asyncio.timeout(WAIT_S):
                # kubelet.sock appearing may also make the agent register a second time: ready after that
                while (answer := await probe(agent, "/readyz"))[0] != 200:
                    assert answer == (503, "not registered with the kubelet\n")
                    await agent.lifecycle.registered.wait()
            assert answer == (200, "ready\n")
        finally:
            await kubelet.stop()


async def test_endpoint_closes_when_the_agent_stops(sock_dir: Path) -> None:
    agent = Agent(test_config(sock_dir))
    async with agent_running(agent):
        assert (await probe(agent, "/healthz"))[0] == 200
        port = agent.health.port if agent.health is not None else None
    assert agent.health is not None
    assert not agent.health.serving.is_set()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"http://127.0.0.1:{port}/healthz")


class EndingSource(SimSource):
    """Simulated slots whose watch returns at once, as a broken discovery backend would."""

    async def watch(self, sink: SlotRegistry) -> None:
        return None


def ending_backend(config: Config) -> Backend:
    fabric = SimFabric(config.sim_dev_dir, config.sim_cards, config.sim_slots_per_card, 0.0)
    return Backend(EndingSource(fabric), {"sim": SimProgrammer(fabric)}, fabric)


async def test_not_alive_once_a_long_lived_task_ended(sock_dir: Path) -> None:
    config = test_config(sock_dir)
    kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket)
    await kubelet.start()
    try:
        agent = Agent(config, ending_backend(config))
        async with agent_running(agent):
            await asyncio.wait_for(agent.lifecycle.registered.wait(), WAIT_S)
            assert await probe(agent, "/healthz") == (503, "tasks ended: discovery\n")
            assert (await probe(agent, "/readyz"))[0] == 200
    finally:
        await kubelet.stop()


def test_no_endpoint_when_turned_off(sock_dir: Path) -> None:
    config = test_config(sock_dir, health_listen=None)
    assert Agent(config).health is None

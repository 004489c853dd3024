"""Every stand-in the tests use, in one place.

* the kubelet: :class:`agent.kubeletsim.KubeletStandIn` (shipped, because the demo
  uses it too), re-exported here;
* FPGA hardware: :class:`agent.simfpga.SimFabric` (stateful simulated cards);
* :class:`AgentHarness`: a real agent wired to both, started and stopped cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from agent.app import Agent
from agent.config import Config, load_config
from agent.deviceplugin import RESOURCE_NAME
from agent.kubeletsim import KubeletStandIn, NodePods, PluginConnection
from agent.programming.catalog import Catalog
from agent.simfpga import SimFabric

__all__ = [
    "RESOURCE_NAME",
    "AgentHarness",
    "Catalog",
    "KubeletStandIn",
    "NodePods",
    "SimFabric",
    "run_fpga_agent",
    "short_tmpdir",
    "test_config",
]


@contextlib.contextmanager
def short_tmpdir() -> Iterator[Path]:
    """A temp dir with a short path: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="fs-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_config(root: Path, **overrides: object) -> Config:
    """A validated Config whose every path lies under ``root``."""
    flags = {
        "backend": "sim",
        "device_plugin_dir": str(root / "device-plugins"),
        "pod_resources_socket": str(root / "pod-resources" / "kubelet.sock"),
        "state_dir": str(root / "state"),
        "sim_cards": "2",
        "sim_slots_per_card": "4",
        "sim_program_ms": "20",
        "sim_device_nodes": "file",  # regular files: the tests run without root as well
        "node_name": "test-node",
        "health_listen": "127.0.0.1:0",  # a free loopback port: tests never take the real one
    }
    config = load_config(flags, env={})
    return dataclasses.replace(config, **overrides)  # type: ignore[arg-type]


test_config.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


@dataclasses.dataclass
class AgentHarness:
    """A running agent plus the kubelet stand-in it registered with."""

    config: Config
    kubelet: KubeletStandIn
    agent: Agent
    stop: asyncio.Event
    task: asyncio.Task[None]

    @property
    def fabric(self) -> SimFabric:
        assert self.agent.backend.fabric is not None
        return self.agent.backend.fabric

    @property
    def conn(self) -> PluginConnection:
        """The stand-in's current connection to the agent."""
        return self.kubelet.plugins[RESOURCE_NAME]

    @property
    def socket(self) -> Path:
        return self.config.device_plugin_dir / "fpga-slot.sock"

    async def wait_devices(self, count: int, timeout_s: float = 5.0) -> None:
        """Wait until the stand-in lists ``count`` devices on the current connection."""
        await self.kubelet.wait_for(
            lambda: (
                RESOURCE_NAME in self.kubelet.plugins and bool(self.conn.updates) and len(self.conn.devices) == count
            ),
            timeout_s,
        )

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls,
        root: Path,
        *,
        expected_devices: int | None = None,
        catalog: Catalog | None = None,
        pods: NodePods | None = None,
        **overrides: object,
    ) -> AsyncIterator[AgentHarness]:
        """Start stand-in and agent, wait for registration and the first device list; stop both after.

        The first list must hold ``expected_devices`` devices (default: every simulated slot).
        With ``pods``, the stand-in records admitted pods there and the agent reads pod
        annotations from it and posts its Events to it; ``catalog`` is the node's catalog.
        """
        config = test_config(root, **overrides)
        kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket, pods)
        await kubelet.start()
        agent = Agent(config, catalog=catalog, pods=pods, events=pods)
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop), name="agent-under-test")
        harness = cls(config, kubelet, agent, stop, task)
        try:
            await kubelet.wait_registered(1)
            if expected_devices is None:
                expected_devices = config.sim_cards * config.sim_slots_per_card
            await harness.wait_devices(expected_devices)
            yield harness
        finally:
            stop.set()
            try:
                async with asyncio.timeout(10):
                    await task
            finally:
                await kubelet.stop()


from tests.kubeapi import FakeKubeApiServer, make_node, make_pod, running_apiserver  # noqa: E402, F401

#: Long enough for a loaded machine; a hung command fails the test instead of the run.
CLI_TIMEOUT_S = 60.0


def run_fpga_agent(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``fpga-agent ARGS`` as its own process (``python -m agent.cli``), output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )

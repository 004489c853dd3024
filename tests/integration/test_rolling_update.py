"""A rolling update of the DaemonSet: one agent process hands the node over to the next.

Two real ``fpga-agent run`` processes (sim backend) share the state, bitstream and
device-plugin directories, as the old and the new pod of the DaemonSet share the
node's hostPath mounts; the kubelet stand-in and the fake API server stay up
throughout, as the node's kubelet and the cluster do. While pods hold slots:

* in turn (``maxSurge: 0``, what daemonset/ ships): the old agent leaves a final
  checkpoint and removes its socket on SIGTERM; the new one adopts the checkpoint,
  checks it against pod-resources, serves and registers. No running pod loses its
  slot, the loaded bitstream is still known, and every slot is listed again;
* overlapping (``maxSurge: 1``, or an agent started by hand next to the DaemonSet's):
  the newer agent takes the socket over, the older one steps aside instead of
  taking it back, and does not remove the newer one's socket when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from agent.app import Agent
from agent.node.reconfigure import ANNOTATION
from agent.simfpga.fabric import PLATFORM
from agent.slots import checkpoint
from agent.slots.checkpoint import SlotRecord
from agent.slots.model import SlotId
from tests.fakeapi import DEFAULT_NODE, FakeKubeApiServer, running_apiserver
from tests.fakes import RESOURCE_NAME, AgentHarness, Catalog, KubeletStandIn
from tests.integration.test_lifecycle import log_watch

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

WAIT_S = 60.0
ALL_SLOTS = [f"simcard{c}-slot{s}" for c in range(2) for s in range(4)]
BITSTREAM = "aes-v1"
ACCELERATOR = "a5e0000000000000000000000000c0de"
HEALTH_LINE = re.compile(rb"health endpoint on 127\.0\.0\.1 port (\d+)")


@dataclass
class Node:
    """What the agents on one node share, and what stays up while they come and go."""

    root: Path
    kubelet: KubeletStandIn
    api: FakeKubeApiServer
    kubeconfig: Path

    @property
    def plugin_dir(self) -> Path:
        return self.root / "device-plugins"

    @property
    def socket(self) -> Path:
        return self.plugin_dir / "fpga-slot.sock"

    @property
    def checkpoint(self) -> Path:
        return self.root / "state" / checkpoint.FILE_NAME

    def env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("FPGA_AGENT_")}
        env.update(
            FPGA_AGENT_BACKEND="sim",
            FPGA_AGENT_DEVICE_PLUGIN_DIR=str(self.plugin_dir),
            FPGA_AGENT_POD_RESOURCES_SOCKET=str(self.kubelet.pod_resources_socket),
            FPGA_AGENT_STATE_DIR=str(self.root / "state"),
            FPGA_AGENT_BITSTREAM_DIR=str(self.root / "bitstreams"),
            FPGA_AGENT_SIM_PROGRAM_MS="10",
            FPGA_AGENT_SIM_DEVICE_NODES="file",
            FPGA_AGENT_NODE_NAME=DEFAULT_NODE,
            FPGA_AGENT_KUBECONFIG=str(self.kubeconfig),
            FPGA_AGENT_HEALTH_LISTEN="127.0.0.1:0",
            FPGA_AGENT_LOG_LEVEL="info",
        )
        return env

    def saved_slots(self) -> dict[SlotId, SlotRecord]:
        return checkpoint.decode(self.checkpoint.read_bytes())

    def socket_inode(self) -> int | None:
        try:
            st = self.socket.lstat()
        except FileNotFoundError:
            return None
        return st.st_ino if stat.S_ISSOCK(st.st_mode) else None

    async def admit(self, pod: str, count: int, bitstream: str | None = None) -> list[str]:
        """The API server learns of the pod, then the kubelet starts its container."""
        self.api.add_pod(pod, slots={"main": count}, annotations={ANNOTATION: bitstream} if bitstream else None)
        admitted = await self.kubelet.admit("default", pod, "main", RESOURCE_NAME, count)
        return admitted.device_ids

    def reasons(self, pod: str) -> list[str]:
        return [event["reason"] for event in self.api.events() if event["involvedObject"]["name"] == pod]


@dataclass
class AgentProcess:
    """One ``fpga-agent run`` process; its log is read all along, so the pipe never fills."""

    name: str
    proc: asyncio.subprocess.Process
    log: bytearray = field(default_factory=bytearray)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _reader: asyncio.Task[None] | None = None

    def start_reading(self) -> None:
        self._reader = asyncio.create_task(self._read(), name=f"{self.name}-stderr")

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(4096):
            self.log += chunk
            self._changed.set()
        self._changed.set()

    @property
    def text(self) -> str:
        return self.log.decode(errors="replace")

    async def wait_log(self, pattern: re.Pattern[bytes]) -> re.Match[bytes]:
        async with asyncio.timeout(WAIT_S):
            while (match := pattern.search(self.log)) is None:
                assert self._reader is not None
                if self._reader.done():
                    raise AssertionError(f"{self.name} ended before {pattern.pattern!r}:\n{self.text}")
                self._changed.clear()
                await self._changed.wait()
        return match

    async def probe(self, path: str) -> tuple[int, str]:
        port = int((await self.wait_log(HEALTH_LINE)).group(1))
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as response:
            return response.status, await response.text()

    async def terminate(self) -> int:
        """SIGTERM, as the kubelet stops a pod; returns the exit code once the log is read to its end."""
        self.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(WAIT_S):
            returncode = await self.proc.wait()
            if self._reader is not None:
                await self._reader
        return returncode

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            await asyncio.wait({self._reader})


@contextlib.asynccontextmanager
async def agent_process(node: Node, name: str) -> AsyncIterator[AgentProcess]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent.cli.main",
        "run",
        env=node.env(),
        cwd=node.root,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    agent = AgentProcess(name, proc)
    agent.start_reading()
    try:
        yield agent
    finally:
        await agent.kill()


@pytest.fixture
def apiserver() -> Iterator[FakeKubeApiServer]:
    with running_apiserver() as api:
        api.add_node(DEFAULT_NODE)
        yield api


@pytest.fixture
async def node(sock_dir: Path, apiserver: FakeKubeApiServer) -> AsyncIterator[Node]:
    image = sock_dir / f"{BITSTREAM}.bin"
    image.write_bytes(bytes(range(256)) * 16)
    Catalog(sock_dir / "bitstreams").add(image, BITSTREAM, platform=PLATFORM, accelerator_id=ACCELERATOR)
    kubelet = KubeletStandIn(sock_dir / "device-plugins", sock_dir / "pod-resources" / "kubelet.sock")
    await kubelet.start()
    try:
        yield Node(sock_dir, kubelet, apiserver, apiserver.write_kubeconfig(sock_dir / "kubeconfig"))
    finally:
        await kubelet.stop()


def listed_in(kubelet: KubeletStandIn) -> list[str]:
    """The slots the kubelet has Healthy from the plugin it is connected to now."""
    conn = kubelet.plugins.get(RESOURCE_NAME)
    return conn.healthy() if conn is not None else []


async def wait_serving(node: Node, agent: AgentProcess, registrations: int) -> None:
    """Registered (``registrations`` in all) and listing every slot Healthy, ready for the probes."""
    await node.kubelet.wait_registered(registrations, WAIT_S)
    await node.kubelet.wait_for(lambda: listed_in(node.kubelet) == ALL_SLOTS, WAIT_S)
    async with asyncio.timeout(WAIT_S):
        # kubelet.sock may still make the agent register once more: ready right after that
        while (await agent.probe("/readyz"))[0] != 200:
            await node.kubelet.wait_registered(len(node.kubelet.registrations) + 1, WAIT_S)


def holders(node: Node) -> dict[str, tuple[str | None, str | None]]:
    """Slot -> (pod, bitstream) for every held slot in the checkpoint on disk."""
    return {
        slot_id: (record.holder.pod, record.content.bitstream if record.content else None)
        for slot_id, record in node.saved_slots().items()
        if record.holder is not None
    }


async def test_agents_in_turn_lose_no_slot(node: Node) -> None:
    async with agent_process(node, "old agent") as old:
        await wait_serving(node, old, 1)
        (aes_slot,) = await node.admit("held-aes", 1, BITSTREAM)
        plain_slots = await node.admit("held-plain", 2)
        await node.api.until(lambda: node.reasons("held-aes") == ["FpgaSlotProgrammed"], WAIT_S)  # posted after
        held_before = {pod: dict(containers) for pod, containers in node.kubelet.assignments.items()}

        assert await old.terminate() == 0, old.text
    assert node.socket_inode() is None  # the old agent removed its own socket
    assert "Traceback" not in old.text
    # The old agent's last word is its final checkpoint: every holder and what the slots hold.
    expected = {aes_slot: ("held-aes", BITSTREAM)} | {slot: ("held-plain", None) for slot in plain_slots}
    assert holders(node) == expected

    async with agent_process(node, "new agent") as new:
        await wait_serving(node, new, 2)
        assert await new.probe("/healthz") == (200, "ok\n")
        # The running pods kept their slots: the kubelet's assignments and its pod-resources answer are as
        # before, and the new agent lists exactly the same slots, every one of them Healthy.
        assert node.kubelet.assignments == held_before
        assert sorted(node.kubelet.plugins[RESOURCE_NAME].devices) == ALL_SLOTS
        # New pods get free slots only, and the agent records them next to the adopted holders.
        new_slots = await node.admit("after-update", 1)
        assert not set(new_slots) & ({aes_slot, *plain_slots})
        assert await new.terminate() == 0, new.text
    assert "Traceback" not in new.text
    # The new agent's own final checkpoint: it knew the old holders and the loaded bitstream all along.
    assert holders(node) == expected | {new_slots[0]: ("after-update", None)}
    assert node.socket_inode() is None


async def test_overlapping_agents_do_not_fight_over_the_socket(node: Node) -> None:
    async with agent_process(node, "old agent") as old:
        await wait_serving(node, old, 1)
        held = await node.admit("held", 2)
        old_socket = node.socket_inode()
        async with agent_process(node, "new agent") as new:
            await wait_serving(node, new, 2)
            new_socket = node.socket_inode()
            assert new_socket not in (None, old_socket)
            await old.wait_log(re.compile(rb"stepping aside"))
            assert (await old.probe("/readyz"))[0] == 503  # the old one is no longer registered
            assert (await old.probe("/healthz"))[0] == 200  # but alive: no reason to restart it
            during = await node.admit("during-overlap", 1)
            assert not set(during) & set(held)

            assert await old.terminate() == 0, old.text
            # The old agent left the new one's socket and checkpoint alone and never took the registration back.
            assert node.socket_inode() == new_socket
            assert "left to the agent that took over" in old.text
            assert len(node.kubelet.registrations) == 2
            conn = node.kubelet.plugins[RESOURCE_NAME]
            assert not conn.stream_ended.is_set()
            assert conn.healthy() == ALL_SLOTS
            assert await new.probe("/readyz") == (200, "ready\n")
            assert await new.terminate() == 0, new.text
    assert "Traceback" not in old.text + new.text
    assert node.socket_inode() is None
    assert holders(node) == {slot: ("held", None) for slot in held} | {during[0]: ("during-overlap", None)}


async def test_agent_that_stepped_aside_serves_again_once_the_newer_one_is_gone(sock_dir: Path) -> None:
    async with AgentHarness.running(sock_dir) as harness:
        older = harness.agent
        with log_watch("agent.deviceplugin.lifecycle") as log:
            newer = Agent(harness.config)
            stop_newer = asyncio.Event()
            task = asyncio.create_task(newer.run(stop_newer), name="newer-agent")
            try:
                await harness.kubelet.wait_registered(2, WAIT_S)
                await log.wait_for(lambda: older.lifecycle.superseded)
                assert not older.lifecycle.registered.is_set()
            finally:
                stop_newer.set()
                async with asyncio.timeout(WAIT_S):
                    await task
            # The newer agent removed its socket on the way out: the older one serves and registers again.
            await harness.kubelet.wait_registered(3, WAIT_S)
            await harness.kubelet.wait_for(lambda: listed_in(harness.kubelet) == ALL_SLOTS, WAIT_S)
            assert not older.lifecycle.superseded
            assert harness.socket.is_socket()
        messages = [record.getMessage() for record in log.records]
        assert sum("stepping aside" in message for message in messages) == 1

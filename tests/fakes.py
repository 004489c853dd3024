"""Every stand-in the tests use, in one place.

* the kubelet: :class:`agent.demo.kubelet.devicemanager.KubeletStandIn` (shipped, because the demo
  uses it too), re-exported here, and :func:`close_stream` (the kubelet dropping an endpoint);
* the API server: :class:`tests.fakeapi.FakeKubeApiServer` (the shipped stand-in of
  :mod:`agent.demo.kubeapi` with the tests' controls), re-exported here;
* FPGA hardware: :class:`agent.simfpga.SimFabric` (stateful simulated cards);
* :class:`AgentHarness`: a real agent wired to both, started and stopped cleanly;
* the kubelet's DRA side: :class:`agent.demo.kubelet.dra.DraKubelet` (shipped, for ``fpga-agent demo dra``);
  here :class:`FakeClaimPreparer` for what preparing a claim does on the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from agent.app import Agent
from agent.config import Config, load_config
from agent.demo.kubelet.devicemanager import KubeletStandIn, PluginConnection
from agent.demo.kubelet.nodepods import NodePods
from agent.deviceplugin.constants import RESOURCE_NAME
from agent.dra.cdi import UID, CdiSpecs
from agent.dra.constants import DRIVER_NAME
from agent.dra.service import ClaimRef, PreparedDevice
from agent.errors import KubeError, ProgrammingError
from agent.files.atomic import read_no_follow
from agent.kube.claims import ClaimInfo, parse_claim
from agent.programming.catalog import Catalog
from agent.simfpga import SimFabric

__all__ = [
    "RESOURCE_NAME",
    "AgentHarness",
    "Catalog",
    "CdiReader",
    "FakeClaimPreparer",
    "FakeClaims",
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
        "dra_registry_dir": str(root / "plugins_registry"),
        "dra_plugins_dir": str(root / "plugins"),
        "cdi_dir": str(root / "cdi"),
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
            # The stand-in counts the Register call before it answers; the agent sees it succeed (its
            # registration count, /readyz) only when the answer has reached it.
            assert agent.lifecycle is not None
            await asyncio.wait_for(agent.lifecycle.registered.wait(), 5.0)
            yield harness
        finally:
            stop.set()
            try:
                async with asyncio.timeout(10):
                    await task
            finally:
                await kubelet.stop()


async def close_stream(kubelet: KubeletStandIn, resource: str) -> None:
    """End the ListAndWatch stream of ``resource`` as the kubelet does when it drops an endpoint."""
    conn = kubelet.plugins[resource]
    if conn.task is not None:
        conn.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await conn.task


from tests.fakeapi import (  # noqa: E402, F401
    JSON,
    FakeKubeApiServer,
    make_node,
    make_pod,
    make_resource_claim,
    running_apiserver,
)

#: Long enough for a loaded machine; a hung command fails the test instead of the run.
CLI_TIMEOUT_S = 60.0


def run_fpga_agent(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``fpga-agent ARGS`` as its own process (``python -m agent.cli.main``), output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "agent.cli.main", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


# ---------------------------------------------------------------------------------- DRA
class FakeClaimPreparer:
    """A ClaimPreparer holding state as the real one will: claim UID -> its devices (one slot per claim).

    Preparing is idempotent (the same devices again); a claim whose name starts with
    ``broken`` fails with a clear error and changes nothing; unpreparing an unknown
    claim is a success.
    """

    def __init__(self, pool: str = "node-a") -> None:
        self.pool = pool
        self.prepared: dict[str, tuple[PreparedDevice, ...]] = {}
        self.calls: list[tuple[str, str]] = []
        #: A claim whose name starts with ``slow`` is prepared only once this is set (a long programming).
        self.slow_done = asyncio.Event()
        #: Set once such a claim is prepared.
        self.slow_prepared = asyncio.Event()

    async def prepare(self, claim: ClaimRef) -> tuple[PreparedDevice, ...]:
        self.calls.append(("prepare", claim.uid))
        who = f"claim {claim.namespace}/{claim.name}"
        if claim.name.startswith("broken"):
            raise ProgrammingError(f"{who}: its bitstream failed verification")
        if claim.name.startswith("slow") and claim.uid not in self.prepared:
            await self.slow_done.wait()
            self.slow_prepared.set()
        if claim.uid not in self.prepared:
            slot = f"slot-{len(self.prepared)}"
            cdi = f"{DRIVER_NAME}/slot={claim.uid}-{slot}"
            self.prepared[claim.uid] = (PreparedDevice(self.pool, slot, (cdi,), ("fpga",)),)
        return self.prepared[claim.uid]

    async def unprepare(self, claim: ClaimRef) -> None:
        self.calls.append(("unprepare", claim.uid))
        if claim.name.startswith("broken-release"):
            raise ProgrammingError(f"claim {claim.namespace}/{claim.name}: the CDI spec could not be removed")
        self.prepared.pop(claim.uid, None)


class FakeClaims:
    """ResourceClaims as the API server holds them, read as ``agent.kube.claims.ClaimReader`` reads them: the stored
    JSON goes through the reader's own parser, and a claim that is gone, replaced (another UID), not allocated
    or malformed is the same KubeError the reader raises."""

    def __init__(self) -> None:
        #: (namespace, name) -> the claim as JSON
        self.claims: dict[tuple[str, str], JSON] = {}
        self.reads = 0

    def put(
        self,
        namespace: str,
        name: str,
        devices: list[tuple[str, str]],
        *,
        pool: str,
        configs: tuple[tuple[tuple[str, ...], dict[str, object]], ...] = (),
        pods: tuple[str, ...] = (),
        first_available: dict[str, list[str]] | None = None,
    ) -> JSON:
        """A claim made (again: a new UID) and allocated: ``devices`` as (request, device) in ``pool``, configs
        as (requests, parameters), reserved for ``pods`` (see :func:`agent.demo.kubeapi.make_resource_claim`)."""
        claim = make_resource_claim(
            name,
            namespace=namespace,
            driver=DRIVER_NAME,
            devices=[(request, pool, device) for request, device in devices],
            configs=configs,
            first_available=first_available,
            reserved_for=[(pod, str(uuid.uuid4())) for pod in pods],
        )
        return self.put_json(claim)

    def put_json(self, claim: JSON) -> JSON:
        """A claim as given (made again: a new UID), however malformed."""
        claim = copy.deepcopy(claim)
        meta = claim.setdefault("metadata", {})
        meta["uid"] = str(uuid.uuid4())
        self.claims[(meta.get("namespace", ""), meta.get("name", ""))] = claim
        return copy.deepcopy(claim)

    def uid(self, namespace: str, name: str) -> str:
        uid: str = self.claims[(namespace, name)]["metadata"]["uid"]
        return uid

    def read(self, namespace: str, name: str, uid: str) -> ClaimInfo:
        self.reads += 1
        raw = self.claims.get((namespace, name))
        if raw is None:
            raise KubeError(f"claim {namespace}/{name} does not exist (any more)")
        info = parse_claim(raw, DRIVER_NAME)
        if info.uid != uid:
            raise KubeError(
                f"claim {namespace}/{name} was replaced: its UID is {info.uid!r}, the kubelet asked for {uid!r}"
            )
        return info


class CdiReader(CdiSpecs):
    """The CDI specs as the container runtime reads them back."""

    def read(self, claim_uid: str) -> dict[str, object] | None:
        """The claim's spec as written, None when there is none (a symbolic link is never followed)."""
        try:
            data: dict[str, object] = json.loads(read_no_follow(self.path(claim_uid)))
        except FileNotFoundError:
            return None
        return data

    def claims(self) -> set[str]:
        """The UIDs of the claims that have a spec here."""
        uids = {p.name[len(self.driver) + 1 : -len(".json")] for p in self.directory.glob(f"{self.driver}-*.json")}
        return {uid for uid in uids if UID.fullmatch(uid)}

"""Cluster-declared bitstreams pulled by the running agent: ``fpga-agent run`` with API access (the fake API
server, serving FpgaBitstream objects and pods through the real kubernetes client), the kubelet stand-in
over real sockets, simulated cards, and the artifacts in a real CNCF distribution registry (Debian's
docker-registry) or on a real HTTPS server, both on loopback.

Covers: the pull at PreStartContainer with its Events, a tampered artifact refused with nothing left,
a pull slower than the call's deadline (the call fails clearly, the next one succeeds), the early pull
from the pod watch, prefetch, and the cache budget with a file in use kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from aiohttp import web

from agent.app import Agent, connect_kube
from agent.bitstreams.declaration import Credentials, Declaration, declaration_object
from agent.bitstreams.publish import push_bitstream
from agent.bitstreams.reference import parse_reference
from agent.bitstreams.registry import RegistryClient
from agent.config import Config
from agent.errors import CatalogError, ConfigError
from agent.node.reconfigure import ANNOTATION
from agent.programming.catalog import Catalog
from agent.programming.catalogentry import CatalogScan
from agent.simfpga.fabric import PLATFORM
from tests.fakeapi import DEFAULT_NODE, FakeKubeApiServer, running_apiserver
from tests.fakes import RESOURCE_NAME, KubeletStandIn, test_config
from tests.integration.bitstreams.servers import (
    FileServer,
    Registry,
    running_registry,
    serving_files,
)
from tests.integration.reconfigure.support import (
    Bitstreams,
    fabric_log,
    held_by,
    pre_start,
    push_artifact,
    state,
    wait_registry,
)
from tests.integration.reconfigure.support import until as wait_until

WAIT_S = 20.0
SIZE = 64 * 1024
#: Room for two of the test files and a bit, as in the puller's own tests.
BUDGET_BYTES = 160 * 1024
NS = "default"


def content(seed: str) -> bytes:
    block = hashlib.sha256(seed.encode()).digest()
    return (block * (SIZE // len(block) + 1))[:SIZE]


def reasons(api: FakeKubeApiServer, pod: str) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in api.events() if e["involvedObject"]["name"] == pod]


def pulls(agent: Agent, result: str) -> float:
    value = agent.metrics.registry.get_sample_value("fpga_slot_bitstream_pulls_total", {"result": result})
    return value or 0.0


def pulled_bytes(agent: Agent) -> float:
    return agent.metrics.registry.get_sample_value("fpga_slot_bitstream_pulled_bytes_total") or 0.0


def in_catalog(catalog: Catalog, name: str) -> bool:
    try:
        catalog.resolve(name)
    except CatalogError:
        return False
    return True


async def until(what: str, check: Callable[[], bool]) -> None:
    await wait_until(what, check, WAIT_S)


@dataclasses.dataclass
class Node:
    """The fake API server, the kubelet stand-in and the agent, as ``fpga-agent run`` has them."""

    api: FakeKubeApiServer
    kubelet: KubeletStandIn
    agent: Agent
    catalog: Catalog
    registry: Registry
    session: aiohttp.ClientSession
    sources: Path

    async def push(self, name: str, data: bytes, platform: str = PLATFORM, **spec: object) -> Declaration:
        """Push ``data`` to the registry as ``catalog push`` does; declare it as its FpgaBitstream."""
        path = self.sources / f"{name}.bin"
        path.write_bytes(data)
        return await push_artifact(self.session, self.registry, path, name, platform, **spec)

    def declare(self, declaration: Declaration) -> None:
        self.api.put_fpga_bitstream(declaration_object(declaration))

    def catalog_files(self) -> list[str]:
        return sorted(os.listdir(self.catalog.directory))


@contextlib.asynccontextmanager
async def node_running(
    sock_dir: Path,
    bitstreams: Bitstreams,
    registry: Registry,
    session: aiohttp.ClientSession,
    catalog: Catalog | None = None,
    **overrides: object,
) -> AsyncIterator[Node]:
    with running_apiserver() as api:
        api.add_node(DEFAULT_NODE)
        settings: dict[str, object] = {
            "kubeconfig": api.write_kubeconfig(sock_dir / "kubeconfig"),
            "bitstream_plain_http": (registry.address,),
            "bitstream_cache_bytes": BUDGET_BYTES,
            **overrides,
        }
        config: Config = dataclasses.replace(test_config(sock_dir, node_name=DEFAULT_NODE), **settings)  # type: ignore[arg-type]
        kube = connect_kube(config)
        assert kube is not None
        kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket)
        await kubelet.start()
        catalog = catalog or bitstreams.catalog
        agent = Agent(config, catalog=catalog, kube=kube)
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop), name="agent-under-test")
        sources = sock_dir / "pushed"
        sources.mkdir()
        try:
            await kubelet.wait_registered(1, WAIT_S)
            await kubelet.wait_for(lambda: len(kubelet.plugins[RESOURCE_NAME].healthy()) == 8, WAIT_S)
            yield Node(api, kubelet, agent, catalog, registry, session, sources)
        finally:
            stop.set()
            async with asyncio.timeout(WAIT_S):
                await task
            await kubelet.stop()


def declared(node: Node, name: str) -> Callable[[], bool]:
    def check() -> bool:
        puller = node.agent.distribution.puller if node.agent.distribution is not None else None
        return puller is not None and puller.declared(name) is not None

    return check


async def test_a_declared_bitstream_is_pulled_verified_and_programmed_with_both_events(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    async with node_running(sock_dir, bitstreams, registry, session) as node:
        declaration = await node.push("declared-only", content("declared-only"))
        assert not in_catalog(node.catalog, "declared-only")
        node.declare(declaration)
        await until("the declaration at the agent", declared(node, "declared-only"))
        node.api.add_pod("user", annotations={ANNOTATION: "declared-only"})
        with fabric_log(node.agent.backend.fabric) as log:  # type: ignore[arg-type]
            (slot_id,) = (await node.kubelet.admit(NS, "user", "main", RESOURCE_NAME, 1)).device_ids
            assert log.programs == [slot_id]
        held = state(node.agent.registry, slot_id)
        assert (held.bitstream, held.accelerator_id) == ("declared-only", "accel-declared-only")
        entry = node.catalog.resolve("declared-only")
        assert (entry.sha256, entry.size, entry.source) == (declaration.sha256, SIZE, declaration.source)
        await node.api.until(lambda: len(reasons(node.api, "user")) == 2, WAIT_S)
        (pulled, programmed) = reasons(node.api, "user")
        assert pulled[:2] == ("Normal", "FpgaBitstreamPulled")
        assert pulled[2].startswith(f"Pulled bitstream declared-only ({SIZE} bytes) from {declaration.source} in ")
        assert pulled[2].endswith(" s")
        assert programmed[:2] == ("Normal", "FpgaSlotProgrammed")
        assert (pulls(node.agent, "pulled"), pulled_bytes(node.agent)) == (1.0, float(SIZE))


async def test_a_local_bitstream_nobody_declares_works_as_before(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    async with node_running(sock_dir, bitstreams, registry, session) as node:
        node.declare(await node.push("something-else", content("something-else")))
        await until("the declaration at the agent", declared(node, "something-else"))
        node.api.add_pod("local", annotations={ANNOTATION: bitstreams.accel_a.name})
        (slot_id,) = (await node.kubelet.admit(NS, "local", "main", RESOURCE_NAME, 1)).device_ids
        assert state(node.agent.registry, slot_id).bitstream == bitstreams.accel_a.name
        await node.api.until(lambda: len(reasons(node.api, "local")) == 1, WAIT_S)
        assert reasons(node.api, "local")[0][1] == "FpgaSlotProgrammed"
        assert pulls(node.agent, "pulled") == 0.0


async def test_a_tampered_artifact_is_refused_with_an_event_and_nothing_is_left(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    async with node_running(sock_dir, bitstreams, registry, session) as node:
        data = content("tampered")
        declaration = await node.push("tampered", data)
        registry.blob_data("sha256:" + declaration.sha256).write_bytes(data[:-1] + b"!")  # behind its back
        before = node.catalog_files()
        node.declare(declaration)
        await until("the declaration at the agent", declared(node, "tampered"))
        node.api.add_pod("victim", annotations={ANNOTATION: "tampered"})
        with fabric_log(node.agent.backend.fabric) as log, pytest.raises(grpc.aio.AioRpcError) as refused:  # type: ignore[arg-type]
            await node.kubelet.admit(NS, "victim", "main", RESOURCE_NAME, 1)
        assert log.programs == []
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        details = refused.value.details() or ""
        assert "pod default/victim" in details
        assert f"bitstream 'tampered' from {declaration.source}: the pulled file has sha256 " in details
        assert f"the declaration says {declaration.sha256}" in details
        await node.api.until(lambda: len(reasons(node.api, "victim")) == 1, WAIT_S)
        ((kind, reason, message),) = reasons(node.api, "victim")
        assert (kind, reason) == ("Warning", "FpgaBitstreamPullFailed")
        assert declaration.sha256 in message
        assert node.catalog_files() == before  # no entry, no temp file
        (slot_id,) = held_by(node.kubelet, "victim", "main")
        assert state(node.agent.registry, slot_id).bitstream is None
        assert pulls(node.agent, "hash_mismatch") >= 1.0
        assert pulls(node.agent, "pulled") == 0.0


@dataclasses.dataclass
class GatedFileServer(FileServer):
    """An HTTPS file server that holds every answer until the test opens the gate."""

    gate: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    waiting: int = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.waiting += 1
        await self.gate.wait()
        return await super().handle(request)


async def test_a_pull_slower_than_the_deadline_fails_the_call_clearly_and_the_next_call_finds_it(
    sock_dir: Path,
    bitstreams: Bitstreams,
    registry: Registry,
    session: aiohttp.ClientSession,
    certificate: tuple[Path, Path],
) -> None:
    data = content("slow")
    async with (
        serving_files(GatedFileServer(files={"slow.bin": data}), *certificate) as server,
        node_running(
            sock_dir, bitstreams, registry, session, bitstream_ca_file=certificate[0], program_timeout_s=4.0
        ) as node,
    ):
        url = server.url("slow.bin")
        sha256 = hashlib.sha256(data).hexdigest()
        node.declare(Declaration("slow", PLATFORM, "accel-slow", sha256, SIZE, https=url))
        await until("the declaration at the agent", declared(node, "slow"))
        node.api.add_pod("patient", annotations={ANNOTATION: "slow"})
        with pytest.raises(grpc.aio.AioRpcError) as pending:
            await node.kubelet.admit(NS, "patient", "main", RESOURCE_NAME, 1)
        assert pending.value.code() is grpc.StatusCode.UNAVAILABLE
        assert f"bitstream 'slow' is still being pulled from {url}" in (pending.value.details() or "")
        assert "the kubelet's next attempt will find it" in (pending.value.details() or "")
        (slot_id,) = held_by(node.kubelet, "patient", "main")
        assert state(node.agent.registry, slot_id).bitstream is None
        assert state(node.agent.registry, slot_id).taint is None  # nothing was touched
        assert server.waiting == 1  # one pull, still going

        server.gate.set()
        await until("the pulled file", lambda: in_catalog(node.catalog, "slow"))
        await pre_start(node.kubelet, [slot_id])  # the kubelet's retry
        assert state(node.agent.registry, slot_id).bitstream == "slow"
        assert server.requests == 1
        await node.api.until(lambda: len(reasons(node.api, "patient")) == 3, WAIT_S)
        assert [r[:2] for r in reasons(node.api, "patient")] == [
            ("Normal", "FpgaBitstreamPulling"),
            ("Normal", "FpgaBitstreamPulled"),
            ("Normal", "FpgaSlotProgrammed"),
        ]


async def test_the_pod_watch_starts_the_pull_before_the_kubelet_admits_the_pod(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    async with node_running(sock_dir, bitstreams, registry, session) as node:
        node.declare(await node.push("early", content("early")))
        await until("the declaration at the agent", declared(node, "early"))
        node.api.add_pod("bound", annotations={f"{ANNOTATION}.main": "early"})  # bound here, not admitted yet
        await until("the pulled file", lambda: in_catalog(node.catalog, "early"))
        assert node.kubelet.assignments == {}  # no Allocate, no PreStartContainer so far
        await node.api.until(lambda: len(reasons(node.api, "bound")) == 1, WAIT_S)
        assert reasons(node.api, "bound")[0][:2] == ("Normal", "FpgaBitstreamPulled")

        (slot_id,) = (await node.kubelet.admit(NS, "bound", "main", RESOURCE_NAME, 1)).device_ids
        assert state(node.agent.registry, slot_id).bitstream == "early"
        assert pulls(node.agent, "pulled") == 1.0  # the start found the file: no second pull
        await node.api.until(lambda: len(reasons(node.api, "bound")) == 2, WAIT_S)
        assert reasons(node.api, "bound")[1][1] == "FpgaSlotProgrammed"


async def test_a_pod_declared_before_its_bitstream_gets_the_pull_when_the_declaration_arrives(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    async with node_running(sock_dir, bitstreams, registry, session) as node:
        declaration = await node.push("later", content("later"))
        node.api.add_pod("waiting", annotations={ANNOTATION: "later"})
        await until(
            "the pod at the agent",
            lambda: node.agent.kube is not None and bool(node.agent.kube.pods.get(NS, "waiting")),
        )
        node.declare(declaration)
        await until("the pulled file", lambda: in_catalog(node.catalog, "later"))
        assert node.kubelet.assignments == {}


async def test_prefetch_pulls_what_fits_this_node_as_soon_as_it_is_declared(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    async with node_running(sock_dir, bitstreams, registry, session) as node:
        foreign = await node.push("prefetch-foreign", content("foreign"), platform="other-pr-v9", prefetch=True)
        fitting = await node.push("prefetch-fits", content("fits"), prefetch=True)
        plain = await node.push("prefetch-not", content("not"))
        node.declare(foreign)
        node.declare(plain)
        node.declare(fitting)  # declared last: the others were decided on when it is in
        await until("the prefetched file", lambda: in_catalog(node.catalog, "prefetch-fits"))
        await until("the pull counted", lambda: pulls(node.agent, "pulled") == 1.0)  # counted once the file is in
        assert not in_catalog(node.catalog, "prefetch-foreign")
        assert not in_catalog(node.catalog, "prefetch-not")
        assert sum(pulls(node.agent, r) for r in ("platform_mismatch", "failed")) == 0.0


async def test_the_cache_stays_under_budget_and_never_evicts_a_file_in_use(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    async with node_running(sock_dir, bitstreams, registry, session) as node:
        for name in ("kept", "spare", "third"):
            node.declare(await node.push(name, content(f"budget-{name}")))
        await until("the declarations at the agent", declared(node, "third"))

        def pulled_names() -> list[str]:
            return sorted(e.name for e in node.catalog.list() if e.source)

        # "kept" first (the least recently used), then "spare": both held by running pods.
        for pod, name in (("keeper", "kept"), ("sparer", "spare")):
            node.api.add_pod(pod, annotations={ANNOTATION: name})
            await node.kubelet.admit(NS, pod, "main", RESOURCE_NAME, 1)
        assert pulled_names() == ["kept", "spare"]

        node.api.add_pod("third", annotations={ANNOTATION: "third"})
        with pytest.raises(grpc.aio.AioRpcError) as full:
            await node.kubelet.admit(NS, "third", "main", RESOURCE_NAME, 1)
        assert "held by bitstreams in use: kept, spare" in (full.value.details() or "")
        await node.api.until(lambda: any(r[1] == "FpgaBitstreamPullFailed" for r in reasons(node.api, "third")))
        assert pulled_names() == ["kept", "spare"]

        # "spare"'s pod goes: it is evicted although "kept" was used longer ago, since "kept" is in use.
        (spare_slot,) = held_by(node.kubelet, "sparer", "main")
        node.kubelet.delete_pod(NS, "sparer")
        node.api.delete_pod(NS, "sparer")
        await wait_registry(node.agent.registry, lambda: state(node.agent.registry, spare_slot).holder is None)
        (third_slot,) = held_by(node.kubelet, "third", "main")
        await pre_start(node.kubelet, [third_slot])
        assert state(node.agent.registry, third_slot).bitstream == "third"
        assert pulled_names() == ["kept", "third"]
        assert sum(e.size for e in node.catalog.list() if e.source) <= BUDGET_BYTES
        assert pulls(node.agent, "cache_full") >= 1.0


def test_a_ca_file_that_cannot_be_loaded_is_named(sock_dir: Path, bitstreams: Bitstreams) -> None:
    bad = sock_dir / "not-a-ca.pem"
    bad.write_text("no certificate here\n")
    with running_apiserver() as api:
        config = dataclasses.replace(
            test_config(sock_dir, node_name=DEFAULT_NODE),
            kubeconfig=api.write_kubeconfig(sock_dir / "kubeconfig"),
            bitstream_ca_file=bad,
        )

        async def build() -> None:
            kube = connect_kube(config)
            assert kube is not None
            try:
                Agent(config, catalog=bitstreams.catalog, kube=kube)
            finally:
                kube.api_client.close()

        with pytest.raises(ConfigError, match=r"^--bitstream-ca-file: cannot load .*not-a-ca.pem"):
            asyncio.run(build())


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry that wants basic auth (htpasswd, bcrypt), as a private one does."""
    with running_registry(tmp_path_factory.mktemp("auth-registry"), users={"alice": "wonderland"}) as running:
        yield running


async def test_the_pull_secret_is_read_from_the_agents_own_namespace(
    sock_dir: Path,
    bitstreams: Bitstreams,
    registry: Registry,
    auth_registry: Registry,
    session: aiohttp.ClientSession,
) -> None:
    path = sock_dir / "private.bin"
    path.write_bytes(content("private"))
    reference = parse_reference(f"{auth_registry.address}/fpga/private:1.0")
    client = RegistryClient(session, [auth_registry.address])
    pushed = await push_bitstream(
        client, path, "private", PLATFORM, "accel-private", reference, Credentials("alice", "wonderland")
    )
    async with node_running(
        sock_dir, bitstreams, registry, session, bitstream_plain_http=(registry.address, auth_registry.address)
    ) as node:
        assert node.agent.config.namespace == "fpga-slot"
        basic = "kubernetes.io/basic-auth"
        node.api.namespaces.add("fpga-slot")
        node.api.put_secret("fpga-slot", "registry-login", {"user": b"alice"})  # no usable credentials
        node.api.put_secret("default", "registry-login", {"username": b"alice", "password": b"wrong"}, basic)
        node.declare(dataclasses.replace(pushed, pull_secret="registry-login"))
        await until("the declaration at the agent", declared(node, "private"))
        node.api.add_pod("private", annotations={ANNOTATION: "private"})
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await node.kubelet.admit(NS, "private", "main", RESOURCE_NAME, 1)
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "pull Secret 'registry-login' (Opaque) has no username and password or token" in (
            refused.value.details() or ""
        )
        await node.api.until(lambda: len(reasons(node.api, "private")) == 1, WAIT_S)
        assert reasons(node.api, "private")[0][:2] == ("Warning", "FpgaBitstreamPullFailed")
        assert pulls(node.agent, "auth") >= 1.0

        node.api.put_secret("fpga-slot", "registry-login", {"username": b"alice", "password": b"wonderland"}, basic)
        (slot_id,) = held_by(node.kubelet, "private", "main")
        await pre_start(node.kubelet, [slot_id])  # the kubelet's retry
        assert state(node.agent.registry, slot_id).bitstream == "private"
        reads = node.api.requests("GET", "/api/v1/namespaces/fpga-slot/secrets/registry-login")
        assert reads
        assert node.api.requests("GET", "/api/v1/namespaces/default/secrets/registry-login") == []


async def test_a_withdrawn_declaration_is_pulled_no_more(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    async with node_running(sock_dir, bitstreams, registry, session) as node:
        for name in ("withdrawn", "relisted"):
            node.declare(await node.push(name, content(name)))
        await until("the declarations at the agent", declared(node, "relisted"))
        await until("the declarations at the agent", declared(node, "withdrawn"))
        node.api.delete_fpga_bitstream("withdrawn")
        await until("the withdrawal at the agent", lambda: not declared(node, "withdrawn")())
        listed = len(node.api.list_requests("fpgabitstreams"))
        node.api.expire_watches("fpgabitstreams")  # the agent lists again: the list is what counts
        await until("the list again", lambda: len(node.api.list_requests("fpgabitstreams")) > listed)
        await until("the declaration after the relist", declared(node, "relisted"))
        assert not declared(node, "withdrawn")()

        node.api.add_pod("late", annotations={ANNOTATION: "withdrawn"})
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await node.kubelet.admit(NS, "late", "main", RESOURCE_NAME, 1)
        assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
        assert "bitstream 'withdrawn' is not in the catalog" in (unknown.value.details() or "")
        await node.api.until(lambda: len(reasons(node.api, "late")) == 1, WAIT_S)
        assert reasons(node.api, "late")[0][:2] == ("Warning", "FpgaBitstreamRejected")
        assert not in_catalog(node.catalog, "withdrawn")
        assert pulls(node.agent, "pulled") == 0.0


async def test_a_slot_holding_the_declared_accelerator_is_preferred_and_not_programmed_again(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    async with node_running(sock_dir, bitstreams, registry, session) as node:
        fabric = node.agent.backend.fabric
        assert fabric is not None
        await fabric.program("simcard1", "slot2", "accel-preloaded")  # loaded before, its file since gone
        target = "simcard1-slot2"
        await wait_registry(node.agent.registry, lambda: state(node.agent.registry, target).accelerator_id is not None)
        node.declare(await node.push("preloaded", content("preloaded")))
        await until("the declaration at the agent", declared(node, "preloaded"))
        node.api.add_pod("reuser", annotations={ANNOTATION: "preloaded"})
        with fabric_log(fabric) as log:
            admitted = await node.kubelet.admit(NS, "reuser", "main", RESOURCE_NAME, 1)
            assert admitted.preferred == [target]
            assert admitted.device_ids == [target]
            assert log.programs == []  # a cache hit: the file was pulled, the slot left as it was
        assert state(node.agent.registry, target).bitstream == "preloaded"
        assert in_catalog(node.catalog, "preloaded")
        await node.api.until(lambda: any(r[1] == "FpgaSlotCacheHit" for r in reasons(node.api, "reuser")), WAIT_S)


async def test_an_unchanged_relist_starts_no_pull(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    async with node_running(sock_dir, bitstreams, registry, session) as node:
        node.declare(await node.push("unchanged", content("unchanged"), prefetch=True))
        await until("the prefetched file", lambda: in_catalog(node.catalog, "unchanged"))
        assert node.catalog.evict("unchanged")  # gone (as if evicted): only a pull brings it back
        listed = len(node.api.list_requests("fpgabitstreams"))
        node.api.expire_watches("fpgabitstreams")  # the agent lists again: the same declaration
        await until("the list again", lambda: len(node.api.list_requests("fpgabitstreams")) > listed)
        node.declare(await node.push("marker", content("marker"), prefetch=True))  # reaches the agent after the list
        # The pull is counted when it has ended, just after its file is in the catalog: wait for both.
        await until(
            "the marker's prefetch",
            lambda: in_catalog(node.catalog, "marker") and pulls(node.agent, "pulled") >= 2.0,
        )
        assert not in_catalog(node.catalog, "unchanged")
        assert pulls(node.agent, "pulled") == 2.0  # "unchanged" once, "marker" once


class CountingCatalog(Catalog):
    """The node catalog, counting its reads (each lists the directory and reads every record)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.scans = 0

    def scan(self) -> CatalogScan:
        self.scans += 1
        return super().scan()


async def test_the_catalog_is_read_once_as_the_agent_starts(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    catalog = CountingCatalog(bitstreams.catalog.directory)
    async with node_running(sock_dir, bitstreams, registry, session, catalog=catalog) as node:
        node.declare(await node.push("after-start", content("after-start")))
        await until("the declaration at the agent", declared(node, "after-start"))  # the puller has started

        def published() -> dict[str, str]:
            state = node.api.node_state("fpga-slot", DEFAULT_NODE)
            return dict(state["spec"]["bitstreams"]) if state else {}

        await until("the node's bitstreams published", lambda: bitstreams.accel_a.name in published())
        assert catalog.scans == 1

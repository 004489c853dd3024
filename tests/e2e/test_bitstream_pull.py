"""A bitstream only a registry holds, pulled by the deployed agent on a real node and programmed (#14).

The shipped manifests (``kubectl apply -k`` of ``--e2e-overlay``, which must put the agent on the host
network: ``overlays/sim-hostnet``), a real CNCF distribution registry (Debian's ``docker-registry``)
started by this test where pytest runs, listening on the loopback address: pytest must run on the node
under test, so that the agent (host network) reaches the registry at ``127.0.0.1``. The agent is told
to speak plain HTTP to it (``FPGA_AGENT_BITSTREAM_PLAIN_HTTP``, set on the DaemonSet).

1. a bitstream pushed to the registry and declared as an FpgaBitstream, never in the node's catalog: a
   pod asking for it runs, with the Events ``FpgaBitstreamPulled`` and ``FpgaSlotProgrammed``;
2. a tampered artifact: the pod's start is refused with ``FpgaBitstreamPullFailed`` naming the sha256;
3. the cache budget (``FPGA_AGENT_BITSTREAM_CACHE_BYTES``, three files here): pods asking for four new
   bitstreams one after another leave the three used last in the node's catalog, the first evicted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.bitstreams.declaration import Declaration, declaration_object
from agent.bitstreams.publish import push_bitstream
from agent.bitstreams.reference import parse_reference
from agent.bitstreams.registry import RegistryClient
from agent.simfpga.fabric import PLATFORM
from tests.e2e.cluster import Cluster, Suite
from tests.e2e.deployment import AGENT, NAMESPACE, Deployment, deploy_as_configured, kubectl
from tests.integration.bitstreams.servers import Registry, running_registry

GROUP, VERSION, PLURAL = "example.com", "v1alpha1", "fpgabitstreams"
SIZE = 512 * 1024
#: The agent's budget for pulled files in this module: three of them (the agent takes 1 MiB at least).
BUDGET = 3 * SIZE
#: The node's catalog outlives a run (a host directory): new names each run, so each run pulls.
RUN = secrets.token_hex(3)


def content(seed: str) -> bytes:
    block = hashlib.sha256(seed.encode()).digest()
    return (block * (SIZE // len(block) + 1))[:SIZE]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with running_registry(tmp_path_factory.mktemp("e2e-registry")) as running:
        yield running


@pytest.fixture(scope="module")
def deployment(cluster: Cluster, pytestconfig: pytest.Config, registry: Registry) -> Iterator[Deployment]:
    with deploy_as_configured(cluster, pytestconfig) as deployed:
        # The agent pulls from the test's registry over plain HTTP; the DaemonSet rolls the agent once.
        kubectl(
            "set",
            "env",
            "-n",
            NAMESPACE,
            f"daemonset/{AGENT}",
            f"FPGA_AGENT_BITSTREAM_PLAIN_HTTP={registry.address}",
            f"FPGA_AGENT_BITSTREAM_CACHE_BYTES={BUDGET}",
        )
        deployed.wait_rolled_out()
        yield deployed


@pytest.fixture
def declared(cluster: Cluster) -> Iterator[list[str]]:
    """FpgaBitstream names the test declares; deleted after it."""
    names: list[str] = []
    yield names
    objects = client.CustomObjectsApi(cluster.api)
    for name in names:
        with contextlib.suppress(ApiException):
            objects.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def push(registry: Registry, tmp_path: Path, name: str, data: bytes) -> Declaration:
    path = tmp_path / f"{name}.bin"
    path.write_bytes(data)
    reference = parse_reference(f"{registry.address}/fpga/{name}:1.0")

    async def run() -> Declaration:
        async with aiohttp.ClientSession() as session:
            pushed = await push_bitstream(
                RegistryClient(session, [registry.address]), path, name, PLATFORM, f"accel-{name}", reference, None
            )
        return pushed

    return asyncio.run(run())


def declare(cluster: Cluster, declared: list[str], declaration: Declaration) -> None:
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        GROUP, VERSION, PLURAL, declaration_object(declaration)
    )
    declared.append(declaration.name)


def test_a_declared_bitstream_is_pulled_and_programmed_on_a_node_that_never_saw_it(
    deployment: Deployment, registry: Registry, declared: list[str], tmp_path: Path
) -> None:
    suite: Suite = deployment.suite
    name = f"e2e-pulled-{RUN}"
    declaration = push(registry, tmp_path, name, content(name))
    declare(suite.cluster, declared, declaration)
    try:
        suite.running_pod("pulled", slots=1, bitstream=name)
        pulled = suite.cluster.wait_event(suite.namespace, "pulled", {"FpgaBitstreamPulled"}, f"({SIZE} bytes)")
        assert declaration.source in pulled.message
        suite.cluster.wait_event(suite.namespace, "pulled", {"FpgaSlotProgrammed"}, name)
    finally:
        suite.delete_pod("pulled")


def test_a_tampered_artifact_is_refused_with_an_event(
    deployment: Deployment, registry: Registry, declared: list[str], tmp_path: Path
) -> None:
    suite: Suite = deployment.suite
    name = f"e2e-tampered-{RUN}"
    data = content(name)
    declaration = push(registry, tmp_path, name, data)
    registry.blob_data("sha256:" + declaration.sha256).write_bytes(data[:-1] + b"!")
    declare(suite.cluster, declared, declaration)
    try:
        suite.pod("tampered", slots=1, bitstream=name)
        failed = suite.cluster.wait_event(suite.namespace, "tampered", {"FpgaBitstreamPullFailed"}, declaration.sha256)
        assert failed.type == "Warning"
        assert "FpgaSlotProgrammed" not in suite.cluster.reasons(suite.namespace, "tampered")
    finally:
        suite.delete_pod("tampered")


def published_catalog(suite: Suite) -> dict[str, str]:
    """The node's catalog as its agent publishes it (files added by hand and pulled ones)."""
    return suite.cluster.node_catalog(NAMESPACE, suite.node)


def test_the_cache_keeps_pulled_files_within_its_budget(
    deployment: Deployment, registry: Registry, declared: list[str], tmp_path: Path
) -> None:
    suite: Suite = deployment.suite
    names = [f"e2e-budget{i}-{RUN}" for i in range(4)]
    for name in names:
        declare(suite.cluster, declared, push(registry, tmp_path, name, content(name)))
    for name in names:  # one after another: each pod pulls its file, the fourth needs the first's room
        try:
            suite.running_pod("budget", slots=1, bitstream=name)
            suite.cluster.wait_event(suite.namespace, "budget", {"FpgaBitstreamPulled"}, name)
        finally:
            suite.delete_pod("budget")
    deadline = time.monotonic() + 30
    while (catalog := published_catalog(suite)).keys() & set(names) != set(names[1:]):
        assert time.monotonic() < deadline, f"catalog {sorted(catalog)}: expected {names[1:]} of {names}"
        time.sleep(0.5)
    # every file pulled here is SIZE bytes, and files left by earlier runs no larger
    pulled = [name for name in catalog if name.startswith(("e2e-pulled-", "e2e-budget"))]  # not added by hand
    assert len(pulled) * SIZE <= BUDGET, pulled

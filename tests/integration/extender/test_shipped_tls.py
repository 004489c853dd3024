"""The extender as daemonset/ ships it: a real ``fpga-agent extender`` process started with the Deployment's own
environment, with certificates made by ``fpga-agent certs``, called as the fpga-scheduler's shipped tlsConfig
calls it. Only the pod's address (127.0.0.1), the ports (free ones) and where the Secrets are mounted (a temporary
directory) are changed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
import yaml

from agent.cli.certs import DirectoryStore, make_certificates
from agent.cluster.certs import issue, service_names
from tests.deploy.manifests import DAEMONSET_DIR, Manifests, containers, load_documents, render
from tests.fakeapi import FakeKubeApiServer, claim_template_review
from tests.integration.extender.conftest import extender_env, publish_state, running_extender
from tests.integration.extender.test_tls import prioritize
from tests.unit.extender.factories import slot

MANIFESTS = Manifests(render())
HTTPS = re.compile(r"scheduler extender listening on 127\.0\.0\.1:(\d+), https \(client certificates required\)")
PROBE = re.compile(r"extender probe endpoint on 127\.0\.0\.1:(\d+), http: /healthz, /metrics")
WEBHOOK = re.compile(r"admission webhook listening on 127\.0\.0\.1:(\d+), https: /validate")
SYNCED = re.compile(r"node cache synced: 1 nodes")
DECLARATIONS = re.compile(r"FpgaBitstream objects listed: 0")


def extender_container() -> dict[str, Any]:
    (container,) = containers(MANIFESTS.get("Deployment", "fpga-slot-extender", "fpga-slot"))
    return container


def scheduler_tls() -> tuple[str, dict[str, str]]:
    """The shipped scheduler's extender URL and tlsConfig."""
    config = yaml.safe_load((DAEMONSET_DIR / "scheduler-config.yaml").read_text())
    (extender,) = config["extenders"]
    assert extender["enableHTTPS"] is True
    return extender["urlPrefix"], extender["tlsConfig"]


def secret_mounts(kind: str, name: str) -> dict[str, str]:
    """Mount path -> Secret name of a workload's Secret volumes."""
    workload = MANIFESTS.get(kind, name, "fpga-slot")
    volumes = {v["name"]: v["secret"]["secretName"] for v in workload["spec"]["template"]["spec"]["volumes"]
               if "secret" in v}  # fmt: skip
    (container,) = containers(workload)
    return {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"] if m["name"] in volumes}


@dataclass(frozen=True)
class Install:
    """The two Secrets on disk, and where each workload finds them."""

    files: dict[str, Path]  # Secret name -> its directory

    def local(self, mounts: dict[str, str], path: str) -> str:
        """A path inside a container -> the same file here."""
        for mount, secret in mounts.items():
            if path.startswith(mount + "/"):
                return str(self.files[secret] / path.removeprefix(mount + "/"))
        raise AssertionError(f"{path} is on no Secret volume ({mounts})")


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Install:
    out = tmp_path_factory.mktemp("tls")
    names = service_names("fpga-slot-extender", "fpga-slot")
    make_certificates(DirectoryStore(out), lambda: issue(names, client_name="fpga-scheduler", days=1), lambda _: None)
    return Install({"fpga-slot-extender-tls": out / "server", "fpga-scheduler-extender-client": out / "client"})


def shipped_environment(install: Install) -> dict[str, str]:
    """The Deployment's environment on this machine: the pod at 127.0.0.1, free ports, the Secret here."""
    mounts = secret_mounts("Deployment", "fpga-slot-extender")
    env: dict[str, str] = {}
    for item in extender_container()["env"]:
        if "value" not in item:
            continue
        value = item["value"].replace("$(POD_IP)", "127.0.0.1")
        value = re.sub(r":\d+$", ":0", value) if item["name"].endswith("_LISTEN") else value
        env[item["name"]] = install.local(mounts, value) if value.startswith("/etc/") else value
    return env


@pytest.fixture
async def shipped(
    apiserver: FakeKubeApiServer, install: Install, tmp_path: Path
) -> AsyncIterator[tuple[int, int, int]]:
    """The extender process as shipped; its HTTPS, probe and webhook ports once its node cache synced."""
    publish_state(apiserver, "fpga-1", [slot("s0", bitstream="aes")])
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    async with running_extender(
        *extender_container()["args"],
        "--kubeconfig",
        str(kubeconfig),
        env={**extender_env(), **shipped_environment(install)},
    ) as running:
        https = int((await running.wait_for_line(HTTPS))[1])
        probe = int((await running.wait_for_line(PROBE))[1])
        webhook = int((await running.wait_for_line(WEBHOOK))[1])
        await running.wait_for_line(SYNCED)
        await running.wait_for_line(DECLARATIONS)
        yield https, probe, webhook


def scheduler_context(install: Install, client: str | None = "scheduler") -> ssl.SSLContext:
    """What the fpga-scheduler's shipped tlsConfig makes: trust caFile, show certFile/keyFile."""
    _url, tls = scheduler_tls()
    mounts = secret_mounts("Deployment", "fpga-scheduler")
    context = ssl.create_default_context(cafile=install.local(mounts, tls["caFile"]))
    if client == "scheduler":
        context.load_cert_chain(install.local(mounts, tls["certFile"]), install.local(mounts, tls["keyFile"]))
    elif client == "extender":  # the extender's own certificate, made for serving only
        directory = install.files["fpga-slot-extender-tls"]
        context.load_cert_chain(str(directory / "tls.crt"), str(directory / "tls.key"))
    return context


def service_host() -> str:
    url, _tls = scheduler_tls()
    host = urlsplit(url).hostname
    assert host is not None
    return host


async def call(port: int, context: ssl.SSLContext | None) -> int:
    return await prioritize(port, context, server_hostname=service_host() if context else None)


async def test_the_scheduler_is_answered_with_its_certificate(shipped: tuple[int, int, int], install: Install) -> None:
    https, _probe, _webhook = shipped
    assert await call(https, scheduler_context(install)) == 200


@pytest.mark.parametrize("client", [None, "extender", "stranger"], ids=["no-certificate", "server-cert", "other-ca"])
async def test_a_client_without_the_schedulers_certificate_is_refused(
    shipped: tuple[int, int, int], install: Install, tmp_path: Path, client: str | None
) -> None:
    https, _probe, _webhook = shipped
    context = scheduler_context(install, client)
    if client == "stranger":  # a client certificate of another install's CA
        make_certificates(
            DirectoryStore(tmp_path), lambda: issue(["x"], client_name="fpga-scheduler", days=1), lambda _: None
        )
        context.load_cert_chain(str(tmp_path / "client" / "tls.crt"), str(tmp_path / "client" / "tls.key"))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await call(https, context)


async def test_plain_http_is_refused(shipped: tuple[int, int, int]) -> None:
    https, _probe, _webhook = shipped
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError)):
        await call(https, None)


async def test_the_probes_are_answered_on_the_plain_port_which_scores_nothing(shipped: tuple[int, int, int]) -> None:
    _https, probe, _webhook = shipped
    container = extender_container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {item["name"]: item.get("value", "") for item in container["env"]}
    readiness, liveness = container["readinessProbe"], container["livenessProbe"]
    # The probes use the port the probe endpoint listens on, in the Deployment's own terms.
    assert env["FPGA_AGENT_PROBE_LISTEN"] == f"$(POD_IP):{ports[readiness['httpGet']['port']]}"
    assert liveness["tcpSocket"]["port"] == readiness["httpGet"]["port"]
    assert readiness["httpGet"].get("scheme", "HTTP") == "HTTP"
    url = f"http://127.0.0.1:{probe}"
    async with aiohttp.ClientSession() as session:
        async with session.get(url + readiness["httpGet"]["path"]) as response:
            assert (response.status, await response.text()) == (200, "ok\n")
        async with session.get(url + "/metrics") as response:
            assert response.status == 200
            assert "fpga_slot_extender_requests_total" in await response.text()
        for path in ("/prioritize", "/filter"):
            async with session.post(url + path, data=b"") as response:
                assert response.status == 404


async def test_the_api_server_is_answered_on_the_webhook_port_without_a_client_certificate(
    shipped: tuple[int, int, int], install: Install
) -> None:
    """As the API server calls a webhook given by Service: the caBundle (the CA of the extender's Secret) trusted,
    the certificate checked against ``<service>.<namespace>.svc``, no client certificate shown."""
    _https, _probe, webhook = shipped
    (configuration,) = [
        d for d in load_documents(DAEMONSET_DIR / "dra-mode" / "bitstream-webhook.yaml")
        if d["kind"] == "ValidatingWebhookConfiguration"
    ]  # fmt: skip
    service = configuration["webhooks"][0]["clientConfig"]["service"]
    context = ssl.create_default_context(cafile=str(install.files["fpga-slot-extender-tls"] / "ca.crt"))
    review = json.dumps(claim_template_review("nope")).encode()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", webhook, ssl=context, server_hostname=f"{service['name']}.{service['namespace']}.svc"
    )
    try:
        writer.write(
            f"POST {service['path']} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n".encode()
            + f"Content-Length: {len(review)}\r\nConnection: close\r\n\r\n".encode()
            + review
        )
        async with asyncio.timeout(30):
            answer = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    response = json.loads(body)["response"]
    assert response["allowed"] is False  # node fpga-1's catalog has no "nope", and nothing declares it (listed)
    assert "bitstream 'nope'" in response["status"]["message"]


def test_every_port_listens_on_the_pods_own_address() -> None:
    listens = {item["name"]: item["value"] for item in extender_container()["env"] if item["name"].endswith("_LISTEN")}
    assert set(listens) == {"FPGA_AGENT_LISTEN", "FPGA_AGENT_PROBE_LISTEN", "FPGA_AGENT_WEBHOOK_LISTEN"}
    assert all(value.startswith("$(POD_IP):") for value in listens.values()), listens

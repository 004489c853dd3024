"""The admission webhook over real HTTPS, as the API server calls it: no client certificate, an AdmissionReview
v1 in, one out; and ``fpga-agent extender --webhook-listen`` answering from what it watches."""

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

import aiohttp
import pytest

from agent.cluster.certs import issue, tls_context
from agent.config import load_config
from agent.errors import ConfigError
from agent.extender.admission import MAX_REVIEW_BYTES
from agent.extender.nodestate import WatchedNode
from agent.extender.server import bound_port, build_webhook_app, start_webhook
from agent.extender.table import StateTable
from tests.fakeapi import FakeKubeApiServer, claim_template_review
from tests.integration.extender.conftest import (
    FPGA_BITSTREAM,
    PROCESS_TIMEOUT_S,
    ExtenderProcess,
    publish_state,
    running_extender,
)
from tests.unit.extender.factories import PAC, node, slot

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

WEBHOOK = re.compile(r"admission webhook listening on 127\.0\.0\.1:(\d+), https")


@dataclass(frozen=True)
class Declared:
    name: str
    platform: str
    scope: str = "slot"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The install's CA and the extender's server certificate for 127.0.0.1, as ``fpga-agent certs`` makes them."""
    directory = tmp_path_factory.mktemp("webhook-pki")
    issued = issue(["127.0.0.1"], client_name="fpga-scheduler", days=1)
    for name, data in (("ca.crt", issued.ca_cert), ("tls.crt", issued.server_cert), ("tls.key", issued.server_key)):
        (directory / name).write_bytes(data)
    return directory


def api_server_tls(pki: Path) -> ssl.SSLContext:
    """What the API server does: trust the caBundle (the install's CA), show no client certificate."""
    return ssl.create_default_context(cafile=str(pki / "ca.crt"))


@pytest.fixture
async def webhook_url(pki: Path) -> AsyncIterator[str]:
    cache = StateTable()
    cache.replace_watched([WatchedNode("a", node("a", [slot("s0")], {"aes": PAC}))])
    cache.replace_declared([Declared("pulled-v1", PAC)])
    tls = tls_context(str(pki / "tls.crt"), str(pki / "tls.key"), None)
    server = await start_webhook(build_webhook_app(cache), "127.0.0.1", 0, tls)
    try:
        yield f"https://127.0.0.1:{bound_port(server)}"
    finally:
        await server.cleanup()


async def post(url: str, pki: Path, body: bytes, content_type: str = "application/json") -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        headers = {"Content-Type": content_type}
        async with session.post(url, data=body, headers=headers, ssl=api_server_tls(pki)) as response:
            return response.status, json.loads(await response.read())


@pytest.mark.parametrize(
    ("bitstream", "allowed"),
    [pytest.param("aes", True, id="in-a-catalog"), pytest.param("pulled-v1", True, id="declared"),
     pytest.param("nope", False, id="unknown")],
)  # fmt: skip
async def test_the_api_server_is_answered_without_a_client_certificate(
    webhook_url: str, pki: Path, bitstream: str, allowed: bool
) -> None:
    review = claim_template_review(bitstream)
    status, answer = await post(webhook_url + "/validate", pki, json.dumps(review).encode())
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is allowed
    if not allowed:
        message = response["status"]["message"]
        assert message.startswith("bitstream 'nope' (spec.spec.devices.config[0].opaque.parameters.bitstream)")
        assert "declare it with an FpgaBitstream object" in message


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "status", "error"),
    [
        pytest.param("POST", "/validate", b"{", "application/json", 400, "the body is not JSON", id="malformed"),
        pytest.param("POST", "/validate", b'{"apiVersion": "v1", "kind": "Pod"}', "application/json", 400,
                     "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview", id="not-a-review"),
        pytest.param("POST", "/validate", b"{}", "text/plain", 415, "415 Unsupported Media Type", id="not-json-type"),
        pytest.param("GET", "/validate", b"", "application/json", 405, "405 Method Not Allowed", id="get"),
        pytest.param("POST", "/prioritize", b"{}", "application/json", 404, "404 Not Found", id="no-scoring-here"),
        pytest.param("GET", "/metrics", b"", "application/json", 404, "404 Not Found", id="no-metrics-here"),
    ],
)  # fmt: skip
async def test_anything_but_a_review_gets_a_json_error_naming_the_problem(
    webhook_url: str, pki: Path, method: str, path: str, body: bytes, content_type: str, status: int, error: str
) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, webhook_url + path, data=body, headers={"Content-Type": content_type}, ssl=api_server_tls(pki)
        ) as response,
    ):
        assert response.status == status
        assert (await response.json())["Error"].startswith(error)
    # The server is still there, and still answers reviews.
    status_after, _answer = await post(
        webhook_url + "/validate", pki, json.dumps(claim_template_review("aes")).encode()
    )
    assert status_after == 200


async def test_a_body_over_the_limit_is_refused_before_it_is_read(webhook_url: str, pki: Path) -> None:
    """Content-Length alone says it is too large: the answer comes before any of the body is sent."""
    port = int(webhook_url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=api_server_tls(pki))
    try:
        writer.write(
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {MAX_REVIEW_BYTES + 1}\r\n\r\n".encode()
        )
        async with asyncio.timeout(PROCESS_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
            body = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    assert head.startswith(b"HTTP/1.1 413 ")
    assert json.loads(body)["Error"] == f"the body is larger than {MAX_REVIEW_BYTES} bytes"


def test_the_webhook_port_needs_the_server_certificate() -> None:
    with pytest.raises(ConfigError, match="--webhook-listen: the API server calls admission webhooks over HTTPS"):
        load_config({"webhook_listen": "127.0.0.1:8443"}, env={})


# ---------------------------------------------------------------------- fpga-agent extender, the process


@pytest.fixture
async def extender_with_webhook(
    apiserver: FakeKubeApiServer, tmp_path: Path, pki: Path
) -> AsyncIterator[ExtenderProcess]:
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    publish_state(apiserver, "fpga-1", [slot("s0")], {"aes": PAC})
    apiserver.put_fpga_bitstream({**FPGA_BITSTREAM, "metadata": {"name": "first"}})
    async with running_extender(
        "extender", "--listen", "127.0.0.1:0",
        "--webhook-listen", "127.0.0.1:0", "--tls-cert-file", str(pki / "tls.crt"),
        "--tls-key-file", str(pki / "tls.key"), "--tls-client-ca-file", str(pki / "ca.crt"),
        "--kubeconfig", str(kubeconfig),
    ) as running:  # fmt: skip
        yield running


async def test_the_extender_refuses_what_no_node_has_and_nothing_declares_until_it_is_declared(
    apiserver: FakeKubeApiServer, extender_with_webhook: ExtenderProcess, pki: Path
) -> None:
    port = int((await extender_with_webhook.wait_for_line(WEBHOOK))[1])
    await extender_with_webhook.wait_for_line(re.compile(r"node cache synced: 1 nodes"))
    await extender_with_webhook.wait_for_line(re.compile(r"FpgaBitstream objects listed: 1"))
    await extender_with_webhook.wait_for_line(re.compile(r"declared bitstreams: 1"))
    url = f"https://127.0.0.1:{port}/validate"

    async def allowed(bitstream: str) -> bool:
        status, answer = await post(url, pki, json.dumps(claim_template_review(bitstream)).encode())
        assert status == 200
        result: bool = answer["response"]["allowed"]
        return result

    assert await allowed("aes")  # in fpga-1's catalog
    assert await allowed("first")  # declared
    assert not await allowed("later")
    apiserver.put_fpga_bitstream({**FPGA_BITSTREAM, "metadata": {"name": "later"}})
    await extender_with_webhook.wait_for_line(re.compile(r"declared bitstreams: 2"))
    assert await allowed("later")
    assert extender_with_webhook.process.returncode is None
    async with asyncio.timeout(PROCESS_TIMEOUT_S):
        extender_with_webhook.process.terminate()
        await extender_with_webhook.process.wait()


class _Stalling:
    """Known bitstreams whose lookup holds the webhook's review until the test lets it go (a review that takes
    the webhook a long time: a large object, a slow machine)."""

    def __init__(self) -> None:
        import threading

        self.entered = threading.Event()
        self.release = threading.Event()

    @property
    def bitstreams_listed(self) -> bool:
        return True

    def bitstream_known(self, name: str) -> bool:
        self.entered.set()
        assert self.release.wait(PROCESS_TIMEOUT_S), "never released"
        return True

    def bitstream_scope(self, name: str) -> str | None:
        return None


async def test_a_review_in_progress_never_stalls_a_scheduling_call(pki: Path) -> None:
    """The defect: the webhook shared the scheduler port's event loop, so a review's work held up the scheduler's
    calls (two clients sending 3.7 MiB reviews took another call's p50 from 0.5 ms to 100 ms). Here a review is
    held inside the webhook while kube-scheduler calls prioritize: the call is answered all the same."""
    from agent.extender.scoring import ScoreWeights
    from agent.extender.server import Extender, build_app, start

    known = _Stalling()
    tls = tls_context(str(pki / "tls.crt"), str(pki / "tls.key"), None)
    hook = await start_webhook(build_webhook_app(known), "127.0.0.1", 0, tls)
    table = StateTable()
    table.replace_watched(
        [
            WatchedNode(name, node(name, [slot("s0", bitstream=held)], {"aes": PAC}))
            for name, held in (("a", "aes"), ("b", None))
        ]
    )
    scheduler_port = await start(build_app(Extender(table, ScoreWeights())), "127.0.0.1", 0)
    try:
        review = json.dumps(claim_template_review("aes")).encode()  # the webhook looks "aes" up: it stalls there
        held = asyncio.create_task(post(f"https://127.0.0.1:{bound_port(hook)}/validate", pki, review))
        assert await asyncio.to_thread(known.entered.wait, PROCESS_TIMEOUT_S)
        body = {"Pod": _slot_pod("aes"), "NodeNames": ["a", "b"]}
        async with aiohttp.ClientSession() as session, asyncio.timeout(PROCESS_TIMEOUT_S):
            url = f"http://127.0.0.1:{bound_port(scheduler_port)}/prioritize"
            async with session.post(url, json=body) as response:
                assert response.status == 200
                assert await response.json() == [{"Host": "a", "Score": 3}]  # 10 against 7
        assert not held.done()  # the review is still held: the call did not wait for it
        known.release.set()
        status, answer = await held
        assert status == 200
        assert answer["response"]["allowed"] is True
    finally:
        known.release.set()
        await scheduler_port.cleanup()
        await hook.cleanup()


def _slot_pod(bitstream: str) -> dict[str, Any]:
    slots = {"example.com/fpga-slot": "1"}
    return {
        "metadata": {"name": "p", "namespace": "default", "annotations": {"example.com/fpga-bitstream": bitstream}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": slots, "requests": slots}}]},
    }

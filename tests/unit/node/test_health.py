"""The probes' HTTP endpoint on its own: --health-listen parsing, status codes, bodies, binding."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from aiohttp import web

from agent.config import load_config
from agent.config.values import ListenAddress
from agent.errors import ConfigError
from agent.node.health import HealthServer

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

LOOPBACK = ListenAddress("127.0.0.1", 0)


# ------------------------------------------------------------------ option
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("0.0.0.0:8080", ListenAddress("0.0.0.0", 8080), id="ipv4-any"),
        pytest.param("127.0.0.1:0", ListenAddress("127.0.0.1", 0), id="free-port"),
        pytest.param(":9100", ListenAddress("0.0.0.0", 9100), id="port-only"),
        pytest.param("[::]:8080", ListenAddress("::", 8080), id="ipv6-any"),
        pytest.param("localhost:65535", ListenAddress("localhost", 65535), id="name"),
        pytest.param("", None, id="empty-is-off"),
        pytest.param("  ", None, id="blank-is-off"),
    ],
)
def test_health_listen_parses(raw: str, expected: ListenAddress | None) -> None:
    assert load_config({"node_name": "n", "health_listen": raw}, env={}).health_listen == expected


def test_health_listen_default_and_environment() -> None:
    # Loopback unless told otherwise: the shipped DaemonSet says the node's own address.
    assert load_config({"node_name": "n"}, env={}).health_listen == ListenAddress("127.0.0.1", 8095)
    config = load_config({"node_name": "n"}, env={"FPGA_AGENT_HEALTH_LISTEN": "10.0.0.1:81"})
    assert config.health_listen == ListenAddress("10.0.0.1", 81)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("8080", id="no-colon"),
        pytest.param("host:", id="no-port"),
        pytest.param("host:http", id="named-port"),
        pytest.param("host:65536", id="port-too-large"),
        pytest.param("host:-1", id="negative-port"),
    ],
)
def test_bad_health_listen_names_the_flag(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"^--health-listen: must be HOST:PORT .*\(from flag --health-listen\)$"):
        load_config({"node_name": "n", "health_listen": raw}, env={})


@pytest.mark.parametrize(
    ("address", "text"),
    [
        pytest.param(ListenAddress("0.0.0.0", 8080), "0.0.0.0:8080", id="ipv4"),
        pytest.param(ListenAddress("::", 8080), "[::]:8080", id="ipv6"),
    ],
)
def test_listen_address_prints_as_given(address: ListenAddress, text: str) -> None:
    assert str(address) == text


# ------------------------------------------------------------------ server
class Checks:
    """Answers the server's checks as the test sets them."""

    def __init__(self) -> None:
        self.alive: str | None = None
        self.ready: str | None = "not registered with the kubelet"


@pytest.fixture
def checks() -> Checks:
    return Checks()


@pytest.fixture
async def server(checks: Checks) -> AsyncIterator[HealthServer]:
    health = HealthServer(LOOPBACK, alive=lambda: checks.alive, ready=lambda: checks.ready)
    await health.start()
    try:
        yield health
    finally:
        await health.stop()


async def get(port: int, path: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as response:
        return response.status, response.content_type, await response.text()


@pytest.mark.parametrize(
    ("path", "alive", "ready", "status", "body"),
    [
        pytest.param("/healthz", None, None, 200, "ok\n", id="healthz-ok"),
        pytest.param("/healthz", None, "not registered with the kubelet", 200, "ok\n", id="healthz-ignores-ready"),
        pytest.param("/healthz", "tasks ended: discovery", None, 503, "tasks ended: discovery\n", id="healthz-fails"),
        pytest.param("/readyz", None, None, 200, "ready\n", id="readyz-ok"),
        pytest.param(
            "/readyz",
            None,
            "not registered with the kubelet",
            503,
            "not registered with the kubelet\n",
            id="readyz-not-registered",
        ),
    ],
)
async def test_probe_answers(
    server: HealthServer, checks: Checks, path: str, alive: str | None, ready: str | None, status: int, body: str
) -> None:
    checks.alive, checks.ready = alive, ready
    assert server.port is not None
    assert await get(server.port, path) == (status, "text/plain", body)


async def test_checks_are_asked_on_every_request(server: HealthServer, checks: Checks) -> None:
    assert server.port is not None
    assert (await get(server.port, "/readyz"))[0] == 503
    checks.ready = None
    assert (await get(server.port, "/readyz"))[0] == 200
    checks.ready = "not registered with the kubelet"
    assert (await get(server.port, "/readyz"))[0] == 503


async def test_unknown_path_is_404(server: HealthServer) -> None:
    assert server.port is not None
    assert (await get(server.port, "/metrics"))[0] == 404


async def test_routes_can_join_before_start(checks: Checks) -> None:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="fpga_slots 8\n")

    health = HealthServer(LOOPBACK, alive=lambda: checks.alive, ready=lambda: checks.ready)
    health.add_routes([web.get("/metrics", metrics)])
    port = await health.start()
    try:
        assert await get(port, "/metrics") == (200, "text/plain", "fpga_slots 8\n")
        assert (await get(port, "/healthz"))[0] == 200
        with pytest.raises(RuntimeError, match="before the health server starts"):
            health.add_routes([web.get("/late", metrics)])
    finally:
        await health.stop()


async def test_stop_closes_the_port(checks: Checks) -> None:
    health = HealthServer(LOOPBACK, alive=lambda: checks.alive, ready=lambda: checks.ready)
    port = await health.start()
    assert health.serving.is_set()
    await health.stop()
    assert not health.serving.is_set()
    with pytest.raises(aiohttp.ClientConnectionError):
        await get(port, "/healthz")
    await health.stop()  # a second stop is harmless


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another listener holds."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


async def test_port_in_use_is_a_config_error_naming_the_flag(checks: Checks, taken_port: int) -> None:
    health = HealthServer(ListenAddress("127.0.0.1", taken_port), alive=lambda: None, ready=lambda: None)
    with pytest.raises(ConfigError, match=rf"^--health-listen 127\.0\.0\.1:{taken_port}: cannot listen: "):
        await health.start()
    assert not health.serving.is_set()


async def test_unknown_host_is_a_config_error_naming_the_flag() -> None:
    health = HealthServer(ListenAddress("no-such-host.invalid", 0), alive=lambda: None, ready=lambda: None)
    with pytest.raises(ConfigError, match=r"^--health-listen no-such-host\.invalid:0: unknown host"):
        await health.start()


async def test_a_shared_endpoint_waits_for_a_port_another_process_holds_without_sharing() -> None:
    """The old agent of an update, of a version that did not share its port, holds it until it stops."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        server = HealthServer(ListenAddress("127.0.0.1", port), alive=lambda: None, ready=lambda: None, shared=True)
        waiting = asyncio.create_task(server.start_when_free(retry_s=0.05))
        await asyncio.sleep(0.2)
        assert not server.serving.is_set()
    async with asyncio.timeout(5):
        await waiting
    assert server.serving.is_set()
    assert server.port == port
    await server.stop()

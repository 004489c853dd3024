"""The plugin socket's life: serve, register, notice kubelet restarts, re-register, stop.

Everything goes over real unix sockets in a temporary device-plugin directory,
with the kubelet stand-in doing what the kubelet does to that directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import grpc
import pytest

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp
from agent._proto.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from agent.app import Agent
from agent.config import Config
from agent.deviceplugin import constants
from tests.fakes import RESOURCE_NAME, AgentHarness, KubeletStandIn, close_stream, test_config

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

WAIT_S = 5.0
SLOT_COUNT = 8
ENDPOINT = "fpga-slot.sock"


# ---------------------------------------------------------------- helpers
class ScriptedKubelet(KubeletStandIn):
    """The stand-in, refusing the first ``refusals`` registrations and recording every attempt."""

    def __init__(self, plugin_dir: Path, pod_resources_socket: Path, refusals: int = 0) -> None:
        super().__init__(plugin_dir, pod_resources_socket)
        self.refusals = refusals
        #: per Register call: the plugin socket's mode when it arrived (None: absent), and the error
        self.attempts: list[tuple[int | None, str | None]] = []

    async def handle_register(self, request: dp.RegisterRequest) -> str | None:
        try:
            mode: int | None = stat.S_IMODE((self.plugin_dir / request.endpoint).stat().st_mode)
        except FileNotFoundError:
            mode = None
        if self.refusals > 0:
            self.refusals -= 1
            error: str | None = "refused by the test"
        else:
            error = await super().handle_register(request)
        self.attempts.append((mode, error))
        self._notify()
        return error


class LogWatch(logging.Handler):
    """Collects records of one logger and wakes waiters (records are emitted on the loop's thread)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self._changed.set()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()


@contextlib.contextmanager
def log_watch(name: str) -> Iterator[LogWatch]:
    logger = logging.getLogger(name)
    handler = LogWatch()
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def registration_failures(watch: LogWatch) -> list[float]:
    """The backoff delays the agent announced after failed registrations."""
    return [
        float(record.args[0])  # type: ignore[index]
        for record in watch.records
        if record.getMessage().startswith("registration failed")
    ]


@contextlib.asynccontextmanager
async def agent_running(config: Config) -> AsyncIterator[tuple[Agent, asyncio.Event, asyncio.Task[None]]]:
    """A real agent, stopped and awaited on the way out."""
    agent = Agent(config)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop), name="agent-under-test")
    try:
        yield agent, stop, task
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await task


@contextlib.asynccontextmanager
async def kubelet_running(kubelet: KubeletStandIn) -> AsyncIterator[KubeletStandIn]:
    await kubelet.start()
    try:
        yield kubelet
    finally:
        await kubelet.stop()


def path_exists(path: Path) -> bool:
    return os.path.lexists(path)


def is_private_socket(path: Path) -> bool:
    st = path.stat()
    return stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600


Stream = grpc.aio.UnaryStreamCall[dp.Empty, dp.ListAndWatchResponse]


@contextlib.asynccontextmanager
async def own_stream(harness: AgentHarness) -> AsyncIterator[Stream]:
    """A ListAndWatch stream of our own on the agent's current server, first list already read."""
    async with grpc.aio.insecure_channel(f"unix://{harness.socket}") as channel:
        call = dp_grpc.DevicePluginStub(channel).ListAndWatch(dp.Empty())
        async with asyncio.timeout(WAIT_S):
            assert isinstance(await call.read(), dp.ListAndWatchResponse)
        try:
            yield call
        finally:
            call.cancel()


async def ended_by_plugin(call: Stream) -> bool:
    """The stream ended from the plugin's side (its server was stopped), not left open: cleanly (EOF, OK), or
    with the connection gone under the client. The plugin ends its streams and then stops its server; on a busy
    machine gRPC's client can still be writing to the closed connection when the trailers arrive, and then
    reports the end as UNAVAILABLE "Stream removed" (seen once in a loaded CI run). A stream that stays open
    times out here."""
    async with asyncio.timeout(WAIT_S):
        try:
            return await call.read() is grpc.aio.EOF and await call.code() is grpc.StatusCode.OK
        except grpc.aio.AioRpcError as exc:
            return exc.code() is grpc.StatusCode.UNAVAILABLE and "Stream removed" in (exc.details() or "")


def use_long_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retry delays far beyond any test timeout: only an event can make the agent register again."""
    monkeypatch.setattr(constants, "REGISTER_BACKOFF_MIN_S", 3600.0)
    monkeypatch.setattr(constants, "REGISTER_BACKOFF_MAX_S", 3600.0)


async def wait_all_healthy(kubelet: KubeletStandIn, registrations: int) -> None:
    """Wait for the ``registrations``-th connection to list every slot Healthy."""

    def ready() -> bool:
        conn = kubelet.plugins.get(RESOURCE_NAME)
        return len(kubelet.registrations) >= registrations and conn is not None and len(conn.healthy()) == SLOT_COUNT

    await kubelet.wait_for(ready, WAIT_S)


async def wait_registered(agent: Agent) -> None:
    """Wait until the agent itself has seen its Register call succeed."""
    async with asyncio.timeout(WAIT_S):
        await agent.lifecycle.registered.wait()


# ------------------------------------------------------------------- serving
async def restart_kubelet(harness: AgentHarness) -> None:
    await harness.kubelet.restart()
    await wait_all_healthy(harness.kubelet, 2)


async def delete_own_socket(harness: AgentHarness) -> None:
    harness.socket.unlink()
    await wait_all_healthy(harness.kubelet, 2)


async def nothing(harness: AgentHarness) -> None:
    return None


@pytest.mark.parametrize(
    "event",
    [nothing, restart_kubelet, delete_own_socket],
    ids=["first-start", "after-kubelet-restart", "after-own-socket-deleted"],
)
async def test_socket_is_private(harness: AgentHarness, event: Callable[[AgentHarness], Awaitable[None]]) -> None:
    await event(harness)
    assert is_private_socket(harness.socket)


def stale_regular_file(path: Path) -> None:
    path.write_text("left over")


def stale_socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))  # bound, never listening, closed: what a crashed agent leaves


@pytest.mark.parametrize("leave", [stale_regular_file, stale_socket], ids=["regular-file", "dead-socket"])
async def test_stale_socket_file_is_replaced(sock_dir: Path, leave: Callable[[Path], None]) -> None:
    config = test_config(sock_dir)
    config.device_plugin_dir.mkdir(parents=True)
    stale = config.device_plugin_dir / ENDPOINT
    leave(stale)
    stale.chmod(0o644)
    async with AgentHarness.running(sock_dir) as harness:
        # The stand-in dialled the path before accepting the registration: a live server is there.
        assert len(harness.kubelet.registrations) == 1
        assert is_private_socket(harness.socket)
        assert len(harness.conn.healthy()) == SLOT_COUNT


async def test_registers_only_once_own_server_answers(sock_dir: Path) -> None:
    config = test_config(sock_dir)
    kubelet = ScriptedKubelet(config.device_plugin_dir, config.pod_resources_socket)
    async with kubelet_running(kubelet), agent_running(config):
        await wait_all_healthy(kubelet, 1)
        # The first Register found the plugin socket (0600) and the stand-in's dial succeeded.
        assert kubelet.attempts == [(0o600, None)]
        assert len(kubelet.registrations) == 1


@pytest.mark.parametrize("refusals", [1, 3], ids=["refused-once", "refused-thrice"])
async def test_refused_registration_is_retried(sock_dir: Path, refusals: int) -> None:
    config = test_config(sock_dir)
    kubelet = ScriptedKubelet(config.device_plugin_dir, config.pod_resources_socket, refusals=refusals)
    with log_watch("agent.deviceplugin.lifecycle") as watch:
        async with kubelet_running(kubelet), agent_running(config) as (agent, _, _):
            await wait_all_healthy(kubelet, 1)
            await wait_registered(agent)
            assert [error for _, error in kubelet.attempts] == ["refused by the test"] * refusals + [None]
            assert len(kubelet.registrations) == 1
            assert agent.lifecycle.registrations == 1
            delays = registration_failures(watch)
            assert len(delays) == refusals
            assert delays == sorted(delays)


# ---------------------------------------------------------- kubelet restarts
async def test_kubelet_restart_serves_new_socket_and_registers_again(harness: AgentHarness) -> None:
    kubelet, old_conn = harness.kubelet, harness.conn
    async with own_stream(harness) as stream:
        started = time.monotonic()
        await kubelet.restart()
        await wait_all_healthy(kubelet, 2)
        elapsed_ms = (time.monotonic() - started) * 1000
        print(f"\nkubelet restart -> re-registered, all {SLOT_COUNT} slots Healthy: {elapsed_ms:.1f} ms")
        assert await ended_by_plugin(stream)  # the old server was stopped

    assert len(kubelet.registrations) == 2
    assert harness.conn is not old_conn
    assert old_conn.stream_ended.is_set()
    assert sorted(harness.conn.healthy()) == sorted(harness.conn.devices)
    assert is_private_socket(harness.socket)
    admitted = await kubelet.admit("default", "after-restart", "main", RESOURCE_NAME, 2)
    assert len(admitted.device_ids) == 2


async def test_restarts_in_a_row_never_register_a_socket_that_is_gone(harness: AgentHarness) -> None:
    """The kubelet deletes the plugin sockets while the agent reacts to its closed stream: the agent
    serves again before it registers, so no registration names a socket the kubelet cannot dial."""
    kubelet = harness.kubelet
    with log_watch("agent.deviceplugin.lifecycle") as watch:
        for restart in range(20):
            await kubelet.restart()
            await wait_all_healthy(kubelet, restart + 2)
    undialled = [r.getMessage() for r in watch.records if "cannot dial plugin endpoint" in r.getMessage()]
    assert undialled == []
    assert len(kubelet.registrations) == 21


async def test_stream_closed_by_kubelet_leads_to_new_registration(harness: AgentHarness) -> None:
    kubelet, old_conn = harness.kubelet, harness.conn
    await close_stream(kubelet, RESOURCE_NAME)
    # The kubelet's view of the old connection: every device Unhealthy.
    assert old_conn.stream_ended.is_set()
    assert {d.health for d in old_conn.devices.values()} == {"Unhealthy"}
    assert len(old_conn.devices) == SLOT_COUNT

    await wait_all_healthy(kubelet, 2)
    assert len(kubelet.registrations) == 2
    assert harness.conn is not old_conn


async def test_new_kubelet_sock_alone_leads_to_new_registration(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Our own stream keeps a ListAndWatch of this registration open, so the agent does not take
    # the kubelet's closed stream for a restart, and a failed attempt would wait an hour: only
    # the new kubelet.sock can make it register again.
    use_long_backoff(monkeypatch)
    async with AgentHarness.running(sock_dir) as harness, own_stream(harness) as stream:
        kubelet = harness.kubelet
        await kubelet.stop()
        (kubelet.plugin_dir / "kubelet.sock").unlink(missing_ok=True)
        await kubelet.start()
        await wait_all_healthy(kubelet, 2)
        assert len(kubelet.registrations) == 2
        # Our socket was left alone, so the agent kept its server: our stream still gets updates.
        harness.fabric.set_health("simcard1", "slot0", False, "after re-registration")
        async with asyncio.timeout(WAIT_S):
            update = await stream.read()
        assert isinstance(update, dp.ListAndWatchResponse)
        assert {d.ID: d.health for d in update.devices}["simcard1-slot0"] == "Unhealthy"


async def test_a_socket_in_place_whose_server_died_is_served_again_before_registering(harness: AgentHarness) -> None:
    """Registration always follows a check that our socket is served, not only that it is in place."""
    kubelet, lifecycle = harness.kubelet, harness.agent.lifecycle
    server = lifecycle._server
    assert server is not None
    await server.stop(0)  # the server is gone; the socket file (renamed into place) stays
    assert stat.S_ISSOCK(harness.socket.lstat().st_mode)
    await close_stream(kubelet, RESOURCE_NAME)  # the kubelet wants a new registration
    await wait_all_healthy(kubelet, 2)
    assert is_private_socket(harness.socket)
    admitted = await kubelet.admit("default", "after-revival", "main", RESOURCE_NAME, 1)
    assert len(admitted.device_ids) == 1


async def test_own_socket_deleted_serves_again_and_registers_again(harness: AgentHarness) -> None:
    kubelet, old_conn = harness.kubelet, harness.conn
    async with own_stream(harness) as stream:
        harness.socket.unlink()
        await wait_all_healthy(kubelet, 2)
        assert await ended_by_plugin(stream)  # the old server was stopped
    assert len(kubelet.registrations) == 2
    assert harness.conn is not old_conn
    assert is_private_socket(harness.socket)


@pytest.mark.parametrize(
    ("long_backoff", "failures_first"), [(False, 3), (True, 1)], ids=["default-backoff", "long-backoff"]
)
async def test_agent_started_before_kubelet_registers_once_it_appears(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch, long_backoff: bool, failures_first: int
) -> None:
    if long_backoff:
        use_long_backoff(monkeypatch)
    config = test_config(sock_dir)
    assert not (config.device_plugin_dir / "kubelet.sock").exists()
    with log_watch("agent.deviceplugin.lifecycle") as watch:
        async with agent_running(config) as (agent, _, task):
            await watch.wait_for(lambda: len(registration_failures(watch)) >= failures_first)
            delays = registration_failures(watch)
            assert delays[:failures_first] == [
                min(constants.REGISTER_BACKOFF_MIN_S * 2**n, constants.REGISTER_BACKOFF_MAX_S)
                for n in range(failures_first)
            ]
            assert not task.done()
            assert is_private_socket(config.device_plugin_dir / ENDPOINT)  # serving while it retries

            kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket)
            async with kubelet_running(kubelet):
                await wait_all_healthy(kubelet, 1)
                await wait_registered(agent)
                assert len(kubelet.registrations) == 1
                assert agent.lifecycle.registrations == 1


# ----------------------------------------------------------------------- stop
async def test_stop_removes_socket_and_ends_streams(harness: AgentHarness) -> None:
    conn = harness.conn
    async with own_stream(harness) as stream:
        harness.stop.set()
        async with asyncio.timeout(10):
            await harness.task
        assert harness.task.exception() is None
        assert await ended_by_plugin(stream)
    assert not path_exists(harness.socket)
    await harness.kubelet.wait_for(conn.stream_ended.is_set, WAIT_S)
    assert not harness.agent.lifecycle.registered.is_set()


# ------------------------------------------------------------ serving fails
async def test_serving_failure_is_retried_not_fatal(sock_dir: Path) -> None:
    config = test_config(sock_dir)
    blocker = config.device_plugin_dir / ENDPOINT
    (blocker / "in-the-way").mkdir(parents=True)  # a directory where our socket must go
    kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket)
    with log_watch("agent.deviceplugin.lifecycle") as watch:
        async with kubelet_running(kubelet), agent_running(config) as (agent, _, task):
            await watch.wait_for(lambda: len(registration_failures(watch)) >= 2)
            assert not task.done()
            assert kubelet.registrations == []
            assert any(f"cannot serve {blocker}" in r.getMessage() for r in watch.records)

            (blocker / "in-the-way").rmdir()
            blocker.rmdir()
            await wait_all_healthy(kubelet, 1)
            await wait_registered(agent)
            assert is_private_socket(blocker)

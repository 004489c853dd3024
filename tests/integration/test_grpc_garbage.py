"""Bytes that decode as no request, sent over the real unix sockets of the agent's gRPC servers (the device
plugin's and the DRA plugin's, all grpc.aio): each call gets gRPC's error status, and the log
(the agent's own handler, text format) gets one bounded line per call instead of gRPC's traceback.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agent.dra.server import DraPluginServer, PluginSockets
from agent.output.logs import log_handler
from tests.fakes import AgentHarness, FakeClaimPreparer, short_tmpdir

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

GARBAGE = [b"\xff\xff\xff\xff\xff\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 5000, b"\x08" + b"\x80" * 20]
CALLS = 30
#: Longest line a refused request may add to the log (time, level, logger, the method and the parser's words).
MAX_LINE_CHARS = 400


@pytest.fixture
def agent_log() -> Iterator[io.StringIO]:
    """What the agent's log handler writes, for the duration of the test."""
    buffer = io.StringIO()
    handler = log_handler(buffer, "text")
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def grpc_lines(log: io.StringIO) -> list[str]:
    return [line for line in log.getvalue().splitlines() if " grpc." in line or not line.startswith("20")]


async def send_garbage(socket: Path, methods: list[str]) -> list[grpc.StatusCode]:
    codes = []
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        for index in range(CALLS):
            call = channel.unary_unary(methods[index % len(methods)])
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call(GARBAGE[index % len(GARBAGE)], timeout=10)
            codes.append(refused.value.code())
    return codes


async def settled(log: io.StringIO, lines: int) -> list[str]:
    """The grpc lines once ``lines`` of them are written (a threaded server may log just after it answered)."""
    for _ in range(200):
        if len(grpc_lines(log)) >= lines:
            break
        await asyncio.sleep(0.01)
    return grpc_lines(log)


def assert_bounded(lines: list[str], methods: list[str]) -> None:
    assert len(lines) == CALLS, lines[:5]
    for line in lines:
        assert len(line) <= MAX_LINE_CHARS, line
        assert "WARNING" in line
        assert "refused an undecodable request" in line
        assert "Traceback" not in line
    assert any(method in "".join(lines) for method in methods)


async def test_the_device_plugin_logs_one_bounded_line_per_undecodable_request(agent_log: io.StringIO) -> None:
    methods = ["/v1beta1.DevicePlugin/Allocate", "/v1beta1.DevicePlugin/GetPreferredAllocation"]
    with short_tmpdir() as root:
        async with AgentHarness.running(root, sim_cards=1, sim_slots_per_card=2) as harness:
            agent_log.truncate(0)
            agent_log.seek(0)
            codes = await send_garbage(harness.socket, methods)
            lines = await settled(agent_log, CALLS)
            assert harness.conn.devices  # still serving
    assert set(codes) == {grpc.StatusCode.UNKNOWN}
    assert_bounded(lines, methods)


async def test_the_dra_plugin_logs_one_bounded_line_per_undecodable_request(agent_log: io.StringIO) -> None:
    with short_tmpdir() as root:
        sockets = PluginSockets(registry_dir=root / "plugins_registry", plugins_dir=root / "plugins")
        server = DraPluginServer(FakeClaimPreparer(), sockets)
        await server.start()
        try:
            agent_log.truncate(0)
            agent_log.seek(0)
            dra = [
                "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
                "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
            ]
            codes = await send_garbage(sockets.dra, dra)
            codes += await send_garbage(
                sockets.registration, ["/pluginregistration.Registration/NotifyRegistrationStatus"]
            )
            lines = await settled(agent_log, 2 * CALLS)
        finally:
            await server.stop()
    assert set(codes) == {grpc.StatusCode.UNKNOWN}  # as the device plugin answers: both servers are grpc.aio
    assert len(lines) == 2 * CALLS
    assert_bounded(lines[:CALLS], ["NodePrepareResourcesRequest", "NodeUnprepareResourcesRequest"])
    assert_bounded(lines[CALLS:], ["RegistrationStatus"])

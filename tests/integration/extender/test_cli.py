"""``fpga-agent extender`` as a process: reads Nodes through a kubeconfig, answers HTTP, stops on SIGTERM."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import uvloop

from tests.fakeapi import FakeKubeApiServer
from tests.fakes import run_fpga_agent
from tests.integration.extender.conftest import (
    FPGA_BITSTREAM,
    LISTENING,
    PROCESS_TIMEOUT_S,
    ExtenderProcess,
    extender_env,
    pod,
    publish_state,
    running_extender,
)
from tests.unit.extender.factories import CATALOG, PAC, slot


@pytest.fixture
async def extender_process(apiserver: FakeKubeApiServer, tmp_path: Path) -> AsyncIterator[ExtenderProcess]:
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    publish_state(apiserver, "fpga-1", [slot("s0", bitstream="aes")])
    publish_state(apiserver, "fpga-2", [slot("s0")])
    apiserver.add_node("other")  # no agent: no published state (and no FpgaNodeState)
    async with running_extender(
        "extender", "--listen", "127.0.0.1:0", "--kubeconfig", str(kubeconfig),
        "--score-weights", "empty=6", "--answer-limit", "1", "--event-loop", running_loop(),
    ) as running:  # fmt: skip
        yield running


def running_loop() -> str:
    """The event loop this test runs on, as ``--event-loop`` names it: the process is served on the same one."""
    return "uvloop" if isinstance(asyncio.get_running_loop(), uvloop.Loop) else "asyncio"


async def test_serves_from_the_watched_nodes_and_stops_on_sigterm(extender_process: ExtenderProcess) -> None:
    port = int((await extender_process.wait_for_line(LISTENING))[1])
    served = rf"listening on .*, http, {running_loop()} event loop$"
    await extender_process.wait_for_line(re.compile(served))
    await extender_process.wait_for_line(re.compile(r"node cache synced: 2 nodes"))
    url = f"http://127.0.0.1:{port}"
    body = {"Pod": pod("aes"), "Nodes": None, "NodeNames": ["fpga-1", "fpga-2", "other"]}
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/healthz") as response:
            assert (response.status, await response.text()) == (200, "ok\n")
        async with session.post(url + "/prioritize", json=body) as response:
            assert response.status == 200
            # 10, 6 and "other" (no FpgaNodeState: neutral, 5), shifted so that the lowest is 0 and left out;
            # one listed at most
            assert await response.json() == [{"Host": "fpga-1", "Score": 5}]

    extender_process.process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(PROCESS_TIMEOUT_S):
        code = await extender_process.process.wait()
    assert code == 0
    assert extender_process.process.stderr is not None
    rest = (await extender_process.process.stderr.read()).decode()
    assert "scheduler extender stopped" in rest
    assert "Traceback" not in "".join(extender_process.log) + rest


async def test_a_bitstream_declared_in_the_cluster_is_pullable_by_nodes_without_the_file(
    apiserver: FakeKubeApiServer, extender_process: ExtenderProcess
) -> None:
    """A node that lacks the file of a declared bitstream can still run the pod (its agent pulls the file):
    the filter passes it, and prioritize puts it one point below a node that has the file."""
    publish_state(apiserver, "fpga-3", [slot("s0")], {**CATALOG, "new": PAC})
    port = int((await extender_process.wait_for_line(LISTENING))[1])
    await extender_process.wait_for_line(re.compile(r"node cache synced: 3 nodes"))
    url = f"http://127.0.0.1:{port}"
    body = {"Pod": pod("new"), "Nodes": None, "NodeNames": ["fpga-1", "fpga-2", "fpga-3"]}
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/filter", json=body) as response:
            assert (await response.json())["NodeNames"] == ["fpga-3"]  # only its catalog has "new"
        apiserver.put_fpga_bitstream({**FPGA_BITSTREAM, "metadata": {"name": "new"}})
        await extender_process.wait_for_line(re.compile(r"declared bitstreams: 1"))
        async with session.post(url + "/filter", json=body) as response:
            assert (await response.json())["NodeNames"] == ["fpga-1", "fpga-2", "fpga-3"]
        async with session.post(url + "/prioritize", json=body) as response:
            # fpga-3 has the file and an empty slot (6); fpga-2 has an empty slot but must pull (5); fpga-1
            # must pull and overwrite aes, which no pod has asked for (6 - 1 = 5): shifted, the floor left out
            assert await response.json() == [{"Host": "fpga-3", "Score": 1}]


def test_without_api_access_it_says_so_and_exits_1(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agent.cli.main", "extender", "--listen", "127.0.0.1:0"],
        env=extender_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 1
    assert "no API server access" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--listen", "nowhere"], "--listen: must be HOST:PORT", id="listen"),
        pytest.param(
            ["--score-weights", "loaded=99"], "--score-weights: loaded must be an integer from 0 to 10", id="w"
        ),
        pytest.param(["--event-loop", "tokio"], "--event-loop: must be one of uvloop, asyncio, got 'tokio'", id="loop"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(tmp_path: Path, args: list[str], message: str) -> None:
    result = run_fpga_agent(tmp_path, extender_env(), "extender", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_taken_probe_port_is_one_line_naming_the_flag(apiserver: FakeKubeApiServer, tmp_path: Path) -> None:
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_fpga_agent(
            tmp_path, extender_env(), "extender", "--listen", "127.0.0.1:0", "--probe-listen", f"127.0.0.1:{port}",
            "--kubeconfig", str(kubeconfig),
        )  # fmt: skip
    assert result.returncode == 2  # a configuration error: the address given cannot be used
    assert f"--probe-listen 127.0.0.1:{port}: cannot listen: Address already in use" in result.stderr
    assert "Traceback" not in result.stderr

"""The console entry point as an operator runs it: real processes, real sockets, real signals."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import RESOURCE_NAME, KubeletStandIn, run_fpga_agent

PROCESS_TIMEOUT_S = 60.0
ALL_SLOTS = [f"simcard{c}-slot{s}" for c in range(2) for s in range(4)]


def agent_env(root: Path) -> dict[str, str]:
    """The process environment with every FPGA_AGENT_* pointing into ``root``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("FPGA_AGENT_")}
    env.update(
        FPGA_AGENT_BACKEND="sim",
        FPGA_AGENT_DEVICE_PLUGIN_DIR=str(root / "device-plugins"),
        FPGA_AGENT_POD_RESOURCES_SOCKET=str(root / "pod-resources" / "kubelet.sock"),
        FPGA_AGENT_STATE_DIR=str(root / "state"),
        FPGA_AGENT_SIM_CARDS="2",
        FPGA_AGENT_SIM_SLOTS_PER_CARD="4",
        FPGA_AGENT_SIM_PROGRAM_MS="10",
        FPGA_AGENT_SIM_DEVICE_NODES="file",
        FPGA_AGENT_NODE_NAME="cli-test-node",
        FPGA_AGENT_LOG_LEVEL="info",
        FPGA_AGENT_HEALTH_LISTEN="127.0.0.1:0",
    )
    return env


def fpga_agent(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_fpga_agent(root, agent_env(root) if env is None else env, *args)


def lexists(path: Path) -> bool:
    return os.path.lexists(path)


def is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except FileNotFoundError:
        return False


# ------------------------------------------------------------------- discover
def test_discover_prints_a_table_of_every_slot(sock_dir: Path) -> None:
    result = fpga_agent(sock_dir, "discover")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["ID", "CARD", "NUMA", "DEVICE", "PLATFORM", "LOADED", "HEALTH"]
    assert [row.split()[0] for row in rows] == ALL_SLOTS
    dev_dir = sock_dir / "state" / "sim-dev"
    for row in rows:
        slot_id, card, numa, device, platform, loaded, health = row.split()
        assert slot_id.startswith(f"{card}-")
        assert platform == "sim-pr-v1"
        assert numa == ("0" if card == "simcard0" else "1")
        assert device == str(dev_dir / f"fpga-sim-{slot_id}")
        assert (loaded, health) == ("-", "Healthy")


def test_discover_shows_what_the_cards_hold(sock_dir: Path) -> None:
    dev_dir = sock_dir / "state" / "sim-dev"
    dev_dir.mkdir(parents=True)
    (dev_dir / "fabric.json").write_text(json.dumps({"version": 1, "loaded": {"simcard1/slot2": "aes-v1"}}))
    result = fpga_agent(sock_dir, "discover")
    assert result.returncode == 0, result.stderr
    loaded = {row.split()[0]: row.split()[5] for row in result.stdout.splitlines()[1:]}
    assert loaded.pop("simcard1-slot2") == "aes-v1"
    assert set(loaded.values()) == {"-"}


def test_discover_json(sock_dir: Path) -> None:
    result = fpga_agent(sock_dir, "discover", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["backend"] == "sim"
    assert report["skipped"] == []
    slots = report["slots"]
    assert [slot["id"] for slot in slots] == ALL_SLOTS
    for slot in slots:
        assert {"id", "card", "numa", "device", "loaded", "health"} <= set(slot)
        assert slot["card"] == slot["id"].rsplit("-", 1)[0]
        assert slot["numa"] == (0 if slot["card"] == "simcard0" else 1)
        assert slot["device"] == str(sock_dir / "state" / "sim-dev" / f"fpga-sim-{slot['id']}")
        assert Path(slot["device"]).exists()
        assert slot["loaded"] is None
        assert slot["health"] == "Healthy"


def test_discover_flags_override_the_environment(sock_dir: Path) -> None:
    result = fpga_agent(sock_dir, "discover", "--json", "--sim-cards", "1", "--sim-slots-per-card", "3")
    assert result.returncode == 0, result.stderr
    assert [slot["id"] for slot in json.loads(result.stdout)["slots"]] == [
        "simcard0-slot0",
        "simcard0-slot1",
        "simcard0-slot2",
    ]


def test_sim_slots_are_character_devices_by_default(sock_dir: Path) -> None:
    """As the DaemonSet runs it (root): device nodes; without root: a start-up error that says what to do."""
    env = {key: value for key, value in agent_env(sock_dir).items() if key != "FPGA_AGENT_SIM_DEVICE_NODES"}
    result = run_fpga_agent(sock_dir, env, "discover", "--json")
    if os.geteuid() != 0:
        assert result.returncode == 1, result
        assert "--sim-device-nodes char" in result.stderr, result.stderr
        assert "needs root" in result.stderr, result.stderr
        return
    assert result.returncode == 0, result.stderr
    for slot in json.loads(result.stdout)["slots"]:
        assert stat.S_ISCHR(os.stat(slot["device"]).st_mode), slot


def test_discover_on_a_node_without_cards(sock_dir: Path) -> None:
    result = fpga_agent(sock_dir, "discover", "--sim-cards", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["ID  CARD  NUMA  DEVICE  PLATFORM  LOADED  HEALTH"]


@pytest.mark.parametrize(
    ("args", "env_overrides", "expected"),
    [
        pytest.param(["--sim-cards", "x"], {}, ["--sim-cards", "must be an integer", "flag --sim-cards"], id="flag"),
        pytest.param(
            [],
            {"FPGA_AGENT_SIM_CARDS": "x"},
            ["--sim-cards", "must be an integer", "FPGA_AGENT_SIM_CARDS"],
            id="env",
        ),
        pytest.param(["--log-format", "xml"], {}, ["--log-format", "must be one of text, json"], id="choice"),
        pytest.param(["--no-such-flag"], {}, ["unrecognized arguments: --no-such-flag"], id="unknown-flag"),
    ],
)
def test_bad_configuration_exits_2_naming_the_flag(
    sock_dir: Path, args: list[str], env_overrides: dict[str, str], expected: list[str]
) -> None:
    env = agent_env(sock_dir) | env_overrides
    result = fpga_agent(sock_dir, "discover", *args, env=env)
    assert result.returncode == 2
    assert result.stdout == ""
    for part in expected:
        assert part in result.stderr
    assert "Traceback" not in result.stderr
    assert not (sock_dir / "state").exists()  # nothing was started


# ----------------------------------------------------------------------- demo
def test_demo_narrates_the_lifecycle_and_cleans_up(sock_dir: Path) -> None:
    tmp = sock_dir / "tmp"
    tmp.mkdir()
    env = agent_env(sock_dir) | {"TMPDIR": str(tmp)}
    result = fpga_agent(sock_dir, "demo", env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    steps = [
        "registered after",
        "ListAndWatch",
        "GetPreferredAllocation, Allocate, PreStartContainer",
        "held by default/fpga-inference/main",
        "Allocate(['no-such-slot']) -> INVALID_ARGUMENT",
        "The kubelet restarts",
        "agent registered again",
        "kubelet sees 8 healthy slots again",
        "Unhealthy at the kubelet",
        "Healthy again",
        "fpga-slot.sock exists: False",
        "== done",
    ]
    positions = [out.find(step) for step in steps]
    assert all(p >= 0 for p in positions), [s for s, p in zip(steps, positions, strict=True) if p < 0]
    assert positions == sorted(positions)
    assert "Traceback" not in result.stderr
    assert list(tmp.iterdir()) == []  # the demo's temporary directory is gone
    assert not (sock_dir / "device-plugins").exists()  # the demo does not use the configured paths


# ------------------------------------------------------------------------ run
async def read_until(stream: asyncio.StreamReader, marker: bytes, seen: bytearray) -> None:
    """Read ``stream`` into ``seen`` until ``marker`` shows up."""
    while marker not in seen:
        chunk = await stream.read(4096)
        if not chunk:
            raise AssertionError(f"stream ended before {marker!r}:\n{seen.decode(errors='replace')}")
        seen += chunk


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_run_registers_then_stops_cleanly_on_signal(sock_dir: Path, signum: signal.Signals) -> None:
    plugin_dir = sock_dir / "device-plugins"
    pod_resources = sock_dir / "pod-resources" / "kubelet.sock"
    kubelet = KubeletStandIn(plugin_dir, pod_resources)
    await kubelet.start()
    env = {key: value for key, value in agent_env(sock_dir).items() if not key.startswith("FPGA_AGENT_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent.cli.main",
        "run",
        "--backend",
        "sim",
        "--device-plugin-dir",
        str(plugin_dir),
        "--pod-resources-socket",
        str(pod_resources),
        "--state-dir",
        str(sock_dir / "state"),
        "--node-name",
        "cli-test-node",
        "--health-listen",
        "127.0.0.1:0",
        env=env,
        cwd=sock_dir,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    log = asyncio.create_task(proc.stderr.read(), name="agent-stderr")  # never let the pipe fill up
    try:
        await kubelet.wait_registered(1, PROCESS_TIMEOUT_S)
        request = kubelet.registrations[0]
        assert (request.resource_name, request.endpoint) == (RESOURCE_NAME, "fpga-slot.sock")
        conn = kubelet.plugins[RESOURCE_NAME]
        await kubelet.wait_for(lambda: conn.healthy() == ALL_SLOTS, PROCESS_TIMEOUT_S)
        socket = plugin_dir / "fpga-slot.sock"
        assert is_socket(socket)

        proc.send_signal(signum)
        async with asyncio.timeout(PROCESS_TIMEOUT_S):
            returncode = await proc.wait()
            output = (await log).decode(errors="replace")
        assert returncode == 0, output
        assert not lexists(socket)
        await kubelet.wait_for(conn.stream_ended.is_set, PROCESS_TIMEOUT_S)
        assert f"removed socket {socket}" in output
        assert "agent stopped" in output
        assert "Traceback" not in output
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if not log.done():
            log.cancel()
        await asyncio.wait({log})
        await kubelet.stop()


async def test_run_without_a_kubelet_keeps_serving_and_stops_on_sigterm(sock_dir: Path) -> None:
    socket = sock_dir / "device-plugins" / "fpga-slot.sock"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent.cli.main",
        "run",
        env=agent_env(sock_dir),
        cwd=sock_dir,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    log = bytearray()
    try:
        async with asyncio.timeout(PROCESS_TIMEOUT_S):
            await read_until(proc.stderr, b"registration failed, retrying", log)
        assert is_socket(socket)
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(PROCESS_TIMEOUT_S):
            log += await proc.stderr.read()
            returncode = await proc.wait()
        assert returncode == 0, log.decode(errors="replace")
        assert not lexists(socket)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

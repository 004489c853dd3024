"""gRPC core's own lines (its C library writes them to stderr) stay out of the agent's output."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from agent.cli import quiet_grpc_core
from tests.fakes import run_fpga_agent

#: A line of gRPC core: severity, date, time, thread, source file and line (``I1206 04:43:28.955938 11070 x.cc:1]``).
CORE_LINE = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ [\w./-]+\.cc:\d+\]", re.MULTILINE)


@pytest.mark.parametrize("verbosity", ["INFO", "DEBUG", None])
def test_the_demo_prints_no_grpc_core_lines_whatever_grpc_verbosity_says(sock_dir: Path, verbosity: str | None) -> None:
    """The device-plugin demo restarts its kubelet stand-in (gRPC core says "Got goaway" at INFO)."""
    (sock_dir / "tmp").mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FPGA_AGENT_", "GRPC_"))}
    env.update(FPGA_AGENT_SIM_PROGRAM_MS="10", TMPDIR=str(sock_dir / "tmp"))
    if verbosity is not None:
        env["GRPC_VERBOSITY"] = verbosity
    result = run_fpga_agent(sock_dir, env, "demo")
    assert result.returncode == 0, result.stderr
    assert "The kubelet restarts" in result.stdout
    assert CORE_LINE.findall(result.stdout + result.stderr) == []


def test_grpc_tracing_asked_for_keeps_the_environments_verbosity() -> None:
    traced = {"GRPC_TRACE": "http", "GRPC_VERBOSITY": "DEBUG"}
    quiet_grpc_core(traced)
    assert traced["GRPC_VERBOSITY"] == "DEBUG"
    plain = {"GRPC_VERBOSITY": "INFO"}
    quiet_grpc_core(plain)
    assert plain["GRPC_VERBOSITY"] == "ERROR"

"""One vendor tool run: a minimal environment, none of the agent's descriptors, bounded output, a deadline."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.programming.toolrun import CAPTURE_BYTES, SHOWN_OUTPUT_CHARS, run_tool

PY = sys.executable


def deadline(seconds: float = 60.0) -> float:
    return asyncio.get_running_loop().time() + seconds


async def test_command_programmer_tool_runs_with_a_minimal_environment_and_no_inherited_descriptors() -> None:
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)  # even a descriptor marked inheritable stays with the agent
    try:
        script = (
            "import json, os; fds = sorted(map(int, os.listdir('/proc/self/fd'))); "
            "print(json.dumps([dict(os.environ), fds, os.getcwd(), os.getpgid(0) == os.getpid()]))"
        )
        result = await run_tool([PY, "-c", script], deadline(), "probe", {"XILINX_XRT": "/opt/xilinx/xrt"})
    finally:
        os.close(read_end)
        os.close(write_end)
    env, fds, cwd, leads_group = json.loads(result.stdout)
    assert result.status == 0
    assert set(env) - {"LC_CTYPE"} == {"PATH", "LANG", "XILINX_XRT"}
    assert fds[:3] == [0, 1, 2]
    assert write_end not in fds
    assert len(fds) <= 4  # 0-2 and the directory listdir itself opened
    assert leads_group
    assert not await asyncio.to_thread(os.path.exists, cwd)  # its scratch directory is removed afterwards


async def test_command_programmer_tool_output_is_kept_bounded_and_quoted() -> None:
    script = (
        "import sys; sys.stdout.write('x' * 100000 + '\\nlast line\\n'); "
        "sys.stderr.write('bad\\x1b[31m\\n'); sys.exit(3)"
    )
    result = await run_tool([PY, "-c", script], deadline(), "probe")
    assert result.status == 3
    assert result.ended() == "exited with status 3"
    assert len(result.stdout) == CAPTURE_BYTES
    assert result.stdout_bytes == 100011
    shown = result.output()
    assert "stderr 'bad\\x1b[31m'" in shown  # escaped: no raw control characters reach a log line or an Event
    assert f"(last {SHOWN_OUTPUT_CHARS} of 100011 bytes)" in shown
    assert "last line" in shown
    assert len(shown) < 2 * SHOWN_OUTPUT_CHARS + 100


async def test_command_programmer_tool_past_its_deadline_is_killed_with_its_group() -> None:
    script = (
        "import subprocess, time; subprocess.Popen(['sleep', '3600']); print('started', flush=True); time.sleep(3600)"
    )
    with pytest.raises(
        ProgrammingTimeout, match=r"probe: .* its process group was killed \(output so far: stdout 'started'\)"
    ):
        await run_tool([PY, "-c", script], deadline(0.5), "probe")


async def test_command_programmer_tool_that_cannot_start_is_a_programming_error(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")  # not executable
    with pytest.raises(ProgrammingError, match=rf"^probe: cannot start {tool}: Permission denied$"):
        await run_tool([str(tool)], deadline(), "probe")


def scratch_dirs() -> set[str]:
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("fpga-tool-")}


async def test_command_programmer_tool_that_leaves_a_process_writing_in_its_scratch_directory() -> None:
    """A child that left the tool's group (setsid) and keeps writing into the scratch directory is killed,
    the directory is removed and the tool's exit status is the answer (no bare OSError)."""
    before = scratch_dirs()
    script = (
        "import os, subprocess; subprocess.Popen(['sh', '-c', 'i=0; while :; do i=$((i+1)); mkdir -p d$i; "
        ": > d$i/f; done'], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "import time; time.sleep(0.3); print(os.getcwd())"
    )
    result = await run_tool([PY, "-c", script], deadline(), "probe")
    assert result.status == 0
    assert not await asyncio.to_thread(os.path.exists, result.stdout.strip())
    assert scratch_dirs() == before


async def test_command_programmer_tool_exit_status_decides_though_an_escaped_process_holds_its_output() -> None:
    """A setsid child holding stdout (its working directory elsewhere) does not turn exit 0 into a timeout."""
    script = (
        "import subprocess; child = subprocess.Popen(['sleep', '3600'], start_new_session=True, cwd='/'); "
        "print('programmed', child.pid, flush=True)"
    )
    result = await run_tool([PY, "-c", script], deadline(20.0), "probe")
    assert result.status == 0
    said, pid = result.stdout.split()
    assert said == "programmed"
    assert gone(int(pid))  # found by the pipe it held, and killed


def gone(pid: int) -> bool:
    """Whether the process has ended (a zombie waiting for its new parent counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in {"Z", "X"}
    except FileNotFoundError:
        return True

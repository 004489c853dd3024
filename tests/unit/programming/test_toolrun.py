"""One vendor tool run: a minimal environment, none of the agent's descriptors, bounded output, a deadline."""

from __future__ import annotations

import asyncio
import json
import os
import sys
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

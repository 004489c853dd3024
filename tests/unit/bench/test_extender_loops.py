"""The event-loop benchmark serves real HTTP from each server on each loop and hands its rows to bench/run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.extender_loops import SERVERS
from tests.unit.bench.rows import bench_rows

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "extender_loops.py"


def test_every_server_on_every_loop_answers_and_is_measured() -> None:
    rows = bench_rows("extender_loops.py", "--rounds", "1", "--calls", "30", "--warm-up", "5")
    assert len(rows) == 2 * len(SERVERS) + 4  # CPU and wall of each; ours minus the floor, and each loop's saving
    for kind, loop in SERVERS:
        for what in ("server CPU per call", "wall per call"):
            result = rows[f"{kind} extender on {loop}: {what}"]
            assert float(result.split()[0]) > 0, (kind, loop, what, result)
            assert result.endswith("1 rounds)")
    assert "fpga-agent minus do-nothing CPU per call, both on uvloop, per round" in rows
    assert "fpga-agent extender, CPU per call on asyncio minus on uvloop, per round" in rows


def test_bad_counts_are_one_line_before_anything_starts() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "0"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "--rounds and --calls must be at least 1, --warm-up at least 0"

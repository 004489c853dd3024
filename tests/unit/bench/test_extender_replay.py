"""The replay benchmark serves the scheduler benchmark's calls from both extenders and hands its rows to bench/run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.table import JSON_PREFIX

ROOT = Path(__file__).resolve().parents[3]


def test_prints_the_cpu_per_call_of_both_extenders() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "extender_replay.py"), "--calls", "100", "--rounds", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(JSON_PREFIX)]
    rows = {measure: result for measure, result, _target in json.loads(line[len(JSON_PREFIX) :])}
    ours = rows["prioritize, 500 of 5000 names, fpga-agent extender: CPU per call"]
    noop = rows["prioritize, 500 of 5000 names, do-nothing extender: CPU per call"]
    for result in (ours, noop):
        value, unit = result.split()
        assert unit == "us"
        assert float(value) >= 0  # a whole number of clock ticks: 0 for a server that did next to nothing
    assert len(rows["  runs (ours / do-nothing)"].split()) == 1  # one round: one pair

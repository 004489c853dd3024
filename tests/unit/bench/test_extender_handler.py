"""The in-process handler benchmark runs on the scheduler benchmark's states and hands its rows to bench/run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.table import JSON_PREFIX

ROOT = Path(__file__).resolve().parents[3]


def test_prints_every_row_with_answers_that_name_only_the_nodes_standing_out() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "extender_handler.py"), "--calls", "60", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(JSON_PREFIX)]
    rows = {measure: result for measure, result, _target in json.loads(line[len(JSON_PREFIX) :])}
    assert len(rows) == 6
    for measure, result in rows.items():
        assert float(result.split()[0]) > 0, (measure, result)
    entries = float(rows["entries in an answer (nodes above the call's floor), mean"])
    assert 0 < entries < 500  # the floor is left out: not every one of the 500 names is answered

"""bench/scheduler_rounds.py: per-round ratios read back from bench/scheduler.py's logs, pooled over sittings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.scheduler_rounds import making_rounds_of, ratios, rounds_of, rows_for, speed_rounds_of

ROOT = Path(__file__).resolve().parents[3]

SITTING = """nodes: 0 existed, created 5000 in 5.0s
round 1/3 (2000 pods per run)
  do-nothing extender: 200.0 pods/s
  fpga-agent extender: 190.0 pods/s
round 2/3 (2000 pods per run)
  fpga-agent extender: 210.0 pods/s
  do-nothing extender: 200.0 pods/s
round 3/3 (2000 pods per run)
  plain: 250.0 pods/s
  do-nothing extender: 100.0 pods/s
"""


def test_each_round_is_paired_within_itself_and_a_round_missing_one_side_is_left_out() -> None:
    rounds = rounds_of(SITTING)
    assert rounds == [
        {"do-nothing extender": 200.0, "fpga-agent extender": 190.0},
        {"fpga-agent extender": 210.0, "do-nothing extender": 200.0},
        {"plain": 250.0, "do-nothing extender": 100.0},
    ]
    assert ratios(rounds, "fpga-agent extender", "do-nothing extender") == [0.95, 1.05]


def test_sittings_are_shown_alone_and_pooled() -> None:
    second = "".join(
        f"round {i}/5 (2000 pods per run)\n  do-nothing extender: 100.0 pods/s\n  fpga-agent extender: {rate} pods/s\n"
        for i, rate in enumerate((97.0, 96.0, 99.0, 98.0, 94.0), start=1)
    )
    rows = {
        measure: (result, target)
        for measure, result, target in rows_for(
            {"a.err": SITTING, "b.err": second}, "fpga-agent extender", "do-nothing extender"
        )
    }
    assert rows["a.err: fpga-agent extender / do-nothing extender, per round"] == ("median 100.0% (2 rounds)", "")
    assert rows["b.err: fpga-agent extender / do-nothing extender, per round"] == (
        "median 97.0%, 90 % interval 94.0%-99.0% (5 rounds)",
        "",
    )
    # pooled: 0.94 0.95 0.96 0.97 0.98 0.99 1.05, median 0.97; at 7 rounds the interval is the 1st and 7th
    assert rows["all 2 sittings: fpga-agent extender / do-nothing extender, per round"] == (
        "median 97.0%, 90 % interval 94.0%-105.0% (7 rounds)",
        ">= 95 %",
    )


def test_a_sitting_without_the_pair_is_one_line() -> None:
    with pytest.raises(SystemExit, match=r"^x\.err: no round with both 'ours' and 'do-nothing extender'$"):
        rows_for({"x.err": SITTING}, "ours", "do-nothing extender")


def test_a_missing_log_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scheduler_rounds.py"), str(tmp_path / "none.err")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr == f"{tmp_path / 'none.err'}: No such file or directory\n"


def test_where_the_control_planes_cpu_is_logged_the_ratio_is_also_shown_with_the_machines_speed_taken_out() -> None:
    log = (
        "round 1/2 (2000 pods per run)\n"
        "  do-nothing extender: 200.0 pods/s\n"
        "    CPU per pod: scheduler and pod maker 4.000 ms, API server and etcd 9.000 ms, extender 0.130 ms\n"
        "  fpga-agent extender: 180.0 pods/s\n"
        "    CPU per pod: scheduler and pod maker 4.400 ms, API server and etcd 10.000 ms, extender 0.130 ms\n"
        "round 2/2 (2000 pods per run)\n"
        "  fpga-agent extender: 190.0 pods/s\n"
        "  do-nothing extender: 200.0 pods/s\n"
        "    CPU per pod: scheduler and pod maker 4.000 ms, API server and etcd 9.000 ms, extender 0.130 ms\n"
    )
    assert speed_rounds_of(log) == [
        {"do-nothing extender": 1800.0, "fpga-agent extender": 1800.0},
        {"do-nothing extender": 1800.0},  # ours' run has no CPU line: not taken
    ]
    rows = {
        measure: result for measure, result, _ in rows_for({"s": log}, "fpga-agent extender", "do-nothing extender")
    }
    assert rows["s: fpga-agent extender / do-nothing extender, per round"] == "median 92.5% (2 rounds)"
    assert rows["s: the same, the machine's speed taken out"] == "median 100.0% (1 rounds)"
    assert "s: the same, the machine's speed taken out" not in {
        measure for measure, _, _ in rows_for({"s": SITTING}, "fpga-agent extender", "do-nothing extender")
    }


def test_the_pods_making_time_is_compared_round_by_round_where_the_cpu_line_has_it() -> None:
    cpu = "    CPU per pod: scheduler and pod maker 4.000 ms, API server and etcd 9.000 ms, extender 0.130 ms"
    log = (
        "round 1/2 (2000 pods per run)\n"
        f"  do-nothing extender: 200.0 pods/s\n{cpu}; the pods made in 2.50 s\n"
        f"  fpga-agent extender: 190.0 pods/s\n{cpu}; the pods made in 2.75 s\n"
        "round 2/2 (2000 pods per run)\n"
        f"  fpga-agent extender: 210.0 pods/s\n{cpu}\n"  # a line without the making time (sitting 18's)
        f"  do-nothing extender: 200.0 pods/s\n{cpu}; the pods made in 2.00 s\n"
    )
    assert making_rounds_of(log) == [
        {"do-nothing extender": 2.5, "fpga-agent extender": 2.75},
        {"do-nothing extender": 2.0},
    ]
    assert speed_rounds_of(log)[1] == {"fpga-agent extender": 1890.0, "do-nothing extender": 1800.0}
    rows = {
        measure: result for measure, result, _ in rows_for({"s": log}, "fpga-agent extender", "do-nothing extender")
    }
    assert (
        rows["s: the pods' making time before the runs, fpga-agent extender / do-nothing extender"]
        == "median 110.0% (1 rounds)"
    )

"""The replay benchmark serves the scheduler benchmark's calls from both extenders and hands its rows to bench/run."""

from __future__ import annotations

from tests.unit.bench.rows import bench_rows


def test_prints_the_cpu_per_call_of_both_extenders_on_each_event_loop() -> None:
    rows = bench_rows("extender_replay.py", "--calls", "100", "--rounds", "1")
    for loop in ("uvloop", "asyncio"):
        ours = rows[f"prioritize, 500 of 5000 names, fpga-agent extender on {loop}: CPU per call"]
        noop = rows[f"prioritize, 500 of 5000 names, do-nothing extender on {loop}: CPU per call"]
        for result in (ours, noop):
            value, unit = result.split()
            assert unit == "us"
            assert float(value) >= 0  # a whole number of clock ticks: 0 for a server that did next to nothing
        assert len(rows[f"  runs on {loop} (ours / do-nothing)"].split()) == 1  # one round: one pair

"""The in-process handler benchmark runs on the scheduler benchmark's states and hands its rows to bench/run."""

from __future__ import annotations

from tests.unit.bench.rows import bench_rows


def test_prints_every_row_with_answers_that_name_only_the_nodes_standing_out() -> None:
    rows = bench_rows("extender_handler.py", "--calls", "60")
    assert len(rows) == 7  # the cache-flushed row included
    for measure, result in rows.items():
        assert float(result.split()[0]) > 0, (measure, result)
    entries = float(rows["entries in an answer (nodes above the call's floor), mean"])
    assert 0 < entries < 500  # the floor is left out: not every one of the 500 names is answered

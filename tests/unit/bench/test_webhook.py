"""The webhook handler benchmark checks its three answers and hands one row per review to bench/run."""

from __future__ import annotations

from tests.unit.bench.rows import bench_rows


def test_prints_a_row_per_review_with_positive_timings() -> None:
    rows = bench_rows("webhook.py", "--calls", "20", "--rounds", "2")
    assert len(rows) == 3
    assert any("unknown (refused)" in measure for measure in rows)
    for measure, result in rows.items():
        assert result.startswith("p50 "), (measure, result)
        assert float(result.split()[1]) > 0, (measure, result)

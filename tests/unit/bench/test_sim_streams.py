"""Several tie-break streams per point: stream 0 is the grid's own, further ones pair (c), (e) and (r) by seed, and
the targets are judged on the mean over them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.sim.engine import Result
from bench.sim.grid import DRA, INFORMED, C, PointResult, run_point, run_stream, tie_seed
from bench.sim.runs import gather_grid, grid_jobs
from bench.sim.scale import EVERY_NODE, SCALE, SHIPPED, ScaleRow, scale_jobs, scale_streams_table
from bench.sim.streams import ratios, spread, streams_table
from bench.sim.workload import Shape

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "daemonset" / "scheduler-config.yaml"
SMALL = Shape(nodes=12, slots=(2, 4), bitstreams=15, zipf=0.9, multi_share=0.3, max_slots=3, pods=400)


def test_stream_zero_is_the_grid_run_and_further_streams_draw_other_ties() -> None:
    point = run_point(SMALL, seed=1, scheduler_config=CONFIG)
    again = run_stream(SMALL, 1, CONFIG, 0)
    assert again == {policy: point.rate(policy) for policy in (C, DRA, INFORMED)}
    others = [run_stream(SMALL, 1, CONFIG, stream) for stream in (1, 2)]
    assert any(rates != again for rates in others)  # the ties alone move them
    assert len({tie_seed(1, stream) for stream in range(5)} | {tie_seed(2, 0)}) == 6


def _point(shape: Shape, rates: dict[str, float], *more: dict[str, float]) -> PointResult:
    def result(rate: float) -> Result:
        return Result(reconfigurations=round(rate * shape.pods))

    return PointResult(shape, {p: result(r) for p, r in rates.items()}, "", 0, more_streams=more)


def test_the_targets_are_judged_on_the_mean_over_the_streams_and_the_spread_is_shown() -> None:
    shape = replace(SMALL, pods=1000)
    unlucky = _point(shape, {C: 0.200, DRA: 0.214, INFORMED: 0.190}, {C: 0.200, DRA: 0.200, INFORMED: 0.200})
    behind = _point(shape, {C: 0.100, DRA: 0.106, INFORMED: 0.100}, {C: 0.100, DRA: 0.107, INFORMED: 0.100})
    table = streams_table([unlucky, behind])
    assert "Over 2 tie-break streams per point" in table
    assert "| 1 | 0.2000 | 0.2070 | 0.1950 | 1.035 (1.000..1.070, sd 0.049) |" in table
    assert "above 1.05 at: 2 (target" in table  # point 1's first stream is above, its mean is not
    assert "worst 1.065 (1.060..1.070, sd 0.007) at point 2" in table
    assert "(c) / (r), mean over the streams: median 1.013" in table  # (1.026 + 1.000) / 2


def test_spread_of_one_value_and_paired_ratios() -> None:
    assert spread([1.04]).cell() == "1.040"
    assert spread([1.0, 1.1]).low == 1.0
    assert ratios([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]
    with pytest.raises(ValueError, match="no values"):
        spread([])


def test_the_grid_gathers_each_points_streams_in_stream_order() -> None:
    jobs = grid_jobs(1, CONFIG, streams=3)
    assert len(jobs) == 3 * len({job[0] for job in jobs})
    first, second = jobs[0][0], jobs[1][0]
    picked = [job for job in jobs if job[0] in (first, second)]
    results: list[PointResult | dict[str, float]] = []
    for shape, *_, stream in picked:
        if stream == 0:
            results.append(_point(shape, {C: 0.2, DRA: 0.2, INFORMED: 0.2}))
        else:
            results.append({C: 0.2 + stream, DRA: 0.2, INFORMED: 0.2})
    points = gather_grid(list(reversed(picked)), list(reversed(results)))  # in whatever order they finished
    assert [point.shape for point in points] == [first, second]
    assert [point.stream_rates(C) for point in points] == [[0.2, 1.2, 2.2]] * 2


def test_large_points_run_further_streams_for_c_and_e_with_the_shipped_search_only() -> None:
    jobs = scale_jobs(1, CONFIG, streams=3)
    further = [job for job in jobs if job[5] > 0]
    assert {(job[1], job[2]) for job in further} == {(C, SHIPPED), (DRA, SHIPPED)}
    assert len(further) == 2 * 2 * len(SCALE)
    assert any(job[2] == EVERY_NODE for job in jobs if job[5] == 0)
    shape = SCALE[0]
    rows = [
        ScaleRow(shape, C, SHIPPED, 0.50, 0.0, 1.0, 0),
        ScaleRow(shape, DRA, SHIPPED, 0.52, 0.0, 1.0, 0),
        ScaleRow(shape, C, SHIPPED, 0.50, 0.0, 1.0, 1),
        ScaleRow(shape, DRA, SHIPPED, 0.50, 0.0, 1.0, 1),
        ScaleRow(shape, DRA, EVERY_NODE, 0.10, 0.0, 1.0, 0),  # not a stream of the shipped search
    ]
    assert f"| {shape.nodes} | 2 | 0.5000 | 0.5100 | 1.020 (1.000..1.040, sd 0.028) |" in scale_streams_table(rows)

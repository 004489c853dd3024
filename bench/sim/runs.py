"""Running the grid and the large clusters as jobs over a pool of processes (``bench/cluster_sim.py --grid``).

One job per grid point and tie-break stream (stream 0 runs every policy, a further
stream only the ``STREAMED`` ones: ``bench.sim.streams``), and one per large-cluster
point, policy, search and stream (``bench.sim.scale``). They share one pool, the
costliest first, so that neither core waits for the other near the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from agent.extender.ranking import ANSWER_LIMIT
from agent.extender.scoring import ScoreWeights
from bench.sim.grid import GRID, PointResult, run_point, run_stream
from bench.sim.scale import EVERY_NODE, ScaleJob, ScaleRow, run_scale_job, scale_jobs
from bench.sim.workload import Shape

#: (point, seed, scheduler configuration, the extender's weights, its answer limit, tie-break stream)
GridJob = tuple[Shape, int, Path, ScoreWeights | None, int, int]


@dataclass(frozen=True, slots=True)
class GridJobSpec:
    spec: GridJob


@dataclass(frozen=True, slots=True)
class ScaleJobSpec:
    spec: ScaleJob


Job = GridJobSpec | ScaleJobSpec


def grid_jobs(
    seed: int,
    scheduler_config: Path,
    streams: int = 1,
    weights: ScoreWeights | None = None,
    answer_limit: int = ANSWER_LIMIT,
) -> list[GridJob]:
    """One job per point and tie-break stream."""
    return [
        (shape, seed, scheduler_config, weights, answer_limit, stream) for stream in range(streams) for shape in GRID
    ]


def run_grid_job(job: GridJob) -> PointResult | dict[str, float]:
    """Stream 0: every policy on the point (``run_point``); a further stream: the ``STREAMED`` ones."""
    shape, seed, config, weights, answer_limit, stream = job
    if stream == 0:
        return run_point(shape, seed, config, weights, answer_limit)
    return run_stream(shape, seed, config, stream, weights, answer_limit)


def gather_grid(jobs: Sequence[GridJob], results: Sequence[PointResult | dict[str, float]]) -> list[PointResult]:
    """The points of the grid in order, each with its further streams' rates in stream order."""
    points: dict[Shape, PointResult] = {}
    more: dict[Shape, list[tuple[int, dict[str, float]]]] = {}
    for job, result in zip(jobs, results, strict=True):
        if isinstance(result, PointResult):
            points[job[0]] = result
        else:
            more.setdefault(job[0], []).append((job[5], result))
    gathered = []
    for shape in GRID:
        if shape in points:
            streams = sorted(more.get(shape, []), key=lambda entry: entry[0])
            gathered.append(replace(points[shape], more_streams=tuple(rates for _, rates in streams)))
    return gathered


def cost(job: Job) -> float:
    """A rough cost, for the order the pool takes the jobs in (nodes looked at per pod, times pods)."""
    if isinstance(job, ScaleJobSpec):
        shape, search = job.spec[0], job.spec[2]
        return (shape.nodes if search == EVERY_NODE else min(shape.nodes, 700)) * shape.pods * 1.5
    shape, stream = job.spec[0], job.spec[5]
    return shape.nodes * shape.pods * (20 if stream == 0 else 7)  # about twenty simulations at stream 0, seven after


def run_job(job: Job) -> PointResult | dict[str, float] | ScaleRow:
    return run_scale_job(job.spec) if isinstance(job, ScaleJobSpec) else run_grid_job(job.spec)


def run_all(
    seed: int,
    scheduler_config: Path,
    processes: int,
    streams: int = 1,
    weights: ScoreWeights | None = None,
    answer_limit: int = ANSWER_LIMIT,
    grid: bool = True,
    scale: bool = True,
) -> tuple[list[PointResult], list[ScaleRow]]:
    """The grid's points and the large clusters' rows, each with ``streams`` tie-break streams."""
    jobs: list[Job] = []
    if grid:
        jobs += [GridJobSpec(job) for job in grid_jobs(seed, scheduler_config, streams, weights, answer_limit)]
    if scale:
        jobs += [ScaleJobSpec(job) for job in scale_jobs(seed, scheduler_config, streams)]
    ordered = sorted(jobs, key=lambda job: -cost(job))
    if processes <= 1:
        done = [run_job(job) for job in ordered]
    else:
        import multiprocessing

        with multiprocessing.Pool(processes) as pool:
            done = pool.map(run_job, ordered, chunksize=1)
    grid_specs: list[GridJob] = []
    grid_done: list[PointResult | dict[str, float]] = []
    rows: list[ScaleRow] = []
    for job, result in zip(ordered, done, strict=True):
        if isinstance(result, ScaleRow):
            rows.append(result)
        elif isinstance(job, GridJobSpec):
            grid_specs.append(job.spec)
            grid_done.append(result)
    return gather_grid(grid_specs, grid_done), rows

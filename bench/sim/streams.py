"""What the scheduler's random tie-breaks alone move: each point run with several tie-break streams.

kube-scheduler picks at random among the nodes that score alike, and so does the
simulation (``bench.sim.grid.tie_seed``: one seed per point and stream, the workload
fixed). One run's per-point ratio of two policies moves by about +-0.03 with that
stream alone, too much to judge a 5 % target point by point. ``--streams N`` runs the
policies the targets compare (``STREAMED``: (c), (e) and the online reference (r) on
the grid's points; (c) and (e) with the shipped search on the large ones) with N
streams, stream 0 being the grid's own; the per-point ratios are judged on their mean
over the streams, and their spread (lowest..highest, and the standard deviation) is
given beside it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bench.sim.grid import DRA, INFORMED, C, PointResult


@dataclass(frozen=True, slots=True)
class Spread:
    """A ratio over the streams: its mean, lowest, highest and standard deviation (0 for one stream)."""

    mean: float
    low: float
    high: float
    sd: float

    def cell(self) -> str:
        if self.low == self.high:
            return f"{self.mean:.3f}"
        return f"{self.mean:.3f} ({self.low:.3f}..{self.high:.3f}, sd {self.sd:.3f})"


def spread(values: list[float]) -> Spread:
    if not values:
        raise ValueError("a spread of no values")
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return Spread(statistics.fmean(values), min(values), max(values), sd)


def ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    """Per stream, one policy's rate over another's (the streams paired: the same tie-break seed)."""
    return [n / d for n, d in zip(numerators, denominators, strict=True)]


def streams_table(points: list[PointResult]) -> str:
    """Per grid point, (c), (e) and (r) over the streams and the two ratios the targets judge, then the verdicts."""
    count = min(len(point.stream_rates(C)) for point in points)
    lines = [
        f"Over {count} tie-break stream{'s' if count > 1 else ''} per point (mean, lowest..highest, sd):",
        "",
        "| # | (c) mean | (e) DRA mean | (r) mean | (e)/(c) | (c)/(r) |",
        "|---|---|---|---|---|---|",
    ]
    dra_versus_c, c_versus_r = [], []
    for index, point in enumerate(points, 1):
        c, e, r = (point.stream_rates(p)[:count] for p in (C, DRA, INFORMED))
        dra_versus_c.append(spread(ratios(e, c)))
        c_versus_r.append(spread(ratios(c, r)))
        lines.append(
            f"| {index} | {statistics.fmean(c):.4f} | {statistics.fmean(e):.4f} | {statistics.fmean(r):.4f} | "
            f"{dra_versus_c[-1].cell()} | {c_versus_r[-1].cell()} |"
        )
    lines += ["", *verdicts(dra_versus_c, c_versus_r)]
    return "\n".join(lines)


def verdicts(dra_versus_c: list[Spread], c_versus_r: list[Spread]) -> list[str]:
    """The two targets, judged on the per-point means over the streams."""
    means = [s.mean for s in dra_versus_c]
    worst = max(range(len(means)), key=means.__getitem__)
    above = [str(i + 1) for i, m in enumerate(means) if m > 1.05]
    told = statistics.median(s.mean for s in c_versus_r)
    where = ", ".join(above) if above else "no point"
    return [
        f"(e) DRA / (c), mean over the streams: median {statistics.median(means):.3f}, worst "
        f"{dra_versus_c[worst].cell()} at point {worst + 1}; above 1.05 at: {where} (target: every point <= 1.05)",
        f"(c) / (r), mean over the streams: median {told:.3f}, worst {max(s.mean for s in c_versus_r):.3f} "
        "(target: median <= 1.05)",
    ]

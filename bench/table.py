"""What every benchmark shares: percentiles and one way to print (or hand over) its rows."""

from __future__ import annotations

import json
import math
import statistics

Row = tuple[str, str, str]  # measure, result, target

#: Marks the machine-readable line ``bench/run`` collects from each benchmark.
JSON_PREFIX = "ROWS "


def pct(samples: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median_interval(samples: list[float], confidence: float = 0.9) -> tuple[float, float] | None:
    """A distribution-free interval for the median of ``samples``: order statistics (k-th lowest, k-th highest)
    with the largest k whose coverage, from the binomial law of how many samples fall below the median, is at
    least ``confidence``. None when even the whole range covers less (fewer than 5 samples at 90 %)."""
    ordered = sorted(samples)
    n = len(ordered)
    chosen = None
    below = 0.0  # P(Binomial(n, 1/2) <= k - 1): the chance that fewer than k samples fall below the median
    for k in range(1, n // 2 + 1):
        below += math.comb(n, k - 1) / 2.0**n
        if 1.0 - 2.0 * below < confidence:
            break
        chosen = k
    if chosen is None:
        return None
    return ordered[chosen - 1], ordered[n - chosen]


def median_within(values: list[float]) -> str:
    """``median 96.5%, 90 % interval 94.6%-98.2%`` for ratios (the interval from 5 values on, ``median_interval``)."""
    interval = median_interval(values)
    within = "" if interval is None else f", 90 % interval {interval[0]:.1%}-{interval[1]:.1%}"
    return f"median {statistics.median(values):.1%}{within}"


def p50_p99(samples: list[float], unit: str = "ms", digits: int = 3) -> str:
    return f"p50 {pct(samples, 0.5):.{digits}f} {unit} / p99 {pct(samples, 0.99):.{digits}f} {unit}"


def format_rows(rows: list[Row]) -> str:
    width = max(len("measure"), *(len(r[0]) for r in rows))
    vwidth = max(len("result"), *(len(r[1]) for r in rows))
    lines = [f"{'measure'.ljust(width)}  {'result'.ljust(vwidth)}  target"]
    lines += [f"{name.ljust(width)}  {value.ljust(vwidth)}  {target}" for name, value, target in rows]
    return "\n".join(lines)


def emit(rows: list[Row], as_json: bool) -> None:
    """Print the table, or (for bench/run) one line with the rows as JSON."""
    print(JSON_PREFIX + json.dumps(rows) if as_json else format_rows(rows), flush=True)

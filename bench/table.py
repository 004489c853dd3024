"""What every benchmark shares: percentiles and one way to print (or hand over) its rows."""

from __future__ import annotations

import json

Row = tuple[str, str, str]  # measure, result, target

#: Marks the machine-readable line ``bench/run`` collects from each benchmark.
JSON_PREFIX = "ROWS "


def pct(samples: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


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

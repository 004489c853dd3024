"""A benchmark script run as ``bench/run`` runs it: its rows, measure -> result."""

from __future__ import annotations

from bench.run_all import rows_of


def bench_rows(script: str, *args: str) -> dict[str, str]:
    """The rows of ``bench/<script> <args>``, through bench/run's own runner; a failed run fails the test."""
    rows = {measure: result for measure, result, _target in rows_of(script, list(args))}
    failed = [f"{measure}: {result}" for measure, result in rows.items() if measure.startswith(f"{script} failed")]
    assert not failed, failed
    return rows

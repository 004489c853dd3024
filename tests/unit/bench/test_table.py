"""The interval the benchmarks give for a median: order statistics chosen by the binomial law."""

from __future__ import annotations

import random

from bench.table import median_interval


def test_the_interval_is_the_widest_pair_of_order_statistics_the_confidence_needs() -> None:
    assert median_interval([1.0, 2.0, 3.0, 4.0]) is None  # 4 samples cover the median only 87.5 % of the time
    assert median_interval([5.0, 1.0, 4.0, 2.0, 3.0]) == (1.0, 5.0)  # 93.75 %
    assert median_interval([float(v) for v in range(10)]) == (1.0, 8.0)  # 97.9 %; one step in would be 89 %
    assert median_interval([float(v) for v in range(20)]) == (5.0, 14.0)
    assert median_interval([float(v) for v in range(20)], confidence=0.5) == (7.0, 12.0)


def test_the_interval_covers_the_true_median_at_least_as_often_as_promised() -> None:
    rng = random.Random(7)
    trials, covered = 4000, 0
    for _ in range(trials):
        samples = [rng.lognormvariate(0.0, 0.3) for _ in range(9)]  # skewed noise: the true median is 1.0
        low, high = median_interval(samples) or (0.0, 0.0)
        covered += low <= 1.0 <= high
    assert covered / trials >= 0.9

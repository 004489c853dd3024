"""The cache budget: least recently used pulled files out first, never one in use, full named clearly."""

from __future__ import annotations

import pytest

from agent.bitstreams.cache import CacheBudget, CachedFile
from agent.errors import CacheFullError


def files(*pairs: tuple[str, int]) -> list[CachedFile]:
    return [CachedFile(name, size, f"2026-01-01T00:00:0{i}+00:00") for i, (name, size) in enumerate(pairs)]


def test_nothing_is_evicted_while_it_fits() -> None:
    budget = CacheBudget(100)
    assert budget.plan(files(("a", 40), ("b", 40)), "c", 20) == []


def test_the_least_recently_used_go_first() -> None:
    budget = CacheBudget(100)
    for name in ("a", "b", "c"):
        budget.touch(name)
    budget.touch("a")
    assert budget.plan(files(("a", 30), ("b", 30), ("c", 30)), "d", 30) == ["b"]
    assert budget.plan(files(("a", 30), ("b", 30), ("c", 30)), "d", 60) == ["b", "c"]


def test_without_use_the_oldest_goes_first() -> None:
    assert CacheBudget(10).plan(files(("old", 5), ("new", 5)), "x", 5) == ["old"]


def test_files_in_use_stay() -> None:
    in_use = {"a", "b"}
    budget = CacheBudget(100, in_use=lambda: in_use)
    assert budget.plan(files(("a", 40), ("b", 40), ("c", 20)), "d", 20) == ["c"]
    with pytest.raises(CacheFullError, match=r"held by bitstreams in use: a, b"):
        budget.plan(files(("a", 40), ("b", 40), ("c", 20)), "d", 50)
    in_use.discard("a")
    assert budget.plan(files(("a", 40), ("b", 40), ("c", 20)), "d", 50) == ["a", "c"]


def test_a_file_larger_than_the_budget_is_refused_naming_the_flag() -> None:
    with pytest.raises(
        CacheFullError, match=r"more than the whole cache budget of 10 bytes \(--bitstream-cache-bytes\)"
    ):
        CacheBudget(10).plan([], "big", 11)


def test_pulls_in_flight_hold_their_space() -> None:
    budget = CacheBudget(100)
    with budget.reserve("a", 60):
        assert budget.used_bytes([]) == 60
        with pytest.raises(CacheFullError, match="no room for bitstream 'b'"):
            budget.plan([], "b", 50)
    assert budget.plan([], "b", 50) == []


def test_the_old_version_of_the_same_name_counts_as_freed() -> None:
    assert CacheBudget(100).plan(files(("a", 80)), "a", 90) == []


def test_the_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        CacheBudget(0)

"""The order in which free slots are overwritten: empty first, then the least recently used, then by slot ID."""

from __future__ import annotations

from agent.slots import eviction_key


def test_empty_slots_come_first_then_the_least_recently_used_then_by_id() -> None:
    slots = [
        ("c", "aes", 300.0),
        ("b", None, 500.0),  # empty (or unknown content), used once
        ("a", "sha", 300.0),  # as old as c: the ID decides
        ("d", "gz", None),  # never used: before any used one
        ("e", None, None),
        ("f", "fft", 100.0),
    ]
    ordered = sorted(slots, key=lambda s: eviction_key(s[1], s[2], s[0]))
    assert [s[0] for s in ordered] == ["e", "b", "d", "f", "a", "c"]


def test_whole_and_fractional_seconds_compare_alike() -> None:
    """The agent keeps last use in float seconds, its Node annotation publishes whole ones."""
    assert eviction_key("aes", 100, "x") == eviction_key("aes", 100.0, "x")
    assert eviction_key("aes", 0, "x") == eviction_key("aes", None, "x")

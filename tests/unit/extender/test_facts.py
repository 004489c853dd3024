"""Cluster facts: request shares decayed per pod, free copies over all nodes, and what a free copy is worth."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from agent.extender.facts import LEVELS, STEP_S, WINDOW_REQUESTS, ClusterFacts, free_copies
from agent.extender.nodestate import NodeSlots
from tests.unit.extender.factories import N3K, PAC, node, slot

NOW = 1_800_000_000.0


def cluster(*per_node: list[dict[str, Any]]) -> list[NodeSlots]:
    return [node(f"n{i}", slots) for i, slots in enumerate(per_node)]


def test_shares_follow_the_latest_pods() -> None:
    facts = ClusterFacts(half_life_requests=100)
    for _ in range(100):
        facts.note_request("old")
    assert facts.share("old") == pytest.approx(1.0)
    for _ in range(100):
        facts.note_request("new")
    # the last 100 pods weigh as much as everything before them
    assert facts.share("new") == pytest.approx(2 / 3, rel=0.01)
    assert facts.share("old") == pytest.approx(1 / 3, rel=0.01)
    assert facts.share("never") == 0.0


def test_shares_stay_finite_over_a_long_run() -> None:
    facts = ClusterFacts(half_life_requests=10)
    for i in range(20_000):
        facts.note_request("a" if i % 4 else "b")
    assert facts.share("a") + facts.share("b") == pytest.approx(1.0)
    assert facts.share("b") == pytest.approx(0.25, abs=0.05)


def test_free_copies_count_free_healthy_slots_per_bitstream_and_platform() -> None:
    nodes = cluster(
        [slot("s0", bitstream="aes"), slot("s1", bitstream="aes", free=False), slot("s2", bitstream="aes")],
        [slot("s0", bitstream="aes", healthy=False), slot("s1", bitstream="aes"), slot("s2")],
        [slot("s0", bitstream="fft", platform=N3K)],
    )
    assert free_copies(nodes) == {("aes", PAC): 3, ("fft", N3K): 1}


def test_the_last_free_copy_of_a_popular_bitstream_is_worth_the_most() -> None:
    facts = ClusterFacts()
    for i in range(400):
        facts.note_request("aes" if i % 2 else ("sha" if i % 4 else "fft"))  # aes 1/2, sha 1/4, fft 1/4
    nodes = cluster(
        [slot("s0", bitstream="aes"), slot("s1", bitstream="aes")],
        [slot("s0", bitstream="sha"), slot("s1", bitstream="cold")],
        *[[slot("s0", bitstream="fft")] for _ in range(40)],
    )
    keep = facts.keep_values(nodes, NOW)
    assert "cold" not in keep  # nobody asked for it: worth nothing, overwritten first
    assert keep["sha"] == pytest.approx(1 - math.exp(-0.25 * WINDOW_REQUESTS), abs=1 / LEVELS)
    assert keep["fft"] == pytest.approx(1 - math.exp(-0.25 * WINDOW_REQUESTS / 40), abs=1 / LEVELS)
    assert keep["sha"] > keep["fft"]  # one copy of sha, 40 spare copies of fft
    assert all(round(v * LEVELS) == v * LEVELS for v in keep.values())


def test_values_are_worked_out_once_per_step_and_the_version_moves_only_on_change() -> None:
    facts = ClusterFacts()
    nodes = cluster([slot("s0", bitstream="aes")])
    assert facts.keep_values(nodes, NOW) == {}
    assert facts.version == 0
    facts.note_request("aes")
    assert facts.keep_values(nodes, NOW + 1) == {}  # within the step: the old answer
    first = dict(facts.keep_values(nodes, NOW + STEP_S))
    assert first == {"aes": 1.0}
    assert facts.version == 1
    facts.note_request("aes")
    assert facts.keep_values(nodes, NOW + 2 * STEP_S) == first
    assert facts.version == 1
    more = cluster(*[[slot("s0", bitstream="aes")] for _ in range(400)])
    facts.note_request("aes")
    assert facts.keep_values(more, NOW + 3 * STEP_S)["aes"] < 1.0
    assert facts.version == 2


def test_nodes_are_not_read_again_while_no_pod_was_scored() -> None:
    facts = ClusterFacts()
    facts.note_request("aes")
    facts.keep_values(cluster([slot("s0", bitstream="aes")]), NOW)

    def unreadable() -> Iterator[NodeSlots]:
        raise AssertionError("nodes read again")
        yield

    assert facts.keep_values(unreadable(), NOW + 10 * STEP_S) == {"aes": 1.0}


@pytest.mark.parametrize("kwargs", [{"half_life_requests": 0}, {"window_requests": -1}])
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ClusterFacts(**kwargs)

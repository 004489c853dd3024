"""Filter and prioritize as pure functions: tables of pods and nodes with the expected answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.extender.demand import PodDemand
from agent.extender.nodestate import NodeSlots
from agent.extender.scoring import (
    DOWNLOAD_PENALTY,
    LRU_HORIZON_S,
    ScoreWeights,
    check_node,
    filter_nodes,
    parse_score_weights,
    score_node,
)
from tests.unit.extender.factories import CATALOG, N3K, PAC, demand, node, slot

NOW = 1_000_000_000
W = ScoreWeights()

AES1 = demand(("main", 1, "aes"))
AES2 = demand(("main", 2, "aes"))
NO_BITSTREAM = demand(("main", 2, None))


def n(*slots: Mapping[str, Any], bitstreams: Mapping[str, str] | None = None) -> NodeSlots:
    return node("n", list(slots), bitstreams)


# --- demand ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "by_bitstream", "unnamed"),
    [
        pytest.param(demand(("main", 2, "aes")), {"aes": 2}, 0, id="one-container"),
        pytest.param(demand(("i", 2, "aes", True)), {"aes": 2}, 0, id="one-init-container"),
        pytest.param(demand(("main", 2, None)), {}, 2, id="one-container-any-content"),
        pytest.param(demand(("a", 1, "aes"), ("b", 2, "aes")), {"aes": 3}, 0, id="app-containers-summed"),
        pytest.param(demand(("a", 1, "aes"), ("i", 3, "aes", True)), {"aes": 3}, 0, id="init-larger-wins"),
        pytest.param(demand(("a", 2, "aes"), ("i", 1, "aes", True)), {"aes": 2}, 0, id="app-larger-wins"),
        pytest.param(
            demand(("i1", 1, "sha", True), ("i2", 2, "sha", True)), {"sha": 2}, 0, id="init-containers-one-at-a-time"
        ),
        pytest.param(demand(("a", 1, "aes"), ("b", 1, None)), {"aes": 1}, 1, id="unnamed-apart"),
        pytest.param(demand(("a", 0, "aes")), {}, 0, id="zero-slots-ignored"),
        pytest.param(demand(), {}, 0, id="nothing"),
    ],
)
def test_demand_is_the_most_held_at_once(pod: PodDemand, by_bitstream: dict[str, int], unnamed: int) -> None:
    assert dict(pod.by_bitstream) == by_bitstream
    assert pod.unnamed == unnamed
    assert pod.one_slot == (next(iter(by_bitstream)) if list(by_bitstream.values()) == [1] and not unnamed else None)


@pytest.mark.parametrize(
    ("pod", "requested"),
    [
        pytest.param(demand(("a", 1, "aes"), ("b", 2, None)), 3, id="app-containers-summed"),
        pytest.param(demand(("a", 1, "aes"), ("i", 2, None, True)), 2, id="init-larger-wins"),
        pytest.param(demand(("a", 1, "aes"), ("b", 1, "sha"), ("i", 1, "aes", True)), 2, id="app-larger-wins"),
        pytest.param(demand(("i1", 3, "aes", True), ("i2", 1, None, True)), 3, id="init-containers-one-at-a-time"),
        pytest.param(demand(), 0, id="nothing"),
    ],
)
def test_the_request_is_counted_as_kube_scheduler_counts_it(pod: PodDemand, requested: int) -> None:
    assert pod.requested == requested


@pytest.mark.parametrize(
    ("slots", "count", "packing"),
    [
        pytest.param([slot("s0"), slot("s1"), slot("s2"), slot("s3")], 1, 25, id="all-free"),
        pytest.param([slot("s0"), slot("s1", free=False), slot("s2", free=False), slot("s3")], 1, 75, id="half-held"),
        pytest.param([slot("s0"), slot("s1"), slot("s2"), slot("s3")], 2, 50, id="the-pods-own-request-counts"),
        pytest.param([slot("s0"), slot("s1"), slot("s2", free=False)], 1, 66, id="whole-points"),
        pytest.param([slot("s0"), slot("s1", healthy=False)], 1, 100, id="unhealthy-slots-not-allocatable"),
        pytest.param([slot("s0")], 3, 100, id="not-above-100"),
        pytest.param([slot("s0", healthy=False)], 1, 0, id="nothing-allocatable"),
    ],
)
def test_packing_is_the_most_allocated_score(slots: list[dict[str, Any]], count: int, packing: int) -> None:
    assert n(*slots).packing(count) == packing


# --- filter ----------------------------------------------------------------------------

FILTER_CASES = [
    pytest.param(AES1, None, None, id="no-published-state-passes"),
    pytest.param(NO_BITSTREAM, n(), None, id="pod-without-bitstream-passes"),
    pytest.param(AES1, n(slot("s0")), None, id="empty-slot-of-the-platform"),
    pytest.param(AES1, n(slot("s0", bitstream="sha", free=False)), None, id="held-slots-count"),
    pytest.param(AES2, n(slot("s0"), slot("s1", free=False)), None, id="free-or-held-two"),
    pytest.param(
        demand(("main", 1, "zzz")),
        n(slot("s0")),
        """the node's catalog has no bitstream "zzz\"""",
        id="catalog-lacks-the-bitstream",
    ),
    pytest.param(
        demand(("a", 1, "zzz"), ("b", 1, "aes"), ("c", 1, "yyy")),
        n(slot("s0"), slot("s1"), slot("s2")),
        """the node's catalog has no bitstreams "yyy", "zzz\"""",
        id="catalog-lacks-two",
    ),
    pytest.param(
        AES2,
        n(slot("s0", free=False)),
        'bitstream "aes" (platform pac_a10) needs 2 healthy slots of that platform, the node has 1',
        id="too-few-slots",
    ),
    pytest.param(
        AES1,
        n(slot("s0", healthy=False)),
        'bitstream "aes" (platform pac_a10) needs 1 healthy slot of that platform, the node has 0',
        id="unhealthy-slots-do-not-count",
    ),
    pytest.param(
        AES1,
        n(slot("s0", platform=N3K), slot("s1", platform=N3K)),
        'bitstream "aes" (platform pac_a10) needs 1 healthy slot of that platform, the node has 0',
        id="other-platform-does-not-count",
    ),
    pytest.param(
        AES1,
        n(slot("s0", platform=N3K), bitstreams={"aes": N3K}),
        None,
        id="platform-per-the-nodes-own-catalog",
    ),
    pytest.param(
        demand(("a", 1, "aes"), ("b", 1, "sha")),
        n(slot("s0"), slot("s1", platform=N3K)),
        'bitstreams "aes", "sha" (platform pac_a10) need 2 healthy slots of that platform, the node has 1',
        id="app-containers-of-one-platform-add-up",
    ),
    pytest.param(
        demand(("a", 1, "aes"), ("b", 1, "fft")),
        n(slot("s0"), slot("s1", platform=N3K)),
        None,
        id="two-platforms-one-each",
    ),
    pytest.param(
        demand(("main", 1, "aes"), ("init", 1, "sha", True)),
        n(slot("s0")),
        None,
        id="init-and-app-take-turns",
    ),
    pytest.param(
        demand(("main", 1, "aes"), ("init", 2, "sha", True)),
        n(slot("s0")),
        'bitstreams "aes", "sha" (platform pac_a10) need 2 healthy slots of that platform, the node has 1',
        id="init-larger-than-the-node",
    ),
]


@pytest.mark.parametrize(("pod", "state", "reason"), FILTER_CASES)
def test_filter_fails_only_on_hard_facts(pod: PodDemand, state: NodeSlots | None, reason: str | None) -> None:
    assert check_node(pod, state) == reason


def test_filter_nodes_keeps_the_order_and_names_each_failure() -> None:
    nodes = {
        "good-1": n(slot("s0")),
        "bad": n(slot("s0", platform=N3K)),
        "unknown": None,
        "good-2": n(slot("s0", bitstream="aes", free=False)),
    }
    outcome = filter_nodes(AES1, ["good-2", "bad", "unknown", "good-1", "missing"], nodes.get)
    assert outcome.passed == ["good-2", "unknown", "good-1", "missing"]
    assert outcome.failed == {
        "bad": 'bitstream "aes" (platform pac_a10) needs 1 healthy slot of that platform, the node has 0'
    }


def test_filter_without_a_bitstream_looks_nothing_up() -> None:
    def lookup(name: str) -> NodeSlots | None:
        raise AssertionError(f"looked up {name}")

    assert filter_nodes(NO_BITSTREAM, ["a", "b"], lookup).passed == ["a", "b"]


# --- prioritize ------------------------------------------------------------------------


def used(seconds_ago: float) -> int:
    return int(NOW - seconds_ago)


SCORE_CASES = [
    pytest.param(AES1, None, 5, id="no-published-state-neutral"),
    pytest.param(NO_BITSTREAM, n(slot("s0", bitstream="aes")), 5, id="pod-without-bitstream-neutral"),
    pytest.param(NO_BITSTREAM, n(), 5, id="pod-without-bitstream-neutral-even-if-full"),
    pytest.param(AES1, n(slot("s0", bitstream="aes")), 10, id="loaded-free-slot"),
    pytest.param(AES1, n(slot("s0"), slot("s1", bitstream="aes")), 10, id="loaded-beats-empty"),
    pytest.param(AES1, n(slot("s0")), 7, id="empty-free-slot"),
    pytest.param(AES1, n(slot("s0", bitstream="sha", last_used=used(2 * LRU_HORIZON_S))), 7, id="evict-long-unused"),
    pytest.param(AES1, n(slot("s0", bitstream="sha", last_used=None)), 7, id="evict-never-used"),
    pytest.param(AES1, n(slot("s0", bitstream="sha", last_used=used(LRU_HORIZON_S / 2))), 4, id="evict-half-horizon"),
    pytest.param(AES1, n(slot("s0", bitstream="sha", last_used=used(0))), 1, id="evict-just-used"),
    pytest.param(
        AES1,
        n(slot("s0", bitstream="sha", last_used=used(0)), slot("s1", bitstream="fft", last_used=used(LRU_HORIZON_S))),
        7,
        id="evicts-the-least-recently-used",
    ),
    pytest.param(
        AES1, n(slot("s0", bitstream=None, accelerator="foreign", last_used=None)), 7, id="evict-unknown-content"
    ),
    pytest.param(AES1, n(slot("s0", bitstream="aes", free=False)), 0, id="loaded-but-held"),
    pytest.param(AES1, n(slot("s0", bitstream="aes", healthy=False)), 0, id="loaded-but-unhealthy"),
    pytest.param(AES1, n(slot("s0", platform=N3K)), 0, id="only-other-platform"),
    pytest.param(demand(("main", 1, "zzz")), n(slot("s0")), 0, id="not-in-catalog"),
    pytest.param(AES2, n(slot("s0", bitstream="aes")), 0, id="two-wanted-one-free"),
    pytest.param(AES2, n(slot("s0", bitstream="aes"), slot("s1")), 9, id="one-loaded-one-empty"),
    pytest.param(AES2, n(slot("s0", bitstream="aes"), slot("s1", bitstream="aes")), 10, id="two-loaded"),
    pytest.param(
        demand(("a", 1, "aes"), ("b", 1, "sha")),
        n(slot("s0", bitstream="aes"), slot("s1", bitstream="aes")),
        9,
        id="spare-copy-is-evicted-not-the-hit",
    ),
    pytest.param(
        demand(("a", 1, "aes"), ("b", 1, "sha")), n(slot("s0", bitstream="aes")), 0, id="the-hit-is-not-evicted"
    ),
    pytest.param(demand(("a", 1, "aes"), ("b", 1, None)), n(slot("s0", bitstream="aes")), 0, id="no-room-for-unnamed"),
    pytest.param(
        demand(("a", 1, "aes"), ("b", 1, None)),
        n(slot("s0", bitstream="aes"), slot("s1", platform=N3K)),
        10,
        id="unnamed-takes-any-platform",
    ),
    pytest.param(
        demand(("main", 1, "aes"), ("init", 2, "aes", True)),
        n(slot("s0", bitstream="aes"), slot("s1")),
        9,
        id="init-peak",
    ),
    pytest.param(AES1, n(slot("s0", platform=N3K), bitstreams={"aes": N3K}), 7, id="platform-per-node-catalog"),
]


@pytest.mark.parametrize(("pod", "state", "score"), SCORE_CASES)
def test_score(pod: PodDemand, state: NodeSlots | None, score: int) -> None:
    assert score_node(pod, state, W, NOW) == score


@pytest.mark.parametrize(
    ("recency_s", "keep", "score"),
    [
        pytest.param(None, 0.0, 7, id="never-used-nobody-wants-it-as-cheap-as-empty"),
        pytest.param(None, 1.0, 4, id="never-used-last-copy-of-a-popular-one"),
        pytest.param(None, 0.5, 6, id="never-used-half-wanted"),
        pytest.param(0, 0.0, 1, id="just-used-no-cluster-value-recency-alone"),
        pytest.param(0, 1.0, 1, id="just-used-and-wanted-worth-evict"),
        pytest.param(LRU_HORIZON_S / 2, 0.5, 4, id="half-and-half"),
    ],
)
def test_overwriting_costs_by_recency_and_cluster_value(recency_s: float | None, keep: float, score: int) -> None:
    """A loaded free slot scores empty - (empty - evict) x the mean of its recency and its cluster value."""
    last_used = None if recency_s is None else used(recency_s)
    state = n(slot("s0", bitstream="sha", last_used=last_used))
    assert score_node(AES1, state, W, NOW, {"sha": keep} if keep else {}) == score


def test_the_slot_least_worth_keeping_is_overwritten() -> None:
    state = n(slot("s0", bitstream="sha"), slot("s1", bitstream="fft"))
    assert score_node(AES1, state, W, NOW, {"sha": 1.0, "fft": 0.2}) == 6  # fft: 7 - 6 x 0.1
    assert score_node(AES1, state, W, NOW, {"sha": 0.2, "fft": 1.0}) == 6
    assert score_node(AES1, state, W, NOW, {"sha": 1.0, "fft": 1.0}) == 4
    two = demand(("main", 2, "aes"))
    assert score_node(two, state, W, NOW, {"sha": 1.0, "fft": 0.0}) == 6  # (4 + 7) / 2 = 5.5


@pytest.mark.parametrize(
    ("weights", "scores"),
    [
        pytest.param(ScoreWeights(), (10, 7, 1, 0, 5), id="defaults"),
        pytest.param(ScoreWeights(loaded=9, empty=9, evict=9, neutral=0), (9, 9, 9, 0, 0), id="flat"),
        pytest.param(ScoreWeights(loaded=10, empty=1, evict=0, neutral=10), (10, 1, 0, 0, 10), id="avoid-eviction"),
    ],
)
def test_weights_set_the_slot_values(weights: ScoreWeights, scores: tuple[int, ...]) -> None:
    states = [
        n(slot("s0", bitstream="aes")),
        n(slot("s0")),
        n(slot("s0", bitstream="sha", last_used=used(0))),  # just used, and the cluster wants it: worth `evict`
        n(slot("s0", free=False)),
        None,
    ]
    assert tuple(score_node(AES1, s, weights, NOW, {"sha": 1.0}) for s in states) == scores


_slot_strategy = st.builds(
    lambda i, platform, bitstream, free, healthy, last_used: slot(
        f"s{i}", platform=platform, bitstream=bitstream, free=free, healthy=healthy, last_used=last_used
    ),
    st.integers(0, 10_000),
    st.sampled_from([PAC, N3K]),
    st.sampled_from([None, "aes", "sha", "fft", "other"]),
    st.booleans(),
    st.booleans(),
    st.one_of(st.none(), st.integers(NOW - 10 * 3600, NOW)),
)


def _unique(slots: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return list({s["id"]: s for s in slots}.values())


@given(
    st.lists(_slot_strategy, max_size=12).map(_unique),
    st.lists(st.tuples(st.sampled_from(["aes", "sha", "fft", None]), st.integers(0, 4)), min_size=1, max_size=3),
)
def test_scores_stay_in_range_and_a_node_that_fails_the_filter_scores_zero(
    slots: list[dict[str, Any]], containers: list[tuple[str | None, int]]
) -> None:
    pod = demand(*[(f"c{i}", count, bitstream) for i, (bitstream, count) in enumerate(containers)])
    state = node("n", slots, CATALOG)
    score = score_node(pod, state, W, NOW)
    assert 0 <= score <= 10
    if pod.by_bitstream and check_node(pod, state) is not None:
        assert score == 0
    if not pod.by_bitstream:
        assert score == W.neutral


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", ScoreWeights(), id="empty-is-defaults"),
        pytest.param("loaded=9", ScoreWeights(loaded=9), id="one-key"),
        pytest.param(" loaded = 8 , evict=1,neutral=0", ScoreWeights(loaded=8, evict=1, neutral=0), id="spaces"),
        pytest.param(str(ScoreWeights(3, 2, 1, 0)), ScoreWeights(3, 2, 1, 0), id="round-trip"),
    ],
)
def test_parse_score_weights(text: str, expected: ScoreWeights) -> None:
    assert parse_score_weights(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("loaded", "key=value pairs", id="no-value"),
        pytest.param("hit=3", "key=value pairs", id="unknown-key"),
        pytest.param("loaded=x", "loaded must be an integer", id="not-integer"),
        pytest.param("evict=11", "evict must be an integer from 0 to 10", id="too-large"),
        pytest.param("empty=-1", "empty must be an integer from 0 to 10", id="negative"),
        pytest.param("loaded=1,loaded=2", "loaded is given twice", id="twice"),
    ],
)
def test_parse_score_weights_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_score_weights(text)


def test_a_declared_bitstream_a_node_lacks_scores_one_below_having_the_file_and_passes_the_filter() -> None:
    declared = {"aes": PAC, "new": PAC, "other-platform": N3K}
    has_file = node("a", [slot("s0")], {"aes": PAC, "new": PAC}).declaring(declared)
    must_pull = node("b", [slot("s0")], {"aes": PAC}).declaring(declared)
    loaded_but_no_file = node("c", [slot("s0", bitstream="new")], {"aes": PAC}).declaring(declared)
    assert must_pull.downloads == {"new"}  # not other-platform: the node has no n3000 slot; not aes: it has it
    assert (must_pull.bitstreams["new"], must_pull.catalog) == (PAC, {"aes": PAC})
    pod = demand(("main", 1, "new"))
    scores = {n.name: score_node(pod, n, W, NOW) for n in (has_file, must_pull, loaded_but_no_file)}
    assert scores == {"a": W.empty, "b": W.empty - DOWNLOAD_PENALTY, "c": W.loaded - DOWNLOAD_PENALTY}
    assert check_node(pod, must_pull) is None  # it can pull the file: not filtered out
    undeclared = node("d", [slot("s0")], {"aes": PAC}).declaring({})
    assert check_node(pod, undeclared) == 'the node\'s catalog has no bitstream "new"'
    assert score_node(pod, undeclared, W, NOW) == 0
    assert must_pull.declaring(declared) is must_pull  # the same declarations: the same state
    assert must_pull.declaring({}).downloads == frozenset()  # withdrawn: the node's own catalog again

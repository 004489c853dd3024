"""DRA pods are scored by the slots the scheduler's allocator takes: a cache hit, else the first free slots in
the agent's slice order (empty, then least recently used, then by ID), valued as the extender values a victim."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from agent.extender.demand import DraRequest, PodDemand
from agent.extender.drascoring import dra_allocation, score_dra
from agent.extender.nodestate import NodeSlots, WatchedNode
from agent.extender.ranking import Scorer
from agent.extender.scoring import LRU_HORIZON_S, ScoreWeights, score_node
from agent.extender.table import StateTable
from tests.unit.extender.factories import N3K, PAC, demand, node, slot

NOW = 1_000_000_020.0  # a multiple of the scoring clock step (60 s), so that ages are exact
W = ScoreWeights()
#: Three bitstreams of one platform, one of another.
CATALOG = {"aes": PAC, "sha": PAC, "gz": PAC, "fft": N3K}
#: sha is wanted again soon by the cluster (the last free copy of a popular bitstream); gz by nobody.
KEEP = {"sha": 1.0}


def dra(*requests: tuple[str, int]) -> PodDemand:
    return PodDemand.of_claims("default/p", requests)


def n(*slots: Mapping[str, Any], name: str = "n") -> NodeSlots:
    return node(name, list(slots), CATALOG)


def ago(seconds: float) -> int:
    return int(NOW - seconds)


def taken(requests: tuple[tuple[str, int], ...], state: NodeSlots, promised: int = 0) -> list[str] | None:
    allocation = dra_allocation(requests, state, promised)
    return None if allocation is None else [s["id"] for s, _ in allocation]


@pytest.mark.parametrize(
    ("slots", "requests", "expected"),
    [
        pytest.param(
            [slot("s0", bitstream="sha", last_used=ago(10)), slot("s1", bitstream="aes", last_used=ago(5))],
            (("aes", 1),),
            ["s1"],
            id="a-free-copy-is-taken",
        ),
        pytest.param(
            [slot("s2", bitstream="sha", last_used=ago(10)), slot("s1"), slot("s0", bitstream="gz", last_used=ago(99))],
            (("aes", 1),),
            ["s1"],
            id="else-an-empty-slot",
        ),
        pytest.param(
            [slot("s0", bitstream="sha", last_used=ago(10)), slot("s1", bitstream="gz", last_used=ago(99))],
            (("aes", 1),),
            ["s1"],
            id="else-the-least-recently-used",
        ),
        pytest.param(
            [slot("s1", bitstream="sha", last_used=ago(10)), slot("s0", bitstream="gz", last_used=ago(10))],
            (("aes", 1),),
            ["s0"],
            id="then-by-slot-id",
        ),
        pytest.param(
            [slot("s0", platform=N3K), slot("s1", bitstream="gz", last_used=ago(9))],
            (("aes", 1),),
            ["s1"],
            id="only-slots-of-the-bitstreams-platform",
        ),
        pytest.param(
            [
                slot("s0"),
                slot("s1", bitstream="sha", last_used=ago(2000)),
                slot("s2", bitstream="aes", last_used=ago(5)),
            ],
            (("aes", 2),),
            ["s0", "s1"],
            id="too-few-copies-then-the-first-two-in-order-whatever-they-hold",
        ),
        pytest.param(
            [slot("s0", bitstream="aes", last_used=ago(9)), slot("s1"), slot("s2", bitstream="aes", last_used=ago(5))],
            (("aes", 2), ("sha", 1)),
            ["s0", "s2", "s1"],
            id="each-request-in-turn-from-what-is-left",
        ),
        pytest.param(
            [slot("s0", bitstream="aes", free=False), slot("s1", healthy=False), slot("s2", bitstream="gz")],
            (("aes", 1),),
            ["s2"],
            id="held-and-unhealthy-slots-are-not-free",
        ),
        pytest.param([slot("s0"), slot("s1", free=False)], (("aes", 2),), None, id="too-few-free-slots"),
        pytest.param([slot("s0")], (("nope", 1),), None, id="the-catalog-lacks-it"),
    ],
)
def test_the_slots_the_allocator_takes(
    slots: list[dict[str, Any]], requests: tuple[tuple[str, int], ...], expected: list[str] | None
) -> None:
    assert taken(requests, n(*slots)) == expected


def test_a_cached_node_scores_highest_then_an_empty_slot_then_an_overwrite_by_its_value() -> None:
    pod = dra(("aes", 1))
    cached = n(slot("s0", bitstream="aes", last_used=ago(5)), slot("s1"))
    empty = n(slot("s0", bitstream="sha", last_used=ago(5)), slot("s1"))
    stale = n(slot("s0", bitstream="gz", last_used=ago(2 * LRU_HORIZON_S)))
    popular = n(slot("s0", bitstream="sha", last_used=ago(60)))
    scores = [score_dra(pod, state, W, NOW, KEEP) for state in (cached, empty, stale, popular)]
    assert scores == [W.loaded, W.empty, W.empty, W.evict]


def test_the_first_free_slot_in_order_decides_not_the_cheapest() -> None:
    """An old copy of a popular bitstream comes before a recent copy of one nobody wants: the allocator overwrites
    the old one, so the node scores what that costs (a device-plugin pod would get the cheaper slot)."""
    state = n(slot("s0", bitstream="sha", last_used=ago(1800)), slot("s1", bitstream="gz", last_used=ago(120)))
    assert taken((("aes", 1),), state) == ["s0"]
    # sha: recency 0.5, cluster value 1: 7 - 6 x (0.25 + 0.5) = 2.5 -> 3; gz: 7 - 6 x 0.483 = 4.1 -> 4
    assert score_dra(dra(("aes", 1)), state, W, NOW, KEEP) == 3
    assert score_node(demand(("main", 1, "aes")), state, W, NOW, KEEP) == 4


def test_a_node_whose_first_free_slot_holds_a_popular_bitstream_scores_below_one_whose_first_is_empty() -> None:
    pod = dra(("aes", 1))
    popular_first = n(slot("s0", bitstream="sha", last_used=ago(300)), slot("s1", bitstream="gz", last_used=ago(600)))
    empty_first = n(slot("s0", bitstream="sha", last_used=ago(300)), slot("s9"))
    assert taken((("aes", 1),), popular_first) == ["s1"]  # gz is older: first in order, nobody wants it
    popular_oldest = n(slot("s0", bitstream="sha", last_used=ago(900)), slot("s1", bitstream="gz", last_used=ago(60)))
    assert score_dra(pod, popular_oldest, W, NOW, KEEP) < score_dra(pod, empty_first, W, NOW, KEEP) == W.empty
    assert score_dra(pod, popular_oldest, W, NOW, KEEP) < score_dra(pod, popular_first, W, NOW, KEEP)


def test_a_multi_slot_pod_scores_the_mean_of_its_slots() -> None:
    state = n(
        slot("s0"),
        slot("s1", bitstream="gz", last_used=ago(2 * LRU_HORIZON_S)),
        slot("s2", bitstream="aes", last_used=ago(5)),
    )
    # Two aes slots, one copy free: the allocator takes s0 (empty, 7) and s1 (gz, nobody wants it: 7)
    assert score_dra(dra(("aes", 2)), state, W, NOW, KEEP) == W.empty
    busy = n(slot("s0"), slot("s1", bitstream="sha", last_used=ago(10)), slot("s2", bitstream="aes", last_used=ago(5)))
    # s0 (7) and s1 (sha, just used and wanted: about 1): (7 + 1.01) / 2 -> 4
    assert score_dra(dra(("aes", 2)), busy, W, NOW, KEEP) == 4
    assert score_dra(dra(("aes", 4)), busy, W, NOW, KEEP) == 0  # three free slots only


def test_unknown_content_first_in_order_is_valued_by_its_recency() -> None:
    state = n(slot("s0", accelerator="acc-unknown", last_used=ago(100)), slot("s1", last_used=ago(10)))
    assert taken((("aes", 1),), state) == ["s0"]  # unknown content sorts with the empty slots, by last use
    assert score_dra(dra(("aes", 1)), state, W, NOW, KEEP) == 4  # 7 - 6 x 0.5 x 0.972


def test_nothing_known_is_neutral() -> None:
    assert score_dra(dra(("aes", 1)), None, W, NOW) == W.neutral
    assert score_dra(dra(), n(slot("s0")), W, NOW) == W.neutral


def test_promised_copies_are_taken_off_first() -> None:
    state = n(
        slot("s0", bitstream="aes", last_used=ago(5)), slot("s1", bitstream="gz", last_used=ago(2 * LRU_HORIZON_S))
    )
    assert taken((("aes", 1),), state, promised=1) == ["s1"]
    assert score_dra(dra(("aes", 1)), state, W, NOW, KEEP, promised=1) == W.empty
    assert score_dra(dra(("aes", 1)), state, W, NOW, KEEP) == W.loaded


def test_a_one_slot_dra_pod_is_promised_its_copy_on_the_score_board() -> None:
    """Two DRA pods of one bitstream in a row: the first is sent to the node with the free copy, the second is
    scored as if that copy were gone (the allocator gives it to the first pod's claim)."""
    cache = cluster(
        n(slot("a0", bitstream="aes", last_used=ago(5)), slot("a1", free=False), name="a"),
        n(slot("b0"), slot("b1", free=False), name="b"),
        n(slot("c0", bitstream="sha", last_used=ago(30)), slot("c1", free=False), name="c"),
    )
    board = Scorer(W)
    names = ["a", "b", "c"]
    first = board.prioritize(cache, replace(dra(("aes", 1)), pod="default/p1"), names, NOW)
    assert first[0][0] == "a"
    second = dict(board.prioritize(cache, replace(dra(("aes", 1)), pod="default/p2"), names, NOW))
    assert max(second, key=second.__getitem__) == "b"  # a's copy is promised: an empty slot is best now


def cluster(*states: NodeSlots) -> StateTable:
    cache = StateTable()
    cache.replace_watched([WatchedNode(state.name, state) for state in states])
    return cache


@pytest.mark.parametrize("count", [1, 2], ids=["one-slot-from-the-index", "two-slots-scored-per-name"])
def test_when_every_node_scores_alike_a_dra_answer_still_lists_the_best_packed(count: int) -> None:
    """No node holds the bitstream and each would program empty slots (all score ``empty``): kube-scheduler's
    DRA profile has no plugin that packs slots, so the answer lists the fullest node (at 1) rather than none."""
    some = n(slot("s0"), slot("s1"), slot("s2"), slot("s3", free=False), name="some")
    idle = n(slot("i0"), slot("i1"), slot("i2"), slot("i3"), name="idle")
    most = n(slot("m0"), slot("m1"), *(slot(f"m{i}", free=False) for i in (2, 3, 4)), name="most")
    cache = cluster(some, idle, most)
    pod = dra(("aes", count))
    names = ["idle", "some", "most"]
    assert [cache.nodes[name].packing(count) for name in names] == [25 * count, 25 + 25 * count, 60 + 20 * count]
    assert {score_dra(pod, cache.nodes[name], W, NOW) for name in names} == {W.empty}
    assert Scorer(W).prioritize(cache, pod, names, NOW) == [("most", 1)]


def test_when_every_node_scores_and_packs_alike_a_dra_answer_lists_none() -> None:
    cache = cluster(*(n(slot(f"{name}0"), slot(f"{name}1", free=False), name=name) for name in ("a", "b")))
    assert Scorer(W).prioritize(cache, dra(("aes", 1)), ["a", "b"], NOW) == []


def test_a_device_plugin_pod_scored_alike_everywhere_is_left_to_the_profiles_packing() -> None:
    """The same cluster for a device-plugin pod: NodeResourcesFit (MostAllocated) packs, the answer lists none."""
    half = n(slot("h0"), slot("h1"), slot("h2", free=False), slot("h3", free=False), name="half")
    idle = n(slot("i0"), slot("i1"), slot("i2"), slot("i3"), name="idle")
    cache = cluster(half, idle)
    for count in (1, 2):
        pod = demand(("main", count, "aes"))
        assert Scorer(W).prioritize(cache, pod, ["idle", "half"], NOW) == []


def whole_cards(bitstream: str, cards: int = 1) -> PodDemand:
    return PodDemand.of_claims("default/p", [DraRequest(bitstream, cards, whole_card=True)])


def test_a_whole_card_request_takes_every_slot_of_a_card_whose_slots_are_all_free_a_loaded_card_first() -> None:
    state = n(
        slot("a0", card="ca"),
        slot("a1", card="ca", free=False),  # one slot held: card ca is not whole
        slot("b0", card="cb"),
        slot("b1", card="cb"),
        slot("c0", card="cc", bitstream="aes", last_used=ago(50)),
        slot("c1", card="cc", bitstream="aes", last_used=ago(50)),
    )
    allocation = dra_allocation([DraRequest("aes", 1, whole_card=True)], state)
    assert allocation is not None
    assert sorted(s["id"] for s, _ in allocation) == ["c0", "c1"]  # the card holding the image: a cache hit
    assert score_dra(whole_cards("aes"), state, W, NOW) == W.loaded
    other = dra_allocation([DraRequest("sha", 1, whole_card=True)], state)
    assert [s["id"] for s, _ in other or []] == ["b0", "b1"]  # no card holds it: the first whole card
    assert dra_allocation([DraRequest("aes", 3, whole_card=True)], state) is None  # two whole cards only


def test_a_node_with_no_whole_free_card_scores_zero_for_a_card_pod() -> None:
    state = n(slot("a0", card="ca"), slot("a1", card="ca", free=False), slot("b0", card="cb", healthy=False))
    assert score_dra(whole_cards("aes"), state, W, NOW) == 0
    assert score_dra(dra(("aes", 1)), state, W, NOW) > 0  # a slot pod still fits

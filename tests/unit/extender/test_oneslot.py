"""The one-slot index answers as scoring every name, shifting to the floor and keeping the best entries does,
and says when it cannot."""

from __future__ import annotations

import random

import pytest

from agent.extender import NodeCache, PodDemand, ScoreWeights, WatchedNode
from agent.extender.drascoring import prioritize_dra
from agent.extender.facts import STEP_S, ClusterFacts
from agent.extender.oneslot import OneSlotIndex
from agent.extender.ranking import ScoreBoard, reported
from agent.extender.scoring import CLOCK_STEP_S, LRU_HORIZON_S, prioritize_nodes
from tests.unit.extender.factories import (
    CATALOG,
    N3K,
    PAC,
    demand,
    expected_answer,
    node,
    random_node,
    request_names,
    slot,
)

NOW = 1_800_000_000.0
WEIGHTS = [
    ScoreWeights(),
    ScoreWeights(loaded=9, empty=3, evict=6, neutral=0),
    ScoreWeights(loaded=2, empty=8),
    ScoreWeights(loaded=0, empty=1, evict=0, neutral=1),  # a download penalty takes a copy below 0: clamped
]
#: Catalogs that agree on every bitstream they share ("big" adds one the others lack).
AGREEING = [CATALOG, CATALOG, {**CATALOG, "big": PAC}]


@pytest.mark.parametrize(
    ("dra", "from_body"),
    [(False, False), (False, True), (True, False)],
    ids=["device-plugin", "device-plugin-from-body", "dra"],
)
@pytest.mark.parametrize("seed", range(16))
def test_answers_equal_scoring_every_name_through_changes(seed: int, dra: bool, from_body: bool) -> None:
    """Node updates, deletions, relists, declarations, clock steps and new cluster values: the index
    follows them all and answers exactly the per-name scores, shifted, the best ``limit`` of them (ties
    broken by packing, then by the order asked); it answers most calls itself. ``from_body``: the names are
    read from a request's bytes by the compiled reader (``agent.extender.sample``), the tops it names too."""
    rng = random.Random(seed)
    weights = WEIGHTS[seed % len(WEIGHTS)]
    names = [f"node-{i}" for i in range(40)]
    cache, index, facts = NodeCache(), OneSlotIndex(weights), ClusterFacts()
    now = NOW
    catalogs = [CATALOG] if seed % 2 else AGREEING
    bare = WatchedNode("no-agent", None)  # a node whose agent never published
    cache.replace([*(random_node(rng, name, now, catalogs, dra) for name in names), bare])
    answered = 0
    for _ in range(300):
        action = rng.random()
        if action < 0.3:
            cache.apply("MODIFIED", random_node(rng, rng.choice(names), now, catalogs, dra))
        elif action < 0.33:
            gone = rng.choice(names)
            cache.apply("DELETED", WatchedNode(gone, None))
            cache.apply("ADDED", random_node(rng, gone, now, catalogs, dra))
        elif action < 0.35:
            cache.replace([*(random_node(rng, name, now, catalogs, dra) for name in names), bare])
        elif action < 0.37:
            cache.set_declared(rng.choice([{}, {"big": PAC}]))
        elif action < 0.45:
            now += rng.choice([1.0, STEP_S, CLOCK_STEP_S, LRU_HORIZON_S / 4])
        bitstream = rng.choice([*CATALOG, "big", "unknown-to-all"])
        facts.note_request(bitstream)
        keep = facts.keep_values(cache.nodes.values(), now)
        asked = rng.sample(names, rng.randint(1, len(names))) + (["no-agent"] if rng.random() < 0.2 else [])
        if rng.random() < 0.1:
            asked.append(rng.choice(asked))  # a name twice (kube-scheduler never sends one; it must not matter)
        limit = rng.choice([0, 1, 3, 8])
        known = reported(cache, asked)  # a name asked twice counts once; one no node has is left out
        if dra:  # a one-slot DRA pod: the first free slot in slice order is the one taken
            answer = index.prioritize(cache, bitstream, asked, keep, facts.version, now, limit, dra=lambda _n: 0)
            pod = PodDemand.of_claims("default/p", [(bitstream, 1)])
            scores = prioritize_dra(pod, known, cache.lookup(), weights, now, keep, facts.version)
            expected = expected_answer(scores, pod, cache.lookup(), limit, pack_ties=True)
        else:
            tops: list[str] = []
            version = facts.version
            given = request_names(asked) if from_body else asked
            answer = index.prioritize(cache, bitstream, given, keep, version, now, limit, tops=tops)
            if from_body and answer is not None:  # the same answer and tops as from the names as strings
                strings_tops: list[str] = []
                strings = index.prioritize(cache, bitstream, asked, keep, version, now, limit, tops=strings_tops)
                assert strings is not None
                assert sorted(strings) == sorted(answer)
                assert sorted(tops) == sorted(strings_tops)  # the node a promise goes to is chosen from these
            pod = demand(("main", 1, bitstream))
            scores = prioritize_nodes(pod, known, cache.lookup(), weights, now, keep, facts.version)
            expected = expected_answer(scores, pod, cache.lookup(), limit)
        if answer is not None:
            answered += 1  # the same scores (kube-scheduler sums them per node: the order is not read)
            assert sorted(answer) == sorted(expected)
    # not when a node without published state is asked (per name: neutral), nor (DRA) for a bitstream no node has
    assert answered > (100 if dra else 150)
    assert facts.version > 1


def test_catalogs_that_disagree_about_the_bitstream_leave_it_to_per_name_scoring() -> None:
    cache = NodeCache()
    cache.replace(
        [
            WatchedNode("a", node("a", [slot("s0")], {"aes": PAC})),
            WatchedNode("b", node("b", [slot("s0")], {"aes": N3K})),  # the same name, another platform
            WatchedNode("c", node("c", [slot("s0")], {"sha": PAC})),
        ]
    )
    index = OneSlotIndex(ScoreWeights())
    assert index.prioritize(cache, "aes", ["a", "b", "c"], {}, 0, NOW, 16) is None
    assert index.prioritize(cache, "sha", ["a"], {}, 0, NOW, 16) is None  # a lacks it, c has it
    cache.apply("MODIFIED", WatchedNode("b", node("b", [slot("s0")], {"aes": PAC})))
    cache.apply("DELETED", WatchedNode("c", None))
    assert (index.prioritize(cache, "aes", ["a", "b"], {}, 0, NOW, 16)) == []  # both empty: 7 and 7
    cache.apply("ADDED", WatchedNode("d", node("d", [slot("s0")], {"aes": N3K})))  # a new catalog disagrees
    assert index.prioritize(cache, "aes", ["a", "b"], {}, 0, NOW, 16) is None


def test_a_node_without_published_state_is_left_to_per_name_scoring_and_scores_neutral_there() -> None:
    """A node the watch reported without state (no agent, or its agent gone), anywhere in the list: the index
    does not answer (the board scores per name, the node neutral). A name never reported scores the floor."""
    cache = NodeCache()
    cache.replace(
        [
            WatchedNode("a", node("a", [slot("s0", bitstream="aes")])),  # a copy: 10
            WatchedNode("b", node("b", [slot("s0")])),  # empty: 7
            WatchedNode("bare", None),
        ]
    )
    index = OneSlotIndex(ScoreWeights())
    long = ["a", "b"] * 100 + ["bare"]
    assert index.prioritize(cache, "aes", long, {}, 0, NOW, 16) is None
    board = ScoreBoard(ScoreWeights(), promises=False)
    assert sorted(board.prioritize(cache, demand(("main", 1, "aes")), ["a", "b", "bare"], cache.lookup(), NOW)) == [
        ("a", 5),
        ("b", 2),
    ]  # 10, 7 and neutral 5, shifted
    assert sorted(index.prioritize(cache, "aes", ["a", "b", "stranger"], {}, 0, NOW, 16) or []) == [("a", 3)]
    cache.apply("MODIFIED", WatchedNode("bare", node("bare", [slot("s0")])))  # its agent publishes: now indexed
    assert sorted(index.prioritize(cache, "aes", long, {}, 0, NOW, 16) or []) == [("a", 3)]
    cache.apply("MODIFIED", WatchedNode("b", None))  # b's agent withdrew its state: b is neutral again
    assert index.prioritize(cache, "aes", ["a", "b"], {}, 0, NOW, 16) is None
    cache.apply("DELETED", WatchedNode("b", None))  # gone from the cluster
    assert index.prioritize(cache, "aes", ["a", "bare"], {}, 0, NOW, 16) == [("a", 3)]


def test_a_bitstream_no_node_can_program_scores_zero_everywhere() -> None:
    cache = NodeCache()
    cache.replace([WatchedNode(n, node(n, [slot("s0", bitstream="aes")])) for n in ("a", "b")])
    assert (OneSlotIndex(ScoreWeights()).prioritize(cache, "nope", ["a", "b"], {}, 0, NOW, 16)) == []


def test_a_failure_while_following_the_cache_makes_the_next_call_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    import agent.extender.oneslot as oneslot

    cache = NodeCache()
    cache.replace([WatchedNode(n, node(n, [slot("s0")])) for n in ("a", "b")])
    index = OneSlotIndex(ScoreWeights())
    assert (index.prioritize(cache, "aes", ["a", "b"], {}, 0, NOW, 16)) == []
    real = oneslot.base_score

    def broken(*args: object, **kwargs: object) -> int:
        raise RuntimeError("bug")

    monkeypatch.setattr(oneslot, "base_score", broken)
    cache.apply("MODIFIED", WatchedNode("a", node("a", [slot("s0", bitstream="aes")])))
    with pytest.raises(RuntimeError):
        index.prioritize(cache, "aes", ["a", "b"], {}, 0, NOW, 16)
    monkeypatch.setattr(oneslot, "base_score", real)
    # "a" was taken out before the failure: without the rebuild it would be unknown, and b would stand alone
    assert (index.prioritize(cache, "aes", ["a", "b"], {}, 0, NOW, 16)) == [("a", 3)]


def test_with_loaded_below_empty_the_nodes_at_the_lowest_base_are_the_ones_listed() -> None:
    cache = NodeCache()
    cache.replace(
        [
            WatchedNode("a", node("a", [slot("s0"), slot("s1", bitstream="aes")])),  # a copy: loaded = 2
            WatchedNode("b", node("b", [slot("s0")])),  # empty: 8, the lowest base, as a's
        ]
    )
    index = OneSlotIndex(ScoreWeights(loaded=2, empty=8))
    assert (index.prioritize(cache, "aes", ["a", "b"], {}, 0, NOW, 16)) == [("b", 6)]


def test_a_download_penalty_that_takes_a_base_to_zero_leaves_that_node_out_as_the_floor() -> None:
    cache = NodeCache()
    cache.replace(
        [
            WatchedNode("held", node("held", [slot("s0", free=False)])),  # base 0
            WatchedNode("busy", node("busy", [slot("s0", bitstream="aes", last_used=int(NOW))])),  # base 1
            WatchedNode("empty", node("empty", [slot("s0")])),  # base 7
        ]
    )
    cache.set_declared({"new": PAC})  # nobody has its file: one point off everywhere, 0 at least
    answer = OneSlotIndex(ScoreWeights()).prioritize(cache, "new", ["held", "busy", "empty"], {"aes": 1.0}, 1, NOW, 16)
    assert answer is not None
    assert (answer) == [("empty", 6)]


def test_a_dense_answer_keeps_the_best_nodes_by_score_then_packing_then_order() -> None:
    """Six nodes stand out above the floor; with a limit of three the answer keeps the copy holder, then
    of the empty ones the fullest, then the first asked, and the others score the floor (left out)."""
    cache = NodeCache()
    held = slot("h", free=False)
    cache.replace(
        [
            WatchedNode("low", node("low", [slot("s0", bitstream="sha", last_used=int(NOW))])),  # base 1: floor
            WatchedNode("copy", node("copy", [slot("s0", bitstream="aes"), slot("s1")])),  # 10
            WatchedNode("half", node("half", [slot("s0"), held])),  # 7, packing 100
            WatchedNode("e1", node("e1", [slot("s0"), slot("s1")])),  # 7, packing 50
            WatchedNode("e2", node("e2", [slot("s0"), slot("s1")])),
            WatchedNode("e3", node("e3", [slot("s0"), slot("s1")])),
            WatchedNode("e4", node("e4", [slot("s0"), slot("s1")])),
        ]
    )
    index = OneSlotIndex(ScoreWeights())
    asked = ["e3", "low", "e1", "half", "e2", "copy", "e4"]
    answer = index.prioritize(cache, "aes", asked, {"sha": 1.0}, 1, NOW, 3)
    assert dict(answer or []) == {"copy": 9, "half": 6, "e3": 6}
    assert len(index.prioritize(cache, "aes", asked, {"sha": 1.0}, 1, NOW, 0) or []) == 6  # 0: no limit

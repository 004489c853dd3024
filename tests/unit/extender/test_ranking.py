"""The score board answers as the per-call scoring did, shifted to the floor, on random clusters that change."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from agent.extender import NodeCache, PodDemand, ScoreWeights, WatchedNode
from agent.extender.facts import STEP_S, ClusterFacts
from agent.extender.ranking import RANK_SCALE, ScoreBoard, best_ranked, reported
from agent.extender.scoring import CLOCK_STEP_S, LRU_HORIZON_S, prioritize_nodes
from tests.unit.extender.factories import CATALOG, N3K, PAC, demand, expected_answer, node, slot

NOW = 1_800_000_000.0
BITSTREAMS = [*CATALOG, "unknown-to-all", "declared-only"]
#: What the cluster may declare: the catalog's bitstreams, and one no node holds.
DECLARABLE = {**CATALOG, "declared-only": PAC}
WEIGHTS = [ScoreWeights(), ScoreWeights(loaded=9, empty=3, evict=6, neutral=0), ScoreWeights(neutral=10)]


def random_node(rng: random.Random, name: str, now: float) -> WatchedNode:
    if rng.random() < 0.1:
        return WatchedNode(name, None)  # no published state
    slots = [
        slot(
            f"s{i}",
            platform=rng.choice([PAC, PAC, N3K]),
            bitstream=rng.choice([None, None, *CATALOG]),
            free=rng.random() < 0.7,
            healthy=rng.random() < 0.9,
            last_used=rng.choice([None, int(now - rng.uniform(0, 2 * LRU_HORIZON_S))]),
        )
        for i in range(rng.randint(0, 6))
    ]
    catalog = dict(rng.sample(sorted(CATALOG.items()), rng.randint(0, len(CATALOG))))
    return WatchedNode(name, node(name, slots, catalog, rv=str(rng.random())))


def random_demand(rng: random.Random) -> PodDemand:
    kind = rng.random()
    if kind < 0.1:
        return demand(("main", rng.randint(1, 3), None))
    if kind < 0.25:
        several = [("a", rng.randint(1, 2), rng.choice(BITSTREAMS)), ("b", 1, rng.choice(BITSTREAMS))]
        if rng.random() < 0.4:
            several.append(("any", rng.randint(1, 2), None))
        if rng.random() < 0.3:  # an init container: the pod's request is the larger of it and the app's sum
            return demand(*several, ("init", rng.randint(1, 4), rng.choice([None, *BITSTREAMS]), True))
        return demand(*several)
    containers: list[tuple[str, int, str | None] | tuple[str, int, str | None, bool]] = [
        ("main", rng.randint(1, 4), rng.choice(BITSTREAMS))
    ]
    if rng.random() < 0.3:
        containers.append(("side", rng.randint(1, 2), None))
    if rng.random() < 0.2:
        containers.append(("init", rng.randint(1, 4), None, True))
    pod = demand(*containers)
    # most pods are new; some are the scheduler's retries of one seen before (counted once)
    return replace(pod, pod=f"default/p{rng.randint(0, 400)}")


@pytest.mark.parametrize("seed", range(12))
def test_answers_equal_todays_scores_shifted_to_the_floor(seed: int) -> None:
    """Same ranking as scoring every name per call (the scheduler chooses alike), through node updates,
    deletions, relists and clock steps."""
    rng = random.Random(seed)
    weights = WEIGHTS[seed % len(WEIGHTS)]
    names = [f"node-{i}" for i in range(60)]
    cache = NodeCache()
    now = NOW
    cache.replace(random_node(rng, name, now) for name in names)
    board = ScoreBoard(weights, limit=rng.choice([0, 1, 4, 16]), promises=False)  # scores alone, no promises
    reference, counted = ClusterFacts(), set()
    for _ in range(300):
        action = rng.random()
        if action < 0.3:
            changed = random_node(rng, rng.choice(names), now)
            cache.apply("MODIFIED", changed)
        elif action < 0.35:
            cache.apply("DELETED", WatchedNode(rng.choice(names), None))
        elif action < 0.37:
            cache.replace(random_node(rng, name, now) for name in names)
        elif action < 0.39:  # FpgaBitstream objects come and go: nodes without the file may pull it
            cache.set_declared(dict(rng.sample(sorted(DECLARABLE.items()), rng.randint(0, len(DECLARABLE)))))
        elif action < 0.45:
            now += rng.choice([1.0, STEP_S, CLOCK_STEP_S, LRU_HORIZON_S / 4])
        asked = rng.sample(names, rng.randint(1, len(names))) + (["never-seen"] if rng.random() < 0.3 else [])
        if rng.random() < 0.1:
            asked.append(rng.choice(asked))  # a name twice (kube-scheduler never sends one; it must not matter)
        pod = random_demand(rng)
        keep: dict[str, float] = {}
        if pod.by_bitstream:  # the board counts each pod once and takes the cluster's values as they are now
            if pod.pod not in counted:
                counted.add(pod.pod)
                for bitstream in pod.by_bitstream:
                    reference.note_request(bitstream)
            keep = dict(reference.keep_values(cache.nodes.values(), now))
        known = reported(cache, asked)  # a name asked twice counts once; one no node has is left out
        scores = prioritize_nodes(pod, known, cache.lookup(), weights, now, keep, reference.version)
        expected = expected_answer(scores, pod, cache.lookup(), board.limit)
        # the same scores; kube-scheduler sums them per node, so the order of the answer is not read
        assert sorted(board.prioritize(cache, pod, asked, cache.lookup(), now)) == sorted(expected)
    assert reference.version > 1  # the values changed along the way (and the board followed)


def test_an_answer_ranks_by_score_then_packing_then_order() -> None:
    names = ["a", "b", "c", "d", "e"]
    ranks = [score * RANK_SCALE + packing for score, packing in [(7, 50), (7, 100), (7, 50), (10, 0), (4, 100)]]
    assert best_ranked(names, ranks, 2) == [("d", 6), ("b", 3)]  # e is the floor
    assert best_ranked(names, ranks, 3) == [("d", 6), ("b", 3), ("a", 3)]
    assert best_ranked(names, ranks, 0) == [("a", 3), ("b", 3), ("c", 3), ("d", 6)]
    assert sorted(best_ranked(names, ranks, 4)) == [("a", 3), ("b", 3), ("c", 3), ("d", 6)]
    assert best_ranked(names, ranks, 100) == best_ranked(names, ranks, 4)


def test_the_floor_is_left_out_and_packing_alone_does_not_stand_out() -> None:
    names = ["a", "b", "c"]
    assert best_ranked(names, [5 * RANK_SCALE + 100, 5 * RANK_SCALE, 5 * RANK_SCALE + 25], 16) == []
    assert best_ranked(names, [5 * RANK_SCALE + 100, 5 * RANK_SCALE, 5 * RANK_SCALE + 25], 0) == []
    assert best_ranked([], [], 16) == []


def test_with_pack_ties_the_best_packed_stands_out_when_every_name_scores_alike() -> None:
    names = ["a", "b", "c", "d"]
    ranks = [5 * RANK_SCALE + 50, 5 * RANK_SCALE + 100, 5 * RANK_SCALE, 5 * RANK_SCALE + 100]
    assert best_ranked(names, ranks, 1, pack_ties=True) == [("b", 1)]
    assert best_ranked(names, ranks, 16, pack_ties=True) == [("b", 1), ("d", 1)]
    assert best_ranked(names, ranks, 0, pack_ties=True) == [("b", 1), ("d", 1)]
    assert best_ranked(names, ranks, 1, set(ranks), pack_ties=True) == [("b", 1)]
    # packings alike too: nothing stands out
    assert best_ranked(names, [5 * RANK_SCALE + 25] * 4, 1, pack_ties=True) == []
    assert best_ranked(["a"], [3 * RANK_SCALE + 75], 1, pack_ties=True) == []
    # scores apart: the answer is the ordinary one
    spread = [7 * RANK_SCALE + 50, 7 * RANK_SCALE + 100, 4 * RANK_SCALE + 100]
    assert best_ranked(names[:3], spread, 1, pack_ties=True) == best_ranked(names[:3], spread, 1) == [("b", 3)]


def test_a_node_changed_since_the_table_was_built_is_scored_again() -> None:
    cache = NodeCache()
    cache.replace([WatchedNode("a", node("a", [slot("s0")])), WatchedNode("b", node("b", [slot("s0")]))])
    board = ScoreBoard(ScoreWeights())
    pod = demand(("main", 1, "aes"))
    assert (board.prioritize(cache, pod, ["a", "b"], cache.lookup(), NOW)) == []  # both empty: 7 and 7
    cache.apply("MODIFIED", WatchedNode("a", node("a", [slot("s0", bitstream="aes")])))
    assert (board.prioritize(cache, pod, ["a", "b"], cache.lookup(), NOW)) == [("a", 3)]
    cache.apply("MODIFIED", WatchedNode("b", None))  # b's agent withdrew its state
    assert (board.prioritize(cache, pod, ["a", "b"], cache.lookup(), NOW)) == [("a", 5)]  # b: neutral 5
    cache.apply("DELETED", WatchedNode("b", None))  # b is no node any more: left out, a alone is the floor
    assert (board.prioritize(cache, pod, ["a", "b"], cache.lookup(), NOW)) == []


def test_ranks_that_age_with_the_clock_are_worked_out_again_at_each_step() -> None:
    """A node whose free slots were used lately scores higher as they age; the table drops its rank at each
    clock step and ranks it again, while the cluster's values (and with them the rest of the table) stay."""
    cache = NodeCache()
    recent = [slot("s0", bitstream="sha", last_used=int(NOW)), slot("s1", bitstream="sha", last_used=int(NOW))]
    cache.replace(
        [
            WatchedNode("recent", node("recent", recent)),
            WatchedNode("full", node("full", [slot("s0", free=False), slot("s1", free=False)])),  # 0: the floor
            WatchedNode("empty", node("empty", [slot("s0"), slot("s1")])),
        ]
    )
    board = ScoreBoard(ScoreWeights())
    pod = demand(("main", 2, "aes"))  # two slots: the table's path, not the one-slot index
    names = ["recent", "full", "empty"]
    assert dict(board.prioritize(cache, pod, names, cache.lookup(), NOW)) == {"recent": 4, "empty": 7}
    version = board.facts.version
    half = NOW + LRU_HORIZON_S / 2  # used half an hour ago: 7 - 6 * (0.5 * 0.5) = 5.5, rounded up
    assert dict(board.prioritize(cache, pod, names, cache.lookup(), half)) == {"recent": 6, "empty": 7}
    assert dict(board.prioritize(cache, pod, names, cache.lookup(), NOW + 2 * LRU_HORIZON_S)) == {
        "recent": 7,
        "empty": 7,
    }
    assert board.facts.version == version  # the same cluster values throughout: only the clock moved


def test_ties_go_to_the_fuller_node_as_kube_scheduler_counts_the_pods_request() -> None:
    """The pod asks one slot of aes and its init container two of any content: kube-scheduler counts a
    request of 2 (not 3). x (4 slots, all free) and y (6 slots, one held) are then equally full (50), and the
    first asked wins the one place; counted as 3, x would look fuller (75 against 66)."""
    cache = NodeCache()
    cache.replace(
        [
            WatchedNode("x", node("x", [slot(f"s{i}") for i in range(4)])),
            WatchedNode("y", node("y", [slot("h", free=False), *(slot(f"s{i}") for i in range(5))])),
            WatchedNode("z", node("z", [slot("h", free=False)])),  # no room: the floor
        ]
    )
    board = ScoreBoard(ScoreWeights(), limit=1)
    pod = demand(("main", 1, "aes"), ("init", 2, None, True))
    assert board.prioritize(cache, pod, ["y", "x", "z"], cache.lookup(), NOW) == [("y", 7)]
    assert board.prioritize(cache, pod, ["x", "y", "z"], cache.lookup(), NOW) == [("x", 7)]


def test_tables_share_one_string_per_node_name() -> None:
    """Each call's names are new strings: kept as they come, every table would hold its own copy of
    every node's name (tens of MB at 5000 nodes and a hundred kinds of pod). They are interned.
    (Pods of two slots: one-slot pods are answered by the one-slot index, without tables.)"""
    cache = NodeCache()
    cache.replace([WatchedNode(f"node-{i}", node(f"node-{i}", [slot("s0"), slot("s1")])) for i in range(50)])
    board = ScoreBoard(ScoreWeights())
    for bitstream in ("aes", "sha", "fft"):
        fresh_names = ["".join(["node-", str(i)]) for i in range(50)]  # new string objects, as JSON gives them
        board.prioritize(cache, demand(("main", 2, bitstream)), fresh_names, cache.lookup(), NOW)
    tables = list(board._tables.values())
    assert len(tables) == 3
    for name in (f"node-{i}" for i in range(50)):
        keys = [next(key for key in table.ranks if key == name) for table in tables]
        assert keys[0] is keys[1] is keys[2]


class _NotedFacts(ClusterFacts):
    """Cluster facts that also list each pod request they were told of."""

    def __init__(self) -> None:
        super().__init__()
        self.noted: list[str] = []

    def note_request(self, bitstream: str) -> None:
        self.noted.append(bitstream)
        super().note_request(bitstream)


def test_each_pod_is_counted_once_and_the_oldest_forgotten_past_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agent.extender.ranking.COUNTED_PODS", 3)
    facts = _NotedFacts()
    board = ScoreBoard(ScoreWeights(), facts=facts)
    for pod in ("a", "b", "c", "a", "b", "d", "a", "c", "e", "e"):
        board.count(replace(demand(("app", 1, pod.upper())), pod=pod))
    # a, b, c counted; a and b again: remembered; d forgets a; a counted again (forgets b); c remembered; e forgets c
    assert facts.noted == ["A", "B", "C", "D", "A", "E"]
    for pod in ("d", "a", "e"):  # the three remembered
        board.count(replace(demand(("app", 1, pod.upper())), pod=pod))
    assert len(facts.noted) == 6
    for _ in range(5000):  # a long stream of new pods keeps the memory at the limit, oldest out first
        board.count(replace(demand(("app", 1, "X")), pod=f"p{len(facts.noted)}"))
    board.count(replace(demand(("app", 1, "Y")), pod="e"))
    assert facts.noted[-1] == "Y"

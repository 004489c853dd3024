"""Prioritize from names to answer: the one-slot scoring equals the general one, answers by their definition,
and nothing the calls name grows the extender's memory."""

from __future__ import annotations

import random
import tracemalloc
from dataclasses import replace

import pytest

from agent.extender.demand import PodDemand
from agent.extender.ranking import ANSWER_LIMIT, Scorer, node_ranks, one_slot_ranks
from agent.extender.scoring import NO_VALUES, ScoreWeights, score_node
from agent.extender.server import Extender
from agent.extender.table import NodeMemo, StateTable
from agent.extender.wire import encode
from tests.unit.extender.factories import CATALOG, demand, expected_answer, node, random_node, slot

NOW = 1_800_000_000.0
W = ScoreWeights()


def cluster(rng: random.Random, count: int) -> StateTable:
    catalogs = [dict(CATALOG), {"aes": "pac_a10"}, {**CATALOG, "big": "pac_a10"}]
    table = StateTable()
    table.replace({f"n{i}": random_node(rng, f"n{i}", NOW, catalogs).state for i in range(count)})
    table.apply("u1", None)
    return table


@pytest.mark.parametrize("seed", range(5))
def test_the_one_slot_ranks_are_the_general_ranks(seed: int) -> None:
    rng = random.Random(seed)
    table = cluster(rng, 200)
    names = [*rng.sample(sorted(table.nodes), 120), "u1", "never-reported"]
    for bitstream in ("aes", "sha", "fft", "big", "nope"):
        pod = demand(("main", 1, bitstream))
        taken = {name: 1 for name in rng.sample(names[:120], 10)}
        assert one_slot_ranks(bitstream, names, set(names), table, W, NOW, taken) == node_ranks(
            pod, names, table, W, NOW, NO_VALUES, taken
        )


@pytest.mark.parametrize(
    "pod",
    [demand(("main", 1, "aes")), demand(("main", 2, "sha")), demand(("a", 1, "aes"), ("b", 1, "fft"))],
    ids=["one-slot", "two-slots", "two-bitstreams"],
)
def test_the_answer_is_the_shifted_scores_best_first_at_most_the_limit(pod: PodDemand) -> None:
    rng = random.Random(3)
    table = cluster(rng, 100)
    names = sorted(table.nodes)
    answer = Scorer(W, promises=False).prioritize(table, pod, names, NOW)
    scores = [(name, score_node(pod, table.nodes[name], W, NOW)) for name in names]
    assert answer == expected_answer(scores, pod, table.nodes.get, ANSWER_LIMIT)


def test_names_asked_twice_are_answered_once_and_a_node_without_state_scores_neutral() -> None:
    table = cluster(random.Random(1), 20)
    names = sorted(table.nodes)
    pod = demand(("main", 1, "aes"))
    twice = Scorer(W).prioritize(table, pod, [*names, *names, "ghost"], NOW)
    assert twice == Scorer(W).prioritize(table, pod, [*names, "ghost"], NOW)
    listed = [name for name, _ in twice]
    assert len(listed) == len(set(listed))
    table.apply("cannot", node("cannot", [slot("s0")], {}))  # no catalog: cannot program aes, 0
    assert Scorer(W).prioritize(table, pod, ["cannot", "ghost"], NOW) == [("ghost", W.neutral)]


@pytest.mark.parametrize("seed", range(3))
def test_ranks_kept_by_the_state_table_are_the_ranks_computed_again(seed: int) -> None:
    """The table's memo answers as computing every rank anew does, across new states, declarations and time."""
    rng = random.Random(seed)
    table = cluster(rng, 200)
    names = [*rng.sample(sorted(table.nodes), 150), "u1", "never-reported"]
    for step in range(40):
        now = NOW + step * 97.0  # overwrite ranks move with the slots' age: never kept
        if step % 4 == 1:  # a node publishes a new state
            name = rng.choice(names[:150])
            table.apply(name, random_node(rng, name, now, [dict(CATALOG), {"big": "pac_a10"}]).state)
        if step == 20:
            table.set_declared({"pulled": "pac_a10", "big": "pac_a10"})
        asked = rng.sample(names, 120)
        for bitstream in ("aes", "sha", "fft", "big", "pulled", "nope"):
            kept = one_slot_ranks(bitstream, asked, set(asked), table, W, now, {})
            fresh = node_ranks(demand(("main", 1, bitstream)), asked, table, W, now, NO_VALUES, {})
            assert kept == fresh, (step, bitstream)
    assert 0 < len(table.memo) <= 5 * 200  # kept: the known bitstreams' ranks of nodes with state


def test_the_memo_keeps_at_most_its_entries_and_keys_and_forgets_a_node_that_changes() -> None:
    memo = NodeMemo(max_entries=10, max_keys=3)
    for key in "abcd":
        memo.values(key, NOW).update({f"n{i}": i for i in range(4)})
        memo.added(key, 4)
    assert len(memo) == 12  # three keys of 4: the least recently used key went for the fourth
    assert memo.values("a", NOW) == {}
    memo.added("a", 0)
    assert len(memo) == 8  # b went, to make room for a again
    assert memo.values("d", NOW) == {"n0": 0, "n1": 1, "n2": 2, "n3": 3}
    memo.forget("n1")
    assert "n1" not in memo.values("d", NOW)
    assert "n1" not in memo.values("c", NOW)
    assert len(memo) == 8  # what was added counts until its key goes: a dict keeps its size
    memo.values("e", NOW).update({f"m{i}": i for i in range(9)})
    memo.added("e", 9)
    memo.values("f", NOW)  # past 10 entries: the oldest keys go first
    assert len(memo) <= 10
    assert memo.values("e", NOW - 1) == {}  # the clock went back: nothing kept holds
    assert len(memo) == 0


def test_a_clock_going_back_is_ranked_as_at_that_time() -> None:
    """A rank kept as past the LRU horizon is not one any more when the clock steps back (an NTP correction)."""

    def cluster_of_one() -> StateTable:
        table = StateTable()
        table.replace({"n1": node("n1", [slot("s0", bitstream="sha", last_used=int(NOW) - 3600)])})
        return table

    pod, times = demand(("main", 1, "aes")), (NOW, NOW - 1800)
    fresh = [Scorer(W, promises=False).prioritize(cluster_of_one(), pod, ["n1", "ghost"], now) for now in times]
    table, scorer = cluster_of_one(), Scorer(W, promises=False)
    assert [scorer.prioritize(table, pod, ["n1", "ghost"], now) for now in times] == fresh
    assert fresh[0] != fresh[1]


def test_ranks_for_one_call_only_leave_no_memory_in_the_memo() -> None:
    """Nodes without state and ranks that move with time are not kept, and the memo's dicts do not grow with them."""
    table = StateTable()
    recent = int(NOW) - 60  # used a minute ago: its overwrite rank moves with time
    table.replace({f"n{i}": node(f"n{i}", [slot("s0", bitstream="sha", last_used=recent)]) for i in range(20)})
    names = [*table.nodes, *(f"ghost-{i}" for i in range(100_000))]
    scorer = Scorer(W, promises=False)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for bitstream in ("aes", "sha", "fft"):
            scorer.prioritize(table, demand(("main", 1, bitstream)), names, NOW)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(table.memo) == 40  # sha (a free copy) and fft (no slot of its platform) kept; aes moves with time
    assert grown < 256 * 1024, grown


def test_a_hundred_thousand_calls_naming_new_bitstreams_leave_nothing_behind() -> None:
    """The defect: per-bitstream memory was never pruned (50,001 entries after 100k calls of new names)."""
    table = cluster(random.Random(2), 50)
    extender = Extender(table, W, clock=lambda: NOW)
    names = sorted(table.nodes)

    def body(number: int) -> bytes:
        pod = {
            "metadata": {"name": f"p{number}", "namespace": "default", "annotations": {}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"example.com/fpga-slot": "1"}}}]},
        }
        pod["metadata"]["annotations"]["example.com/fpga-bitstream"] = f"new-{number}-" + "x" * 200  # type: ignore[index]
        return encode({"Pod": pod, "NodeNames": names})

    for number in range(1000):  # warm: whatever is made once is made
        assert extender.prioritize(body(number))[0] == 200
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for number in range(1000, 101_000):
            extender.prioritize(body(number))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 1024 * 1024, grown  # well below the 20 MiB the issue allows


def test_the_promises_of_a_hundred_thousand_pods_stay_bounded() -> None:
    table = cluster(random.Random(4), 50)
    scorer = Scorer(W)
    names = sorted(table.nodes)
    pod = demand(("main", 1, "aes"))
    for number in range(30_000):
        scorer.prioritize(table, replace(pod, pod=f"default/p{number}"), names, NOW)
    assert scorer.promises is not None
    assert len(scorer.promises) <= sum(
        n for s in table.nodes.values() for (b, _), n in s.free_loaded.items() if b == "aes"
    )

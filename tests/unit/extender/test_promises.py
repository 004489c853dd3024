"""A free copy is promised to the pod it is offered to: not offered again until the node publishes anew."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from agent.extender import NodeCache, ScoreWeights, WatchedNode
from agent.extender.promises import PROMISE_TTL_S
from agent.extender.ranking import ScoreBoard
from tests.unit.extender.factories import CATALOG, demand, node, random_node, request_names, slot

NOW = 1_800_000_000.0


def cluster() -> NodeCache:
    """a and b each hold aes in one free slot (b is fuller: 2 of 3 slots in use against 1 of 4), c has an empty
    slot, d holds sha."""
    cache = NodeCache()
    cache.replace(
        [
            WatchedNode(
                "a",
                node(
                    "a", [slot("a0", bitstream="aes"), slot("a1", bitstream="sha", free=False), slot("a2"), slot("a3")]
                ),
            ),
            WatchedNode("b", node("b", [slot("b0", bitstream="aes"), *[slot(f"b{i}", free=False) for i in (1, 2)]])),
            WatchedNode("c", node("c", [slot("c0"), slot("c1", free=False)])),
            WatchedNode("d", node("d", [slot("d0", bitstream="sha"), slot("d1", free=False)])),
        ]
    )
    return cache


def ask(board: ScoreBoard, cache: NodeCache, pod: str, now: float = NOW) -> list[tuple[str, int]]:
    names = ["a", "b", "c", "d"]
    return board.prioritize(cache, replace(demand(("main", 1, "aes")), pod=pod), names, cache.lookup(), now)


def test_the_top_copy_is_promised_and_the_next_pod_is_offered_the_other_one() -> None:
    cache, board = cluster(), ScoreBoard(ScoreWeights())
    first = ask(board, cache, "default/p1")
    assert first[0][0] == "b"  # both hold aes free; b is the fuller node
    assert dict(first)["b"] > dict(first)["a"]  # the other copy one point lower: the scheduler takes b
    second = ask(board, cache, "default/p2")
    assert second[0][0] == "a"  # b's copy is promised to p1
    third = dict(ask(board, cache, "default/p3"))  # both copies promised: the empty slot of c is best
    assert max(third, key=third.__getitem__) == "c"


def test_a_pod_asked_again_keeps_one_promise() -> None:
    cache, board = cluster(), ScoreBoard(ScoreWeights())
    for _ in range(3):
        assert ask(board, cache, "default/p1")[0][0] == "b"
    assert ask(board, cache, "default/p2")[0][0] == "a"


def test_a_promise_ends_when_the_node_publishes_or_after_its_time() -> None:
    cache, board = cluster(), ScoreBoard(ScoreWeights())
    assert ask(board, cache, "default/p1")[0][0] == "b"
    # b publishes again (the agent saw the slot taken): what it publishes is the truth again
    taken = node("b", [slot("b0", bitstream="aes", free=False), *[slot(f"b{i}", free=False) for i in (1, 2)]], rv="2")
    cache.apply("MODIFIED", WatchedNode("b", taken))
    assert ask(board, cache, "default/p2")[0][0] == "a"
    assert ask(board, cache, "default/p3")[0][0] != "a"  # a's copy is promised to p2 now
    later = NOW + PROMISE_TTL_S + 1
    assert ask(board, cache, "default/p4", later)[0][0] == "a"  # p2's promise expired


def test_without_promises_the_same_copy_is_offered_to_every_pod() -> None:
    cache, board = cluster(), ScoreBoard(ScoreWeights(), promises=False)
    tops = {ask(board, cache, f"default/p{i}")[0] for i in range(3)}
    assert len(tops) == 1


def test_nodes_that_tie_for_the_top_are_chosen_by_the_pod_not_always_the_first() -> None:
    cache = NodeCache()
    names = [f"n{i}" for i in range(8)]
    watched = [WatchedNode(n, node(n, [slot(f"{n}-0", bitstream="aes"), slot(f"{n}-1")])) for n in names]
    cache.replace([*watched, WatchedNode("x", node("x", [slot("x-0"), slot("x-1")]))])  # x holds no copy
    names.append("x")
    tops = set()
    for i in range(8):
        board = ScoreBoard(ScoreWeights())  # a board each: no promise of one pod shadows another's choice
        pod = replace(demand(("main", 1, "aes")), pod=f"default/p{i}")
        answer = board.prioritize(cache, pod, names, cache.lookup(), NOW)
        best = max(score for _, score in answer)
        (top,) = [name for name, score in answer if score == best]  # exactly one node keeps the top score
        tops.add(top)
    assert len(tops) > 1


def test_a_node_is_offered_until_each_free_copy_is_promised_and_again_when_a_promise_ends() -> None:
    cache = NodeCache()
    two = node("a", [slot("a0", bitstream="aes"), slot("a1", bitstream="aes"), slot("a2", free=False)])
    one = node("b", [slot("b0", bitstream="aes"), slot("b1"), slot("b2"), slot("b3")])
    cache.replace([WatchedNode("a", two), WatchedNode("b", one), WatchedNode("c", node("c", [slot("c0")]))])
    board = ScoreBoard(ScoreWeights())

    def top(pod: str) -> str:
        names = ["a", "b", "c"]
        answer = board.prioritize(cache, replace(demand(("main", 1, "aes")), pod=pod), names, cache.lookup(), NOW)
        return answer[0][0]

    assert [top("default/p1"), top("default/p2")] == ["a", "a"]  # a (the fuller) has two copies to promise
    assert top("default/p3") == "b"  # both of a's copies are promised now
    assert top("default/p1") == "a"  # p1 asked again: its copy on a is free for it again
    assert top("default/p2") == "a"
    assert top("default/p4") not in ("a", "b")  # every copy promised: the best node is one without a copy


def test_a_promise_is_the_same_whether_recorded_after_the_answer_or_by_the_next_call() -> None:
    cache = cluster()
    eager, lazy = ScoreBoard(ScoreWeights()), ScoreBoard(ScoreWeights())
    for pod in ("default/p1", "default/p2", "default/p3", "default/p1"):
        answer = ask(eager, cache, pod)
        eager.after_answer()  # as the server does once the answer is written
        eager.after_answer()  # nothing pending: no second promise
        assert ask(lazy, cache, pod) == answer  # recorded by its next call instead
    assert eager.promises is not None
    assert lazy.promises is not None
    assert eager.promises.taken(cache, "aes", NOW) == lazy.promises.taken(cache, "aes", NOW) == {"a": 1, "b": 1}


@pytest.mark.parametrize("seed", range(6))
def test_a_board_promises_alike_whether_it_reads_strings_or_the_request_bytes(seed: int) -> None:
    """Pods of a few bitstreams scored in turn, nodes republishing now and then: a board given the names as a
    request's bytes (the compiled reader, promised copies taken out there) answers and promises what a board
    given them as strings does, call by call."""
    rng = random.Random(seed)
    names = [f"node-{i}" for i in range(60)]
    cache = NodeCache()
    cache.replace([random_node(rng, name, NOW, [CATALOG], fitting=True) for name in names])
    strings, from_bytes = ScoreBoard(ScoreWeights()), ScoreBoard(ScoreWeights())
    now = NOW
    for call in range(400):
        if rng.random() < 0.1:
            cache.apply("MODIFIED", random_node(rng, rng.choice(names), now, [CATALOG], fitting=True))
        now += rng.choice([0.0, 0.5, 2.0])
        pod = replace(demand(("main", 1, rng.choice(["aes", "aes", "sha", "fft"]))), pod=f"default/p{call % 150}")
        asked = rng.sample(names, rng.randint(1, len(names)))
        expected = strings.prioritize(cache, pod, asked, cache.lookup(), now)
        answer = from_bytes.prioritize(cache, pod, request_names(asked), cache.lookup(), now)
        assert sorted(answer) == sorted(expected)
        assert strings.promises is not None
        assert from_bytes.promises is not None
        for bitstream in ("aes", "sha", "fft"):
            assert strings.promises.taken(cache, bitstream, now) == from_bytes.promises.taken(cache, bitstream, now)

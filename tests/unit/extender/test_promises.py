"""A free copy is promised to one pod at a time: the defects of the old book, each as a test."""

from __future__ import annotations

from dataclasses import replace

from agent.extender.demand import PodDemand
from agent.extender.nodestate import WatchedNode
from agent.extender.promises import MAX_PROMISES, PROMISE_TTL_S, Promises
from agent.extender.ranking import Scorer
from agent.extender.scoring import ScoreWeights
from agent.extender.table import StateTable
from tests.unit.extender.factories import PAC, demand, node, slot

NOW = 1_800_000_000.0
AES = demand(("main", 1, "aes"))
W = ScoreWeights()


def pod(name: str) -> PodDemand:
    return replace(AES, pod=f"default/{name}")


def table(**nodes: list[dict[str, object]] | None) -> StateTable:
    known = StateTable()
    known.replace({name: None if slots is None else node(name, slots) for name, slots in nodes.items()})
    return known


def top(answer: list[tuple[str, int]]) -> str:
    best = max(score for _, score in answer)
    (name,) = [name for name, score in answer if score == best]
    return name


def test_two_pods_asking_two_nodes_with_one_copy_each_and_a_node_without_state_get_one_each() -> None:
    """The defect: nodes a and b with one free aes copy each, u without published state; two pods asking a, b, u
    were both promised b (the per-name fallback ignored the promises)."""
    nodes = table(a=[slot("a0", bitstream="aes")], b=[slot("b0", bitstream="aes")], u=None)
    scorer = Scorer(W)
    first = top(scorer.prioritize(nodes, pod("p1"), ["a", "b", "u"], NOW))
    second = top(scorer.prioritize(nodes, pod("p2"), ["a", "b", "u"], NOW))
    assert {first, second} == {"a", "b"}
    third = scorer.prioritize(nodes, pod("p3"), ["a", "b", "u"], NOW)
    assert dict(third).get("a") == dict(third).get("b")  # both copies promised: a and b score alike now


def test_a_copy_is_promised_only_while_the_nodes_state_holds() -> None:
    nodes = table(a=[slot("a0", bitstream="aes"), slot("a1")], b=[slot("b0"), slot("b1")])
    scorer = Scorer(W)
    assert top(scorer.prioritize(nodes, pod("p1"), ["a", "b"], NOW)) == "a"
    assert "a" not in dict(scorer.prioritize(nodes, pod("p2"), ["a", "b"], NOW))  # a's copy is p1's: a ties b
    nodes.apply("a", node("a", [slot("a0", bitstream="aes"), slot("a1")], rv="2"))  # a republished: promise ends
    assert top(scorer.prioritize(nodes, pod("p3"), ["a", "b"], NOW)) == "a"


def test_a_pod_asked_about_again_releases_its_promise_and_a_promise_expires() -> None:
    nodes = table(a=[slot("a0", bitstream="aes")], b=[slot("b0")])
    scorer = Scorer(W)
    assert top(scorer.prioritize(nodes, pod("p1"), ["a", "b"], NOW)) == "a"
    assert top(scorer.prioritize(nodes, pod("p1"), ["a", "b"], NOW)) == "a"  # the retry gets it again
    assert "a" not in dict(scorer.prioritize(nodes, pod("p2"), ["a", "b"], NOW))
    assert top(scorer.prioritize(nodes, pod("p2"), ["a", "b"], NOW + PROMISE_TTL_S + 1)) == "a"


def test_two_copies_on_one_node_are_promised_to_two_pods_then_the_node_is_taken() -> None:
    nodes = table(a=[slot("a0", bitstream="aes"), slot("a1", bitstream="aes")], b=[slot("b0")])
    scorer = Scorer(W)
    assert top(scorer.prioritize(nodes, pod("p1"), ["a", "b"], NOW)) == "a"
    assert top(scorer.prioritize(nodes, pod("p2"), ["a", "b"], NOW)) == "a"
    assert "a" not in dict(scorer.prioritize(nodes, pod("p3"), ["a", "b"], NOW))
    assert scorer.promises is not None
    scorer.promises.release("default/p1")  # one copy free again: the node has one to give
    assert top(scorer.prioritize(nodes, pod("p4"), ["a", "b"], NOW)) == "a"


def test_a_full_book_drops_the_promises_ended_by_a_new_state_before_valid_ones() -> None:
    """Promises on a node that published a new state are void; a full book drops them first, whether or not
    their node was asked about since (only asked nodes are checked on each call)."""
    book = Promises(limit=2)
    nodes = {"a": node("a", [slot("a0", bitstream="aes")]), "b": node("b", [slot("b0", bitstream="aes")])}
    book.promise("default/p1", "aes", "b", nodes, NOW)
    book.promise("default/p2", "aes", "a", nodes, NOW)
    nodes["a"] = node("a", [slot("a0", bitstream="aes")], rv="2")  # a new state: p2's promise ended with it
    nodes["c"] = node("c", [slot("c0", bitstream="aes")])
    book.promise("default/p3", "aes", "c", nodes, NOW)  # full: p2's void promise goes, p1's valid one stays
    assert book.taken("default/p4", "aes", nodes, NOW, {"a", "b", "c"}) == {"b": 1, "c": 1}


def test_the_book_is_bounded_in_entries_and_key_length() -> None:
    book = Promises(limit=3)
    state = node("a", [slot("a0", bitstream="aes")])
    for number in range(10):
        book.promise(f"default/p{number}", "aes", "a", {"a": state}, NOW)
    assert len(book) == 3
    book.promise("x" * 10_000, "aes", "a", {"a": state}, NOW)  # no such pod name exists: not kept
    assert len(book) == 3
    assert dict(book.taken("other", "aes", {"a": state}, NOW, {"a", "b"})) == {"a": 3}
    assert book.taken("other", "aes", {"a": state}, NOW, {"b"}) == {}  # only the nodes asked about
    assert MAX_PROMISES <= 10_000


def test_a_watched_node_list_feeds_the_table_as_a_mapping_does() -> None:
    fed, watched = StateTable(), StateTable()
    state = node("a", [slot("a0", platform=PAC, bitstream="aes")])
    fed.replace({"a": state, "u": None})
    watched.replace_watched([WatchedNode("a", state), WatchedNode("u", None)])
    assert fed.nodes == watched.nodes == {"a": state}

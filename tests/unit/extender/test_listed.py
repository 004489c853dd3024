"""A list of every Node, as the extender service applies it: taken, indexed at once, frozen out of full GC passes;
and a Node event: taken, and followed at once."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from agent.cluster.extenderservice import followed, listed
from agent.extender import NodeCache, ScoreWeights, WatchedNode, sample
from agent.extender.oneslot import OneSlotIndex
from agent.extender.server import Extender, build_app
from tests.unit.extender.factories import node, slot
from tests.unit.extender.test_answer_from_bytes import NOW, request


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    """What a test's lists froze is back in the collector's care after it."""
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The one-slot index's builds from a whole cache, counted (the nodes each was built from)."""
    counted: list[int] = []
    real = OneSlotIndex._rebuild

    def counting(self: OneSlotIndex, *args: object) -> None:
        counted.append(len(args[0].nodes))  # type: ignore[attr-defined]
        real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(OneSlotIndex, "_rebuild", counting)
    return counted


def nodes(version: str) -> list[WatchedNode]:
    return [
        WatchedNode("a", node("a", [slot("s0", bitstream="aes"), slot("s1")], rv=version)),
        WatchedNode("b", node("b", [slot("s0"), slot("s1", free=False)], rv=version)),
        WatchedNode("c", None),  # no agent
    ]


def test_a_list_is_indexed_when_it_arrives_not_in_the_next_call(builds: list[int]) -> None:
    cache = NodeCache()
    extender = Extender(cache, ScoreWeights(), clock=lambda: NOW)
    apply = listed(cache, extender)
    apply(nodes("1"))
    assert (sorted(cache.nodes), cache.unpublished) == (["a", "b"], {"c"})
    assert builds == [2]
    body = request("default/p", "aes", "1", ["a", "b"])
    answered = extender.prioritize(body)
    assert builds == [2]  # the call found the index current
    # the same answer as an extender whose index the call itself built
    plain_cache = NodeCache()
    plain_cache.replace(nodes("1"))
    plain = Extender(plain_cache, ScoreWeights(), clock=lambda: NOW).prioritize(body)
    assert builds == [2, 2]
    assert answered.status == plain.status == 200
    assert answered.body == plain.body
    assert answered.body.startswith(b'[{"Host":"a"')
    apply(nodes("2"))  # a list again (a relist after a dropped watch)
    assert builds == [2, 2, 2]
    extender.prioritize(request("default/q", "aes", "1", ["a", "b"]))
    assert builds == [2, 2, 2]


def test_what_a_list_leaves_is_frozen_out_of_full_collections() -> None:
    plain = NodeCache()
    plain.replace(nodes("1"))
    state = plain.nodes["a"]
    assert gc.is_tracked(state)
    assert any(o is state for o in gc.get_objects())  # walked by every full pass
    cache = NodeCache()
    listed(cache, Extender(cache, ScoreWeights(), clock=lambda: NOW))(nodes("1"))
    state = cache.nodes["a"]
    assert gc.is_tracked(state)
    assert not any(o is state for o in gc.get_objects())  # frozen: no full pass walks it
    assert gc.get_freeze_count() > 0


def test_garbage_with_cycles_is_collected_before_the_freeze() -> None:
    class Cyclic:
        def __init__(self) -> None:
            self.me = self

    gc.disable()  # no pass of its own before the list's
    try:
        cyclic = Cyclic()
        tracked = weakref.ref(cyclic)
        del cyclic  # garbage now, with a cycle: only a pass of the collector frees it
        assert tracked() is not None
        cache = NodeCache()
        listed(cache, Extender(cache, ScoreWeights(), clock=lambda: NOW))(nodes("1"))
        assert tracked() is None  # collected, not frozen
    finally:
        gc.enable()


@pytest.mark.skipif(not sample.COMPILED, reason="the fast path is compiled code")
def test_a_node_event_is_taken_and_the_fast_path_armed_again_for_it_at_once(builds: list[int]) -> None:
    cache = NodeCache()
    extender = Extender(cache, ScoreWeights(), clock=lambda: NOW)
    app = build_app(extender)
    assert app.fast is not None
    listed(cache, extender)(nodes("1"))
    for pod in ("p", "q"):  # Python answers: the fast path holds "aes" once its promise table is made
        reply = extender.prioritize(request(f"default/{pod}", "aes", "1", ["a", "b"]))
        assert reply.after is not None
        reply.after()
    before = request("default/r", "aes", "1", ["a", "b"])
    head = f"POST /prioritize HTTP/1.1\r\nContent-Length: {len(before)}\r\n\r\n".encode()
    assert app.fast(head + before, lambda _response: None) == len(head + before)
    followed(cache, extender)("MODIFIED", WatchedNode("b", node("b", [slot("s0", bitstream="aes")], rv="2")))
    assert cache.nodes["b"].free_held == {"aes": 1}
    # armed for the new state, no call in between
    assert app.fast(head + before, lambda _response: None) == len(head + before)
    assert builds == [2]  # followed, not built afresh

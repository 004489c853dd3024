"""A one-slot pod's answer made from the request's bytes (``ScoreBoard.prioritize_body``) is the answer the
parsed path gives, entry for entry, and leaves the board as the parsed path leaves it: the same promises, the
same pods counted, the same cluster values."""

from __future__ import annotations

import json
import random

import pytest

from agent.extender import NodeCache, ScoreWeights, WatchedNode
from agent.extender.ranking import ScoreBoard
from agent.extender.server import Extender
from agent.extender.wire import BITSTREAM_ANNOTATION, SLOT_RESOURCE, encode_priorities, parse_extender_args
from tests.unit.extender.factories import CATALOG, N3K, PAC, random_node

NOW = 1_800_000_000.0
BITSTREAMS = ["aes", "aes", "aes", "sha", "fft", "big"]


def request(pod: str, bitstream: str, slots: str, names: list[str]) -> bytes:
    namespace, name = pod.split("/")
    body = {
        "Pod": {
            "metadata": {"name": name, "namespace": namespace, "annotations": {BITSTREAM_ANNOTATION: bitstream}},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {SLOT_RESOURCE: slots}}}]},
        },
        "Nodes": None,
        "NodeNames": names,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def entries(answer: bytes) -> list[tuple[str, int]]:
    return sorted((entry["Host"], entry["Score"]) for entry in json.loads(answer))


def board_state(board: ScoreBoard, cache: NodeCache, now: float) -> object:
    promises = board.promises
    assert promises is not None
    taken = {b: dict(promises.taken(cache, b, now)) for b in set(BITSTREAMS)}
    facts = board.facts
    keep = dict(facts.keep_values(cache.nodes.values(), now))
    return taken, facts.version, keep, {b: facts.share(b) for b in CATALOG}


@pytest.mark.parametrize("seed", range(8))
def test_answers_from_bytes_equal_the_parsed_answers_call_by_call(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"node-{i}" for i in range(80)]
    # mostly one catalog (the answer from bytes), now and then a node whose catalog disagrees (the parsed path)
    catalogs = [CATALOG] * 12 + [{**CATALOG, "big": PAC}, {"aes": N3K}]
    cache = NodeCache()
    # nodes without the agent, never asked about (the scheduler's sample holds the nodes with slots)
    plain = [WatchedNode(f"plain-{i}", None) for i in range(3)]
    cache.replace([*plain, *(random_node(rng, name, NOW, [CATALOG], fitting=True) for name in names)])
    from_bytes, parsed = ScoreBoard(ScoreWeights()), ScoreBoard(ScoreWeights())
    now, answered = NOW, 0
    odd: set[str] = set()  # nodes whose catalog disagrees, or that publish no state
    for call in range(500):
        if rng.random() < 0.08:
            changed = random_node(rng, rng.choice(names), now, catalogs, fitting=True)
            cache.apply("MODIFIED", changed)
            if changed.state is not None and changed.state.bitstreams != CATALOG:
                odd.add(changed.name)
        if rng.random() < 0.02:  # a node without published state: a call that asks about it is scored per name
            odd.add(name := rng.choice(names))
            cache.apply("MODIFIED", WatchedNode(name, None))
        if odd and rng.random() < 0.2:  # an odd node publishes the common catalog again
            cache.apply("MODIFIED", random_node(rng, odd.pop(), now, [CATALOG], fitting=True))
        now += rng.choice([0.0, 0.5, 3.0, 70.0])
        pod, bitstream = f"default/p{rng.randrange(200)}", rng.choice(BITSTREAMS)
        slots = rng.choice(["1"] * 8 + ["2"])
        asked = rng.sample(names, rng.randint(0, len(names)))
        body = request(pod, bitstream, slots, asked)
        answer = from_bytes.prioritize_body(cache, body, now)
        if answer is None:  # declined: parsed, as the server does then
            parsed_request = parse_extender_args(body)
            answer = encode_priorities(
                from_bytes.prioritize(cache, parsed_request.demand, parsed_request.names, cache.lookup(), now)
            )
        else:
            answered += 1
        request_parsed = parse_extender_args(body)
        expected = parsed.prioritize(cache, request_parsed.demand, list(request_parsed.names), cache.lookup(), now)
        # the same entries (of one score, the Python path lists by name, the compiled one in the order asked:
        # kube-scheduler adds the answer up per node, so its order carries nothing)
        assert entries(answer) == entries(encode_priorities(expected)), f"call {call}"
        if rng.random() < 0.5:  # the server records the promise after the answer; else the next call does
            from_bytes.after_answer()
            parsed.after_answer()
        assert board_state(from_bytes, cache, now) == board_state(parsed, cache, now), f"call {call}"
    assert answered > 300  # most calls were answered from the bytes, beside nodes that publish no state


def test_the_server_answers_a_one_slot_pod_from_its_bytes_and_any_other_body_as_before() -> None:
    cache = NodeCache()
    rng = random.Random(1)
    names = [f"node-{i}" for i in range(20)]
    cache.replace([random_node(rng, name, NOW, [CATALOG], fitting=True) for name in names])
    extender = Extender(cache, ScoreWeights(), clock=lambda: NOW)
    one_slot = request("default/p", "aes", "1", names)
    assert extender._board.prioritize_body(cache, one_slot, NOW) is not None
    reply = extender.prioritize(one_slot)
    assert reply.status == 200
    assert reply.after is not None
    reply.after()
    assert extender._board.promises is not None
    assert extender.prioritize(request("default/q", "aes", "2", names)).status == 200
    bad = one_slot.replace(b'"1"}', b'"x"}')
    reply = extender.prioritize(bad)
    assert reply.status == 400
    assert b"fpga-slot" in reply.body

"""The compiled fast path (``_fastpath.c``, ``agent.extender.fastpath``): the answers Python gives, call by call,
the same state after them, and only the requests it can answer taken from the connection."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import NamedTuple

import pytest

from agent.extender import NodeCache, ScoreWeights, WatchedNode, sample
from agent.extender.promises import _Promise
from agent.extender.ranking import ScoreBoard
from agent.extender.server import PRIORITIZE_PATH, Extender, ExtenderApp, build_app
from tests.unit.extender.factories import CATALOG, random_node
from tests.unit.extender.test_answer_from_bytes import board_state, entries, request

pytestmark = pytest.mark.skipif(not sample.COMPILED, reason="the fast path is compiled code")

NOW = 1_800_000_000.0
BITSTREAMS = ["aes", "aes", "aes", "sha", "fft", "big"]


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def http(body: bytes, *, path: str = PRIORITIZE_PATH, headers: str | None = None) -> bytes:
    """A request as Go's HTTP client writes it."""
    if headers is None:
        headers = (
            "Host: 127.0.0.1:8888\r\nUser-Agent: Go-http-client/1.1\r\n"
            f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n"
        )
    return f"POST {path} HTTP/1.1\r\n{headers}\r\n".encode() + body


class Answered(NamedTuple):
    """A request the fast path answered: the bytes it consumed, and the response it wrote."""

    consumed: int
    response: bytes


def response_body(answered: Answered) -> bytes:
    head, _, body = answered.response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert f"Content-Length: {len(body)}".encode() in head
    return body


def served(app: ExtenderApp, data: bytes) -> Answered | int | None:
    """What the fast path did with ``data``: answered it (and wrote once), held it (0) or left it (None)."""
    assert app.fast is not None
    written: list[bytes] = []
    outcome = app.fast(data, written.append)
    if outcome is None or outcome == 0:
        assert not written
        return outcome
    assert isinstance(outcome, int), outcome  # not (consumed, error): recording failed
    assert len(written) == 1
    return Answered(outcome, written[0])


def slow_answer(app: ExtenderApp, body: bytes) -> bytes:
    reply = app.handle("POST", PRIORITIZE_PATH, "application/json", body)
    assert reply.status == 200, reply.body
    if reply.after is not None:
        reply.after()
    return reply.body


def cluster(rng: random.Random, count: int = 60) -> tuple[NodeCache, list[str]]:
    names = [f"node-{i}" for i in range(count)]
    cache = NodeCache()
    cache.replace([random_node(rng, name, NOW, [CATALOG], fitting=True) for name in names])
    return cache, names


def drive(seed: int, *, follow: bool) -> int:
    """600 calls, node events and pauses between them, to an extender with the fast path and one without; each
    answer and the state after it compared. With ``follow``, node events reach the extender as the node watch
    passes them (``Extender.nodes_changed``). Returns the calls the fast path answered."""
    rng = random.Random(seed)
    cache, names = cluster(rng)
    clock = Clock()
    python = Extender(cache, ScoreWeights(), clock=clock)  # no app built: every call answered by Python
    fast = Extender(cache, ScoreWeights(), clock=clock)
    app, reference = build_app(fast), build_app_less(python)
    answered_fast = 0
    unpublished: set[str] = set()
    for call in range(600):
        events = []
        if rng.random() < 0.03:  # a node publishes a new state
            events.append(random_node(rng, rng.choice(names), clock.now, [CATALOG], fitting=True))
        if rng.random() < 0.01:  # a node without published state: calls asking about it are answered per name
            unpublished.add(name := rng.choice(names))
            events.append(WatchedNode(name, None))
        if unpublished and rng.random() < 0.1:  # it publishes again
            events.append(random_node(rng, unpublished.pop(), clock.now, [CATALOG], fitting=True))
        for event in events:
            cache.apply("MODIFIED", event)
            if follow:  # as the node watch does in the extender's service
                fast.nodes_changed()
        # pods a few ms apart, now and then a pause: past the cluster values' step (10 s), the clock's (60 s)
        clock.now += rng.choice([0.0, 0.002, 0.01, 0.01, 0.05]) if rng.random() < 0.97 else rng.choice([3.0, 70.0])
        pod = f"default/p{rng.randrange(300)}"  # some asked about again: their promise is released first
        slots = rng.choice(["1"] * 12 + ["2"])  # a two-slot pod: Python answers it
        body = request(pod, rng.choice(BITSTREAMS), slots, rng.sample(names, rng.randint(1, len(names))))
        expected = slow_answer(reference, body)
        got = served(app, http(body))
        if isinstance(got, Answered):
            answered_fast += 1
            assert got.consumed == len(http(body))
            answer = response_body(got)
        else:
            assert got is None
            answer = slow_answer(app, body)
        assert entries(answer) == entries(expected), f"call {call}"
        assert board_state(fast._board, cache, clock.now) == board_state(python._board, cache, clock.now), call
        assert books(fast._board) == books(python._board), call
    return answered_fast


def books(board: ScoreBoard) -> object:
    """What is recorded after an answer, as held: the promises' tables in order, the pods counted, the bitstreams
    noted and not weighed yet (the compiled fast path records into these itself, ``_fastbooks.c``)."""
    promises = board.promises
    assert promises is not None
    assert all(type(promise) is _Promise for promise in promises._by_pod.values())
    return (
        list(promises._by_pod.items()),
        promises._on_node,
        promises._taken,
        {bitstream: sorted(full) for bitstream, full in promises._full.items()},
        list(board._counted),
        board.facts.unweighed,
    )


@pytest.mark.parametrize(("seed", "follow"), [(seed, follow) for seed in range(4) for follow in (False, True)])
def test_the_fast_path_answers_as_python_does_and_leaves_the_same_state(seed: int, follow: bool) -> None:
    assert drive(seed, follow=follow) > 200  # the fast path took part: about 40 % of the calls or more


@pytest.mark.parametrize("seed", range(2))
def test_node_events_arm_it_again_at_once(seed: int) -> None:
    # the same calls and events: with the events followed, the calls after one need not wait for Python
    assert drive(seed, follow=True) > drive(seed, follow=False)


def build_app_less(extender: Extender) -> ExtenderApp:
    """The extender's routes with no fast path: every call reaches Python."""
    return ExtenderApp({("POST", PRIORITIZE_PATH): extender.prioritize}, None, 1 << 20)


def armed_app(rng: random.Random) -> tuple[ExtenderApp, Extender, NodeCache, list[str], Clock]:
    """An app whose fast path holds "aes" (Python answered pods asking for it)."""
    cache, names = cluster(rng, 20)
    clock = Clock()
    extender = Extender(cache, ScoreWeights(), clock=clock)
    app = build_app(extender)
    assert extender._board.fast is not None
    engine = extender._board.fast.engine
    for index in range(3):  # the first promise of a bitstream makes its table of fully promised nodes: again
        slow_answer(app, request(f"default/first-{index}", "aes", "1", names))
        if "aes" in engine.bitstreams:
            break
    assert engine.armed
    assert "aes" in engine.bitstreams
    return app, extender, cache, names, clock


def test_a_request_it_answers_is_the_exact_go_request_shape_and_pipelined_requests_are_taken_one_by_one() -> None:
    app, _, _, names, _ = armed_app(random.Random(1))
    one, two = http(request("default/a", "aes", "1", names)), http(request("default/b", "aes", "1", names))
    got = served(app, one + two)
    assert isinstance(got, Answered)
    assert got.consumed == len(one)
    assert served(app, one[:10]) == 0  # the head not whole yet
    assert served(app, one[:-1]) == 0  # the body not whole yet
    body = request("default/c", "aes", "1", names)
    plain = http(body, headers=f"content-length:{len(body)}\r\n")  # the least Go could send: no type, no space
    assert isinstance(served(app, plain), Answered)


def length_then(lines: str) -> Callable[[bytes], bytes]:
    """A request with its Content-Length, then ``lines``."""
    return lambda body: http(body, headers=f"Content-Length: {len(body)}\r\n{lines}")


DECLINED_HEADS: dict[str, Callable[[bytes], bytes]] = {
    "HTTP/1.0": lambda body: http(body).replace(b"HTTP/1.1", b"HTTP/1.0", 1),
    "a query": lambda body: http(body, path="/prioritize?x=1"),
    "another path": lambda body: http(body, path="/filter"),
    "GET": lambda body: b"GET" + http(body)[4:],
    "chunked": length_then("Transfer-Encoding: chunked\r\n"),
    "Connection: close": length_then("Connection: close\r\n"),
    "Expect": length_then("Expect: 100-continue\r\n"),
    "Upgrade": length_then("Upgrade: h2c\r\n"),
    "two lengths": lambda body: length_then(f"Content-Length: {len(body)}\r\n")(body),
    "a signed length": lambda body: http(body, headers=f"Content-Length: +{len(body)}\r\n"),
    "no length": lambda body: http(body, headers="Host: x\r\n"),
    "text": length_then("Content-Type: text/plain\r\n"),
    "space before the colon": lambda body: http(body, headers=f"Content-Length : {len(body)}\r\n"),
    "a folded line": length_then("X-A: a\r\n  b\r\n"),
    "a bare LF": lambda body: http(body, headers=f"Content-Length: {len(body)}\nHost: x\r\n"),
    "a byte above ASCII": length_then("X-A: \xe9\r\n"),
    "a head above 8 KiB": length_then(f"X-A: {'a' * 9000}\r\n"),
    "a body above the limit": lambda body: http(body + b" " * (1 << 20)),
}


@pytest.mark.parametrize("case", sorted(DECLINED_HEADS))
def test_any_other_request_is_left_whole_to_the_parser(case: str) -> None:
    app, _, _, names, _ = armed_app(random.Random(2))
    data = DECLINED_HEADS[case](request("default/a", "aes", "1", names))
    assert served(app, data) is None
    assert isinstance(served(app, http(request("default/a", "aes", "1", names))), Answered)  # the common one: taken


@pytest.mark.parametrize(
    "body",
    [
        b'{"Pod":{},"Nodes":null,"NodeNames":["a"]}',  # a pod that asks no slot
        b'{"Pod":{"metadata":{"name":"x"}},"Nodes":null,"NodeNames":["a\\u0041"]}',  # a name that is not plain
        b"not json",
        b"",
    ],
)
def test_a_body_it_cannot_answer_from_its_bytes_goes_to_python(body: bytes) -> None:
    app, _, _, _, _ = armed_app(random.Random(3))
    assert served(app, http(body)) is None


def test_it_answers_nothing_once_a_node_changed_the_clock_left_its_span_or_a_pod_is_asked_again() -> None:
    rng = random.Random(4)
    app, extender, cache, names, clock = armed_app(rng)
    assert app.fast is not None
    got = served(app, http(request("default/a", "aes", "1", names)))
    assert isinstance(got, Answered)
    assert served(app, http(request("default/b", "sha", "1", names))) is None  # no entry for "sha" yet
    assert extender._board.promises is not None
    assert "default/a" in extender._board.promises.pods  # "default/a" was promised a copy
    assert served(app, http(request("default/a", "aes", "1", names))) is None  # asked again: Python releases it
    engine = extender._board.fast
    assert engine is not None
    clock.now = engine.engine.until
    assert served(app, http(request("default/c", "aes", "1", names))) is None
    clock.now = NOW
    assert isinstance(served(app, http(request("default/d", "aes", "1", names))), Answered)
    cache.apply("MODIFIED", random_node(rng, names[0], NOW, [CATALOG], fitting=True))
    assert served(app, http(request("default/e", "aes", "1", names))) is None
    slow_answer(app, request("default/e", "aes", "1", names))  # Python answers, and arms it again
    assert isinstance(served(app, http(request("default/f", "aes", "1", names))), Answered)
    extender.prioritize(request("default/g", "aes", "2", names))  # any other answer Python makes disarms it
    assert served(app, http(request("default/h", "aes", "1", names))) is None


def test_the_fast_paths_answer_is_the_json_kube_scheduler_reads() -> None:
    app, _, _, names, _ = armed_app(random.Random(5))
    got = served(app, http(request("default/a", "aes", "1", names)))
    assert isinstance(got, Answered)
    answer = json.loads(response_body(got))
    assert answer
    assert all(set(entry) == {"Host", "Score"} and entry["Host"] in names for entry in answer)


def test_its_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"limit must be 1\.\.64"):
        sample.FastPath(PRIORITIZE_PATH, lambda: 0.0, 0, 100)
    with pytest.raises(ValueError, match="not a plain path"):
        sample.FastPath("/prioritize?x", lambda: 0.0, 16, 100)
    with pytest.raises(TypeError, match="clock must be callable"):
        sample.FastPath(PRIORITIZE_PATH, 1.0, 16, 100)  # type: ignore[arg-type]
    engine = sample.FastPath(PRIORITIZE_PATH, lambda: 0.0, 16, 100)
    with pytest.raises(RuntimeError, match="arm first"):
        engine.put("aes", sample.RankTable(), None, None, None)
    engine.arm(NodeCache(), 0.0, 1.0, None)
    with pytest.raises(TypeError, match="an entry holds"):
        engine.put("aes", None, None, None, None)  # type: ignore[arg-type]
    assert engine.serve(b"GET / HTTP/1.1\r\n\r\n", print) is None
    with pytest.raises(TypeError, match=r"serve takes 2 arguments \(data, write\), got 1"):
        engine.serve(b"GET / HTTP/1.1\r\n\r\n")  # type: ignore[call-arg]


class RefusingDict(dict[str, None]):
    def __setitem__(self, key: str, value: None) -> None:
        raise RuntimeError(f"refused {key}")


def test_when_recording_fails_after_the_write_it_says_so_and_stops_answering() -> None:
    app, extender, _, names, _ = armed_app(random.Random(6))
    assert app.fast is not None
    assert extender._board.fast is not None
    engine = extender._board.fast.engine
    engine.keep(RefusingDict(), 10, [], 10, lambda: None, None)
    data = http(request("default/a", "aes", "1", names))
    written: list[bytes] = []
    outcome = app.fast(data, written.append)
    assert isinstance(outcome, tuple)
    consumed, error = outcome
    assert consumed == len(data)
    assert isinstance(error, RuntimeError)
    assert str(error) == "refused default/a"
    assert error.__traceback__ is not None
    assert len(written) == 1
    assert written[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert not engine.armed  # what it recorded may be half done: Python answers until it arms it again
    assert served(app, data) is None


def test_what_it_records_in_is_checked() -> None:
    engine = sample.FastPath(PRIORITIZE_PATH, lambda: 0.0, 16, 100)
    with pytest.raises(TypeError, match="counted must be a dict"):
        engine.keep([], 10, [], 10, lambda: None, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be positive"):
        engine.keep({}, 0, [], 10, lambda: None, None)
    with pytest.raises(TypeError, match="promises must be a tuple or None"):
        engine.keep({}, 10, [], 10, lambda: None, [])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reshaped a set"):
        engine.keep({}, 10, [], 10, lambda: None, (None, {}, {}, {}, {}, [], tuple, 1.0, print))
    with pytest.raises(ValueError, match="latency bounds must increase"):
        sample.FastPath(PRIORITIZE_PATH, lambda: 0.0, 16, 100, (0.1, 0.1))
    assert sample.FastPath(PRIORITIZE_PATH, lambda: 0.0, 16, 100, (0.1, 0.2)).latency == (0, 0.0, (0, 0, 0))


def test_its_answers_are_counted_with_their_latency() -> None:
    app, extender, _, names, _ = armed_app(random.Random(7))
    assert extender._board.fast is not None
    engine = extender._board.fast.engine
    before, _, _ = engine.latency
    for index in range(3):
        assert isinstance(served(app, http(request(f"default/n{index}", "aes", "1", names))), Answered)
    count, seconds, buckets = engine.latency
    assert count == before + 3 == sum(buckets)
    assert 0 < seconds < 1

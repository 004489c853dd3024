"""The fast route over real TCP: for any bytes a client sends, in any chunks, the same bytes back as from the same
extender without it, and the common call answered by it (the cases: ``fastroute.py``)."""

from __future__ import annotations

import logging
import random

import pytest

from agent.extender import sample
from agent.extender.server import bound_port, start
from tests.integration.extender.fastroute import exchange, paired_servers, run_cases
from tests.unit.extender.test_answer_from_bytes import request
from tests.unit.extender.test_fastpath import RefusingDict, armed_app, http

pytestmark = [
    pytest.mark.usefixtures("no_leaked_tasks"),
    pytest.mark.skipif(not sample.COMPILED, reason="the fast path is compiled code"),
]

CASES = 1500


async def test_any_bytes_in_any_chunks_get_the_same_answer_with_the_fast_route_as_without() -> None:
    async with paired_servers() as pair:
        outcome = await run_cases(pair, random.Random(11), CASES)
    assert not outcome.differ, [(index, data[:300]) for index, data in outcome.differ[:3]]
    # the cases reached the answers, the errors and the fast route, each many times
    assert outcome.statuses.get(b"200", 0) > CASES // 3, outcome.statuses
    assert outcome.statuses.get(b"400", 0) > CASES // 20, outcome.statuses
    assert pair.answered > CASES // 4, pair.answered


async def test_when_recording_a_fast_answer_fails_the_error_is_logged_once_and_python_answers_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, extender, _, names, _ = armed_app(random.Random(12))
    assert extender._board.fast is not None
    engine = extender._board.fast.engine
    engine.keep(RefusingDict(), 10, [], 10, lambda: None, None)  # recording the next answer fails
    fast_before = engine.latency[0]
    one, two = http(request("default/a", "aes", "1", names)), http(request("default/b", "aes", "1", names))
    server = await start(app, "127.0.0.1", 0)
    try:
        with caplog.at_level(logging.ERROR, logger="agent.extender.http"):
            received = await exchange(bound_port(server), [one + two])  # pipelined on one connection
    finally:
        await server.cleanup()
    assert received.count(b"HTTP/1.1 200 OK\r\n") == 2  # the first from the fast path, the second from Python
    failures = [r for r in caplog.records if r.getMessage() == "extender: the work after a fast answer failed"]
    assert len(failures) == 1
    assert failures[0].exc_info is not None
    assert isinstance(failures[0].exc_info[1], RuntimeError)
    assert engine.latency[0] == fast_before + 1  # it disarmed itself: Python answered the second (and armed it)

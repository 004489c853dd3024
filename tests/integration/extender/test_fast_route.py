"""The fast route over real TCP: for any bytes a client sends, in any chunks, the same bytes back as from the same
extender without it, and the common call answered by it (the cases: ``fastroute.py``)."""

from __future__ import annotations

import random

import pytest

from agent.extender import sample
from tests.integration.extender.fastroute import paired_servers, run_cases

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

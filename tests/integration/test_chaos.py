"""The SIGKILL storm of bench/chaos.py in small: a real agent process killed during an allocation storm."""

from __future__ import annotations

import pytest

from bench import chaos

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")


async def test_an_agent_killed_during_an_allocation_storm_comes_back_consistent() -> None:
    rows = await chaos.run(kills=3, seed=5)
    results = {name: result for name, result, _ in rows}
    assert results["SIGKILLs during an allocation storm (3)"] == "3/3 served again"
    assert {result for name, result, target in rows if target == "0"} == {"0"}, rows
    assert int(results["pods started in the storm"]) > 0

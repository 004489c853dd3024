"""The reliability soak of bench/soak.py in small (CI catches a regression; the full one runs in bench/run)."""

from __future__ import annotations

import random

import pytest

from bench import soak

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")


def zero_rows(rows: list[tuple[str, str, str]]) -> dict[str, str]:
    """The rows whose target is 0, with what was measured."""
    return {name: result for name, result, target in rows if target == "0"}


async def test_kubelet_restarts_in_a_row_each_re_register_with_no_failed_rpc() -> None:
    rows = await soak.soak_restarts(6)
    assert rows[0][1] == "6/6 re-registered"
    assert set(zero_rows(rows).values()) == {"0"}, rows


async def test_faults_end_in_clear_errors_and_the_agent_goes_on_serving() -> None:
    rows = await soak.soak_faults(1)
    assert [name for name, _, _ in rows][:3] == [
        "fault: hung programming (1x)",
        "fault: failing programming (1x)",
        "fault: card unplugged mid-programming (1x)",
    ]
    assert set(zero_rows(rows).values()) == {"0"}, rows


async def test_fuzzed_grpc_calls_are_answered_clearly_and_rejections_change_nothing() -> None:
    rows = await soak.soak_grpc(300, random.Random(7))
    assert set(zero_rows(rows).values()) == {"0"}, rows
    assert "INVALID_ARGUMENT" in rows[0][1]


def test_fuzzed_extender_bodies_get_200_or_4xx_with_error() -> None:
    rows = soak.soak_extender(300, random.Random(7))
    assert set(zero_rows(rows).values()) == {"0"}, rows
    scored = next(result for name, result, _ in rows if name.startswith("extender: prioritize answers that scored"))
    assert int(scored) > 20, rows  # intact requests reach the scoring, not only the parser


def test_fuzzed_node_states_never_escape_the_readers() -> None:
    rows = soak.soak_node_states(300, random.Random(7))
    assert [result for _, result, _ in rows] == ["0 exceptions escaped", "0 unexpected exceptions", "0"]

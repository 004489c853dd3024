"""The state table is fed a mapping and events, and stays within its bounds in nodes and bytes."""

from __future__ import annotations

import logging

import pytest

from agent.extender.table import StateTable
from tests.unit.extender.factories import PAC, node, slot


def test_past_its_node_bound_a_node_is_kept_without_state_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    table = StateTable(max_nodes=2)
    with caplog.at_level(logging.WARNING, logger="agent.extender.table"):
        table.replace({name: node(name, [slot("s0")]) for name in ("a", "b", "c", "d")})
    assert sorted(table.nodes) == ["a", "b"]
    assert len([r for r in caplog.records if "state table full" in r.getMessage()]) == 1
    table.apply("a", None)
    table.apply("c", node("c", [slot("s0")]))  # room again
    assert sorted(table.nodes) == ["b", "c"]


def test_past_its_byte_bound_a_node_is_kept_without_state() -> None:
    small = node("a", [slot("s0")])
    big = node("b", [slot(f"s{i}", bitstream="x" * 200) for i in range(100)], {"x" * 200: PAC})
    table = StateTable(max_bytes=small.weight * 3)
    table.replace({"a": small, "b": big})
    assert list(table.nodes) == ["a"]  # b scores neutral, as a node without an agent


def test_a_bitstream_is_known_while_some_catalog_holds_it() -> None:
    table = StateTable()
    table.replace({"a": node("a", [slot("s0")], {"aes": PAC}), "b": node("b", [slot("s0")], {"aes": PAC})})
    assert table.bitstream_known("aes")
    table.apply("a", None, deleted=True)
    assert table.bitstream_known("aes")
    table.apply("b", node("b", [slot("s0")], {"sha": PAC}))
    assert not table.bitstream_known("aes")
    assert table.bitstream_known("sha")

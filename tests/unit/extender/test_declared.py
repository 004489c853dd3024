"""The node cache follows the FpgaBitstream watch: a list replaces the declarations, events change one."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from agent.extender.nodestate import WatchedNode
from agent.extender.table import StateTable
from tests.unit.extender.factories import CATALOG, PAC, node, slot


@dataclass(frozen=True)
class Declared:
    name: str
    platform: str
    scope: str = "slot"


def test_a_list_and_events_set_what_nodes_can_pull() -> None:
    cache = StateTable()
    cache.replace_watched([WatchedNode("a", node("a", [slot("s0")], CATALOG))])
    cache.replace_declared([Declared("new", PAC), Declared("aes", PAC)])
    assert cache.nodes["a"].downloads == frozenset({"new"})  # aes is in its own catalog
    cache.apply_declared("ADDED", Declared("newer", PAC))
    assert cache.nodes["a"].downloads == frozenset({"new", "newer"})
    cache.apply_declared("DELETED", Declared("new", PAC))
    assert cache.nodes["a"].downloads == frozenset({"newer"})
    before = cache.nodes["a"]
    cache.apply_declared("MODIFIED", Declared("newer", PAC))  # the same: nothing to derive again
    assert cache.nodes["a"] is before


def test_a_failing_list_is_said_once_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    cache = StateTable()
    with caplog.at_level(logging.WARNING):
        cache.declarations_failed("HTTP 404")
        cache.declarations_failed("HTTP 404")
        cache.replace_declared([])
        cache.declarations_failed("HTTP 503")
    said = [r.getMessage() for r in caplog.records if "FpgaBitstream objects not listed" in r.getMessage()]
    assert len(said) == 2
    assert "HTTP 404" in said[0]
    assert "HTTP 503" in said[1]

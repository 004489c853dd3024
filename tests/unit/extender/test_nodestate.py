"""Published node state: parsed once into counts, malformed state read as none and reported once."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest

import agent.extender.nodestate
from agent.extender.nodestate import (
    BITSTREAMS_ANNOTATION,
    HEARTBEAT_ANNOTATION,
    SLOTS_ANNOTATION,
    STALE_AFTER_S,
    LoadedSlot,
    MalformedLog,
    NodeStateError,
    nesting_depth,
    parse_node_slots,
    read_node_slots,
)
from agent.extender.table import RequestNodes
from tests.unit.extender.factories import CATALOG, N3K, PAC, annotations, node, slot


def test_counts_what_scoring_needs() -> None:
    state = node(
        "n1",
        [
            slot("s0", bitstream="aes", last_used=300),
            slot("s1", bitstream="aes", free=False),
            slot("s2"),
            slot("s3", bitstream="sha", last_used=100),
            slot("s4", bitstream="sha", healthy=False),
            slot("s5", platform=N3K),
            slot("s6", platform=N3K, bitstream=None, accelerator="unknown-afu", last_used=50),
        ],
    )

    assert state.name == "n1"
    assert dict(state.bitstreams) == CATALOG
    assert dict(state.healthy) == {PAC: 4, N3K: 2}
    assert state.free == 5
    assert dict(state.free_empty) == {PAC: 1, N3K: 1}
    assert dict(state.free_loaded) == {("aes", PAC): 1, ("sha", PAC): 1}
    assert state.reusable[PAC] == (LoadedSlot(100, "sha"), LoadedSlot(300, "aes"))
    assert state.reusable[N3K] == (LoadedSlot(50, None),)  # loaded with something outside the catalog
    assert [s.id for s in state.slots] == ["s0", "s1", "s2", "s3", "s4", "s5", "s6"]


def test_never_used_slots_sort_first_among_reusable() -> None:
    state = node("n1", [slot("a", bitstream="aes", last_used=10), slot("b", bitstream="sha", last_used=None)])
    assert [s.bitstream for s in state.reusable[PAC]] == ["sha", "aes"]


def test_no_annotations_is_no_state() -> None:
    assert parse_node_slots("n1", "1", {"other": "x"}) is None


def test_optional_fields_may_be_absent() -> None:
    minimal = {"id": "s0", "platform": PAC, "free": True, "healthy": True}
    state = parse_node_slots("n1", "1", {SLOTS_ANNOTATION: json.dumps([minimal]), BITSTREAMS_ANNOTATION: "{}"})
    assert state is not None
    only = state.slots[0]
    assert (only.card, only.numa, only.bitstream, only.accelerator, only.last_used) == ("", None, None, None, None)


def _with(**changes: Any) -> dict[str, str]:
    entry = slot("s0", bitstream="aes")
    entry.update(changes)
    return annotations([entry])


@pytest.mark.parametrize(
    ("given", "message"),
    [
        pytest.param({SLOTS_ANNOTATION: "[]"}, "example.com/fpga-bitstreams is missing", id="bitstreams-missing"),
        pytest.param({BITSTREAMS_ANNOTATION: "{}"}, "example.com/fpga-slots is missing", id="slots-missing"),
        pytest.param(
            {SLOTS_ANNOTATION: "[{", BITSTREAMS_ANNOTATION: "{}"}, "fpga-slots is not valid JSON", id="slots-not-json"
        ),
        pytest.param({SLOTS_ANNOTATION: "{}", BITSTREAMS_ANNOTATION: "{}"}, "not a JSON list", id="slots-not-list"),
        pytest.param({SLOTS_ANNOTATION: "[1]", BITSTREAMS_ANNOTATION: "{}"}, "[0] is not an object", id="entry-number"),
        pytest.param({SLOTS_ANNOTATION: "[]", BITSTREAMS_ANNOTATION: "[]"}, "not a JSON object", id="catalog-list"),
        pytest.param(
            {SLOTS_ANNOTATION: "[]", BITSTREAMS_ANNOTATION: '{"aes": 3}'}, "['aes']: the platform", id="catalog-value"
        ),
        pytest.param(_with(id=""), "id is not a string of 1-256 characters", id="empty-id"),
        pytest.param(_with(platform=None), "platform is not a string", id="platform-null"),
        pytest.param(_with(free="yes"), "free and healthy must be", id="free-string"),
        pytest.param(_with(healthy=None), "free and healthy must be", id="healthy-null"),
        pytest.param(_with(numa="0"), "numa is not an integer", id="numa-string"),
        pytest.param(_with(last_used=1.5), "last_used is not an integer", id="last-used-float"),
        pytest.param(_with(last_used=True), "last_used is not an integer", id="last-used-bool"),
        pytest.param(_with(bitstream=7), "bitstream is not a string", id="bitstream-number"),
        pytest.param(annotations([slot("s0"), slot("s0")]), "slot id 's0' appears twice", id="duplicate-id"),
        pytest.param(
            {SLOTS_ANNOTATION: "[" * 100_000 + "]" * 100_000, BITSTREAMS_ANNOTATION: "{}"},
            "fpga-slots is nested 100000 levels deep, more than 8",
            id="nested-100000-deep",
        ),
        pytest.param(
            {SLOTS_ANNOTATION: "[]", BITSTREAMS_ANNOTATION: '{"a":' * 9 + "1" + "}" * 9},
            "fpga-bitstreams is nested 9 levels deep",
            id="catalog-nested",
        ),
        pytest.param(
            {SLOTS_ANNOTATION: '["' + "x" * 300_000 + '"]', BITSTREAMS_ANNOTATION: "{}"},
            "fpga-slots is 300004 characters long, more than 262144",
            id="too-long",
        ),
    ],
)
def test_malformed_state_names_the_problem(given: dict[str, str], message: str) -> None:
    with pytest.raises(NodeStateError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_node_slots("n1", "7", given)


def test_malformed_state_reads_as_none_and_is_logged_once_per_resource_version(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = {SLOTS_ANNOTATION: "not json", BITSTREAMS_ANNOTATION: "{}"}
    log = MalformedLog()
    with caplog.at_level(logging.WARNING, logger="agent.extender.nodestate"):
        assert read_node_slots("n1", "7", bad, log=log) is None
        assert read_node_slots("n1", "7", bad, log=log) is None  # a relist: the same version
        assert read_node_slots("n2", "7", bad, log=log) is None
        assert read_node_slots("n1", "8", bad, log=log) is None  # a new version, still broken

    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[0].startswith("node n1 (resourceVersion 7) has unusable slot state, treated as none:")
    assert "fpga-slots is not valid JSON" in lines[0]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('[{"id": "[[[[[[[[[[", "x": "{{{{{{{{{{"}]', id="brackets-in-strings"),
        pytest.param('[{"id": "s\\"[[[[[[[[[["}]', id="escaped-quote"),
        pytest.param("[" + ",".join(['{"a":[1]}'] * 64) + "]", id="many-shallow-entries"),
    ],
)
def test_brackets_in_strings_and_many_entries_are_not_depth(text: str) -> None:
    assert nesting_depth(text) <= 3


def test_any_failure_while_reading_one_node_costs_only_that_node(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unforeseen(*args: object) -> None:
        raise KeyError("a parser bug")

    monkeypatch.setattr(agent.extender.nodestate, "parse_node_slots", unforeseen)
    with caplog.at_level(logging.WARNING, logger="agent.extender.nodestate"):
        assert read_node_slots("n1", "7", annotations([slot("s0")]), log=MalformedLog()) is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert "node n1 (resourceVersion 7) has unusable slot state, treated as none: unreadable (KeyError" in line


def test_malformed_memory_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    bad = {SLOTS_ANNOTATION: "[", BITSTREAMS_ANNOTATION: "{}"}
    log = MalformedLog(capacity=2)
    with caplog.at_level(logging.WARNING, logger="agent.extender.nodestate"):
        for name in ("a", "b", "c", "a"):
            read_node_slots(name, "1", bad, log=log)
    assert len(caplog.records) == 4  # "a" was forgotten when the memory filled up


@pytest.mark.parametrize(
    ("age_s", "read"),
    [(None, True), (0.0, True), (STALE_AFTER_S - 1, True), (STALE_AFTER_S + 1, False)],
    ids=["no-heartbeat", "fresh", "nearly-stale", "agent-gone"],
)
def test_the_state_of_an_agent_whose_heartbeat_is_too_old_reads_as_none(age_s: float | None, read: bool) -> None:
    given = annotations([slot("s0")])
    if age_s is not None:
        given[HEARTBEAT_ANNOTATION] = str(int(time.time() - age_s))
    state = read_node_slots("n1", "7", given)
    assert (state is not None) is read
    body = [{"metadata": {"name": "n1", "resourceVersion": "7", "annotations": given}}]
    assert ("n1" in RequestNodes(body).nodes) is read


def test_a_heartbeat_that_is_not_epoch_seconds_is_malformed() -> None:
    with pytest.raises(NodeStateError, match="not epoch seconds"):
        parse_node_slots("n1", "1", {**annotations([slot("s0")]), HEARTBEAT_ANNOTATION: "yesterday"})

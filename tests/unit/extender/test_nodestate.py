"""Published node state: an FpgaNodeState parsed once into counts, a malformed one read as none, reported once."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agent.extender.nodestate import LoadedSlot, MalformedLog, read_published_state
from tests.unit.extender.factories import CATALOG, N3K, PAC, node, slot, state_object_of


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
    assert [s["id"] for s in state.slots] == ["s0", "s1", "s2", "s3", "s4", "s5", "s6"]


def test_never_used_slots_sort_first_among_reusable() -> None:
    state = node("n1", [slot("a", bitstream="aes", last_used=10), slot("b", bitstream="sha", last_used=None)])
    assert [s.bitstream for s in state.reusable[PAC]] == ["sha", "aes"]


def test_a_slot_outside_the_catalog_sorts_beside_a_loaded_one_used_at_the_same_time() -> None:
    state = node(
        "n1",
        [slot("a", bitstream="aes", last_used=10), slot("b", bitstream=None, accelerator="unknown-afu", last_used=10)],
    )
    assert state.reusable[PAC] == (LoadedSlot(10, None), LoadedSlot(10, "aes"))


def test_optional_fields_may_be_absent() -> None:
    obj = state_object_of("n1", [], {})
    obj["spec"]["slots"] = [{"id": "s0", "card": "", "platform": PAC, "free": True, "healthy": True}]
    name, state = read_published_state(obj)
    assert name == "n1"
    assert state is not None
    only = state.slots[0]
    assert (only["card"], only["numa"], only["bitstream"], only["accelerator"], only["last_used"]) == (
        "",
        None,
        None,
        None,
        None,
    )


def _with(**changes: Any) -> dict[str, Any]:
    obj = state_object_of("n1", [slot("s0", bitstream="aes")], rv="7")
    obj["spec"]["slots"][0].update(changes)
    return obj


@pytest.mark.parametrize(
    ("given", "message"),
    [
        pytest.param(_with(id=""), "empty 'id'", id="empty-id"),
        pytest.param(_with(platform=None), "no 'platform'", id="platform-null"),
        pytest.param(_with(free="yes"), "'free' is a string, not true or false", id="free-string"),
        pytest.param(_with(numa="0"), "'numa' is a string, not an integer", id="numa-string"),
        pytest.param(_with(lastUsed=True), "'lastUsed' is true or false, not an integer", id="last-used-bool"),
        pytest.param(state_object_of("n1", [slot("s0"), slot("s0")], rv="7"), "an id is listed twice", id="dup"),
    ],
)
def test_a_malformed_object_reads_as_none_and_the_log_names_the_problem(
    given: dict[str, Any], message: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="agent.extender.nodestate"):
        assert read_published_state(given, log=MalformedLog()) == ("n1", None)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("node n1 (resourceVersion 7) has unusable slot state, treated as none:")
    assert message in line


def test_malformed_state_is_logged_once_per_resource_version(caplog: pytest.LogCaptureFixture) -> None:
    log = MalformedLog()
    with caplog.at_level(logging.WARNING, logger="agent.extender.nodestate"):
        for name, version in (("n1", "7"), ("n1", "7"), ("n2", "7"), ("n1", "8")):  # a relist: the same version
            obj = state_object_of(name, [slot("s0")], rv=version)
            obj["spec"]["slots"] = "not a list"
            assert read_published_state(obj, log=log) == (name, None)
    assert len(caplog.records) == 3


def test_malformed_memory_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    log = MalformedLog(capacity=2)
    with caplog.at_level(logging.WARNING, logger="agent.extender.nodestate"):
        for name in ("a", "b", "c", "a"):
            obj = state_object_of(name, [])
            obj["spec"]["bitstreams"] = []
            read_published_state(obj, log=log)
    assert len(caplog.records) == 4  # "a" was forgotten when the memory filled up


def test_an_object_without_a_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"without metadata\.name"):
        read_published_state({"metadata": {}, "spec": {}})

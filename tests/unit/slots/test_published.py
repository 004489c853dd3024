"""The FpgaNodeState schema: what the agent writes reads back the same; bad objects are refused by name."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.slots.published import (
    MAX_BITSTREAMS,
    MAX_NAME_LEN,
    MAX_SLOTS,
    dropped,
    parse_state,
    state_object,
    state_spec,
)
from agent.slots.registry import SlotRegistry
from tests.unit.slots.factories import FakeClock, make_slot

CRD = Path(__file__).parents[3] / "daemonset" / "fpganodestate-crd.yaml"


def registry_with_a_held_slot() -> SlotRegistry:
    registry = SlotRegistry(clock=FakeClock())
    registry.replace_all([make_slot("card1", "slot0", numa=1), make_slot("card0", "slot0", numa=None)])
    registry.assign([["card0-slot0"]])
    return registry


def test_what_the_agent_writes_reads_back_as_the_same_slots_and_catalog() -> None:
    registry = registry_with_a_held_slot()
    spec = state_spec("node-a", registry.snapshot(), {"zlib": "test-pr", "aes": "test-pr"})
    obj = state_object("node-a", "fpga-slot", json.loads(json.dumps(spec)))
    obj["metadata"]["resourceVersion"] = "42"

    state = parse_state(obj)

    assert (state.node, state.version) == ("node-a", "42")
    assert [slot["id"] for slot in state.slots] == ["card0-slot0", "card1-slot0"]
    assert [(slot["free"], slot["numa"]) for slot in state.slots] == [(False, None), (True, 1)]
    assert dict(state.bitstreams) == {"aes": "test-pr", "zlib": "test-pr"}
    assert list(spec["bitstreams"]) == ["aes", "zlib"]
    assert "lastUsed" in spec["slots"][0]
    assert "last_used" not in spec["slots"][0]


def test_an_owner_reference_is_the_only_owner_of_the_object() -> None:
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "fpga-slot-agent", "uid": "u-1"}
    obj = state_object("node-a", "fpga-slot", {"nodeName": "node-a", "slots": [], "bitstreams": {}}, owner)
    assert obj["metadata"]["ownerReferences"] == [owner]
    assert "ownerReferences" not in state_object("node-a", "ns", {})["metadata"]


def good() -> dict[str, Any]:
    return {
        "metadata": {"name": "node-a", "resourceVersion": "7"},
        "spec": {
            "nodeName": "node-a",
            "slots": [
                {"id": "c0-s0", "card": "c0", "platform": "p", "free": True, "healthy": True, "numa": 0},
            ],
            "bitstreams": {"aes": "p"},
        },
    }


def with_change(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    obj = good()
    target: Any = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return obj


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        pytest.param({"spec": {}}, "no metadata", id="no-metadata"),
        pytest.param(with_change(("metadata", "name"), ""), "no metadata.name", id="no-name"),
        pytest.param({"metadata": {"name": "n"}}, "no spec", id="no-spec"),
        pytest.param(with_change(("spec", "nodeName"), "other"), "differs from its name", id="other-node"),
        pytest.param(with_change(("spec", "slots"), {}), "slots: an object, not a list", id="slots-object"),
        pytest.param(with_change(("spec", "slots", 0, "free"), 1), "'free' is a number", id="free-number"),
        pytest.param(with_change(("spec", "slots", 0, "numa"), True), "'numa' is true or false", id="numa-bool"),
        pytest.param(with_change(("spec", "slots", 0, "id"), ""), "empty 'id'", id="empty-id"),
        pytest.param(with_change(("spec", "slots", 0, "card"), None), "no 'card'", id="no-card"),
        pytest.param(
            with_change(("spec", "slots", 0, "bitstream"), "x" * (MAX_NAME_LEN + 1)), "longer than", id="long-name"
        ),
        pytest.param(
            with_change(("spec", "slots"), [good()["spec"]["slots"][0]] * 2), "listed twice", id="duplicate-id"
        ),
        pytest.param(
            with_change(("spec", "slots"), [good()["spec"]["slots"][0]] * (MAX_SLOTS + 1)),
            "more than",
            id="too-many-slots",
        ),
        pytest.param(with_change(("spec", "bitstreams"), []), "bitstreams: a list", id="bitstreams-list"),
        pytest.param(with_change(("spec", "bitstreams"), {"aes": 3}), "platform is a number", id="platform-number"),
        pytest.param(
            with_change(("spec", "bitstreams"), {f"b{i}": "p" for i in range(MAX_BITSTREAMS + 1)}),
            "more than",
            id="too-many-bitstreams",
        ),
    ],
)
def test_a_malformed_object_is_refused_naming_what_is_wrong(obj: dict[str, Any], message: str) -> None:
    before = copy.deepcopy(obj)
    with pytest.raises(ValueError, match=message):
        parse_state(obj)
    assert obj == before


def test_unknown_fields_are_ignored_so_a_newer_agent_can_add_some() -> None:
    obj = good()
    obj["spec"]["slots"][0]["temperature"] = 71
    obj["spec"]["future"] = {"x": 1}
    assert parse_state(obj).slots[0]["id"] == "c0-s0"


def test_past_its_bounds_the_spec_keeps_the_first_slots_and_bitstreams_and_says_how_many_went() -> None:
    registry = SlotRegistry(clock=FakeClock())
    registry.replace_all([make_slot(f"card{i:03d}", "slot0") for i in range(MAX_SLOTS + 2)])
    catalog = {f"b{i:05d}": "p" for i in range(MAX_BITSTREAMS + 3)}
    spec = state_spec("n", registry.snapshot(), catalog)
    assert len(spec["slots"]) == MAX_SLOTS
    assert len(spec["bitstreams"]) == MAX_BITSTREAMS
    assert dropped(MAX_SLOTS + 2, MAX_BITSTREAMS + 3) == (2, 3)
    assert dropped(1, 1) == (0, 0)
    parse_state({"metadata": {"name": "n"}, "spec": spec})


def test_the_crd_schema_carries_the_same_bounds_and_fields() -> None:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["names"]["plural"] == "fpganodestates"
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    slots = spec["properties"]["slots"]
    assert slots["maxItems"] == MAX_SLOTS
    assert spec["properties"]["bitstreams"]["maxProperties"] == MAX_BITSTREAMS
    fields = set(slots["items"]["properties"])
    registry = registry_with_a_held_slot()
    written = state_spec("n", registry.snapshot(), {})["slots"][0]
    assert fields == set(written)
    for name, schema in slots["items"]["properties"].items():
        if schema["type"] == "string":
            assert schema["maxLength"] == MAX_NAME_LEN, name


def test_platforms_and_accelerator_ids_as_long_as_the_catalog_takes_them_are_read() -> None:
    obj = good()
    obj["spec"]["slots"][0]["platform"] = "p" * 256
    obj["spec"]["slots"][0]["accelerator"] = "a" * 256
    obj["spec"]["bitstreams"] = {"aes": "p" * 256}
    state = parse_state(obj)
    assert (state.slots[0]["platform"], state.bitstreams["aes"]) == ("p" * 256, "p" * 256)

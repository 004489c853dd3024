"""Binding conditions in the slice, a claim's verdict as its device status says it, and the status' apply body."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.dra.binding import BOUND_CONDITION, FAILED_CONDITION, FAILED_TAINT, parse_allocation
from agent.dra.mode import UNHEALTHY_TAINT, slice_devices
from agent.errors import KubeError
from agent.kube.claims import MAX_DATA_BYTES, Condition, DeviceStatus, status_patch
from agent.kube.resourceslices import DeviceTaint, SliceDevice, slice_spec
from agent.slots.model import SlotId
from agent.slots.registry import SlotRegistry
from tests.unit.slots.factories import make_slot

DRIVER = "fpga.example.com"


def registry_of(count: int) -> SlotRegistry:
    registry = SlotRegistry()
    registry.replace_all([make_slot("c0", f"p{i}") for i in range(count)])
    return registry


def test_with_binding_conditions_every_device_binds_to_the_node_and_waits_for_its_conditions() -> None:
    spec = slice_spec(DRIVER, "node-a", slice_devices(registry_of(2).snapshot(), binding=True))
    for device in spec["devices"]:
        assert device["bindsToNode"] is True
        assert device["bindingConditions"] == [BOUND_CONDITION]
        assert device["bindingFailureConditions"] == [FAILED_CONDITION]
    plain = slice_spec(DRIVER, "node-a", slice_devices(registry_of(2).snapshot()))
    assert not {"bindsToNode", "bindingConditions", "bindingFailureConditions"} & set(plain["devices"][0])


def test_a_slot_whose_programming_failed_is_tainted_beside_its_health_taint() -> None:
    registry = registry_of(3)
    registry.taint(SlotId("c0-p2"), "read-back mismatch")
    devices = {
        d.name: d.taints for d in slice_devices(registry.snapshot(), failed=frozenset({"c0-p1", "c0-p2"}), binding=True)
    }
    assert devices == {
        "c0-p0": (),
        "c0-p1": (DeviceTaint(FAILED_TAINT),),
        "c0-p2": (DeviceTaint(UNHEALTHY_TAINT), DeviceTaint(FAILED_TAINT)),
    }


@pytest.mark.parametrize(
    ("conditions", "failures"),
    [
        pytest.param(("a/ok",), (), id="no-failure-condition"),
        pytest.param(tuple(f"a/c{i}" for i in range(5)), ("a/failed",), id="five-conditions"),
    ],
)
def test_binding_conditions_outside_the_apis_limits_are_refused_naming_the_device(
    conditions: tuple[str, ...], failures: tuple[str, ...]
) -> None:
    device = SliceDevice("c0-p0", {}, binding_conditions=conditions, binding_failure_conditions=failures)
    with pytest.raises(KubeError, match=r"c0-p0.*binding conditions"):
        slice_spec(DRIVER, "node-a", [device])


def claim(
    *, binding: bool = True, pool: str = "node-a", verdict: str | None = None, status: str = "True"
) -> dict[str, Any]:
    result: dict[str, Any] = {"request": "fpga", "driver": DRIVER, "pool": pool, "device": "c0-p0"}
    if binding:
        result |= {"bindingConditions": [BOUND_CONDITION], "bindingFailureConditions": [FAILED_CONDITION]}
    raw: dict[str, Any] = {
        "metadata": {"namespace": "ns", "name": "fpga", "uid": "u1"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }
    if verdict is not None:
        raw["status"]["devices"] = [
            {"driver": DRIVER, "pool": pool, "device": "c0-p0", "conditions": [{"type": verdict, "status": status}]}
        ]
    return raw


@pytest.mark.parametrize(
    ("raw", "waiting"),
    [
        pytest.param(claim(), True, id="allocated-no-verdict"),
        pytest.param(claim(verdict=BOUND_CONDITION), False, id="programmed"),
        pytest.param(claim(verdict=FAILED_CONDITION), False, id="failed"),
        pytest.param(claim(verdict=BOUND_CONDITION, status="False"), True, id="condition-false"),
        pytest.param(claim(binding=False), False, id="slice-without-binding-conditions"),
    ],
)
def test_a_claim_waits_for_us_while_its_devices_have_binding_conditions_and_no_verdict(
    raw: dict[str, Any], waiting: bool
) -> None:
    allocation = parse_allocation(raw, "node-a")
    assert allocation is not None
    assert allocation.waiting is waiting


def test_claims_of_other_pools_and_unallocated_claims_are_not_ours() -> None:
    assert parse_allocation(claim(pool="node-b"), "node-a") is None
    assert parse_allocation({"metadata": {"name": "x", "namespace": "ns"}, "status": {}}, "node-a") is None


def allocated_claim(devices: list[dict[str, Any]] | None) -> dict[str, Any]:
    status: dict[str, Any] = {"allocation": {"devices": {"results": []}}}
    if devices is not None:
        status["devices"] = devices
    return {"metadata": {"name": "fpga", "namespace": "ns", "uid": "u1", "resourceVersion": "7"}, "status": status}


def test_the_patch_adds_our_entries_guarded_by_the_resource_version_read() -> None:
    ready = Condition(BOUND_CONDITION, True, "Programmed", "holds aes-v1")
    entry = DeviceStatus("node-a", "c0-p0", (ready,), {"bitstream": "aes"})
    test, add = status_patch(allocated_claim(None), DRIVER, [entry])
    assert test == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert (add["op"], add["path"]) == ("add", "/status/devices")
    (rendered,) = add["value"]
    assert (rendered["driver"], rendered["pool"], rendered["device"], rendered["data"]) == (
        DRIVER, "node-a", "c0-p0", {"bitstream": "aes"}
    )  # fmt: skip
    (condition,) = rendered["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (BOUND_CONDITION, "True", "Programmed")
    assert condition["lastTransitionTime"].endswith("Z")


def test_the_patch_replaces_only_our_entry_of_the_device_and_keeps_its_conditions_when_it_brings_none() -> None:
    ours = {"driver": DRIVER, "pool": "node-a", "device": "c0-p0", "conditions": [{"type": BOUND_CONDITION}]}
    other = {"driver": "gpu.example.com", "pool": "node-a", "device": "c0-p0"}
    ops = status_patch(
        allocated_claim([other, ours]),
        DRIVER,
        [DeviceStatus("node-a", "c0-p0", (), {"bitstream": "aes"}), DeviceStatus("node-a", "c0-p1", (), {"x": 1})],
    )
    assert ops[1:] == [
        {"op": "replace", "path": "/status/devices/1", "value": {**ours, "data": {"bitstream": "aes"}}},
        {"op": "add", "path": "/status/devices/-", "value": {"driver": DRIVER, "pool": "node-a", "device": "c0-p1",
                                                             "data": {"x": 1}}},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        pytest.param(DeviceStatus("p", "d", (Condition("t", True, "not camel", "m"),)), "reason", id="reason"),
        pytest.param(DeviceStatus("p", "d", (Condition("t", True, "R", "m"),) * 9), "conditions", id="nine"),
        pytest.param(DeviceStatus("p", "d", (), {"x": "y" * MAX_DATA_BYTES}), "bytes", id="data-too-big"),
    ],
)
def test_entries_beyond_the_apis_limits_are_refused_before_any_request(entry: DeviceStatus, problem: str) -> None:
    with pytest.raises(KubeError, match=problem):
        status_patch(allocated_claim(None), DRIVER, [entry])
    json.dumps(status_patch(allocated_claim(None), DRIVER, []))


def test_a_claim_without_status_is_not_allocated() -> None:
    with pytest.raises(KubeError, match="not allocated"):
        status_patch({"metadata": {"name": "fpga", "namespace": "ns"}}, DRIVER, [])

"""The agent registers with the kubelet stand-in and lists its slots."""

from __future__ import annotations

from tests.fakes import RESOURCE_NAME, AgentHarness


async def test_registers_and_lists_all_slots(harness: AgentHarness) -> None:
    request = harness.kubelet.registrations[0]
    assert request.version == "v1beta1"
    assert request.resource_name == RESOURCE_NAME
    assert request.endpoint == "fpga-slot.sock"
    assert request.options.pre_start_required
    assert request.options.get_preferred_allocation_available
    assert sorted(harness.conn.devices) == [f"simcard{c}-slot{s}" for c in range(2) for s in range(4)]
    assert all(d.health == "Healthy" for d in harness.conn.devices.values())

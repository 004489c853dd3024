"""The agent registers with the kubelet stand-in and lists its slots."""

from __future__ import annotations

from pathlib import Path

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


async def test_the_device_plugin_mode_serves_no_dra_driver(sock_dir: Path) -> None:
    registry_dir = sock_dir / "plugins_registry"  # the kubelet's plugin watcher directory, there on every node
    registry_dir.mkdir()
    async with AgentHarness.running(sock_dir, dra_registry_dir=registry_dir) as harness:
        config = harness.config
        assert config.mode == "device-plugin"
        assert harness.agent.dra is None
        assert list(registry_dir.iterdir()) == []
        assert not config.dra_plugins_dir.exists()
        assert not config.cdi_dir.exists()

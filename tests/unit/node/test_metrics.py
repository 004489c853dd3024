"""Slot gauges are read from the registry at scrape time, in Prometheus text format."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.node.metrics import AgentMetrics
from agent.slots.model import DeviceNode, Health, Slot, SlotId
from agent.slots.registry import SlotRegistry


def make_slot(region: str, health: Health = Health.HEALTHY, loaded: str | None = None) -> Slot:
    return Slot(
        id=SlotId(f"card0-{region}"),
        card="card0",
        region=region,
        numa=0,
        device_nodes=(DeviceNode(f"/dev/x-{region}", f"/dev/x-{region}"),),
        platform="p",
        loaded=loaded,
        health=health,
        backend="sim",
    )


def scrape(metrics: AgentMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_slot_gauges_follow_the_registry() -> None:
    registry = SlotRegistry()
    registry.replace_all(
        [make_slot("r0"), make_slot("r1", loaded="acc"), make_slot("r2", Health.UNHEALTHY), make_slot("r3")]
    )
    registry.assign([["card0-r1"]])
    registrations = [3]
    metrics = AgentMetrics()
    metrics.watch_slots(registry, lambda: registrations[0])

    seen = scrape(metrics)
    assert seen[("fpga_slot_slots", (("health", "Healthy"), ("state", "free")))] == 2
    assert seen[("fpga_slot_slots", (("health", "Healthy"), ("state", "held")))] == 1
    assert seen[("fpga_slot_slots", (("health", "Unhealthy"), ("state", "free")))] == 1
    assert seen[("fpga_slot_slots", (("health", "Unhealthy"), ("state", "held")))] == 0
    assert seen[("fpga_slot_slots_loaded", ())] == 1
    assert seen[("fpga_slot_kubelet_registrations_total", ())] == 3

    registry.release([SlotId("card0-r1")])
    registrations[0] = 4
    seen = scrape(metrics)
    assert seen[("fpga_slot_slots", (("health", "Healthy"), ("state", "held")))] == 0
    assert seen[("fpga_slot_kubelet_registrations_total", ())] == 4


def test_two_agents_in_one_process_do_not_collide() -> None:
    first, second = AgentMetrics(), AgentMetrics()
    first.cache_lookups.labels(result="hit").inc()
    assert first.registry.get_sample_value("fpga_slot_cache_lookups_total", {"result": "hit"}) == 1
    assert second.registry.get_sample_value("fpga_slot_cache_lookups_total", {"result": "hit"}) is None

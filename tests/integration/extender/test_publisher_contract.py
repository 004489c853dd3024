"""The contract between the agent that publishes node state and the extender that reads it.

The agent renders its FpgaNodeState from the slot registry and the catalog
(``agent.node.nodestate``, through the schema of ``agent.slots.published``); the extender
builds its state from the records read back (``agent.extender.node_state``). Both ends
meet here: what one writes, the other reads as meant.
"""

from __future__ import annotations

from agent.extender.demand import ContainerDemand, PodDemand
from agent.extender.nodestate import LoadedSlot, node_state
from agent.extender.scoring import ScoreWeights, check_node, score_node
from agent.node.nodestate import render_state
from agent.programming.catalogentry import CatalogEntry
from agent.slots.model import Health, SlotId
from agent.slots.published import parse_state, state_object
from agent.slots.registry import SlotRegistry
from tests.unit.slots.factories import FakeClock, make_slot

NOW = 1_700_000_000
PLATFORM = "test-pr"


def entry(name: str, platform: str = PLATFORM) -> CatalogEntry:
    return CatalogEntry(name, f"{name}.gbs", 1024, "0" * 64, platform, f"{name}-accel", "2026-01-01T00:00:00Z")


def published_registry() -> SlotRegistry:
    """card0: aes loaded and free, aes loaded and held, empty; card1: sha loaded and free, unhealthy."""
    clock = FakeClock(NOW)
    registry = SlotRegistry(clock=clock)
    registry.replace_all(
        [
            make_slot("card0", "slot0"),
            make_slot("card0", "slot1"),
            make_slot("card0", "slot2"),
            make_slot("card1", "slot0", numa=1),
            make_slot("card1", "slot1", numa=1, health=Health.UNHEALTHY, reason="firmware crashed"),
        ]
    )
    registry.assign([["card0-slot0"], ["card0-slot1"], ["card1-slot0"]])
    registry.record_content(SlotId("card0-slot0"), "aes", "aes-accel")
    registry.record_content(SlotId("card0-slot1"), "aes", "aes-accel")
    registry.record_content(SlotId("card1-slot0"), "sha", "sha-accel")
    registry.release([SlotId("card0-slot0"), SlotId("card1-slot0")])
    return registry


def test_what_the_agent_publishes_the_extender_reads_as_meant() -> None:
    registry = published_registry()
    spec = render_state("worker-1", registry.snapshot(), [entry("aes"), entry("sha"), entry("fft", "other-pr")])
    read = parse_state({**state_object("worker-1", "fpga-slot", spec), "metadata": {"name": "worker-1"}})

    state = node_state(read)

    by_id = {slot["id"]: slot for slot in state.slots}
    assert set(by_id) == {"card0-slot0", "card0-slot1", "card0-slot2", "card1-slot0", "card1-slot1"}
    loaded_free = by_id["card0-slot0"]
    assert (loaded_free["bitstream"], loaded_free["accelerator"], loaded_free["free"], loaded_free["healthy"]) == (
        "aes",
        "aes-accel",
        True,
        True,
    )
    assert loaded_free["last_used"] == NOW
    assert by_id["card0-slot1"]["free"] is False
    assert by_id["card1-slot1"]["healthy"] is False
    assert by_id["card1-slot0"]["numa"] == 1
    assert dict(state.bitstreams) == {"aes": PLATFORM, "sha": PLATFORM, "fft": "other-pr"}
    assert dict(state.healthy) == {PLATFORM: 4}
    assert dict(state.free_loaded) == {("aes", PLATFORM): 1, ("sha", PLATFORM): 1}
    assert dict(state.free_empty) == {PLATFORM: 1}
    assert state.reusable[PLATFORM] == (LoadedSlot(NOW, "aes"), LoadedSlot(NOW, "sha"))

    weights = ScoreWeights()

    def pod(bitstream: str, slots: int = 1) -> PodDemand:
        return PodDemand.of("default/p", [ContainerDemand("main", slots, bitstream)])

    assert score_node(pod("aes"), state, weights, NOW + 60) == weights.loaded
    assert score_node(pod("fft"), state, weights, NOW + 60) == 0  # other platform: no slot for it
    assert check_node(pod("fft"), state) is not None
    assert check_node(pod("aes", 4), state) is None  # 4 healthy slots of the platform, held or not
    assert check_node(pod("aes", 5), state) is not None

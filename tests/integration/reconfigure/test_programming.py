"""PreStartContainer programs what the pod asked for, over the agent's real unix socket.

The kubelet stand-in admits pods (GetPreferredAllocation, Allocate, PreStartContainer)
against a real agent on simulated cards; the pods' annotations come from the
stand-in's pod directory, which also collects the Events the agent posts.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from agent.simfpga import SimEvent
from agent.slots.registry import Content
from tests.fakes import RESOURCE_NAME, AgentHarness, NodePods
from tests.integration.reconfigure.support import (
    ANNOTATION,
    NS,
    Bitstreams,
    FabricChange,
    events_of,
    fabric_log,
    state,
    wait_registry,
    wants,
)

PROGRAMMED = re.compile(r"Programmed slot (?P<slot>\S+) with (?P<name>\S+) in \d+ ms")


def programmed_events(pods: NodePods, pod: str) -> dict[str, str]:
    """Slot -> bitstream of every FpgaSlotProgrammed Event posted about ``pod``."""
    found = {}
    for event in events_of(pods, pod):
        if event.reason == "FpgaSlotProgrammed":
            assert event.type == "Normal"
            match = PROGRAMMED.fullmatch(event.message)
            assert match is not None, event.message
            found[match["slot"]] = match["name"]
    return found


async def test_slot_is_programmed_before_prestart_returns(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    wanted = bitstreams.accel_a
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        with fabric_log(harness.fabric) as log:
            admitted = await harness.kubelet.admit(NS, "web", "main", RESOURCE_NAME, 1, wants(wanted.name))
            # Nothing is waited for: by the time PreStartContainer returned, all of it happened.
            (slot_id,) = admitted.device_ids
            assert log.programming() == [
                FabricChange(SimEvent.CHANGE, slot_id, None),
                FabricChange(SimEvent.CHANGE, slot_id, wanted.accelerator_id),
            ]
            fabric_view = {f"{i.card}-{i.region}": i.loaded for i in harness.fabric.slots()}
            assert fabric_view[slot_id] == wanted.accelerator_id
            assert [s for s, loaded in fabric_view.items() if loaded is not None] == [slot_id]
            got = state(harness.agent.registry, slot_id)
            assert got.content == Content(wanted.name, wanted.accelerator_id)
            assert got.bitstream == wanted.name
            assert got.taint is None
            assert got.holder is not None
            assert (got.holder.namespace, got.holder.pod, got.holder.container) == (NS, "web", "main")
            assert programmed_events(pods, "web") == {slot_id: wanted.name}
            assert [e.type for e in pods.events] == ["Normal"]
            pod = pods.get(NS, "web")
            assert pod is not None
            assert pod.phase == "Running"


async def test_multi_slot_container_programs_cards_in_parallel_one_slot_per_card_at_a_time(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    wanted = bitstreams.accel_b
    # 2 cards x 2 slots: a 3-slot container gets both slots of one card and one of the other.
    async with AgentHarness.running(
        sock_dir, catalog=bitstreams.catalog, pods=pods, sim_slots_per_card=2, sim_program_ms=50
    ) as harness:
        with fabric_log(harness.fabric) as log:
            admitted = await harness.kubelet.admit(NS, "job", "worker", RESOURCE_NAME, 3, wants(wanted.name))
        ids = admitted.device_ids
        per_card = Counter(slot_id.split("-")[0] for slot_id in ids)
        assert sorted(per_card.values()) == [1, 2], ids
        busy_card = per_card.most_common(1)[0][0]

        steps = log.programming()
        # Every slot went through exactly one reconfiguration: unknown, then the accelerator.
        assert Counter(c.slot for c in steps) == dict.fromkeys(ids, 2)
        for slot_id in ids:
            assert [c.loaded for c in steps if c.slot == slot_id] == [None, wanted.accelerator_id]
        # One card reconfigures one slot at a time: its steps never interleave.
        busy = [c for c in steps if c.slot.startswith(f"{busy_card}-")]
        assert [c.loaded for c in busy] == [None, wanted.accelerator_id] * 2
        assert busy[0].slot == busy[1].slot
        assert busy[2].slot == busy[3].slot
        # Different cards in parallel: both had started before the first one finished.
        first_done = next(i for i, c in enumerate(steps) if c.loaded is not None)
        assert {c.slot.split("-")[0] for c in steps[:first_done]} == set(per_card)

        registry = harness.agent.registry
        for slot_id in ids:
            assert state(registry, slot_id).content == Content(wanted.name, wanted.accelerator_id)
        assert programmed_events(pods, "job") == dict.fromkeys(ids, wanted.name)


async def test_per_container_annotation_overrides_the_pods(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    pod_level, override = bitstreams.accel_a, bitstreams.accel_c
    pods.add(
        NS,
        "mixed",
        {"main": 1, "sidecar": 1},
        {ANNOTATION: pod_level.name, f"{ANNOTATION}.main": override.name},
    )
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        main = await harness.kubelet.admit(NS, "mixed", "main", RESOURCE_NAME, 1)
        sidecar = await harness.kubelet.admit(NS, "mixed", "sidecar", RESOURCE_NAME, 1)
        registry = harness.agent.registry
        assert state(registry, main.device_ids[0]).accelerator_id == override.accelerator_id
        assert state(registry, main.device_ids[0]).bitstream == override.name
        assert state(registry, sidecar.device_ids[0]).accelerator_id == pod_level.accelerator_id
        assert state(registry, sidecar.device_ids[0]).bitstream == pod_level.name
        assert programmed_events(pods, "mixed") == {
            main.device_ids[0]: override.name,
            sidecar.device_ids[0]: pod_level.name,
        }


async def test_without_annotation_the_slot_is_handed_over_as_it_is(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    async with AgentHarness.running(
        sock_dir, catalog=bitstreams.catalog, pods=pods, sim_cards=1, sim_slots_per_card=1
    ) as harness:
        registry, only = harness.agent.registry, "simcard0-slot0"
        await harness.fabric.program("simcard0", "slot0", "left-by-someone")
        await wait_registry(registry, lambda: state(registry, only).accelerator_id == "left-by-someone")
        with fabric_log(harness.fabric) as log:
            admitted = await harness.kubelet.admit(NS, "plain", "main", RESOURCE_NAME, 1, {"unrelated": "x"})
        assert admitted.device_ids == [only]
        assert log.changes == []
        assert log.programs == []
        got = state(registry, only)
        assert got.accelerator_id == "left-by-someone"
        assert got.content is None
        assert got.holder is not None
        assert got.holder.pod == "plain"
        assert pods.events == []


# ------------------------------------------------------------------- the cache
async def load_and_free(harness: AgentHarness, pods: NodePods, name: str) -> str:
    """Program a slot with ``name`` through a pod, delete the pod, reconcile: the slot is free and loaded."""
    first = await harness.kubelet.admit(NS, "first", "main", RESOURCE_NAME, 1, wants(name))
    (loaded,) = first.device_ids
    harness.kubelet.delete_pod(NS, "first")
    registry = harness.agent.registry
    harness.agent.reconfigurer.request_reconcile()
    await wait_registry(registry, lambda: state(registry, loaded).holder is None)
    assert state(registry, loaded).bitstream == name
    pods.events.clear()
    return loaded


async def test_second_pod_with_same_bitstream_is_placed_on_the_loaded_slot_and_not_programmed(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    wanted = bitstreams.accel_a
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        loaded = await load_and_free(harness, pods, wanted.name)
        with fabric_log(harness.fabric) as log:
            second = await harness.kubelet.admit(NS, "second", "main", RESOURCE_NAME, 1, wants(wanted.name))
        # The neutral policy would take an empty slot; knowing the pod, the loaded one is preferred.
        assert second.preferred == [loaded]
        assert second.device_ids == [loaded]
        assert log.changes == []
        assert log.programs == []
        assert [(e.reason, e.type, e.message) for e in events_of(pods, "second")] == [
            ("FpgaSlotCacheHit", "Normal", f"Slot {loaded} already held {wanted.name}")
        ]
        got = state(harness.agent.registry, loaded)
        assert got.bitstream == wanted.name
        assert got.holder is not None
        assert got.holder.pod == "second"


PENDING_CASES = [
    # what another pending pod (not admitted yet) asks for, whether the loaded slot is still preferred
    pytest.param("same", True, id="other-pending-wants-the-same"),
    pytest.param("different", False, id="other-pending-wants-another"),
    pytest.param("none", False, id="other-pending-wants-nothing"),
    pytest.param("no-slots", True, id="other-pending-requests-no-slot"),
]


@pytest.mark.parametrize(("other_wants", "cache_preferred"), PENDING_CASES)
async def test_preference_is_cache_aware_only_when_the_pending_pods_agree(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods, other_wants: str, cache_preferred: bool
) -> None:
    wanted = bitstreams.accel_a
    other_annotations = {
        "same": wants(wanted.name),
        "different": wants(bitstreams.accel_b.name),
        "none": {},
        "no-slots": wants(bitstreams.accel_b.name),
    }[other_wants]
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        loaded = await load_and_free(harness, pods, wanted.name)
        registry = harness.agent.registry
        empty = {s.slot.id for s in registry.snapshot() if s.accelerator_id is None}
        pods.add(NS, "also-pending", {"main": 0 if other_wants == "no-slots" else 1}, other_annotations)
        with fabric_log(harness.fabric) as log:
            second = await harness.kubelet.admit(NS, "second", "main", RESOURCE_NAME, 1, wants(wanted.name))
        (chosen,) = second.device_ids
        assert second.preferred == [chosen]
        if cache_preferred:
            assert chosen == loaded
            assert log.changes == []
            assert log.programs == []
            assert [e.reason for e in events_of(pods, "second")] == ["FpgaSlotCacheHit"]
        else:
            # Neutral: an empty slot first (nothing cached is evicted), then programmed.
            assert chosen in empty
            assert log.programs == [chosen]
            assert [e.reason for e in events_of(pods, "second")] == ["FpgaSlotProgrammed"]
            assert state(registry, loaded).bitstream == wanted.name
        assert state(registry, chosen).bitstream == wanted.name


async def test_loaded_slot_is_reused_when_offered_even_without_a_preference(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    """A hit at PreStartContainer does not depend on the guess: the slot's content decides."""
    wanted = bitstreams.accel_b
    async with AgentHarness.running(
        sock_dir, catalog=bitstreams.catalog, pods=pods, sim_cards=1, sim_slots_per_card=1
    ) as harness:
        loaded = await load_and_free(harness, pods, wanted.name)
        pods.add(NS, "also-pending", {"main": 1}, wants(bitstreams.accel_a.name))
        with fabric_log(harness.fabric) as log:
            second = await harness.kubelet.admit(NS, "second", "main", RESOURCE_NAME, 1, wants(wanted.name))
        assert second.device_ids == [loaded]
        assert log.changes == []
        assert log.programs == []
        assert [e.message for e in events_of(pods, "second")] == [f"Slot {loaded} already held {wanted.name}"]
        assert state(harness.agent.registry, loaded).holder is not None

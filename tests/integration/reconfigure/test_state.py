"""State that survives the agent: the checkpoint, restarts, and releasing slots.

Several agents run one after the other on the same state directory and the same
simulated cards (whose contents persist, as an FPGA keeps its configuration while
the node is up), registered with one kubelet stand-in that keeps its pods.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import shutil
from pathlib import Path

import grpc
import pytest

from agent.demo.kubelet.devicemanager import AdmittedContainer
from agent.simfpga import SimEvent, SimFabric
from agent.slots import checkpoint
from agent.slots.registry import Content
from tests.fakes import RESOURCE_NAME, AgentHarness, KubeletStandIn, NodePods, test_config
from tests.integration.reconfigure.support import (
    NS,
    Bitstreams,
    CheckpointWatch,
    FabricLog,
    agent_running,
    events_of,
    fabric_log,
    held_by,
    kubelet_running,
    pre_start,
    read_checkpoint,
    state,
    wait_registry,
    wants,
)

ONLY = "simcard0-slot0"


def holder_of(entry: dict[str, object]) -> tuple[object, object, object] | None:
    holder = entry.get("holder")
    if not isinstance(holder, dict):
        return None
    return holder.get("namespace"), holder.get("pod"), holder.get("container")


# ----------------------------------------------------------------- checkpoint
async def test_checkpoint_records_content_and_holder_and_a_restarted_agent_restores_them(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods, monkeypatch: pytest.MonkeyPatch
) -> None:
    wanted = bitstreams.accel_a
    config = test_config(sock_dir)
    path = config.state_dir / checkpoint.FILE_NAME
    watch = CheckpointWatch(monkeypatch)
    async with kubelet_running(config, pods) as kubelet:
        async with agent_running(config, kubelet, bitstreams.catalog, pods) as first:
            admitted = await kubelet.admit(NS, "keeper", "main", RESOURCE_NAME, 1, wants(wanted.name))
            (slot_id,) = admitted.device_ids
            slots = await watch.wait_for(path, lambda s: s.get(slot_id, {}).get("bitstream") == wanted.name)
            assert slots[slot_id]["accelerator_id"] == wanted.accelerator_id
            assert holder_of(slots[slot_id]) == (NS, "keeper", "main")
            assert all("bitstream" not in entry for other, entry in slots.items() if other != slot_id)
            assert all(holder_of(entry) is None for other, entry in slots.items() if other != slot_id)
            before = state(first.agent.registry, slot_id)

        async with agent_running(config, kubelet, bitstreams.catalog, pods) as second:
            registry = second.agent.registry
            restored = state(registry, slot_id)
            assert restored.content == Content(wanted.name, wanted.accelerator_id)
            assert restored.holder == before.holder
            assert restored.last_used == before.last_used
            assert [s.slot.id for s in registry.snapshot() if s.holder is not None] == [slot_id]
            # The kubelet restarts the container: the restored content is a hit.
            with fabric_log(second.fabric) as log:
                await pre_start(kubelet, [slot_id])
            assert log.programs == []
            assert events_of(pods, "keeper")[-1].message == f"Slot {slot_id} already held {wanted.name}"


async def test_what_the_hardware_reports_wins_over_the_checkpoint(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    config = test_config(sock_dir, sim_cards=1, sim_slots_per_card=2)
    async with kubelet_running(config, pods) as kubelet:
        async with agent_running(config, kubelet, bitstreams.catalog, pods):
            one = await kubelet.admit(NS, "one", "main", RESOURCE_NAME, 1, wants(bitstreams.accel_a.name))
            two = await kubelet.admit(NS, "two", "main", RESOURCE_NAME, 1, wants(bitstreams.accel_b.name))
        (replaced,), (kept,) = one.device_ids, two.device_ids
        final = read_checkpoint(config.state_dir / checkpoint.FILE_NAME)
        assert final[replaced]["bitstream"] == bitstreams.accel_a.name
        assert final[kept]["bitstream"] == bitstreams.accel_b.name

        # While no agent runs, someone loads another accelerator into one slot.
        fabric_state = config.sim_dev_dir / "fabric.json"
        saved = json.loads(fabric_state.read_text())
        saved["loaded"][replaced.replace("-", "/", 1)] = "someone-elses-accel"
        fabric_state.write_text(json.dumps(saved))

        async with agent_running(config, kubelet, bitstreams.catalog, pods) as second:
            registry = second.agent.registry
            got = state(registry, replaced)
            assert got.accelerator_id == "someone-elses-accel"
            assert got.content is None
            assert got.bitstream is None
            assert got.holder is not None  # the pod still holds it
            assert state(registry, kept).content == Content(bitstreams.accel_b.name, bitstreams.accel_b.accelerator_id)
            # A restart of that container programs its bitstream again.
            with fabric_log(second.fabric) as log:
                await pre_start(kubelet, [replaced])
            assert log.programs == [replaced]
            assert state(registry, replaced).bitstream == bitstreams.accel_a.name


async def test_holder_gone_while_the_agent_was_down_is_released_at_start_content_kept(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    wanted = bitstreams.accel_a
    config = test_config(sock_dir)
    async with kubelet_running(config, pods) as kubelet:
        async with agent_running(config, kubelet, bitstreams.catalog, pods):
            gone = await kubelet.admit(NS, "gone", "main", RESOURCE_NAME, 1, wants(wanted.name))
            stays = await kubelet.admit(NS, "stays", "main", RESOURCE_NAME, 1, wants(wanted.name))
        kubelet.delete_pod(NS, "gone")
        final = read_checkpoint(config.state_dir / checkpoint.FILE_NAME)
        assert holder_of(final[gone.device_ids[0]]) == (NS, "gone", "main")

        async with agent_running(config, kubelet, bitstreams.catalog, pods) as second:
            registry = second.agent.registry
            released = state(registry, gone.device_ids[0])
            assert released.holder is None
            assert released.content == Content(wanted.name, wanted.accelerator_id)
            kept = state(registry, stays.device_ids[0])
            assert kept.holder is not None
            assert kept.holder.pod == "stays"


def garbage(valid: bytes) -> bytes:
    return b"\x00{not json" + valid[:20]


def bad_checksum(valid: bytes) -> bytes:
    document = json.loads(valid)
    document["slots"]["simcard0-slot1"]["bitstream"] = "accel-b"
    return json.dumps(document).encode()


def unknown_version(valid: bytes) -> bytes:
    document = json.loads(valid)
    document["version"] = 99
    return json.dumps(document).encode()


def not_an_object(valid: bytes) -> bytes:
    return b"[1, 2, 3]"


def bad_field(valid: bytes) -> bytes:
    document = json.loads(valid)
    document["slots"]["simcard0-slot1"]["holder"] = "nobody"
    canonical = json.dumps(document["slots"], sort_keys=True, separators=(",", ":")).encode()
    document["checksum"] = hashlib.sha256(canonical).hexdigest()
    return json.dumps(document).encode()


CORRUPT = [
    pytest.param(garbage, "not valid JSON", id="garbage"),
    pytest.param(bad_checksum, "checksum", id="bad-checksum"),
    pytest.param(unknown_version, "unknown version 99", id="unknown-version"),
    pytest.param(not_an_object, "not a JSON object", id="not-an-object"),
    pytest.param(bad_field, "holder is not an object", id="bad-field"),
]


@pytest.mark.parametrize(("corrupt", "reason"), CORRUPT)
async def test_bad_checkpoint_is_set_aside_and_the_agent_starts(
    sock_dir: Path,
    bitstreams: Bitstreams,
    pods: NodePods,
    caplog: pytest.LogCaptureFixture,
    corrupt: object,
    reason: str,
) -> None:
    assert callable(corrupt)
    config = test_config(sock_dir)
    path = config.state_dir / checkpoint.FILE_NAME
    # A checkpoint that would restore a bitstream and a holder, had it been trusted.
    slots = {
        "simcard0-slot1": {
            "bitstream": "accel-a",
            "accelerator_id": "sim-accel-a",
            "last_used": 1.0,
            "holder": {"namespace": NS, "pod": "old", "container": "main", "allocated_at": 1.0},
        }
    }
    canonical = json.dumps(slots, sort_keys=True, separators=(",", ":")).encode()
    valid = {"version": checkpoint.VERSION, "checksum": hashlib.sha256(canonical).hexdigest(), "slots": slots}
    data = corrupt(json.dumps(valid).encode())
    assert isinstance(data, bytes)
    path.parent.mkdir(parents=True)
    path.write_bytes(data)

    caplog.set_level(logging.ERROR, logger="agent.slots.checkpoint")
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        registry = harness.agent.registry
        assert all(s.content is None and s.holder is None for s in registry.snapshot())
        (aside,) = path.parent.glob(f"{checkpoint.FILE_NAME}.bad-*")
        assert aside.read_bytes() == data
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        message = errors[0].getMessage()
        assert str(path) in message
        assert aside.name in message
        assert reason in message
        # The agent works normally on the rebuilt state.
        admitted = await harness.kubelet.admit(NS, "new", "main", RESOURCE_NAME, 1, wants("accel-a"))
        assert state(registry, admitted.device_ids[0]).bitstream == "accel-a"


# ------------------------------------------------------ restart mid-programming
async def programming_under_way(
    kubelet: KubeletStandIn, fabric: SimFabric, log: FabricLog, bitstream: str
) -> asyncio.Task[AdmittedContainer]:
    """Admit pod ``interrupted`` asking for ``bitstream``; return once its slot's programming began
    (a programming that does not end by itself)."""
    fabric.program_s = 3600.0
    started = asyncio.Event()
    log.hooks.append(
        lambda change: started.set() if change.event is SimEvent.CHANGE and change.loaded is None else None
    )
    admission = asyncio.create_task(kubelet.admit(NS, "interrupted", "main", RESOURCE_NAME, 1, wants(bitstream)))
    async with asyncio.timeout(5):
        await started.wait()
    return admission


@pytest.mark.parametrize("previously", [None, "accel-a"], ids=["slot-was-empty", "slot-held-another"])
async def test_agent_stopped_while_programming_leaves_a_consistent_state(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods, previously: str | None
) -> None:
    wanted = bitstreams.accel_b
    config = test_config(sock_dir, sim_cards=1, sim_slots_per_card=1)
    path = config.state_dir / checkpoint.FILE_NAME
    async with kubelet_running(config, pods) as kubelet:
        async with agent_running(config, kubelet, bitstreams.catalog, pods) as first:
            registry, fabric = first.agent.registry, first.fabric
            if previously is not None:
                await kubelet.admit(NS, "earlier", "main", RESOURCE_NAME, 1, wants(previously))
                kubelet.delete_pod(NS, "earlier")
                first.agent.reconfigurer.request_reconcile()
                await wait_registry(registry, lambda: state(registry, ONLY).holder is None)
                assert state(registry, ONLY).bitstream == previously

            with fabric_log(fabric) as log:
                admission = await programming_under_way(kubelet, fabric, log, wanted.name)
                await first.shut_down()
            assert [t for t in asyncio.all_tasks() if t.get_name().startswith("recover slot")] == []
            with pytest.raises(grpc.aio.AioRpcError):
                await admission
            assert log.programs == [ONLY]
            after_stop = state(registry, ONLY)
            assert after_stop.bitstream is None
            assert after_stop.accelerator_id is None
            assert fabric.slots()[0].loaded is None  # the hardware: content undefined
            assert [e.reason for e in events_of(pods, "interrupted")] == []

        final = read_checkpoint(path)
        assert "bitstream" not in final[ONLY]
        assert holder_of(final[ONLY]) == (NS, "interrupted", "main")

        async with agent_running(config, kubelet, bitstreams.catalog, pods) as second:
            registry = second.agent.registry
            got = state(registry, ONLY)
            assert got.content is None
            assert got.accelerator_id is None
            assert got.health.value == "Healthy"
            assert got.holder is not None
            assert got.holder.pod == "interrupted"
            # The kubelet retries the container start: now it is programmed.
            assert held_by(kubelet, "interrupted", "main") == [ONLY]
            with fabric_log(second.fabric) as log:
                await pre_start(kubelet, [ONLY])
            assert log.programs == [ONLY]
            assert state(registry, ONLY).content == Content(wanted.name, wanted.accelerator_id)
            assert second.fabric.slots()[0].loaded == wanted.accelerator_id
            assert [e.reason for e in events_of(pods, "interrupted")] == ["FpgaSlotProgrammed"]


async def test_agent_killed_while_programming_never_believes_the_old_content(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods, caplog: pytest.LogCaptureFixture
) -> None:
    """A SIGKILL half-way writes nothing more: the disk as it was then must not say the slot holds the
    bitstream it held before (a real region is undefined after an interrupted partial reconfiguration)."""
    previously, wanted = bitstreams.accel_a, bitstreams.accel_b
    config = test_config(sock_dir, sim_cards=1, sim_slots_per_card=1)
    killed_state = sock_dir / "state-at-kill"
    async with kubelet_running(config, pods) as kubelet:
        async with agent_running(config, kubelet, bitstreams.catalog, pods) as first:
            registry, fabric = first.agent.registry, first.fabric
            await kubelet.admit(NS, "earlier", "main", RESOURCE_NAME, 1, wants(previously.name))
            kubelet.delete_pod(NS, "earlier")
            first.agent.reconfigurer.request_reconcile()
            await wait_registry(registry, lambda: state(registry, ONLY).holder is None)
            await asyncio.sleep(2 * checkpoint.WRITE_INTERVAL_S)  # the periodic writer has caught up

            with fabric_log(fabric) as log:
                admission = await programming_under_way(kubelet, fabric, log, wanted.name)
                shutil.copytree(config.state_dir, killed_state)  # what a SIGKILL now leaves on disk
                on_disk = read_checkpoint(killed_state / checkpoint.FILE_NAME)[ONLY]
                assert "bitstream" not in on_disk
                assert on_disk["programming"] == {"bitstream": wanted.name, "accelerator_id": wanted.accelerator_id}
                await first.shut_down()
            with pytest.raises(grpc.aio.AioRpcError):
                await admission

        restarted = dataclasses.replace(config, state_dir=killed_state)
        async with agent_running(restarted, kubelet, bitstreams.catalog, pods) as second:
            got = state(second.agent.registry, ONLY)
            assert second.fabric.slots()[0].loaded is None  # the card: undefined since programming began
            assert got.content is None
            assert got.bitstream is None
            assert got.programming is None
    assert any(
        "programming with accel-b was under way when the agent stopped" in r.getMessage() for r in caplog.records
    )


# -------------------------------------------------------------------- release
async def test_slot_of_a_deleted_pod_is_released_with_its_bitstream_kept(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    wanted = bitstreams.accel_c
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        registry, kubelet = harness.agent.registry, harness.kubelet
        gone = await kubelet.admit(NS, "gone", "main", RESOURCE_NAME, 2, wants(wanted.name))
        stays = await kubelet.admit(NS, "stays", "main", RESOURCE_NAME, 1, wants(wanted.name))
        kubelet.delete_pod(NS, "gone")
        await harness.agent.reconfigurer.reconcile()
        for slot_id in gone.device_ids:
            got = state(registry, slot_id)
            assert got.holder is None
            assert got.content == Content(wanted.name, wanted.accelerator_id)
            assert got.health.value == "Healthy"
        (stays_slot,) = stays.device_ids
        kept = state(registry, stays_slot)
        assert kept.holder is not None
        assert kept.holder.pod == "stays"
        assert {i.card + "-" + i.region: i.loaded for i in harness.fabric.slots()} == {
            slot_id: (wanted.accelerator_id if slot_id in [*gone.device_ids, stays_slot] else None)
            for slot_id in harness.conn.devices
        }

"""Every way a reconfiguration can go wrong, as the kubelet sees it on the wire.

A bad request changes nothing and programs nothing; a failed or timed-out
programming leaves the slot's content unknown, so it is advertised Unhealthy until
the agent's background recovery has programmed it again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

import agent.node.slotloader
from agent.deviceplugin.servicer import status_for
from agent.errors import (
    BitstreamFileError,
    BitstreamHashError,
    DiscoveryError,
    FpgaSlotError,
    InvalidBitstreamName,
    PlatformMismatch,
    PodLookupError,
    ProgrammingError,
    ProgrammingTimeout,
    UnknownBitstream,
)
from agent.simfpga import SimEvent, SimSlotInfo
from agent.slots.registry import Content
from tests.fakes import RESOURCE_NAME, AgentHarness, NodePods
from tests.integration.reconfigure.support import (
    HEALTHY,
    NS,
    UNHEALTHY,
    Bitstreams,
    FabricChange,
    events_of,
    ever_unhealthy,
    fabric_log,
    held_by,
    observable,
    pre_start,
    rpc_error,
    state,
    wants,
)

ONLY = "simcard0-slot0"


def code_of(kind: type[FpgaSlotError]) -> grpc.StatusCode:
    """The status the servicer maps this error to (the edge's own table)."""
    return status_for(kind("probe"))


def names(details: str, *words: str) -> bool:
    return all(re.search(rf"(?<![\w./-]){re.escape(word)}(?![\w-])", details) for word in words)


async def failed_programming(harness: AgentHarness, pods: NodePods, pod: str, bitstream: str) -> str:
    """Start a pod that asks for ``bitstream``; its start must fail as a failed programming, with the one
    Warning Event that says so. Returns the error's details."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await harness.kubelet.admit(NS, pod, "main", RESOURCE_NAME, 1, wants(bitstream))
    error = rpc_error(info.value)
    details = error.details() or ""
    assert error.code() is code_of(ProgrammingError), details
    assert [e.reason for e in events_of(pods, pod) if e.type == "Warning"] == ["FpgaSlotProgrammingFailed"]
    return details


# ------------------------------------------------------------------ bad input
def tamper(bitstreams: Bitstreams) -> str:
    path = bitstreams.path_of(bitstreams.accel_a.name)
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # same size, different content
    path.write_bytes(bytes(data))
    return bitstreams.accel_a.name


def remove_file(bitstreams: Bitstreams) -> str:
    bitstreams.path_of(bitstreams.accel_b.name).unlink()
    return bitstreams.accel_b.name


def traversal(bitstreams: Bitstreams) -> str:
    # A record right where the name would lead if it were ever used as a path.
    planted = bitstreams.catalog.directory.parent / "etc"
    planted.mkdir()
    (planted / "passwd.json").write_text((bitstreams.catalog.directory / f"{bitstreams.accel_a.name}.json").read_text())
    (planted / "passwd").write_bytes(b"root:x:0:0::/root:/bin/sh\n")
    return "../etc/passwd"


BAD_INPUT = [
    # what the pod asks for (a name, or a function preparing the catalog and returning it),
    # the error kind, words of the cause the message must contain
    pytest.param("no-such-bitstream", UnknownBitstream, ["no-such-bitstream", "not in the catalog"], id="unknown"),
    pytest.param(traversal, InvalidBitstreamName, ["invalid bitstream name"], id="path-traversal"),
    pytest.param("Accel-A", InvalidBitstreamName, ["invalid bitstream name", "Accel-A"], id="upper-case"),
    pytest.param("a" * 64, InvalidBitstreamName, ["invalid bitstream name", "63"], id="too-long"),
    pytest.param("foreign", PlatformMismatch, ["foreign", "other-pr-v9", "sim-pr-v1"], id="platform-mismatch"),
    pytest.param(tamper, BitstreamHashError, ["accel-a", "sha256"], id="hash-mismatch"),
    pytest.param(remove_file, BitstreamFileError, ["accel-b", "missing"], id="file-missing"),
]


@pytest.mark.parametrize(("asked", "kind", "cause"), BAD_INPUT)
async def test_bad_bitstream_request_fails_clearly_and_changes_nothing(
    sock_dir: Path,
    bitstreams: Bitstreams,
    pods: NodePods,
    asked: str | Callable[[Bitstreams], str],
    kind: type[FpgaSlotError],
    cause: list[str],
) -> None:
    name = asked(bitstreams) if callable(asked) else asked
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        registry = harness.agent.registry
        before = observable(registry)
        with fabric_log(harness.fabric) as log, pytest.raises(grpc.aio.AioRpcError) as info:
            await harness.kubelet.admit(NS, "bad", "main", RESOURCE_NAME, 1, wants(name))
        error = rpc_error(info.value)
        (slot_id,) = held_by(harness.kubelet, "bad", "main")
        details = error.details() or ""
        assert error.code() is code_of(kind), details
        assert names(details, f"{NS}/bad", slot_id, *cause), details
        assert log.changes == []
        assert log.programs == []
        assert all(i.loaded is None for i in harness.fabric.slots())
        assert observable(registry) == before
        assert [(e.type, e.reason, e.message) for e in events_of(pods, "bad")] == [
            ("Warning", "FpgaBitstreamRejected", details)
        ]
        pod = pods.get(NS, "bad")
        assert pod is not None
        assert pod.phase == "Pending"


async def test_pod_unknown_to_the_api_server_is_not_found(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        # The kubelet runs a pod the agent's pod cache has not seen (yet).
        harness.kubelet.pods = None
        registry = harness.agent.registry
        before = observable(registry)
        with fabric_log(harness.fabric) as log, pytest.raises(grpc.aio.AioRpcError) as info:
            await harness.kubelet.admit(NS, "ghost", "main", RESOURCE_NAME, 1)
        error = rpc_error(info.value)
        (slot_id,) = held_by(harness.kubelet, "ghost", "main")
        details = error.details() or ""
        assert error.code() is code_of(PodLookupError), details
        assert names(details, f"{NS}/ghost", slot_id, "not known"), details
        assert log.changes == []
        assert log.programs == []
        assert observable(registry) == before
        # No Event: there is no pod object to attach it to (the kubelet reports the error on its pod).
        assert pods.events == []


async def test_slots_no_container_holds_are_not_found(sock_dir: Path, bitstreams: Bitstreams, pods: NodePods) -> None:
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        registry = harness.agent.registry
        before = observable(registry)
        with fabric_log(harness.fabric) as log, pytest.raises(grpc.aio.AioRpcError) as info:
            await pre_start(harness.kubelet, ["simcard1-slot2"])
        error = rpc_error(info.value)
        details = error.details() or ""
        assert error.code() is code_of(PodLookupError), details
        assert names(details, "simcard1-slot2", "pod-resources"), details
        assert log.changes == []
        assert log.programs == []
        assert observable(registry) == before
        assert state(registry, "simcard1-slot2").holder is None
        assert pods.events == []


# ----------------------------------------------------------- programming fails
async def test_failed_programming_taints_the_slot_until_recovery_programs_it(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    wanted = bitstreams.accel_c
    async with AgentHarness.running(
        sock_dir, catalog=bitstreams.catalog, pods=pods, sim_cards=1, sim_slots_per_card=1
    ) as harness:
        registry, kubelet = harness.agent.registry, harness.kubelet
        harness.fabric.fail_next_program("simcard0", "slot0", "PR engine reported CRC error")
        with fabric_log(harness.fabric) as log:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await kubelet.admit(NS, "unlucky", "main", RESOURCE_NAME, 1, wants(wanted.name))
            error = rpc_error(info.value)
            details = error.details() or ""
            assert error.code() is code_of(ProgrammingError), details
            assert names(details, f"{NS}/unlucky", ONLY, wanted.name, "CRC error"), details
            warnings = [e for e in events_of(pods, "unlucky") if e.type == "Warning"]
            assert [(e.reason, e.message) for e in warnings] == [("FpgaSlotProgrammingFailed", details)]

            # The kubelet is told the slot is Unhealthy; the registry says why.
            await kubelet.wait_for(lambda: ever_unhealthy(kubelet, ONLY), 5.0)
            # ... and then the recovery programs it again, by itself.
            await kubelet.wait_for(lambda: harness.conn.devices[ONLY].health == HEALTHY, 5.0)
            assert state(registry, ONLY).content == Content(wanted.name, wanted.accelerator_id)
            assert state(registry, ONLY).taint is None
            assert [c.loaded for c in log.programming()] == [None, None, None, wanted.accelerator_id]
        assert harness.fabric.slots()[0].loaded == wanted.accelerator_id
        # The container start is retried by the kubelet: now a hit.
        await pre_start(kubelet, [ONLY])
        assert events_of(pods, "unlucky")[-1].reason == "FpgaSlotCacheHit"


async def test_taint_reason_is_reported_while_the_slot_waits_for_recovery(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent.node.slotloader, "RECOVERY_DELAY_S", 600.0)  # stays tainted for this test
    async with AgentHarness.running(
        sock_dir, catalog=bitstreams.catalog, pods=pods, sim_cards=1, sim_slots_per_card=1
    ) as harness:
        registry, kubelet = harness.agent.registry, harness.kubelet
        harness.fabric.fail_next_program("simcard0", "slot0", "PR engine reported CRC error")
        with pytest.raises(grpc.aio.AioRpcError):
            await kubelet.admit(NS, "unlucky", "main", RESOURCE_NAME, 1, wants(bitstreams.accel_a.name))
        await kubelet.wait_for(lambda: harness.conn.devices[ONLY].health == UNHEALTHY, 5.0)
        got = state(registry, ONLY)
        assert got.health.value == UNHEALTHY
        assert "CRC error" in got.reason
        assert got.content is None
        assert got.accelerator_id is None
        # An Unhealthy slot is not started into.
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await pre_start(kubelet, [ONLY])
        assert rpc_error(info.value).code() is grpc.StatusCode.FAILED_PRECONDITION


async def test_slot_reporting_another_accelerator_afterwards_is_a_failed_programming(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E.g. a catalog record whose accelerator id is wrong: what the slot reports is checked."""
    monkeypatch.setattr(agent.node.slotloader, "RECOVERY_DELAY_S", 600.0)  # stays tainted for this test
    wanted = bitstreams.accel_a
    async with AgentHarness.running(
        sock_dir, catalog=bitstreams.catalog, pods=pods, sim_cards=1, sim_slots_per_card=1
    ) as harness:
        registry, kubelet, fabric = harness.agent.registry, harness.kubelet, harness.fabric
        reported = fabric.slots

        def read_back() -> list[SimSlotInfo]:
            return [
                dataclasses.replace(i, loaded="what-it-really-is") if i.loaded == wanted.accelerator_id else i
                for i in reported()
            ]

        monkeypatch.setattr(fabric, "slots", read_back)
        details = await failed_programming(harness, pods, "mislabelled", wanted.name)
        assert names(details, f"{NS}/mislabelled", ONLY, "what-it-really-is", wanted.accelerator_id), details
        await kubelet.wait_for(lambda: harness.conn.devices[ONLY].health == UNHEALTHY, 5.0)
        got = state(registry, ONLY)
        assert got.content is None
        assert got.bitstream is None


async def test_a_slot_that_cannot_be_read_back_is_a_failed_programming_and_recovers(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hardware was programmed, but reading the slots back fails (udev out of file handles): the content
    is unknown, so the slot is tainted, the start fails naming pod and slot, and recovery programs it again."""
    wanted = bitstreams.accel_a
    async with AgentHarness.running(
        sock_dir, catalog=bitstreams.catalog, pods=pods, sim_cards=1, sim_slots_per_card=1
    ) as harness:
        registry, kubelet, fabric = harness.agent.registry, harness.kubelet, harness.fabric
        reported = fabric.slots
        failures = [DiscoveryError("enumerating the slots failed: [Errno 24] Too many open files")]

        def read_back() -> list[SimSlotInfo]:
            slots = reported()
            if failures and any(i.loaded == wanted.accelerator_id for i in slots):
                raise failures.pop()
            return slots

        monkeypatch.setattr(fabric, "slots", read_back)
        details = await failed_programming(harness, pods, "unread", wanted.name)
        assert names(details, f"{NS}/unread", ONLY, "could not be read back", "Too many open files"), details
        await kubelet.wait_for(lambda: ever_unhealthy(kubelet, ONLY), 5.0)
        await kubelet.wait_for(lambda: harness.conn.devices[ONLY].health == HEALTHY, 5.0)
        assert state(registry, ONLY).content == Content(wanted.name, wanted.accelerator_id)


async def test_programming_timeout_fails_inside_the_kubelet_deadline_and_recovers(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    wanted = bitstreams.accel_b
    async with AgentHarness.running(
        sock_dir,
        catalog=bitstreams.catalog,
        pods=pods,
        sim_cards=1,
        sim_slots_per_card=1,
        program_timeout_s=1.0,
    ) as harness:
        registry, kubelet = harness.agent.registry, harness.kubelet
        harness.fabric.hang_next_program("simcard0", "slot0")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await kubelet.admit(NS, "stuck", "main", RESOURCE_NAME, 1, wants(wanted.name))
        error = rpc_error(info.value)
        details = error.details() or ""
        # The agent's own answer (naming pod and slot), not the kubelet's 30 s deadline firing.
        assert error.code() is code_of(ProgrammingTimeout), details
        assert names(details, f"{NS}/stuck", ONLY, "did not finish"), details
        assert [e.reason for e in events_of(pods, "stuck") if e.type == "Warning"] == ["FpgaSlotProgrammingFailed"]
        await kubelet.wait_for(lambda: ever_unhealthy(kubelet, ONLY), 5.0)
        await kubelet.wait_for(lambda: harness.conn.devices[ONLY].health == HEALTHY, 5.0)
        assert state(registry, ONLY).content == Content(wanted.name, wanted.accelerator_id)


async def test_slot_vanishing_while_programmed_fails_and_state_stays_consistent(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    wanted = bitstreams.accel_a
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        registry, kubelet, fabric = harness.agent.registry, harness.kubelet, harness.fabric
        with fabric_log(fabric) as log:

            def unplug_when_started(change: FabricChange) -> None:
                if change.event is SimEvent.CHANGE and change.loaded is None:
                    log.hooks.clear()
                    fabric.unplug(change.slot.split("-")[0])

            log.hooks.append(unplug_when_started)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await kubelet.admit(NS, "unplugged", "main", RESOURCE_NAME, 1, wants(wanted.name))
        error = rpc_error(info.value)
        details = error.details() or ""
        (slot_id,) = held_by(kubelet, "unplugged", "main")
        card = slot_id.split("-")[0]
        assert error.code() is code_of(ProgrammingError), details
        assert names(details, f"{NS}/unplugged", slot_id, "vanished"), details
        assert [e.reason for e in events_of(pods, "unplugged") if e.type == "Warning"] == ["FpgaSlotProgrammingFailed"]

        # Still listed (it is held), Unhealthy, holding nothing the agent believes in.
        await kubelet.wait_for(lambda: harness.conn.devices[slot_id].health == UNHEALTHY, 5.0)
        got = state(registry, slot_id)
        assert not got.present
        assert got.content is None
        assert got.bitstream is None
        assert got.accelerator_id is None
        # Free slots of the card are gone from the list, the other card is untouched.
        assert {i for i in harness.conn.devices if i.startswith(card)} == {slot_id}
        assert all(s.content is None for s in registry.snapshot())

        # The card comes back: the recovery programs the slot and it is Healthy again.
        fabric.plug(card)
        await kubelet.wait_for(lambda: harness.conn.devices[slot_id].health == HEALTHY, 5.0)
        assert state(registry, slot_id).content == Content(wanted.name, wanted.accelerator_id)
        assert len(harness.conn.devices) == 8


async def test_recovery_retries_when_it_fails_itself(sock_dir: Path, bitstreams: Bitstreams, pods: NodePods) -> None:
    """Two failures in a row: the recovery retries with backoff; nothing is left running afterwards."""
    wanted = bitstreams.accel_a
    async with AgentHarness.running(
        sock_dir, catalog=bitstreams.catalog, pods=pods, sim_cards=1, sim_slots_per_card=1
    ) as harness:
        fabric, kubelet = harness.fabric, harness.kubelet
        fabric.fail_next_program("simcard0", "slot0", "first failure")
        with fabric_log(fabric) as log:

            def fail_the_recovery_once(change: FabricChange) -> None:
                if change.loaded is None and len(log.programs) == 2:
                    log.hooks.clear()
                    fabric.fail_next_program("simcard0", "slot0", "second failure")

            log.hooks.append(fail_the_recovery_once)
            with pytest.raises(grpc.aio.AioRpcError):
                await kubelet.admit(NS, "unlucky", "main", RESOURCE_NAME, 1, wants(wanted.name))
            await log.wait_for(lambda: fabric.slots()[0].loaded == wanted.accelerator_id)
            assert log.programs == [ONLY] * 3
        await kubelet.wait_for(lambda: harness.conn.devices[ONLY].health == HEALTHY, 5.0)
        recoveries = [t for t in asyncio.all_tasks() if t.get_name().startswith("recover slot")]
        assert all(t.done() for t in recoveries)


async def test_bad_file_for_a_partly_loaded_container_records_no_hit(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    """One slot already holds the bitstream, the other needs it: a tampered file rejects the whole start."""
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        registry, kubelet = harness.agent.registry, harness.kubelet
        first = await kubelet.admit(NS, "first", "main", RESOURCE_NAME, 1, wants(bitstreams.accel_a.name))
        (loaded,) = first.device_ids
        kubelet.delete_pod(NS, "first")
        await harness.agent.reconfigurer.reconcile()
        tamper(bitstreams)
        before = observable(registry)
        hits = harness.agent.metrics.registry.get_sample_value("fpga_slot_cache_lookups_total", {"result": "hit"})

        with pytest.raises(grpc.aio.AioRpcError) as info:
            await kubelet.admit(NS, "pair", "main", RESOURCE_NAME, 2, wants(bitstreams.accel_a.name))
        assert rpc_error(info.value).code() is code_of(BitstreamHashError)
        assert loaded in held_by(kubelet, "pair", "main")  # the loaded slot was one of the two
        assert observable(registry) == before
        assert (
            harness.agent.metrics.registry.get_sample_value("fpga_slot_cache_lookups_total", {"result": "hit"}) == hits
        )
        assert [e.reason for e in events_of(pods, "pair")] == ["FpgaBitstreamRejected"]

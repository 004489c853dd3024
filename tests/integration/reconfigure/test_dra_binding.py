"""Program before bind on the agent's own slots (the real Reconfigurer on simulated cards): a claim allocated
with binding conditions is programmed at once and its verdict written; prepare then finds the slots ready and
writes the same data; a failure writes the failure condition, taints the slots and tells the pod."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agent._proto.dra.v1 import api_pb2 as v1
from agent.dra.binding import (
    BOUND_CONDITION,
    FAILED_CONDITION,
    FAILED_TAINT,
    AllocationProgrammer,
    FailedSlots,
    parse_allocation,
)
from agent.dra.cdi import CdiSpecs
from agent.dra.claimprep import ClaimPreparation
from agent.dra.devicestatus import ContentTracker, ReportingPreparer
from agent.dra.mode import slice_devices
from agent.dra.service import ClaimRef, DraCore
from agent.errors import KubeError
from agent.kube.claims import DeviceStatus
from agent.kube.resourceslices import DeviceTaint
from tests.fakes import AgentHarness, Catalog, FakeClaims, NodePods
from tests.integration.reconfigure.support import NS, Bitstreams, fabric_log, slot, state

POOL = "node-a"


class Writer:
    """The claims' status as the API server would keep it: our entries by (claim, device), the last apply wins."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], DeviceStatus] = {}
        self.refuse: str = ""

    def apply(self, namespace: str, name: str, uid: str, entries: Sequence[DeviceStatus]) -> None:
        if self.refuse:
            raise KubeError(self.refuse)
        for entry in entries:
            self.entries[(name, entry.device)] = entry


class Node:
    def __init__(self, harness: AgentHarness, root: Path, catalog: Catalog, pods: NodePods) -> None:
        self.harness, self.root, self.catalog, self.pods = harness, root, catalog, pods
        self.claims = FakeClaims()
        self.writer = Writer()
        self.changes = 0
        self.make()

    def make(self) -> None:
        """The agent's DRA parts, as after a (re)start."""
        agent = self.harness.agent
        self.preparation = ClaimPreparation(
            claims=self.claims,
            registry=agent.registry,
            reconfigurer=agent.reconfigurer,
            pods=self.pods,
            cdi=CdiSpecs(self.root / "cdi"),
            node=POOL,
            state_file=self.root / "state" / "claims.json",
            timeout_s=10.0,
        )
        self.tracker = ContentTracker(agent.registry, lambda name: self.catalog.resolve(name).sha256)
        self.preparer = ReportingPreparer(self.preparation, self.tracker, self.writer, POOL)
        self.core = DraCore(self.preparer)
        self.failed = FailedSlots(self._changed, taint_s=60.0)
        self.programmer = AllocationProgrammer(
            node=POOL,
            preparation=self.preparation,
            tracker=self.tracker,
            writer=self.writer,
            exclusive=self.core.exclusive,
            failed=self.failed,
            events=self.pods,
            timeout_s=10.0,
        )

    def _changed(self) -> None:
        self.changes += 1

    def allocate(self, name: str, device: str, bitstream: str, pod: str = "train") -> dict[str, Any]:
        """A claim the scheduler allocated with our binding conditions, reserved for ``pod`` (not bound yet)."""
        self.claims.put(NS, name, [("fpga", device)], pool=POOL, configs=(((), {"bitstream": bitstream}),), pods=(pod,))
        raw = self.claims.claims[(NS, name)]
        for result in raw["status"]["allocation"]["devices"]["results"]:
            result["bindingConditions"] = [BOUND_CONDITION]
            result["bindingFailureConditions"] = [FAILED_CONDITION]
        return raw

    def verdict(self, raw: dict[str, Any]) -> None:
        """The claim's status as the API server holds it after our apply (what a watch event then carries)."""
        raw["status"]["devices"] = [
            {
                "driver": "fpga.example.com",
                "pool": e.pool,
                "device": e.device,
                "conditions": [{"type": c.type, "status": "True" if c.status else "False"} for c in e.conditions],
            }
            for (claim, _), e in self.writer.entries.items()
            if claim == raw["metadata"]["name"]
        ]

    async def offer(self, raw: dict[str, Any]) -> None:
        self.programmer.offer(self.programmer.parse(raw))
        async with asyncio.timeout(10):  # once every claim offered so far is handled
            await asyncio.gather(*self.programmer._tasks, return_exceptions=True)

    def ref(self, name: str) -> ClaimRef:
        return ClaimRef(NS, self.claims.uid(NS, name), name)


@pytest.fixture
async def node(sock_dir: Path, bitstreams: Bitstreams, pods: NodePods) -> AsyncIterator[Node]:
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        node = Node(harness, sock_dir, bitstreams.catalog, pods)
        try:
            yield node
        finally:
            with contextlib.suppress(Exception):
                await node.programmer.close()


def data(node: Node, claim: str, device: str) -> dict[str, Any]:
    return dict(node.writer.entries[(claim, device)].data)


async def test_an_allocated_claim_is_programmed_before_bind_and_prepare_finds_it_ready(
    node: Node, bitstreams: Bitstreams
) -> None:
    target = slot(0, 1)
    raw = node.allocate("fpga", target, bitstreams.accel_a.name)
    with fabric_log(node.harness.fabric) as log:
        await node.offer(raw)
        assert {change.slot for change in log.programming()} == {target}
    entry = node.writer.entries[("fpga", target)]
    assert [(c.type, c.status, c.reason) for c in entry.conditions] == [(BOUND_CONDITION, True, "Programmed")]
    written = data(node, "fpga", target)
    assert written["bitstream"] == bitstreams.accel_a.name
    assert written["acceleratorId"] == bitstreams.accel_a.accelerator_id
    assert written["sha256"] == node.catalog.resolve(bitstreams.accel_a.name).sha256
    assert written["cacheHit"] is False
    assert written["programmedAt"].endswith("Z")
    assert node.preparation.held_slots() == set()  # nothing is held before the pod is bound

    node.pods.add(NS, "train", {"main": 0})  # bound: the kubelet prepares
    with fabric_log(node.harness.fabric) as log:
        answers = await node.core.prepare([node.ref("fpga")], v1)  # type: ignore[list-item]
        assert log.programming() == []
    assert [(c.devices[0].device_name, c.error) for c in answers.claims.values()] == [(target, "")]
    assert node.preparation.held_slots() == {target}
    assert data(node, "fpga", target) == written  # prepare writes what the slot got at allocation


async def test_prepare_writes_what_the_slot_holds_after_it_when_that_is_not_what_allocation_programmed(
    node: Node, bitstreams: Bitstreams
) -> None:
    """The data is never the allocation's when prepare put something else in the slot (a request prepare read
    otherwise, as a bitstream from the pod's annotation may be): not the earlier bitstream, not a cache hit."""
    target = slot(0, 1)
    raw = node.allocate("fpga", target, bitstreams.accel_a.name)
    await node.offer(raw)
    assert data(node, "fpga", target)["bitstream"] == bitstreams.accel_a.name
    raw["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]["bitstream"] = bitstreams.accel_b.name
    node.pods.add(NS, "train", {"main": 0})
    await node.core.prepare([node.ref("fpga")], v1)  # type: ignore[list-item]
    written = data(node, "fpga", target)
    assert (written["bitstream"], written["cacheHit"]) == (bitstreams.accel_b.name, False)
    assert written["acceleratorId"] == bitstreams.accel_b.accelerator_id


async def test_a_claim_with_a_verdict_is_not_programmed_again_after_a_restart(
    node: Node, bitstreams: Bitstreams
) -> None:
    raw = node.allocate("fpga", slot(0, 2), bitstreams.accel_b.name)
    await node.offer(raw)
    node.verdict(raw)
    await node.offer(raw)  # the watch sends it again (MODIFIED by our own write)
    node.make()  # a restart: nothing remembered but the claim's status
    assert parse_allocation(raw, POOL) is not None
    assert not parse_allocation(raw, POOL).waiting  # type: ignore[union-attr]
    with fabric_log(node.harness.fabric) as log:
        await node.offer(raw)
        assert log.programming() == []


@pytest.mark.parametrize(
    ("bitstream", "reason", "message"),
    [
        pytest.param("no-such-bitstream", "UnknownBitstream", "no-such-bitstream", id="unknown"),
        pytest.param("foreign", "PlatformMismatch", "platform", id="other-platform"),
    ],
)
async def test_a_failed_programming_fails_the_binding_taints_the_slot_and_tells_the_pod(
    node: Node, bitstream: str, reason: str, message: str
) -> None:
    target = slot(1, 0)
    raw = node.allocate("bad", target, bitstream, pod="infer")
    await node.offer(raw)
    (condition,) = node.writer.entries[("bad", target)].conditions
    assert (condition.type, condition.status, condition.reason) == (FAILED_CONDITION, True, reason)
    assert message in condition.message
    assert node.failed.tainted() == {target}
    assert node.changes == 1  # the slice is published again, with the taint
    devices = {
        d.name: d.taints for d in slice_devices(node.harness.agent.registry.snapshot(), failed=node.failed.tainted())
    }
    assert DeviceTaint(FAILED_TAINT) in devices[target]
    (event,) = [e for e in node.pods.events if e.reason == "FpgaProgrammingFailed"]
    assert (event.namespace, event.pod, event.type) == (NS, "infer", "Warning")
    assert target in event.message
    assert "placed again" in event.message
    assert state(node.harness.agent.registry, target).holder is None  # no slot held by the failed claim
    assert node.preparation.held_slots() == set()


async def test_a_claim_allocated_again_after_a_failure_is_programmed_on_its_new_slot(
    node: Node, bitstreams: Bitstreams
) -> None:
    first, second = slot(1, 0), slot(1, 1)
    node.harness.fabric.fail_next_program("simcard1", "slot0", "injected: read-back mismatch")
    raw = node.allocate("fpga", first, bitstreams.accel_a.name)
    raw["status"]["allocation"]["allocationTimestamp"] = "2026-12-06T05:00:00Z"
    await node.offer(raw)
    (failed,) = node.writer.entries[("fpga", first)].conditions
    assert (failed.type, failed.reason) == (FAILED_CONDITION, "ProgrammingFailed")
    assert "read-back mismatch" in failed.message
    # The scheduler gives the allocation back and allocates the same claim (same UID) on an untainted slot.
    result = raw["status"]["allocation"]["devices"]["results"][0]
    result["device"] = second
    raw["status"]["allocation"]["allocationTimestamp"] = "2026-12-06T05:00:07Z"
    await node.offer(raw)
    (ready,) = node.writer.entries[("fpga", second)].conditions
    assert (ready.type, ready.status) == (BOUND_CONDITION, True)
    assert state(node.harness.agent.registry, second).bitstream == bitstreams.accel_a.name


async def test_a_taint_is_lifted_when_its_time_is_up() -> None:
    published: list[frozenset[str]] = []
    lifted = asyncio.Event()

    def republish() -> None:
        published.append(failed.tainted())
        if len(published) == 2:
            lifted.set()

    failed = FailedSlots(republish, taint_s=0.05)
    task = asyncio.create_task(failed.run())
    try:
        failed.mark([slot(0, 0)])
        async with asyncio.timeout(5):
            await lifted.wait()
        assert published == [frozenset({slot(0, 0)}), frozenset()]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_without_binding_conditions_prepare_still_writes_what_the_slot_holds(
    node: Node, bitstreams: Bitstreams
) -> None:
    target = slot(0, 3)
    node.pods.add(NS, "train", {"main": 0})
    node.claims.put(
        NS, "fpga", [("fpga", target)], pool=POOL, configs=(((), {"bitstream": "accel-c.v2"}),), pods=("train",)
    )
    await node.preparer.prepare(node.ref("fpga"))
    entry = node.writer.entries[("fpga", target)]
    assert entry.conditions == ()
    assert (entry.data["bitstream"], entry.data["cacheHit"]) == ("accel-c.v2", False)
    node.claims.put(NS, "again", [("fpga", target)], pool=POOL, configs=(((), {"bitstream": "accel-c.v2"}),))
    await node.preparer.unprepare(node.ref("fpga"))
    await node.preparer.prepare(node.ref("again"))
    assert node.writer.entries[("again", target)].data["cacheHit"] is True


async def test_a_refused_status_write_does_not_fail_prepare(node: Node) -> None:
    node.writer.refuse = "forbidden: resourceclaims/driver"
    node.claims.put(NS, "fpga", [("fpga", slot(0, 0))], pool=POOL, configs=(((), {"bitstream": "accel-a"}),))
    assert [d.device for d in await node.preparer.prepare(node.ref("fpga"))] == [slot(0, 0)]

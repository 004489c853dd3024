"""NodePrepareResources on the agent's own slots: a claim's slots programmed with its bitstream (the real
Reconfigurer on simulated cards), its CDI spec written, the claim recorded; release undoes all but the content."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from agent.dra.cards import OfferedCard
from agent.dra.claimprep import ClaimPreparation
from agent.dra.service import ClaimRef, PreparedDevice
from agent.errors import CatalogError, KubeError, PodLookupError, ProgrammingError
from agent.slots.registry import SlotState
from tests.fakes import JSON, AgentHarness, CdiReader, FakeClaims, NodePods
from tests.integration.reconfigure.support import NS, Bitstreams, fabric_log, slot, state

POOL = "node-a"


class Node:
    def __init__(self, harness: AgentHarness, root: Path, claims: FakeClaims, pods: NodePods) -> None:
        self.harness, self.claims, self.pods = harness, claims, pods
        self.cdi = CdiReader(root / "cdi")
        self.state_file = root / "state" / "claims.json"
        self.preparation = self.make()

    def make(self) -> ClaimPreparation:
        agent = self.harness.agent
        return ClaimPreparation(
            claims=self.claims,
            registry=agent.registry,
            reconfigurer=agent.reconfigurer,
            pods=self.pods,
            cdi=self.cdi,
            node=POOL,
            state_file=self.state_file,
            timeout_s=10.0,
            offered_cards=self.cards,
        )

    def cards(self, states: Sequence[SlotState]) -> Sequence[OfferedCard]:
        """The cards offered whole: none (tests/integration/reconfigure/test_dra_cards.py offers them)."""
        return ()

    async def prepare(self, ref: ClaimRef) -> list[PreparedDevice]:
        return list(await self.preparation.prepare(ref))

    async def unprepare(self, ref: ClaimRef) -> None:
        await self.preparation.unprepare(ref)


@pytest.fixture
async def node(sock_dir: Path, bitstreams: Bitstreams, pods: NodePods) -> AsyncIterator[Node]:
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        yield Node(harness, sock_dir, FakeClaims(), pods)


def ref_of(node: Node, name: str) -> ClaimRef:
    return ClaimRef(NS, node.claims.uid(NS, name), name)


async def test_a_claims_slot_is_programmed_with_its_configured_bitstream_and_given_a_cdi_spec(
    node: Node, bitstreams: Bitstreams
) -> None:
    wanted = bitstreams.accel_a
    target = slot(0, 1)
    node.pods.add(NS, "train", {"main": 0})
    node.claims.put(
        NS, "fpga", [("fpga", target)], pool=POOL, configs=(((), {"bitstream": wanted.name}),), pods=("train",)
    )
    ref = ref_of(node, "fpga")
    with fabric_log(node.harness.fabric) as log:
        (device,) = await node.prepare(ref)
        assert [change.slot for change in log.programming()] == [target, target]
    assert device == PreparedDevice(POOL, target, (f"fpga.example.com/slot={ref.uid}-{target}",), ("fpga",))
    got = state(node.harness.agent.registry, target)
    assert got.bitstream == wanted.name
    assert got.holder is not None
    assert (got.holder.namespace, got.holder.pod) == (NS, "train")
    spec = node.cdi.read(ref.uid)
    assert spec is not None
    assert spec["devices"][0]["name"] == f"{ref.uid}-{target}"  # type: ignore[index]
    assert [e.reason for e in node.pods.events] == ["FpgaSlotProgrammed"]
    assert node.preparation.held_slots() == {target}
    with fabric_log(node.harness.fabric) as log:
        assert [d.device for d in await node.prepare(ref)] == [target]  # the kubelet asks again: nothing programmed
        assert log.programming() == []
    recorded = json.loads(node.state_file.read_text())["claims"]
    assert [(c["uid"], c["slots"]) for c in recorded] == [(ref.uid, [target])]

    await node.unprepare(ref)
    assert node.cdi.read(ref.uid) is None
    assert state(node.harness.agent.registry, target).holder is None
    assert state(node.harness.agent.registry, target).bitstream == wanted.name  # the content stays: the cache
    assert json.loads(node.state_file.read_text())["claims"] == []
    await node.unprepare(ref)  # released twice: still fine


async def test_without_a_configured_bitstream_the_pods_annotation_is_used(node: Node, bitstreams: Bitstreams) -> None:
    node.pods.add(NS, "infer", {"main": 0}, {"example.com/fpga-bitstream": bitstreams.accel_b.name})
    node.claims.put(NS, "fpga", [("fpga", slot(1, 0)), ("fpga", slot(1, 1))], pool=POOL, pods=("infer",))
    await node.prepare(ref_of(node, "fpga"))
    assert {state(node.harness.agent.registry, slot(1, r)).bitstream for r in (0, 1)} == {bitstreams.accel_b.name}


async def test_the_record_survives_a_restart_so_release_needs_no_claim(node: Node, bitstreams: Bitstreams) -> None:
    node.claims.put(NS, "fpga", [("fpga", slot(0, 0))], pool=POOL, configs=(((), {"bitstream": "accel-a"}),))
    ref = ref_of(node, "fpga")
    await node.prepare(ref)
    del node.claims.claims[(NS, "fpga")]  # the claim is deleted before the kubelet releases it
    restarted = node.make()
    assert restarted.held_slots() == {slot(0, 0)}
    await restarted.unprepare(ref)
    assert restarted.held_slots() == set()
    assert node.cdi.claims() == set()


@pytest.mark.parametrize(
    ("devices", "configs", "error", "message"),
    [
        ([("fpga", slot(0, 0))], (((), {"bitstream": "no-such-bitstream"}),), CatalogError, "no-such-bitstream"),
        ([("fpga", slot(0, 0))], (((), {"bitstream": "foreign"}),), CatalogError, "platform"),
        ([("fpga", slot(0, 0))], (((), {"bitstream": 7}),), CatalogError, "must be a bitstream name"),
        ([("fpga", "card9-port9")], (), PodLookupError, "is not a slot or card of this node"),
    ],
)
async def test_a_claim_that_cannot_be_prepared_changes_nothing(
    node: Node, devices: list[tuple[str, str]], configs: object, error: type[Exception], message: str
) -> None:
    node.claims.put(NS, "bad", devices, pool=POOL, configs=configs)  # type: ignore[arg-type]
    before = {s.slot.id: (s.bitstream, s.holder) for s in node.harness.agent.registry.snapshot()}
    with pytest.raises(error, match=message):
        await node.prepare(ref_of(node, "bad"))
    assert {s.slot.id: (s.bitstream, s.holder) for s in node.harness.agent.registry.snapshot()} == before
    assert node.cdi.claims() == set()
    assert node.preparation.held_slots() == set()


@pytest.mark.parametrize(
    ("break_claim", "message"),
    [
        (lambda claim: claim.pop("status"), "is not allocated"),
        (lambda claim: claim["status"]["allocation"]["devices"]["results"][0].pop("device"), "lacks request, pool"),
        (lambda claim: claim["status"]["allocation"]["devices"]["config"][0].update(source="X"), "not FromClass or"),
    ],
    ids=["not-allocated", "result-without-device", "config-of-unknown-source"],
)
async def test_a_claim_the_reader_cannot_use_fails_prepare_as_in_production(
    node: Node, break_claim: Callable[[JSON], object], message: str
) -> None:
    claim = node.claims.put(NS, "odd", [("fpga", slot(0, 0))], pool=POOL, configs=(((), {"bitstream": "accel-a"}),))
    break_claim(claim)
    node.claims.put_json(claim)
    with pytest.raises(KubeError, match=message):
        await node.prepare(ref_of(node, "odd"))
    assert node.preparation.held_slots() == set()


async def test_claims_of_other_nodes_replaced_claims_and_a_slot_prepared_twice_are_refused(node: Node) -> None:
    node.claims.put(NS, "elsewhere", [("fpga", slot(0, 0))], pool="node-b")
    with pytest.raises(PodLookupError, match="none of its devices is in this node's pool"):
        await node.prepare(ref_of(node, "elsewhere"))
    node.claims.put(NS, "first", [("fpga", slot(0, 0))], pool=POOL)
    await node.prepare(ref_of(node, "first"))
    node.claims.put(NS, "second", [("fpga", slot(0, 0))], pool=POOL)
    with pytest.raises(ProgrammingError, match=r"already prepared for claim .*/first"):
        await node.prepare(ref_of(node, "second"))
    stale = ref_of(node, "first")
    node.claims.put(NS, "first", [("fpga", slot(0, 1))], pool=POOL)  # deleted and made again: a new UID
    with pytest.raises(KubeError, match="was replaced"):
        await node.prepare(stale)


async def test_at_start_the_recorded_claims_hold_their_slots_and_nothing_else_does(node: Node) -> None:
    """The slot checkpoint and the record are written apart: after a stop between the two they disagree."""
    registry = node.harness.agent.registry
    node.pods.add(NS, "train", {"main": 0})
    node.claims.put(NS, "fpga", [("fpga", slot(0, 0))], pool=POOL, pods=("train",))
    await node.prepare(ref_of(node, "fpga"))
    held = state(registry, slot(0, 0)).holder
    assert held is not None
    assert (held.namespace, held.pod, held.container) == (NS, "train", "claim/fpga")
    registry.release([slot(0, 0)])  # the checkpoint lost the claim's holder...
    registry.set_holder([slot(0, 1)], NS, "gone", "claim/released")  # ...and kept a released claim's
    registry.set_holder([slot(0, 2)], NS, "web", "main")  # ...or a device-plugin container's, from before
    restarted = node.make()
    restarted.restore_holders()
    got = state(registry, slot(0, 0)).holder
    assert got is not None
    assert (got.namespace, got.pod, got.container) == (NS, "train", "claim/fpga")
    assert {s.slot.id for s in registry.snapshot() if s.holder is not None} == {slot(0, 0)}
    version = registry.version
    restarted.restore_holders()  # holders that agree are left alone (setting one counts as a use)
    assert registry.version == version


async def test_one_bad_bitstream_of_a_claim_leaves_even_its_good_slots_untouched(
    node: Node, bitstreams: Bitstreams
) -> None:
    configs = (((("a",)), {"bitstream": bitstreams.accel_a.name}), ((("b",)), {"bitstream": "no-such-bitstream"}))
    node.claims.put(NS, "mixed", [("a", slot(0, 0)), ("b", slot(0, 1))], pool=POOL, configs=configs)
    with fabric_log(node.harness.fabric) as log, pytest.raises(CatalogError, match="no-such-bitstream"):
        await node.prepare(ref_of(node, "mixed"))
    assert log.programming() == []


async def test_a_bitstream_neither_in_the_catalog_nor_declared_is_refused_as_final_with_an_event_and_no_state(
    node: Node,
) -> None:
    node.pods.add(NS, "lost", {"main": 0})
    node.claims.put(
        NS, "lost", [("fpga", slot(0, 0))], pool=POOL, configs=(((), {"bitstream": "nowhere"}),), pods=("lost",)
    )
    ref = ref_of(node, "lost")
    for _attempt in range(2):  # the kubelet retries: each attempt is refused the same way and keeps nothing
        with pytest.raises(CatalogError) as refused:
            await node.prepare(ref)
        message = str(refused.value)
        assert "'nowhere' is not in the catalog" in message
        assert "no retry can prepare the claim until the bitstream is added" in message
        assert "delete the pod" in message
        assert "\n" not in message
        assert node.cdi.claims() == set()
        assert node.preparation.held_slots() == set()
        assert state(node.harness.agent.registry, slot(0, 0)).holder is None
        assert not node.state_file.exists() or json.loads(node.state_file.read_text())["claims"] == []
    events = [e for e in node.pods.events if e.reason == "FpgaBitstreamRejected"]
    assert len(events) == 2
    assert all("nowhere" in e.message for e in events)

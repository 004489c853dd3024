"""Whole cards in DRA mode: a claim for a card gets every slot of it, programmed with a whole-card image (the real
Reconfigurer on simulated cards); the wrong kind of image is refused either way with nothing changed; after the
card is released, the next slot claim programs its slot from the restored base layout."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from agent.dra.cards import CARD_TAINT, OfferedCard, offered_cards
from agent.dra.mode import slice_devices
from agent.dra.service import ClaimRef
from agent.errors import PlatformMismatch, ProgrammingError
from agent.kube.resourceslices import DeviceTaint
from agent.simfpga.fabric import PLATFORM
from agent.slots.registry import SlotState
from tests.fakes import AgentHarness, FakeClaims, NodePods
from tests.integration.reconfigure.support import NS, Bitstreams, fabric_log, state
from tests.integration.reconfigure.test_dra_claims import POOL, Node

CARD_IMAGE = "card-image"
CARD_ACCELERATOR = "sim-card-image"
CARD = "card-simcard0"


@pytest.fixture
async def node(sock_dir: Path, bitstreams: Bitstreams, pods: NodePods) -> AsyncIterator[Node]:
    source = sock_dir / "sources" / "card.bin"
    source.write_bytes(b"a whole-card image\n" * 64)
    bitstreams.catalog.add(source, CARD_IMAGE, platform=PLATFORM, accelerator_id=CARD_ACCELERATOR, scope="card")
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        yield CardNode(harness, sock_dir, FakeClaims(), pods)


class CardNode(Node):
    """The node's claim preparation with its cards offered whole (as ``--whole-cards`` wires it)."""

    def cards(self, states: Sequence[SlotState]) -> Sequence[OfferedCard]:
        return offered_cards(states, self.harness.agent.reconfigurer.loader.can_program_card)


def claim(node: Node, name: str, device: str, bitstream: str) -> ClaimRef:
    configs = (((), {"bitstream": bitstream}),)
    node.claims.put(NS, name, [("fpga", device)], pool=POOL, configs=configs, pods=("train",))
    return ClaimRef(NS, node.claims.uid(NS, name), name)


def card_slots(node: Node) -> list[str]:
    return sorted(s.slot.id for s in node.harness.agent.registry.snapshot() if s.slot.card == "simcard0")


def published(node: Node) -> dict[str, tuple[str, tuple[DeviceTaint, ...]]]:
    states = node.harness.agent.registry.snapshot()
    cards = node.cards(states)
    return {d.name: (str(d.attributes["bitstream"]), d.taints) for d in slice_devices(states, cards=cards)}


async def test_a_card_claim_gets_every_slot_of_the_card_programmed_with_the_whole_card_image(node: Node) -> None:
    node.pods.add(NS, "train", {"main": 0})
    slots = card_slots(node)
    assert len(slots) >= 2
    ref = claim(node, "big", CARD, CARD_IMAGE)
    with fabric_log(node.harness.fabric) as log:
        (device,) = await node.prepare(ref)
        assert log.programming(), "the card was not programmed"
    assert device.device == CARD
    assert device.cdi_ids == tuple(f"fpga.example.com/slot={ref.uid}-{s}" for s in slots)
    fabric = {f"{i.card}-{i.region}": i for i in node.harness.fabric.slots()}
    assert all(fabric[s].whole_card and fabric[s].loaded == CARD_ACCELERATOR for s in slots)
    registry = node.harness.agent.registry
    assert {state(registry, s).bitstream for s in slots} == {CARD_IMAGE}
    assert all((h := state(registry, s).holder) is not None and h.pod == "train" for s in slots)
    spec = node.cdi.read(ref.uid)
    assert spec is not None
    paths = [n["hostPath"] for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]]  # type: ignore[attr-defined]
    assert paths == [fabric[s].device_path for s in slots]
    devices = published(node)
    assert devices[CARD] == (CARD_IMAGE, (DeviceTaint(CARD_TAINT),))
    assert all(devices[s][0] == "" for s in slots)  # the slots hold no image of their own
    assert [e.reason for e in node.pods.events] == ["FpgaCardProgrammed"]

    with fabric_log(node.harness.fabric) as log:
        assert [d.device for d in await node.prepare(ref)] == [CARD]  # the kubelet asks again: nothing programmed
        assert log.programming() == []
    await node.unprepare(ref)
    assert all(state(registry, s).holder is None for s in slots)

    again = claim(node, "again", CARD, CARD_IMAGE)  # the card still holds the image: a hit
    with fabric_log(node.harness.fabric) as log:
        await node.prepare(again)
        assert log.programming() == []
    assert node.pods.events[-1].reason == "FpgaSlotCacheHit"
    await node.unprepare(again)


async def test_after_a_card_is_released_a_slot_claim_programs_its_slot_from_the_base_layout(
    node: Node, bitstreams: Bitstreams
) -> None:
    node.pods.add(NS, "train", {"main": 0})
    first, second = card_slots(node)[:2]
    ref = claim(node, "big", CARD, CARD_IMAGE)
    await node.prepare(ref)
    await node.unprepare(ref)
    small = claim(node, "small", first, bitstreams.accel_a.name)
    await node.prepare(small)
    fabric = {f"{i.card}-{i.region}": i for i in node.harness.fabric.slots()}
    assert (fabric[first].loaded, fabric[first].whole_card) == (bitstreams.accel_a.accelerator_id, False)
    assert (fabric[second].loaded, fabric[second].whole_card) == (None, False)
    registry = node.harness.agent.registry
    assert state(registry, first).bitstream == bitstreams.accel_a.name
    assert state(registry, second).bitstream is None  # its part of the card's image is gone
    devices = published(node)
    assert devices[first][0] == bitstreams.accel_a.name
    assert devices[second][0] == ""
    assert devices[CARD][0] == ""


@pytest.mark.parametrize(
    ("device", "image", "message"),
    [
        (CARD, "accel-a", "is an image for one slot, not for a whole card such as card simcard0"),
        ("simcard0-slot0", CARD_IMAGE, "is an image for a whole card, not for a slot such as slot simcard0-slot0"),
    ],
    ids=["slot-image-for-a-card", "card-image-for-a-slot"],
)
async def test_the_wrong_kind_of_image_is_refused_and_changes_nothing(
    node: Node, device: str, image: str, message: str
) -> None:
    node.pods.add(NS, "train", {"main": 0})
    before = [(i.loaded, i.whole_card) for i in node.harness.fabric.slots()]
    ref = claim(node, "wrong", device, image)
    with fabric_log(node.harness.fabric) as log, pytest.raises(PlatformMismatch, match=message):
        await node.prepare(ref)
    assert log.programming() == []
    assert [(i.loaded, i.whole_card) for i in node.harness.fabric.slots()] == before
    assert node.harness.agent.registry.holders() == {}
    assert node.cdi.read(ref.uid) is None
    assert not node.state_file.exists() or json.loads(node.state_file.read_text())["claims"] == []
    assert [e.reason for e in node.pods.events] == ["FpgaBitstreamRejected"]


async def test_a_card_one_of_whose_slots_another_claim_holds_is_refused(node: Node, bitstreams: Bitstreams) -> None:
    node.pods.add(NS, "train", {"main": 0})
    small = claim(node, "small", "simcard0-slot1", bitstreams.accel_a.name)
    await node.prepare(small)
    big = claim(node, "big", CARD, CARD_IMAGE)
    with pytest.raises(ProgrammingError, match="slot simcard0-slot1 is already prepared for claim default/small"):
        await node.prepare(big)
    assert state(node.harness.agent.registry, "simcard0-slot1").bitstream == bitstreams.accel_a.name
    assert node.cdi.read(big.uid) is None
